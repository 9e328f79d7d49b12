"""plugin.history's faults: a session is stored only when it ran to its end (Ctrl-C once or twice, at any moment,
stores nothing); a store and an aside file that cannot be written still lose nothing and end in one clear line,
never a traceback; a store removed during the session is never made again without a word; a dirty session says
that change points leave it out.

pytester runs against the fake driver (see test_plugin_runtime_baselines.py); the Ctrl-C runs are subprocesses
that send themselves SIGINT at the moment under test (a KeyboardInterrupt inside the store's write: in-process).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from fakes.fake_driver import conftest_source
from pytest_jetmem.history.store import open_store
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import BASE_FILE, InstallFake, inner

STORE = ".jetmem/history.sqlite"


def _sessions(path: Path) -> int:
    with open_store(str(path), create=False) as store:
        return store.counts()[0]


# -- 1. an interrupted session is never stored as complete ----------------------------------------------------------
# Ctrl-C as in a terminal: a suite started in the background by a non-interactive shell runs with SIGINT ignored,
# which its children inherit (Python then installs no handler, and the plugin rightly listens for none); the
# conftest is read before the session starts, where the plugin starts listening.
SIGINT_AS_IN_A_TERMINAL = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
"""

CTRL_C_TWICE = """
import os, signal, time

class SecondCtrlC:
    def __repr__(self):  # pytest formats the first Ctrl-C's traceback, funcargs and all: the second lands here
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
        return "never"

@pytest.fixture
def slow_to_show():
    return SecondCtrlC()

def test_zz_ctrl_c_twice(slow_to_show):
    os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C
    time.sleep(30)
"""

CTRL_C_AT_THE_END = """
import os, signal, time

@pytest.fixture(scope="session")
def swallows_ctrl_c_at_the_end():
    yield
    try:  # the session's end: Ctrl-C while its fixtures are torn down, by code that carries on after it
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    except KeyboardInterrupt:
        pass

def test_a_first(swallows_ctrl_c_at_the_end):
    pass
"""


@pytest.mark.parametrize("moment", ["twice", "at_the_end"])
def test_ctrl_c_stores_nothing(pytester: pytest.Pytester, moment: str) -> None:
    """Ctrl-C twice (the second while pytest handles the first) or once while the session ends: nothing stored."""
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1) + SIGINT_AS_IN_A_TERMINAL)
    body = CTRL_C_TWICE if moment == "twice" else CTRL_C_AT_THE_END
    pytester.makepyfile(test_b=inner(BASE_FILE + body))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-store", timeout=120)
    text = result.stdout.str()
    if moment == "twice":  # the second KeyboardInterrupt escapes pytest's handler of the first and ends the process
        assert result.ret != pytest.ExitCode.OK, text
    assert "jetmem: stored" not in text
    assert "jetmem: the session was interrupted (KeyboardInterrupt): not stored in " in text
    assert _sessions(pytester.path / STORE) == 0


def _measurements_insert_raises(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """SQLite, at the driver's boundary: the insert of a session's measurements raises ``exc`` (the session's row is
    written by then, in the same transaction)."""
    real_connect = sqlite3.connect

    class Cursor(sqlite3.Cursor):
        def executemany(self, sql: str, params: Any, /) -> sqlite3.Cursor:
            if "INSERT INTO jetmem_measurements" in sql:
                raise exc
            return super().executemany(sql, params)

    class Connection(sqlite3.Connection):
        def cursor(self, factory: Any = Cursor) -> Any:
            return super().cursor(factory)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        return real_connect(*args, **kwargs, factory=Connection)

    monkeypatch.setattr(sqlite3, "connect", connect)


def test_ctrl_c_inside_the_stores_write_commits_nothing(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt in the middle of the store's transaction (its session row written, its measurements
    not): rolled back, the store as it was, the session said to be interrupted, exit status 2, no traceback."""
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    assert pytester.runpytest("--jetmem-store").ret == pytest.ExitCode.OK
    path = pytester.path / STORE
    before = _sessions(path)
    _measurements_insert_raises(monkeypatch, KeyboardInterrupt())
    result = pytester.runpytest("--jetmem-store")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["jetmem: the session was interrupted (KeyboardInterrupt) while it was being stored: "
                                 "not stored in *history.sqlite (the store is as it was)"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    monkeypatch.undo()
    assert _sessions(path) == before == 1


# -- 2. a store and an aside file that cannot be written: one line, the session kept elsewhere, exit status 1 ------
def _full_disk_under(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """The disk under ``root`` is full: the store's write fails (SQLite's own error) and so does every atomic file
    write there (ENOSPC); writes elsewhere work."""
    from pytest_jetmem import atomic

    real = atomic.write_atomic

    def write(path: str | os.PathLike[str], data: bytes | str, *, sync_dir: bool = False) -> None:
        if Path(path).resolve().is_relative_to(root.resolve()):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data, sync_dir=sync_dir)

    _measurements_insert_raises(monkeypatch, sqlite3.OperationalError("database or disk is full"))
    monkeypatch.setattr(atomic, "write_atomic", write)


@pytest.mark.parametrize("temp_works", [True, False], ids=["kept_in_temp", "kept_nowhere"])
def test_a_full_disk_ends_in_one_line_and_keeps_the_session_where_it_can(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory, temp_works: bool,
) -> None:
    from pytest_jetmem.cli import main

    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    elsewhere = tmp_path_factory.mktemp("system_temp") if temp_works else pytester.path / "tmp"
    elsewhere.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    _full_disk_under(monkeypatch, pytester.path)
    result = pytester.runpytest("--jetmem-store")
    monkeypatch.undo()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    (line,) = [ln for ln in result.outlines if "jetmem: error: --jetmem-store" in ln]
    assert not list(pytester.path.glob(".jetmem/unstored/*.json"))
    assert "cannot store the session: database or disk is full" in line
    assert f"could not be written to {pytester.path}/.jetmem/unstored/" in line
    assert "either (ENOSPC: No space left on device)" in line
    kept = list(elsewhere.glob("pytest-jetmem-unstored-*.json"))
    if temp_works:
        assert len(kept) == 1 and f"it was written to {kept[0]} instead (pytest-jetmem history import it later)" in line
        target = pytester.path / "later.sqlite"
        assert main(["history", "import", "--store", str(target), str(kept[0])]) == 0
        with open_store(str(target), create=False) as store:
            (row,) = store.sessions()
            assert len(store.records(row.id)) == 3
    else:
        assert not kept
        ending = ("(ENOSPC: No space left on device): its 3 measurement(s) are not kept anywhere (the table above "
                  "has them)")
        kept_at = f"{re.escape(str(elsewhere))}/pytest-jetmem-unstored-[0-9a-f]+\\.json"
        assert re.search(f"nor to {kept_at} {re.escape(ending)}$", line), line
    assert _sessions(pytester.path / STORE) == 0


# -- 3. a store removed during the session is not made again --------------------------------------------------------
STORE_REMOVED = """
import os, shutil
from pathlib import Path

def test_zz_store_removed():
    shutil.rmtree(Path(os.environ["STORE_UNDER_TEST"]).parent)  # the store's folder, removed mid-session
"""


def test_a_store_removed_mid_session_is_not_made_again(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    store = pytester.path / "db" / "h.sqlite"
    monkeypatch.setenv("STORE_UNDER_TEST", str(store))
    pytester.makepyfile(test_b=inner(BASE_FILE + STORE_REMOVED))
    result = pytester.runpytest(f"--jetmem-store={store}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not store.parent.exists()  # never made again
    (kept,) = (pytester.path / ".jetmem" / "unstored").glob("*.json")
    (line,) = [ln for ln in result.outlines if "jetmem: error: --jetmem-store" in ln]
    assert line == (f"jetmem: error: --jetmem-store: {store}: the store is gone (it existed when the session started); "
                    f"the session was written to {kept} instead (pytest-jetmem history import it later)")
    assert not any("jetmem: stored" in ln for ln in result.outlines)


# -- 6. a dirty session says that change points leave it out -------------------------------------------------------
def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def test_a_dirty_session_says_it_is_left_out_of_change_points(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    root = pytester.path
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".jetmem/\n__pycache__/\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "first")
    commit = _git(root, "rev-parse", "HEAD")
    result = pytester.runpytest("--jetmem-store")
    result.stdout.fnmatch_lines([f"jetmem: stored 3 measurement(s) of commit {commit[:10]} in *{STORE}"])
    assert "uncommitted" not in result.stdout.str()
    pytester.makepyfile(test_b=inner(BASE_FILE + "\n# an uncommitted change\n"))
    result = pytester.runpytest("--jetmem-store")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: stored 3 measurement(s) of commit {commit[:10]} (uncommitted changes: "
                                 f"left out of change points) in *{STORE}"])
