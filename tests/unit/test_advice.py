"""measure.advice: which memory mode to pick, and why, from synthetic records with known ratios.

Pure: records made by hand (samples drawn from a seeded generator, so every figure is reproducible), the device's
facts as the three profiles the advice distinguishes (an Orin, a Thor, a discrete H100) and none at all. The
plugin's section on the fake driver: test_plugin_advice.py; the demo's: test_demo.py.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fakes.records import record
from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.measure import advice_stats
from pytest_jetmem.measure.advice import (
    CONFIDENCE,
    EQUIVALENCE_MARGIN,
    PCIE_MARGIN,
    Advice,
    DeviceFacts,
    DeviceKind,
    ReasonKind,
    RuleKind,
    RuleVerdict,
    TouchCost,
    advice_header,
    advise,
    comparable,
    format_advice,
)
from pytest_jetmem.measure.counters import CounterSample, UnifiedMemoryCounters
from pytest_jetmem.measure.energy import Energy
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.measure.stats import ratio_ci

ORIN = DeviceFacts("Orin", integrated=True, concurrent_managed_access=False, pageable_memory_access=False)
THOR = DeviceFacts("NVIDIA Thor", integrated=True, concurrent_managed_access=True, pageable_memory_access=True)
H100 = DeviceFacts(
    "NVIDIA H100 80GB HBM3", integrated=False, concurrent_managed_access=True, pageable_memory_access=False
)


def noisy(median: float, n: int = 20, rel: float = 0.01, seed: int = 0) -> tuple[float, ...]:
    """``n`` samples around ``median`` with a seeded normal spread of ``rel``."""
    rng = np.random.default_rng(seed)
    return tuple(float(v) for v in median * (1.0 + rel * rng.standard_normal(n)))


def rec(
    mode: str,
    samples: Sequence[float],
    *,
    test: str = "t.py::test_k",
    label: str = "k",
    scope: str = "kernel",
    first: float | None = None,
    counters: UnifiedMemoryCounters | None = None,
) -> MeasurementRecord:
    """The record of ``test[mode]``'s measurement ``label:scope`` with these samples."""
    base = record(f"{test}[{mode}]", mode, label, float(np.median(samples)), scope=scope, n=len(samples))
    stats = replace(base.statistics, samples=tuple(samples), first_call_ms=first)
    return replace(base, statistics=stats, counters=counters)


def kinds(advice: Advice) -> list[ReasonKind]:
    return [r.kind for r in advice.reasons]


# -- the pick, the margin, ties ------------------------------------------------------------------------------------
def test_a_clear_winner_is_picked_with_the_margin_to_the_next_mode_and_its_interval() -> None:
    rows = [rec("device", noisy(1.0, seed=1)), rec("managed", noisy(1.6, seed=2)), rec("zero_copy", noisy(5.5, seed=3))]
    (a,) = advise(rows, ORIN).advice
    assert (a.test, a.key, a.scope) == ("t.py::test_k", "k:kernel", "kernel")
    assert (a.pick, a.fastest, a.leaders) == ("device", "device", ("device",))
    assert a.runner_up is not None and a.runner_up.mode == "managed"
    ratio, low, high = ratio_ci(rows[0].statistics.samples, rows[1].statistics.samples, confidence=CONFIDENCE)
    assert (a.runner_up.ratio, a.runner_up.ci) == (ratio, (low, high))
    assert 1.5 < low <= ratio <= high < 1.7
    assert a.summary() == (
        f"pick device: the next mode, managed, takes {ratio:.2f}x as long (99% CI {low:.2f}x..{high:.2f}x; more than "
        "the 5% margin)"
    )
    assert [s.mode for s in a.standings] == ["device", "managed", "zero_copy"]  # registry order
    assert [s.tied for s in a.standings] == [True, False, False]


def test_modes_within_the_margin_are_tied_and_no_winner_is_named() -> None:
    rows = [rec("device", noisy(1.0, seed=1)), rec("managed", noisy(1.02, seed=2)), rec("zero_copy", noisy(5, seed=3))]
    (a,) = advise(rows, ORIN).advice
    assert a.pick is None and a.runner_up is None
    assert a.leaders == ("device", "managed")
    assert a.why_no_pick.startswith("device and managed are tied (managed 1.02x device, 99% CI ")
    assert a.why_no_pick.endswith(": not clear of the 5% margin)")
    assert a.summary() == f"no clear winner: {a.why_no_pick}"
    text = "\n".join(format_advice(advise(rows, ORIN)))
    assert "  clearly slower: zero_copy 4.9" in text or "  clearly slower: zero_copy 5.0" in text


def test_a_wide_interval_gives_no_winner_though_the_medians_differ() -> None:
    rows = [rec("device", noisy(1.0, n=8, rel=0.4, seed=4)), rec("managed", noisy(1.3, n=8, rel=0.4, seed=5))]
    (a,) = advise(rows, ORIN).advice
    managed = a.standings[1]
    assert managed.ratio is not None and managed.ratio > 1.05  # the medians alone would name device
    assert managed.ci is not None and managed.ci[0] <= 1 + EQUIVALENCE_MARGIN
    assert a.pick is None and a.leaders == ("device", "managed")


def test_too_few_samples_give_no_interval_and_no_winner() -> None:
    rows = [rec("device", noisy(1.0, n=3)), rec("managed", noisy(9.0, seed=1))]
    (a,) = advise(rows, ORIN).advice
    assert a.pick is None and a.fastest is None and a.leaders == ()
    assert [s.ratio for s in a.standings] == [None, None]
    assert a.why_no_pick == "device has no interval (fewer than 5 samples or no usable figures)"
    (reason,) = [r for r in a.reasons if r.kind is ReasonKind.NO_INTERVAL]
    assert reason.mode == "device"
    assert reason.text.startswith("device has 3 samples, fewer than 5 (median ")
    assert a.rule.verdict is RuleVerdict.NOT_APPLICABLE  # nothing to weigh the rule with


def test_a_mode_not_registered_here_is_compared_by_its_figures_only() -> None:
    rows = [rec("device", noisy(1.0, seed=1)), rec("from_elsewhere", noisy(0.5, seed=2))]
    (a,) = advise(rows, ORIN).advice
    assert a.pick == "from_elsewhere"
    (reason,) = [r for r in a.reasons if r.kind is ReasonKind.UNREGISTERED]
    assert reason.text.startswith("from_elsewhere is not a memory mode registered in this session")
    assert [s.mode for s in a.standings] == ["device", "from_elsewhere"]  # registered first, then the others


def test_only_tests_measured_in_two_or_more_modes_get_advice_grouped_without_the_mode_parameter() -> None:
    rows = [
        rec("device", noisy(1.0), test="t.py::test_a"),
        rec("device", noisy(1.0), test="t.py::test_p", label="conv"),
        rec("managed", noisy(1.0), test="t.py::test_p", label="conv"),
    ]
    assert comparable(rows) and not comparable(rows[:1])
    session = advise(rows, ORIN)
    assert [(a.test, a.key) for a in session.advice] == [("t.py::test_p", "conv:kernel")]
    param = [
        replace(r, identity=replace(r.identity, nodeid=f"t.py::test_c[45x45-{r.mode}]")) for r in rows[1:]
    ]  # another parameter beside the mode stays in the test's name
    assert [a.test for a in advise(param, ORIN).advice] == ["t.py::test_c[45x45]"]
    assert format_advice(advise(rows[:1], ORIN)) == []


# -- the reasons ---------------------------------------------------------------------------------------------------
COUNTERS = UnifiedMemoryCounters(
    first_call=CounterSample(bytes_htod=4 << 20, bytes_dtoh=0, cpu_page_faults=3, gpu_page_faults=1024, calls=1),
    steady=CounterSample(bytes_htod=0, bytes_dtoh=0, cpu_page_faults=0, gpu_page_faults=0, calls=10),
)


@pytest.mark.parametrize("counters", [None, COUNTERS], ids=["counters-absent", "counters-present"])
def test_the_first_call_of_a_mode_whose_pages_migrate_with_counters_where_measured(
    counters: UnifiedMemoryCounters | None,
) -> None:
    rows = [
        rec("device", noisy(0.310, seed=1), first=0.320),
        rec("managed", noisy(0.310, seed=2), first=0.930, counters=counters),
    ]
    (a,) = advise(rows, H100).advice
    (reason,) = [r for r in a.reasons if r.kind is ReasonKind.FIRST_CALL]
    assert reason.mode == "managed"
    median = rows[1].median
    words = (
        "unified-memory counters were not measured in this run"
        if counters is None
        else "the counters saw 4.0 MiB migrated to the GPU, 0 B to the host, 1024 GPU and 3 CPU page faults in a "
        "cold call replayed after the samples with the pages put back on the host, not in the first call, which was "
        "timed without them"
    )
    assert reason.text == (
        f"managed's first call took 0.930 ms, {0.930 / median:.2f}x its steady median of {median:.3f} ms ({words}); "
        "device's first call took 0.320 ms: for a buffer used once, the first call is the cost to compare"
    )


def test_no_first_call_reason_where_the_first_call_costs_what_the_others_do() -> None:
    rows = [rec("device", noisy(0.31, seed=1), first=0.31), rec("managed", noisy(0.31, seed=2), first=0.315)]
    assert ReasonKind.FIRST_CALL not in kinds(advise(rows, ORIN).advice[0])


def test_the_copies_share_of_end_to_end_time_in_the_mode_without_a_host_view() -> None:
    rows = [
        rec("device", noisy(0.30, seed=1), label="cam"),
        rec("zero_copy", noisy(1.50, seed=2), label="cam"),
        rec("device", noisy(1.00, seed=3), label="cam", scope="end_to_end"),
        rec("zero_copy", noisy(1.20, seed=4), label="cam", scope="end_to_end"),
    ]
    e2e = next(a for a in advise(rows, ORIN).advice if a.scope == "end_to_end")
    (reason,) = [r for r in e2e.reasons if r.kind is ReasonKind.COPIES]
    share = 1 - rows[0].median / rows[2].median
    assert reason.mode == "device"
    assert reason.text == (
        f"device spends {share:.0%} of its end-to-end {rows[2].median:.3f} ms outside the kernel "
        f"({rows[0].median:.3f} ms): the copies to and from memory the host cannot see"
    )
    assert ReasonKind.UNCACHED_PENALTY not in kinds(e2e)  # a kernel-scope reason
    assert (
        e2e.rule.verdict is RuleVerdict.NOT_APPLICABLE and "end to end the note gives no ranking" in e2e.rule.evidence
    )


def test_the_cpu_touch_cost_where_the_run_measured_one() -> None:
    rows = [rec("device", noisy(0.30, seed=1)), rec("managed", noisy(0.30, seed=2))]
    touch = TouchCost("managed", noisy(0.70, n=5, seed=3), noisy(0.31, n=5, seed=4))
    (a,) = advise(rows, ORIN, touches={"t.py::test_k": [touch]}).advice
    (reason,) = [r for r in a.reasons if r.kind is ReasonKind.CPU_TOUCH]
    ratio, low, high = ratio_ci(touch.untouched, touch.touched, confidence=CONFIDENCE)
    assert reason.text.startswith(
        f"managed: a CPU write before the launch makes the kernel take {ratio:.2f}x (99% CI {low:.2f}x..{high:.2f}x)"
    )
    assert ReasonKind.CPU_TOUCH not in kinds(advise(rows, ORIN).advice[0])  # not measured: not said


# -- the note's rule, per device -----------------------------------------------------------------------------------
def reread(facts: DeviceFacts | None, zero_copy: float = 5.5) -> Advice:
    rows = [rec("device", noisy(0.31, seed=1)), rec("managed", noisy(0.31, seed=2))]
    rows.append(rec("zero_copy", noisy(0.31 * zero_copy, seed=3)))
    return advise(rows, facts).advice[0]


def test_orin_the_uncached_rule_agrees_when_pinned_memory_pays_for_re_reads() -> None:
    a = reread(ORIN)
    rule = a.rule
    assert rule.kind is RuleKind.UNCACHED_PINNED and rule.verdict is RuleVerdict.AGREES
    assert rule.sections == ("Memory Selection", "Pinned Memory Guidelines on Tegra Systems with no I/O coherency")
    assert rule.text.startswith("the integrated GPU does not cache pinned memory: for buffers a kernel reads")
    assert rule.evidence.startswith("zero_copy's kernel takes 5.")
    assert rule.evidence.endswith("the uncached reads cost")
    (penalty,) = [r for r in a.reasons if r.kind is ReasonKind.UNCACHED_PENALTY]
    assert penalty.text.endswith(
        "the integrated GPU does not cache zero_copy memory, so every access pays, and a kernel that re-reads its "
        "input pays on every re-read"
    )


def test_orin_the_uncached_rule_agrees_with_a_tie_and_disagrees_when_pinned_memory_wins() -> None:
    tie = reread(ORIN, zero_copy=1.0).rule
    assert tie.verdict is RuleVerdict.AGREES and "as the note allows for data read once" in tie.evidence
    faster = reread(ORIN, zero_copy=0.5).rule
    assert faster.verdict is RuleVerdict.DISAGREES
    assert faster.evidence.endswith("the uncached mode is clearly faster than the cached one")


def test_thor_the_full_coherency_rule_needs_registered_or_pageable_memory_in_the_run() -> None:
    a = reread(THOR)
    rule = a.rule
    assert THOR.kind is DeviceKind.COHERENT
    assert rule.kind is RuleKind.FULL_COHERENCY and rule.sections == ("Memory Selection", "Sysmem Full Coherency")
    assert rule.text == (
        "with sysmem full coherency, host-registered memory and pageable host memory used directly by the GPU can "
        "outperform both pinned and unified memory"
    )
    assert rule.verdict is RuleVerdict.NOT_APPLICABLE and "--jetmem-modes=all" in rule.evidence
    assert ReasonKind.UNCACHED_PENALTY not in kinds(a)  # full coherency: the contract's uncached modes are cached


@pytest.mark.parametrize(
    ("system", "verdict", "words"),
    [
        (0.5, RuleVerdict.AGREES, "it outperforms it"),
        (1.0, RuleVerdict.AGREES, "a tie"),
        (3.0, RuleVerdict.DISAGREES, "clearly slower here"),
    ],
)
def test_thor_the_full_coherency_rule_against_pinned_and_unified_memory(
    system: float, verdict: RuleVerdict, words: str
) -> None:
    rows = [rec("managed", noisy(1.0, seed=1)), rec("zero_copy", noisy(1.0, seed=2))]
    rows += [rec("system", noisy(system, seed=3)), rec("registered", noisy(system * 1.5, seed=4))]
    rule = advise(rows, THOR).advice[0].rule
    assert rule.verdict is verdict
    assert rule.evidence.startswith("system takes ") and rule.evidence.endswith(words)


def test_discrete_no_rule_applies_and_zero_copy_figures_are_not_jetson_figures() -> None:
    a = reread(H100)
    rule = a.rule
    assert rule.kind is RuleKind.NONE_DISCRETE and rule.sections == ()
    assert rule.verdict is RuleVerdict.NOT_APPLICABLE
    assert rule.evidence == "it is about integrated GPUs (Jetson), and this is a discrete GPU"
    (pcie,) = [r for r in a.reasons if r.kind is ReasonKind.NOT_JETSON]
    assert "depend on that link and are not Jetson figures" in pcie.text
    (penalty,) = [r for r in a.reasons if r.kind is ReasonKind.PCIE_PENALTY]
    assert "zero_copy memory is read over PCIe on this discrete GPU" in penalty.text
    assert "NVIDIA's CUDA for Tegra note: no rule applies: it is about integrated GPUs" in "\n".join(
        format_advice(advise([rec("device", noisy(1.0)), rec("zero_copy", noisy(2.0))], H100))
    )


def test_discrete_zero_copy_within_its_pcie_spread_is_a_tie() -> None:
    """The camera frame on an H100: zero_copy 1.19x device end to end, clear in one process's samples, but within
    the 25% zero-copy figures move between processes: no winner."""
    rows = [
        rec("device", noisy(1.06, seed=1), scope="end_to_end"),
        rec("zero_copy", noisy(1.27, seed=2), scope="end_to_end"),
    ]
    on_h100 = advise(rows, H100).advice[0]
    assert on_h100.pick is None and on_h100.leaders == ("device", "zero_copy")
    zero_copy = on_h100.standings[1]
    assert zero_copy.margin == PCIE_MARGIN and zero_copy.ci is not None and zero_copy.ci[0] > 1 + EQUIVALENCE_MARGIN
    assert advise(rows, ORIN).advice[0].pick == "device"  # no PCIe on a Jetson: the 5% margin


def test_without_device_facts_no_rule_is_applied() -> None:
    rule = reread(None).rule
    assert rule.kind is RuleKind.NONE_UNKNOWN and rule.verdict is RuleVerdict.NOT_APPLICABLE
    assert rule.evidence == "the device's facts are not known here (no GPU was opened)"


def test_device_facts_of_a_probed_device() -> None:
    attrs = {"INTEGRATED": 1, "CONCURRENT_MANAGED_ACCESS": 1, "PAGEABLE_MEMORY_ACCESS": 1}
    info = DeviceInfo(0, "NVIDIA Thor", (11, 0), 13000, 128 << 30, attributes=attrs)
    assert DeviceFacts.of(info) == THOR
    assert ORIN.kind is DeviceKind.INTEGRATED and H100.kind is DeviceKind.DISCRETE
    assert ORIN.describe() == "Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)"


# -- the text and the JSON -----------------------------------------------------------------------------------------
def session_rows() -> list[MeasurementRecord]:
    rows = []
    for i, (test, scale) in enumerate((("t.py::test_a", 1.0), ("t.py::test_b", 2.0))):
        for j, (mode, factor) in enumerate((("device", 1.0), ("managed", 1.03), ("zero_copy", 5.0))):
            rows.append(rec(mode, noisy(scale * factor, seed=10 * i + j), test=test, first=scale * factor * 2))
    return rows


def test_the_same_data_gives_the_same_words_in_any_order() -> None:
    rows = session_rows()
    first = format_advice(advise(rows, ORIN))
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    assert format_advice(advise(shuffled, ORIN)) == first
    assert advise(shuffled, ORIN).to_json() == advise(rows, ORIN).to_json()
    assert first[0] == "device: Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)"
    assert first[3] == "the note: https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/"
    assert [ln for ln in first if ln.startswith("t.py::")] == ["t.py::test_a  k:kernel", "t.py::test_b  k:kernel"]


def test_an_integrated_gpu_header_states_the_rule_once_citing_every_section_the_tests_cite() -> None:
    """Tests measured in different modes cite different sections of the same rule: the header says the rule once
    (it said it once per set of sections), and each test's verdict keeps its own sections."""
    rows = [
        *(rec(m, noisy(1.0, seed=i), test="t.py::test_a") for i, m in enumerate(("device", "managed"))),
        *(rec(m, noisy(f, seed=i), test="t.py::test_b") for i, (m, f) in enumerate((("device", 1), ("zero_copy", 5)))),
        *(rec(m, noisy(f, seed=i), test="t.py::test_c") for i, (m, f) in enumerate((("device", 1), ("registered", 5)))),
    ]
    session = advise(rows, ORIN)
    assert [a.rule.sections for a in session.advice] == [
        ("Memory Selection",),
        ("Memory Selection", "Pinned Memory Guidelines on Tegra Systems with no I/O coherency"),
        ("Memory Selection", "I/O Coherency"),
    ]
    header = advice_header(session)
    rules = [ln for ln in header if ln.startswith("NVIDIA's CUDA for Tegra note")]
    assert rules == [
        'NVIDIA\'s CUDA for Tegra note ("Memory Selection", "Pinned Memory Guidelines on Tegra Systems with no I/O '
        f'coherency", "I/O Coherency"): {session.advice[0].rule.text}'
    ]
    lines = format_advice(session)
    assert sum(session.advice[0].rule.text in ln for ln in lines) == 1
    assert '  the note ("Memory Selection", "I/O Coherency"), this run agrees: registered\'s kernel takes' in "\n".join(
        lines
    )


def test_each_pair_of_samples_is_bootstrapped_once_however_often_it_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The standing, the penalty reason and the note's rule compare the same pair, and the terminal section and the
    report advise on the same records: the seeded interval is computed once per pair of samples."""
    calls: list[tuple[float, float]] = []

    def counting(base: Sequence[float], other: Sequence[float], confidence: float) -> tuple[float, float, float]:
        calls.append((base[0], other[0]))
        return ratio_ci(base, other, confidence=confidence)

    monkeypatch.setattr(advice_stats, "ratio_ci", counting)
    rows = [
        rec(m, noisy(f, seed=901 + i))
        for i, (m, f) in enumerate((("device", 1.2345), ("managed", 1.9), ("zero_copy", 6.1)))
    ]
    first = advise(rows, ORIN)
    assert len(calls) == 2  # device against managed, device against zero_copy (the reason and the rule ask again)
    assert [r.kind for r in first.advice[0].reasons] == [ReasonKind.UNCACHED_PENALTY]
    assert first.advice[0].rule.verdict is RuleVerdict.AGREES
    again = advise([replace(r) for r in reversed(rows)], ORIN)  # the report's own copies of the same records
    assert again == first and len(calls) == 2


def test_the_json_is_plain_json_with_every_key() -> None:
    doc = advise(session_rows(), ORIN).to_json()
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text) == doc
    assert set(doc) == {"device", "confidence", "equivalence_margin", "pcie_margin", "min_samples", "note", "tests"}
    test = doc["tests"][0]  # type: ignore[index]
    assert set(test) == {
        "test", "key", "scope", "pick", "fastest", "leaders", "margin", "why_no_pick", "modes", "reasons", "rule",
        "energy", "summary",
    }  # fmt: skip
    assert set(test["rule"]) == {"kind", "sections", "text", "verdict", "evidence"}
    assert {r["kind"] for r in test["reasons"]} == {"uncached_penalty", "first_call"}


# -- the property: never a winner the interval does not support ----------------------------------------------------
durations = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
raw_samples = st.lists(durations, min_size=4, max_size=25)
# Samples around a median with a relative spread: the ratios between modes range from ties to clear wins.
spread_samples = st.builds(
    lambda median, n, rel, seed: [max(1e-3, v) for v in noisy(median, n=n, rel=rel, seed=seed)],
    st.sampled_from([0.1, 0.3, 1.0, 1.02, 1.1, 2.0, 5.5]),
    st.integers(min_value=5, max_value=25),
    st.sampled_from([0.0, 0.01, 0.05, 0.2, 0.5]),
    st.integers(min_value=0, max_value=2**16),
)
samples = st.one_of(spread_samples, spread_samples, spread_samples, raw_samples)  # mostly samples that can win
modes = st.sampled_from(["device", "managed", "zero_copy", "registered", "system", "custom"])
facts = st.sampled_from([ORIN, THOR, H100, None])


@settings(max_examples=200, deadline=None)
@example(measured={"device": list(noisy(1.0)), "managed": list(noisy(2.0, seed=1))}, device=ORIN)  # a clear pick
@example(measured={"device": list(noisy(1.0)), "zero_copy": list(noisy(1.2, seed=1))}, device=H100)  # a PCIe tie
@given(measured=st.dictionaries(modes, samples, min_size=2, max_size=4), device=facts)
def test_the_advice_never_names_a_winner_whose_interval_overlaps_the_runner_up(
    measured: dict[str, list[float]], device: DeviceFacts | None
) -> None:
    rows = [rec(mode, values) for mode, values in measured.items()]
    (a,) = advise(rows, device).advice
    if a.pick is None:
        return
    assert a.leaders == (a.pick,)
    mine = measured[a.pick]
    for mode, values in measured.items():
        if mode == a.pick:
            continue
        assert len(values) >= 5 and len(mine) >= 5
        _, low, _ = ratio_ci(mine, values, confidence=CONFIDENCE)
        assert low > 1 + EQUIVALENCE_MARGIN  # its interval is clear of 1 (and of the margin): no overlap


# -- time and energy side by side ----------------------------------------------------------------------------------
def joules(mj: float, spread: float = 0.02) -> Energy:
    """An energy per call of ``mj`` millijoules with a +-``spread`` interval (NVML's counter on an H200)."""
    j = mj / 1e3
    return Energy(j, j * (1 - spread), j * (1 + spread), 400.0, 120.0, 5, 5000, 1.0, "NVML", "gpu-board", "interval")


def test_the_advice_states_time_and_energy_against_the_fastest_mode() -> None:
    """The H200's 64 MiB copy (docs/energy.md): zero_copy 47x the time of device, 5.1x its energy."""
    rows = [
        replace(rec("device", noisy(0.0352, seed=1)), energy=joules(10.9)),
        replace(rec("zero_copy", noisy(1.67, seed=2)), energy=joules(55.9)),
    ]
    (a,) = advise(rows, H100).advice
    assert a.energy == (
        f"zero_copy: {rows[1].median / rows[0].median:.3g}x the time, {55.9 / 10.9:.3g}x the energy of device",
    )
    assert f"  energy: {a.energy[0]}" in format_advice(advise(rows, H100))
    assert advise(rows, H100).advice[0].to_json()["energy"] == list(a.energy)


def test_the_advice_says_when_time_and_energy_pick_different_modes() -> None:
    """A mode 10% slower that uses clearly less energy (its interval below the fastest's): said; one whose energy is
    within the fastest's interval: not."""
    rows = [
        replace(rec("device", noisy(1.0, seed=1)), energy=joules(10.0)),
        replace(rec("managed", noisy(1.1, seed=2)), energy=joules(6.0)),
    ]
    (a,) = advise(rows, ORIN).advice
    assert a.energy[-1] == (
        "time and energy pick different modes: device is the fastest, managed uses the least energy (0.6x device's)"
    )
    close = [rows[0], replace(rows[1], energy=joules(9.9))]
    assert not any("pick different" in line for line in advise(close, ORIN).advice[0].energy)


def test_no_energy_line_where_a_mode_has_no_energy() -> None:
    rows = [replace(rec("device", noisy(1.0, seed=1)), energy=joules(10.0)), rec("managed", noisy(1.1, seed=2))]
    assert advise(rows, ORIN).advice[0].energy == ()
