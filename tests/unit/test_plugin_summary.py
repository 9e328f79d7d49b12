"""plugin.summary: ``--jetmem-summary=PATH`` (ini ``jetmem_summary``), else ``$GITHUB_STEP_SUMMARY``: the process that
owns the session appends one Markdown section (counts, what was compared with, every measurement with the regressed
first) and keeps what the file held; xdist workers write nothing; a path that cannot be written fails the run with
one error naming the setting and the path. The builder (pytest_jetmem.report.summary) is tested without pytest too.

pytester runs against the fake driver (see test_plugin_runtime_baselines.py).
"""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest

from fakes.fake_driver import conftest_source
from pytest_jetmem.measure.compare import Verdict
from pytest_jetmem.measure.record import (
    BaselineComparison,
    Conditions,
    Identity,
    Judgement,
    MeasurementRecord,
    NotCompared,
    NotComparedWhy,
    RecordVerdict,
    Statistics,
)
from pytest_jetmem.report.summary import ComparedWith, escape, summary_markdown
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import BASE_FILE, InstallFake, inner

ENV = "GITHUB_STEP_SUMMARY"
BEFORE = "# Earlier step\n\nsome text another step wrote\n"
BASE_TESTS = {"test_gated[device]", "test_opted_out[device]", "test_unmarked[device]"}


@pytest.fixture(autouse=True)
def _no_step_summary_of_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under GitHub Actions the outer run has the variable set: the inner runs must not write to the job's file."""
    monkeypatch.delenv(ENV, raising=False)


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _table(text: str) -> list[list[str]]:
    """The body rows of the (one) Markdown table in ``text``, as cells (the escapes left as written)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) >= 2 and set(lines[1]) <= set("|-:"), lines
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[2:]]


def _sections(text: str) -> int:
    return sum(line.startswith("## pytest-jetmem") for line in text.splitlines())


# -- pytester runs ------------------------------------------------------------------------------------------------
def test_the_option_appends_a_section_and_keeps_what_was_there(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    target = pytester.path / "out" / "summary.md"
    target.parent.mkdir()
    target.write_text(BEFORE, encoding="utf-8")
    result = pytester.runpytest(f"--jetmem-summary={target}")
    assert result.ret == pytest.ExitCode.OK
    text = target.read_text("utf-8")
    assert text.startswith(BEFORE) and _sections(text) == 1
    section = text[len(BEFORE) :]
    assert section.lstrip("\n").startswith("## pytest-jetmem: 3 measured, 0 regressed\n")
    assert "No comparison" in section
    rows = _table(section)
    assert {r[0].rsplit("::", 1)[-1].replace("\\", "") for r in rows} == BASE_TESTS
    assert all(r[0].startswith("test\\_b.py::") for r in rows)  # the whole node id, escaped
    assert {r[1] for r in rows} == {"device"} and {r[2] for r in rows} == {"fill:kernel"}
    assert all(float(r[3]) > 0 for r in rows)
    result = pytester.runpytest(f"--jetmem-summary={target}")  # a second session: a second section after the first
    assert result.ret == pytest.ExitCode.OK
    again = target.read_text("utf-8")
    assert again.startswith(text) and _sections(again) == 2


def test_github_step_summary_is_used_and_the_option_wins(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    step = pytester.path / "step_summary.md"
    step.write_text(BEFORE, encoding="utf-8")
    monkeypatch.setenv(ENV, str(step))
    assert pytester.runpytest().ret == pytest.ExitCode.OK
    text = step.read_text("utf-8")
    assert text.startswith(BEFORE) and _sections(text) == 1 and len(_table(text[len(BEFORE) :])) == 3
    own = pytester.path / "own.md"
    assert pytester.runpytest(f"--jetmem-summary={own}").ret == pytest.ExitCode.OK
    assert step.read_text("utf-8") == text  # the variable's file untouched
    assert _sections(own.read_text("utf-8")) == 1
    pytester.makeini("[pytest]\njetmem_summary = from_ini.md\n")
    assert pytester.runpytest().ret == pytest.ExitCode.OK  # the ini key wins over the variable too
    assert step.read_text("utf-8") == text
    assert _sections((pytester.path / "from_ini.md").read_text("utf-8")) == 1


REGRESSES_LAST = """
@pytest.mark.memmode("device")
def test_aa_reported(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=100)
def test_zz_gated(jetmem):
    jetmem.measure(fill(jetmem, launches=int(__import__("os").environ.get("LAUNCHES", "1"))), label="fill")
"""


def test_regressed_rows_come_first_and_the_baseline_is_named(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(REGRESSES_LAST))
    for _ in range(3):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    monkeypatch.setenv("LAUNCHES", "2")  # test_zz_gated twice as slow; test_aa_reported as it was
    target = pytester.path / "summary.md"
    result = pytester.runpytest("--jetmem-compare=main", f"--jetmem-summary={target}", "-W", "ignore")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    text = target.read_text("utf-8")
    assert text.startswith("## pytest-jetmem: 2 measured, 1 regressed")
    assert "baseline main (--jetmem-compare)" in text
    first, second = _table(text)
    assert first[0].endswith("test\\_zz\\_gated\\[device\\]") and second[0].endswith("test\\_aa\\_reported\\[device\\]")
    assert "regression" in first[4] and first[4].startswith("+")
    assert first[5] == "**FAIL regression**"
    assert "regression" not in second[4] and not second[5].startswith("**")


ESCAPED = """
@pytest.mark.memmode("device")
@pytest.mark.parametrize("x", [1], ids=["a|b`c"])
def test_p(jetmem, x):
    jetmem.measure(fill(jetmem), label="lab|el")
"""


def test_pipes_and_backticks_in_node_ids_are_escaped(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(ESCAPED))
    target = pytester.path / "summary.md"
    assert pytester.runpytest(f"--jetmem-summary={target}").ret == pytest.ExitCode.OK
    lines = [line for line in target.read_text("utf-8").splitlines() if line.startswith("|")]
    assert len(lines) == 3 and {_unescaped_pipes(line) for line in lines} == {7}  # six cells on every line
    (row,) = _table("\n".join(lines))
    assert row[0].endswith("test\\_p\\[a\\|b\\`c-device\\]") and row[2] == "lab\\|el:kernel"


def test_nothing_measured_is_one_line(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b="def test_plain():\n    pass\n")
    target = pytester.path / "summary.md"
    assert pytester.runpytest(f"--jetmem-summary={target}").ret == pytest.ExitCode.OK
    body = [line for line in target.read_text("utf-8").splitlines() if line]
    assert body == ["## pytest-jetmem: nothing measured", "Nothing was measured in this session."]


def test_an_interrupted_session_says_so_above_what_ran(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE + "\ndef test_zz():\n    raise KeyboardInterrupt\n"))
    target = pytester.path / "summary.md"
    result = pytester.runpytest(f"--jetmem-summary={target}", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    text = target.read_text("utf-8")
    assert "interrupted (KeyboardInterrupt)" in text
    assert text.index("interrupted") < text.index("| test |") and len(_table(text)) == 3


@pytest.mark.parametrize("by_env", [False, True], ids=["option", "variable"])
def test_a_path_that_cannot_be_written_is_an_error_naming_it(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, by_env: bool
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    target = pytester.path / "a_directory"
    target.mkdir()
    args = [] if by_env else [f"--jetmem-summary={target}"]
    if by_env:
        monkeypatch.setenv(ENV, str(target))
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    errors = [line for line in result.outlines if line.startswith("jetmem: error:")]
    setting = ENV if by_env else "--jetmem-summary"
    assert len(errors) == 1 and f"{setting}={target}: cannot append the summary there" in errors[0], errors
    assert "3 measurement(s)" in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert list(target.iterdir()) == []


def test_xdist_writes_one_section_with_every_workers_records(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    target = pytester.path / "summary.md"
    target.write_text(BEFORE, encoding="utf-8")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--jetmem-summary={target}", "-n", "2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    text = target.read_text("utf-8")
    assert text.startswith(BEFORE) and _sections(text) == 1
    assert len(_table(text[len(BEFORE) :])) == 3


def _git(root: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    import os

    subprocess.run(["git", "-C", str(root), *args], capture_output=True, env={**os.environ, **env}, check=True)


def test_against_writes_one_section_naming_the_base(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--jetmem-against``: the children inherit ``GITHUB_STEP_SUMMARY``; only the parent writes, once."""
    pytester.makeconftest(conftest_source("dgpu", kernel_ms=0.1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    root = pytester.path
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".jetmem/\n__pycache__/\nsummary.md\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "first")
    target = root / "summary.md"
    monkeypatch.setenv(ENV, str(target))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jetmem-against=HEAD")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    text = target.read_text("utf-8")
    assert _sections(text) == 1 and "the base HEAD (--jetmem-against)" in text
    assert len(_table(text)) == 3


# -- the builder, without pytest runs -------------------------------------------------------------------------
def _record(name: str, verdict: RecordVerdict, baseline: BaselineComparison | NotCompared | None) -> MeasurementRecord:
    return MeasurementRecord(
        Identity(f"t.py::{name}[device]", "device", "k", "kernel"),
        Statistics(median=0.25, mad=0.01, p5=0.24, p95=0.26, min=0.24, n=5, samples=(0.25,) * 5),
        Conditions(),
        Judgement(verdict, baseline=baseline),
    )


def _cmp(verdict: Verdict, pct: float) -> BaselineComparison:
    return BaselineComparison(verdict, pct, (1.0, 1.0), "sessions")


def test_the_builder_orders_regressed_then_ambiguous_then_the_rest() -> None:
    records = [
        _record("ok", RecordVerdict.OK, _cmp(Verdict.UNCHANGED, 0.5)),
        _record("amb", RecordVerdict.AMBIGUOUS, _cmp(Verdict.AMBIGUOUS, 7.0)),
        _record("new", RecordVerdict.REPORTED, NotCompared(NotComparedWhy.NEW, "not in the baseline")),
        _record("slower", RecordVerdict.REPORTED, _cmp(Verdict.REGRESSION, 30.0)),  # not judged: still regressed
        _record("maxms", RecordVerdict.FAIL_MAX_MS, None),
        _record("noinf", RecordVerdict.OK, _cmp(Verdict.IMPROVEMENT, math.inf)),
    ]
    text = summary_markdown(records, ComparedWith(compare="main"))
    assert text.startswith("## pytest-jetmem: 6 measured, 2 regressed, 1 ambiguous\n")
    names = [r[0].split("::")[1].split("\\[")[0] for r in _table(text)]
    assert names == ["slower", "maxms", "amb", "ok", "new", "noinf"]  # the session's order within each group
    cells = {r[0].split("::")[1].split("\\[")[0]: r for r in _table(text)}
    assert cells["slower"][4] == "+30.0% regression" and cells["new"][4] == "not in the baseline"
    assert cells["noinf"][4] == "improvement" and cells["maxms"][4] == ""
    assert cells["maxms"][5] == "**FAIL max\\_ms**" and cells["ok"][5] == "ok"


def test_an_energy_comparison_has_its_column_and_an_energy_regression_ranks_first() -> None:
    from dataclasses import replace

    plain = _record("time", RecordVerdict.OK, _cmp(Verdict.UNCHANGED, 0.5))
    energy = _record("joules", RecordVerdict.OK, _cmp(Verdict.UNCHANGED, 0.2))
    energy = replace(energy, judgement=replace(energy.judgement, energy_baseline=_cmp(Verdict.REGRESSION, 12.0)))
    text = summary_markdown([plain, energy], ComparedWith(compare="main"))
    assert "| test | mode | what | median ms | vs base | energy vs base | verdict |" in text
    rows = _table(text)
    assert "joules" in rows[0][0] and "time" in rows[1][0]
    assert rows[0][5] == "+12.0% regression" and rows[1][5] == ""
    assert "energy vs base" not in summary_markdown([plain], ComparedWith(compare="main"))  # no empty column


def test_the_builder_says_what_was_compared_with_and_an_interruption() -> None:
    records = [_record("a", RecordVerdict.REPORTED, None)]
    assert "base v1\\|x (--jetmem-against)" in summary_markdown(records, ComparedWith(against="v1|x", compare="m"))
    assert "No comparison" in summary_markdown(records, ComparedWith())
    text = summary_markdown([], ComparedWith(), interrupted="KeyboardInterrupt")
    assert "interrupted (KeyboardInterrupt)" in text and "Nothing was measured" in text and "|" not in text


def test_escape_leaves_no_character_that_breaks_a_cell() -> None:
    assert escape("a|b`c") == "a\\|b\\`c"
    assert escape("x\\|y") == "x\\\\\\|y"  # a backslash of its own cannot swallow the pipe's escape
    assert escape("two\nlines") == "two lines"
    assert _unescaped_pipes(escape("|||\\|")) == 0
