"""Coherence checks without a GPU: helpers, marker, strategies, the numpy model and the state machine.

Only the driver boundary is faked. :class:`AsyncFake` extends the shared fake driver so that kernels,
async memsets and async copies take effect when the host waits (a stream or device synchronisation, a
synchronous copy, a free), as on a GPU, and not at launch: a host read that skips its synchronisation
then sees stale memory, deterministically. The probe and machine kernels are emulated on the host from
the numpy reference of the bundled pattern; their CUDA sources are compiled with the real NVRTC here.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import planted
from fakes.fake_driver import FakeDriver, FakeFault, Launch
from pytest_jetmem import open_handle
from pytest_jetmem.correctness import coherence
from pytest_jetmem.correctness import strategies as jst
from pytest_jetmem.correctness.state_machine import MACHINE_SOURCE, CoherenceMachine, CoherenceModel, default_settings
from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.compiler import compile_kernel
from pytest_jetmem.cuda.launch import POINTER, parse_signature
from pytest_jetmem.kernels.reference import coherence_pattern
from pytest_jetmem.plugin.coherence import CoherenceOptions, parse_marker

MODES = ("device", "managed", "zero_copy")
FIXTURE_SETTINGS = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# -- a fake whose GPU work happens when the host waits ---------------------------------------------------------
def _pattern_at(idx: np.ndarray, seed: int, wdt: np.dtype) -> np.ndarray:
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size == 0:
        return np.empty(0, wdt)
    return coherence_pattern(int(idx.max()) + 1, seed)[idx].astype(wdt)


def _emulate_probe(wdt: np.dtype) -> Callable[[FakeDriver, Launch], None]:
    shift = 8 * wdt.itemsize

    def run(fake: FakeDriver, launch: Launch) -> None:
        ptr, start = launch.ptr(0), launch.value(1, np.uint64)
        step, count = launch.value(2, np.int64), launch.value(3, np.uint64)
        expect, new, flags = launch.value(4, np.uint32), launch.value(5, np.uint32), launch.value(6, np.int32)
        idx = start + step * np.arange(count, dtype=np.int64)
        lo, hi = int(idx.min()), int(idx.max()) + 1
        words = fake.view(ptr + lo * wdt.itemsize, wdt, hi - lo)
        if flags & 1:
            seen = words[idx - lo].copy()
            bad = np.flatnonzero(seen != _pattern_at(idx, expect, wdt))
            if bad.size:
                result = fake.view(launch.ptr(8), np.uint64, 2)
                packed = min((int(idx[b]) << shift) | int(seen[b]) for b in bad)
                result[0] += np.uint64(bad.size)
                result[1] = min(int(result[1]), packed)
        if flags & 2:
            words[idx - lo] = _pattern_at(idx, new, wdt)

    return run


def _emulate_add(fake: FakeDriver, launch: Launch) -> None:
    start, step, count = launch.value(1, np.uint64), launch.value(2, np.int64), launch.value(3, np.uint64)
    idx = start + step * np.arange(count, dtype=np.int64)
    words = fake.view(launch.ptr(0), np.uint32, int(idx.max()) + 1)
    words[idx] += np.uint32(launch.value(4, np.uint32))


def _emulate_compare(fake: FakeDriver, launch: Launch) -> None:
    start, step, count = launch.value(2, np.uint64), launch.value(3, np.int64), launch.value(4, np.uint64)
    idx = start + step * np.arange(count, dtype=np.int64)
    seen = fake.view(launch.ptr(0), np.uint32, int(idx.max()) + 1)[idx]
    bad = np.flatnonzero(seen != fake.view(launch.ptr(1), np.uint32, count))
    if bad.size:
        result = fake.view(launch.ptr(5), np.uint64, 2)
        result[0] += np.uint64(bad.size)
        result[1] = min(int(result[1]), (int(bad[0]) << 32) | int(seen[bad[0]]))


EMULATORS: dict[str, Callable[[FakeDriver, Launch], None]] = {
    "jetmem_probe_u32": _emulate_probe(np.dtype(np.uint32)),
    "jetmem_probe_u8": _emulate_probe(np.dtype(np.uint8)),
    "jetmem_machine_add": _emulate_add,
    "jetmem_machine_compare": _emulate_compare,
    "jetmem_machine_wait": lambda fake, launch: None,
}


class AsyncFake(FakeDriver):
    """The shared fake, with kernels and async memsets/copies applied when the host waits for the stream."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.emulators.update(EMULATORS)
        self.emulators = {name: self._deferred(fn) for name, fn in self.emulators.items()}
        self.pending: list[Callable[[], None]] = []
        self.flushes = 0

    def _deferred(self, fn: Callable[[FakeDriver, Launch], None]) -> Callable[[FakeDriver, Launch], None]:
        def later(fake: FakeDriver, launch: Launch) -> None:
            self.pending.append(lambda: fn(self, launch))

        return later

    def flush(self) -> None:
        """Run the queued GPU work, in order (what a synchronisation waits for)."""
        if self.pending:
            self.flushes += 1
        while self.pending:
            work = self.pending.pop(0)
            try:
                work()
            except FakeFault as fault:
                self.sticky = fault.error

    def _later_write(self, ptr: int, nbytes: int, call: Callable[[], None], compute: Callable[[], bytes]) -> None:
        """Validate and apply ``call`` now, then undo it and queue ``compute()`` bytes for the flush."""
        alloc = self._device_allocation(int(ptr), nbytes) if nbytes else None
        if alloc is None:
            call()  # nothing to defer (or the fake refuses it as the driver would)
            return
        before = ctypes.string_at(int(ptr), nbytes)
        call()
        staged = ctypes.string_at(int(ptr), nbytes)
        ctypes.memmove(int(ptr), before, nbytes)
        self.pending.append(lambda: ctypes.memmove(int(ptr), compute() if compute else staged, nbytes))

    # host waits: the queued work runs first
    def stream_synchronize(self, stream: Any) -> None:
        super().stream_synchronize(stream)
        self.flush()

    def ctx_synchronize(self) -> None:
        super().ctx_synchronize()
        self.flush()

    def event_synchronize(self, event: Any) -> None:
        super().event_synchronize(event)
        self.flush()

    def mem_free(self, ptr: int) -> None:
        self.flush()
        super().mem_free(ptr)

    def mem_free_host(self, host_ptr: int) -> None:
        self.flush()
        super().mem_free_host(host_ptr)

    def memcpy_dtoh(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        self.flush()  # to pageable memory: synchronous in both forms
        super().memcpy_dtoh(dst_host, src, nbytes, stream)

    def memcpy_htod(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self.flush()
            super().memcpy_htod(dst, src_host, nbytes)
            return
        self._later_write(dst, nbytes, lambda: super(AsyncFake, self).memcpy_htod(dst, src_host, nbytes, stream), None)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self.flush()
            super().memcpy_dtod(dst, src, nbytes)
            return
        self._later_write(
            dst,
            nbytes,
            lambda: super(AsyncFake, self).memcpy_dtod(dst, src, nbytes, stream),
            lambda: ctypes.string_at(int(src), nbytes),
        )

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self.flush()
            super().memset_d8(ptr, value, nbytes)
            return
        self._later_write(ptr, nbytes, lambda: super(AsyncFake, self).memset_d8(ptr, value, nbytes, stream), None)


@pytest.fixture
def make_fake(restore_driver_backend: None, jetmem_kernel_cache: Any) -> Callable[..., AsyncFake]:
    def make(profile: str = "orin", **options: Any) -> AsyncFake:
        fake = AsyncFake(profile, **options)
        driver.install(fake)
        return fake

    return make


@pytest.fixture
def afake(make_fake: Callable[..., AsyncFake]) -> AsyncFake:
    return make_fake("orin")


@contextlib.contextmanager
def handle(mode: str) -> Iterator[Any]:
    with open_handle(mode) as jm:
        yield jm


def plugin_args() -> list[str]:
    """``-p`` for the coherence plugin unless its entry point already loads it (both would clash)."""
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "pytest_jetmem.plugin.coherence" for ep in eps):
        return []
    return ["-p", "pytest_jetmem.plugin.coherence"]


# -- the fake behaves like a GPU for what these tests rely on ---------------------------------------------------
def test_async_fake_defers_kernels_until_the_host_waits(afake: AsyncFake) -> None:
    with handle("zero_copy") as jm:
        buf = jm.zeros(64, np.uint32)
        jm.synchronize()
        pending = coherence.launch_probe(jm, buf, None, 7)
        assert np.all(buf.host == 0)  # launched, not yet run
        assert pending.result().mismatches == 0
        np.testing.assert_array_equal(buf.host, coherence_pattern(64, 7))


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


# -- the marker -------------------------------------------------------------------------------------------------
def _mark(*args: Any, **kwargs: Any) -> Any:
    return types.SimpleNamespace(name="memmode_coherence", args=args, kwargs=kwargs)  # what parse_marker reads


def test_parse_marker_defaults_and_values() -> None:
    assert parse_marker(_mark(), "t") == CoherenceOptions(2, True, 0, None)
    opts = parse_marker(_mark(rounds=5, cpu_touch=False, gpu_delay_us=2.5, labels=["a", "b", "a"]), "t")
    assert opts == CoherenceOptions(5, False, 2.5, ("a", "b"))
    assert parse_marker(_mark(labels="x"), "t").labels == ("x",)


BAD_MARKERS = [
    ("memmode_coherence(rounds=0)", "rounds must be an int from 1 to 1000, got 0"),
    ('memmode_coherence(rounds="3")', "rounds must be an int from 1 to 1000, got '3'"),
    ("memmode_coherence(rounds=True)", "rounds must be an int from 1 to 1000, got True"),
    ("memmode_coherence(cpu_touch=1)", "cpu_touch must be True or False, got 1"),
    ("memmode_coherence(gpu_delay_us=-1)", "gpu_delay_us must be a number from 0 to 1000000, got -1"),
    ("memmode_coherence(labels=3)", "labels must be a non-empty list of buffer labels (str), got 3"),
    ("memmode_coherence(labels=[])", "labels must be a non-empty list of buffer labels (str), got []"),
    ("memmode_coherence(round=3)", "unknown argument round; expected rounds, cpu_touch, gpu_delay_us, labels"),
    ("memmode_coherence(3)", "takes keyword arguments only, got positional (3,)"),
]


@pytest.mark.parametrize(("marker", "message"), BAD_MARKERS, ids=[m for m, _ in BAD_MARKERS])
def test_bad_marker_fails_collection_naming_test_and_argument(
    pytester: pytest.Pytester, afake: AsyncFake, marker: str, message: str
) -> None:
    pytester.makepyfile(
        test_marked=f"""
        import pytest

        @pytest.mark.memmode
        @pytest.mark.{marker}
        def test_typo(jetmem):
            pass

        def test_fine():
            pass
        """
    )
    result = pytester.runpytest(*plugin_args())
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*test_marked.py::test_typo: @pytest.mark.memmode_coherence*{message}*"])
    assert "passed" not in result.parseoutcomes()


def test_marker_without_jetmem_fails_collection(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(
        test_marked="""
        import pytest

        @pytest.mark.memmode_coherence
        def test_no_handle():
            pass
        """
    )
    result = pytester.runpytest(*plugin_args())
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*test_marked.py::test_no_handle: *the test does not use jetmem*"])


def test_marker_is_registered(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    result = pytester.runpytest(*plugin_args(), "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.memmode_coherence(rounds=2, cpu_touch=True, *"])
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode
        @pytest.mark.memmode_coherence(rounds=1)
        def test_ok(jetmem):
            jetmem.zeros(8)
        """
    )
    assert pytester.runpytest(*plugin_args(), "--strict-markers").ret == pytest.ExitCode.OK


MARKED_TESTS = """
    import numpy as np
    import pytest

    @pytest.mark.memmode
    @pytest.mark.memmode_coherence(rounds=3)
    def test_many_buffers(jetmem):
        x = jetmem.array(np.arange(1000, dtype=np.float32))
        x.label = "x"
        jetmem.zeros((5, 7), np.int16).label = "odd bytes"
        jetmem.empty(3, np.complex128)
        jetmem.empty(0, np.float32)
        jetmem.empty(16, np.uint8, mode="device").label = "staging"
        gone = jetmem.empty(4)
        gone.free()

    @pytest.mark.memmode("managed")
    @pytest.mark.memmode_coherence(cpu_touch=False, labels=["x"])
    def test_labels(jetmem):
        jetmem.zeros(10).label = "x"
        jetmem.zeros(10).label = "y"

    @pytest.mark.memmode("device")
    @pytest.mark.memmode_coherence(labels=["nope"])
    def test_missing_label(jetmem):
        jetmem.zeros(10).label = "x"

    @pytest.mark.memmode("zero_copy")
    @pytest.mark.memmode_coherence
    def test_body_fails(jetmem):
        jetmem.zeros(10)
        assert False, "the body's own failure"

    @pytest.mark.memmode("zero_copy")
    @pytest.mark.memmode_coherence
    def test_nothing_to_check(jetmem):
        pass

    @pytest.mark.memmode("device")
    def test_unmarked(jetmem):
        jetmem.zeros(10)
"""


def _reports(reprec: pytest.HookRecorder) -> dict[str, pytest.TestReport]:
    return {r.nodeid.split("::")[1]: r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"}


def test_marker_passes_on_correct_code(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(test_marked=MARKED_TESTS)
    reprec = pytester.inline_run(*plugin_args())
    reps = _reports(reprec)
    for mode in MODES:
        rep = reps[f"test_many_buffers[{mode}]"]
        assert rep.passed, rep.longreprtext
        props = dict(rep.user_properties)["jetmem_coherence"]
        assert props[0] == f"'x' [{mode}]: 1000 uint32 words, 3 rounds: ok"
        assert props[1] == f"'odd bytes' [{mode}]: 70 bytes (byte-level pattern), 3 rounds: ok"
        assert re.fullmatch(
            rf"<Buffer {mode} complex128 \(3,\) ptr=0x[0-9a-f]+> \[{mode}\]: 12 uint32 words.*", props[2]
        )
        assert re.fullmatch(rf"<Buffer {mode} float32 \(0,\) .*> \[{mode}\]: skipped \(empty\)", props[3])
        assert props[4] == "'staging' [device]: 16 bytes (byte-level pattern), 3 rounds: ok"
        assert len(props) == 5
    assert dict(reps["test_labels[managed]"].user_properties)["jetmem_coherence"] == [
        "'x' [managed]: 10 uint32 words, 2 rounds: ok"
    ]
    missing = reps["test_missing_label[device]"]
    assert missing.failed and "no live buffer labelled 'nope'" in missing.longreprtext
    body = reps["test_body_fails[zero_copy]"]
    assert body.failed and "the body's own failure" in body.longreprtext
    assert "jetmem coherence" not in body.longreprtext
    assert reps["test_nothing_to_check[zero_copy]"].passed
    assert reps["test_unmarked[device]"].passed
    assert afake.live == {}


def test_marker_warns_when_there_is_nothing_to_check(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(test_marked=MARKED_TESTS)
    result = pytester.runpytest(*plugin_args(), "-k", "test_nothing_to_check")
    result.assert_outcomes(passed=1, deselected=7, warnings=1)
    result.stdout.fnmatch_lines(["*memmode_coherence: the test left no live jetmem buffer to check*"])


@pytest.mark.parametrize(("bug", "mode"), sorted(planted.PLANTED_BUGS.items()))
def test_marker_fails_on_the_planted_bug(
    pytester: pytest.Pytester, afake: AsyncFake, monkeypatch: pytest.MonkeyPatch, bug: str, mode: str
) -> None:
    planted.plant(monkeypatch, bug)  # the inline run shares this process's modules
    pytester.makepyfile(test_marked=MARKED_TESTS)
    reprec = pytester.inline_run(*plugin_args(), "-k", "many_buffers")
    reps = _reports(reprec)
    for m in MODES:
        rep = reps[f"test_many_buffers[{m}]"]
        if m != mode:
            assert rep.passed, rep.longreprtext
            continue
        assert rep.failed
        text = rep.longreprtext
        assert f"jetmem coherence ({mode}, 3 rounds, cpu_touch=True):" in text
        assert (
            f"'x' [{mode}]: round 1/3: the CPU read what a kernel wrote: 1000 of 1000 words differ; "
            "first differing index 0 (word 0 of the uint32 view): read 0x" in text
        )
        assert f"'odd bytes' [{mode}]: round 1/3: the CPU read what a kernel wrote: " in text
        assert "'staging'" not in text  # a device buffer in a managed/zero-copy test: no host view to break
        props = dict(rep.user_properties)["jetmem_coherence"]
        assert f"'x' [{mode}]: 1000 uint32 words, 3 rounds: FAILED" in props


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


# -- the numpy model --------------------------------------------------------------------------------------------
OPS = st.one_of(
    st.tuples(st.just("pattern"), st.slices(40), jst.seeds()),
    st.tuples(st.just("add"), st.slices(40), st.integers(0, 0xFFFFFFFF)),
    st.tuples(st.just("xor"), st.slices(40), st.integers(0, 0xFFFFFFFF)),
    st.tuples(st.just("copy"), st.integers(0, 40), st.integers(0, 40), st.integers(0, 40)),
)


@given(n=st.integers(1, 40), m=st.integers(1, 40), ops=st.lists(OPS, max_size=20))
def test_model_matches_a_word_by_word_reference(n: int, m: int, ops: list[tuple[Any, ...]]) -> None:
    model = CoherenceModel()
    model.new("a", n)
    model.new("b", m, fill=7)
    ref = {"a": [0] * n, "b": [7] * m}
    for op in ops:
        if op[0] == "copy":
            _, a, b, count = op
            count = min(count, n - min(a, n), m - min(b, m))
            a, b = min(a, n), min(b, m)
            model.copy("a", a, "b", b, count)
            ref["b"][b : b + count] = ref["a"][a : a + count]
            continue
        kind, sl, value = op
        idx = list(range(*sl.indices(n)))
        if kind == "pattern":
            model.write_pattern("a", sl, value)
            for i in idx:
                ref["a"][i] = int(coherence_pattern(i + 1, value)[i])
        elif kind == "add":
            model.add("a", sl, value)
            for i in idx:
                ref["a"][i] = (ref["a"][i] + value) % 2**32
        else:
            model.apply("a", sl, lambda w, v=value: w ^ np.uint32(v))
            for i in idx:
                ref["a"][i] ^= value
    assert model.expected("a").tolist() == ref["a"]
    assert model.expected("b").tolist() == ref["b"]
    assert model.expected("a").dtype == np.uint32


def test_model_bookkeeping() -> None:
    model = CoherenceModel()
    model.new("a", 3)
    with pytest.raises(KeyError):
        model.new("a", 3)
    snapshot = model.expected("a")
    snapshot[0] = 9  # a copy
    assert model.expected("a")[0] == 0
    model.drop("a")
    assert model.words == {}


# -- the state machine ------------------------------------------------------------------------------------------
def _steps(exc: BaseException) -> list[str]:
    """The steps of hypothesis's failing sequence (its notes), without the setup and teardown lines."""
    notes = getattr(exc, "__notes__", [])
    return [n for n in notes if re.match(r"^(\w+ = )?state\.\w+\(", n) and not n.startswith("state.teardown")]


@pytest.mark.parametrize("profile", ["orin", "dgpu"])
@pytest.mark.parametrize("mode", MODES)
def test_machine_passes_on_correct_code(make_fake: Callable[..., AsyncFake], profile: str, mode: str) -> None:
    fake = make_fake(profile)
    with handle(mode) as jm:
        bound = CoherenceMachine.run_with(jm, default_settings(max_examples=60, stateful_step_count=25))
        assert bound.examples_run >= 60
        assert jm.live_buffers() == []  # every example freed what it allocated
    calls = {c.api for c in fake.calls}
    assert {"cuLaunchKernel", "cuMemcpyDtoDAsync", "cuCtxSynchronize"} <= calls
    if mode == "managed":
        assert "cuStreamAttachMemAsync" in calls
        managed_extras = {"cuMemPrefetchAsync", "cuMemAdvise"}
        assert managed_extras <= calls if profile == "dgpu" else not managed_extras & calls
    launched = {launch.kernel for launch in fake.launches}
    assert {"jetmem_probe_u32", "jetmem_machine_add", "jetmem_machine_compare"} <= launched
    assert fake.live == {}


@pytest.mark.parametrize(("bug", "mode"), sorted(planted.PLANTED_BUGS.items()))
def test_machine_finds_the_planted_bug_with_a_short_sequence(
    make_fake: Callable[..., AsyncFake], monkeypatch: pytest.MonkeyPatch, bug: str, mode: str
) -> None:
    make_fake("dgpu")
    planted.plant(monkeypatch, bug)
    with handle(mode) as jm:
        with pytest.raises(AssertionError) as exc:
            CoherenceMachine.run_with(jm, default_settings(max_examples=200))
        assert jm.live_buffers() == []
    steps = _steps(exc.value)
    assert 2 <= len(steps) <= 3, exc.value.__notes__
    assert steps[0].startswith("buffers_0 = state.first_buffer(")
    assert f"[{mode}]: the CPU read" in str(exc.value)
    assert "first differing index" in str(exc.value) and "expected 0x" in str(exc.value)


def test_machine_passes_in_modes_the_planted_bug_does_not_touch(
    make_fake: Callable[..., AsyncFake], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fake("dgpu")
    planted.plant(monkeypatch, "skip_sync_on_zero_copy_read")
    for mode in ("device", "managed"):
        with handle(mode) as jm:
            CoherenceMachine.run_with(jm, default_settings(max_examples=30))


def test_machine_opens_its_own_handle_without_a_bound_one(afake: AsyncFake) -> None:
    class ZeroCopyMachine(CoherenceMachine):
        mode = "zero_copy"

    ZeroCopyMachine.examples_run = 0
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(ZeroCopyMachine, settings=default_settings(max_examples=5, stateful_step_count=5))
    assert ZeroCopyMachine.examples_run >= 5
    assert afake.live == {} and not afake.leaks()


def test_run_with_rejects_unknown_attributes(afake: AsyncFake) -> None:
    with handle("device") as jm, pytest.raises(TypeError, match="unknown attribute"):
        CoherenceMachine.run_with(jm, gpu_dleay_us=5)


XOR_SOURCE = r"""
extern "C" __global__ void xor_words(unsigned int* buf, unsigned long long start, long long step,
                                     unsigned long long count, unsigned int mask)
{
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < count;
         k += (unsigned long long)gridDim.x * blockDim.x)
        buf[(long long)start + (long long)k * step] ^= mask;
}
"""


def test_a_subclass_adds_a_rule_for_its_own_kernel(afake: AsyncFake) -> None:
    """The docs/coherence.md example: a user kernel, emulated here, checked against the model."""
    from hypothesis.stateful import rule

    def emulate_xor(fake: FakeDriver, launch: Launch) -> None:
        start, step, count = launch.value(1, np.uint64), launch.value(2, np.int64), launch.value(3, np.uint64)
        idx = start + step * np.arange(count, dtype=np.int64)
        fake.view(launch.ptr(0), np.uint32, int(idx.max()) + 1)[idx] ^= np.uint32(launch.value(4, np.uint32))

    afake.emulators["xor_words"] = afake._deferred(emulate_xor)
    calls: list[int] = []

    class XorMachine(CoherenceMachine):
        @rule(t=CoherenceMachine.buffers, mask=st.integers(0, 0xFFFFFFFF), data=st.data())
        def gpu_xor(self, t: Any, mask: int, data: st.DataObject) -> None:
            sl = self.draw_slice(data, t)
            start, step, count = self.span(t, sl)
            if count:
                self.ensure_gpu_access(t)
                self.kernel("xor_words", XOR_SOURCE).launch(
                    self.grid(count), 256, (t.buf.ptr, start, step, count, mask)
                )
                calls.append(count)
            self.model.apply(t.name, sl, lambda w: w ^ np.uint32(mask))

    with handle("managed") as jm:
        XorMachine.run_with(jm, default_settings(max_examples=30))
    assert calls
    compile_kernel(XOR_SOURCE, "xor_words", "sm_87")  # and it is real CUDA


def test_docs_strategies_example_runs_with_the_jetmem_fixture(pytester: pytest.Pytester, afake: AsyncFake) -> None:
    pytester.makepyfile(
        """
        import pytest
        from hypothesis import HealthCheck, given, settings, strategies as st
        from pytest_jetmem.correctness import strategies as jst

        @pytest.mark.memmode
        @settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(dtype=jst.dtypes(), shape=jst.shapes(max_dims=2), data=st.data())
        def test_copy_round_trip(jetmem, dtype, shape, data):
            host = data.draw(jst.fill_arrays(shape, dtype))
            buf = jetmem.array(host)
            assert buf.to_numpy().tobytes() == host.tobytes()
            buf.free()
        """
    )
    pytester.runpytest(*plugin_args()).assert_outcomes(passed=3)
