"""CuPy, PyTorch and Numba CUDA working on jetmem buffers in place and on jetmem's stream (their external-stream
APIs), so ``jetmem.measure`` times their work and the runtime marker judges it. Each skips where its framework is
not installed. PyTorch runs in a fresh interpreter (importing torch inside a pytest run on the GPU image fails for
reasons of its own; see test_interop_gpu.py)."""

import importlib.util
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

N = 1 << 20


class _StreamHandle:
    """A raw stream handle behind the CUDA stream protocol (``__cuda_stream__``: version 0, the handle)."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def cupy_stream(cp, handle: int):
    """jetmem's stream as a CuPy stream: ``Stream.from_external`` where CuPy has it (14: ``ExternalStream`` is
    deprecated there), else ``ExternalStream``."""
    from_external = getattr(cp.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(_StreamHandle(handle))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cp.cuda.ExternalStream(handle)


SCALE_SRC = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


@pytest.mark.memmode
@pytest.mark.memmode_runtime(max_ms=50.0, label="cupy-raw")
def test_cupy_raw_elementwise_and_array_ops_on_jetmem_stream(jetmem, gpu_results):
    cp = pytest.importorskip("cupy")
    x = jetmem.array(np.arange(N, dtype=np.float32))
    y = jetmem.empty(N).fill_bytes(0xFF)
    z = jetmem.empty(N).fill_bytes(0xFF)
    w = jetmem.empty(N).fill_bytes(0xFF)
    cx, cy, cz, cw = (cp.asarray(b) for b in (x, y, z, w))
    assert cx.data.ptr == x.ptr and cy.data.ptr == y.ptr
    stream = cupy_stream(cp, jetmem.stream_handle)
    assert stream.ptr == jetmem.stream_handle
    raw = cp.RawKernel(SCALE_SRC, "scale")
    add_one = cp.ElementwiseKernel("float32 a", "float32 b", "b = a + 1.0f", "jetmem_add_one")

    def raw_fn():
        with stream:
            raw(((N + 255) // 256,), (256,), (cx, cy, np.float32(3.0), np.int32(N)))

    def elementwise_fn():
        with stream:
            add_one(cx, cz)

    def array_fn():
        with stream:
            cp.multiply(cx, 0.5, out=cw)

    m_raw = jetmem.measure(raw_fn, label="cupy-raw")
    m_elem = jetmem.measure(elementwise_fn, label="cupy-elementwise")
    m_arr = jetmem.measure(array_fn, label="cupy-array")
    ref = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(y.to_numpy(), 3.0 * ref)
    np.testing.assert_array_equal(z.to_numpy(), ref + 1.0)
    np.testing.assert_array_equal(w.to_numpy(), 0.5 * ref)
    for m in (m_raw, m_elem, m_arr):
        assert len(m.samples) >= 3 and all(s > 0 for s in m.samples)
    gpu_results[f"cupy_raw_ms_{jetmem.mode}"] = float(np.median(m_raw.samples))


@pytest.mark.memmode
@pytest.mark.filterwarnings("ignore:.*Grid size .* low occupancy")  # numba's advice on the 1-thread probe launch
def test_numba_cuda_jit_on_jetmem_stream(jetmem, gpu_results):
    numba_cuda = pytest.importorskip("numba.cuda")
    if not numba_cuda.is_available():
        pytest.skip("numba.cuda: no usable CUDA (its driver bindings could not load)")

    @numba_cuda.jit
    def scale(x, y, a):
        i = numba_cuda.grid(1)
        if i < x.size:
            y[i] = a * x[i]

    try:  # numba compiles at the first launch: one built for an older numpy fails there (np.row_stack, numpy 2.2)
        scale[1, 1](numba_cuda.device_array(1, np.float32), numba_cuda.device_array(1, np.float32), np.float32(1))
    except AttributeError as exc:
        version = getattr(sys.modules.get("numba"), "__version__", "?")
        pytest.skip(f"numba {version} does not work with numpy {np.__version__}: {exc}")

    x = jetmem.array(np.arange(N, dtype=np.float32))
    y = jetmem.empty(N).fill_bytes(0xFF)
    dx, dy = numba_cuda.as_cuda_array(x), numba_cuda.as_cuda_array(y)
    stream = numba_cuda.external_stream(jetmem.stream_handle)

    def fn():
        scale[(N + 255) // 256, 256, stream](dx, dy, np.float32(2.0))

    m = jetmem.measure(fn, label="numba-scale")
    np.testing.assert_array_equal(y.to_numpy(), 2.0 * np.arange(N, dtype=np.float32))
    assert all(s > 0 for s in m.samples)
    gpu_results[f"numba_scale_ms_{jetmem.mode}"] = float(np.median(m.samples))


TORCH_SCRIPT = """
import json, sys
import numpy as np, torch
import pytest_jetmem

n = 1 << 20
with pytest_jetmem.open_handle(sys.argv[1]) as jm:
    x = jm.array(np.arange(n, dtype=np.float32))
    y = jm.empty(n).fill_bytes(0xFF)
    tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
    assert tx.data_ptr() == x.ptr and ty.data_ptr() == y.ptr
    stream = torch.cuda.ExternalStream(jm.stream_handle)
    assert stream.cuda_stream == jm.stream_handle

    def fn():
        with torch.cuda.stream(stream):
            torch.mul(tx, 2.0, out=ty)

    m = jm.measure(fn, label="torch-mul")
    np.testing.assert_array_equal(y.to_numpy(), 2.0 * np.arange(n, dtype=np.float32))
    print("RESULT " + json.dumps({"samples": len(m.samples), "median_ms": float(np.median(m.samples))}))
"""


@pytest.mark.memmode
def test_torch_on_jetmem_stream_timed_by_measure(memmode, tmp_path, gpu_results):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    script = tmp_path / "torch_measure.py"
    script.write_text(TORCH_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), memmode], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["samples"] >= 3 and result["median_ms"] > 0
    gpu_results[f"torch_mul_ms_{memmode}"] = result["median_ms"]
