"""Issue 19, a new user's first hour: what a user sees on a machine without NVRTC or with a broken driver, from
a kernel with a syntax error, a kernel cache path that is a file, and a few misleading messages.

Machines without NVRTC are made for real, in a fresh interpreter: a ``sitecustomize`` (on ``PYTHONPATH``) shows
``cuda.pathfinder`` no site-packages, so it finds no NVRTC wheel, as after ``pip install pytest-jetmem`` without
the cu12/cu13 extra. A broken driver is a real shared library, ``libcuda.so.1`` built here from C (found first
through ``LD_LIBRARY_PATH``), whose ``cuInit`` returns the code in ``$FAKE_CUINIT``; cuda-bindings loads it and
calls it as it would call NVIDIA's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver
from memmode_runs import InstallFake
from pytest_jetmem.cuda import driver, modes
from pytest_jetmem.cuda.compiler import compile_kernel
from pytest_jetmem.cuda.launch import pack_args, parse_signature
from pytest_jetmem.errors import CompileError, CudaUnavailable, LaunchArgumentError
from pytest_jetmem.handle import Jetmem

try:
    DRV = driver.CudaDriver()
    NVRTC = DRV.nvrtc_version()
except CudaUnavailable as exc:  # pragma: no cover - depends on the install
    pytest.skip(f"no NVRTC: {exc}", allow_module_level=True)
MAJOR = DRV.bindings_major  # cuda-bindings N loads NVRTC N

SITECUSTOMIZE = '''\
"""cuda.pathfinder sees no site-packages: no NVRTC wheel, as without pytest-jetmem's cu12/cu13 extra."""
import os
import site

_EMPTY = os.environ["JETMEM_TEST_EMPTY_SITE"]
site.getsitepackages = lambda *args, **kwargs: [_EMPTY]
site.getusersitepackages = lambda *args, **kwargs: _EMPTY
'''

FAKE_LIBCUDA = r"""
#include <stdlib.h>
#include <string.h>
/* A libcuda.so.1 whose cuInit returns $FAKE_CUINIT: enough for cuda-bindings to load it and call cuInit. */
int cuInit(unsigned int flags) { const char *c = getenv("FAKE_CUINIT"); (void)flags; return c ? atoi(c) : 100; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
    (void)ver; (void)flags;
    if (status) *status = 0;
    if (!strcmp(sym, "cuInit")) { *pfn = (void *)cuInit; return 0; }
    if (!strcmp(sym, "cuDriverGetVersion")) { *pfn = (void *)cuDriverGetVersion; return 0; }
    if (!strcmp(sym, "cuGetProcAddress")) { *pfn = (void *)cuGetProcAddress_v2; return 0; }
    *pfn = 0;
    if (status) *status = 1;
    return 500;
}
int cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, 0);
}
"""

PROBE = textwrap.dedent(
    """
    import json, sys
    from pytest_jetmem.cuda.driver import CudaDriver
    from pytest_jetmem.errors import CudaUnavailable

    drv, out = CudaDriver(), {}
    calls = {
        "init": drv.init,
        "library": drv.nvrtc_library,
        "version": drv.nvrtc_version,
        "archs": drv.nvrtc_supported_archs,
        "compile": lambda: drv.nvrtc_compile('extern "C" __global__ void k() {}', "k.cu", ["-arch=sm_87"]),
    }
    for name in sys.argv[1:]:
        try:
            calls[name]()
            out[name] = "ok"
        except CudaUnavailable as exc:
            out[name] = "CudaUnavailable: " + exc.reason
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    """
)

BASE_ENV_DROPPED = ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CONDA_PREFIX", "PYTHONPATH", "FAKE_CUINIT")


@pytest.fixture(scope="module")
def no_nvrtc_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment variables of a machine without NVRTC (see the module's docstring)."""
    root = tmp_path_factory.mktemp("no-nvrtc")
    (root / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "site").mkdir()
    env = {"PYTHONPATH": str(root), "JETMEM_TEST_EMPTY_SITE": str(root / "site")}
    got = probe(env, "library")
    if got["library"] == "ok":  # pragma: no cover - depends on the machine
        pytest.skip("this machine has an NVRTC outside site-packages (a system CUDA toolkit)")
    return env


@pytest.fixture(scope="module")
def libcuda_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A directory holding the fake ``libcuda.so.1`` (see the module's docstring)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not sys.platform.startswith("linux"):  # pragma: no cover - depends on the machine
        pytest.skip("needs a C compiler on Linux to build a libcuda.so.1")
    root = tmp_path_factory.mktemp("libcuda")
    (root / "fake.c").write_text(FAKE_LIBCUDA)
    built = subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(root / "libcuda.so.1"), str(root / "fake.c")], capture_output=True, text=True
    )
    if built.returncode != 0:  # pragma: no cover - depends on the machine
        pytest.skip(f"could not build a libcuda.so.1: {built.stderr}")
    return str(root)


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BASE_ENV_DROPPED}
    return {**env, **extra}


def probe(extra: dict[str, str], *calls: str) -> dict[str, str]:
    """What each driver call says in a fresh interpreter with the environment variables ``extra``."""
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *calls], env=child_env(extra), capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def use_env(monkeypatch: pytest.MonkeyPatch, extra: dict[str, str]) -> None:
    """Child processes of this test (pytester's subprocess runs) get ``extra`` and none of BASE_ENV_DROPPED."""
    for name in BASE_ENV_DROPPED:
        monkeypatch.delenv(name, raising=False)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)


def no_driver_here(no_nvrtc_env: dict[str, str]) -> None:
    """Skip where a CUDA driver loads: these cases are about a machine without one."""
    init = probe(no_nvrtc_env, "init")["init"]
    if not init.startswith("CudaUnavailable: no CUDA driver"):  # pragma: no cover - a machine with a driver
        pytest.skip(f"a CUDA driver loads here ({init})")


def nvrtc_reason_ok(reason: str) -> None:
    """``reason`` says that NVRTC is missing, which library, and how to get it."""
    assert f"NVRTC not found (libnvrtc.so.{MAJOR})" in reason, reason
    assert f"install pytest-jetmem[cu{MAJOR}]" in reason, reason
    assert "CUDA_HOME" in reason, reason


USER_TESTS = """
    import pytest

    SRC = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }'

    @pytest.mark.memmode("device", "managed")
    def test_compiles(jetmem):
        jetmem.compile(SRC, "k")

    @pytest.mark.memmode("device")
    def test_mode_only(memmode):
        pass
"""


# Where pytest-jetmem reports test_compiles' skips: the line of its first decorator (makepyfile strips the text).
_FIRST_DECORATOR = '@pytest.mark.memmode("device", "managed")'
COMPILES_AT = f"test_user.py:{textwrap.dedent(USER_TESTS).strip().splitlines().index(_FIRST_DECORATOR) + 1}"


def skip_lines(output: str) -> list[tuple[str, str]]:
    """(location, reason) of each ``SKIPPED`` line of ``-rs``."""
    return re.findall(r"^SKIPPED \[\d+\] (\S+): (.*)$", output, re.M)


def run_without_nvrtc(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, str]:
    pytester.makepyfile(test_user=textwrap.dedent(USER_TESTS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *args, timeout=300)
    return result, result.stdout.str() + result.stderr.str()


# -- item 1: no NVRTC -----------------------------------------------------------------------------------------
def test_every_nvrtc_call_without_nvrtc_is_cuda_unavailable(no_nvrtc_env: dict[str, str]) -> None:
    """The driver boundary turns a missing libnvrtc into CudaUnavailable, whichever NVRTC call comes first."""
    for call in ("archs", "version", "compile", "library"):
        got = probe(no_nvrtc_env, call)[call]
        assert got.startswith("CudaUnavailable: "), got
        nvrtc_reason_ok(got)
        assert "DynamicLibNotFoundError" not in got.split(";")[0]


XDIST = pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist is not installed")


@pytest.mark.parametrize(
    "args",
    [(), ("--jetmem-arch=sm_87",), pytest.param(("-n", "2"), marks=XDIST)],
    ids=["plain", "jetmem-arch", "xdist"],
)
def test_without_driver_and_nvrtc_jetmem_tests_skip_naming_both(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    no_nvrtc_env: dict[str, str],
    jetmem_kernel_cache: Path,
    args: tuple[str, ...],
) -> None:
    no_driver_here(no_nvrtc_env)
    use_env(monkeypatch, no_nvrtc_env)
    result, output = run_without_nvrtc(pytester, *args)
    assert result.ret == 0, output
    result.assert_outcomes(skipped=3)
    assert "Traceback" not in output and "DynamicLibNotFoundError" not in output, output
    compiled = [r for loc, r in skip_lines(output) if loc == COMPILES_AT]
    assert compiled, output
    for reason in compiled:
        assert reason.startswith("jetmem: no CUDA driver: "), reason
        nvrtc_reason_ok(reason)


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("100", "jetmem: no CUDA device: cuInit returned CUDA_ERROR_NO_DEVICE (100)"),
        ("999", "jetmem: no usable CUDA driver: cuInit returned CUDA_ERROR_UNKNOWN (999)"),
    ],
)
def test_a_failing_cuinit_without_nvrtc_skips_naming_both(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    no_nvrtc_env: dict[str, str],
    libcuda_dir: str,
    jetmem_kernel_cache: Path,
    code: str,
    says: str,
) -> None:
    use_env(monkeypatch, {**no_nvrtc_env, "LD_LIBRARY_PATH": libcuda_dir, "FAKE_CUINIT": code})
    result, output = run_without_nvrtc(pytester)
    assert result.ret == 0, output
    result.assert_outcomes(skipped=3)
    assert "Traceback" not in output, output
    compiled = [r for loc, r in skip_lines(output) if loc == COMPILES_AT]
    assert compiled, output
    for reason in compiled:
        assert reason.startswith(says), reason
        nvrtc_reason_ok(reason)


def test_the_demo_without_a_gpu_and_nvrtc_prints_one_line_and_exits_0(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    no_nvrtc_env: dict[str, str],
    libcuda_dir: str,
    jetmem_kernel_cache: Path,
) -> None:
    use_env(monkeypatch, {**no_nvrtc_env, "LD_LIBRARY_PATH": libcuda_dir, "FAKE_CUINIT": "100"})
    result = pytester.run(sys.executable, "-m", "pytest_jetmem.demo", timeout=300)
    out = result.stdout.str()
    assert result.ret == 0, out + result.stderr.str()
    assert out.count("\n") == 0 and len(result.stdout.lines) == 1, out  # str() drops the final newline
    assert out.startswith("pytest-jetmem demo: no GPU here (no CUDA device: cuInit returned CUDA_ERROR_NO_DEVICE")
    assert out.endswith(f"demo tests over {', '.join(modes.names())} are skipped")  # the demo runs every mode


# -- item 8d: CUDA error names, also where the bindings cannot name a code --------------------------------------
@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("35", "no usable CUDA driver: cuInit returned CUDA_ERROR_INSUFFICIENT_DRIVER (35)"),
        ("12345", "no usable CUDA driver: cuInit returned CUDA error 12345"),
    ],
)
def test_cuinit_codes_the_bindings_cannot_name_are_named(libcuda_dir: str, code: str, says: str) -> None:
    got = probe({"LD_LIBRARY_PATH": libcuda_dir, "FAKE_CUINIT": code}, "init")["init"]
    assert got.startswith(f"CudaUnavailable: {says}"), got
    assert "is not a valid" not in got


def test_error_names_from_codes() -> None:
    assert driver.error_name(35) == "CUDA_ERROR_INSUFFICIENT_DRIVER"
    assert driver.describe_error(35) == "CUDA_ERROR_INSUFFICIENT_DRIVER (35)"
    assert driver.error_name(100) == "CUDA_ERROR_NO_DEVICE"
    assert driver.describe_error(12345) == "CUDA error 12345"
    assert driver.error_name(12345) == "CUDA error 12345"
    from cuda.bindings import driver as cu

    assert driver.describe_error(cu.CUresult.CUDA_ERROR_UNKNOWN) == "CUDA_ERROR_UNKNOWN (999)"


def test_a_driver_call_returning_a_code_the_bindings_cannot_name_is_a_cuda_error() -> None:
    """A bindings call that raises on an unknown code (``ValueError: 35 is not a valid CUresult``) is a CudaError."""
    from cuda.bindings import driver as cu

    class Bindings:
        CUresult = cu.CUresult

        @staticmethod
        def cuDeviceGetCount() -> Any:
            return (cu.CUresult(12345),)  # raises ValueError as the bindings do

    backend = driver.CudaDriver()
    backend._cu = Bindings()
    with pytest.raises(driver.CudaError) as info:
        backend.device_count()
    assert info.value.code == 12345 and str(info.value) == "cuDeviceGetCount failed: CUDA error 12345"


# -- item 4: the cu12 hint only where NVRTC rejected the architecture -----------------------------------------
BROKEN = 'extern "C" __global__ void broken(float* x) { x[0] = 1.0f }\n'
GOOD = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'


def test_a_syntax_error_has_no_architecture_hint() -> None:
    with pytest.raises(CompileError) as info:
        compile_kernel(BROKEN, "broken", "sm_87", drv=DRV)
    msg = str(info.value)
    assert 'expected a ";"' in msg
    assert "does not compile for" not in msg and "cu12" not in msg


def test_a_bad_option_has_no_architecture_hint() -> None:
    with pytest.raises(CompileError) as info:
        compile_kernel(GOOD, "k", "sm_87", options="--no-such-option", drv=DRV)
    assert "--no-such-option" in str(info.value) and "does not compile for" not in str(info.value)


def test_sm72_under_nvrtc_13_names_the_cu12_extra() -> None:
    if NVRTC < (13, 0):
        pytest.skip("needs NVRTC 13 (this one compiles sm_72)")
    with pytest.raises(CompileError) as info:
        compile_kernel(GOOD, "k", "sm_72", drv=DRV)
    msg = str(info.value)
    assert f"NVRTC {NVRTC[0]}.{NVRTC[1]} does not compile for sm_72" in msg
    assert "CUDA 12's NVRTC does: install pytest-jetmem[cu12]" in msg


def test_an_arch_no_nvrtc_knows_says_so_without_the_cu12_extra() -> None:
    with pytest.raises(CompileError) as info:
        compile_kernel(GOOD, "k", "sm_999", drv=DRV)
    msg = str(info.value)
    assert "does not compile for sm_999; it compiles for sm_" in msg
    assert "cu12" not in msg


# -- item 7: a compile error shows the message and the user's frames ------------------------------------------
SYNTAX_TEST = """
    import pytest
    from pytest_jetmem import kernels

    BROKEN = 'extern "C" __global__ void broken(float* x) { x[0] = 1.0f }'

    @pytest.mark.memmode("device")
    def test_syntax(jetmem):
        x = jetmem.zeros(4)
        jetmem.compile(BROKEN, "broken").launch(1, 1, (x,))
"""


@pytest.mark.parametrize("profile", ["orin", "no_device"])
def test_a_kernel_syntax_error_shows_the_message_and_the_users_line(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str
) -> None:
    install_fake_driver(profile)
    pytester.makepyfile(test_user=textwrap.dedent(SYNTAX_TEST))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    failure = output.split(" test_syntax[device] ", 1)[1].split("short test summary", 1)[0]
    assert 'expected a ";"' in failure and "CompileError: kernel 'broken' failed to compile" in failure
    assert 'jetmem.compile(BROKEN, "broken").launch(1, 1, (x,))' in failure  # the user's line
    assert "def compile_kernel" not in failure and "def compiled" not in failure and "def compile(" not in failure
    assert len(failure.splitlines()) < 40, failure


def test_internal_errors_in_the_compile_path_keep_their_frames(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """Only jetmem's own user-facing errors hide the library frames; a bug elsewhere keeps them for its report."""
    fake = install_fake_driver("orin")
    fake.nvrtc_compile = lambda *a, **k: 1 / 0  # type: ignore[method-assign]
    pytester.makepyfile(test_user=textwrap.dedent(SYNTAX_TEST))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "in compile_kernel" in result.stdout.str() and "ZeroDivisionError" in result.stdout.str()


# -- item 6: a kernel cache path that is a file -----------------------------------------------------------------
@pytest.mark.parametrize("how", ["option", "ini", "env"])
def test_a_kernel_cache_path_that_is_a_file_is_a_usage_error(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    install_fake_driver("no_device")
    path = pytester.path / "kernels.txt"
    path.write_text("not a directory\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    args: list[str] = []
    if how == "option":
        args, source = [f"--jetmem-cache-dir={path}"], "--jetmem-cache-dir"
    elif how == "ini":
        pytester.makeini(f"[pytest]\njetmem_cache_dir = {path}\n")
        source = "ini option jetmem_cache_dir"
    else:
        monkeypatch.setenv("JETMEM_CACHE_DIR", str(path))
        source = "JETMEM_CACHE_DIR"
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = " ".join(result.stderr.str().split())
    assert f"{source}={path}: is a file; expected a directory for the NVRTC kernel cache" in text, text


def test_a_kernel_cache_path_below_a_file_is_a_usage_error(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("no_device")
    (pytester.path / "kernels.txt").write_text("")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"--jetmem-cache-dir={pytester.path / 'kernels.txt' / 'sub'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{pytester.path / 'kernels.txt'} is a file" in result.stderr.str()


def test_a_kernel_cache_directory_still_to_be_made_is_fine(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("no_device")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"--jetmem-cache-dir={pytester.path / 'new' / 'kernels'}")
    result.assert_outcomes(passed=1)


# -- item 8a: --help on --jetmem-arch -------------------------------------------------------------------------
def test_help_says_jetmem_arch_takes_commas_or_spaces(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    assert "--jetmem-arch=ARCHS" in text
    after = text.split("--jetmem-arch=ARCHS", 1)[1][:300]
    assert "comma or space separated" in after, after


# -- item 8b: jetmem.array names itself ------------------------------------------------------------------------
def test_array_of_text_names_jetmem_array(jm: Jetmem) -> None:
    with pytest.raises(TypeError) as info:
        jm.array(["a", "b"])
    assert "jetmem.array: dtype <U1 cannot live in GPU memory" in str(info.value)
    assert "jetmem.empty" not in str(info.value)
    with pytest.raises(TypeError, match=r"jetmem\.empty_like: dtype object"):
        jm.empty_like(np.array([None, 1]))
    with pytest.raises(ValueError, match=r"jetmem\.zeros: shape must be non-negative"):
        jm.zeros(-1)
    with pytest.raises(TypeError, match=r"jetmem\.empty: dtype <U1"):
        jm.empty(3, "U1")


# -- item 8c: a number passed for a pointer parameter ---------------------------------------------------------
POINTER_SRC = """
template <typename T>
__global__ void saxpy(T* y, const T* x, T a, size_t n) {}
extern "C" __global__ void scale(const float* __restrict__ x, float* out, int n) {}
"""


def test_a_float_for_a_pointer_parameter_asks_for_a_buffer() -> None:
    params = parse_signature(POINTER_SRC, "scale")
    with pytest.raises(LaunchArgumentError) as info:
        pack_args("scale", (2.0, 0x1000, 3), params)
    msg = str(info.value)
    assert msg.startswith("kernel 'scale' argument 0 (x): expected a pointer for const float* __restrict__ x: ")
    assert "a jetmem buffer" in msg and "device pointer" in msg and msg.endswith("got float 2.0")
    assert "numpy scalar" not in msg


def test_a_float_for_a_template_pointer_parameter_through_a_launch(fake: FakeDriver, jm: Jetmem) -> None:
    kernel = jm.compile(POINTER_SRC, "saxpy<float>")
    y = jm.zeros(4)
    for value, shown in ((2.0, "float 2.0"), (np.float32(2.0), "numpy float32 2.0")):
        with pytest.raises(LaunchArgumentError) as info:
            kernel.launch(1, 4, (y, value, 2.0, 4))
        msg = str(info.value)
        assert "argument 1 (x): expected a pointer for const float* x" in msg, msg
        assert msg.endswith(f"got {shown}") and "numpy scalar" not in msg


def test_unnamed_codes_from_either_bindings_error() -> None:
    """cuda-bindings 13.0 raises ``KeyError(35)`` for a code its enum lacks, later ones ``ValueError``."""
    assert driver.unnamed_code(ValueError("35 is not a valid CUresult")) == 35
    assert driver.unnamed_code(KeyError(35)) == 35
    assert driver.unnamed_code(KeyError("cuInit")) is None
    assert driver.unnamed_code(ValueError("something else")) is None
