"""``--jetmem-against=REF``: the base and the change measured in one job, in turns on the same GPU.

The pytest session the user starts (the *parent*) runs no test body itself. It starts two child pytest
sessions, one in a checkout of ``REF`` (the *base*: a git revision of the repository under test, or the path
of a prepared checkout) and one in the working tree (the *change*), each importing its own tree. For every
selected test it asks both children to run it at once; inside, every ``jetmem.measure`` call of the two
sides meets and takes turns, a batch of samples each (:mod:`pytest_jetmem.measure.duet`). The parent then
judges each measurement on the paired rounds (:func:`pytest_jetmem.measure.compare.compare_paired`) and
reports it like a baseline comparison: terminal table, JUnit properties, ``--jetmem-report``,
``--jetmem-benchmark-json``. The test's outcome is the change's; a test that exists on one side only is
reported, not judged. No stored baseline and no matching machine fingerprint are needed.

Under pytest-xdist every worker runs its own pair of children, on the GPU the worker would use.

Where no GPU can be used (no driver, no device), there is nothing to take turns on: the parent starts no
children and runs the tests itself, as without ``--jetmem-against`` (skipped, their kernels checked without a
GPU where NVRTC is there: :mod:`pytest_jetmem.plugin.nogpu`); each skip reason and the terminal summary say,
once, that nothing was compared with the base and why.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import RecordError
from pytest_jetmem.plugin import children, options
from pytest_jetmem.plugin.children import (
    Child,
    DrivenChild,
    body_outcome,
    child_argv,
    child_env,
    from_wire,
    run_in_children_only,
)
from pytest_jetmem.plugin.judging import (
    apply_comparison,
    at_other_clocks,
    clock_mhz,
    over_pcie,
    publish_record,
)
from pytest_jetmem.plugin.runtime_spec import item_spec
from pytest_jetmem.plugin.sessions import device_session, gate_session

if TYPE_CHECKING:  # imported where used: a run without --jetmem-against loads no handle, measure or numpy
    from pytest_jetmem.measure.duet import Duet
    from pytest_jetmem.measure.record import MeasurementRecord, NotCompared, RecordBuilder
    from pytest_jetmem.plugin.sessions import GateSession

if TYPE_CHECKING:  # the wire is imported where a child is spoken to: not at start-up
    from pytest_jetmem.plugin.wire import Done, PairSummary, Run

SIDE_ENV = "PYTEST_JETMEM_AGAINST_SIDE"  # "0" (base) or "1" (change): this process is a child
CHANNEL_ENV = "PYTEST_JETMEM_AGAINST_CHANNEL"


def _side_name(side: int) -> str:
    """``base`` or ``change``: what the logs and messages call a side."""
    from pytest_jetmem.measure.duet import BASE

    return "base" if side == BASE else "change"


_PARENT = pytest.StashKey["AgainstParent"]()
_CHILD = pytest.StashKey["AgainstChild"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser, "against")


def pytest_configure(config: pytest.Config) -> None:
    driven = children.configure_child(config)
    side = os.environ.pop(SIDE_ENV, None)
    if side is not None and isinstance(driven, DrivenChild):
        config.stash[_CHILD] = AgainstChild.from_environment(config, int(side), driven)
        from pytest_jetmem.plugin.handles import extras

        extras(config).duet = lambda: paired_duet(config)  # each jetmem handle is built with it
        return
    ref = options.get_str(config, "against")
    if ref is None:
        return
    _, against = options.raw(config, "against")
    for clash in ("save", "compare"):  # the option, or the ini key where the setting has one (jetmem_compare)
        if options.get_str(config, clash) is not None:
            _, source = options.raw(config, clash)
            raise pytest.UsageError(
                f"{against}={ref} measures the base in the same job: it needs no stored baseline; "
                f"drop {source} or {against}"
            )
    parent = AgainstParent(config, ref, prepare_base(config, ref))
    config.stash[_PARENT] = parent
    config.add_cleanup(parent.close)


# -- the base tree ------------------------------------------------------------------------------------------------


@dataclass
class BaseTree:
    """Where the base's code is: ``root`` mirrors the parent's rootdir; ``label`` says what it is."""

    root: Path
    label: str
    temporary: Path | None = None  # a folder to delete at the end


def _git(cwd: Path, *args: str) -> str:
    run = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip() or f"git {' '.join(args)} failed ({run.returncode})")
    return run.stdout


def prepare_base(config: pytest.Config, ref: str) -> BaseTree:
    """A directory ``ref`` is used as it is; anything else must be a git revision of the rootdir's repository.

    A revision is exported with ``git archive`` (tracked files, no submodules) into a temporary folder; the
    repository is not touched. A bad ``ref`` is a usage error that says what was tried.
    """
    path = Path(config.invocation_params.dir, ref)
    if path.is_dir():
        return BaseTree(path.resolve(), f"checkout {path.resolve()}")
    root = Path(config.rootpath)
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
        sha = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha], cwd=top, capture_output=True, timeout=600, check=True
        ).stdout
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        raise pytest.UsageError(
            f"--jetmem-against={ref}: not a directory and not a git revision of the repository at {root} ({exc}); "
            "give a revision (a branch, a tag, HEAD~1, a commit) or the path of a prepared checkout"
        ) from None
    tmp = Path(tempfile.mkdtemp(prefix="jetmem-against-"))
    import tarfile  # only where a base tree is unpacked: not at start-up

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp, filter="data")
    tree = tmp / root.resolve().relative_to(top.resolve())
    return BaseTree(tree, f"{ref} ({sha[:12]})", tmp)


# -- the parent ---------------------------------------------------------------------------------------------------


class AgainstParent:
    """Starts the two children on the first test, dispatches every test to both, judges the pairs."""

    def __init__(self, config: pytest.Config, ref: str, base: BaseTree) -> None:
        self.config = config
        self.ref = ref
        self.base = base
        self.work = Path(tempfile.mkdtemp(prefix="jetmem-duet-"))
        self.children: dict[int, Child] = {}
        self.seq = 0
        self.only_in_change: list[str] = []
        self.judged = 0
        self.error: str | None = None
        #: why no GPU can be used here (None: one can, or not probed yet); then no children, the tests run here
        self.no_gpu: str | None = None
        self.worker_summaries: list[PairSummary] = []  # on the xdist controller
        self.closed = False

    def start(self, items: Sequence[pytest.Item]) -> None:
        from pytest_jetmem.measure.duet import BASE, CHANGE, make_channel

        channel = make_channel(self.work / "channel")
        files = sorted({item.nodeid.split("::", 1)[0] for item in items})
        for side in (CHANGE, BASE):
            root = self.base.root if side == BASE else Path(self.config.rootpath)
            paths = [str(root / "src"), str(root)] if (root / "src").is_dir() else [str(root)]
            env = child_env(
                self.config,
                **{SIDE_ENV: str(side), CHANNEL_ENV: str(channel)},
                PYTHONPATH=os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])]),
            )
            argv = child_argv(self.config, root, self.work / f"basetemp{side}", files)
            name = f"{_side_name(side)} side"
            self.children[side] = Child.start(name, argv, cwd=root, env=env, workdir=self.work, stem=_side_name(side))
        for child in self.children.values():
            child.read_collected()

    def run(self, item: pytest.Function) -> tuple[SideResult, SideResult | None]:
        """Run ``item`` on both sides at once (the base only where it has it); (change's, base's) results."""
        from pytest_jetmem.measure.duet import BASE, CHANGE
        from pytest_jetmem.plugin.wire import Run

        if not self.children:
            self.start(item.session.items)
        self.seq += 1
        change, base = self.children[CHANGE], self.children[BASE]
        if item.nodeid not in change.collected:
            raise RuntimeError(f"{item.nodeid}: the change's pytest did not collect it (see {change.log})")
        paired = item.nodeid in base.collected
        command = Run(item.nodeid, seq=self.seq, paired=paired)
        change.send(command)  # both sides run it at once: the change's answer is read last
        base_result = self.result(*base.run(command)) if paired else None
        change_result = self.result(*change.collect())
        if not paired:
            self.only_in_change.append(item.nodeid)
        return change_result, base_result

    def result(self, sent: list[dict[str, Any]], done: Done | None) -> SideResult:
        """What :func:`judge` reads of a side's answer (``done``: None where its session ended before the test did)."""
        from pytest_jetmem.plugin.wire import notes_of

        if done is not None and done.missing:
            return SideResult("missing")
        reports = [from_wire(self.config, data) for data in sent]
        outcome, message = body_outcome(reports)
        rows = next((notes_of(r).records for r in reports if r.when == "call"), ())
        return SideResult(outcome, message, rows, done.integrated if done is not None else None)

    def summary(self) -> PairSummary:
        """What the terminal summary says of this pair (it travels from an xdist worker, as JSON)."""
        from pytest_jetmem.plugin.wire import PairSummary

        only = tuple(self.only_in_change), tuple(self.only_in_base())
        return PairSummary(self.base.label, self.judged, *only, no_gpu=self.no_gpu)

    def not_compared(self) -> str:
        """What a test skipped here says where no GPU can be used (:attr:`no_gpu` is set)."""
        return f"--jetmem-against={self.ref}: nothing compared with the base: the two sides take turns on a GPU"

    def only_in_base(self) -> list[str]:
        from pytest_jetmem.measure.duet import BASE, CHANGE

        base = self.children.get(BASE)
        change = self.children.get(CHANGE)
        return sorted(base.collected - change.collected) if base and change else []

    def close(self) -> None:
        """End both children and remove the pair's folders (at the session's end, and again at cleanup: once)."""
        if self.closed:
            return
        self.closed = True
        for child in self.children.values():
            child.quit()  # both at once: neither waits for the other's quit
        for child in self.children.values():
            child.close()
        shutil.rmtree(self.work, ignore_errors=True)
        if self.base.temporary is not None:
            shutil.rmtree(self.base.temporary, ignore_errors=True)


def to_children(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the parent, once the items that will run are known: every test runs in the children, unless no GPU can
    be used here (then all run here)."""
    parent = config.stash.get(_PARENT, None)
    if parent is None or not items:
        return
    avail = device_session(config).availability()
    if not avail.ok:  # nothing to take turns on: no children; the tests skip here, kernels checked (plugin.nogpu)
        parent.no_gpu = avail.reason
        return
    for item in items:
        run_in_children_only(item)


def note_not_compared(item: pytest.Item, report: pytest.TestReport) -> None:
    """Without a GPU, a GPU test skipped in the parent says that it was not compared with the base, and why (a step
    of :mod:`~pytest_jetmem.plugin.core`'s ``pytest_runtest_makereport``)."""
    parent = item.config.stash.get(_PARENT, None)
    longrepr = report.longrepr
    if parent is None or parent.no_gpu is None or not report.skipped or hasattr(report, "wasxfail"):
        return
    if isinstance(longrepr, tuple) and len(longrepr) == 3 and _uses_gpu(item):
        path, line, reason = longrepr
        report.longrepr = (path, line, f"{reason}; {parent.not_compared()}")


def _uses_gpu(item: pytest.Item) -> bool:
    """Whether ``item`` takes one of the fixtures that need a GPU (it would have run in the children)."""
    return bool({"jetmem", "memmode", "jetmem_device"} & set(getattr(item, "fixturenames", ())))


@dataclass(frozen=True)
class SideResult:
    """What one side said of a test: its outcome (``passed``, ``failed``, ``skipped``, or ``missing``: the side has
    no such test) and message, its call report's measurement records (as JSON objects), and whether its GPU is
    integrated (None: not known)."""

    outcome: str
    message: str = ""
    rows: tuple[dict[str, Any], ...] = ()
    integrated: bool | None = None


class InTurns:
    """The runner of a test under ``--jetmem-against`` (in the parent, with a GPU): its body runs in the base's and
    the change's child sessions at once, and the paired rounds are judged here (:mod:`~pytest_jetmem.plugin.core`
    calls it)."""

    in_process = False

    def __init__(self, parent: AgainstParent) -> None:
        self.parent = parent

    def run(self, item: pytest.Function) -> None:
        parent = self.parent
        try:
            change, base = parent.run(item)
        except (RuntimeError, OSError, ValueError) as exc:
            parent.error = str(exc)
            pytest.fail(f"{item.nodeid}: --jetmem-against={parent.ref}: {exc}", pytrace=False)
        judge(item, parent, change, base)

    def body_raised(self, item: pytest.Function, exc: Exception) -> None:
        return None

    def settle(self, item: pytest.Function) -> None:
        return None


def runner(item: pytest.Function) -> InTurns | None:
    """``--jetmem-against``'s runner for ``item`` (None: not the parent of an against run, or no GPU here)."""
    parent = item.config.stash.get(_PARENT, None)
    if parent is None or parent.no_gpu is not None:
        return None
    return InTurns(parent)


def judge(item: pytest.Function, parent: AgainstParent, change: SideResult, base: SideResult | None) -> None:
    """The change's outcome is the test's; each measurement the two sides took in turns is compared."""
    outcome, message = _change_outcome(item, change)
    gate = gate_session(item.config)
    spec = item_spec(item)
    change_records, base_records = _side_records(item, parent, change, base)
    judged = spec is not None and spec.baseline and outcome == "passed"
    judging = _Judging(item, parent, change, base, base_records, gate, marked=spec is not None, judged=judged)
    failures = [failure for failure in map(judging.one, change_records) if failure]
    if outcome != "passed":
        pytest.fail(f"{item.nodeid} failed in the change:\n{message}", pytrace=False)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def _change_outcome(item: pytest.Function, change: SideResult) -> tuple[str, str]:
    """The change's outcome and message; a test the change lacks fails here, one it skipped skips."""
    outcome, message = change.outcome, change.message
    if outcome == "missing":
        pytest.fail(f"{item.nodeid}: the change's pytest has no such test", pytrace=False)
    if outcome == "skipped":
        pytest.skip(message)
    return outcome, message


def _side_records(
    item: pytest.Function, parent: AgainstParent, change: SideResult, base: SideResult | None
) -> tuple[list[MeasurementRecord], dict[tuple[str, str], MeasurementRecord]]:
    """The change's records, and the base's by (mode, key); a side's rows that cannot be read fail the test."""
    try:
        return _records(change), {(r.mode, r.key): r for r in _records(base)}
    except RecordError as exc:  # a base tree with another pytest-jetmem, say
        pytest.fail(
            f"{item.nodeid}: --jetmem-against={parent.ref}: a side's measurements cannot be read: {exc}", pytrace=False
        )


def _why_not_compared(
    base: SideResult | None, other: MeasurementRecord | None, rounds: Sequence[object]
) -> NotCompared | None:
    """Why one of the change's measurements (its paired ``rounds``) is not compared with the base's ``other``
    (None: it is)."""
    from pytest_jetmem.measure.record import NotCompared, NotComparedWhy

    if base is None:
        return NotCompared(NotComparedWhy.ONLY_IN_CHANGE, "only in the change: not compared")
    if base.outcome != "passed":
        return NotCompared(NotComparedWhy.BASE_NOT_PASSED, f"the base {base.outcome}: not compared")
    if other is None:
        return NotCompared(NotComparedWhy.NOT_IN_BASE, "not measured in the base: not compared")
    if not rounds or len(rounds) != len(other.statistics.run_rounds):
        return NotCompared(NotComparedWhy.NOT_IN_TURNS, "measured alone, not in turns: not compared")
    return None


@dataclass
class _Judging:
    """One test's judging under ``--jetmem-against``: the two sides' answers, the base's records by (mode, key),
    the gate (None: no gate session), whether the test is marked and whether its comparisons decide it."""

    item: pytest.Function
    parent: AgainstParent
    change: SideResult
    base: SideResult | None
    base_records: dict[tuple[str, str], MeasurementRecord]
    gate: GateSession | None
    marked: bool
    judged: bool

    def one(self, change_record: MeasurementRecord) -> str | None:
        """Compare one of the change's measurements with the base's and publish its record; the failure it gives
        the test (None: none)."""
        from pytest_jetmem.measure.record import Against, RecordBuilder, RecordVerdict

        record = RecordBuilder.judging(change_record, self.item.nodeid)
        record.against = Against(self.parent.base.label)
        other = self.base_records.get((record.identity.mode, record.identity.key))
        why_not = _why_not_compared(self.base, other, record.statistics.run_rounds)
        failure = None
        if why_not is None and other is not None:
            failure = self._compare(record, other)
        else:
            record.baseline = why_not
        publish_record(self.item, record.build(RecordVerdict.OK if self.marked else RecordVerdict.REPORTED))
        return failure

    def _compare(self, record: RecordBuilder, other: MeasurementRecord) -> str | None:
        """Judge ``record``'s paired rounds against the base's ``other``; the failure it gives the test."""
        from pytest_jetmem.measure.compare import compare_paired
        from pytest_jetmem.measure.defaults import DEFAULT_FAIL_PCT
        from pytest_jetmem.measure.record import Against

        self.parent.judged += 1
        record.against = Against(self.parent.base.label, other.statistics.samples)
        gate = self.gate
        threshold = gate.fail_pct if gate else DEFAULT_FAIL_PCT
        cmp = compare_paired(other.statistics.run_rounds, record.statistics.run_rounds, threshold)
        cmp = at_other_clocks(cmp, clock_mhz(other.conditions.clocks), clock_mhz(record.conditions.clocks), "the base")
        cmp = over_pcie(cmp, record.identity.mode, self.change.integrated)
        if other.conditions.throttled and not record.conditions.throttled:
            # either side throttled: the pair is not comparable
            record.conditions = replace(record.conditions, throttled=other.conditions.throttled)
        failure = apply_comparison(self.item, gate, record, cmp, judged=self.judged) if gate is not None else None
        energy_failure = self._compare_energy(record, other)
        return "\n".join(f for f in (failure, energy_failure) if f) or None

    def _compare_energy(self, record: RecordBuilder, other: MeasurementRecord) -> str | None:
        """The change's energy per call against the base's, their windows paired by turn (both measured in turns:
        :func:`~pytest_jetmem.measure.timing.measure`) into ``record``; judged under ``--jetmem-energy-fail``."""
        from pytest_jetmem.measure.compare import compare_paired
        from pytest_jetmem.measure.defaults import DEFAULT_FAIL_PCT
        from pytest_jetmem.measure.gate import energy_samples_mj
        from pytest_jetmem.measure.record import BaselineComparison, NotCompared, NotComparedWhy

        if record.energy is None and other.energy is None:
            return None
        mine, theirs = energy_samples_mj(record.energy), energy_samples_mj(other.energy)
        if record.energy is None or other.energy is None or (mine and theirs and len(mine) != len(theirs)):
            record.energy_baseline = NotCompared(
                NotComparedWhy.NOT_IN_TURNS, "the energy was not measured in turns on both sides: not compared"
            )
            return None
        if mine is None or theirs is None:
            record.energy_baseline = NotCompared(
                NotComparedWhy.NO_FIGURE, "not compared: an energy has fewer than two windows, or one <= 0 J"
            )
            return None
        gate = self.gate
        threshold = DEFAULT_FAIL_PCT if gate is None else gate.fail_pct
        if gate is not None and gate.energy_fail_pct is not None:
            threshold = gate.energy_fail_pct
        rounds = (tuple((v,) for v in theirs),), (tuple((v,) for v in mine),)
        cmp = replace(compare_paired(*rounds, threshold), figure="mJ")
        cmp = at_other_clocks(cmp, clock_mhz(other.conditions.clocks), clock_mhz(record.conditions.clocks), "the base")
        cmp = over_pcie(cmp, record.identity.mode, self.change.integrated)
        if gate is None:
            record.energy_baseline = BaselineComparison.of(cmp)
            return None
        judged = self.judged and gate.energy_fail_pct is not None
        return apply_comparison(self.item, gate, record, cmp, judged=judged, energy=True)


def _records(result: SideResult | None) -> list[MeasurementRecord]:
    """The records in a side's answer (its rows, as JSON objects); none without an answer."""
    from pytest_jetmem.measure.record import MeasurementRecord

    return [MeasurementRecord.from_json(data) for data in (result.rows if result is not None else ())]


def end(session: pytest.Session) -> None:
    """End the pair (its children, its folders); on an xdist worker, hand its summary to the controller, which
    prints them all (a step of :mod:`~pytest_jetmem.plugin.finish`)."""
    parent = session.config.stash.get(_PARENT, None)
    if parent is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if (parent.children or parent.no_gpu) and workeroutput is not None:
        from pytest_jetmem.plugin.wire import AGAINST_OUTPUT

        workeroutput[AGAINST_OUTPUT] = parent.summary().to_json()
    parent.close()  # here, not only at cleanup: an xdist worker may be stopped before its cleanup runs


@pytest.hookimpl(optionalhook=True)  # an xdist hook: the controller collects the workers' summaries
def pytest_testnodedown(node: Any, error: Any) -> None:
    from pytest_jetmem.plugin.wire import AGAINST_OUTPUT, PairSummary

    parent = node.config.stash.get(_PARENT, None)
    summary = getattr(node, "workeroutput", {}).get(AGAINST_OUTPUT)
    if parent is not None and summary:
        parent.worker_summaries.append(PairSummary.from_json(summary))


def say(terminalreporter: Any, config: pytest.Config) -> None:
    """The terminal's lines on the pairs: how many measurements were compared, which tests one side lacks."""
    parent = config.stash.get(_PARENT, None)
    if parent is None:
        return
    summaries = ([parent.summary()] if parent.children or parent.no_gpu else []) + parent.worker_summaries
    if summaries:
        _say_compared(terminalreporter, _say_no_gpu(terminalreporter, parent, summaries))


def _say_no_gpu(tr: Any, parent: AgainstParent, summaries: list[PairSummary]) -> list[PairSummary]:
    """Say, once, that nothing was compared where no GPU could be used (on the xdist controller too: every worker
    found the same); the summaries of the pairs that had one."""
    no_gpu = next((s.no_gpu for s in summaries if s.no_gpu), None)
    if no_gpu is None:
        return summaries
    tr.write_line(
        f"jetmem: against {summaries[0].label}: nothing compared: --jetmem-against={parent.ref} needs a "
        f"GPU for the base and the change to take turns on, and none can be used here ({no_gpu}); the tests "
        "ran in this tree alone, as without --jetmem-against",
        yellow=True,
    )
    return [s for s in summaries if not s.no_gpu]


def _say_compared(tr: Any, summaries: list[PairSummary]) -> None:
    """Say how many measurements the pairs compared, and which tests only one side has."""
    if not summaries:
        return
    judged = sum(s.judged for s in summaries)
    pairs = f" ({len(summaries)} pairs, one per xdist worker)" if len(summaries) > 1 else ""
    tr.write_line(
        f"jetmem: against {summaries[0].label}: {judged} measurements compared in turns on the same GPU{pairs}"
    )
    only_in_change = sorted({n for s in summaries for n in s.only_in_change})
    only_in_base = sorted({n for s in summaries for n in s.only_in_base})
    for nodeids, what in (
        (only_in_change, "only in the change (reported, not judged)"),
        (only_in_base, "only in the base (not run)"),
    ):
        if nodeids:
            tr.write_line(f"jetmem: {what}: {', '.join(nodeids)}")


# -- a child ------------------------------------------------------------------------------------------------------


class AgainstChild:
    """One side: a driven child (:class:`~pytest_jetmem.plugin.children.DrivenChild`) whose measure calls take turns
    with the other side's, test by test."""

    def __init__(self, config: pytest.Config, side: int, duet: Duet, driven: DrivenChild) -> None:
        self.config = config
        self.side = side
        self.duet = duet
        self.paired = True  # whether the other side runs the current test too
        driven.before.append(self.begin)
        driven.after.append(self.end)

    @classmethod
    def from_environment(cls, config: pytest.Config, side: int, driven: DrivenChild) -> AgainstChild:
        from pytest_jetmem.measure.duet import Duet

        duet = Duet(os.environ.pop(CHANNEL_ENV), side)  # a pytest the test starts in turn is no child
        return cls(config, side, duet, driven)

    def begin(self, item: pytest.Item, command: Run) -> None:
        """Before the test: meet the other side on it (where it runs it too)."""
        self.paired = command.paired
        self.duet.begin_test(command.seq)

    def end(self, item: pytest.Item, command: Run) -> None:
        """After the test: leave the other side's turns."""
        if self.paired:
            self.duet.end_test()


def paired_duet(config: pytest.Config) -> Duet | None:
    """The channel a ``jetmem`` handle is built with in a child of ``--jetmem-against`` whose test the other side
    runs too (its ``measure()`` takes turns with the other side's); None otherwise."""
    child = config.stash.get(_CHILD, None)
    if child is None or not child.paired:
        return None
    return child.duet
