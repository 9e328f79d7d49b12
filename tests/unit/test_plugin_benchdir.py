"""No stray ``.benchmarks``: pytest-benchmark (installed with pytest-jetmem) makes its storage folder in every run;
a run that saves nothing leaves none behind, and a pytest-benchmark user's saved benchmarks stay."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytest_benchmark")

PLAIN = "def test_plain():\n    assert True\n"
BENCHMARKED = "def test_timed(benchmark):\n    benchmark(sum, range(10))\n"


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_a_plain_run_leaves_no_benchmarks_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain=PLAIN)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not (pytester.path / ".benchmarks").exists(), files_under(pytester.path)


@pytest.mark.every_plugin
def test_a_run_with_benchmarks_that_saves_nothing_leaves_no_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_timed=BENCHMARKED)
    pytester.runpytest("-p", "no:cacheprovider", "--benchmark-disable").assert_outcomes(passed=1)
    assert not (pytester.path / ".benchmarks").exists(), files_under(pytester.path)


@pytest.mark.every_plugin
def test_saved_benchmarks_stay(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # under pytest-xdist, this process is a worker: pytest-benchmark would take the inner run for one, and not time
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_timed=BENCHMARKED)
    result = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-autosave", "--benchmark-min-rounds=1")
    result.assert_outcomes(passed=1)
    saved = [name for name in files_under(pytester.path / ".benchmarks") if name.endswith(".json")]
    assert len(saved) == 1, saved


def test_a_folder_that_was_there_before_stays(pytester: pytest.Pytester) -> None:
    (pytester.path / ".benchmarks").mkdir()
    pytester.makepyfile(test_plain=PLAIN)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (pytester.path / ".benchmarks").is_dir()


@pytest.mark.every_plugin
def test_another_storage_folder_is_tidied_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain=PLAIN)
    pytester.runpytest("-p", "no:cacheprovider", "--benchmark-storage=file://out/bench").assert_outcomes(passed=1)
    assert not (pytester.path / "out").exists(), files_under(pytester.path)
