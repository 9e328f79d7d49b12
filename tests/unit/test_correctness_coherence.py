"""correctness.coherence without a GPU: the kernels, words and patterns, cpu/gpu touches, round trips.

Only the driver boundary is faked: the ``afake`` fixture (tests/unit/conftest.py) installs an
:class:`fakes.async_fake.AsyncFake`, whose kernels, async memsets and async copies take effect when the host
waits, as on a GPU, so a host read that skips its synchronisation sees stale memory, deterministically.
The probe kernels' CUDA sources are compiled with the real NVRTC here.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import planted
from fakes.async_fake import MODES, AsyncFake, _pattern_at, handle
from fakes.fake_driver import FakeDriver, Launch
from pytest_jetmem.correctness import coherence
from pytest_jetmem.correctness import strategies as jst
from pytest_jetmem.correctness.state_machine import MACHINE_SOURCE
from pytest_jetmem.cuda.compiler import compile_kernel
from pytest_jetmem.cuda.launch import POINTER, parse_signature
from pytest_jetmem.kernels.reference import coherence_pattern

FIXTURE_SETTINGS = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# -- kernels compile with the real NVRTC ------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
@pytest.mark.parametrize(
    ("source", "name"),
    [
        (coherence.probe_source(), "jetmem_probe_u32"),
        (coherence.probe_source(), "jetmem_probe_u8"),
        (MACHINE_SOURCE, "jetmem_machine_add"),
        (MACHINE_SOURCE, "jetmem_machine_compare"),
        (MACHINE_SOURCE, "jetmem_machine_wait"),
    ],
)
def test_kernels_compile_with_nvrtc(source: str, name: str, arch: str, restore_driver_backend: None) -> None:
    try:
        compiled = compile_kernel(source, name, arch)
    except Exception as exc:  # pragma: no cover - depends on the install
        if "NVRTC" in str(exc) and "not found" in str(exc):
            pytest.skip(str(exc))
        raise
    assert compiled.cubin[:4] == b"\x7fELF"
    params = parse_signature(source, name)
    assert params is not None and all(p.kind is not None for p in params)
    assert (params[0].kind == POINTER) == (name != "jetmem_machine_wait")


def test_probe_signatures() -> None:
    for name in ("jetmem_probe_u32", "jetmem_probe_u8"):
        params = parse_signature(coherence.probe_source(), name)
        assert [p.name for p in params or []] == [
            "buf", "start", "step", "count", "expect_seed", "new_seed", "flags", "delay_ns", "result"
        ]  # fmt: skip
        assert [str(p.kind) for p in params or []][1:8] == [
            "uint64", "int64", "uint64", "uint32", "uint32", "int32", "uint64"
        ]  # fmt: skip


# -- words, patterns, messages ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "word"),
    [("float32", "uint32"), ("complex128", "uint32"), ("int64", "uint32"), ("int16", "uint8"), ("bool", "uint8")],
)
def test_word_dtype(dtype: str, word: str) -> None:
    assert coherence.word_dtype(dtype) == np.dtype(word)


@given(n=st.integers(0, 300), sl=st.slices(300), seed=jst.seeds())
def test_pattern_slices_match_reference(n: int, sl: slice, seed: int) -> None:
    full = coherence_pattern(n, seed)
    np.testing.assert_array_equal(coherence.pattern(np.uint32, n, seed, sl), full[sl])
    np.testing.assert_array_equal(coherence.pattern(np.uint8, n, seed, sl), full[sl].astype(np.uint8))


def test_first_mismatch_reports_the_lowest_index_whatever_the_direction() -> None:
    got, want = np.array([1, 9, 3, 9]), np.array([1, 2, 3, 4])
    assert coherence.first_mismatch(got, want) == (2, 1)
    # the same words read with a negative step: positions 0..3 are words 3..0
    assert coherence.first_mismatch(got[::-1], want[::-1], range(3, -1, -1)) == (2, 2)
    assert coherence.first_mismatch(want, want) == (0, None)


def test_describe_mismatch_names_buffer_mode_index_and_values(afake: AsyncFake) -> None:
    with handle("managed") as jm:
        buf = jm.empty((3, 4), np.float64)
        buf.label = "weights"
        msg = coherence.describe_mismatch(buf, "the CPU read what a kernel wrote", 13, 0xDEAD, 0xBEEF, 2, 24)
        assert msg == (
            "'weights' [managed]: the CPU read what a kernel wrote: 2 of 24 words differ; first differing index "
            "(1, 2) (word 13 of the uint32 view): read 0x0000dead, expected 0x0000beef"
        )
        raw = jm.empty(10, np.int16)
        msg = coherence.describe_mismatch(raw, "x", 7, 1, 2)
        assert re.match(r"<Buffer managed int16 \(10,\) ptr=0x[0-9a-f]+> \[managed\]: x: 1 bytes differ; ", msg)
        assert "first differing index 3 (byte 7 of the uint8 view): read 0x01, expected 0x02" in msg


# -- cpu_touch / gpu_touch / cpu_read on every mode ------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@FIXTURE_SETTINGS
@given(
    dtype=jst.dtypes(),
    shape=jst.shapes(max_dims=2, max_side=40),
    sl=st.slices(200),
    seeds=st.tuples(jst.seeds(), jst.seeds()).filter(lambda s: s[0] != s[1]),
)
def test_cpu_and_gpu_touches_round_trip(
    afake: AsyncFake, mode: str, dtype: np.dtype, shape: tuple[int, ...], sl: slice, seeds: tuple[int, int]
) -> None:
    a, b = seeds
    with handle(mode) as jm:
        buf = jm.zeros(shape, dtype)
        n = coherence.word_count(buf)
        rng = range(*sl.indices(n))
        assert coherence.cpu_touch(jm, buf, a, sl) == a
        # what the CPU wrote, a kernel reads; the words outside the slice are still zero
        touched = coherence.gpu_touch(jm, buf, expect_seed=a, new_seed=b, sl=sl)
        assert touched == (0, None, None, None, b)
        assert coherence.cpu_check(jm, buf, b, sl).mismatches == 0
        words = coherence.cpu_read(jm, buf)
        outside = np.ones(n, bool)
        outside[list(rng)] = False
        assert not words[outside].any()
        # a wrong expectation: every word of the slice differs, reported at its lowest index
        wrong = coherence.gpu_touch(jm, buf, expect_seed=a, sl=sl, write=False)
        if len(rng):
            low = min(rng)
            assert wrong.mismatches == np.count_nonzero(
                coherence.pattern(coherence.word_dtype(dtype), n, a, sl)
                != coherence.pattern(coherence.word_dtype(dtype), n, b, sl)
            )
            if wrong.mismatches:
                assert wrong.first_bad is not None and wrong.first_bad >= low
                assert wrong.got == int(words[wrong.first_bad])
                assert wrong.expected == int(
                    _pattern_at(np.array([wrong.first_bad]), a, coherence.word_dtype(dtype))[0]
                )
            host = coherence.cpu_check(jm, buf, a, sl)
            assert (host.mismatches, host.first_bad, host.got) == (wrong.mismatches, wrong.first_bad, wrong.got)
        else:
            assert wrong == (0, None, None, None, None)
        buf.free()


@pytest.mark.parametrize("mode", MODES)
def test_gpu_touch_reports_what_the_kernel_read(afake: AsyncFake, mode: str) -> None:
    with handle(mode) as jm:
        buf = jm.empty(100, np.float32)
        seed = coherence.cpu_touch(jm, buf)
        words = coherence.cpu_read(jm, buf)
        words[[17, 42]] ^= np.uint32(0xFF)
        coherence.cpu_write(jm, buf, words[17:43], slice(17, 43))
        found = coherence.gpu_touch(jm, buf, expect_seed=seed, new_seed=5)
        assert (found.mismatches, found.first_bad, found.seed) == (2, 17, 5)
        assert found.got == int(coherence_pattern(100, seed)[17] ^ 0xFF)
        assert found.expected == int(coherence_pattern(100, seed)[17])
        # gpu_touch without new_seed picks a fresh one and says which
        again = coherence.gpu_touch(jm, buf, expect_seed=5)
        assert again.mismatches == 0 and again.seed not in (None, 5)
        assert coherence.cpu_check(jm, buf, again.seed).mismatches == 0


def test_gpu_touch_needs_something_to_do(afake: AsyncFake) -> None:
    with handle("device") as jm:
        buf = jm.zeros(4, np.uint32)
        with pytest.raises(ValueError, match="needs expect_seed"):
            coherence.gpu_touch(jm, buf, write=False)
        with pytest.raises(ValueError, match="delay_us must be >= 0"):
            coherence.launch_probe(jm, buf, 1, 2, delay_us=-1)


def test_helpers_free_their_counters(afake: AsyncFake) -> None:
    with handle("managed") as jm:
        buf = jm.zeros(10, np.int32)
        coherence.gpu_touch(jm, buf, new_seed=1)
        coherence.check_round_trips(jm, buf, rounds=3)
        assert jm.live_buffers() == [buf]


@pytest.mark.parametrize("mode", MODES)
def test_cpu_touch_uses_the_modes_own_path(afake: AsyncFake, mode: str) -> None:
    with handle(mode) as jm:
        buf = jm.zeros(32, np.uint32)
        before = afake.count("cuMemcpyHtoD"), afake.count("cuStreamSynchronize")
        coherence.cpu_touch(jm, buf, 3, slice(1, 30, 3))  # strided: device mode reads, patches, writes back
        copies = afake.count("cuMemcpyHtoD") - before[0]
        assert afake.count("cuStreamSynchronize") > before[1]  # it waited for the stream first
        assert copies == (1 if mode == "device" else 0)
        words = coherence.cpu_read(jm, buf)
        expect = np.zeros(32, np.uint32)
        expect[1:30:3] = coherence_pattern(32, 3)[1:30:3]
        np.testing.assert_array_equal(words, expect)


# -- round trips and the planted bug ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cpu_touch", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "uint8", "complex128"])
def test_check_round_trips_passes_on_correct_code(afake: AsyncFake, mode: str, cpu_touch: bool, dtype: str) -> None:
    with handle(mode) as jm:
        buf = jm.empty((7, 9), dtype)
        assert coherence.check_round_trips(jm, buf, rounds=4, cpu_touch=cpu_touch) == []
        assert coherence.check_round_trips(jm, jm.empty(0, dtype)) == []


@pytest.mark.parametrize(("bug", "mode"), sorted(planted.PLANTED_BUGS.items()))
def test_check_round_trips_finds_the_planted_bug(
    afake: AsyncFake, monkeypatch: pytest.MonkeyPatch, bug: str, mode: str
) -> None:
    planted.plant(monkeypatch, bug)
    with handle(mode) as jm:
        buf = jm.empty(64, np.float32)
        buf.label = "frame"
        problems = coherence.check_round_trips(jm, buf, rounds=3)
        assert len(problems) == 1
        assert problems[0].startswith(f"'frame' [{mode}]: round 1/3: the CPU read what a kernel wrote: 64 of 64 words")
        assert "first differing index 0 (word 0 of the uint32 view)" in problems[0]
    for other in MODES:
        if other != mode:
            with handle(other) as jm:
                assert coherence.check_round_trips(jm, jm.empty(64, np.float32), rounds=3) == []


def test_check_round_trips_reports_a_kernel_reading_stale_data(afake: AsyncFake) -> None:
    """A CPU write the kernel does not see: words 3..9 turn stale just before the round-2 probe reads them."""
    probe = afake.emulators["jetmem_probe_u32"]  # deferred: queues the probe for the next wait

    def stale_probe(fake: FakeDriver, launch: Launch) -> None:
        probe(fake, launch)
        if (launch.value(1, np.uint64), launch.value(3, np.uint64)) == (0, 10):  # round 2: the first half
            run_probe = afake.pending.pop()
            words = fake.view(launch.ptr(0), np.uint32, 10)
            stale = ~words.copy()

            def stale_then_probe() -> None:
                words[3:10] = stale[3:10]
                run_probe()

            afake.pending.append(stale_then_probe)

    afake.emulators["jetmem_probe_u32"] = stale_probe
    with handle("managed") as jm:
        buf = jm.empty(20, np.uint32)
        problems = coherence.check_round_trips(jm, buf, rounds=2, cpu_touch=True)
    assert len(problems) == 1, problems
    assert problems[0].startswith("<Buffer managed uint32 (20,)")
    assert "round 2/2: a kernel read what the CPU wrote over the first half: 7 of 10 words differ" in problems[0]
    assert "first differing index 3 (word 3 of the uint32 view)" in problems[0]
