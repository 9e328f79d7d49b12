"""correctness.strategies: the hypothesis strategies for memory-mode tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakes.async_fake import MODES
from pytest_jetmem.correctness import coherence
from pytest_jetmem.correctness import strategies as jst


# -- strategies -------------------------------------------------------------------------------------------------
@given(shape=jst.shapes(min_dims=1, max_dims=3, min_side=1, max_side=9, max_size=100))
def test_shapes_respect_bounds(shape: tuple[int, ...]) -> None:
    assert 1 <= len(shape) <= 3 and all(1 <= s <= 9 for s in shape) and int(np.prod(shape)) <= 100


@given(dtype=jst.dtypes(word_sized=True))
def test_word_sized_dtypes(dtype: np.dtype) -> None:
    assert dtype.itemsize % 4 == 0 and coherence.word_dtype(dtype) == np.uint32


@given(mode=jst.memory_modes(), spec=jst.buffer_specs(modes=["managed"], word_sized=True, max_size=50))
def test_modes_and_specs(mode: str, spec: jst.BufferSpec) -> None:
    assert mode in MODES
    assert spec.mode == "managed" and spec.nbytes == int(np.prod(spec.shape)) * spec.dtype.itemsize
    assert int(np.prod(spec.shape)) <= 50


def test_strategies_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="memory_modes"):
        jst.memory_modes(["gpu"])
    with pytest.raises(ValueError, match="shapes"):
        jst.shapes(min_dims=3, max_dims=2)
    with pytest.raises(ValueError, match="min_len"):
        jst.contiguous_slices(3, min_len=4)
    with pytest.raises(ValueError, match="alignment"):
        jst.offsets(10, alignment=0)


@given(data=st.data(), size=st.integers(0, 100), min_len=st.integers(0, 5))
def test_contiguous_slices_and_offsets(data: st.DataObject, size: int, min_len: int) -> None:
    if min_len <= size:
        sl = data.draw(jst.contiguous_slices(size, min_len))
        assert sl.step is None and 0 <= sl.start <= sl.stop <= size and sl.stop - sl.start >= min_len
    off = data.draw(jst.offsets(size, alignment=4))
    assert off % 4 == 0 and (off < size or size == 0)
    n = data.draw(jst.sizes(max_size=size))
    assert 0 <= n <= size


@given(pattern=jst.fill_patterns(), dtype=jst.dtypes(), shape=jst.shapes(max_dims=2, max_side=9))
def test_fill_patterns_are_deterministic_bit_patterns(
    pattern: jst.FillPattern, dtype: np.dtype, shape: tuple[int, ...]
) -> None:
    a, b = pattern.make(shape, dtype), pattern.make(shape, dtype)
    assert a.shape == shape and a.dtype == dtype
    assert a.tobytes() == b.tobytes()
    if dtype == np.bool_:
        assert set(np.unique(a.view(np.uint8))) <= {0, 1}
    if pattern.kind == "bytes" and dtype != np.bool_:
        assert set(a.tobytes()) <= {pattern.value}
