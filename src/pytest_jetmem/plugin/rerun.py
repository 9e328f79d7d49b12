"""Running a test body again with a fresh ``jetmem`` handle: extra runs and side-by-side reference runs.

A run is the body with fresh allocations (placement of pages, pinned memory and TLB state differ between
allocations, so runs, not samples, carry that noise). A reference run is the body in another memory mode,
whose work is then sampled interleaved with this mode's (A B A B ...), so a ratio holds on a noisy machine.
The item's other fixtures are reused, so none of them may depend on ``jetmem``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported where used: loading the plugin imports neither the handle nor numpy
    from pytest_jetmem.handle import Jetmem
    from pytest_jetmem.machine.power import PowerSource
    from pytest_jetmem.measure.energy import Energy
    from pytest_jetmem.measure.timing import Measurement
    from pytest_jetmem.plugin.handles import OpenHandle
    from pytest_jetmem.plugin.runtime_spec import RuntimeSpec


#: Per call index: the time ratio's figures (ratio, low, high, median, reference median, samples each).
TimeRatios = dict[int, tuple[float, float, float, float, float, int]]
#: Per call index: the energies of this mode and of the reference mode, measured in turns.
EnergyPairs = dict[int, tuple["Energy", "Energy"]]


def side_by_side(item: pytest.Function, handle: Jetmem, spec: RuntimeSpec) -> tuple[TimeRatios, EnergyPairs]:
    """Run the body again in the reference mode, then sample both modes interleaved: time ratios by call index, and
    where ``max_energy_ratio`` asks, each ``kernel``-scope call's energy in both modes, their windows in turns."""
    import numpy as np

    from pytest_jetmem.cuda.modes import get_mode
    from pytest_jetmem.errors import PowerReadError
    from pytest_jetmem.measure.energy import measure_energy
    from pytest_jetmem.measure.stats import StoppingRule, ratio_ci
    from pytest_jetmem.measure.timing import gpu_lock, kernel_run, run_samples

    ref_mode = spec.relative_to
    assert ref_mode is not None
    if handle.mode == ref_mode:
        same = {i: (1.0, 1.0, 1.0, m.median, m.median, len(m.samples)) for i, m in enumerate(handle.measurements)}
        return same, {}
    reason = get_mode(ref_mode).unsupported_reason(handle.device)
    if reason:
        pytest.fail(f"{item.nodeid}: cannot time the reference mode for max_ratio: {reason}", pytrace=False)
    first = _opened(item)
    source = _energy_source(item, first, spec)
    ref = _rerun_body(item, ref_mode, f"reference run in {ref_mode}")
    try:
        if len(ref.calls) != len(first.calls):
            pytest.fail(
                f"{item.nodeid}: the body called jetmem.measure {len(first.calls)} times in {handle.mode} "
                f"but {len(ref.calls)} times in {ref_mode}: max_ratio pairs them by call order",
                pytrace=False,
            )
        out: TimeRatios = {}
        energies: EnergyPairs = {}
        for i, (a_call, b_call) in enumerate(zip(first.calls, ref.calls, strict=True)):
            a, b = a_call.sampler(first.workspace), b_call.sampler(ref.workspace)
            try:
                with gpu_lock(handle.device.ordinal):
                    for _ in range(a_call.warmup):
                        a.sample()
                        b.sample()
                    (sa, _), (sb, _) = run_samples([a, b], first.recipe.stopping_rule or StoppingRule())
                    if source is not None and a_call.scope == "kernel":
                        assert first.recipe.energy is not None
                        runs = [kernel_run(first.workspace, a_call.fn), kernel_run(ref.workspace, b_call.fn)]
                        per_call = [float(np.median(sa)) / 1e3, float(np.median(sb)) / 1e3]
                        try:
                            ea, eb = measure_energy(source, runs, per_call, first.recipe.energy.rule)
                        except PowerReadError as exc:
                            pytest.fail(
                                f"{item.nodeid}: memmode_runtime(max_energy_ratio={spec.max_energy_ratio:g}) "
                                f"cannot be judged: {exc}",
                                pytrace=False,
                            )
                        energies[i] = (ea, eb)
            finally:
                a.close()
                b.close()
            ratio, lo, hi = ratio_ci(sb, sa)
            out[i] = (ratio, lo, hi, float(np.median(sa)), float(np.median(sb)), len(sa))
        return out, energies
    finally:
        problems = ref.close()
        if problems:
            warnings.warn(f"jetmem: reference run of {item.nodeid}: {'; '.join(problems)}", stacklevel=1)


def _energy_source(item: pytest.Function, first: OpenHandle, spec: RuntimeSpec) -> PowerSource | None:
    """The power source ``max_energy_ratio`` reads (None where it is not asked); the test fails naming the argument
    and why where it is asked and none works (``--jetmem-energy=off``, or the machine's reason)."""
    if spec.max_energy_ratio is None:
        return None
    setup = first.recipe.energy
    why = "--jetmem-energy=off" if setup is None else setup.reason
    source = setup.source if setup is not None else None
    if source is None:
        pytest.fail(
            f"{item.nodeid}: memmode_runtime(max_energy_ratio={spec.max_energy_ratio:g}) cannot be judged: no energy "
            f"is measured in this session ({why}); expected a power source (docs/energy.md) and --jetmem-energy=auto "
            "or on",
            pytrace=False,
        )
    return source


def _opened(item: pytest.Function) -> OpenHandle:
    """The handle the ``jetmem`` fixture built for ``item``: how it was built and the measure calls it made."""
    from pytest_jetmem.plugin.handles import opened_of

    opened = opened_of(item)
    if opened is None:  # the runners run only for items whose jetmem fixture ran
        raise AssertionError(f"{item.nodeid}: no jetmem handle was built for this item")
    return opened


def _rerun_body(item: pytest.Function, mode: str, what: str) -> OpenHandle:
    """Run the test body again with a fresh handle in ``mode``, built as the fixture's was (the caller closes it)."""
    _check_rerunnable(item, what)
    import dataclasses

    # no energy of its own: a reference run's and an extra run's measurements would measure it and drop it
    recipe = dataclasses.replace(_opened(item).recipe, energy=None)
    other = recipe.open(mode, f"{item.nodeid} ({what})")
    args = {name: item.funcargs[name] for name in item._fixtureinfo.argnames}
    args["jetmem"] = other.handle
    if "memmode" in args:
        args["memmode"] = mode
    try:
        item.obj(**args)
    except BaseException:
        other.close()
        raise
    return other


def more_runs(item: pytest.Function, handle: Jetmem, extra: int) -> None:
    """Repeat the body ``extra`` times with fresh allocations; fold each run into the measurements."""
    others: list[list[Measurement]] = []
    for r in range(extra):
        run = _rerun_body(item, handle.mode, f"run {r + 2}")
        h = run.handle
        try:
            if len(h.measurements) != len(handle.measurements):
                pytest.fail(
                    f"{item.nodeid}: run {r + 2} called jetmem.measure {len(h.measurements)} times, "
                    f"run 1 {len(handle.measurements)} times",
                    pytrace=False,
                )
            others.append(h.measurements)
        finally:
            run.close()
    for i, m in enumerate(handle.measurements):
        m.add_runs([run[i] for run in others])


def _check_rerunnable(item: pytest.Function, what: str = "a reference run") -> None:
    """The reference run reuses the item's fixtures: none of them may hold memory of this item's mode."""
    defs = item._fixtureinfo.name2fixturedefs
    tainted = {"jetmem", "memmode"}
    changed = True
    while changed:
        changed = False
        for name, fdefs in defs.items():
            if name not in tainted and any(set(fd.argnames) & tainted for fd in fdefs):
                tainted.add(name)
                changed = True
    bad = sorted(tainted - {"jetmem", "memmode"})
    if bad:
        pytest.fail(
            f"{item.nodeid}: {what} re-runs the test body with a fresh jetmem handle, but fixture(s) "
            f"{', '.join(bad)} depend on jetmem/memmode and would keep the first run's buffers; allocate in the body",
            pytrace=False,
        )
