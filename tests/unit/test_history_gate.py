"""The history gate cannot be fooled: outlying reruns, the newest session, commits of one second, a per-push CI step
whose change is confirmed late, a machine change a commit before a code change, dirty sessions; and the command
line's faults (a closed pipe, the store found as pytest finds it, credentials, a failed import, old schemas)."""

from __future__ import annotations

import io
import math
import random
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from history_sessions import ORIN, commit_of, session
from pytest_jetmem.cli import main
from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.schema import SCHEMA_VERSION
from pytest_jetmem.history.store import open_store

UPGRADED = replace(ORIN, driver_version=12080, l4t_release="36.5.0")
SERIES = 12  # 4 tests x 3 modes in every session of history_sessions


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _rerun(s: StoredSession, name: str) -> StoredSession:
    return replace(s, uid=f"{s.uid}-{name}")


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def _changes(text: str) -> list[str]:
    """Each change point's line less its figures: status, series, device, commits and cause."""
    out = []
    for line in text.splitlines()[1:]:
        head, _, rest = line.partition(": ")
        name, _, figures = rest.partition(": ")
        out.append(f"{head}: {name}: {figures.split(', between ', 1)[1]}")
    return sorted(out)


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Commits 0..59 on the Orin: every test 10% slower from commit 30 (the code), 20% more from 45 (the upgrade)."""
    path = tmp_path / "h.sqlite"
    with open_store(str(path)) as store:
        for seed in range(60):
            if seed < 45:
                store.add(session(seed, step_at=30, step=1.10))
            else:
                store.add(session(seed, step_at=0, step=1.10 * 1.20, machine=UPGRADED))
    return path


def test_an_outlying_rerun_anywhere_neither_hides_nor_creates_nor_moves(history: Path) -> None:
    code, clean = run("history", "regressions", "--store", str(history))
    assert code == 1 and clean.startswith("branch main: 24 change point(s)")
    with open_store(str(history)) as store:
        store.add(_rerun(session(20, step_at=0, step=2.0), "throttled"))  # an old commit, x2
        store.add(_rerun(session(31, step_at=0, step=1.10 * 1.3), "dirty"))  # inside the confirmation window
        store.add(_rerun(session(59, step_at=0, step=1.10 * 1.20 * 1.15, machine=UPGRADED), "again"))  # HEAD
    code, text = run("history", "regressions", "--store", str(history))
    assert code == 1
    assert _changes(text) == _changes(clean)  # the same change points, commits and causes
    assert sum("cause: machine: driver_version 12060 -> 12080" in line for line in text.splitlines()) == SERIES
    code, shown = run("history", "show", "test_0[device]", "--store", str(history))
    assert code == 0
    odd = [line for line in shown.splitlines() if "(outlier: left out)" in line]
    assert len(odd) == 3 and [line.split()[0] for line in odd] == [commit_of(s)[:10] for s in (20, 31, 59)]


def test_the_newest_session_alone_makes_no_change_point(tmp_path: Path) -> None:
    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for seed in range(40):
            store.add(session(seed))
        store.add(session(40, step_at=0, step=1.3))
    code, text = run("history", "regressions", "--store", path)
    assert (code, text.splitlines()[0]) == (0, "branch main: 0 change point(s), 0 unacknowledged regression(s)")
    with open_store(path) as store:
        store.add(session(41, step_at=0, step=1.3))  # the next commit agrees: a step
    code, text = run("history", "regressions", "--store", path)
    assert code == 1 and len(_lines(text, "REGRESSION")) == SERIES
    assert all(f"and {commit_of(40)[:10]}" in line for line in _lines(text, "REGRESSION"))


def _one_second(seed: int, factor: float) -> StoredSession:
    """Session ``seed`` of a series of commits made in one second, whose hashes sort against their order."""
    s = session(seed, step_at=0, step=factor)
    commit = f"{0xFFFFFF - seed:06x}" + "cd" * 17
    parent = f"{0xFFFFFF - seed + 1:06x}" + "cd" * 17
    ctx = SessionContext(commit=commit, branch="main", commit_time="2026-11-20T10:00:00Z",
                         parents=(parent,) if seed else (), dirty=False)
    return replace(s, context=ctx, started=f"2026-11-20T10:{seed:02d}:00Z")


def test_commits_of_one_second_read_in_the_order_of_their_parents(tmp_path: Path) -> None:
    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for seed in reversed(range(16)):  # stored in any order: a rebased series pushed at once
            store.add(_one_second(seed, 1.2 if seed >= 8 else 1.0))
    code, text = run("history", "regressions", "--store", path)
    assert code == 1 and len(_lines(text, "REGRESSION")) == SERIES, text
    assert all(f"between {0xFFFFFF - 7:06x}cdcd and {0xFFFFFF - 8:06x}cdcd; cause: code" in line
               for line in _lines(text, "REGRESSION"))


def _noisy(seed: int, rng: random.Random) -> StoredSession:
    """Session ``seed`` with 2% session-to-session noise and a +5% step from commit 30."""
    return session(seed, step_at=0, step=(1.05 if seed >= 30 else 1.0) * math.exp(rng.gauss(0, 0.02)))


def test_the_ci_step_goes_red_once_on_the_push_that_confirms_a_late_change(tmp_path: Path) -> None:
    """Pushes one commit at a time, each followed by the docs' CI step (``regressions --new``), on a history of 2%
    session noise with a +5% step at commit 30: every series goes red once, on the push that first reports its
    change, wherever its change point sits (some a few commits before that push, which ``--since`` the previous
    push misses), and never again; the first push to a new store is judged, not refused."""
    path = str(tmp_path / "h.sqlite")
    rng = random.Random(7)
    first_red: dict[str, int] = {}
    late = 0
    for seed in range(45):
        with open_store(path) as store:
            store.add(_noisy(seed, rng))
        code, text = run("history", "regressions", "--store", path, "--new")
        new = _lines(text, "REGRESSION: ")
        assert code == (1 if new else 0), text
        for line in new:
            name = line.split(": ", 2)[1].rsplit(" on ", 1)[0]
            assert name not in first_red, f"{name} reported again on push {seed}"
            first_red[name] = seed
            after = int(line.split(" and ", 1)[1][:6], 16)  # the change's first commit (commit_of: the seed)
            late += after < seed - 1  # older than the previous push: --since it would not see this one
        if seed == 0:
            assert code == 0  # the first push to a new store
    assert len(first_red) == SERIES and all(30 <= p <= 40 for p in first_red.values()), first_red
    assert late >= 1  # confirmed late, reported all the same


def test_since_a_commit_the_store_never_saw_is_judged_not_refused(history: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, text = run("history", "regressions", "--store", str(history), "--since", "deadbeef" * 5)
    assert code == 1 and "24 unacknowledged regression(s)" in text
    assert "no stored session of that commit: every change point is judged" in capsys.readouterr().err


def test_a_machine_change_a_commit_before_a_code_change_is_named(tmp_path: Path) -> None:
    """+8% from the driver upgrade at commit 30, +8% more from the code at 31: one change point (no segment of one
    commit), placed on the upgrade where the data allow, else on the code with the upgrade named beside it."""
    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for seed in range(50):
            factor = (1.08 if seed >= 30 else 1.0) * (1.08 if seed >= 31 else 1.0)
            store.add(session(seed, step_at=0, step=factor, machine=UPGRADED if seed >= 30 else ORIN))
    code, text = run("history", "regressions", "--store", path)
    assert code == 1
    lines = _lines(text, "REGRESSION")
    assert len(lines) == SERIES
    on = [line for line in lines if "cause: machine: driver_version 12060 -> 12080" in line]
    beside = [line for line in lines if f"cause: code ({commit_of(30)[:10]}..{commit_of(31)[:10]}); or the machine "
              "change 1 commit(s) before (driver_version 12060 -> 12080" in line]
    assert len(on) + len(beside) == SERIES and on


def test_dirty_sessions_are_left_out_unless_asked_and_marked(tmp_path: Path) -> None:
    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for seed in range(40):
            s = session(seed, step_at=0, step=1.4 if seed in (20, 21, 22) else 1.0)
            store.add(replace(s, context=replace(s.context, dirty=seed in (20, 21, 22))))  # edited, 40% slower
    code, text = run("history", "regressions", "--store", path)
    assert (code, text.splitlines()[0]) == (0, "branch main: 0 change point(s), 0 unacknowledged regression(s)")
    code, text = run("history", "regressions", "--store", path, "--include-dirty")
    assert code == 1 and len(_lines(text, "REGRESSION")) == SERIES  # counted: the excursion's step up
    code, shown = run("history", "show", "test_1[managed]", "--store", path)
    assert sum("(uncommitted changes: left out)" in line for line in shown.splitlines()) == 3


def test_a_pipe_closed_early_keeps_the_status_and_says_no_traceback(history: Path) -> None:
    exe = shutil.which("pytest-jetmem", path=str(Path(sys.executable).parent))
    assert exe is not None
    proc = subprocess.Popen([exe, "history", "regressions", "--store", str(history)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_the_command_finds_the_store_as_pytest_does_and_names_it(
    history: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / "hist").mkdir(parents=True)
    (project / "tests" / "deep").mkdir(parents=True)
    shutil.copyfile(history, project / "hist" / "h.sqlite")
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\njetmem_store = "hist/h.sqlite"\n')
    monkeypatch.chdir(project / "tests" / "deep")
    monkeypatch.delenv("JETMEM_STORE", raising=False)
    code, text = run("history", "regressions")
    assert code == 1 and "24 change point(s)" in text
    assert f"store {project / 'hist' / 'h.sqlite'} (jetmem_store in {project / 'pyproject.toml'})" in \
        capsys.readouterr().err
    monkeypatch.setenv("JETMEM_STORE", "nowhere.sqlite")  # the environment before the ini key, as in pytest
    code, _ = run("history", "regressions")
    assert code == 4 and f"JETMEM_STORE={project / 'nowhere.sqlite'}: no such store" in capsys.readouterr().err


def test_publish_never_copies_credentials_into_links(history: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    code, _ = run("history", "publish", str(site), "--store", str(history), "--repo-url",
                  "https://ci-bot:ghp_S3cret@github.com/o/r")
    assert code == 0
    text = "".join(p.read_text() for p in site.glob("*.html"))
    assert "https://github.com/o/r/commit/" in text and "S3cret" not in text and "ci-bot" not in text


def test_a_failed_first_import_leaves_no_store_behind(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    target = tmp_path / "new" / "h.sqlite"
    code, _ = run("history", "import", "--store", str(target), str(bad))
    assert code == 4 and not target.exists()


def test_reading_commands_never_migrate_and_upgrade_does(tmp_path: Path) -> None:
    real = Path(__file__).parents[2] / "benchmarks" / "results" / "2026-11-26-h200-history" / "demo-history.sqlite"
    copy = tmp_path / "v1.sqlite"
    shutil.copyfile(real, copy)
    before = copy.read_bytes()
    for argv in (["regressions"], ["show", "test_"], ["fleet"], ["export", "--format", "bmf"]):
        code, _ = run("history", *argv, "--store", str(copy))
        assert code in (0, 1), argv
    assert copy.read_bytes() == before
    code, text = run("history", "upgrade", "--store", str(copy))
    assert code == 0 and f"schema version 1 -> {SCHEMA_VERSION}" in text
    with closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("SELECT value FROM jetmem_meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),)
    code, text = run("history", "upgrade", "--store", str(copy))
    assert code == 0 and "already at schema version" in text


def test_a_damaged_measurement_is_one_line_in_every_command_and_in_the_compare(
    history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zlib

    from pytest_jetmem.errors import BaselineError
    from pytest_jetmem.history.reference import reference_baseline

    with closing(sqlite3.connect(history)) as conn, conn:
        conn.execute("UPDATE jetmem_measurements SET samples = ?, record = ?",
                     (b"\x78\x9c garbage", zlib.compress(b"[1, 2]")))
    for argv in (["export", "--format", "bmf"], ["fleet"], ["publish", str(tmp_path / "site")]):
        code, _ = run("history", *argv, "--store", str(history))
        err = capsys.readouterr().err
        assert code == 4, argv
        assert "a damaged measurement in session session-" in err and "Traceback" not in err, err
    with pytest.raises(BaselineError, match="--jetmem-store: a damaged measurement in session"):
        reference_baseline(str(history), "--jetmem-store", "main", UPGRADED, 10, base=tmp_path)


def test_a_0_ms_measurement_is_shown_left_out_and_breaks_no_view(history: Path, tmp_path: Path) -> None:
    with open_store(str(history)) as store:
        store.add(_rerun(session(40, step_at=0, step=0.0), "zero"))  # a measurement too short to time: 0 ms
    code, text = run("history", "regressions", "--store", str(history))
    assert code == 1 and text.startswith("branch main: 24 change point(s)")
    code, shown = run("history", "show", "test_2[device]", "--store", str(history))
    assert code == 0 and sum("(0 ms: left out)" in line for line in shown.splitlines()) == 1
    for argv in (["export", "--format", "otava"], ["fleet"], ["publish", str(tmp_path / "site")]):
        code, _ = run("history", *argv, "--store", str(history))
        assert code == 0, argv


def test_the_compare_reference_leaves_dirty_sessions_out(tmp_path: Path) -> None:
    from pytest_jetmem.errors import BaselineNotFound
    from pytest_jetmem.history.reference import reference_baseline

    path = str(tmp_path / "h.sqlite")
    with open_store(path) as store:
        for seed in range(6):
            s = session(seed, step_at=0, step=2.0 if seed >= 4 else 1.0)
            store.add(replace(s, context=replace(s.context, dirty=seed >= 4)))  # the two newest: edited, x2
    base = reference_baseline(path, "--jetmem-store", "main", ORIN, 3, base=tmp_path)
    assert base.session == "session-3"  # the newest clean one
    entry = next(iter(base.entries.values()))
    assert entry.run_sessions == ("session-1", "session-2", "session-3")
    only_dirty = str(tmp_path / "d.sqlite")
    with open_store(only_dirty) as store:
        s = session(0)
        store.add(replace(s, context=replace(s.context, dirty=True)))
    with pytest.raises(BaselineNotFound, match="only sessions of trees with uncommitted changes"):
        reference_baseline(only_dirty, "--jetmem-store", "main", ORIN, 3, base=tmp_path)
