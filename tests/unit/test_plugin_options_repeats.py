"""Options given twice, choices in any case, the help's words, and output files that say what they wrote.

- ``--jetmem-modes`` given more than once selects the union of its values (``all`` beside others: all), and a
  value's own fault (a name twice, ``all`` beside names) is still refused, naming it;
- a choice (``--jetmem-counters``, ``--jetmem-ambiguous``, ``--jetmem-advice``) is matched in any case, by the
  option as by the ini key;
- ``--help`` says what the unified-memory counters count (docs/reference.md: a cold replay and 3 steady calls);
- ``--jetmem-benchmark-json`` writes a valid file where nothing was measured, and says so in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem.plugin import options

TESTS = """
    import pytest

    @pytest.mark.memmode
    def test_all(memmode):
        pass

    @pytest.mark.memmode("managed", "zero_copy")
    def test_some(memmode):
        pass

    def test_plain():
        pass
"""


def passed_names(result: pytest.RunResult) -> set[str]:
    return {line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line}


# -- --jetmem-modes given more than once --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("--jetmem-modes=device", "--jetmem-modes=managed"),
        ("--jetmem-modes", "device", "--jetmem-modes", "managed"),
        ("--jetmem-modes=device,managed", "--jetmem-modes=managed"),
        ("--jetmem-modes=managed", "--jetmem-modes=device", "--jetmem-modes=managed"),
    ],
    ids=["two", "two-spaced", "overlapping", "three"],
)
def test_repeated_modes_select_the_union(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: tuple[str, ...]
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*args, "-v")
    result.assert_outcomes(passed=4, deselected=2)
    assert passed_names(result) == {"test_all[device]", "test_all[managed]", "test_some[managed]", "test_plain"}
    selected = next(line for line in result.outlines if line.startswith("jetmem: modes selected: "))
    assert sorted(selected.removeprefix("jetmem: modes selected: ").split(", ")) == ["device", "managed"]  # as given


@pytest.mark.parametrize(
    "args",
    [("--jetmem-modes=device", "--jetmem-modes=all"), ("--jetmem-modes=all", "--jetmem-modes=zero_copy")],
    ids=["names-then-all", "all-then-names"],
)
def test_all_beside_other_values_is_all(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: tuple[str, ...]
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*args, "-v")
    result.assert_outcomes(passed=7, deselected=1)  # every mode the Orin can do: all but system
    result.stdout.fnmatch_lines(["jetmem: modes selected: all (*", "*test_all?registered? PASSED*"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--jetmem-modes=device", "--jetmem-modes=managed,managed"),
            "--jetmem-modes: memory mode 'managed' given more than once in 'device,managed,managed'*",
        ),
        (("--jetmem-modes=device", "--jetmem-modes=gpu"), "--jetmem-modes: unknown memory mode 'gpu'*"),
        (("--jetmem-modes=device", "--jetmem-modes=all,managed"), "--jetmem-modes: 'all' means every registered*"),
    ],
    ids=["a-value-repeats-a-name", "unknown", "all-beside-names-in-one-value"],
)
def test_a_faulty_value_among_repeats_is_still_a_usage_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: tuple[str, ...], expected: str
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {expected}"])


def test_merge_union_is_idempotent() -> None:
    """pytest may parse the command line more than once into one namespace: merging a value again changes nothing."""
    merged = options.merge_union(options.merge_union(None, "device"), "managed")
    assert merged == "device,managed"
    assert options.merge_union(merged, "device") == merged
    assert options.merge_union(merged, "managed") == merged
    assert options.merge_union("all", "all") == "all"
    assert options.merge_union("device,device", "device,device") == "device,device"  # still refused by the parser


# -- choices in any case ------------------------------------------------------------------------------------------
CHOICES = """
    def test_choices(pytestconfig):
        got = {name: pytestconfig.getoption(f"jetmem_{name}") for name in ("counters", "ambiguous", "advice")}
        assert got == {"counters": "off", "ambiguous": "fail", "advice": "off"}, got
"""


def test_a_choice_option_takes_any_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(CHOICES)
    result = pytester.runpytest("--jetmem-counters=OFF", "--jetmem-ambiguous=Fail", "--jetmem-advice= Off ")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("--jetmem-counters=AUTO", "-q", "--co")
    assert result.ret == pytest.ExitCode.OK


def test_the_option_and_the_ini_key_agree_on_case(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\njetmem_counters = OFF\n")
    pytester.makepyfile(
        """
        from pytest_jetmem.plugin import options

        def test_it(pytestconfig):
            assert options.get_choice(pytestconfig, "counters") == "off"
        """
    )
    assert pytester.runpytest().ret == pytest.ExitCode.OK
    pytester.makeini("[pytest]\njetmem_counters = off\n")
    pytester.makepyfile(
        """
        from pytest_jetmem.plugin import options

        def test_it(pytestconfig):
            assert options.get_choice(pytestconfig, "counters") == "auto"
        """
    )
    assert pytester.runpytest("--jetmem-counters=Auto").ret == pytest.ExitCode.OK


def test_a_bad_choice_in_capitals_is_still_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--jetmem-counters=MAYBE")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --jetmem-counters: invalid choice: 'maybe' (choose from *auto*off*)"])


# -- --help --------------------------------------------------------------------------------------------------------
def test_help_says_what_the_counters_count_and_how_repeats_combine(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = " ".join(" ".join(result.outlines).split())
    assert "counted on a cold call replayed after the samples (the pages put back on the host first)" in text
    assert "and on 3 steady calls after it" in text
    assert "the first call and a few calls after" not in text
    assert "Given more than once: the union of the values ('all' beside others: all)" in text


# -- --jetmem-benchmark-json with nothing measured -----------------------------------------------------------------
def test_benchmark_json_is_written_and_said_where_nothing_was_measured(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    bench = tmp_path / "out" / "bench.json"
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest(f"--jetmem-benchmark-json={bench}")
    result.assert_outcomes(passed=1)
    doc = json.loads(bench.read_text())
    assert doc["benchmarks"] == [] and "machine_info" in doc and "version" in doc  # pytest-benchmark reads it
    lines = [line for line in result.outlines if "benchmark JSON" in line]
    assert lines == [f"jetmem: benchmark JSON written to {bench}: no benchmarks, nothing was measured"], lines
