"""The runtime half of the plugin: ``memmode_runtime`` assertions, baselines and the regression gate, the report.

Judging happens right after a test body returns (:func:`judge_body`, a step of the core's life:
:mod:`~pytest_jetmem.plugin.core`), so a failed assertion fails that item with its figures. Ratios to a reference
mode are measured side by side: the body runs again with a handle in the reference mode and both modes' work is
sampled interleaved (A B A B ...), so a ratio holds on a noisy machine, under ``-k`` selecting one mode, and when
xdist puts the modes on different workers.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import BaselineError, BaselineErrorKind, BaselineNotFound
from pytest_jetmem.plugin import markers, options
from pytest_jetmem.plugin.judging import (
    apply_comparison,
    at_other_clocks,
    attach_records,
    clock_mhz,
    over_pcie,
    publish_record,
    published_records,
    report_records,
)
from pytest_jetmem.plugin.rerun import more_runs, side_by_side
from pytest_jetmem.plugin.runtime_spec import RuntimeSpec, item_spec, parse_runtime_marker
from pytest_jetmem.plugin.sessions import (
    GateSession,
    device_session,
    gate_session,
    set_gate_session,
)

if TYPE_CHECKING:  # imported where used: a run without jetmem tests imports no handle, measure or numpy
    from pytest_jetmem.handle import Jetmem
    from pytest_jetmem.measure.baseline import Baseline
    from pytest_jetmem.measure.record import MeasurementRecord, NotCompared

MARKER = markers.RUNTIME
AMBIGUOUS_POLICIES = ("pass", "warn", "fail")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(
        parser,
        *("save", "compare", "fail", "baseline_dir", "strict_machine", "overwrite", "ambiguous"),
        *("window", "runs", "benchmark_json", "max_time", "noise", "counters"),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max_ms=None, max_ratio=None, relative_to=None, scope=None, baseline=True, label=None, "
        "runs=None): "
        "assert on the runtimes jetmem.measure() recorded (see pytest-jetmem docs)",
    )
    fail_pct = options.get_float(config, "fail", minimum=0.0, what="a percentage >= 0")
    max_time = options.get_float(config, "max_time", minimum=1e-3, what="seconds > 0")
    noise = options.get_float(config, "noise", minimum=1e-6, what="a fraction > 0")
    overwrite = bool(config.getoption("jetmem_overwrite"))
    device = device_session(config)
    device.set_stopping_rule(target_rel_noise=noise, max_time_s=max_time)
    device.count_unified_memory = _counters_policy(config) == "auto"
    bdir = options.get_str(config, "baseline_dir") or ".jetmem/baselines"
    gate = GateSession(
        device=device,
        session_id=GateSession.new_session_id(config),
        baseline_dir=Path(config.rootpath, bdir),
        save=options.baseline_name(config, "save", ini=False),
        compare_name=options.baseline_name(config, "compare"),
        fail_pct=fail_pct,
        strict_machine=options.get_bool(config, "strict_machine"),
        overwrite=overwrite,
        window=options.get_int(config, "window", minimum=1, what="an integer >= 1"),
        ambiguous=_ambiguous_policy(config),
        runs=options.get_int(config, "runs", minimum=1, what="an integer >= 1"),
        benchmark_json=_benchmark_json_path(config),
    )
    set_gate_session(config, gate)
    config.pluginmanager.register(_RowCollector(gate), "jetmem-rows")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(gate), "jetmem-xdist")


class _RowCollector:
    """Gathers the measurement records from reports (on the xdist controller too) for the summary."""

    def __init__(self, state: GateSession) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        records = report_records(report)
        if records:
            self.state.jetson_state_before()  # on an xdist controller: the first it hears of a measurement
            self.state.rows.extend(records)


class _XdistHooks:
    """Give every xdist worker the controller's session id, so their baseline entries merge."""

    def __init__(self, state: GateSession) -> None:
        self.state = state

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["jetmem_session"] = self.state.session_id

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        for err in output.get("jetmem_errors", []):
            if err not in self.state.errors:
                self.state.errors.append(err)
        _add_counter_misses(self.state, output.get("jetmem_counter_misses") or {})


def _ambiguous_policy(config: pytest.Config) -> str:
    value, source = options.raw(config, "ambiguous")
    text = str(value).strip().lower()
    if text not in AMBIGUOUS_POLICIES:
        raise pytest.UsageError(f"{source}: expected one of {', '.join(AMBIGUOUS_POLICIES)}, got {value!r}")
    return text


def _counters_policy(config: pytest.Config) -> str:
    value, source = options.raw(config, "counters")
    text = str(value).strip().lower()
    if text not in options.COUNTERS_POLICIES:
        raise pytest.UsageError(f"{source}: expected one of {', '.join(options.COUNTERS_POLICIES)}, got {value!r}")
    return text


def _gate(config: pytest.Config) -> GateSession:
    gate = gate_session(config)
    assert gate is not None  # set by this half's pytest_configure
    return gate


def pytest_sessionstart(session: pytest.Session) -> None:
    state = _gate(session.config)
    if state.compare_name is not None:
        try:  # a corrupt or foreign baseline stops the session before any test runs; the file is untouched
            state.store.load(state.compare_name)
        except BaselineNotFound as exc:  # said at the end even where nothing ran (no GPU), and on the controller
            state.baseline_checked = True
            state.baseline_skip = _no_baseline(state.compare_name, exc.path)
        except BaselineError as exc:
            raise pytest.UsageError(f"--jetmem-compare: {exc}") from None


def _parse(mark: pytest.Mark, nodeid: str) -> RuntimeSpec:
    return parse_runtime_marker(mark.args, dict(mark.kwargs), nodeid)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    spec = markers.validated(metafunc.definition, MARKER, _parse)
    if spec is None:
        return
    if spec.relative_to is not None and metafunc.definition.get_closest_marker(markers.MEMMODE) is None:
        pytest.fail(
            f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER}(relative_to=...) needs @pytest.mark.memmode",
            pytrace=False,
        )


# -- judging (steps of the core's life: plugin.core) -----------------------------------------------------------
def before_body(pyfuncitem: pytest.Function) -> None:
    """Before a body that takes the ``jetmem`` handle: the Jetson's state before the session's first measurement."""
    if "jetmem" in pyfuncitem.funcargs:
        _gate(pyfuncitem.config).jetson_state_before()


def judge_body(pyfuncitem: pytest.Function) -> None:
    """After a body that ran in this process returned: extra runs, then its measurements judged and published."""
    handle = pyfuncitem.funcargs.get("jetmem")
    if handle is None:
        return
    from pytest_jetmem.handle import Jetmem

    if isinstance(handle, Jetmem) and handle.measurements:
        spec = item_spec(pyfuncitem)
        runs = (spec.runs if spec and spec.runs else None) or _gate(pyfuncitem.config).runs
        if runs > 1:
            try:
                more_runs(pyfuncitem, handle, runs - 1)
            except pytest.fail.Exception as exc:
                if spec is not None:
                    raise
                warnings.warn(f"jetmem: {pyfuncitem.nodeid}: kept a single run: {exc.msg}", stacklevel=1)
        failures = _judge(pyfuncitem, handle, spec)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def _no_baseline(name: str, path: object) -> NotCompared:
    """What the run says of a ``--jetmem-compare`` baseline that does not exist."""
    from pytest_jetmem.measure.record import NotCompared, NotComparedWhy

    return NotCompared(NotComparedWhy.NO_BASELINE, f"no baseline {name!r} ({path}): nothing compared")


def _baseline(config: pytest.Config) -> tuple[Baseline | None, NotCompared | None]:
    """The baseline to compare with, or (None, why not). Loaded and checked once per session."""
    state = _gate(config)
    if state.compare_name is None:
        return None, None
    if not state.baseline_checked:
        state.baseline_checked = True
        try:
            base = state.store.load(state.compare_name)
        except BaselineNotFound as exc:
            state.baseline_skip = _no_baseline(state.compare_name, exc.path)
            return None, state.baseline_skip
        except BaselineError as exc:
            raise pytest.UsageError(f"--jetmem-compare: {exc}") from None
        machine = state.machine()
        diffs = machine.mismatches(base.machine) if machine else ["this machine: no GPU"]
        if diffs:
            from pytest_jetmem.measure.record import NotCompared, NotComparedWhy

            state.baseline_skip = NotCompared(
                NotComparedWhy.OTHER_MACHINE,
                f"baseline {state.compare_name!r} comes from another machine ({'; '.join(diffs)}): "
                + ("failing its comparisons (--jetmem-strict-machine)" if state.strict_machine else "not compared"),
            )
            warnings.warn(f"jetmem: {state.baseline_skip.text}", stacklevel=1)
        state.baseline = base
    if state.baseline_skip is not None:
        return None, state.baseline_skip
    return state.baseline, None


def _judge(item: pytest.Function, handle: Jetmem, spec: RuntimeSpec | None) -> list[str]:
    from pytest_jetmem.measure.baseline import Entry, entry_key
    from pytest_jetmem.measure.compare import compare_sessions
    from pytest_jetmem.measure.record import NotCompared, NotComparedWhy, RecordBuilder, RecordVerdict, SideBySide

    state = _gate(item.config)
    failures: list[str] = []
    marked = spec is not None
    spec = spec or RuntimeSpec()  # unmarked: reported with the defaults, never judged
    judged = [m for m in handle.measurements if spec.selects(m.label, m.scope)]
    ratios = side_by_side(item, handle, spec) if spec.max_ratio is not None else {}
    # the item in max_ratio's reference mode: its ratio is 1 by definition, so max_ratio judges nothing there
    reference = spec.max_ratio is not None and handle.mode == spec.relative_to
    base, base_note = _baseline(item.config)
    for i, m in enumerate(handle.measurements):
        record = RecordBuilder.measured(item.nodeid, m)
        is_judged = marked and m in judged
        compared = False
        if is_judged and spec.max_ms is not None and m.median > spec.max_ms:
            failures.append(f"{m.describe()}: median above max_ms={spec.max_ms:g}")
            record.verdict = RecordVerdict.FAIL_MAX_MS
        if i in ratios and spec.relative_to is not None:
            ratio, lo, hi, own_median, ref_median, n = ratios[i]
            record.ratio = SideBySide(float(ratio), (float(lo), float(hi)), spec.relative_to, float(ref_median))
            if is_judged and not reference and spec.max_ratio is not None and ratio > spec.max_ratio:
                failures.append(
                    f"{m.mode} {m.key}: {m.mode}/{spec.relative_to} = {ratio:.3f} (99% CI {lo:.3f}..{hi:.3f}; "
                    f"medians {own_median:.4g} vs {ref_median:.4g} ms, {n} interleaved samples each) "
                    f"> max_ratio={spec.max_ratio:g}"
                )
                record.verdict = RecordVerdict.FAIL_RATIO
        key = entry_key(item.nodeid, m.mode, m.key)
        runs = tuple(map(tuple, m.runs))
        sm_mhz = clock_mhz(record.conditions.clocks)
        state.entries[key] = Entry(
            item.nodeid,
            m.mode,
            m.key,
            tuple(m.samples),
            m.first_call_ms,
            runs=runs,
            run_sessions=(state.session_id,) * len(runs) if runs else (),
            sm_mhz=sm_mhz,
        )
        if state.compare_name is not None:
            if base is None:
                record.baseline = base_note
                if (
                    state.strict_machine
                    and base_note is not None
                    and base_note.why is NotComparedWhy.OTHER_MACHINE
                    and is_judged
                    and spec.baseline
                ):
                    failures.append(f"jetmem: {base_note.text}")
            else:
                entry = base.entry(key)
                if entry is None:
                    record.baseline = NotCompared(NotComparedWhy.NEW, "new (not in baseline)")
                else:
                    cmp = compare_sessions(entry.sessions(), m.runs or [m.samples], state.fail_pct)
                    cmp = at_other_clocks(cmp, entry.sm_mhz, sm_mhz)
                    cmp = over_pcie(cmp, m.mode, handle.device.integrated)
                    compared = is_judged and spec.baseline
                    failure = apply_comparison(item, state, record, cmp, judged=compared)
                    if failure:
                        failures.append(failure)
        if is_judged and reference and spec.max_ms is None and not compared and record.verdict is None:
            record.verdict = RecordVerdict.REFERENCE  # said in the table and JUnit, not passed off as "ok"
        publish_record(item, record.build(RecordVerdict.OK if is_judged else RecordVerdict.REPORTED))
    return failures


def publish(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """On the call report: the records judged for ``item`` (they travel with it: xdist, a relay, a child)."""
    if call.when == "call":
        records = published_records(item)
        if records:
            attach_records(report, records)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = _gate(config)
    if state.save and state.entries:
        machine = state.machine()
        if machine is not None:
            try:
                state.store.save(
                    state.save,
                    machine,
                    state.entries,
                    state.session_id,
                    overwrite=state.overwrite,
                    append=not state.overwrite,
                    window=state.window,
                )
            except BaselineError as exc:
                hint = " (pass --jetmem-overwrite to replace it)" if exc.kind is BaselineErrorKind.CANNOT_ADD else ""
                state.errors.append(f"--jetmem-save: {exc}{hint}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _add_counter_misses(state, _counter_misses(state))
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["jetmem_errors"] = list(state.errors)  # the controller reports them and fails the run
        workeroutput["jetmem_counter_misses"] = state.counter_misses  # the controller says them, once
    elif state.errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if state.benchmark_json and state.rows and not hasattr(config, "workerinput"):
        _write_benchmark_json(session, state, state.benchmark_json)


def _counter_misses(state: GateSession) -> dict[str, dict[str, int]]:
    """This process's measurements that wanted unified-memory counters and got none: {reason: {mode: count}}."""
    cuda = state.device.cuda
    counters = cuda.counters if cuda is not None else None
    if counters is None or not counters.missed or counters.reason is None:
        return {}
    return {counters.reason: dict(counters.missed)}


def _add_counter_misses(state: GateSession, misses: dict[str, dict[str, int]]) -> None:
    for reason, per_mode in misses.items():
        mine = state.counter_misses.setdefault(reason, {})
        for mode, n in per_mode.items():
            mine[mode] = mine.get(mode, 0) + int(n)


def _benchmark_json_path(config: pytest.Config) -> str | None:
    """``--jetmem-benchmark-json``, checked before the session starts (a directory, a path below a file: refused)."""
    path = options.get_str(config, "benchmark_json", ini=False)
    if path is not None and not hasattr(config, "workerinput"):
        options.check_output_path(path, "--jetmem-benchmark-json")
    return path


def _write_benchmark_json(session: pytest.Session, state: GateSession, path: str) -> None:
    """Write the benchmark JSON; a failure is an error of the run that says what was lost, never a traceback."""
    from pytest_jetmem.measure.benchjson import benchmark_json, write_benchmark_json

    machine = state.machine()
    try:
        write_benchmark_json(path, benchmark_json(state.rows, machine.to_dict() if machine else {}))
    except OSError as exc:
        state.errors.append(
            f"--jetmem-benchmark-json: cannot write {path}: {exc.strerror or exc}; the timings of "
            f"{len(state.rows)} measurement(s) were not written there (the table above has them)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = _gate(config)
    tr = terminalreporter
    if state.rows:
        tr.section("jetmem runtimes")
        for line in format_table(state.rows):
            tr.write_line(line)
        if state.save and not state.errors:
            tr.write_line(f"jetmem: saved baseline {state.save!r} in {state.store.directory}")
        from pytest_jetmem.machine.jetson import for_device, read_jetson_state, sysroot, timing_warnings

        after = read_jetson_state(sysroot())
        integrated = state.device.probed_info.integrated if state.device.probed_info is not None else None
        if state.jetson_before is not None and for_device(state.jetson_before, integrated).is_jetson:
            for w in timing_warnings(state.jetson_before, after):
                tr.write_line(f"jetmem: warning: {w}", yellow=True)
    if state.counter_misses:
        from pytest_jetmem.cuda.counters import missed_note

        for reason, per_mode in state.counter_misses.items():
            tr.write_line(f"jetmem: {missed_note(reason, per_mode)}", yellow=True)
    if state.baseline_skip is not None:  # also where nothing was measured (no GPU): a missing baseline is never silent
        tr.write_line(f"jetmem: {state.baseline_skip.text}", yellow=True)
    _nothing_saved_note(tr, state)
    for err in state.errors:
        tr.write_line(f"jetmem: error: {err}", red=True)


def _nothing_saved_note(tr: Any, state: GateSession) -> None:
    """Say that ``--jetmem-save`` saved nothing, or ``--jetmem-compare`` compared nothing, where no test measured
    anything (the controller sees every row)."""
    if state.save and not state.rows:
        tr.write_line(
            f"jetmem: --jetmem-save={state.save}: nothing was measured, so no baseline was saved", yellow=True
        )
    if state.compare_name and not state.rows and state.baseline_skip is None:
        tr.write_line(
            f"jetmem: --jetmem-compare={state.compare_name}: nothing was measured, so nothing was compared with it",
            yellow=True,
        )


def format_table(rows: Sequence[MeasurementRecord]) -> list[str]:
    """One row per test, mode and measurement: median, spread, ratio, first call, baseline delta, verdict."""
    from pytest_jetmem.measure.record import BaselineComparison

    header: tuple[str, ...] = (
        "test",
        "mode",
        "what",
        "median ms",
        "MAD ms",
        "n",
        "ratio",
        "first call ms",
        "vs baseline",
        "verdict",
    )
    counted = any(r.counters is not None for r in rows)  # no column where nothing was counted: never zeros
    if counted:
        header = (*header, "unified memory")
    body = []
    for r in rows:
        stats, judgement = r.statistics, r.judgement
        side = judgement.ratio
        ratio = f"{side.ratio:.2f}x {side.relative_to}" if side is not None else ""
        cmp = judgement.baseline
        if isinstance(cmp, BaselineComparison):
            base = f"{cmp.change_pct:+.1f}% {cmp.verdict.value}"
        else:
            base = cmp.text if cmp is not None else ""
        first = f"{stats.first_call_ms:.4g}" if stats.first_call_ms is not None else ""
        body.append(
            (
                r.nodeid.rsplit("::", 1)[-1],
                r.mode,
                r.key,
                f"{stats.median:.4g}",
                f"{stats.mad:.2g}",
                str(stats.n),
                ratio,
                first,
                base[:40],
                judgement.verdict.value,
                *((r.counters.summary() if r.counters is not None else "",) if counted else ()),
            )
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*b) for b in body)]
    return [line.rstrip() for line in lines]  # the last column is ragged: no padding after it


__all__ = ["format_table"]
