"""The ``memmode_runtime`` marker's arguments, validated (GPU-free)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pytest_jetmem.plugin import markers

if TYPE_CHECKING:
    import pytest

MARKER = markers.RUNTIME
ARGUMENTS = ("max_ms", "max_ratio", "max_energy_ratio", "relative_to", "scope", "baseline", "label", "runs")


@dataclass(frozen=True)
class RuntimeSpec:
    """What a test's runtimes must satisfy.

    ``max_ms``: the median of each judged measurement, in ms. ``max_ratio`` with ``relative_to``: the
    median in this item's mode over the median in the reference mode, timed side by side. ``max_energy_ratio``
    with ``relative_to``: the energy per call in this item's mode over the reference mode's, measured in turns
    (``kernel``-scope measurements, where the machine has a power source: docs/energy.md). ``scope``:
    judge only measurements of this scope (default: all). ``baseline``: take part in the regression
    check against ``--jetmem-compare`` (default True). ``label``: judge only measurements with this label.
    ``runs``: run the body this many times with fresh allocations (default ``--jetmem-runs``).
    """

    max_ms: float | None = None
    max_ratio: float | None = None
    relative_to: str | None = None
    scope: str | None = None
    baseline: bool = True
    label: str | None = None
    runs: int | None = None
    max_energy_ratio: float | None = None

    @property
    def side_by_side(self) -> bool:
        """Whether the body runs again in the reference mode (a time or an energy ratio is asked for)."""
        return self.max_ratio is not None or self.max_energy_ratio is not None

    def selects(self, label: str, scope: str) -> bool:
        return (self.scope is None or scope == self.scope) and (self.label is None or label == self.label)


def _positive_number(test: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{test}: @pytest.mark.{MARKER}({name}=...) expects a positive number, got {value!r}")
    return float(value)


def parse_runtime_marker(args: tuple[Any, ...], kwargs: dict[str, Any], test: str) -> RuntimeSpec:
    """Validate the marker's arguments; errors name the test, the argument and what was expected."""
    if args:
        raise ValueError(f"{test}: @pytest.mark.{MARKER} takes keyword arguments only ({', '.join(ARGUMENTS)})")
    unknown = sorted(set(kwargs) - set(ARGUMENTS))
    if unknown:
        raise ValueError(
            f"{test}: @pytest.mark.{MARKER} got unknown argument(s) {', '.join(unknown)}; "
            f"expected {', '.join(ARGUMENTS)}"
        )
    max_ms = kwargs.get("max_ms")
    if max_ms is not None:
        max_ms = _positive_number(test, "max_ms", max_ms)
    max_energy_ratio = kwargs.get("max_energy_ratio")
    if max_energy_ratio is not None:
        max_energy_ratio = _positive_number(test, "max_energy_ratio", max_energy_ratio)
    max_ratio, relative_to = _ratio(kwargs.get("max_ratio"), max_energy_ratio, kwargs.get("relative_to"), test)
    return RuntimeSpec(
        max_ms,
        max_ratio,
        relative_to,
        _scope(kwargs.get("scope"), test),
        _baseline(kwargs.get("baseline", True), test),
        _label(kwargs.get("label"), test),
        _runs(kwargs.get("runs"), test),
        max_energy_ratio,
    )


def _ratio(
    max_ratio: Any, max_energy_ratio: float | None, relative_to: Any, test: str
) -> tuple[float | None, str | None]:
    """``max_ratio`` (a positive number) or ``max_energy_ratio`` (checked already), and ``relative_to`` (a
    registered mode): a ratio and its reference mode, or neither."""
    if max_ratio is not None:
        max_ratio = _positive_number(test, "max_ratio", max_ratio)
    for name, value in (("max_ratio", max_ratio), ("max_energy_ratio", max_energy_ratio)):
        if value is not None and relative_to is None:
            raise ValueError(f"{test}: @pytest.mark.{MARKER}({name}=...) needs relative_to='<mode>'")
    if relative_to is None:
        return max_ratio, None
    from pytest_jetmem.cuda.modes import names  # here: a run without the marker loads no CUDA layer

    if relative_to not in names():
        raise ValueError(
            f"{test}: @pytest.mark.{MARKER}(relative_to={relative_to!r}): unknown memory mode; "
            f"expected one of {', '.join(names())}"
        )
    if max_ratio is None and max_energy_ratio is None:
        raise ValueError(
            f"{test}: @pytest.mark.{MARKER}(relative_to=...) needs max_ratio=<number> or max_energy_ratio=<number>"
        )
    return max_ratio, str(relative_to)


def _scope(scope: Any, test: str) -> str | None:
    from pytest_jetmem.measure.timing import SCOPES

    if scope is not None and scope not in SCOPES:
        raise ValueError(
            f"{test}: @pytest.mark.{MARKER}(scope={scope!r}): unknown scope; expected one of {', '.join(SCOPES)}"
        )
    return None if scope is None else str(scope)


def _baseline(baseline: Any, test: str) -> bool:
    if not isinstance(baseline, bool):
        raise ValueError(f"{test}: @pytest.mark.{MARKER}(baseline=...) expects True or False, got {baseline!r}")
    return baseline


def _label(label: Any, test: str) -> str | None:
    if label is not None and not isinstance(label, str):
        raise ValueError(f"{test}: @pytest.mark.{MARKER}(label=...) expects a string, got {label!r}")
    return label


def _runs(runs: Any, test: str) -> int | None:
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise ValueError(f"{test}: @pytest.mark.{MARKER}(runs=...) expects an integer >= 1, got {runs!r}")
    return runs


class _Measured(Protocol):
    @property
    def label(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def key(self) -> str: ...


def nothing_judged(spec: RuntimeSpec, measurements: Sequence[_Measured], test: str) -> str | None:
    """Why a ``memmode_runtime`` marker judged nothing in a body that returned (None: it judged something).

    A marker that judges nothing is a mistake (a typo in ``label=``, a forgotten ``jetmem.measure()``), never
    a pass: the test fails with this message.
    """
    if not measurements:
        return f"{test}: @pytest.mark.{MARKER}: the test never called jetmem.measure(), so there was nothing to judge"
    if any(spec.selects(m.label, m.scope) for m in measurements):
        return None
    chosen = ", ".join(f"{k}={v!r}" for k, v in (("label", spec.label), ("scope", spec.scope)) if v is not None)
    keys = ", ".join(dict.fromkeys(m.key for m in measurements))
    return (
        f"{test}: @pytest.mark.{MARKER}: {chosen} matched none of the {len(measurements)} measurement(s) "
        f"({keys}), so nothing was judged"
    )


def needs_jetmem(test: str) -> str:
    """The collection error of a ``memmode_runtime`` test that does not use the ``jetmem`` fixture."""
    return (
        f"{test}: @pytest.mark.{MARKER} judges what jetmem.measure() records, but the test does not use the "
        "jetmem fixture (add it, with @pytest.mark.memmode)"
    )


def item_spec(item: pytest.Item) -> RuntimeSpec | None:
    """The validated ``memmode_runtime`` marker of ``item`` (None: unmarked)."""
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return None
    return parse_runtime_marker(mark.args, dict(mark.kwargs), item.nodeid)


def self_ratio(spec: RuntimeSpec, modes: Sequence[str], test: str) -> str | None:
    """The collection error of a ``max_ratio`` whose test runs only in its reference mode (None: it has another).

    ``modes`` are the test's ``memmode`` marker's. The reference mode's ratio to itself is 1 by definition: a
    test that runs in no other mode would pass having compared nothing.
    """
    if spec.relative_to is None or any(mode != spec.relative_to for mode in modes):
        return None
    from pytest_jetmem.cuda.modes import names

    ref = spec.relative_to
    others = ", ".join(m for m in names() if m != ref)
    asked = (
        f"max_ratio={spec.max_ratio:g}"
        if spec.max_ratio is not None
        else f"max_energy_ratio={spec.max_energy_ratio:g}"
    )
    return (
        f"{test}: @pytest.mark.{MARKER}({asked}, relative_to={ref!r}): the test runs only in "
        f"{ref!r} (@pytest.mark.memmode), so the ratio would compare {ref} with itself and check nothing; "
        f"expected relative_to naming another mode than the test's ({others}), or more modes in "
        "@pytest.mark.memmode"
    )
