"""measure.benchjson: ``--jetmem-benchmark-json`` writes what ``pytest-benchmark compare`` reads.

pytester runs against the fake driver, whose streams carry a virtual clock that each launch advances by
``kernel_ms`` (``kind_ms`` gives launches on one kind of memory their own cost), so every CUDA-event time is
exact and can be checked figure by figure. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import MODES, RATIO_FILE, InstallFake, inner


def pytest_benchmark_cli() -> list[str]:
    script = Path(sys.executable).with_name("pytest-benchmark")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())"]


def test_benchmark_json_is_read_by_pytest_benchmark_compare(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 0.5})
    pytester.makepyfile(test_r=inner(RATIO_FILE))
    bench = tmp_path / "out" / "bench.json"
    result = pytester.runpytest("-rA", f"--jetmem-benchmark-json={bench}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # zero_copy's ratio; the file is written all the same
    doc = json.loads(bench.read_text("utf-8"))
    assert {b["name"] for b in doc["benchmarks"]} == {f"test_ratio[{m}]:fill:kernel" for m in MODES}
    by_mode = {b["params"]["memmode"]: b for b in doc["benchmarks"]}
    assert by_mode["zero_copy"]["stats"]["median"] == pytest.approx(0.5e-3)  # seconds, as pytest-benchmark has it
    assert by_mode["device"]["stats"]["rounds"] == 10
    assert by_mode["zero_copy"]["extra_info"]["ratio"] == pytest.approx(5.0)
    assert by_mode["zero_copy"]["extra_info"]["verdict"] == "FAIL ratio"
    assert doc["machine_info"]["jetmem_device_name"] == "Orin"

    cli = subprocess.run(
        [*pytest_benchmark_cli(), "compare", str(bench), "--columns=min,median"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    # "test_ratio[zero_copy]:fill:kernel (h)     500.0000 (5.00)     500.0000 (5.00)": name, min, median in us
    lines = {
        line.split()[0]: [float(t) for t in line.split()[1:] if re.fullmatch(r"[\d.]+", t)]
        for line in cli.stdout.splitlines()
        if line.startswith("test_ratio[")
    }
    assert set(lines) == {f"test_ratio[{m}]:fill:kernel" for m in MODES}, cli.stdout
    assert lines["test_ratio[zero_copy]:fill:kernel"] == [pytest.approx(500.0)] * 2
    assert lines["test_ratio[device]:fill:kernel"] == [pytest.approx(100.0)] * 2
    assert "Median" in cli.stdout and "Max" not in cli.stdout
