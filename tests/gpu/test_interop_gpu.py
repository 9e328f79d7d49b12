"""Buffers handed to CuPy and PyTorch are used in place: same address, writes seen on both sides."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.memmode
def test_cupy_uses_buffer_in_place(jetmem):
    cp = pytest.importorskip("cupy")
    buf = jetmem.array(np.arange(4096, dtype=np.float32))
    arr = cp.asarray(buf)
    assert arr.data.ptr == buf.ptr
    arr *= 2  # CuPy writes, we read
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(buf.to_numpy(), 2 * np.arange(4096))
    buf.copy_from(np.full(4096, 7, np.float32))  # we write, CuPy reads
    assert float(arr.sum()) == 7 * 4096


TORCH_SCRIPT = """
import sys, numpy as np, torch
import pytest_jetmem
with pytest_jetmem.open_handle(sys.argv[1]) as jm:
    buf = jm.array(np.arange(4096, dtype=np.float32))
    t = torch.as_tensor(buf, device="cuda")
    assert t.data_ptr() == buf.ptr, (hex(t.data_ptr()), hex(buf.ptr))
    t.add_(1)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buf.to_numpy(), np.arange(4096) + 1)
    buf.copy_from(np.full(4096, 3, np.float32))
    assert float(t.sum().item()) == 3 * 4096
print("torch-in-place-ok", sys.argv[1])
"""


@pytest.mark.memmode
def test_torch_uses_buffer_in_place(memmode, tmp_path):
    """In a fresh interpreter: importing torch inside a pytest run on the GPU image fails for reasons of its own."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    script = tmp_path / "torch_check.py"
    script.write_text(TORCH_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), memmode], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"torch-in-place-ok {memmode}" in proc.stdout
