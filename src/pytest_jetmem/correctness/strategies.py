"""Hypothesis strategies for memory-mode tests: modes, shapes, dtypes, slices and offsets, fill patterns.

They draw plain values (no GPU needed to draw), so a property test reads::

    @pytest.mark.memmode
    @given(dtype=strategies.dtypes(), shape=strategies.shapes(), data=st.data())
    @settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    def test_round_trip(jetmem, dtype, shape, data):
        host = data.draw(strategies.fill_patterns(dtype, shape))
        ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from pytest_jetmem.cuda import modes as registry
from pytest_jetmem.kernels.reference import coherence_pattern

#: Dtypes a buffer may have: numeric and bool, 1 to 16 bytes.
DTYPES: tuple[str, ...] = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "float16",
    "int32",
    "uint32",
    "float32",
    "int64",
    "uint64",
    "float64",
    "complex64",
    "complex128",
)
#: Those whose size is a multiple of 4 bytes: the coherence checks see them as uint32 words.
WORD_DTYPES: tuple[str, ...] = tuple(d for d in DTYPES if np.dtype(d).itemsize % 4 == 0)


def memory_modes(modes: Sequence[str] | None = None) -> st.SearchStrategy[str]:
    """A memory mode name (default: the registry's default modes; shrinks towards the first, ``device``)."""
    names = tuple(modes) if modes is not None else registry.default_names()
    known = registry.names()
    unknown = [m for m in names if m not in known]
    if unknown or not names:
        raise ValueError(f"memory_modes: expected names from {', '.join(known)}, got {names!r}")
    return st.sampled_from(names)


def dtypes(word_sized: bool = False, names: Sequence[str] | None = None) -> st.SearchStrategy[np.dtype]:
    """A numpy dtype from :data:`DTYPES` (``word_sized``: only sizes that are multiples of 4 bytes)."""
    pool = tuple(names) if names is not None else (WORD_DTYPES if word_sized else DTYPES)
    if not pool:
        raise ValueError("dtypes: no dtype to draw from")
    return st.sampled_from([np.dtype(d) for d in pool])


def shapes(
    min_dims: int = 1, max_dims: int = 3, min_side: int = 0, max_side: int = 64, max_size: int = 1 << 16
) -> st.SearchStrategy[tuple[int, ...]]:
    """An array shape of ``min_dims..max_dims`` sides of ``min_side..max_side``, at most ``max_size`` elements."""
    if not 0 <= min_dims <= max_dims or not 0 <= min_side <= max_side or max_size < 0:
        raise ValueError(f"shapes: bad bounds {min_dims=}, {max_dims=}, {min_side=}, {max_side=}, {max_size=}")
    from hypothesis.extra.numpy import array_shapes

    drawn = array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)
    return drawn.filter(lambda s: _size(s) <= max_size)


def sizes(max_size: int = 1 << 14, min_size: int = 0) -> st.SearchStrategy[int]:
    """An element count, small ones favoured, with sizes around powers of two and page boundaries."""
    edges = sorted({e for p in range(1, 21) for e in ((1 << p) - 1, 1 << p, (1 << p) + 1) if min_size <= e <= max_size})
    choices = [st.integers(min_size, min(max_size, max(min_size, 64))), st.integers(min_size, max_size)]
    if edges:
        choices.append(st.sampled_from(edges))
    return st.one_of(choices)


def slices(size: int) -> st.SearchStrategy[slice]:
    """A slice of a sequence of ``size`` (any start, stop and step, negative ones included)."""
    return st.slices(size)


def contiguous_slices(size: int, min_len: int = 0) -> st.SearchStrategy[slice]:
    """A step-1 slice ``slice(start, stop)`` with ``0 <= start <= stop <= size`` and at least ``min_len`` items."""
    if min_len > size:
        raise ValueError(f"contiguous_slices: min_len {min_len} exceeds size {size}")
    return st.integers(0, size - min_len).flatmap(
        lambda start: st.integers(start + min_len, size).map(lambda stop: slice(start, stop))
    )


def offsets(nbytes: int, alignment: int = 1) -> st.SearchStrategy[int]:
    """A byte offset into ``nbytes`` that is a multiple of ``alignment`` (0 included, ``nbytes`` excluded)."""
    if alignment < 1:
        raise ValueError(f"offsets: alignment must be >= 1, got {alignment}")
    last = (nbytes - 1) // alignment if nbytes > 0 else 0
    return st.integers(0, max(last, 0)).map(lambda k: k * alignment)


def seeds() -> st.SearchStrategy[int]:
    """A 32-bit pattern seed."""
    return st.integers(0, 0xFFFFFFFF)


@dataclass(frozen=True)
class FillPattern:
    """A way to fill a buffer: ``kind`` is hash, constant, ramp or bytes; ``value`` its seed or value."""

    kind: str
    value: int

    def make(self, shape: int | Sequence[int], dtype: Any) -> np.ndarray:
        """The host array of ``shape`` and ``dtype`` this pattern fills (defined bit by bit)."""
        dt = np.dtype(dtype)
        shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        nbytes = _size(shp) * dt.itemsize
        if self.kind == "hash":
            words = coherence_pattern((nbytes + 3) // 4, self.value)
            raw = words.view(np.uint8)[:nbytes]
        elif self.kind == "bytes":
            raw = np.full(nbytes, self.value & 0xFF, np.uint8)
        elif self.kind == "ramp":
            raw = (np.arange(nbytes, dtype=np.uint64) + np.uint64(self.value)).astype(np.uint8)
        elif self.kind == "constant":
            raw = np.frombuffer(np.full(_size(shp), self.value & 0xFF, np.uint8).astype(dt).tobytes(), np.uint8)
        else:
            raise ValueError(f"unknown fill pattern kind {self.kind!r}")
        out: np.ndarray = np.frombuffer(raw.tobytes(), dtype=dt).reshape(shp).copy()
        if dt == np.bool_:
            out = out.view(np.uint8) & 1
            out = out.view(np.bool_)
        return out


def fill_patterns() -> st.SearchStrategy[FillPattern]:
    """A :class:`FillPattern` (hash of a seed, constant, ramp, repeated byte such as 0x00 or 0xFF)."""
    return st.one_of(
        st.builds(FillPattern, st.just("hash"), seeds()),
        st.builds(FillPattern, st.just("constant"), st.integers(0, 127)),
        st.builds(FillPattern, st.just("ramp"), st.integers(0, 255)),
        st.builds(FillPattern, st.just("bytes"), st.sampled_from([0x00, 0xFF, 0xA5, 0x5A])),
    )


def fill_arrays(shape: int | Sequence[int], dtype: Any) -> st.SearchStrategy[np.ndarray]:
    """Host data of ``shape`` and ``dtype`` from :func:`fill_patterns` (NaNs and odd bit patterns included)."""
    return fill_patterns().map(lambda p: p.make(shape, dtype))


@dataclass(frozen=True)
class BufferSpec:
    """What to allocate: a memory mode, a shape and a dtype."""

    mode: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return _size(self.shape) * self.dtype.itemsize


def buffer_specs(
    modes: Sequence[str] | None = None, word_sized: bool = False, max_size: int = 1 << 14
) -> st.SearchStrategy[BufferSpec]:
    """A :class:`BufferSpec`: a mode from ``modes``, a shape of at most ``max_size`` elements, a dtype."""
    return st.builds(BufferSpec, memory_modes(modes), shapes(max_size=max_size), dtypes(word_sized=word_sized))


def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


__all__ = [
    "DTYPES",
    "WORD_DTYPES",
    "BufferSpec",
    "FillPattern",
    "buffer_specs",
    "contiguous_slices",
    "dtypes",
    "fill_arrays",
    "fill_patterns",
    "memory_modes",
    "offsets",
    "seeds",
    "shapes",
    "sizes",
    "slices",
]
