"""cuda.driver's NVRTC loading: the wheel's library first, a system toolkit's where the wheel's does not load.

On L4T the aarch64 NVRTC wheels are server (SBSA) builds; where one does not load, NVRTC comes from the
toolkit JetPack installs under /usr/local/cuda (or ``$CUDA_HOME``/``$CUDA_PATH``). The test recreates that
on any machine, with the real loader and the real NVRTC: a site-packages directory placed first holds an
unloadable ``nvidia/cu13/lib/libnvrtc.so.13``, and ``$CUDA_HOME`` a tree with a copy of the real library.
Each case runs in a fresh interpreter: a loaded library stays loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.driver import NvrtcLibrary

cuda_pathfinder = pytest.importorskip("cuda.pathfinder")

PROBE = textwrap.dedent(
    """
    import json, site, sys
    broken = sys.argv[1]
    real = site.getsitepackages
    site.getsitepackages = lambda *a: [broken, *real(*a)]  # the unloadable wheel is found first
    from pytest_jetmem.cuda.device import nvrtc_library_line
    from pytest_jetmem.cuda.driver import CudaDriver
    from pytest_jetmem.errors import CudaUnavailable
    drv = CudaDriver()
    try:
        lib = drv.nvrtc_library()
    except CudaUnavailable as exc:
        print(json.dumps({"unavailable": exc.reason, "line": nvrtc_library_line(drv)}))
        raise SystemExit(0)
    cubin, log, _ = drv.nvrtc_compile(
        'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }', "k.cu", ["--gpu-architecture=sm_87"]
    )
    maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnvrtc.so" in l})
    print(json.dumps({"path": lib.path, "via": lib.found_via, "wheel_error": lib.wheel_error,
                      "version": drv.nvrtc_version(), "cubin": cubin[:4].hex(), "maps": maps,
                      "line": nvrtc_library_line(drv)}))
    """
)


def wheel_nvrtc() -> Path:
    loaded = cuda_pathfinder.load_nvidia_dynamic_lib("nvrtc")
    return Path(loaded.abs_path)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``broken``: a site-packages with an unloadable NVRTC; ``cuda``: a toolkit tree with the real one."""
    try:
        real = wheel_nvrtc()
    except Exception as exc:  # pragma: no cover - the cu12/cu13 extra installs it
        pytest.skip(f"no NVRTC wheel to copy: {exc}")
    root = tmp_path_factory.mktemp("nvrtc")
    broken = root / "site" / "nvidia" / real.parent.parent.name / "lib"
    broken.mkdir(parents=True)
    (broken / real.name).write_text("not a shared library (a build for another platform)\n")
    lib64 = root / "cuda" / "lib64"
    lib64.mkdir(parents=True)
    for f in real.parent.glob("libnvrtc*.so*"):
        shutil.copy(f, lib64 / f.name)  # a copy, not a link: /proc/self/maps then tells the two apart
    (root / "empty").mkdir()
    return {"broken": root / "site", "cuda": root / "cuda", "empty": root / "empty", "wheel": real}


def probe(trees: dict[str, Path], **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")}
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(trees["broken"])],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loader")
def test_an_unloadable_wheel_falls_back_to_cuda_home_and_compiles_with_it(trees: dict[str, Path]) -> None:
    got = probe(trees, CUDA_HOME=str(trees["cuda"]))
    lib = str(trees["cuda"] / "lib64" / trees["wheel"].name)
    assert got["path"] == lib
    assert got["maps"] == [lib]  # the process runs the toolkit's NVRTC, not the wheel's
    assert got["via"] == "$CUDA_HOME, after the wheel's failed"
    assert "libnvrtc.so" in got["wheel_error"] and str(trees["broken"]) in got["wheel_error"]
    assert got["cubin"] == "7f454c46"  # an ELF CUBIN, compiled by it
    assert got["line"].startswith(f"{lib} ($CUDA_HOME, after the wheel's failed); the wheel's NVRTC did not load: ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loader")
def test_cuda_path_is_tried_after_cuda_home(trees: dict[str, Path]) -> None:
    got = probe(trees, CUDA_HOME=str(trees["empty"]), CUDA_PATH=str(trees["cuda"]))
    assert got["path"] == str(trees["cuda"] / "lib64" / trees["wheel"].name)
    assert got["via"].startswith("$CUDA_PATH")


SYSTEM_NVRTC = any(Path("/usr/local/cuda").glob("**/libnvrtc.so.1[23]"))


@pytest.mark.skipif(not sys.platform.startswith("linux") or SYSTEM_NVRTC, reason="Linux, no NVRTC in /usr/local/cuda")
def test_no_loadable_nvrtc_says_where_it_looked(trees: dict[str, Path]) -> None:
    got = probe(trees, CUDA_HOME=str(trees["empty"]))
    reason = got["unavailable"]
    assert reason.startswith("NVRTC could not be loaded (RuntimeError: ")
    major = driver.CudaDriver().bindings_major  # cuda-bindings N loads NVRTC N, so only that one is looked for
    assert f"$CUDA_HOME: no libnvrtc.so.{major} under {trees['empty']}/" in reason
    assert "/usr/local/cuda: no libnvrtc.so" in reason
    assert "point CUDA_HOME at a CUDA toolkit" in reason
    assert got["line"] == f"none ({reason})"


def test_the_header_says_where_nvrtc_came_from() -> None:
    assert NvrtcLibrary("/w/libnvrtc.so.13", "site-packages").describe() == "/w/libnvrtc.so.13 (site-packages)"
    fallback = NvrtcLibrary("/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda, after the wheel's failed", "boom")
    assert fallback.describe().endswith("; the wheel's NVRTC did not load: boom")
