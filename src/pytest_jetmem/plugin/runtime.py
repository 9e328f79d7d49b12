"""The runtime half of the plugin: ``memmode_runtime`` assertions, baselines and the regression gate, the report.

Judging happens right after a test body returns (:func:`judge_body`, a step of the core's life:
:mod:`~pytest_jetmem.plugin.core`), so a failed assertion fails that item with its figures. Ratios to a reference
mode are measured side by side: the body runs again with a handle in the reference mode and both modes' work is
sampled interleaved (A B A B ...), so a ratio holds on a noisy machine, under ``-k`` selecting one mode, and when
xdist puts the modes on different workers.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
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
)
from pytest_jetmem.plugin.records import session_records
from pytest_jetmem.plugin.rerun import more_runs, side_by_side
from pytest_jetmem.plugin.runtime_spec import RuntimeSpec, item_spec, parse_runtime_marker
from pytest_jetmem.plugin.sessions import (
    GateSession,
    Interruptions,
    device_session,
    gate_session,
    loaded,
    note_interrupted,
    owns_session,
    session_interrupted,
    set_gate_session,
)

if TYPE_CHECKING:  # imported where used: a run without jetmem tests imports no handle, measure or numpy
    from pytest_jetmem.handle import Jetmem
    from pytest_jetmem.measure.baseline import Baseline, Entry
    from pytest_jetmem.measure.compare import Comparison
    from pytest_jetmem.measure.energy import Energy
    from pytest_jetmem.measure.record import (
        NotCompared,
        RecordBuilder,
        RecordVerdict,
    )
    from pytest_jetmem.measure.timing import Measurement

MARKER = markers.RUNTIME


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(
        parser,
        *("save", "compare", "fail", "baseline_dir", "strict_machine", "overwrite", "ambiguous"),
        *("window", "runs", "benchmark_json", "max_time", "noise", "counters", "energy", "energy_fail"),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max_ms=None, max_ratio=None, max_energy_ratio=None, relative_to=None, scope=None, baseline=True, "
        "label=None, runs=None): "
        "assert on the runtimes jetmem.measure() recorded (see pytest-jetmem docs)",
    )
    fail_pct = options.get_float(config, "fail", minimum=0.0, what="a percentage >= 0")
    max_time = options.get_float(config, "max_time", minimum=1e-3, what="seconds > 0")
    noise = options.get_float(config, "noise", minimum=1e-6, what="a fraction > 0")
    overwrite = bool(config.getoption("jetmem_overwrite"))
    device = device_session(config)
    device.set_stopping_rule(target_rel_noise=noise, max_time_s=max_time)
    device.count_unified_memory = options.get_choice(config, "counters") == "auto"
    device.energy_policy = options.get_choice(config, "energy")
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
        ambiguous=options.get_choice(config, "ambiguous"),
        runs=options.get_int(config, "runs", minimum=1, what="an integer >= 1"),
        benchmark_json=_benchmark_json_path(config),
        energy_fail_pct=options.energy_threshold(config, device.energy_policy),
        results_store=options.store_url(config),
        rootdir=config.rootpath,
    )
    set_gate_session(config, gate)
    gate.rows = session_records(config).all  # one list of the session's records, gathered once
    # the Jetson's state before the first measurement (on an xdist controller: the first it hears of one)
    session_records(config).at_first.append(gate.jetson_state_before)
    config.pluginmanager.register(Interruptions(config), "jetmem-interruptions")
    if loaded(config, "xdist"):
        config.pluginmanager.register(_XdistHooks(gate, config), "jetmem-xdist")


class _XdistHooks:
    """Give every xdist worker the controller's session id, so their baseline entries merge; hear what each
    worker's session could not say itself (errors, counters missed, an interruption)."""

    def __init__(self, state: GateSession, config: pytest.Config) -> None:
        self.state = state
        self.config = config

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["jetmem_session"] = self.state.session_id

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        for err in output.get("jetmem_errors", []):
            if err not in self.state.errors:
                self.state.errors.append(err)
        _add_counter_misses(self.state, output.get("jetmem_counter_misses") or {})
        if output.get("jetmem_interrupted"):  # that worker saved nothing: the run says so
            note_interrupted(self.config, str(output["jetmem_interrupted"]))


def _gate(config: pytest.Config) -> GateSession:
    gate = gate_session(config)
    assert gate is not None  # set by this half's pytest_configure
    return gate


def pytest_sessionstart(session: pytest.Session) -> None:
    state = _gate(session.config)
    if state.compare_name is not None and state.results_store is None:
        try:  # a corrupt or foreign baseline stops the session before any test runs; the file is untouched
            state.store.load(state.compare_name)
        except BaselineNotFound as exc:  # said at the end even where nothing ran (no GPU), and on the controller
            state.baseline_checked = True
            state.baseline_skip = _no_baseline(state, exc)
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

    if not isinstance(handle, Jetmem) or not handle.measurements:
        return
    spec = item_spec(pyfuncitem)
    _extra_runs(pyfuncitem, handle, spec)
    failures = _judge(pyfuncitem, handle, spec)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def _extra_runs(item: pytest.Function, handle: Jetmem, spec: RuntimeSpec | None) -> None:
    """Run the body again with fresh allocations as the marker's ``runs`` (else ``--jetmem-runs``) asks; where an
    extra run fails, a marked test fails and an unmarked one keeps its single run with a warning."""
    runs = (spec.runs if spec and spec.runs else None) or _gate(item.config).runs
    if runs <= 1:
        return
    try:
        more_runs(item, handle, runs - 1)
    except pytest.fail.Exception as exc:
        if spec is not None:
            raise
        warnings.warn(f"jetmem: {item.nodeid}: kept a single run: {exc.msg}", stacklevel=1)


def _no_baseline(state: GateSession, exc: BaselineError) -> NotCompared:
    """What the run says of a ``--jetmem-compare`` baseline that does not exist (in a results store: why not)."""
    from pytest_jetmem.measure.record import NotCompared, NotComparedWhy

    name = state.compare_name
    if state.results_store is not None:
        return NotCompared(NotComparedWhy.NO_BASELINE, f"--jetmem-compare={name}: {exc.where}: {exc.reason}")
    return NotCompared(NotComparedWhy.NO_BASELINE, f"no baseline {name!r} ({exc.where}): nothing compared")


def _baseline(config: pytest.Config) -> tuple[Baseline | None, NotCompared | None]:
    """The baseline to compare with, or (None, why not). Loaded and checked once per session."""
    state = _gate(config)
    if state.compare_name is None:
        return None, None
    if not state.baseline_checked:
        state.baseline_checked = True
        try:
            base = state.load_baseline(state.compare_name)
        except BaselineNotFound as exc:
            state.baseline_skip = _no_baseline(state, exc)
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


@dataclass(frozen=True)
class _Judging:
    """What judging one item's measurements shares: the item, its handle and spec, its side-by-side ratios (by
    call index) and the baseline to compare with (or why there is none)."""

    item: pytest.Function
    handle: Jetmem
    spec: RuntimeSpec
    ratios: dict[int, tuple[Any, ...]]
    energies: dict[int, tuple[Energy, Energy]]
    base: Baseline | None
    base_note: NotCompared | None

    @property
    def reference(self) -> bool:
        """The item runs in its ratio's reference mode: its ratio is 1 by definition, so judges nothing."""
        return self.spec.side_by_side and self.handle.mode == self.spec.relative_to


def _judge(item: pytest.Function, handle: Jetmem, spec: RuntimeSpec | None) -> list[str]:
    """Judge every measurement of ``item`` (``spec`` None: unmarked, reported with the defaults, never judged),
    keep its baseline entry and publish its record; the failure messages."""
    from pytest_jetmem.measure.record import RecordBuilder

    marked = spec is not None
    spec = spec or RuntimeSpec()
    ratios, energies = side_by_side(item, handle, spec) if spec.side_by_side else ({}, {})
    judging = _Judging(item, handle, spec, ratios, energies, *_baseline(item.config))
    failures: list[str] = []
    for i, m in enumerate(handle.measurements):
        record = RecordBuilder.measured(item.nodeid, m)
        _remember(_gate(item.config), item.nodeid, m, clock_mhz(record.conditions.clocks))
        failures += _judge_one(judging, i, m, record, judged=marked and spec.selects(m.label, m.scope))
        publish_record(item, record.build())
    return failures


def _remember(state: GateSession, nodeid: str, m: Measurement, sm_mhz: float | None) -> None:
    """Keep measurement ``m`` of test ``nodeid`` as this session's baseline entry (saved by ``--jetmem-save``)."""
    from pytest_jetmem.measure.baseline import Entry, entry_key
    from pytest_jetmem.measure.gate import energy_samples_mj, energy_scope

    runs = tuple(map(tuple, m.runs))
    state.entries[entry_key(nodeid, m.mode, m.key)] = Entry(
        nodeid,
        m.mode,
        m.key,
        tuple(m.samples),
        m.first_call_ms,
        runs=runs,
        run_sessions=(state.session_id,) * len(runs),
        sm_mhz=sm_mhz,
    )
    windows = energy_samples_mj(m.energy)
    if windows is not None:  # the energy per call as an entry of its own (unit mJ), as the results store keeps it
        scope = energy_scope(m.label)
        state.entries[entry_key(nodeid, m.mode, scope)] = Entry(
            nodeid, m.mode, scope, windows, unit="mJ", sm_mhz=sm_mhz
        )


def _judge_one(judging: _Judging, i: int, m: Measurement, record: RecordBuilder, *, judged: bool) -> list[str]:
    """Judge measurement ``i`` (``m``) into ``record`` by the gate's criteria: ``max_ms``, ``max_ratio``, the
    baseline; the failure messages (a later criterion's verdict wins the record)."""
    from pytest_jetmem.measure.gate import final_verdict, max_ms_failure
    from pytest_jetmem.measure.record import RecordVerdict

    max_ms = judging.spec.max_ms
    failures = [
        _failed(record, max_ms_failure(m.describe(), m.median, max_ms) if judged else None, RecordVerdict.FAIL_MAX_MS),
        _failed(record, _ratio(judging, i, m, record, judged=judged), RecordVerdict.FAIL_RATIO),
        _failed(record, _energy_ratio(judging, i, m, record, judged=judged), RecordVerdict.FAIL_ENERGY_RATIO),
    ]
    compared, failure = _against_baseline(judging, m, record, judged=judged)
    energy_compared, energy_failure = _energy_against_baseline(judging, m, record, judged=judged)
    record.verdict = final_verdict(
        record.verdict,
        judged=judged,
        reference_only=judging.reference and max_ms is None,
        compared=compared or energy_compared,
    )
    return [f for f in (*failures, failure, energy_failure) if f]


def _failed(record: RecordBuilder, failure: str | None, verdict: RecordVerdict) -> str | None:
    """``failure``, with ``verdict`` put on ``record`` where there is one."""
    if failure is not None:
        record.verdict = verdict
    return failure


def _ratio(judging: _Judging, i: int, m: Measurement, record: RecordBuilder, *, judged: bool) -> str | None:
    """The side-by-side ratio of measurement ``i`` into ``record``; its ``max_ratio`` failure where judged."""
    from pytest_jetmem.measure.gate import RatioFigures, ratio_failure
    from pytest_jetmem.measure.record import SideBySide

    relative_to, raw = judging.spec.relative_to, judging.ratios.get(i)
    if raw is None or relative_to is None:
        return None
    figures = RatioFigures.of(raw)
    record.ratio = SideBySide(figures.ratio, (figures.low, figures.high), relative_to, figures.reference_median)
    if not judged or judging.reference:
        return None
    return ratio_failure(m.mode, m.key, relative_to, figures, judging.spec.max_ratio)


def _energy_ratio(judging: _Judging, i: int, m: Measurement, record: RecordBuilder, *, judged: bool) -> str | None:
    """The energy ratio of measurement ``i`` into ``record``; its ``max_energy_ratio`` failure where judged."""
    from pytest_jetmem.measure.gate import judge_energy_ratio

    spec = judging.spec
    judged = judged and not judging.reference
    return judge_energy_ratio(record, judging.energies.get(i), spec.relative_to, spec.max_energy_ratio, judged=judged)


def _against_baseline(
    judging: _Judging, m: Measurement, record: RecordBuilder, *, judged: bool
) -> tuple[bool, str | None]:
    """``--jetmem-compare``: measurement ``m`` compared with its baseline entry into ``record``; whether it was
    judged by the comparison, and its failure message (None: it passes, or nothing was compared)."""
    from pytest_jetmem.measure.baseline import entry_key
    from pytest_jetmem.measure.gate import strict_machine_failure
    from pytest_jetmem.measure.record import NotCompared, NotComparedWhy

    state = _gate(judging.item.config)
    if state.compare_name is None:
        return False, None
    takes_part = judged and judging.spec.baseline
    if judging.base is None:
        record.baseline = judging.base_note
        return False, strict_machine_failure(judging.base_note, strict=state.strict_machine) if takes_part else None
    entry = judging.base.entry(entry_key(judging.item.nodeid, m.mode, m.key))
    if entry is None:
        record.baseline = NotCompared(NotComparedWhy.NEW, "new (not in baseline)")
        return False, None
    cmp = _comparison(state, entry, m, record, integrated=judging.handle.device.integrated)
    return takes_part, apply_comparison(judging.item, state, record, cmp, judged=takes_part)


def _energy_against_baseline(
    judging: _Judging, m: Measurement, record: RecordBuilder, *, judged: bool
) -> tuple[bool, str | None]:
    """``--jetmem-compare``: the energy per call of ``m`` against its baseline entry's into ``record`` (where both
    were measured); judged only under ``--jetmem-energy-fail``. Whether it was judged, and its failure."""
    from pytest_jetmem.measure.baseline import entry_key
    from pytest_jetmem.measure.gate import energy_comparison, energy_scope
    from pytest_jetmem.measure.record import NotCompared

    state = _gate(judging.item.config)
    if state.compare_name is None or judging.base is None or m.energy is None:
        return False, None
    entry = judging.base.entry(entry_key(judging.item.nodeid, m.mode, energy_scope(m.label)))
    threshold = state.energy_fail_pct if state.energy_fail_pct is not None else state.fail_pct
    cmp = energy_comparison(entry, m.energy, threshold)
    if isinstance(cmp, NotCompared):
        record.energy_baseline = cmp
        return False, None
    then_mhz = entry.sm_mhz if entry is not None else None
    cmp = at_other_clocks(cmp, then_mhz, clock_mhz(record.conditions.clocks))
    cmp = over_pcie(cmp, m.mode, judging.handle.device.integrated)
    takes_part = judged and judging.spec.baseline and state.energy_fail_pct is not None
    return takes_part, apply_comparison(judging.item, state, record, cmp, judged=takes_part, energy=True)


def _comparison(
    state: GateSession, entry: Entry, m: Measurement, record: RecordBuilder, *, integrated: bool | None
) -> Comparison:
    """``m`` against its baseline entry: the sessions' noise, then the calls a comparison cannot make (other clocks,
    zero-copy over PCIe on a discrete GPU)."""
    from pytest_jetmem.measure.compare import compare_sessions

    cmp = compare_sessions(entry.sessions(), m.runs or [m.samples], state.fail_pct)
    cmp = at_other_clocks(cmp, entry.sm_mhz, clock_mhz(record.conditions.clocks))
    return over_pcie(cmp, m.mode, integrated)


def publish(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """On the call report: the records judged for ``item`` (they travel with it: xdist, a relay, a child)."""
    if call.when == "call":
        records = published_records(item)
        if records:
            attach_records(report, records)


def end(session: pytest.Session) -> None:
    """The session's end here (a step of :mod:`~pytest_jetmem.plugin.finish`): the baseline saved, the counters
    missed added up; a worker hands its errors to the controller, the owner writes ``--jetmem-benchmark-json``."""
    config = session.config
    if gate_session(config) is None:  # this half is blocked (-p no:...)
        return
    state = _gate(config)
    _save_baseline(session, state)
    _add_counter_misses(state, _counter_misses(state))
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["jetmem_errors"] = list(state.errors)  # the controller reports them and fails the run
        workeroutput["jetmem_counter_misses"] = state.counter_misses  # the controller says them, once
        workeroutput["jetmem_interrupted"] = session_interrupted(config)  # the controller says nothing was saved
    elif state.errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if state.benchmark_json and owns_session(config):  # also with nothing measured: a valid file
        _write_benchmark_json(session, state, state.benchmark_json)


def _save_baseline(session: pytest.Session, state: GateSession) -> None:
    """``--jetmem-save``: this process's entries merged into the baseline, unless the session was interrupted
    (:func:`session_interrupted`: the file stays as it was) or nothing was measured; a refusal is an error of the
    run that says how to get past it."""
    if not state.save or not state.entries or session_interrupted(session.config):
        return
    machine = state.machine()
    if machine is None:
        return
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
    if path is not None and owns_session(config):
        options.check_output_path(path, "--jetmem-benchmark-json")
    return path


def _write_benchmark_json(session: pytest.Session, state: GateSession, path: str) -> None:
    """Write the benchmark JSON; a failure is an error of the run that says what was lost, never a traceback."""
    from pytest_jetmem.measure.benchjson import benchmark_json, write_benchmark_json, written_line

    machine = state.machine()
    try:
        write_benchmark_json(path, benchmark_json(state.rows, machine.to_dict() if machine else {}))
    except OSError as exc:
        state.errors.append(
            f"--jetmem-benchmark-json: cannot write {path}: {exc.strerror or exc}; the timings of "
            f"{len(state.rows)} measurement(s) were not written there (the table above has them)"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    session.config.stash[_BENCHMARK_JSON_WRITTEN] = written_line(path, len(state.rows))


#: The terminal's line on the benchmark JSON written (set where it was written).
_BENCHMARK_JSON_WRITTEN = pytest.StashKey[str]()


def say(tr: Any, config: pytest.Config) -> None:
    """The terminal's end of session: the runtimes table and what became of the baseline, the counters missed, a
    missing baseline, the benchmark JSON written (the errors come last: :func:`errors`)."""
    state = gate_session(config)
    if state is None:
        return
    if state.rows:
        _runtimes_section(tr, state, session_interrupted(config))
    if state.counter_misses:
        from pytest_jetmem.cuda.counters import missed_note

        for reason, per_mode in state.counter_misses.items():
            tr.write_line(f"jetmem: {missed_note(reason, per_mode)}", yellow=True)
    if state.baseline_skip is not None:  # also where nothing was measured (no GPU): a missing baseline is never silent
        tr.write_line(f"jetmem: {state.baseline_skip.text}", yellow=True)
    _nothing_saved_note(tr, state, session_interrupted(config))
    written = config.stash.get(_BENCHMARK_JSON_WRITTEN, None)
    if written is not None:
        tr.write_line(written)


def errors(config: pytest.Config) -> list[str]:
    """This session's errors that fail the run (its workers', children's and relays' among them)."""
    state = gate_session(config)
    return list(state.errors) if state is not None else []


def _runtimes_section(tr: Any, state: GateSession, interrupted: str | None) -> None:
    """The "jetmem runtimes" section: the table, what became of ``--jetmem-save``, the Jetson's timing warnings."""
    from pytest_jetmem.report.table import format_table

    tr.section("jetmem runtimes")
    for line in format_table(state.rows):
        tr.write_line(line)
    if state.save and interrupted:
        tr.write_line(_not_saved(state.save), yellow=True)
    elif state.save and not state.errors:
        tr.write_line(f"jetmem: saved baseline {state.save!r} in {state.store.directory}")
    for w in _jetson_warnings(state):
        tr.write_line(f"jetmem: warning: {w}", yellow=True)


def _not_saved(name: str) -> str:
    return f"jetmem: the session was interrupted: baseline {name!r} not saved"


def _jetson_warnings(state: GateSession) -> list[str]:
    """What changed on a Jetson between the first measurement and now that bears on the timings (none elsewhere)."""
    from pytest_jetmem.machine.jetson import for_device, read_jetson_state, sysroot, timing_warnings

    before = state.jetson_before
    integrated = state.device.probed_info.integrated if state.device.probed_info is not None else None
    if before is None or not for_device(before, integrated).is_jetson:
        return []
    return list(timing_warnings(before, read_jetson_state(sysroot())))


def _nothing_saved_note(tr: Any, state: GateSession, interrupted: str | None) -> None:
    """Say that ``--jetmem-save`` saved nothing, or ``--jetmem-compare`` compared nothing, where no test measured
    anything (the controller sees every row)."""
    if state.save and not state.rows:
        tr.write_line(
            _not_saved(state.save)
            if interrupted
            else f"jetmem: --jetmem-save={state.save}: nothing was measured, so no baseline was saved",
            yellow=True,
        )
    if state.compare_name and not state.rows and state.baseline_skip is None:
        tr.write_line(
            f"jetmem: --jetmem-compare={state.compare_name}: nothing was measured, so nothing was compared with it",
            yellow=True,
        )
