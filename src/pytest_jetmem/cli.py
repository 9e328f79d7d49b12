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
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from pytest_jetmem.errors import BaselineError, RecordError, StoreError

if TYPE_CHECKING:
    from pytest_jetmem.history.store import Store

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


def _since_key(since: str, store: Store, branch: str | None) -> str:
    """The commit-order key after which a change point counts: a date's ISO text, or the newest session of the
    commit ``since`` names."""
    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is not None:
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    matches = [r for r in store.sessions(branch=branch) if r.context.commit and r.context.commit.startswith(since)]
    if not matches or len({r.context.commit for r in matches}) > 1:
        what = "no stored session of that commit" if not matches else "more than one commit starts so"
        raise _UsageError(f"--since={since}: expected a date (YYYY-MM-DD) or a stored commit of branch "
                          f"{branch!r}: {what}")
    return str(max(r.context.commit_time or r.started for r in matches))


def _regressions(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import changes

    with _open(args) as store:
        branch = _branch(args, store)
        since = _since_key(args.since, store, branch) if args.since else None
        found = changes(store, branch)
    found.sort(key=lambda c: (c.after.context.commit_time or c.after.started), reverse=True)
    failing = [c for c in found if c.regression and c.ack is None and c.point.change_pct >= args.min_pct
               and (since is None or (c.after.context.commit_time or c.after.started) > since)]
    out.write(f"branch {branch or '(all)'}: {len(found)} change point(s), {len(failing)} unacknowledged "
              f"regression(s){' since ' + args.since if args.since else ''}\n")
    for c in found:
        status = ("REGRESSION" if c in failing else "regression" if c.regression else "improvement" if
                  c.point.ci[1] < 1.0 else "change")
        if c.ack is not None:
            status = f"acknowledged ({c.ack.reason})"
        out.write(f"{status}: {c.series.name} on {c.device}: {c.magnitude_text}, "
                  f"{c.point.before_ms:.4g} -> {c.point.after_ms:.4g} ms, between {c.before.short_commit} and "
                  f"{c.after.short_commit}; cause: {c.cause_text}\n")
    return FOUND if failing else 0


def _spark(values: Sequence[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    if high <= low:
        return bars[3] * len(values)
    return "".join(bars[min(7, int((v - low) / (high - low) * 8))] for v in values)


def _show(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import changes, histories

    with _open(args) as store:
        branch = _branch(args, store)
        chosen = [s for s in histories(store, branch) if args.test in s.key.nodeid
                  and (args.mode is None or s.key.mode == args.mode)]
        if not chosen:
            raise _UsageError(f"show {args.test}: no series of branch {branch!r} matches "
                              f"{args.test!r}{' in mode ' + args.mode if args.mode else ''}")
        marks = {(c.series, c.device, c.after.uid): c for c in changes(store, branch, keep=lambda s: s in chosen)}
    for s in chosen:
        out.write(f"\n{s.key.name} on {s.device} (branch {branch}): {len(s.medians)} session(s)  "
                  f"{_spark(s.medians)}\n")
        last_class = None
        for row, median in zip(s.sessions, s.medians, strict=True):
            if row.machine.machine_class != last_class:
                last_class = row.machine.machine_class
                out.write(f"  machine class {last_class}: driver {row.machine.driver_version}, "
                          f"L4T {row.machine.l4t_release or '-'}, power mode {row.machine.nvpmodel_mode or '-'}, "
                          f"bindings {row.machine.cuda_bindings_version or '-'}\n")
            change = marks.get((s.key, s.device, row.uid))
            note = f"  <- {change.magnitude_text}, cause: {change.cause_text}" if change else ""
            if change is not None and change.ack is not None:
                note += f" (acknowledged: {change.ack.reason})"
            when = (row.context.commit_time or row.started)[:16].replace("T", " ")
            out.write(f"    {row.short_commit:10}  {when}  {median:10.4g} ms{note}\n")
    return 0


def _ack(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_jetmem.history.analysis import changes

    with _open(args) as store:
        branch = _branch(args, store)
        found = [c for c in changes(store, branch) if args.test in c.series.nodeid
                 and (args.mode is None or c.series.mode == args.mode)
                 and (args.device is None or args.device in c.device)
                 and (c.after.context.commit or "").startswith(args.commit)]
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


_ACTIONS = {"regressions": _regressions, "show": _show, "ack": _ack, "import": _import, "export": _export}


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
