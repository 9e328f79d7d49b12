"""plugin.history: ``--jetmem-store`` keeps every session in the results store: once, by the process that owns the
session (serial, xdist), with its code's context; nothing stored for an interrupted session; a store that cannot
be used stops the run before any test (exit 4) naming the setting and the value; ``--jetmem-compare=BRANCH`` with
a store compares with that branch's sessions on this machine class, and a driver change starts a new class.

pytester runs against the fake driver (see test_plugin_runtime_baselines.py).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from fakes.fake_driver import PROFILES, FakeDriver, conftest_source
from pytest_jetmem.history.schema import SCHEMA_VERSION
from pytest_jetmem.history.store import open_store
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import BASE_FILE, InstallFake, inner

STORE = ".jetmem/history.sqlite"


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def _repo(pytester: pytest.Pytester) -> str:
    """The pytester dir as a git repository on branch main with one commit; its commit."""
    root = pytester.path
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".jetmem/\n__pycache__/\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "first")
    return _git(root, "rev-parse", "HEAD")


def _foreign_database(path: Path) -> None:
    """Another program's SQLite database at ``path``."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE other (x)")


def _counts(path: Path) -> tuple[int, int, int]:
    with open_store(str(path), create=False) as store:
        return store.counts()


def test_a_session_is_stored_once_with_its_commit(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    commit = _repo(pytester)
    result = pytester.runpytest("--jetmem-store")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: stored 3 measurement(s) of commit {commit[:10]} in *{STORE}"])
    path = pytester.path / STORE
    assert _counts(path) == (1, 3, 3)
    with open_store(str(path), create=False) as store:
        (row,) = store.sessions()
        assert row.context.commit == commit and row.context.branch == "main" and row.context.parents == ()
        assert row.context.dirty is False  # the test file is committed; .jetmem is ignored
        assert row.machine.device_name and row.origin == "pytest"
        assert row.device_facts is not None and row.device_facts["integrated"] is True  # the Orin: what advice needs
        records = store.records(row.id)
    names = sorted(r.nodeid.rsplit("::", 1)[-1] for r in records)
    assert names == ["test_gated[device]", "test_opted_out[device]", "test_unmarked[device]"]
    assert all(len(r.statistics.samples) == r.statistics.n > 0 for r in records)
    assert pytester.runpytest(f"--jetmem-store={path}").ret == pytest.ExitCode.OK  # a second session: kept too
    assert _counts(path) == (2, 3, 6)


def test_outside_git_the_commit_is_unknown_and_said_once(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT", "CIRCLE_SHA1"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(pytester.path.parent))
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    monkeypatch.setenv("JETMEM_STORE", "sqlite:///history.db")  # the environment variable, a relative SQLite URL
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.OK
    notes = [line for line in result.outlines if "commit is unknown" in line]
    assert notes == ["jetmem: not in a git repository: the commit is unknown"]
    result.stdout.fnmatch_lines(["jetmem: stored 3 measurement(s) of commit unknown commit in *history.db"])
    with open_store(str(pytester.path / "history.db"), create=False) as store:
        (row,) = store.sessions()
    assert row.context.commit is None and row.context.parents is None


def test_xdist_workers_store_nothing_the_controller_stores_all(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    _repo(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-store", "-n", "2")
    assert result.ret == pytest.ExitCode.OK
    assert sum("jetmem: stored 3 measurement(s)" in line for line in result.outlines) == 1
    assert _counts(pytester.path / STORE) == (1, 3, 3)  # one session, every worker's records


def test_an_interrupted_session_is_not_stored(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    assert pytester.runpytest("--jetmem-store").ret == pytest.ExitCode.OK
    path = pytester.path / STORE
    before = path.read_bytes()
    pytester.makepyfile(test_b=inner(BASE_FILE + "\ndef test_zz():\n    raise KeyboardInterrupt\n"))
    result = pytester.runpytest("--jetmem-store", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["jetmem: the session was interrupted (KeyboardInterrupt): not stored in *"])
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.mkdir(parents=True), "is a directory; expected a SQLite file"),
        (lambda p: p.write_bytes(b"this is no database" * 100), "not a SQLite database, or a damaged one"),
        (lambda p: _foreign_database(p),
         "a SQLite database, but not a pytest-jetmem store"),
    ],
    ids=["directory", "corrupt", "foreign"],
)
def test_a_store_that_cannot_be_used_stops_the_run(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, make: object, expected: str
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    path = pytester.path / "bad.sqlite"
    before = None
    make(path)  # type: ignore[operator]
    if path.is_file():
        before = path.read_bytes()
    result = pytester.runpytest(f"--jetmem-store={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--jetmem-store={path}: {expected}" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()
    if before is not None:
        assert path.read_bytes() == before  # nothing written


def test_a_store_of_a_newer_schema_is_refused(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    path = pytester.path / "new.sqlite"
    open_store(str(path)).close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE jetmem_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    result = pytester.runpytest(f"--jetmem-store={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"written by a newer pytest-jetmem (schema version {SCHEMA_VERSION + 1}" in result.stderr.str()


def test_a_bad_url_names_the_setting(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_b="def test_a():\n    pass\n")
    monkeypatch.setenv("JETMEM_STORE", "mysql://db/x")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "JETMEM_STORE=mysql://db/x: unknown store scheme 'mysql'" in result.stderr.str()
    result = pytester.runpytest("--jetmem-store=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--jetmem-store: expected a path, sqlite:///PATH or postgresql://..., got ''" in result.stderr.str()


def test_compare_reads_the_branch_from_the_store_and_a_driver_change_starts_a_class(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    _repo(pytester)
    for _ in range(2):
        assert pytester.runpytest("--jetmem-store").ret == pytest.ExitCode.OK
    result = pytester.runpytest("--jetmem-store", "--jetmem-compare=main", "-W", "ignore")
    assert result.ret == pytest.ExitCode.OK
    table = "\n".join(result.outlines)
    assert "unchanged" in table or "ambiguous" in table  # compared (two sessions: too few to know the noise)
    assert "no baseline" not in table
    fake: FakeDriver = install_fake_driver("orin", kernel_ms=0.1, driver_version=13010)
    assert fake.version == 13010
    result = pytester.runpytest("--jetmem-store", "--jetmem-compare=main")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "*no session of branch 'main' on this machine class (*) yet: its sessions on * ran on another class "
        "(driver_version * -> 13010); a new class starts with this session*"
    ])
    assert _counts(pytester.path / STORE)[0] == 4


def test_against_stores_the_change_once_in_the_parent(pytester: pytest.Pytester) -> None:
    """``--jetmem-against``: the base and the change run in child sessions; only the parent stores, once, the
    change's records (each with the base it was measured against)."""
    pytester.makeconftest(conftest_source("dgpu", kernel_ms=0.1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    commit = _repo(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-store", "--jetmem-against=HEAD")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert sum("jetmem: stored 3 measurement(s)" in line for line in result.outlines) == 1
    with open_store(str(pytester.path / STORE), create=False) as store:
        (row,) = store.sessions()
        records = store.records(row.id)
    assert row.context.commit == commit and len(records) == 3
    labels = {r.judgement.against.label if r.judgement.against is not None else None for r in records}
    assert len(labels) == 1 and None not in labels and "HEAD" in str(labels), labels


def test_benchmark_json_is_imported_as_the_session_it_was(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    from pytest_jetmem.cli import main

    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    assert pytester.runpytest("--jetmem-benchmark-json=bench.json", "--jetmem-report=r.html").ret == 0
    target = pytester.path / "imported.sqlite"
    bench = pytester.path / "bench.json"
    assert main(["history", "import", "--store", str(target), str(bench), "--branch", "main",
                 "--commit", "abc123"]) == 0
    assert main(["history", "import", "--store", str(target), str(bench)]) == 0  # again: already stored
    with open_store(str(target), create=False) as store:
        (row,) = store.sessions()
        records = {r.nodeid: r for r in store.records(row.id)}
    assert (row.context.branch, row.context.commit, row.origin) == ("main", "abc123", "import:benchmark-json")
    assert row.machine.device_name == "Orin"
    import json

    for reported in json.loads((pytester.path / "r.json").read_text())["rows"]:
        back = records[reported["nodeid"]]
        assert (back.identity.label, back.identity.scope) == (reported["label"], reported["scope"])
        assert back.statistics.samples == pytest.approx(reported["samples"], rel=1e-12)  # s -> ms: exact enough


UNREACHABLE_AT_THE_END = """
import os, shutil
from pathlib import Path

def test_zz_store_goes_away():
    store = Path(os.environ["STORE_UNDER_TEST"])
    store.unlink()
    store.mkdir()  # a directory where the store was: it cannot be opened at the end
"""


def test_a_store_gone_at_the_end_keeps_the_session_aside_for_import(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_jetmem.cli import main

    install_fake_driver("orin", kernel_ms=0.1)
    store = pytester.path / "h.sqlite"
    monkeypatch.setenv("STORE_UNDER_TEST", str(store))
    pytester.makepyfile(test_b=inner(BASE_FILE + UNREACHABLE_AT_THE_END))
    result = pytester.runpytest(f"--jetmem-store={store}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (kept,) = (pytester.path / ".jetmem" / "unstored").glob("*.json")
    line = [ln for ln in result.outlines if "jetmem: error: --jetmem-store" in ln]
    assert len(line) == 1 and "is a directory" in line[0] and str(kept) in line[0]
    target = pytester.path / "later.sqlite"
    assert main(["history", "import", "--store", str(target), str(kept.parent)]) == 0
    with open_store(str(target), create=False) as opened:
        (row,) = opened.sessions()
        assert len(opened.records(row.id)) == 3


PROFILE_NAMES = {name: profile.device_name for name, profile in PROFILES.items()}

FLEET_FILE = """
@pytest.mark.memmode("device", "managed", "zero_copy")
def test_fill(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_two_fake_boards_in_one_store_give_the_fleet_two_columns(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """Sessions of the fake Orin and the fake desktop GPU stored in one store: `history fleet` has a column per
    machine class, each with the advice of its own session (the advice knows the Orin is integrated)."""
    import io
    import json

    from pytest_jetmem.cli import main

    pytester.makepyfile(test_f=inner(FLEET_FILE))
    _repo(pytester)
    for profile in ("orin", "dgpu"):
        install_fake_driver(profile, kernel_ms=0.1)
        assert pytester.runpytest("--jetmem-store", "-W", "ignore").ret == pytest.ExitCode.OK
    out = io.StringIO()
    assert main(["history", "fleet", "--json", "--store", str(pytester.path / STORE)], out=out) == 0
    doc = json.loads(out.getvalue())
    assert sorted(c["device"].split(" (")[0] for c in doc["classes"]) == sorted(["Orin", PROFILE_NAMES["dgpu"]])
    (row,) = doc["rows"]
    assert row["test"].endswith("test_fill") and len(row["cells"]) == 2
    by_device = {c["machine_class"]: c["device"] for c in doc["classes"]}
    rules = {by_device[cls].split(" (")[0]: cell["advice"]["rule"]["kind"] for cls, cell in row["cells"].items()}
    assert rules["Orin"] != rules[PROFILE_NAMES["dgpu"]], rules  # the stored device facts: integrated or not
