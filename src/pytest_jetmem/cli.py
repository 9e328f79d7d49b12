"""The ``pytest-jetmem`` command: ``pytest-jetmem history regressions|show|ack|import|export`` (docs/history.md).

Exit status: 0 done; 1 ``regressions`` found an unacknowledged regression (since ``--since``); 4 a usage error (a
bad option, a store that cannot be opened, a source that cannot be imported), said in one line naming the option
and the value, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import io
import math
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from pytest_jetmem.errors import BaselineError, RecordError, StoreError
from pytest_jetmem.history.location import DEFAULT_PATH

if TYPE_CHECKING:
    from pytest_jetmem.history.analysis import Change
    from pytest_jetmem.history.model import SeriesKey, SessionRow
    from pytest_jetmem.history.store import Store
    from pytest_jetmem.history.timeline import History, Series
    from pytest_jetmem.machine.fingerprint import Machine

    #: A change point's place in ``show``: its series, its device and the uid of its first session after.
    _Mark = tuple[SeriesKey, str, str]

__all__ = ["main"]

USAGE_ERROR = 4
FOUND = 1


class _UsageError(Exception):
    """A mistake of the command line: the message says which option, the value and what was expected."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise _UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    top = _Parser(prog="pytest-jetmem", description="pytest-jetmem's command line (docs/history.md)")
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    history = commands.add_parser("history", help="the results store: change points, series, imports, exports")
    sub = history.add_subparsers(dest="action", required=True, parser_class=_Parser)

    def common(p: argparse.ArgumentParser, branch: bool = True, dirty: bool = True) -> None:
        p.add_argument("--store", metavar="URL",
                       help="the results store (default: as pytest finds it: $JETMEM_STORE, else the ini key "
                       f"jetmem_store of the rootdir's configuration, else {DEFAULT_PATH} under the rootdir)")
        if branch:
            p.add_argument("--branch", help="the branch whose history is read (default: the default branch)")
        if dirty:
            p.add_argument("--include-dirty", action="store_true",
                           help="count sessions of a tree with uncommitted changes (left out by default)")

    reg = sub.add_parser("regressions", help="the change points of every series; exit 1 on an unacknowledged "
                         "regression since --since")
    common(reg)
    reg.add_argument("--since", metavar="COMMIT|DATE", help="only change points after this commit or date "
                     "(YYYY-MM-DD or ISO 8601)")
    reg.add_argument("--min-pct", type=_min_pct, default=1.0, metavar="PCT",
                     help="a regression smaller than this (percent) does not fail (default 1.0)")
    reg.add_argument("--new", action="store_true",
                     help="the CI gate: fail on every unacknowledged regression no earlier --new run reported, "
                     "wherever its change point sits, and remember it as reported (writes the store)")
    show = sub.add_parser("show", help="a test's series in the terminal, per mode and machine class")
    common(show)
    show.add_argument("test", help="the test (a part of its node id)")
    show.add_argument("--mode", help="only this memory mode")
    ack = sub.add_parser("ack", help="acknowledge a change point (it no longer fails regressions)")
    common(ack)
    ack.add_argument("test", help="the test (a part of its node id)")
    ack.add_argument("--commit", required=True, help="the first commit after the change (a prefix is enough)")
    ack.add_argument("--reason", required=True, help="why the change is known and accepted")
    ack.add_argument("--mode", help="only this memory mode")
    ack.add_argument("--device", help="only this device (a part of its name)")
    ack.add_argument("--author", default=None, help="who acknowledges it (default: the user name)")
    upgrade = sub.add_parser("upgrade", help="bring an older store's schema up to this pytest-jetmem's (reading "
                             "commands never change a store)")
    common(upgrade, branch=False, dirty=False)
    imp = sub.add_parser("import", help="baseline files, --jetmem-benchmark-json files, session files or another "
                         "store")
    common(imp)
    imp.add_argument("sources", nargs="+", metavar="SOURCE")
    imp.set_defaults(include_dirty=False)
    imp.add_argument("--commit", help="the commit of imported files that do not say it")
    pub = sub.add_parser("publish", help="a static site of the history (opens from disk, no network)")
    common(pub)
    pub.add_argument("directory", metavar="DIR", help="where the site is written (replaced whole)")
    pub.add_argument("--repo-url", metavar="URL", help="the repository's web URL, for commit links "
                     "(default: git's origin remote where it is a web URL)")
    fleet = sub.add_parser("fleet", help="per test, the memory mode the advice picks on each machine class")
    common(fleet)
    fleet.add_argument("--json", action="store_true", help="the matrix as JSON")
    exp = sub.add_parser("export", help="the history for Bencher, github-action-benchmark or Apache Otava")
    common(exp)
    exp.add_argument("--format", required=True, dest="fmt", metavar="FORMAT",
                     help="bmf (Bencher Metric Format), github-action-benchmark or otava (CSV)")
    exp.add_argument("-o", "--output", metavar="PATH", help="write here (default: standard output)")
    return top


def _min_pct(text: str) -> float:
    """``--min-pct``'s value: a finite percentage >= 0 (nan or inf would turn the gate off)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite percentage >= 0, got {text!r}")
    return value


def _open(args: argparse.Namespace, *, create: bool = False, write: bool = False) -> Store:
    """The store the command reads, found as pytest finds it (:mod:`~pytest_jetmem.history.locate`), named on
    standard error. Reading commands open it as it is (never migrated, never made)."""
    from pytest_jetmem.history.locate import choose_store
    from pytest_jetmem.history.store import open_store

    choice = choose_store(args.store, Path.cwd())
    try:
        store = open_store(choice.text, choice.base, create=create, write=write or create)
    except StoreError as exc:
        raise _UsageError(f"{choice.source}={exc.url}: {exc.reason}") from None
    print(f"pytest-jetmem: store {store.url} ({choice.source})", file=sys.stderr)
    return store


def _branch(args: argparse.Namespace, store: Store) -> str | None:
    """``--branch`` (a usage error where the store has no session of it), else the default branch."""
    if args.branch:
        branches = sorted(store.branches())
        if args.branch not in branches:
            raise _UsageError(f"--branch={args.branch}: no session of that branch in {store.url} (its branches: "
                              f"{', '.join(branches) or 'none'})")
        return str(args.branch)
    from pytest_jetmem.history.analysis import default_branch

    return default_branch(store, Path.cwd())


def _chain(branch: str | None) -> list[str]:
    """``branch``'s first-parent history, oldest first, where git here knows the branch (else [])."""
    if not branch:
        return []
    from pytest_jetmem.history.context import git_output

    for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
        text = git_output(Path.cwd(), "rev-list", "--first-parent", "--reverse", ref)
        if text:
            return text.split()
    return []


def _analysed(history: History) -> tuple[History, list[Change]]:
    """``history`` with its outliers marked, and its change points, through this machine's detection cache."""
    from pytest_jetmem.history.analysis import analysed
    from pytest_jetmem.history.detection_cache import open_cache

    cache = open_cache()
    try:
        return analysed(history, cache=cache)
    finally:
        cache.close()


def _read(args: argparse.Namespace, store: Store) -> History:
    """The history of the branch the options name (else the default branch), as they ask (dirty sessions, git's
    order): read once, for all the command does."""
    from pytest_jetmem.history.points_cache import open_points_cache
    from pytest_jetmem.history.timeline import read_history

    branch = _branch(args, store)
    return read_history(store, branch, include_dirty=args.include_dirty, chain=_chain(branch),
                        points=open_points_cache())


def _date_key(since: str) -> str | None:
    """``since`` as a date's commit-order key (ISO 8601 UTC text, to the second; a time without a zone is UTC);
    None where ``since`` is not a date."""
    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _commit_key(since: str, history: History) -> str | None:
    """The commit-order key of the newest session of the one stored commit of ``branch`` that starts with
    ``since``; where the store has none (a first push, a run that stored nothing, a force-push), git's commit time
    of it, else None (every change point is judged), said on standard error; _UsageError where more than one stored
    commit starts so."""
    matches = [r for r in history.sessions if r.context.commit and r.context.commit.startswith(since)]
    if len({r.context.commit for r in matches}) > 1:
        raise _UsageError(f"--since={since}: expected a date (YYYY-MM-DD) or a stored commit of branch "
                          f"{history.branch!r}: more than one commit starts so")
    if matches:
        return str(max(_order_key(r) for r in matches))
    from pytest_jetmem.history.context import git_output

    when = git_output(Path.cwd(), "show", "-s", "--format=%cI", f"{since}^{{commit}}")
    key = _date_key(when) if when else None
    bound = f"since its commit time {key}" if key else "every change point is judged"
    print(f"pytest-jetmem: --since={since}: no stored session of that commit: {bound}", file=sys.stderr)
    return key


def _since_key(since: str, history: History) -> str | None:
    """The commit-order key after which a change point counts: a date's ISO text, or the newest session of the
    commit ``since`` names; None for git's null commit (all zeros: what CI gives as the commit before a branch's first
    push), which is no bound."""
    if since and set(since) == {"0"}:
        return None
    key = _date_key(since)
    return key if key is not None else _commit_key(since, history)


def _order_key(row: SessionRow) -> str:
    """A session's commit-order key: its commit time, else when it started (both ISO 8601, UTC)."""
    return row.context.commit_time or row.started


def _is_failing(change: Change, min_pct: float, since: str | None) -> bool:
    """Whether ``change`` fails ``regressions``: an unacknowledged regression of at least ``min_pct`` percent whose
    first session after is later than ``since`` (a commit-order key; None: any)."""
    return (change.regression and change.ack is None and change.point.change_pct >= min_pct
            and (since is None or _order_key(change.after) > since))


def _status(change: Change, failing: set[int]) -> str:
    """The head of a change point's ``regressions`` line: ``acknowledged (REASON)``; else ``REGRESSION`` where it is
    one of ``failing`` (their ``id``s); else ``regression``, ``improvement`` (the ratio's whole interval below 1) or
    ``change``."""
    if change.ack is not None:
        return f"acknowledged ({change.ack.reason})"
    if id(change) in failing:
        return "REGRESSION"
    if change.regression:
        return "regression"
    return "improvement" if change.point.ci[1] < 1.0 else "change"


def _change_line(change: Change, status: str) -> str:
    """One change point's ``regressions`` line (newline included), headed by ``status``."""
    from pytest_jetmem.measure.record import unit_of

    return (f"{status}: {change.series.name} on {change.device}: {change.magnitude_text}, "
            f"{change.point.before_ms:.4g} -> {change.point.after_ms:.4g} {unit_of(change.series.scope)}, between "
            f"{change.before.short_commit} "
            f"and {change.after.short_commit}; cause: {change.cause_text}\n")


def _regressions(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import unreported

    with _open(args, write=args.new) as store:
        history, found = _analysed(_read(args, store))
        branch = history.branch
        since = _since_key(args.since, history) if args.since else None
        failing = [c for c in found if _is_failing(c, args.min_pct, since)]
        if args.new:
            failing = unreported(failing, history, store.reported())
            store.mark_reported([(c.series, c.device, c.after.uid, c.after.context.commit, c.point.change_pct)
                                 for c in failing])
    found.sort(key=lambda c: _order_key(c.after), reverse=True)
    what = "new unacknowledged regression(s) (now reported)" if args.new else "unacknowledged regression(s)"
    out.write(f"branch {branch or '(all)'}: {len(found)} change point(s), {len(failing)} {what}"
              f"{' since ' + args.since if args.since else ''}\n")
    failing_ids = {id(c) for c in failing}
    for c in found:
        out.write(_change_line(c, _status(c, failing_ids)))
    return FOUND if failing else 0


def _spark(values: Sequence[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    if high <= low:
        return bars[3] * len(values)
    return "".join(bars[min(7, int((v - low) / (high - low) * 8))] for v in values)


def _chosen(args: argparse.Namespace, history: History) -> History:
    """``history`` with only the series whose node id contains ``args.test`` (and whose memory mode is
    ``args.mode``, where given); _UsageError where there is none."""
    test, mode = args.test, args.mode
    chosen = [s for s in history.series if test in s.key.nodeid and (mode is None or s.key.mode == mode)]
    if not chosen:
        raise _UsageError(f"show {test}: no series of branch {history.branch!r} matches "
                          f"{test!r}{' in mode ' + mode if mode else ''}")
    return dataclasses.replace(history, series=tuple(chosen))


def _machine_line(machine: Machine) -> str:
    """The line ``show`` writes where a series enters a machine class (newline included; ``-``: unknown)."""
    return (f"  machine class {machine.machine_class}: driver {machine.driver_version}, "
            f"L4T {machine.l4t_release or '-'}, power mode {machine.nvpmodel_mode or '-'}, "
            f"bindings {machine.cuda_bindings_version or '-'}\n")


def _note(change: Change | None) -> str:
    """What a session's ``show`` row says of the change point that starts at it: nothing where none does."""
    if change is None:
        return ""
    note = f"  <- {change.magnitude_text}, cause: {change.cause_text}"
    return note + (f" (acknowledged: {change.ack.reason})" if change.ack is not None else "")


def _write_series(series: Series, branch: str | None, marks: Mapping[_Mark, Change], out: TextIO) -> None:
    """Write one series as ``show`` does: a heading with its sparkline, a line per machine class it enters, a row
    per session (its change point, from ``marks``, noted)."""
    out.write(f"\n{series.key.name} on {series.device} (branch {branch}): {len(series.medians)} session(s)  "
              f"{_spark(series.medians)}\n")
    from pytest_jetmem.measure.record import unit_of

    unit = unit_of(series.key.scope)
    last_class = None
    for i, (row, median) in enumerate(zip(series.sessions, series.medians, strict=True)):
        if row.machine.machine_class != last_class:
            last_class = row.machine.machine_class
            out.write(_machine_line(row.machine))
        note = _note(marks.get((series.key, series.device, row.uid)))
        note += f"  ({series.note(i)})" if series.note(i) else ""
        when = _order_key(row)[:16].replace("T", " ")
        out.write(f"    {row.short_commit:10}  {when}  {median:10.4g} {unit}{note}\n")


def _show(args: argparse.Namespace, out: TextIO) -> int:
    with _open(args) as store:
        chosen, found = _analysed(_chosen(args, _read(args, store)))
    marks = {(c.series, c.device, c.after.uid): c for c in found}
    for s in chosen.series:
        _write_series(s, chosen.branch, marks, out)
    return 0


def _ack_matches(change: Change, args: argparse.Namespace) -> bool:
    """Whether ``ack``'s options pick ``change``: its node id contains the test, its memory mode is ``--mode`` and
    its device contains ``--device`` (each where given), and its first commit after starts with ``--commit``."""
    return (args.test in change.series.nodeid
            and (args.mode is None or change.series.mode == args.mode)
            and (args.device is None or args.device in change.device)
            and (change.after.context.commit or "").startswith(args.commit))


def _ack(args: argparse.Namespace, out: TextIO) -> int:
    if not args.reason.strip():
        raise _UsageError(f"ack {args.test} --reason={args.reason!r}: expected why the change is known and accepted "
                          "(it is kept with the change point and cannot be replaced)")
    with _open(args, write=True) as store:
        history, every = _analysed(_read(args, store))
        branch = history.branch
        found = [c for c in every if _ack_matches(c, args)]
        if not found:
            raise _UsageError(f"ack {args.test} --commit={args.commit}: no change point of branch {branch!r} "
                              "starts at that commit for that test (pytest-jetmem history regressions lists them)")
        author = args.author or getpass.getuser()
        for c in found:
            new = store.ack(c.series, c.device, c.after.uid, c.after.context.commit, args.reason, author)
            out.write(f"{'acknowledged' if new else 'already acknowledged'}: {c.series.name} on {c.device} at "
                      f"{c.after.short_commit} ({c.magnitude_text})\n")
    return 0


def _import(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.imports import import_source
    from pytest_jetmem.history.locate import choose_store
    from pytest_jetmem.history.location import parse_location

    choice = choose_store(args.store, Path.cwd())
    try:
        where = parse_location(choice.text, choice.base)
    except StoreError as exc:
        raise _UsageError(f"{choice.source}={exc.url}: {exc.reason}") from None
    new_file = where.path if where.path is not None and not where.path.exists() else None
    imported = 0
    try:
        with _open(args, create=True) as store:
            for source in args.sources:
                try:
                    result = import_source(store, source, branch=args.branch, commit=args.commit)
                except StoreError as exc:
                    raise _UsageError(f"import {source}: {exc.url}: {exc.reason}") from None
                except (OSError, ValueError, BaselineError, RecordError) as exc:
                    raise _UsageError(f"import {source}: {exc}") from None
                imported += 1
                out.write(result.line(source) + "\n")
    finally:
        if new_file is not None and imported == 0:  # a failed first import leaves no empty store behind
            for leftover in (new_file, new_file.with_name(new_file.name + "-journal")):
                leftover.unlink(missing_ok=True)
    return 0


def _upgrade(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.schema import SCHEMA_VERSION

    with _open(args) as store:  # opened as it is: upgrade() migrates
        before = store.upgrade()
    out.write(f"{store.url}: schema version {before} -> {SCHEMA_VERSION}\n" if before != SCHEMA_VERSION else
              f"{store.url}: already at schema version {SCHEMA_VERSION}\n")
    return 0


def _export(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.exports import FORMATS, export

    if args.fmt not in FORMATS:
        raise _UsageError(f"--format={args.fmt}: expected one of {', '.join(FORMATS)}")
    with _open(args) as store:
        text = export(store, _read(args, store), args.fmt)
    if args.output:
        from pytest_jetmem.atomic import write_atomic

        try:
            write_atomic(Path(args.output), text.encode())
        except OSError as exc:
            raise _UsageError(f"--output={args.output}: cannot write: {exc.strerror or exc}") from None
        out.write(f"wrote {args.output}\n")
    else:
        out.write(text)
    return 0


def _progress(done: int, total: int) -> None:
    """A progress bar on standard error, redrawn in place where it is a terminal (one line at the end elsewhere)."""
    if sys.stderr.isatty():
        filled = int(30 * done / max(total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{' ' * (30 - filled)}] {done}/{total} files")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _repo_url(given: str | None) -> str | None:
    """``--repo-url``, else git's ``origin`` remote as a web URL (``git@github.com:o/r.git`` and
    ``https://github.com/o/r.git`` both give ``https://github.com/o/r``); None where there is none."""
    if given:
        return _without_credentials(given.rstrip("/"))
    from pytest_jetmem.history.context import git_output

    url = git_output(Path.cwd(), "remote", "get-url", "origin") or ""
    if url.startswith("git@") and ":" in url:
        host, path = url[len("git@"):].split(":", 1)
        url = f"https://{host}/{path}"
    if not url.startswith(("https://", "http://")):
        return None
    url = _without_credentials(url)
    return url[: -len(".git")] if url.endswith(".git") else url


def _without_credentials(url: str) -> str:
    """``url`` without a ``user[:token]@`` before its host (git's origin may carry a token: never published)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host_end = len(rest)
    for mark in "/?#":
        found = rest.find(mark, 0, host_end)
        host_end = found if found >= 0 else host_end
    at = rest.rfind("@", 0, host_end)
    return f"{scheme}://{rest[at + 1:]}" if at >= 0 else url


def _publish(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.site import publish

    with _open(args) as store:
        history = _read(args, store)
        branch = history.branch
        try:
            marked, found = _analysed(history)
            pages = publish(store, marked, found, Path(args.directory), repo_url=_repo_url(args.repo_url),
                            progress=_progress)
        except (OSError, ValueError) as exc:
            raise _UsageError(f"publish {args.directory}: {exc}") from None
    out.write(f"published {len(pages)} file(s) of branch {branch or '(all)'} in {args.directory}: open "
              f"{Path(args.directory) / 'index.html'}\n")
    return 0


def _fleet(args: argparse.Namespace, out: TextIO) -> int:
    import json

    from pytest_jetmem.history.fleet import fleet_matrix

    with _open(args) as store:
        history = _read(args, store)
        branch = history.branch
        matrix = fleet_matrix(store, history)
    if args.json:
        out.write(json.dumps({"branch": branch, **matrix.to_json()}, indent=1, allow_nan=False) + "\n")
    else:
        out.write(f"branch {branch or '(all)'}: the mode the advice picks from each machine class's newest session\n")
        out.write(matrix.text().rstrip("\n") + "\n")
    return 0


_ACTIONS = {"regressions": _regressions, "show": _show, "ack": _ack, "import": _import, "export": _export,
            "fleet": _fleet, "publish": _publish, "upgrade": _upgrade}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; the exit status. What a command prints is written when it is done, so that a reader
    that goes away early (``| head``) changes neither the exit status nor what was stored."""
    stream = out or sys.stdout
    buffer = io.StringIO()
    try:
        args = _parser().parse_args(argv)
        status = _ACTIONS[args.action](args, buffer)
    except (_UsageError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        stream.write(buffer.getvalue())
        stream.flush()
    except BrokenPipeError:  # the reader went away: say nothing more, keep the status
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
