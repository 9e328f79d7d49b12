"""Every mistake a user makes gets a clear answer (issue 11): a usage or collection error, or a failure, that
names what was wrong; never a traceback, an INTERNALERROR, a silent pass or a lost summary.

Each case runs an in-process ``pytester`` session against the fake driver and checks its exit status, the
message and that no traceback or INTERNALERROR was printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem.measure.baseline import BaselineStore
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import RUNS_FILE, InstallFake, inner, outcomes

TRACEBACK_MARKS = ("Traceback (most recent call last)", "INTERNALERROR", "During handling of the above exception")


def clean(result: pytest.RunResult) -> str:
    """The run's whole output, asserted free of tracebacks and INTERNALERRORs."""
    text = "\n".join(result.outlines + result.errlines)
    for mark in TRACEBACK_MARKS:
        assert mark not in text, text
    return text


def usage_error(result: pytest.RunResult, *needles: str) -> str:
    """Assert the run stopped with a usage error whose text holds every needle; return the output."""
    text = clean(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# -- (a) baseline names ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["feature/foo", "user/feature/x-1.2"])
def test_branch_like_baseline_name_saves_inside_the_baseline_directory(
    pytester: pytest.Pytester, fake_driver: FakeDriver, name: str
) -> None:
    pytester.makepyfile(test_r=inner(RUNS_FILE))
    result = pytester.runpytest(f"--jetmem-save={name}")
    text = clean(result)
    assert result.ret == pytest.ExitCode.OK, text
    directory = pytester.path / ".jetmem" / "baselines"
    files = [p for p in directory.iterdir() if p.name.endswith(".json")]
    assert [p.parent for p in files] == [directory]  # one file, directly in the directory
    assert json.loads(files[0].read_text("utf-8"))["name"] == name
    assert BaselineStore(directory).names() == [name]
    assert f"saved baseline {name!r}" in text
    # the same name compares against what was saved
    compared = pytester.runpytest("-rA", f"--jetmem-compare={name}")
    assert compared.ret == pytest.ExitCode.OK, clean(compared)
    assert "not in baseline" not in clean(compared) and "no baseline" not in clean(compared)


@pytest.mark.parametrize(
    ("args", "ini", "source", "value"),
    [
        (["--jetmem-save=../../etc/passwd"], "", "--jetmem-save", "../../etc/passwd"),
        (["--jetmem-compare=../x"], "", "--jetmem-compare", "../x"),
        (["--jetmem-compare=/abs/name"], "", "--jetmem-compare", "/abs/name"),
        (["--jetmem-save=a//b"], "", "--jetmem-save", "a//b"),
        (["--jetmem-save=.hidden"], "", "--jetmem-save", ".hidden"),
        (["--jetmem-save=feat ure"], "", "--jetmem-save", "feat ure"),
        (["--jetmem-save="], "", "--jetmem-save", "''"),
        ([], "jetmem_compare = ../../etc/passwd", "jetmem_compare", "../../etc/passwd"),
        (["-n", "2", "--jetmem-compare=../x"], "", "--jetmem-compare", "../x"),
    ],
)
def test_unsafe_baseline_name_is_refused_before_the_session(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: list[str], ini: str, source: str, value: str
) -> None:
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_r=inner(RUNS_FILE) + "\n\ndef test_must_not_run():\n    raise SystemExit(3)\n")
    result = pytester.runpytest(*args)
    text = usage_error(result, source, value, "baseline name")
    assert "test_must_not_run" not in text
    assert not (pytester.path / ".jetmem").exists()


# -- (b) output paths --------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--jetmem-benchmark-json", "--jetmem-report"])
@pytest.mark.parametrize("where", ["a-directory", "under-a-file"])
def test_unwritable_output_path_is_refused_before_the_session(
    pytester: pytest.Pytester, fake_driver: FakeDriver, option: str, where: str
) -> None:
    (pytester.path / "out").mkdir()
    (pytester.path / "plain").write_text("x")
    target = "out" if where == "a-directory" else "plain/report.html"
    pytester.makepyfile(test_r=inner(RUNS_FILE))
    result = pytester.runpytest(f"{option}={target}")
    usage_error(result, option, target)
    assert sorted(p.name for p in pytester.path.iterdir() if p.name.endswith(".json")) == []
    assert list((pytester.path / "out").iterdir()) == []


LATE_FAILURE = """
import os

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=10)
def test_runs(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
    os.mkdir({target!r})  # the output path turns into a directory while the session runs
"""


@pytest.mark.parametrize("option", ["--jetmem-benchmark-json", "--jetmem-report"])
def test_failure_to_write_after_the_session_keeps_the_summary_and_says_what_was_lost(
    pytester: pytest.Pytester, fake_driver: FakeDriver, option: str
) -> None:
    target = str(pytester.path / "late.out")
    pytester.makepyfile(test_r=inner(LATE_FAILURE.format(target=target)))
    result = pytester.runpytest("-rA", f"{option}={target}")
    text = clean(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    assert outcomes(result) == {"test_runs[device]": "PASSED"}
    assert "jetmem runtimes" in text  # the summary is kept
    error = next(line for line in result.outlines if line.startswith("jetmem: error:"))
    assert option in error and target in error and "not written" in error
    assert not Path(target + ".json").exists() and not (pytester.path / "late.json").exists()  # no stray twin


# -- (c) assertions that assert nothing --------------------------------------------------------------
NOTHING_JUDGED = """
@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=5, label="typo")
def test_label_typo(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=5, scope="end_to_end")
def test_scope_mismatch(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=5)
def test_never_measures(jetmem):
    fill(jetmem)()

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=5, label="fill")
def test_label_matches(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_runtime_marker_that_judges_nothing_fails_saying_why(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    pytester.makepyfile(test_n=inner(NOTHING_JUDGED))
    result = pytester.runpytest("-rA")
    text = clean(result)
    assert outcomes(result) == {
        "test_label_typo[device]": "FAILED",
        "test_scope_mismatch[device]": "FAILED",
        "test_never_measures[device]": "FAILED",
        "test_label_matches[device]": "PASSED",
    }, text
    assert "label='typo' matched none of the 1 measurement(s) (fill:kernel)" in text
    assert "scope='end_to_end' matched none of the 1 measurement(s) (fill:kernel)" in text
    assert "test_never_measures[device]: @pytest.mark.memmode_runtime: the test never called jetmem.measure()" in text


def test_runtime_marker_without_the_jetmem_fixture_is_a_collection_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode("device")
        @pytest.mark.memmode_runtime(max_ms=5)
        def test_no_handle(memmode):
            pass

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest()
    text = clean(result)
    assert result.ret == pytest.ExitCode.INTERRUPTED, text
    assert "test_no_handle: @pytest.mark.memmode_runtime judges what jetmem.measure() records" in text
    # once in the ERRORS section (the short summary repeats it in full where CI is set)
    errors = text.split(" ERRORS ", 1)[-1].split("short test summary info", 1)[0]
    assert errors.count("judges what jetmem.measure() records") == 1


@pytest.mark.parametrize("args", ["[]", "()", "[], []"])
def test_memmode_with_an_empty_list_is_a_collection_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: str
) -> None:
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.memmode({args})\ndef test_none(memmode):\n    pass\n")
    result = pytester.runpytest()
    text = clean(result)
    assert result.ret == pytest.ExitCode.INTERRUPTED, text
    assert "test_none: @pytest.mark.memmode got an empty list of modes" in text


# -- (d) a green run that checked nothing ------------------------------------------------------------
GPU_TEST = "import pytest\n\n@pytest.mark.memmode('device')\ndef test_gpu(jetmem):\n    pass\n"


@pytest.mark.parametrize(
    ("value", "needle"),
    [("abc", "JETMEM_DEVICE='abc'"), ("-1", "JETMEM_DEVICE='-1'"), ("7", "JETMEM_DEVICE=7: no CUDA device 7")],
)
@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_bad_jetmem_device_is_a_usage_error_not_a_skip(
    pytester: pytest.Pytester,
    fake_driver: FakeDriver,
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    needle: str,
    xdist: bool,
) -> None:
    monkeypatch.setenv("JETMEM_DEVICE", value)
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest(*(["-n", "2"] if xdist else []))
    usage_error(result, needle)


def test_save_with_nothing_measured_says_so(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest("--jetmem-save=main")
    text = clean(result)
    assert result.ret == pytest.ExitCode.OK, text
    assert "jetmem: --jetmem-save=main: nothing was measured, so no baseline was saved" in text
    assert not (pytester.path / ".jetmem").exists()


# -- (e) messages ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "marker",
    [
        "@pytest.mark.memmode_coherence(rounds=0)",
        "@pytest.mark.memmode_concurrency(expect='maybe')",
        "@pytest.mark.memmode_runtime(max_ms=-1)",
        "@pytest.mark.memmode('nope')",
    ],
)
def test_collection_errors_are_printed_once(pytester: pytest.Pytester, fake_driver: FakeDriver, marker: str) -> None:
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.memmode('device')\n{marker}\ndef test_bad(jetmem):\n    pass\n")
    result = pytester.runpytest()
    text = clean(result)
    assert result.ret == pytest.ExitCode.INTERRUPTED, text
    lines = [
        line
        for line in result.outlines
        if "test_bad" in line and "@pytest.mark." in line and not line.startswith("ERROR ")
    ]
    assert len(lines) == 1, text


@pytest.mark.parametrize("key", ["jetmem_strict_machine", "jetmem_tegra_strict"])
def test_bad_ini_boolean_names_the_key(pytester: pytest.Pytester, fake_driver: FakeDriver, key: str) -> None:
    pytester.makeini(f"[pytest]\n{key} = maybe\n")
    pytester.makepyfile("def test_plain():\n    pass\n")
    usage_error(pytester.runpytest(), f"ini option {key}", "maybe", "true or false")


def test_measure_of_a_non_callable_says_measure_expects_a_callable(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.memmode('device')\ndef test_m(jetmem):\n    jetmem.measure(5)\n")
    result = pytester.runpytest("-rA")
    text = "\n".join(result.outlines)
    assert outcomes(result) == {"test_m[device]": "FAILED"}, text
    assert "jetmem.measure expects a callable (the work to time), got 5 (int)" in text
    assert "is not callable" not in text


@pytest.mark.parametrize("data", ['["a", "b"]', 'b"xy"', "[object()]"])
def test_array_of_non_numbers_is_refused(pytester: pytest.Pytester, fake_driver: FakeDriver, data: str) -> None:
    pytester.makepyfile(
        f"import pytest\n\n@pytest.mark.memmode('device')\ndef test_a(jetmem):\n    jetmem.array({data})\n"
    )
    result = pytester.runpytest("-rA")
    text = "\n".join(result.outlines)
    assert outcomes(result) == {"test_a[device]": "FAILED"}, text
    assert "cannot live in GPU memory" in text


def test_skips_point_at_the_test_not_the_plugin(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("no_driver")
    pytester.makepyfile(test_where=GPU_TEST)
    result = pytester.runpytest("-rs")
    skipped = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "test_where.py:" in skipped[0], result.outlines
    assert "pytest_jetmem" not in skipped[0]


# -- (f) what --help, --markers and the docs say ----------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def test_help_says_how_modes_are_separated_and_where_the_cache_is(pytester: pytest.Pytester) -> None:
    text = " ".join(" ".join(pytester.runpytest("--help").outlines).split())
    assert "(comma or space separated: device, managed, zero_copy, registered, system;" in text
    assert "$JETMEM_CACHE_DIR, else $XDG_CACHE_HOME/pytest-jetmem/kernels, else ~/.cache/pytest-jetmem/kernels" in text


def test_markers_list_every_argument_of_memmode_runtime(pytester: pytest.Pytester) -> None:
    from pytest_jetmem.plugin.runtime_spec import ARGUMENTS

    line = next(line for line in pytester.runpytest("--markers").outlines if "mark.memmode_runtime(" in line)
    for argument in ARGUMENTS:
        assert f"{argument}=" in line, (argument, line)


def test_reference_lists_every_exception_of_the_errors_module() -> None:
    import inspect

    import pytest_jetmem
    from pytest_jetmem import errors

    reference = (ROOT / "docs" / "reference.md").read_text("utf-8")
    names = [
        n
        for n, c in vars(errors).items()
        if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == errors.__name__
    ]  # the exceptions: not the kinds they carry (BaselineErrorKind), which the reference names in their rows
    assert len(names) >= 15
    for name in names:
        base = getattr(errors, name).__mro__[1].__name__
        assert f"| `{name}` | `{base}`" in reference, name
        assert name in pytest_jetmem.__all__, name  # "each is also importable from the top level"


def test_troubleshooting_has_a_table_of_the_errors_a_user_can_meet() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text("utf-8")
    table = text.split("## Errors and what to do", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) >= 20
    for needle in ("invalid baseline name", "JETMEM_DEVICE", "nothing was measured", "never called jetmem.measure()"):
        assert any(needle in row for row in rows), needle


def test_jetson_ci_uploads_the_report_and_its_json_twin() -> None:
    from pytest_jetmem.report import json_path_for

    text = (ROOT / "docs" / "jetson-ci.md").read_text("utf-8")
    glob = text.split('name: jetmem-report, path: "', 1)[1].split('"', 1)[0]
    assert Path("report.html").match(glob) and json_path_for(Path("report.html")).match(glob)
