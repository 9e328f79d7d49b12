"""The ``pytest-jetmem history`` command line on a store with a code regression and a driver/JetPack upgrade:
regressions (exit 1, then 0 once acknowledged or before --since), show, ack, import, export; usage errors exit 4
with one line naming the option and the value."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from history_sessions import ORIN, commit_of, session
from pytest_jetmem.cli import main
from pytest_jetmem.history.store import open_store
from pytest_jetmem.measure.baseline import BaselineStore, Entry

UPGRADED = replace(ORIN, driver_version=12080, l4t_release="36.5.0")
CODE_STEP, UPGRADE = 30, 45


def _build(path: Path, n: int = 60) -> None:
    """Commits 0..n-1 on the Orin: every test 10% slower from commit 30 (the code), 20% more from 45 (the upgrade)."""
    with open_store(str(path)) as store:
        for seed in range(n):
            if seed < UPGRADE:
                s = session(seed, step_at=CODE_STEP, step=1.10)
            else:
                s = session(seed, step_at=0, step=1.10 * 1.20, machine=UPGRADED)
            store.add(s)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = tmp_path / "h.sqlite"
    _build(path)
    return str(path)


def _commit(seed: int) -> str:
    return commit_of(seed)


def test_regressions_finds_the_code_step_and_the_upgrade_with_their_causes(store: str) -> None:
    code, text = run("history", "regressions", "--store", store)
    assert code == 1
    lines = text.splitlines()
    assert lines[0].startswith("branch main: 24 change point(s), 24 unacknowledged regression(s)")
    code_lines = [line for line in lines if f"between {_commit(CODE_STEP - 1)[:10]} and {_commit(CODE_STEP)[:10]}"
                  in line]
    upgrade_lines = [line for line in lines if f"and {_commit(UPGRADE)[:10]}" in line]
    assert len(code_lines) == len(upgrade_lines) == 12  # 4 tests x 3 modes
    assert all(line.startswith("REGRESSION: ") and "cause: code (" in line for line in code_lines)
    assert all("cause: machine: driver_version 12060 -> 12080; l4t_release '36.4.3' -> '36.5.0', and the code"
               in line for line in upgrade_lines)
    pcts = [float(line.split(": ", 2)[2].split("%", 1)[0]) for line in code_lines]
    assert all(8.5 < pct < 11.5 for pct in pcts), pcts  # the step injected: +10% (the samples jitter 1%)


def test_since_a_commit_after_both_steps_nothing_is_new(store: str) -> None:
    code, text = run("history", "regressions", "--store", store, "--since", _commit(50)[:12])
    assert code == 0, text
    assert "0 unacknowledged regression(s) since" in text
    code, _ = run("history", "regressions", "--store", store, "--since", "2026-11-01")
    assert code == 1
    code, _ = run("history", "regressions", "--store", store, "--since", "0" * 40)  # CI's "before" of a new branch
    assert code == 1  # no bound: every regression counts


def test_ack_silences_a_change_point_and_keeps_the_reason(store: str) -> None:
    for t in range(4):
        code, text = run("history", "ack", f"test_{t}[", "--store", store, "--commit", _commit(CODE_STEP)[:8],
                         "--reason", "bigger tiles, accepted", "--author", "ci")
        assert code == 0 and text.count("acknowledged: ") == 3
    code, text = run("history", "regressions", "--store", store)
    assert code == 1 and "12 unacknowledged" in text
    assert text.count("acknowledged (bigger tiles, accepted)") == 12
    for t in range(4):
        run("history", "ack", f"test_{t}[", "--store", store, "--commit", _commit(UPGRADE)[:8], "--reason",
            "JetPack 6.2 upgrade")
    code, text = run("history", "regressions", "--store", store)
    assert code == 0 and "0 unacknowledged" in text
    code, text = run("history", "ack", "test_0[", "--store", store, "--commit", _commit(UPGRADE)[:8], "--reason", "x")
    assert code == 0 and "already acknowledged" in text


def test_show_prints_the_series_per_machine_class_with_the_changes(store: str) -> None:
    code, text = run("history", "show", "test_1[", "--store", store, "--mode", "device")
    assert code == 0
    assert "tests/test_k.py::test_1[device] k:kernel on Orin (sm_87) (branch main): 60 session(s)" in text
    assert text.count("machine class ") == 2  # the upgrade starts a class
    assert "driver 12060, L4T 36.4.3, power mode MAXN" in text and "driver 12080, L4T 36.5.0" in text
    marked = [line for line in text.splitlines() if "<-" in line]
    assert [line.split()[0] for line in marked] == [_commit(CODE_STEP)[:10], _commit(UPGRADE)[:10]]


def test_import_baselines_stores_and_is_idempotent(tmp_path: Path, store: str) -> None:
    baselines = BaselineStore(tmp_path / "baselines")
    entries = {"t.py::test_a[device]::device::fill:kernel": Entry("t.py::test_a[device]", "device", "fill:kernel",
                                                                   (0.1, 0.11, 0.12))}
    baselines.save("main", ORIN, entries, "s1")
    baselines.save("main", ORIN, entries, "s2", append=True)
    target = str(tmp_path / "merged.sqlite")
    code, text = run("history", "import", "--store", target, str(baselines.path("main")), store)
    assert code == 0, text
    assert "2 session(s) added" in text and "60 session(s) added" in text
    code, text = run("history", "import", "--store", target, str(baselines.path("main")), store)
    assert "0 session(s) added, 2 already stored" in text and "0 session(s) added, 60 already stored" in text
    with open_store(target, create=False) as merged:
        rows = merged.sessions(branch="main")
        assert len(rows) == 62
        imported = [r for r in rows if r.origin == "import:baseline"]
        (record,) = merged.records(imported[0].id)
        assert (record.identity.label, record.identity.scope, record.statistics.samples) == ("fill", "kernel",
                                                                                              (0.1, 0.11, 0.12))


def test_exports_are_read_back(store: str, tmp_path: Path) -> None:
    code, text = run("history", "export", "--store", store, "--format", "otava")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 60 and rows[0]["commit"] == _commit(0)
    code, text = run("history", "export", "--store", store, "--format", "bmf")
    bmf = json.loads(text)
    assert len(bmf) == 12 and all("latency" in v for v in bmf.values())
    out = tmp_path / "gab.json"
    code, text = run("history", "export", "--store", store, "--format", "github-action-benchmark", "-o", str(out))
    assert code == 0 and len(json.loads(out.read_text())) == 12


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["history", "regressions", "--store", "{missing}"], "--store={missing}: no such store"),
        (["history", "export", "--store", "{store}", "--format", "xml"], "--format=xml: expected one of bmf, "),
        (["history", "regressions", "--store", "{store}", "--branch", "nope"],
         "--branch=nope: no session of that branch in {store} (its branches: main)"),
        (["history", "show", "test_99", "--store", "{store}"], "show test_99: no series of branch 'main' matches"),
        (["history", "ack", "test_0[", "--store", "{store}", "--commit", "ffff", "--reason", "r"],
         "ack test_0[ --commit=ffff: no change point"),
        (["history", "import", "--store", "{store}", "{bad}"], "import {bad}: "),
        (["history", "frobnicate"], "invalid choice: 'frobnicate'"),
        (["history", "regressions", "--store", "{store}", "--min-pct", "x"],
         "--min-pct: expected a finite percentage >= 0, got 'x'"),
        (["history", "regressions", "--store", "{store}", "--min-pct", "nan"],
         "--min-pct: expected a finite percentage >= 0, got 'nan'"),
        (["history", "regressions", "--store", "{store}", "--min-pct", "inf"],
         "--min-pct: expected a finite percentage >= 0, got 'inf'"),
        (["history", "ack", "test_0[", "--store", "{store}", "--commit", "ffff", "--reason", " "],
         "ack test_0[ --reason=' ': expected why the change is known"),
    ],
)
def test_usage_errors_exit_4_with_one_line(
    argv: list[str], message: str, store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    fill = {"missing": str(tmp_path / "none.sqlite"), "store": store, "bad": str(bad)}
    code, _ = run(*(a.format(**fill) for a in argv))
    assert code == 4
    err = capsys.readouterr().err
    assert message.format(**fill) in err
    assert "Traceback" not in err


def test_the_console_script_is_installed(store: str) -> None:
    exe = shutil.which("pytest-jetmem", path=str(Path(sys.executable).parent))
    assert exe is not None, "pytest-jetmem is not on the venv's PATH: pip install -e . again"
    done = subprocess.run([exe, "history", "regressions", "--store", store], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "unacknowledged regression(s)" in done.stdout


def test_fleet_in_the_terminal_and_as_json(store: str) -> None:
    code, text = run("history", "fleet", "--store", store)
    assert code == 0 and text.startswith("branch main: the mode the advice picks")
    assert "Orin (sm_87)" in text and "L4T 36.5.0" in text  # the upgraded class is a column of its own
    code, text = run("history", "fleet", "--store", store, "--json")
    doc = json.loads(text)
    assert code == 0 and doc["branch"] == "main" and len(doc["classes"]) == 2
    assert doc["rows"] and all("cells" in row for row in doc["rows"])


def test_publish_writes_a_site_and_refuses_a_folder_of_other_files(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    code, text = run("history", "publish", str(site), "--store", store, "--repo-url", "https://example.invalid/o/r")
    assert code == 0 and f"open {site / 'index.html'}" in text
    assert (site / "index.html").is_file() and (site / "fleet.json").is_file()
    assert "https://example.invalid/o/r/commit/" in "".join(p.read_text() for p in site.glob("test-*.html"))
    code, _ = run("history", "publish", str(site), "--store", store)  # its own site: replaced
    assert code == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    code, _ = run("history", "publish", str(mine), "--store", store)
    assert code == 4 and (mine / "notes.txt").read_text() == "keep"
    assert f"publish {mine}: " in capsys.readouterr().err
