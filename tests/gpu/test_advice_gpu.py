"""The advice on a real GPU: the demo's seed scenarios, advised from what they measured.

``pytest-jetmem-demo`` runs the 45x45 convolution (kernel and end to end) and the camera frame in every mode the
device supports, in a fresh process, and writes its report; the advice in the report's JSON twin and under the
demo's tables must agree with the measured figures: the 45x45 convolution re-reads its input, so zero-copy (read
over PCIe on a discrete GPU, uncached on a Jetson) is never its pick nor tied with it; the camera frame read once
says what its end-to-end figures show (the copies' share in device memory, and on a discrete GPU that zero-copy
figures are not Jetson figures); every named winner is clear of the margin.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.cuda.modes import HostAccess, find_mode


def _run_demo(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    report = tmp_path / "demo.html"
    cmd = [sys.executable, "-m", "pytest_jetmem.demo", "-k", "45x45 or camera", f"--jetmem-report={report}"]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    doc = json.loads(report.with_suffix(".json").read_text(encoding="utf-8"))
    return run.stdout, doc


def _advice(doc: dict[str, Any], key: str) -> dict[str, Any]:
    found = [t for t in doc["advice"]["tests"] if t["key"] == key]
    assert len(found) == 1, [t["key"] for t in doc["advice"]["tests"]]
    return found[0]


def test_the_demo_advice_agrees_with_its_measured_tables(tmp_path: Path, gpu_results: dict) -> None:
    out, doc = _run_demo(tmp_path)
    advice = doc["advice"]
    assert advice is not None and advice["device"] is not None
    discrete = not advice["device"]["integrated"]

    # Every winner is clear of its margin; every tie is not.
    for test in advice["tests"]:
        for m in test["modes"]:
            if m["ci"] is not None and m["mode"] != test["fastest"]:
                assert m["tied"] == (m["ci"][0] <= 1 + m["margin"]), (test["key"], m)
        if test["pick"] is not None:
            assert test["leaders"] == [test["pick"]] and test["pick"] == test["fastest"]
            medians = {m["mode"]: m["median_ms"] for m in test["modes"]}
            assert medians[test["pick"]] == min(medians.values())

    # The 45x45 convolution re-reads each input pixel 2025 times: zero-copy is clearly slower, never picked.
    conv = _advice(doc, "conv2d/45x45:kernel")
    zero_copy = {m["mode"]: m for m in conv["modes"]}.get("zero_copy")
    assert zero_copy is not None and not zero_copy["tied"] and zero_copy["ratio"] > 1.5, conv
    assert conv["pick"] != "zero_copy" and "zero_copy" not in conv["leaders"]
    penalty = "pcie_penalty" if discrete else "uncached_penalty"
    assert any(r["kind"] == penalty and r["mode"] == "zero_copy" for r in conv["reasons"]), conv["reasons"]
    if not discrete:
        assert conv["rule"]["kind"] in ("uncached_pinned", "full_coherency")
    else:
        assert conv["rule"]["kind"] == "none_discrete"

    # The camera frame, read once, end to end: the copies' share in device memory is said, with its figure.
    camera = _advice(doc, "camera/1920x1080:end_to_end")
    copies = [r for r in camera["reasons"] if r["kind"] == "copies"]
    no_view = [
        m for m in camera["modes"] if (mode := find_mode(m["mode"])) is not None and mode.host_access is HostAccess.NONE
    ]
    assert len(copies) == len(no_view) >= 1, camera["reasons"]
    if discrete:
        assert any(r["kind"] == "not_jetson" and "zero_copy" in r["text"] for r in camera["reasons"])

    # The demo's tables say the same: the advice under the convolution's and the camera's tables.
    assert out.count("\n  advice:\n") == 4  # under each table: the convolution's two scopes, the camera's two
    assert camera["summary"] in out and conv["summary"] in out
    gpu_results["advice"] = {
        "device": advice["device"]["name"],
        "conv2d_45x45_kernel": conv["summary"],
        "camera_end_to_end": camera["summary"],
        "camera_reasons": [r["text"] for r in camera["reasons"]],
        "conv_rule": f"{conv['rule']['verdict']}: {conv['rule']['evidence']}",
    }


@pytest.mark.parametrize("off", [False, True], ids=["section", "off"])
def test_the_plugin_prints_the_advice_section_on_a_gpu(pytester: pytest.Pytester, off: bool) -> None:
    """A user's suite on the GPU: the section follows the runtimes table, with the device's real facts."""
    pytester.makepyfile(
        test_user="""
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_fill(jetmem):
            x = jetmem.zeros(1 << 20)
            k = jetmem.kernel("stream_fill")
            jetmem.measure(lambda: k.launch(1024, 256, (x, np.uint64(x.size), np.float32(1))), label="fill")
        """
    )
    args = ["-p", "no:cacheprovider", "--jetmem-max-time=0.2", *(["--jetmem-advice=off"] if off else [])]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    text = result.stdout.str()
    if off:
        assert "jetmem advice" not in text
        return
    assert text.index("jetmem runtimes") < text.index("jetmem advice")
    assert "test_user.py::test_fill  fill:kernel" in text
    assert ("pick " in text) or ("no clear winner" in text)
