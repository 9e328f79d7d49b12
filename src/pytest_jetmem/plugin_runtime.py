"""The runtime half of the plugin: ``memmode_runtime`` assertions, baselines and the regression gate, the report.

Judging happens right after a test body returns (``pytest_pyfunc_call``), so a failed assertion fails that
item with its figures. Ratios to a reference mode are measured side by side: the body runs again with a
handle in the reference mode and both modes' work is sampled interleaved (A B A B ...), so a ratio holds
on a noisy machine, under ``-k`` selecting one mode, and when xdist puts the modes on different workers.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .baseline import BaselineError, BaselineNotFound, BaselineStore, Entry, Machine, entry_key
from .benchjson import benchmark_json, write_benchmark_json
from .compare import Verdict, compare_runs
from .handle import Jetmem
from .jetson import JetsonState, read_jetson_state, timing_warnings
from .plugin import STOPPING_RULE, _state, option_group
from .rerun import more_runs, side_by_side
from .runtime_spec import MARKER, RuntimeSpec, parse_runtime_marker
from .stats import StoppingRule
from .timing import Measurement

_RUNTIME = pytest.StashKey["RuntimeState"]()
_SPEC = pytest.StashKey[RuntimeSpec]()
PROPERTY = "jetmem"


@dataclass
class RuntimeState:
    """Per-session state of the runtime plugin."""

    session_id: str
    store: BaselineStore
    save: str | None
    compare_name: str | None
    fail_pct: float
    strict_machine: bool
    overwrite: bool
    append: bool
    runs: int
    benchmark_json: str | None
    jetson_before: JetsonState | None = None
    baseline: Any = None
    baseline_checked: bool = False
    baseline_skip_reason: str | None = None
    entries: dict[str, Entry] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    machine: Machine | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = option_group(parser)
    group.addoption(
        "--jetmem-save",
        nargs="?",
        const="default",
        default=None,
        metavar="NAME",
        help="save this run's timings as baseline NAME (default name: default)",
    )
    group.addoption(
        "--jetmem-compare",
        nargs="?",
        const="default",
        default=None,
        metavar="NAME",
        help="compare timings against baseline NAME and fail memmode_runtime tests that regressed",
    )
    group.addoption(
        "--jetmem-fail",
        type=float,
        default=None,
        metavar="PCT",
        help="regression threshold in percent of the baseline median (default 5)",
    )
    group.addoption(
        "--jetmem-baseline-dir",
        default=None,
        metavar="DIR",
        help="where baselines live (default .jetmem/baselines under the rootdir)",
    )
    group.addoption(
        "--jetmem-strict-machine",
        action="store_true",
        default=None,
        help="fail instead of warn when the baseline comes from another machine fingerprint",
    )
    group.addoption(
        "--jetmem-overwrite",
        action="store_true",
        default=False,
        help="let --jetmem-save replace a baseline of an earlier session (kept as NAME.json.prev)",
    )
    group.addoption(
        "--jetmem-append",
        action="store_true",
        default=False,
        help="let --jetmem-save add this session's runs to an existing baseline of the same machine",
    )
    group.addoption(
        "--jetmem-runs",
        type=int,
        default=None,
        metavar="N",
        help="run each measured test body N times with fresh allocations (default 1); the spread between "
        "runs enters the regression test",
    )
    group.addoption(
        "--jetmem-benchmark-json",
        default=None,
        metavar="PATH",
        help="also write the timings in pytest-benchmark's JSON format",
    )
    group.addoption(
        "--jetmem-max-time",
        type=float,
        default=None,
        metavar="S",
        help="time cap per measurement in seconds (default 1.0)",
    )
    group.addoption(
        "--jetmem-noise",
        type=float,
        default=None,
        metavar="FRACTION",
        help="stop sampling when the median's relative standard error is below this (default 0.01)",
    )
    parser.addini("jetmem_baseline_dir", "baseline directory", default="")
    parser.addini("jetmem_fail", "regression threshold in percent", default="5")
    parser.addini("jetmem_compare", "baseline to compare against by default", default="")
    parser.addini("jetmem_strict_machine", "fail on a baseline from another machine", type="bool", default=False)
    parser.addini("jetmem_runs", "runs (fresh allocations) per measured test", default="1")
    parser.addini("jetmem_max_time", "time cap per measurement in seconds", default="1.0")
    parser.addini("jetmem_noise", "target relative noise of the median", default="0.01")


def _float_option(config: pytest.Config, opt: str, ini: str, lo: float, what: str) -> float:
    value = config.getoption(opt)
    source = f"--{opt.replace('_', '-')}"
    if value is None:
        source = f"ini option {ini}"
        try:
            value = float(config.getini(ini))
        except ValueError:
            raise pytest.UsageError(f"{source}: expected {what}, got {config.getini(ini)!r}") from None
    if not value >= lo or value != value or value == float("inf"):
        raise pytest.UsageError(f"{source}: expected {what}, got {value!r}")
    return float(value)


def _runs_option(config: pytest.Config) -> int:
    value = config.getoption("jetmem_runs")
    source = "--jetmem-runs"
    if value is None:
        source, raw = "ini option jetmem_runs", config.getini("jetmem_runs")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise pytest.UsageError(f"{source}: expected an integer >= 1, got {raw!r}") from None
    if value < 1:
        raise pytest.UsageError(f"{source}: expected an integer >= 1, got {value!r}")
    return int(value)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max_ms=None, max_ratio=None, relative_to=None, scope=None, baseline=True, label=None): "
        "assert on the runtimes jetmem.measure() recorded (see pytest-jetmem docs)",
    )
    fail_pct = _float_option(config, "jetmem_fail", "jetmem_fail", 0.0, "a percentage >= 0")
    max_time = _float_option(config, "jetmem_max_time", "jetmem_max_time", 1e-3, "seconds > 0")
    noise = _float_option(config, "jetmem_noise", "jetmem_noise", 1e-6, "a fraction > 0")
    config.stash[STOPPING_RULE] = StoppingRule(target_rel_noise=noise, max_time_s=max_time)
    bdir = config.getoption("jetmem_baseline_dir") or config.getini("jetmem_baseline_dir") or ".jetmem/baselines"
    strict = config.getoption("jetmem_strict_machine")
    workerinput = getattr(config, "workerinput", None)
    session_id = workerinput.get("jetmem_session") if workerinput else None
    config.stash[_RUNTIME] = RuntimeState(
        session_id=session_id or uuid.uuid4().hex,
        store=BaselineStore(Path(config.rootpath, bdir)),
        save=config.getoption("jetmem_save"),
        compare_name=config.getoption("jetmem_compare") or config.getini("jetmem_compare") or None,
        fail_pct=fail_pct,
        strict_machine=bool(strict if strict is not None else config.getini("jetmem_strict_machine")),
        overwrite=config.getoption("jetmem_overwrite"),
        append=config.getoption("jetmem_append"),
        runs=_runs_option(config),
        benchmark_json=config.getoption("jetmem_benchmark_json"),
    )
    config.pluginmanager.register(_RowCollector(config.stash[_RUNTIME]), "jetmem-rows")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config.stash[_RUNTIME]), "jetmem-xdist")


class _RowCollector:
    """Gathers the measurement rows from reports (on the xdist controller too) for the summary."""

    def __init__(self, state: RuntimeState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rows = getattr(report, "jetmem_rows", None)
        if rows and report.when == "call":
            self.state.rows.extend(rows)


class _XdistHooks:
    """Give every xdist worker the controller's session id, so their baseline entries merge."""

    def __init__(self, state: RuntimeState) -> None:
        self.state = state

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["jetmem_session"] = self.state.session_id

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        for err in getattr(node, "workeroutput", {}).get("jetmem_errors", []):
            if err not in self.state.errors:
                self.state.errors.append(err)


def _sysroot() -> str:
    """Where the Jetson files are read from: ``/``, or ``$JETMEM_SYSROOT`` (recorded trees in tests)."""
    return os.environ.get("JETMEM_SYSROOT") or "/"


def _rt(config: pytest.Config) -> RuntimeState:
    return config.stash[_RUNTIME]


def pytest_sessionstart(session: pytest.Session) -> None:
    state = _rt(session.config)
    state.jetson_before = read_jetson_state(_sysroot())
    if state.compare_name is not None:
        try:  # a corrupt or foreign baseline stops the session before any test runs; the file is untouched
            state.store.load(state.compare_name)
        except BaselineNotFound:
            pass
        except BaselineError as exc:
            raise pytest.UsageError(f"--jetmem-compare: {exc}") from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker(MARKER)
    if mark is None:
        return
    error = None
    try:
        spec = parse_runtime_marker(mark.args, dict(mark.kwargs), metafunc.definition.nodeid)
    except ValueError as exc:
        error = str(exc)
    if error is not None:
        pytest.fail(error, pytrace=False)
    if spec.relative_to is not None and metafunc.definition.get_closest_marker("memmode") is None:
        pytest.fail(
            f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER}(relative_to=...) needs @pytest.mark.memmode",
            pytrace=False,
        )


def _spec(item: pytest.Item) -> RuntimeSpec | None:
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return None
    return parse_runtime_marker(mark.args, dict(mark.kwargs), item.nodeid)


# -- judging -------------------------------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[Any]:
    result = yield
    handle = pyfuncitem.funcargs.get("jetmem")
    if isinstance(handle, Jetmem) and handle.measurements:
        spec = _spec(pyfuncitem)
        runs = (spec.runs if spec and spec.runs else None) or _rt(pyfuncitem.config).runs
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
    return result


def _machine(config: pytest.Config) -> Machine | None:
    state = _rt(config)
    if state.machine is None:
        info = _state(config).availability().info
        if info is None:
            return None
        js = state.jetson_before or JetsonState()
        nvrtc = ".".join(map(str, info.nvrtc_version)) if info.nvrtc_version else None
        state.machine = Machine(
            device_name=info.name,
            compute_capability=".".join(map(str, info.compute_capability)),
            driver_version=info.driver_version,
            cuda_bindings_version=info.bindings_version or None,
            nvrtc_version=nvrtc,
            l4t_release=js.l4t_release,
            nvpmodel_mode=js.nvpmodel_name or (str(js.nvpmodel_id) if js.nvpmodel_id is not None else None),
            gpu_cur_freq_hz=js.gpu_cur_freq_hz,
            gpu_max_freq_hz=js.gpu_max_freq_hz,
            emc_freq_hz=js.emc_freq_hz,
            clocks_locked=js.clocks_locked,
        )
    return state.machine


def _baseline(config: pytest.Config) -> tuple[Any, str | None]:
    """The baseline to compare with, or (None, why not). Loaded and checked once per session."""
    state = _rt(config)
    if state.compare_name is None:
        return None, None
    if not state.baseline_checked:
        state.baseline_checked = True
        try:
            base = state.store.load(state.compare_name)
        except BaselineNotFound as exc:
            state.baseline_skip_reason = f"no baseline {state.compare_name!r} ({exc.path}): nothing compared"
            return None, state.baseline_skip_reason
        except BaselineError as exc:
            raise pytest.UsageError(f"--jetmem-compare: {exc}") from None
        machine = _machine(config)
        diffs = machine.mismatches(base.machine) if machine else ["this machine: no GPU"]
        if diffs:
            state.baseline_skip_reason = (
                f"baseline {state.compare_name!r} comes from another machine ({'; '.join(diffs)}): "
                + ("failing its comparisons (--jetmem-strict-machine)" if state.strict_machine else "not compared")
            )
            warnings.warn(f"jetmem: {state.baseline_skip_reason}", stacklevel=1)
        state.baseline = base
    if state.baseline_skip_reason:
        return None, state.baseline_skip_reason
    return state.baseline, None


def _judge(item: pytest.Function, handle: Jetmem, spec: RuntimeSpec | None) -> list[str]:
    state = _rt(item.config)
    failures: list[str] = []
    marked = spec is not None
    spec = spec or RuntimeSpec()  # unmarked: reported with the defaults, never judged
    judged = [m for m in handle.measurements if spec.selects(m.label, m.scope)]
    ratios = side_by_side(item, handle, spec) if spec.max_ratio is not None else {}
    base, base_note = _baseline(item.config)
    for i, m in enumerate(handle.measurements):
        row = _row(item, m)
        is_judged = marked and m in judged
        if is_judged and spec.max_ms is not None and m.median > spec.max_ms:
            failures.append(f"{m.describe()}: median above max_ms={spec.max_ms:g}")
            row["verdict"] = "FAIL max_ms"
        if i in ratios:
            ratio, lo, hi, own_median, ref_median, n = ratios[i]
            row.update(ratio=ratio, ratio_ci=[lo, hi], relative_to=spec.relative_to, reference_median=ref_median)
            if is_judged and spec.max_ratio is not None and ratio > spec.max_ratio:
                failures.append(
                    f"{m.mode} {m.key}: {m.mode}/{spec.relative_to} = {ratio:.3f} (99% CI {lo:.3f}..{hi:.3f}; "
                    f"medians {own_median:.4g} vs {ref_median:.4g} ms, {n} interleaved samples each) "
                    f"> max_ratio={spec.max_ratio:g}"
                )
                row["verdict"] = "FAIL ratio"
        key = entry_key(item.nodeid, m.mode, m.key)
        state.entries[key] = Entry(
            item.nodeid, m.mode, m.key, tuple(m.samples), m.first_call_ms, runs=tuple(map(tuple, m.runs))
        )
        if state.compare_name is not None:
            if base is None:
                row["baseline"] = base_note
                if (
                    state.strict_machine
                    and base_note
                    and "another machine" in base_note
                    and is_judged
                    and spec.baseline
                ):
                    failures.append(f"jetmem: {base_note}")
            else:
                entry = base.entry(key)
                if entry is None:
                    row["baseline"] = "new (not in baseline)"
                else:
                    cmp = compare_runs(entry.run_samples, m.runs or [m.samples], state.fail_pct)
                    row.update(baseline_change_pct=cmp.change_pct, baseline=cmp.verdict.value)
                    if cmp.verdict is Verdict.REGRESSION and is_judged and spec.baseline:
                        failures.append(f"{m.mode} {m.key}: {cmp.describe()}")
                        row["verdict"] = "FAIL regression"
        row.setdefault("verdict", ("ok" if is_judged else "reported"))
        _publish(item, row)
    return failures


def _row(item: pytest.Item, m: Measurement) -> dict[str, Any]:
    s = m.summary
    return {
        "nodeid": item.nodeid,
        "mode": m.mode,
        "key": m.key,
        "label": m.label,
        "scope": m.scope,
        "median": s.median,
        "mad": s.mad,
        "p5": s.p5,
        "p95": s.p95,
        "min": s.min,
        "n": s.n,
        "first_call_ms": m.first_call_ms,
        "first_call_wall_ms": m.first_call_wall_ms,
        "stop_reason": m.stop_reason,
        "runs": len(m.runs) or 1,
        "samples": list(m.samples),
    }


def _publish(item: pytest.Item, row: dict[str, Any]) -> None:
    """Rows travel on the report (xdist-safe); junitxml gets the figures as properties."""
    rows = item.stash.setdefault(_ROWS, [])
    rows.append(row)
    prefix = f"jetmem:{row['mode']}:{row['key']}"
    item.user_properties.append((f"{prefix}:median_ms", round(row["median"], 6)))
    item.user_properties.append((f"{prefix}:mad_ms", round(row["mad"], 6)))
    item.user_properties.append((f"{prefix}:samples", row["n"]))
    if row.get("first_call_ms") is not None:
        item.user_properties.append((f"{prefix}:first_call_ms", round(row["first_call_ms"], 6)))
    if row.get("ratio") is not None:
        item.user_properties.append((f"{prefix}:ratio_to_{row['relative_to']}", round(row["ratio"], 4)))
    if row.get("baseline_change_pct") is not None:
        item.user_properties.append((f"{prefix}:baseline_change_pct", round(row["baseline_change_pct"], 3)))
        item.user_properties.append((f"{prefix}:baseline_verdict", row["baseline"]))
    item.user_properties.append((f"{prefix}:verdict", row["verdict"]))


_ROWS = pytest.StashKey[list]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    report = yield
    if call.when == "call":
        rows = item.stash.get(_ROWS, None)
        if rows:
            report.jetmem_rows = rows  # type: ignore[attr-defined]
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = _rt(config)
    if state.save and state.entries:
        machine = _machine(config)
        if machine is not None:
            try:
                state.store.save(
                    state.save,
                    machine,
                    state.entries,
                    state.session_id,
                    overwrite=state.overwrite,
                    append=state.append,
                )
            except BaselineError as exc:
                hint = (
                    " (pass --jetmem-append to add this session's runs, or --jetmem-overwrite to replace it)"
                    if "session" in str(exc)
                    else ""
                )
                state.errors.append(f"--jetmem-save: {exc}{hint}")
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["jetmem_errors"] = list(state.errors)  # the controller reports them and fails the run
    elif state.errors:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if state.benchmark_json and state.rows and not hasattr(config, "workerinput"):
        machine = _machine(config)
        write_benchmark_json(state.benchmark_json, benchmark_json(state.rows, machine.to_dict() if machine else {}))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = _rt(config)
    tr = terminalreporter
    if state.rows:
        tr.section("jetmem runtimes")
        for line in format_table(state.rows):
            tr.write_line(line)
        if state.save and not state.errors:
            tr.write_line(f"jetmem: saved baseline {state.save!r} in {state.store.directory}")
        if state.baseline_skip_reason:
            tr.write_line(f"jetmem: {state.baseline_skip_reason}", yellow=True)
        after = read_jetson_state(_sysroot())
        if state.jetson_before is not None and state.jetson_before.is_jetson:
            for w in timing_warnings(state.jetson_before, after):
                tr.write_line(f"jetmem: warning: {w}", yellow=True)
    for err in state.errors:
        tr.write_line(f"jetmem: error: {err}", red=True)


def format_table(rows: list[dict[str, Any]]) -> list[str]:
    """One row per test, mode and measurement: median, spread, ratio, first call, baseline delta, verdict."""
    header = ("test", "mode", "what", "median ms", "MAD ms", "n", "ratio", "first call ms", "vs baseline", "verdict")
    body = []
    for r in rows:
        ratio = f"{r['ratio']:.2f}x {r['relative_to']}" if r.get("ratio") is not None else ""
        change = r.get("baseline_change_pct")
        base = f"{change:+.1f}% {r.get('baseline', '')}" if change is not None else str(r.get("baseline", "") or "")
        first = f"{r['first_call_ms']:.4g}" if r.get("first_call_ms") is not None else ""
        body.append(
            (
                r["nodeid"].rsplit("::", 1)[-1],
                r["mode"],
                r["key"],
                f"{r['median']:.4g}",
                f"{r['mad']:.2g}",
                str(r["n"]),
                ratio,
                first,
                base[:40],
                r.get("verdict", ""),
            )
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*b) for b in body)]


__all__ = ["RuntimeState", "format_table"]
