"""The numpy references of the bundled kernels, each checked against cases worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_jetmem.kernels import reference as ref

IMAGE = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=np.float32)
K123 = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=np.float32)


# --- conv2d_replicate ---------------------------------------------------------------------------------------
# out[y, x] = sum_{j,i} k[j, i] * in[clamp(y + 1 - j), clamp(x + 1 - i)]  (3x3 kernel: ry = rx = 1)


def test_conv2d_centre_by_hand() -> None:
    # at (1, 1) nothing is clamped: in[2 - j, 2 - i] = 9 - 3j - i, k[j, i] = 3j + i + 1
    # sum_{t=0..8} (t + 1)(9 - t) = 9 + 16 + 21 + 24 + 25 + 24 + 21 + 16 + 9 = 165
    assert ref.conv2d_replicate(IMAGE, K123)[1, 1] == 165.0


def test_conv2d_top_left_corner_by_hand() -> None:
    # at (0, 0): rows clamp(1 - j) = 1, 0, 0 and columns clamp(1 - i) = 1, 0, 0
    # j=0 (row 1): 1*5 + 2*4 + 3*4 = 25
    # j=1 (row 0): 4*2 + 5*1 + 6*1 = 19
    # j=2 (row 0): 7*2 + 8*1 + 9*1 = 31             -> 75
    assert ref.conv2d_replicate(IMAGE, K123)[0, 0] == 75.0


def test_conv2d_bottom_right_corner_by_hand() -> None:
    # at (2, 2): rows clamp(3 - j) = 2, 2, 1 and columns clamp(3 - i) = 2, 2, 1
    # j=0 (row 2): 1*9 + 2*9 + 3*8 = 51
    # j=1 (row 2): 4*9 + 5*9 + 6*8 = 129
    # j=2 (row 1): 7*6 + 8*6 + 9*5 = 135             -> 315
    assert ref.conv2d_replicate(IMAGE, K123)[2, 2] == 315.0


def test_conv2d_box_kernel_by_hand() -> None:
    out = ref.conv2d_replicate(IMAGE, np.ones((3, 3), np.float32))
    # corner: the replicated 3x3 neighbourhood holds 1 four times, 2 and 4 twice each, 5 once
    assert out[0, 0] == 4 * 1 + 2 * 2 + 2 * 4 + 5 == 21
    assert out[1, 1] == 45  # no border: the sum of 1..9
    # top edge (0, 1): rows 0, 0, 1 -> 2 * (1 + 2 + 3) + (4 + 5 + 6)
    assert out[0, 1] == 27
    assert out.dtype == np.float32 and out.shape == (3, 3)


def test_conv2d_flips_the_kernel_like_scipy_convolve() -> None:
    # only k[0, 0] set: convolution reads in[y + 1, x + 1] (clamped); a correlation would read in[y - 1, x - 1]
    k = np.zeros((3, 3), np.float32)
    k[0, 0] = 1
    out = ref.conv2d_replicate(IMAGE, k)
    np.testing.assert_array_equal(out, [[5, 6, 6], [8, 9, 9], [8, 9, 9]])
    assert not np.array_equal(out, [[1, 1, 2], [1, 1, 2], [4, 4, 5]])  # what a correlation gives


def test_conv2d_rectangular_kernels_and_image() -> None:
    img = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    # 1x3 with the first tap set: out[y, x] = in[y, clamp(x + 1)]
    np.testing.assert_array_equal(
        ref.conv2d_replicate(img, np.array([[1, 0, 0]], np.float32)), [[2, 3, 4, 4], [6, 7, 8, 8]]
    )
    # 3x1 with the first tap set: out[y, x] = in[clamp(y + 1), x]
    np.testing.assert_array_equal(
        ref.conv2d_replicate(img, np.array([[1], [0], [0]], np.float32)), [[5, 6, 7, 8], [5, 6, 7, 8]]
    )
    # 1x3 with the last tap set: out[y, x] = in[y, clamp(x - 1)]
    np.testing.assert_array_equal(
        ref.conv2d_replicate(img, np.array([[0, 0, 1]], np.float32)), [[1, 1, 2, 3], [5, 5, 6, 7]]
    )


def test_conv2d_one_by_one_kernel() -> None:
    rng = np.random.default_rng(3)
    img = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_array_equal(ref.conv2d_replicate(img, np.ones((1, 1), np.float32)), img)
    np.testing.assert_array_equal(ref.conv2d_replicate(img, np.full((1, 1), 2, np.float32)), 2 * img)


def test_conv2d_accepts_integer_input() -> None:
    out = ref.conv2d_replicate(IMAGE.astype(int).tolist(), K123.astype(int))
    assert out.dtype == np.float32
    assert out[1, 1] == 165.0


@pytest.mark.parametrize("shape", [(2, 2), (2, 3), (3, 2), (4, 4), (1, 2)])
def test_conv2d_even_kernel_is_rejected(shape: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="odd"):
        ref.conv2d_replicate(IMAGE, np.ones(shape, np.float32))


# --- matmul -------------------------------------------------------------------------------------------------


def test_matmul_two_by_two() -> None:
    # [[1*5 + 2*7, 1*6 + 2*8], [3*5 + 4*7, 3*6 + 4*8]]
    c = ref.matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]])
    np.testing.assert_array_equal(c, [[19, 22], [43, 50]])
    assert c.dtype == np.float32


def test_matmul_rectangular() -> None:
    np.testing.assert_array_equal(ref.matmul([[1, 2, 3]], [[4], [5], [6]]), [[32]])  # 4 + 10 + 18
    assert ref.matmul(np.ones((2, 3)), np.ones((3, 4))).shape == (2, 4)


def test_matmul_accumulates_in_float64() -> None:
    # float32 would lose the 1 (1e8 + 1 rounds to 1e8); float64 keeps it
    a = np.array([[1e8, 1, -1e8]], np.float32)
    assert ref.matmul(a, np.ones((3, 1), np.float32))[0, 0] == 1.0


# --- stream kernels -----------------------------------------------------------------------------------------


def test_stream_read() -> None:
    s = ref.stream_read(np.array([1, 2, 3, 4.5], np.float32))
    assert s == 10.5 and isinstance(s, np.float32)
    assert ref.stream_read(np.array([1e8, 1, -1e8], np.float32)) == 1.0  # summed in float64
    assert ref.stream_read(np.zeros(0, np.float32)) == 0.0


def test_stream_write() -> None:
    out = ref.stream_write(5, 0.5)
    np.testing.assert_array_equal(out, [0, 0.5, 1, 1.5, 2])
    assert out.dtype == np.float32
    # float(i) * scale in float32, as the kernel computes it
    assert ref.stream_write(4, 0.1)[3] == np.float32(3) * np.float32(0.1)
    assert ref.stream_write(0, 3.0).shape == (0,)


def test_stream_fill() -> None:
    out = ref.stream_fill(3, 2.5)
    np.testing.assert_array_equal(out, [2.5, 2.5, 2.5])
    assert out.dtype == np.float32
    assert ref.stream_fill(0, 1.0).shape == (0,)


def test_stream_copy_is_a_float32_copy() -> None:
    src = np.array([1, 2, 3], np.float32)
    out = ref.stream_copy(src)
    np.testing.assert_array_equal(out, [1, 2, 3])
    out[0] = 99
    assert src[0] == 1  # not a view
    assert ref.stream_copy([4, 5]).dtype == np.float32


# --- coherence pattern --------------------------------------------------------------------------------------

M32 = 0xFFFFFFFF


def pattern_by_hand(i: int, seed: int) -> tuple[int, ...]:
    """The CUDA hash in plain Python ints, every intermediate value masked to 32 bits."""
    lo, hi = i & M32, i >> 32
    x0 = ((lo * 2654435761) & M32) ^ ((hi * 0x85EBCA6B) & M32) ^ (seed & M32)
    x1 = x0 ^ (x0 >> 16)
    x2 = (x1 * 0x7FEB352D) & M32
    x3 = x2 ^ (x2 >> 15)
    x4 = (x3 * 0x846CA68B) & M32
    x5 = x4 ^ (x4 >> 16)
    return x0, x1, x2, x3, x4, x5


@pytest.mark.parametrize(
    ("i", "steps"),
    [
        # i = 0: only the seed is left; 7 * 0x7FEB352D = 0x37F6E743B -> low 32 bits 0x7F6E743B
        (0, (0x7, 0x7, 0x7F6E743B, 0x7F6E8AE7, 0x948B356D, 0x948BA1E6)),
        # i = 1: 2654435761 = 0x9E3779B1, ^ 7 = 0x9E3779B6
        (1, (0x9E3779B6, 0x9E37E781, 0xE52C66AD, 0xE52DACF5, 0x594FC707, 0x594F9E48)),
        # i = 2**32 + 5: lo = 5, hi = 1 -> (5 * 2654435761 mod 2**32) ^ 0x85EBCA6B ^ 7
        (2**32 + 5, (0x92FEAA19, 0x92FE38E7, 0x4D84D39B, 0x4D844892, 0xC37A1346, 0xC37AD03C)),
    ],
)
def test_coherence_pattern_by_hand(i: int, steps: tuple[int, ...]) -> None:
    assert pattern_by_hand(i, 7) == steps
    got = ref.coherence_pattern(1, 7, start=i)
    assert got.dtype == np.uint32 and got.shape == (1,)
    assert int(got[0]) == steps[-1]


def test_coherence_pattern_first_values_and_start() -> None:
    p = ref.coherence_pattern(3, 7)
    assert [int(v) for v in p] == [0x948BA1E6, 0x594F9E48, pattern_by_hand(2, 7)[-1]]
    np.testing.assert_array_equal(ref.coherence_pattern(4, 7, start=2**32 + 3), ref.coherence_pattern(7, 7, 2**32)[3:])
    assert int(ref.coherence_pattern(4, 7, start=2**32 + 3)[2]) == 0xC37AD03C
    # the high word matters: index 2**32 + 5 differs from index 5
    assert int(ref.coherence_pattern(1, 7, start=5)[0]) != 0xC37AD03C


def test_coherence_pattern_seed() -> None:
    np.testing.assert_array_equal(ref.coherence_pattern(8, 7 + 2**32), ref.coherence_pattern(8, 7))  # masked
    assert not np.array_equal(ref.coherence_pattern(8, 7), ref.coherence_pattern(8, 8))


def test_coherence_check_clean() -> None:
    assert ref.coherence_check(ref.coherence_pattern(100, 7), 7) == (0, None)


def test_coherence_check_counts_planted_mismatches() -> None:
    buf = ref.coherence_pattern(100, 7)
    for i in (57, 3, 10):
        buf[i] ^= np.uint32(1)
    assert ref.coherence_check(buf, 7) == (3, 3)
    buf[99] = 0 if buf[99] else 1
    assert ref.coherence_check(buf, 7) == (4, 3)


def test_coherence_check_two_dimensional_buffer() -> None:
    buf = ref.coherence_pattern(100, 9).reshape(10, 10)
    buf[2, 5] += np.uint32(1)
    assert ref.coherence_check(buf, 9) == (1, 25)


def test_coherence_check_wrong_seed() -> None:
    buf = ref.coherence_pattern(64, 7)
    expected_bad = sum(pattern_by_hand(i, 7)[-1] != pattern_by_hand(i, 8)[-1] for i in range(64))
    assert expected_bad > 60
    count, first = ref.coherence_check(buf, 8)
    assert count == expected_bad
    assert first == 0


@pytest.mark.parametrize("shape", [(11, 11), (13, 9), (45, 45)])
def test_large_kernels_by_fft_give_the_direct_sums(shape: tuple[int, int]) -> None:
    """Above DIRECT_TAPS the sums are taken by FFT: the same float32 result as the sums taken pixel by pixel."""
    rng = np.random.default_rng(7)
    img = rng.random((40, 52), dtype=np.float32)
    k = (rng.standard_normal(shape) / shape[0]).astype(np.float32)
    kh, kw = shape
    padded = np.pad(img.astype(np.float64), ((kh // 2, kh // 2), (kw // 2, kw // 2)), mode="edge")
    flipped = k[::-1, ::-1].astype(np.float64)
    want = np.array(
        [[np.sum(padded[y : y + kh, x : x + kw] * flipped) for x in range(img.shape[1])] for y in range(img.shape[0])]
    ).astype(np.float32)
    np.testing.assert_allclose(ref.conv2d_replicate(img, k), want, rtol=1e-6, atol=1e-6)
