"""The ``pytest-jetmem`` command: ``pytest-jetmem history regressions|show|ack|import|export`` (docs/history.md).

Exit status: 0 done; 1 ``regressions`` found an unacknowledged regression (since ``--since``); 4 a usage error (a
bad option, a store that cannot be opened, a source that cannot be imported), said in one line naming the option
and the value, never a traceback.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from pytest_jetmem.errors import BaselineError, RecordError, StoreError

if TYPE_CHECKING:
    from pytest_jetmem.history.analysis import Change, Series
    from pytest_jetmem.history.model import SeriesKey, SessionRow
    from pytest_jetmem.history.store import Store
    from pytest_jetmem.machine.fingerprint import Machine

    #: A change point's place in ``show``: its series, its device and the uid of its first session after.
    _Mark = tuple[SeriesKey, str, str]

__all__ = ["main"]

USAGE_ERROR = 4
FOUND = 1
DEFAULT_STORE = ".jetmem/history.sqlite"


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

    def common(p: argparse.ArgumentParser, branch: bool = True) -> None:
        p.add_argument("--store", metavar="URL",
                       help=f"the results store (default $JETMEM_STORE, else {DEFAULT_STORE})")
        if branch:
            p.add_argument("--branch", help="the branch whose history is read (default: the default branch)")

    reg = sub.add_parser("regressions", help="the change points of every series; exit 1 on an unacknowledged "
                         "regression since --since")
    common(reg)
    reg.add_argument("--since", metavar="COMMIT|DATE", help="only change points after this commit or date "
                     "(YYYY-MM-DD or ISO 8601)")
    reg.add_argument("--min-pct", type=float, default=1.0, metavar="PCT",
                     help="a regression smaller than this (percent) does not fail (default 1.0)")
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
    imp = sub.add_parser("import", help="baseline files, --jetmem-benchmark-json files, session files or another "
                         "store")
    common(imp)
    imp.add_argument("sources", nargs="+", metavar="SOURCE")
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


def _store_text(args: argparse.Namespace) -> tuple[str, str]:
    if args.store is not None:
        return args.store, "--store"
    env = os.environ.get("JETMEM_STORE", "").strip()
    return (env, "JETMEM_STORE") if env else (DEFAULT_STORE, "--store (default)")


def _open(args: argparse.Namespace, *, create: bool = False) -> Store:
    from pytest_jetmem.history.store import open_store

    text, source = _store_text(args)
    try:
        return open_store(text, ".", create=create, write=create)
    except StoreError as exc:
        raise _UsageError(f"{source}={exc.url}: {exc.reason}") from None


def _branch(args: argparse.Namespace, store: Store) -> str | None:
    if args.branch:
        return str(args.branch)
    from pytest_jetmem.history.analysis import default_branch

    return default_branch(store, Path.cwd())


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


def _commit_key(since: str, store: Store, branch: str | None) -> str:
    """The commit-order key of the newest session of the one stored commit of ``branch`` that starts with
    ``since``; _UsageError where no commit or more than one starts so."""
    matches = [r for r in store.sessions(branch=branch) if r.context.commit and r.context.commit.startswith(since)]
    if not matches or len({r.context.commit for r in matches}) > 1:
        what = "no stored session of that commit" if not matches else "more than one commit starts so"
        raise _UsageError(f"--since={since}: expected a date (YYYY-MM-DD) or a stored commit of branch "
                          f"{branch!r}: {what}")
    return str(max(_order_key(r) for r in matches))


def _since_key(since: str, store: Store, branch: str | None) -> str | None:
    """The commit-order key after which a change point counts: a date's ISO text, or the newest session of the
    commit ``since`` names; None for git's null commit (all zeros: what CI gives as the commit before a branch's first
    push), which is no bound."""
    if since and set(since) == {"0"}:
        return None
    key = _date_key(since)
    return key if key is not None else _commit_key(since, store, branch)


def _order_key(row: SessionRow) -> str:
    """A session's commit-order key: its commit time, else when it started (both ISO 8601, UTC)."""
    return row.context.commit_time or row.started


def _is_failing(change: Change, min_pct: float, since: str | None) -> bool:
    """Whether ``change`` fails ``regressions``: an unacknowledged regression of at least ``min_pct`` percent whose
    first session after is later than ``since`` (a commit-order key; None: any)."""
    return (change.regression and change.ack is None and change.point.change_pct >= min_pct
            and (since is None or _order_key(change.after) > since))


def _status(change: Change, failing: Sequence[Change]) -> str:
    """The head of a change point's ``regressions`` line: ``acknowledged (REASON)``; else ``REGRESSION`` where it is
    in ``failing``; else ``regression``, ``improvement`` (the ratio's whole interval below 1) or ``change``."""
    if change.ack is not None:
        return f"acknowledged ({change.ack.reason})"
    if change in failing:
        return "REGRESSION"
    if change.regression:
        return "regression"
    return "improvement" if change.point.ci[1] < 1.0 else "change"


def _change_line(change: Change, status: str) -> str:
    """One change point's ``regressions`` line (newline included), headed by ``status``."""
    return (f"{status}: {change.series.name} on {change.device}: {change.magnitude_text}, "
            f"{change.point.before_ms:.4g} -> {change.point.after_ms:.4g} ms, between {change.before.short_commit} "
            f"and {change.after.short_commit}; cause: {change.cause_text}\n")


def _regressions(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import changes

    with _open(args) as store:
        branch = _branch(args, store)
        since = _since_key(args.since, store, branch) if args.since else None
        found = changes(store, branch)
    found.sort(key=lambda c: _order_key(c.after), reverse=True)
    failing = [c for c in found if _is_failing(c, args.min_pct, since)]
    out.write(f"branch {branch or '(all)'}: {len(found)} change point(s), {len(failing)} unacknowledged "
              f"regression(s){' since ' + args.since if args.since else ''}\n")
    for c in found:
        out.write(_change_line(c, _status(c, failing)))
    return FOUND if failing else 0


def _spark(values: Sequence[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    if high <= low:
        return bars[3] * len(values)
    return "".join(bars[min(7, int((v - low) / (high - low) * 8))] for v in values)


def _chosen(store: Store, branch: str | None, test: str, mode: str | None) -> list[Series]:
    """The series of ``branch`` whose node id contains ``test`` (and whose memory mode is ``mode``, where given);
    _UsageError where there is none."""
    from pytest_jetmem.history.analysis import histories

    chosen = [s for s in histories(store, branch) if test in s.key.nodeid and (mode is None or s.key.mode == mode)]
    if not chosen:
        raise _UsageError(f"show {test}: no series of branch {branch!r} matches "
                          f"{test!r}{' in mode ' + mode if mode else ''}")
    return chosen


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
    last_class = None
    for row, median in zip(series.sessions, series.medians, strict=True):
        if row.machine.machine_class != last_class:
            last_class = row.machine.machine_class
            out.write(_machine_line(row.machine))
        note = _note(marks.get((series.key, series.device, row.uid)))
        when = _order_key(row)[:16].replace("T", " ")
        out.write(f"    {row.short_commit:10}  {when}  {median:10.4g} ms{note}\n")


def _show(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import changes

    with _open(args) as store:
        branch = _branch(args, store)
        chosen = _chosen(store, branch, args.test, args.mode)
        marks = {(c.series, c.device, c.after.uid): c for c in changes(store, branch, series=chosen)}
    for s in chosen:
        _write_series(s, branch, marks, out)
    return 0


def _ack_matches(change: Change, args: argparse.Namespace) -> bool:
    """Whether ``ack``'s options pick ``change``: its node id contains the test, its memory mode is ``--mode`` and
    its device contains ``--device`` (each where given), and its first commit after starts with ``--commit``."""
    return (args.test in change.series.nodeid
            and (args.mode is None or change.series.mode == args.mode)
            and (args.device is None or args.device in change.device)
            and (change.after.context.commit or "").startswith(args.commit))


def _ack(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import changes

    with _open(args) as store:
        branch = _branch(args, store)
        found = [c for c in changes(store, branch) if _ack_matches(c, args)]
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

    with _open(args, create=True) as store:
        for source in args.sources:
            try:
                result = import_source(store, source, branch=args.branch, commit=args.commit)
            except StoreError as exc:
                raise _UsageError(f"import {source}: {exc.url}: {exc.reason}") from None
            except (OSError, ValueError, BaselineError, RecordError) as exc:
                raise _UsageError(f"import {source}: {exc}") from None
            out.write(result.line(source) + "\n")
    return 0


def _export(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.exports import FORMATS, export

    if args.fmt not in FORMATS:
        raise _UsageError(f"--format={args.fmt}: expected one of {', '.join(FORMATS)}")
    with _open(args) as store:
        text = export(store, args.fmt, branch=_branch(args, store))
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
        return given.rstrip("/")
    from pytest_jetmem.history.context import git_output

    url = git_output(Path.cwd(), "remote", "get-url", "origin") or ""
    if url.startswith("git@") and ":" in url:
        host, path = url[len("git@"):].split(":", 1)
        url = f"https://{host}/{path}"
    if not url.startswith(("https://", "http://")):
        return None
    return url[: -len(".git")] if url.endswith(".git") else url


def _publish(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.site import publish

    with _open(args) as store:
        branch = _branch(args, store)
        try:
            pages = publish(store, Path(args.directory), branch=branch, repo_url=_repo_url(args.repo_url),
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
        branch = _branch(args, store)
        matrix = fleet_matrix(store, branch)
    if args.json:
        out.write(json.dumps({"branch": branch, **matrix.to_json()}, indent=1, allow_nan=False) + "\n")
    else:
        out.write(f"branch {branch or '(all)'}: the mode the advice picks from each machine class's newest session\n")
        out.write(matrix.text().rstrip("\n") + "\n")
    return 0


_ACTIONS = {"regressions": _regressions, "show": _show, "ack": _ack, "import": _import, "export": _export,
            "fleet": _fleet, "publish": _publish}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; the exit status."""
    stream = out or sys.stdout
    try:
        args = _parser().parse_args(argv)
        return _ACTIONS[args.action](args, stream)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
