"""measure.gate: the ``memmode_runtime`` gate's criteria, figures in and a failure message or None out; and
measure.defaults, the defaults written once."""

from __future__ import annotations

import pytest

from pytest_jetmem.measure import defaults
from pytest_jetmem.measure.gate import (
    RatioFigures,
    final_verdict,
    max_ms_failure,
    ratio_failure,
    strict_machine_failure,
)
from pytest_jetmem.measure.record import NotCompared, NotComparedWhy, RecordVerdict

FIGURES = RatioFigures(ratio=1.25, low=1.2, high=1.3, median=0.25, reference_median=0.2, n=10)


# -- max_ms ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("median", "max_ms"), [(0.5, 1.0), (1.0, 1.0), (5.0, None), (0.0, 1.0), (float("nan"), 1.0)])
def test_max_ms_holds_at_or_below_the_limit_and_without_one(median: float, max_ms: float | None) -> None:
    assert max_ms_failure("device fill: median 1 ms", median, max_ms) is None


def test_max_ms_fails_above_the_limit_with_the_figures_and_the_limit() -> None:
    failure = max_ms_failure("device fill: median 1.5 ms (MAD 0.01)", 1.5, 1.0)
    assert failure == "device fill: median 1.5 ms (MAD 0.01): median above max_ms=1"


# -- max_ratio ---------------------------------------------------------------------------------------------------
def test_ratio_figures_are_read_from_the_side_by_side_tuple() -> None:
    figures = RatioFigures.of((1.25, 1.2, 1.3, 0.25, 0.2, 10))
    assert figures == FIGURES
    assert isinstance(figures.n, int) and isinstance(figures.ratio, float)


@pytest.mark.parametrize("max_ratio", [1.25, 2.0, None])
def test_max_ratio_holds_at_or_below_the_limit_and_without_one(max_ratio: float | None) -> None:
    assert ratio_failure("managed", "fill:kernel", "device", FIGURES, max_ratio) is None


def test_max_ratio_fails_above_the_limit_with_its_interval_medians_and_samples() -> None:
    failure = ratio_failure("managed", "fill:kernel", "device", FIGURES, 1.1)
    assert failure == (
        "managed fill:kernel: managed/device = 1.250 (99% CI 1.200..1.300; medians 0.25 vs 0.2 ms, "
        "10 interleaved samples each) > max_ratio=1.1"
    )


# -- --jetmem-strict-machine -------------------------------------------------------------------------------------
OTHER = NotCompared(NotComparedWhy.OTHER_MACHINE, "baseline 'main' comes from another machine (device_name)")


def test_strict_machine_fails_a_baseline_from_another_machine() -> None:
    assert strict_machine_failure(OTHER, strict=True) == f"jetmem: {OTHER.text}"


@pytest.mark.parametrize(
    ("note", "strict"),
    [
        (OTHER, False),
        (None, True),
        (NotCompared(NotComparedWhy.NO_BASELINE, "no baseline 'main'"), True),
        (NotCompared(NotComparedWhy.NEW, "new (not in baseline)"), True),
    ],
    ids=["not-strict", "no-note", "no-baseline", "new"],
)
def test_strict_machine_fails_nothing_else(note: NotCompared | None, strict: bool) -> None:
    assert strict_machine_failure(note, strict=strict) is None


# -- the verdict -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("decided", [RecordVerdict.FAIL_MAX_MS, RecordVerdict.FAIL_RATIO, RecordVerdict.AMBIGUOUS])
def test_a_decided_verdict_stands(decided: RecordVerdict) -> None:
    assert final_verdict(decided, judged=True, reference_only=True, compared=False) is decided


@pytest.mark.parametrize(
    ("judged", "reference_only", "compared", "verdict"),
    [
        (True, False, False, RecordVerdict.OK),
        (True, False, True, RecordVerdict.OK),
        (True, True, False, RecordVerdict.REFERENCE),  # only the reference mode judged it: never "ok"
        (True, True, True, RecordVerdict.OK),  # the baseline judged it
        (False, False, False, RecordVerdict.REPORTED),
        (False, True, False, RecordVerdict.REPORTED),
    ],
)
def test_an_undecided_verdict(judged: bool, reference_only: bool, compared: bool, verdict: RecordVerdict) -> None:
    assert final_verdict(None, judged=judged, reference_only=reference_only, compared=compared) is verdict


# -- defaults ----------------------------------------------------------------------------------------------------
def test_the_options_say_the_defaults_of_measure_defaults() -> None:
    """The options' defaults and help are measure/defaults.py's, the baselines' window too."""
    from pytest_jetmem.measure import baseline
    from pytest_jetmem.plugin import options

    fail = options.setting("fail")
    assert float(fail.ini_default) == defaults.DEFAULT_FAIL_PCT
    assert f"(default {defaults.DEFAULT_FAIL_PCT:g})" in fail.help
    assert int(options.setting("window").ini_default) == defaults.WINDOW_SESSIONS == baseline.WINDOW_SESSIONS


def test_the_defaults_module_imports_nothing() -> None:
    """So that a module that must stay light can read a default."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(defaults.__file__).read_text("utf-8"))
    imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [getattr(n, "module", None) for n in imported] == ["__future__"]
