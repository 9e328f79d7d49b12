"""correctness.state_machine without a GPU: the numpy model and the coherence state machine.

Only the driver boundary is faked: the ``afake`` fixture (tests/unit/conftest.py) installs an
:class:`fakes.async_fake.AsyncFake`, whose kernels, async memsets and async copies take effect when the host
waits, as on a GPU, so a host read that skips its synchronisation sees stale memory, deterministically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakes import planted
from fakes.async_fake import MODES, AsyncFake, handle
from fakes.fake_driver import FakeDriver, Launch
from pytest_jetmem.correctness import strategies as jst
from pytest_jetmem.correctness.state_machine import CoherenceMachine, CoherenceModel, default_settings
from pytest_jetmem.cuda.compiler import compile_kernel
from pytest_jetmem.kernels.reference import coherence_pattern

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


def pin_local_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a derandomized hypothesis run independent of which modules are loaded.

    hypothesis (since 6.131) mixes into its draws constants found in every local module loaded, so the examples
    of a derandomized run change with the test modules collected beside it (a selection, the full suite). Here it
    gets its fixed global constants instead, for the run.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # an older hypothesis: no local constants
        return
    if hasattr(providers, "_get_local_constants"):

        def fixed() -> Any:
            return providers.GLOBAL_CONSTANTS

        monkeypatch.setattr(providers, "_get_local_constants", fixed)
        monkeypatch.setattr(providers, "CONSTANTS_CACHE", type(providers.CONSTANTS_CACHE)(1024))


@pytest.mark.parametrize(("bug", "mode"), sorted(planted.PLANTED_BUGS.items()))
def test_machine_finds_the_planted_bug_with_a_short_sequence(
    make_fake: Callable[..., AsyncFake], monkeypatch: pytest.MonkeyPatch, bug: str, mode: str
) -> None:
    pin_local_constants(monkeypatch)
    make_fake("dgpu")
    planted.plant(monkeypatch, bug)
    with handle(mode) as jm:
        with pytest.raises(AssertionError) as exc:
            # derandomize: the same sequences every run. With random ones this failed twice in ~10 full-suite runs
            # under -n 2 with hypothesis's Flaky ("Unreliable assumption": the shrunk sequence did not fail again
            # on its final replay), never alone; the cause is not found yet (see the issue notes)
            CoherenceMachine.run_with(jm, default_settings(max_examples=200, derandomize=True))
        assert jm.live_buffers() == []
    steps = _steps(exc.value)
    assert 2 <= len(steps) <= 3, exc.value.__notes__
    # hypothesis names the bundle value: ``buffers_0`` in newer releases, ``v1`` in older ones (6.85)
    assert re.match(r"(buffers_0|v1) = state\.first_buffer\(", steps[0]), steps
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


# -- the user's example database ----------------------------------------------------------------------------------
REPLAY_TEST = """
import os, sys
sys.path.insert(0, {tests!r})
import pytest
from hypothesis import Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from fakes import planted
from fakes.async_fake import AsyncFake, handle
from pytest_jetmem import CoherenceMachine, default_settings
from pytest_jetmem.cuda import driver

settings.register_profile("saved", database=DirectoryBasedExampleDatabase({db!r}))
settings.load_profile("saved")


@pytest.mark.parametrize("mode", ["device", "zero_copy"])  # the planted bug is zero_copy's
def test_machine(monkeypatch, mode):
    driver.install(AsyncFake("dgpu"))
    planted.plant(monkeypatch, "skip_sync_on_zero_copy_read")
    replay_only = {{"phases": [Phase.reuse]}} if os.environ.get("REPLAY_ONLY") else {{}}
    with handle(mode) as jm:
        CoherenceMachine.run_with(jm, default_settings(max_examples=1000 if mode == "zero_copy" else 10, **replay_only))
"""


def test_a_failing_sequence_is_saved_in_the_users_database_and_replayed_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, jetmem_kernel_cache: Any
) -> None:
    """The profile's example database keeps the shrunk failure: the next run replays it (and only where it failed)."""
    db = pytester.path / "examples"
    pytester.makepyfile(test_replay=REPLAY_TEST.format(tests=str(Path(__file__).resolve().parents[1]), db=str(db)))
    first = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    first.assert_outcomes(passed=1, failed=1)
    saved = [p for p in db.rglob("*") if p.is_file()]
    assert saved, "the failing sequence was not saved in the profile's database"
    steps = _printed_steps(first)

    monkeypatch.setenv("REPLAY_ONLY", "1")  # no generation, no shrinking: only what the database holds runs
    second = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    # device runs first (nothing saved under its key: hypothesis skips it, or before 6.100 or so passes it with
    # nothing run); under zero_copy's key it would replay and, passing, drop zero_copy's example
    outcome = {m: re.search(rf"test_machine\[{m}\] (\w+)", second.stdout.str()) for m in ("device", "zero_copy")}
    assert {m: o.group(1) if o else None for m, o in outcome.items()} in (
        {"device": "SKIPPED", "zero_copy": "FAILED"},
        {"device": "PASSED", "zero_copy": "FAILED"},
    ), second.stdout.str()
    assert _printed_steps(second) == steps and steps


def _printed_steps(result: pytest.RunResult) -> list[str]:
    """The failing sequence's steps as the run printed them."""
    lines = (re.sub(r"^E\s+", "", line.strip()) for line in result.outlines)
    return [line for line in lines if re.match(r"^(\w+ = )?state\.\w+\(", line)]
