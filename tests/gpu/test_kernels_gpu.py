"""Every bundled kernel, in every memory mode, equals its numpy reference (outputs poisoned first)."""

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.kernels import reference as ref

POISON = 0xFF  # every float byte 0xFF is a NaN: an output element the kernel skipped cannot pass


@pytest.mark.memmode
@pytest.mark.parametrize(
    "ksize", [(3, 3), (5, 5), (3, 7), (15, 15), (25, 25), (45, 45)], ids=lambda k: f"{k[0]}x{k[1]}"
)
def test_conv2d_matches_reference(jetmem, ksize):
    rng = np.random.default_rng()
    img = rng.random((480, 640), dtype=np.float32)
    k = rng.standard_normal(ksize).astype(np.float32)
    image, kern = jetmem.array(img), jetmem.array(k)
    out = jetmem.empty_like(image).fill_bytes(POISON)
    kernels.conv2d(jetmem, image, kern, out)
    got = out.to_numpy()
    want = ref.conv2d_replicate(img, k)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(k).sum()))


@pytest.mark.memmode
@pytest.mark.parametrize("shape", [(512, 512, 512), (257, 129, 300)], ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_reference(jetmem, shape):
    m, n, k = shape
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = jetmem.empty((m, n)).fill_bytes(POISON)
    kernels.matmul(jetmem, jetmem.array(a), jetmem.array(b), c)
    np.testing.assert_allclose(c.to_numpy(), ref.matmul(a, b), rtol=1e-4, atol=1e-3 * np.sqrt(k))


N = (1 << 20) + 3  # not a multiple of 4: the tail path runs too


@pytest.mark.memmode
def test_stream_read(jetmem):
    x = np.random.default_rng().random(N, dtype=np.float32)
    sink = jetmem.zeros(1)
    kernels.stream(jetmem, "read", jetmem.array(x), sink)
    np.testing.assert_allclose(sink.to_numpy()[0], ref.stream_read(x), rtol=1e-4)


@pytest.mark.memmode
def test_stream_write(jetmem):
    scale = np.float32(np.random.default_rng().random() + 0.5)
    out = jetmem.empty(N).fill_bytes(POISON)
    kernels.stream(jetmem, "write", out, value=float(scale))
    np.testing.assert_array_equal(out.to_numpy(), ref.stream_write(N, scale))


@pytest.mark.memmode
def test_stream_copy(jetmem):
    x = np.random.default_rng().random(N, dtype=np.float32)
    out = jetmem.empty(N).fill_bytes(POISON)
    kernels.stream(jetmem, "copy", jetmem.array(x), out)
    np.testing.assert_array_equal(out.to_numpy(), ref.stream_copy(x))


@pytest.mark.memmode
def test_stream_fill(jetmem):
    value = float(np.random.default_rng().standard_normal())
    out = jetmem.empty(N).fill_bytes(POISON)
    kernels.stream(jetmem, "fill", out, value=value)
    np.testing.assert_array_equal(out.to_numpy(), ref.stream_fill(N, value))


@pytest.mark.memmode
def test_coherence_kernel_checks_and_writes(jetmem):
    n = (1 << 18) + 5
    seed, new_seed = (int(s) for s in np.random.default_rng().integers(0, 2**32, 2))
    pattern = ref.coherence_pattern(n, seed)
    planted = pattern.copy()
    planted[[7, 1000, n - 1]] ^= 1
    buf = jetmem.array(planted)
    result = jetmem.array(np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64), mode="device")
    kernels.coherence(jetmem, buf, seed, new_seed, True, result)
    assert result.to_numpy().tolist() == [3, 7]
    np.testing.assert_array_equal(buf.to_numpy(), ref.coherence_pattern(n, new_seed))
    assert ref.coherence_check(buf.to_numpy(), new_seed) == (0, None)
