"""Property (issue 11): a generated bad value for any marker argument, option or ini key ends in a usage error or a
collection error that names the option, ini key or test and the value; never a traceback, an INTERNALERROR or a
pass.

Each example is one in-process ``pytester`` run against the fake driver (a fraction of a second), so a handful of
examples per property keeps the file fast; hypothesis varies which setting and which value each run gets.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes.fake_driver import FakeDriver
from pytest_jetmem.measure.baseline import BaselineStore
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401

EXAMPLES = settings(
    max_examples=6,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TRACEBACK_MARKS = ("Traceback (most recent call last)", "INTERNALERROR", "During handling of the above exception")
TESTS = (
    "import pytest\n\n@pytest.mark.memmode('device')\ndef test_gpu(jetmem):\n    pass\n\ndef test_plain():\n    pass\n"
)

# Values no number setting accepts: words, and numbers out of range (checked per setting below).
#: characters a test file can hold (UTF-8, no lone surrogates)
ANY_CHAR = st.characters(exclude_categories=("Cs",))  # every code point but lone surrogates: all UTF-8
WORDS = st.text(alphabet="abcxyz@!", min_size=1, max_size=6)
NOT_A_NUMBER = st.one_of(WORDS, st.sampled_from(["nan", "inf", "-inf", "1e", "0x1g", "--1"]))
BAD_NUMBER: dict[str, st.SearchStrategy[str]] = {
    "fail": st.one_of(NOT_A_NUMBER, st.sampled_from(["-1", "-0.5", "-1e9"])),
    "max_time": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-3", "1e-9"])),
    "noise": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-0.1", "1e-9"])),
    "window": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-2", "1.5"])),
    "runs": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-1", "2.5"])),
}
BAD_NAME = st.one_of(
    st.text(alphabet="ab./-_%~ :", min_size=1, max_size=12),
    st.text(alphabet="ab", min_size=101, max_size=120),
).filter(lambda s: s.strip() != "" and not _valid_name(s.strip()))


def _valid_name(name: str) -> bool:
    try:
        BaselineStore.check_name(name)
    except ValueError:
        return False
    return True


def _bad_setting() -> st.SearchStrategy[tuple[str, str]]:
    """(setting, bad value) for every setting that has an option and an ini key."""
    return st.one_of(
        *(st.tuples(st.just(name), values) for name, values in BAD_NUMBER.items()),
        st.tuples(st.just("ambiguous"), WORDS),
        st.tuples(st.just("modes"), st.text(alphabet="abcxyz", min_size=1, max_size=8)),
        st.tuples(st.just("compare"), BAD_NAME),
    )


def run_clean(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, str]:
    result = pytester.runpytest(*args)
    text = "\n".join(result.outlines + result.errlines)
    for mark in TRACEBACK_MARKS:
        assert mark not in text, text
    assert result.ret != pytest.ExitCode.OK, text
    return result, text


@EXAMPLES
@given(setting=_bad_setting())
def test_a_bad_option_value_is_a_usage_error_naming_option_and_value(
    pytester: pytest.Pytester, fake_driver: FakeDriver, setting: tuple[str, str]
) -> None:
    name, value = setting
    pytester.makepyfile(test_x=TESTS)
    option = f"--jetmem-{name.replace('_', '-')}"
    result, text = run_clean(pytester, f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert option in text and (value.strip() in text or _as_parsed(value) in text), text


def _as_parsed(value: str) -> str:
    """How an option of type float shows ``value`` after argparse read it (``-1e9`` -> ``-1000000000.0``)."""
    try:
        return str(float(value))
    except ValueError:
        return value


BOOL_KEYS = ("strict_machine", "tegra_strict")
# what pytest reads as a boolean ini value (its ``bool`` ini type): y/yes/t/true/on/1 and n/no/f/false/off/0
PYTEST_BOOL_WORDS = {"y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0"}
NOT_A_BOOL = WORDS.filter(lambda word: word.lower() not in PYTEST_BOOL_WORDS)


@EXAMPLES
@given(
    setting=st.one_of(
        _bad_setting().filter(lambda s: ";" not in s[1] and "#" not in s[1]),
        st.tuples(st.sampled_from(BOOL_KEYS), NOT_A_BOOL),
    )
)
def test_a_bad_ini_value_is_a_usage_error_naming_key_and_value(
    pytester: pytest.Pytester, fake_driver: FakeDriver, setting: tuple[str, str]
) -> None:
    name, value = setting
    pytester.makeini(f"[pytest]\njetmem_{name} = {value}\n")
    pytester.makepyfile(test_x=TESTS)
    result, text = run_clean(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert f"ini option jetmem_{name}" in text and value.strip() in text, text


def _literal(value: Any) -> str:
    """``value`` as Python source (non-finite floats as ``float("nan")``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    return repr(value)


NOT_POSITIVE = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.sampled_from([math.nan, math.inf]),
    st.booleans(),
    st.text(ANY_CHAR, max_size=4),
)
NOT_A_MODE = st.one_of(st.text(alphabet="abcxyz", min_size=1, max_size=8), st.integers())
# (marker, the arguments that make it valid apart from the fuzzed one, the fuzzed argument, its bad values)
MARKER_ARGUMENTS: list[tuple[str, str, str, st.SearchStrategy[Any]]] = [
    ("memmode_runtime", "", "max_ms", NOT_POSITIVE),
    ("memmode_runtime", "relative_to='device', ", "max_ratio", NOT_POSITIVE),
    ("memmode_runtime", "max_ratio=2, ", "relative_to", NOT_A_MODE),
    ("memmode_runtime", "", "scope", st.text(alphabet="abcxyz", min_size=1, max_size=8)),
    ("memmode_runtime", "", "baseline", st.one_of(st.integers(), st.text(ANY_CHAR, max_size=3))),
    ("memmode_runtime", "", "label", st.one_of(st.integers(), st.floats(allow_nan=False))),
    ("memmode_runtime", "", "runs", st.one_of(st.integers(max_value=0), st.floats(allow_nan=False), st.booleans())),
    ("memmode_coherence", "", "rounds", st.one_of(st.integers(max_value=0), st.integers(min_value=10**6))),
    ("memmode_coherence", "", "cpu_touch", st.one_of(st.integers(), st.text(ANY_CHAR, max_size=3))),
    (
        "memmode_coherence",
        "",
        "gpu_delay_us",
        st.one_of(st.floats(max_value=-1e-3), st.text(ANY_CHAR, min_size=1, max_size=3)),
    ),
    ("memmode_concurrency", "", "expect", st.text(alphabet="abcxyz", min_size=1, max_size=8)),
    ("memmode_concurrency", "", "timeout", NOT_POSITIVE),
]


@st.composite
def _bad_marker(draw: st.DrawFn) -> tuple[str, str, Any]:
    marker, valid, argument, values = draw(st.sampled_from(MARKER_ARGUMENTS))
    return f"@pytest.mark.{marker}({valid}{argument}={_literal(value := draw(values))})", argument, value


@EXAMPLES
@given(marker=st.one_of(_bad_marker(), NOT_A_MODE.map(lambda v: (f"@pytest.mark.memmode({_literal(v)})", "", v))))
def test_a_bad_marker_argument_is_a_collection_error_naming_test_and_value(
    pytester: pytest.Pytester, fake_driver: FakeDriver, marker: tuple[str, str, Any]
) -> None:
    decorator, argument, value = marker
    memmode = "" if decorator.startswith("@pytest.mark.memmode(") else "@pytest.mark.memmode('device')\n"
    pytester.makepyfile(test_m=f"import pytest\n\n{memmode}{decorator}\ndef test_bad(jetmem):\n    pass\n")
    result, text = run_clean(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED, text
    errors = [
        line
        for line in result.outlines
        if "test_bad" in line and "@pytest.mark." in line and not line.startswith("ERROR ")
    ]
    assert len(errors) == 1, text  # printed once
    assert repr(value) in errors[0] and argument in errors[0], text


def test_a_file_written_again_within_a_second_at_the_same_size_is_run_anew(pytester: pytest.Pytester) -> None:
    """The next example's file (``'a'`` for ``'b'``, the same size, the same second) runs as written, in process and
    in a child: the root conftest drops the folder's bytecode before each run (hypothesis once ran the old one)."""
    import os

    outcomes = []
    for run in (pytester.runpytest_inprocess, pytester.runpytest_subprocess):
        stamp = None
        for value in ("b", "a"):
            path = pytester.makepyfile(test_m=f"def test_v():\n    assert {value!r} == 'a'\n")
            stamp = stamp or path.stat().st_mtime_ns
            os.utime(path, ns=(stamp, stamp))  # the same second, as a fast next example writes it
            outcomes.append(run("-p", "no:cacheprovider").ret)
    assert outcomes == [pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.OK] * 2
