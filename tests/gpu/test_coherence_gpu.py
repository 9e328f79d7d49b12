"""Coherence on a real GPU: the helpers, the memmode_coherence marker and the hypothesis state machine.

The planted bug (tests/fakes/planted.py) makes the host read path of one mode skip its synchronisation; with the GPU
writes delayed (``gpu_delay_us``) the host then reads stale data every time, and both the marker and the state
machine must say so.
"""

from __future__ import annotations

import importlib.metadata
import re
import time
from typing import Any

import numpy as np
import pytest

from fakes import planted
from pytest_jetmem.correctness import coherence
from pytest_jetmem.correctness.state_machine import CoherenceMachine, default_settings
from pytest_jetmem.cuda.modes import default_names
from pytest_jetmem.kernels.reference import coherence_pattern

PLANTED_DELAY_US = 5000  # each GPU write waits 5 ms: a host read that does not wait sees stale data
# The state machine's GPU writes wait longer: hypothesis replays a failing sequence to confirm and shrink it, and a
# replay whose host read came more than the delay after the write (a stall of the host) reads fresh data, so that
# hypothesis calls the failure flaky (FlakyFailure, "the second run drew more data than the first": once on the H200
# with 5 ms). 20 ms makes such a stall four times as long; it does not rule one out.
MACHINE_PLANTED_DELAY_US = 20000
MODES = default_names()


def plugin_args() -> list[str]:
    """``-p`` for the coherence plugin unless its entry point already loads it (both would clash)."""
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "pytest_jetmem.plugin.coherence" for ep in eps):
        return []
    return ["-p", "pytest_jetmem.plugin.coherence"]


def planted_modes(info: Any) -> list[str]:
    """Modes whose planted bug is safe to run: a host read of managed memory while a kernel runs kills
    the process where CONCURRENT_MANAGED_ACCESS is 0 (Jetson), so managed is left out there."""
    return ["zero_copy", *(["managed"] if info.attr("CONCURRENT_MANAGED_ACCESS") else [])]


def _steps(exc: BaseException) -> list[str]:
    notes = getattr(exc, "__notes__", [])
    return [n for n in notes if re.match(r"^(\w+ = )?state\.\w+\(", n) and not n.startswith("state.teardown")]


# -- the helpers --------------------------------------------------------------------------------------------------
@pytest.mark.memmode
@pytest.mark.parametrize("dtype", ["float32", "complex128", "int16", "uint8"])
@pytest.mark.parametrize(
    "sl", [slice(None), slice(3, 1000, 7), slice(None, None, -5), slice(500, 501)], ids=["all", "step7", "rev5", "one"]
)
def test_touches_round_trip(jetmem, dtype, sl):
    buf = jetmem.zeros((37, 41), dtype)
    n = coherence.word_count(buf)
    a = coherence.cpu_touch(jetmem, buf, 0x1234, sl)
    touched = coherence.gpu_touch(jetmem, buf, expect_seed=a, new_seed=0xBEEF, sl=sl)
    assert (touched.mismatches, touched.first_bad, touched.seed) == (0, None, 0xBEEF)
    assert not coherence.cpu_check(jetmem, buf, 0xBEEF, sl)
    words = coherence.cpu_read(jetmem, buf)
    outside = np.ones(n, bool)
    outside[list(range(*sl.indices(n)))] = False
    assert not words[outside].any()
    # a wrong expectation is reported at the lowest differing word, with the value the kernel read
    wrong = coherence.gpu_touch(jetmem, buf, expect_seed=a, sl=sl, write=False)
    want = coherence.cpu_check(jetmem, buf, a, sl)
    assert (wrong.mismatches, wrong.first_bad, wrong.got, wrong.expected) == (
        want.mismatches,
        want.first_bad,
        want.got,
        want.expected,
    )
    assert wrong.mismatches > 0


@pytest.mark.memmode
def test_probe_reads_what_the_cpu_wrote_over_a_large_buffer(jetmem):
    n = (16 << 20) + 3
    buf = jetmem.empty(n, np.float32)
    seed = coherence.cpu_touch(jetmem, buf)
    words = coherence.cpu_read(jetmem, buf, slice(0, 16))
    np.testing.assert_array_equal(words, coherence_pattern(16, seed))
    for bad in (5, n - 1):
        coherence.cpu_write(jetmem, buf, np.uint32(0xDEADBEEF), slice(bad, bad + 1))
    found = coherence.gpu_touch(jetmem, buf, expect_seed=seed, write=False)
    assert (found.mismatches, found.first_bad, found.got) == (2, 5, 0xDEADBEEF)
    assert found.expected == int(coherence_pattern(6, seed)[5])


@pytest.mark.memmode
@pytest.mark.parametrize("cpu_touch", [True, False])
def test_check_round_trips_on_correct_code(jetmem, cpu_touch):
    for dtype, shape in (("float32", (1 << 20) + 1), ("int16", (333, 3)), ("float64", 1)):
        buf = jetmem.empty(shape, dtype)
        assert coherence.check_round_trips(jetmem, buf, rounds=5, cpu_touch=cpu_touch) == []
    assert len(jetmem.live_buffers()) == 3  # the probes' counters are freed


@pytest.mark.memmode("managed", "zero_copy")
def test_check_round_trips_finds_the_planted_bug(jetmem, memmode, jetmem_device, monkeypatch):
    if memmode not in planted_modes(jetmem_device):
        pytest.skip("managed: CONCURRENT_MANAGED_ACCESS=0, a host read during a kernel would kill the process")
    planted.plant(monkeypatch, f"skip_sync_on_{memmode}_read")
    buf = jetmem.empty(4096, np.float32)
    buf.label = "frame"
    problems = coherence.check_round_trips(jetmem, buf, rounds=2, delay_us=PLANTED_DELAY_US)
    assert len(problems) == 1
    assert problems[0].startswith(f"'frame' [{memmode}]: round 1/2: the CPU read what a kernel wrote: ")
    assert "first differing index 0 (word 0 of the uint32 view)" in problems[0]
    monkeypatch.undo()  # the correct read path again
    assert coherence.check_round_trips(jetmem, buf, rounds=2, delay_us=PLANTED_DELAY_US) == []


# -- the marker, in a pytest run of its own -----------------------------------------------------------------------
MARKED = """
    import numpy as np
    import pytest

    @pytest.mark.memmode
    @pytest.mark.memmode_coherence(rounds=3, gpu_delay_us={delay})
    def test_pipeline(jetmem):
        x = jetmem.array(np.arange(1 << 16, dtype=np.float32))
        x.label = "x"
        y = jetmem.empty_like(x)
        y.label = "y"
        jetmem.copy(y, x)
        jetmem.zeros((100, 3), np.int16).label = "bytes"
        jetmem.empty(7, np.complex128).label = "complex"
        jetmem.synchronize()
        np.testing.assert_array_equal(y.to_numpy(), x.to_numpy())

    @pytest.mark.memmode
    @pytest.mark.memmode_coherence(cpu_touch=False, rounds=4)
    def test_no_touch(jetmem):
        jetmem.zeros(1000, np.uint32).label = "counters"

    @pytest.mark.memmode
    @pytest.mark.memmode_coherence(labels=["in"])
    def test_labels(jetmem):
        jetmem.zeros(10).label = "in"
        jetmem.zeros(10).label = "out"
"""


def test_marker_passes_in_every_mode_on_correct_code(pytester, jetmem_device):
    pytester.makepyfile(test_marked=MARKED.replace("{delay}", "0"))
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:randomly", "-rA")
    result.assert_outcomes(passed=9)


@pytest.mark.parametrize("mode", ["zero_copy", "managed"])
def test_marker_fails_on_the_planted_bug(pytester, jetmem_device, monkeypatch, mode):
    if mode not in planted_modes(jetmem_device):
        pytest.skip("managed: CONCURRENT_MANAGED_ACCESS=0, a host read during a kernel would kill the process")
    pytester.makeconftest(planted.conftest_source(f"skip_sync_on_{mode}_read"))
    pytester.makepyfile(test_marked=MARKED.replace("{delay}", str(PLANTED_DELAY_US)))
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:randomly", "-k", "test_pipeline", "-v")
    result.assert_outcomes(passed=2, failed=1, deselected=6)
    others = [m for m in MODES if m != mode]
    result.stdout.fnmatch_lines_random(
        [f"*test_pipeline?{mode}? FAILED*", *(f"*test_pipeline?{m}? PASSED*" for m in others)]
    )
    result.stdout.fnmatch_lines(
        [
            f"*jetmem coherence ({mode}, 3 rounds, cpu_touch=True):*",
            f"*'x' ?{mode}?: round 1/3: the CPU read what a kernel wrote: *words differ; first differing index 0 *",
        ]
    )


# -- the state machine --------------------------------------------------------------------------------------------
@pytest.mark.memmode
def test_state_machine_passes_on_correct_code(jetmem, memmode, gpu_results):
    start = time.perf_counter()
    bound = CoherenceMachine.run_with(jetmem, default_settings(max_examples=200, stateful_step_count=30))
    gpu_results.setdefault("coherence_machine", {})[memmode] = {
        "examples": bound.examples_run,
        "seconds": round(time.perf_counter() - start, 2),
    }
    assert bound.examples_run >= 200
    assert jetmem.live_buffers() == []


@pytest.mark.memmode("managed", "zero_copy")
def test_state_machine_finds_the_planted_bug(jetmem, memmode, jetmem_device, monkeypatch, gpu_results):
    if memmode not in planted_modes(jetmem_device):
        pytest.skip("managed: CONCURRENT_MANAGED_ACCESS=0, a host read during a kernel would kill the process")
    planted.plant(monkeypatch, f"skip_sync_on_{memmode}_read")
    start = time.perf_counter()
    # no example database: the planted bug is a race, and a sequence saved by one run (or by the correct-code test of
    # the same machine class, which shares its database key) replays differently in the next: hypothesis then says
    # FlakyStrategyDefinition instead of finding the bug afresh
    with pytest.raises(AssertionError) as exc:
        CoherenceMachine.run_with(
            jetmem, default_settings(max_examples=200, stateful_step_count=20, database=None),
            gpu_delay_us=MACHINE_PLANTED_DELAY_US,
        )
    steps = _steps(exc.value)
    gpu_results.setdefault("coherence_machine_planted", {})[memmode] = {
        "steps": steps,
        "message": str(exc.value),
        "seconds": round(time.perf_counter() - start, 2),
    }
    assert 2 <= len(steps) <= 4, exc.value.__notes__  # 2 on the fake driver: a GPU write, a host read
    assert steps[0].startswith("buffers_0 = state.first_buffer(")
    assert f"[{memmode}]: the CPU read" in str(exc.value)
    assert jetmem.live_buffers() == []
