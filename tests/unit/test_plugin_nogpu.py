"""The no-GPU half (plugin.nogpu) end to end: pytest runs on a machine with no CUDA device (the fake's
``no_device`` profile), the real NVRTC compiling every kernel for the target architectures."""

from __future__ import annotations

import textwrap

import pytest

from fakes.fake_driver import TESTS_DIR
from memmode_runs import InstallFake, results, skip_reason
from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.nogpu import default_archs
from pytest_jetmem.errors import CudaUnavailable

try:
    TARGETS = default_archs(driver.CudaDriver().nvrtc_supported_archs())
except CudaUnavailable as exc:  # pragma: no cover - depends on the install
    pytest.skip(f"no NVRTC: {exc}", allow_module_level=True)
HEADERS = driver.find_cuda_headers()

USER_TESTS = '''
    import numpy as np
    import pytest
    from pytest_jetmem import kernels

    SAXPY = """
    template <typename T>
    __global__ void saxpy(T* y, const T* x, T a, size_t n)
    {
        size_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
    """
    BROKEN = 'extern "C" __global__ void broken(float* x) { x[0] = 1.0f }'

    @pytest.mark.memmode
    def test_good(jetmem):
        x = jetmem.array(np.ones(1000, np.float32))
        y = jetmem.zeros(1000)
        k = jetmem.compile(SAXPY, "saxpy<float>", options="-lineinfo")
        k.launch(4, 256, (y, x, 2.0, 1000))
        k.launch(4, 256, (y, x, 2.0, 1000))
        np.testing.assert_array_equal(y.to_numpy(), 4.0)

    @pytest.mark.memmode("device")
    def test_syntax_error(jetmem):
        jetmem.compile(BROKEN, "broken")

    @pytest.mark.memmode("managed")
    def test_bad_argument(jetmem):
        x = jetmem.zeros(1000)
        jetmem.compile(SAXPY, "saxpy<float>").launch(4, 256, (x, x, 2.0, -5))

    @pytest.mark.memmode("zero_copy")
    def test_bundled_and_timed(jetmem):
        img = jetmem.array(np.ones((64, 64), np.float32))
        w = jetmem.array(np.ones((3, 3), np.float32))
        out = jetmem.empty((64, 64))
        kernels.conv2d(jetmem, img, w, out)
        jetmem.measure(lambda: kernels.conv2d(jetmem, img, w, out))

    @pytest.mark.memmode("device")
    def test_only_compiles(jetmem):
        jetmem.kernel("matmul_tiled")

    @pytest.mark.memmode("device", "managed")
    def test_mode_only(memmode):
        pass
'''


@pytest.fixture
def run(pytester: pytest.Pytester, install_fake_driver: InstallFake):
    install_fake_driver("no_device")

    def go(*args: str, source: str = USER_TESTS) -> dict[str, tuple[str, str]]:
        pytester.makepyfile(test_user=textwrap.dedent(source))
        return results(pytester.inline_run("-p", "no:cacheprovider", *args))

    return go


def test_kernels_are_checked_without_a_gpu(run) -> None:
    out = run()
    archs = ", ".join(TARGETS)
    for mode in ("device", "managed", "zero_copy"):
        outcome, text = out[f"test_good[{mode}]"]
        assert outcome == "skipped", text
        reason = skip_reason(text)
        assert reason.startswith("jetmem: no CUDA device: ")
        assert f"without a GPU: compiled 1 kernel (saxpy<float>) for {archs}; checked 2 launches; " in reason
        assert reason.endswith("needs a GPU")
    assert "copying GPU memory back to the host needs a GPU" in out["test_good[device]"][1]
    assert "host access to buffer float32 (1000,) after a kernel launch" in out["test_good[managed]"][1]
    outcome, text = out["test_bundled_and_timed[zero_copy]"]
    assert outcome == "skipped" and "compiled 1 kernel (conv2d_replicate)" in text and "timing GPU work" in text
    outcome, text = out["test_only_compiles[device]"]
    assert outcome == "skipped" and "compiled 1 kernel (matmul_tiled)" in text and "nothing ran on a GPU" in text
    # a test without the jetmem fixture is skipped at once, as before
    outcome, text = out["test_mode_only[device]"]
    assert outcome == "skipped" and skip_reason(text).startswith("jetmem: no CUDA device: ")
    assert "without a GPU" not in text


def test_a_syntax_error_fails_the_test_without_a_gpu(run) -> None:
    outcome, text = run()["test_syntax_error[device]"]
    assert outcome == "failed"
    assert "CompileError: kernel 'broken' failed to compile for" in text
    assert 'expected a ";"' in text


def test_a_bad_launch_argument_fails_naming_the_parameter(run) -> None:
    outcome, text = run()["test_bad_argument[managed]"]
    assert outcome == "failed"
    assert "LaunchArgumentError: kernel 'saxpy<float>' argument 3 (n): -5 is out of range for uint64" in text


def test_jetmem_arch_option_and_ini(run, pytester: pytest.Pytester) -> None:
    out = run("--jetmem-arch=sm_87,sm_90", "-k", "test_good")
    assert "for sm_87, sm_90; checked 2 launches" in out["test_good[device]"][1]
    pytester.makeini("[pytest]\njetmem_arch = sm_90\n")
    out = run("-k", "test_good")
    assert "for sm_90; checked 2 launches" in out["test_good[device]"][1]


def test_jetmem_arch_none_skips_at_once(run) -> None:
    out = run("--jetmem-arch=none")
    for name in ("test_good[device]", "test_syntax_error[device]", "test_bad_argument[managed]"):
        outcome, text = out[name]
        assert outcome == "skipped" and "without a GPU" not in text


def test_malformed_jetmem_arch_is_a_usage_error(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("no_device")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--jetmem-arch=compute_87")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jetmem-arch: expected architectures such as sm_87,sm_110, got 'compute_87'*"])


def test_an_arch_nvrtc_cannot_compile_for_fails_the_tests(run) -> None:
    outcome, text = run("--jetmem-arch=sm_87,sm_999", "-k", "test_good")["test_good[device]"]
    assert outcome == "failed"
    assert "--jetmem-arch: NVRTC" in text and "cannot compile for sm_999; it supports sm_" in text


def test_ini_include_dirs_reach_every_compile(run, pytester: pytest.Pytester) -> None:
    inc = pytester.mkdir("inc")
    (inc / "values.h").write_text("#define SCALE 3\n")
    pytester.makeini("[pytest]\njetmem_include_dirs = inc\n")
    source = """
        import pytest
        SRC = '#include "values.h"\\nextern "C" __global__ void f(int* x) { x[0] = SCALE; }'

        @pytest.mark.memmode("device")
        def test_inc(jetmem):
            jetmem.compile(SRC, "f")
    """
    outcome, text = run(source=source)["test_inc[device]"]
    assert outcome == "skipped" and "compiled 1 kernel (f)" in text, text


def test_concurrency_tests_are_not_run_without_a_gpu(run) -> None:
    source = """
        import pytest

        @pytest.mark.memmode("managed")
        @pytest.mark.memmode_concurrency(expect="ok")
        def test_conc(jetmem):
            raise AssertionError("must not run without a GPU")
    """
    outcome, text = run(source=source)["test_conc[managed]"]
    assert outcome == "skipped" and "without a GPU" not in text


@pytest.mark.skipif(not HEADERS.dirs, reason="no CUDA headers installed")
def test_user_kernels_with_cuda_headers_compile_in_a_memmode_test(pytester: pytest.Pytester) -> None:
    """In a session of its own (NVRTC's memory for CCCL's headers, several architectures, is that process's)."""
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(TESTS_DIR)!r})\n"
        "from fakes.fake_driver import FakeDriver\nfrom pytest_jetmem.cuda import driver\n"
        "driver.install(FakeDriver('no_device'))\n"
    )
    pytester.makepyfile(
        test_user="""
        import pytest
        from user_kernels import USER_KERNELS

        @pytest.mark.memmode("device")
        @pytest.mark.parametrize("k", USER_KERNELS, ids=lambda k: k.id)
        def test_user(jetmem, k):
            jetmem.compile(k.source, k.name, options=k.options)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=5)
    skips = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skips) == 5 and all("compiled 1 kernel" in line for line in skips), skips


def test_runtime_marked_tests_skip_at_their_first_timing(run) -> None:
    source = """
        import numpy as np
        import pytest
        from pytest_jetmem import kernels

        @pytest.mark.memmode("device", "managed")
        @pytest.mark.memmode_runtime(max_ms=5.0)
        def test_timed(jetmem):
            x = jetmem.zeros(1 << 12)
            jetmem.measure(lambda: kernels.stream(jetmem, "fill", x, value=1.0))
    """
    out = run(source=source)
    for mode in ("device", "managed"):
        outcome, text = out[f"test_timed[{mode}]"]
        assert outcome == "skipped", text
        assert "compiled 1 kernel (stream_fill)" in text and "checked 1 launch; timing GPU work needs a GPU" in text
