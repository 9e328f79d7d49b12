"""Unified-memory counters (CUPTI, ``--jetmem-counters``) on a real GPU.

A managed measurement of a kernel that reads a buffer the CPU wrote: its first call is timed uncounted; the cold
call replayed after the samples, with the buffers put back on the host (prefetched to the CPU), migrates them host to
device again (bytes and GPU page faults), its steady state migrates nothing; a device-memory measurement has no
counters at all. Needs cupti-python (``pip install "pytest-jetmem[cupti]"``): skips, with the reason, without it
and where the platform does not support unified-memory profiling (the run's one line says so).
"""

import json

import pytest

N = 1 << 22  # 16 MiB of float32 per buffer

COUNTED = f"""
import numpy as np
import pytest
from pytest_jetmem import kernels

N = {N}


@pytest.mark.memmode("device", "managed")
def test_copy(jetmem):
    a = jetmem.empty(N)
    b = jetmem.empty(N)
    a.write_host(np.ones(N, np.float32))  # the CPU writes it: a managed buffer's pages start on the host
    b.write_host(np.zeros(N, np.float32))
    jetmem.measure(lambda: kernels.stream(jetmem, "copy", a, b), label="copy")
    assert np.all(b.to_numpy() == 1)
"""


def _run(pytester, tmp_path, *args):
    pytester.makepyfile(test_um=COUNTED)
    report = tmp_path / "report.html"
    bench = tmp_path / "bench.json"
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-rA", f"--jetmem-report={report}", f"--jetmem-benchmark-json={bench}", *args
    )
    result.assert_outcomes(passed=2)
    rows = {r["mode"]: r for r in json.loads(report.with_suffix(".json").read_text())["rows"]}
    bench_rows = {b["param"]: b for b in json.loads(bench.read_text())["benchmarks"]}
    return result, rows, bench_rows


def _notes(result):
    return [line for line in result.stdout.lines if line.startswith("jetmem: unified-memory counters")]


def test_managed_cold_call_migrates_and_the_steady_state_does_not(pytester, tmp_path, gpu_results):
    pytest.importorskip("cupti", reason='cupti-python is not installed (pip install "pytest-jetmem[cupti]")')
    result, rows, bench_rows = _run(pytester, tmp_path)
    notes = _notes(result)
    if notes:  # CUPTI said why it cannot count here (a platform without unified-memory profiling)
        assert len(notes) == 1, notes
        assert "um_counters" not in rows["managed"]
        pytest.skip(notes[0])
    assert "um_counters" not in rows["device"]  # a mode that does not migrate pages: not counted, no zeros
    assert "um_counters" not in bench_rows["device"]["extra_info"]
    um = rows["managed"]["um_counters"]
    cold, steady = um["first_call"], um["steady"]  # first_call: the cold call replayed after the samples
    gpu_results["um_counters_managed_copy_16MiB"] = um
    assert cold["calls"] == 1 and steady is not None and steady["calls"] == 3
    assert cold["bytes_htod"] > 0 or cold["gpu_page_faults"] > 0, um
    assert cold["bytes_htod"] >= 4 * N, um  # at least one buffer's worth came over again (both put back on the host)
    steady_bytes = steady["bytes_htod"] + steady["bytes_dtoh"]
    assert steady_bytes <= cold["bytes_htod"] / 100, um  # nothing, or next to nothing, moves in steady state
    assert bench_rows["managed"]["extra_info"]["um_counters"] == um
    managed_row = next(line for line in result.stdout.lines if "test_copy[managed]" in line and "copy:kernel" in line)
    assert "cold: " in managed_row and " H2D" in managed_row and "steady (3 calls): " in managed_row


def test_counters_off_counts_nothing_and_says_nothing(pytester, tmp_path):
    result, rows, bench_rows = _run(pytester, tmp_path, "--jetmem-counters=off")
    assert all("um_counters" not in r for r in rows.values())
    assert all("um_counters" not in b["extra_info"] for b in bench_rows.values())
    assert _notes(result) == []
    assert "unified memory" not in result.stdout.str()


def test_without_cupti_the_run_says_once_why(pytester, tmp_path):
    """cupti-python hidden from the run (as in a plain install): one line with the fix, no counters anywhere."""
    pytester.makeconftest("import sys\nsys.modules['cupti'] = None  # as if cupti-python were not installed\n")
    result, rows, _ = _run(pytester, tmp_path)
    assert _notes(result) == [
        "jetmem: unified-memory counters not measured for 1 measurement(s) in managed: cupti-python is not "
        'installed (pip install "pytest-jetmem[cupti]")'
    ]
    assert all("um_counters" not in r for r in rows.values())
