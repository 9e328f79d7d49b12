"""The bad-input sweep's cases in the CUDA layer (issue 24, item 5): each ends in one clear message naming the
function or argument, the value and what was expected, with no plugin frames in the traceback.

The end-to-end cases are in-process ``pytester`` runs on the fake driver (``orin``), or on its ``no_driver`` profile
with the real NVRTC (the no-GPU check); the rest call the CUDA layer directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem.cuda import driver, modes
from pytest_jetmem.cuda.compiler import check_source, compile_kernel
from pytest_jetmem.cuda.launch import POINTER, LaunchArgumentError, Param, pack_args
from pytest_jetmem.cuda.nogpu import CheckDriver, check_allocatable, check_device_info
from pytest_jetmem.errors import AllocationRefused, CompileError, CudaUnavailable
from runtime_runs import InstallFake

KERNEL = 'extern "C" __global__ void k(float* y, int n) { }'


def failure(result: pytest.RunResult) -> str:
    """The one failure's section of the run's output, asserted free of plugin frames and plugin source."""
    result.assert_outcomes(failed=1)
    text = "\n".join(result.outlines)
    section = text[text.index("= FAILURES =") : text.index("short test summary info")]
    assert "/pytest_jetmem/" not in section, section  # no frame of the plugin's files
    assert "def " not in section.replace("def test_", ""), section  # no plugin function's source
    assert len(section.splitlines()) < 20, section
    return " ".join(section.split())


def run_test(pytester: pytest.Pytester, body: str, mode: str = "device", prelude: str = "") -> pytest.RunResult:
    source = f"import pytest\nfrom pathlib import Path\nSRC = {KERNEL!r}\n{prelude}\n"
    source += f"@pytest.mark.memmode({mode!r})\ndef test_x(jetmem):\n    {body}\n"
    pytester.makepyfile(test_it=source)
    return pytester.runpytest()


# -- (d) launch arguments ------------------------------------------------------------------------------------------
FAKE_ARRAY = "class Fake:\n    __cuda_array_interface__ = {'shape': (3,), 'typestr': '<f4', 'version': 3}\n"


def test_a_device_array_without_an_address_is_a_short_launch_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    text = failure(run_test(pytester, "jetmem.compile(SRC, 'k').launch(1, 1, (Fake(), 3))", prelude=FAKE_ARRAY))
    assert "LaunchArgumentError: kernel 'k' argument 0 (y): Fake.__cuda_array_interface__ is {'shape': (3,)" in text
    assert "expected a dict whose 'data' is (device pointer as int, read-only flag)" in text


def test_an_object_of_an_unsupported_type_is_a_short_launch_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    text = failure(run_test(pytester, "jetmem.compile(SRC, 'k').launch(1, 1, (object(), 3))"))
    assert "kernel 'k' argument 0 (y): cannot pass object <object object at" in text
    assert "expected a pointer for float* y: a jetmem buffer, a device array (__cuda_array_interface__)" in text


def test_a_host_array_for_a_scalar_says_what_the_parameter_takes(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    text = failure(run_test(pytester, "k = jetmem.compile(SRC, 'k'); k.launch(1, 1, (jetmem.empty(4), [3]))"))
    assert "kernel 'k' argument 1 (n): cannot pass list [3] to a kernel; expected int32 for int n" in text


def test_args_that_are_no_tuple_are_a_short_launch_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    text = failure(run_test(pytester, "jetmem.compile(SRC, 'k').launch(1, 1, 5)"))
    assert "kernel 'k' args: expected a tuple of the kernel's arguments (y (a pointer), n (int32)), got int 5" in text


def test_a_bad_launch_shape_is_a_short_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    text = failure(run_test(pytester, "jetmem.compile(SRC, 'k').launch((0, 2), 1, (0, 3))"))
    assert "kernel 'k' grid: expected 1 to 3 positive integers, got (0, 2)" in text


def test_a_cuda_array_interface_that_raises_is_named() -> None:
    class Broken:
        @property
        def __cuda_array_interface__(self) -> Any:
            raise RuntimeError("released")

    with pytest.raises(LaunchArgumentError, match=r"argument 0 \(p\): Broken.__cuda_array_interface__ raised"):
        pack_args("k", (Broken(),), [Param("p", POINTER)])


@pytest.mark.parametrize("args", ["ab", b"ab", {1: 2}, 7])
def test_args_must_be_a_sequence_of_arguments(args: Any) -> None:
    with pytest.raises(LaunchArgumentError, match=r"kernel 'k' args: expected a tuple of the kernel's arguments"):
        pack_args("k", args, None)


def test_a_long_value_is_cut_in_the_message() -> None:
    with pytest.raises(LaunchArgumentError) as info:
        pack_args("k", (np.zeros(1000),), [Param("x", POINTER)])
    assert "..." in str(info.value) and len(str(info.value)) < 400
    assert "copy it to the GPU with jetmem.array(...)" in str(info.value)


# -- (a) compile takes source text ---------------------------------------------------------------------------------
def test_a_path_to_compile_says_compile_takes_source_text(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    text = failure(run_test(pytester, "jetmem.compile(Path('kernels/k.cu'), 'k')"))
    said = "TypeError: kernel 'k': compile takes the CUDA source text (a str), got the path PosixPath('kernels/k.cu')"
    assert said in text
    assert "compile(Path('kernels/k.cu').read_text(), 'k')" in text


def test_a_str_naming_a_cu_file_says_it_is_a_file_name(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    (pytester.path / "kernels").mkdir()
    (pytester.path / "kernels" / "k.cu").write_text(KERNEL)
    text = failure(run_test(pytester, "jetmem.compile('kernels/k.cu', 'k')"))
    said = "CompileError: kernel 'k': the source is 'kernels/k.cu', which names a file here, not CUDA source text"
    assert said in text
    assert "compile(Path('kernels/k.cu').read_text(), ...)" in text
    assert "no __global__ function" not in text


@pytest.mark.parametrize("source", ["kernels/k.cu", " K.CUH\n", "missing.cu"])
def test_check_source_refuses_a_file_name(source: str) -> None:
    with pytest.raises(CompileError, match=r"not CUDA source text: compile takes the source itself"):
        check_source(source, "k")


@pytest.mark.parametrize("source", [Path("k.cu"), b"__global__ void k() {}", None, 3])
def test_check_source_refuses_what_is_no_str(source: Any) -> None:
    with pytest.raises(TypeError, match=r"kernel 'k': compile takes the CUDA source text \(a str\)"):
        check_source(source, "k")


def test_source_text_ending_in_cu_is_still_source() -> None:
    check_source('extern "C" __global__ void k() {} // see k.cu', "k")
    with pytest.raises(CompileError, match="no __global__ function of that name"):
        check_source("// a comment mentioning k.cu\nint x;", "k")


def test_compile_kernel_refuses_a_path_before_asking_nvrtc() -> None:
    class NoNvrtc:
        def nvrtc_version(self) -> tuple[int, int]:
            raise AssertionError("NVRTC was asked")

    with pytest.raises(TypeError, match="compile takes the CUDA source text"):
        compile_kernel(Path("k.cu"), "k", "sm_87", drv=NoNvrtc())  # type: ignore[arg-type]


# -- (b) a registered mode whose allocate returns nothing ------------------------------------------------------------
NONE_MODE = """
from pytest_jetmem.cuda import modes

class Bad(modes.DeviceMode):
    name = "bad"

    def allocate(self, drv, nbytes):
        return None

modes.register(Bad())
"""


def test_a_mode_whose_allocate_returns_none_says_so(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    try:
        text = failure(run_test(pytester, "jetmem.empty(10)", mode="bad", prelude=NONE_MODE))
    finally:
        modes.MODES.pop("bad", None)
    assert "TypeError: test_it.py::test_x[bad]: memory mode 'bad': Bad.allocate(drv, 40) returned None" in text
    assert "expected an Allocation(ptr, host_ptr, nbytes)" in text
    assert "was freed" not in text


def test_allocation_problem_names_each_mistake() -> None:
    managed = modes.get_mode("managed")
    assert modes.allocation_problem(managed, 40, modes.Allocation(0x1000, 0x1000, 40)) is None
    assert "returned 4096; expected an Allocation" in str(modes.allocation_problem(managed, 40, 4096))
    short = modes.allocation_problem(managed, 40, modes.Allocation(0x1000, 0x1000, 8))
    assert short is not None and "of at least 40 bytes at an int device address" in short
    no_view = modes.allocation_problem(managed, 40, modes.Allocation(0x1000, None, 40))
    assert no_view is not None and "expected an int host_ptr" in no_view
    assert modes.allocation_problem(modes.get_mode("device"), 40, modes.Allocation(0x1000, None, 40)) is None


# -- (c) allocations without a GPU -----------------------------------------------------------------------------------
@pytest.fixture
def real_nvrtc() -> None:
    try:
        driver.CudaDriver().nvrtc_version()
    except CudaUnavailable as exc:  # pragma: no cover - depends on the install
        pytest.skip(f"no NVRTC: {exc}")


@pytest.mark.parametrize("shift", [34, 50])
def test_too_much_memory_without_a_gpu_names_the_check_and_the_host(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, real_nvrtc: None, shift: int
) -> None:
    install_fake_driver("no_driver")
    text = failure(run_test(pytester, f"jetmem.empty(1 << {shift})", mode="managed"))
    assert f"refused to allocate {4 << shift} bytes of managed memory: only " in text
    assert "without a GPU the kernel check backs managed memory with host memory: MemAvailable" in text
    assert "integrated" not in text and "cuMemGetInfo" not in text and "Errno" not in text


def test_the_no_gpu_limit_is_the_hosts_for_host_memory_and_none_for_device_memory() -> None:
    limit, why = check_allocatable(modes.get_mode("zero_copy"))
    assert limit is None or limit > 0
    assert why == "without a GPU the kernel check backs zero_copy memory with host memory: MemAvailable"
    assert check_allocatable(modes.get_mode("device")) == (
        None,
        "without a GPU device memory is a placeholder address range",
    )


def test_host_memory_the_host_refuses_without_a_gpu_is_allocation_refused() -> None:
    drv = CheckDriver(None, check_device_info(("sm_87",), (13, 0), "x"))  # type: ignore[arg-type]  # NVRTC unused
    with pytest.raises(AllocationRefused) as info:
        drv.mem_alloc_managed(1 << 62)
    assert str(info.value).startswith(
        f"refused to allocate {1 << 62} bytes of managed memory: without a GPU the kernel check backs it with host "
        f"memory, and the host refused {(1 << 62) / 2**30:.1f} GiB ("
    )
