"""The demo suite (``pytest-jetmem-demo``) without a GPU: its tables, and the whole suite on the fake driver.

The fake driver runs NVRTC for real (so the demo's own grayscale kernel is compiled here exactly as on a
GPU) and emulates the demo's kernels on the host with numpy (registered below as the fake's emulators), so
every demo test runs: allocation in each mode, the plugin's ``jetmem.measure``, the checks against the
numpy references, and the tables at the end. Kernel times come from the fake's virtual clock, charged per
kernel and per kind of memory, so the tables' ratios and winners are exact.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, Launch
from fakes.records import record
from pytest_jetmem import demo
from pytest_jetmem.demo.tables import Scenarios, format_tables, split_label, winners
from pytest_jetmem.measure.record import MeasurementRecord

InstallFake = Callable[..., FakeDriver]


# -- the tables ----------------------------------------------------------------------------------------
def row(label: str, mode: str, median: float, scope: str = "kernel", first: float | None = None) -> MeasurementRecord:
    """A record as the runtime plugin publishes it (the fields the tables read)."""
    first_call_ms = median * 2 if first is None else first
    return record(f"test_x.py::test_x[{mode}]", mode, label, median, scope=scope, first_call_ms=first_call_ms)


def test_split_label_and_winners() -> None:
    assert split_label("conv2d/45x45") == ("conv2d", "45x45")
    assert split_label("matmul") == ("matmul", "")
    assert winners({"device": 1.0, "managed": 1.04, "zero_copy": 5.0}) == ["device", "managed"]
    assert winners({"zero_copy": 0.9, "device": 1.0}) == ["zero_copy"]
    assert winners({"device": float("nan")}) == []


def test_table_per_scenario_and_scope_with_ratio_first_call_and_winner() -> None:
    rows = []
    for size, dev in (("15x15", 0.087), ("3x3", 0.024), ("45x45", 0.310)):  # out of order: sorted naturally
        rows += [row(f"conv2d/{size}", "device", dev), row(f"conv2d/{size}", "managed", dev * 1.02)]
        rows.append(row(f"conv2d/{size}", "zero_copy", dev * 5.5))
    rows += [row("camera/1920x1080", m, v, "end_to_end") for m, v in (("device", 2.0), ("zero_copy", 1.0))]
    scenarios = Scenarios()
    scenarios.describe("conv2d", "Convolution (seed 001)")
    lines = format_tables(rows, scenarios, device="NVIDIA H100 80GB HBM3")
    text = "\n".join(lines)
    assert lines[0] == "device: NVIDIA H100 80GB HBM3"
    assert "Convolution (seed 001): kernel time (CUDA events: device time of the kernel alone)" in lines
    assert "camera: end to end (wall time: the host writes the input, the kernel runs, the host reads the output)" in (
        lines
    )
    assert [ln.split()[0] for ln in lines if re.match(r"  \d+x\d+ ", ln)] == ["3x3", "15x15", "45x45"]
    assert ["zero_copy", "1.705", "5.50x", "3.410"] in [ln.split() for ln in lines]
    assert "  45x45  device          0.310      1.00x          0.620  <- wins" in lines
    assert "  wins: device, managed at 3x3, 15x15, 45x45" in lines
    assert "  zero_copy       1.000      0.50x          2.000  <- wins" in lines  # one case: no case column
    assert "  wins: zero_copy (2.00x faster than the next mode)" in lines
    assert "<- wins" not in text.split("camera:")[1].split("device ")[1].split("\n")[0]


def test_series_table_has_a_column_per_iteration() -> None:
    scenarios = Scenarios()
    scenarios.describe("unified", "Unified", series=True, touched=2)
    rows = []
    for i, (dev, man) in enumerate(((0.31, 0.98), (0.32, 0.70), (0.31, 0.31), (0.31, 0.32)), start=1):
        rows += [row(f"unified/{i}", "device", 0.3, first=dev), row(f"unified/{i}", "managed", 0.3, first=man)]
    lines = format_tables(rows, scenarios)
    assert lines[1] == "Unified: kernel time (CUDA events: device time of the kernel alone) of each iteration"
    header = lines[2].split()
    assert header[:6] == ["mode", "1", "2", "|", "3", "4"]
    assert lines[3].split()[:6] == ["device", "0.310", "0.320", "|", "0.310", "0.310"]
    assert lines[4].split() == ["managed", "0.980", "0.700", "|", "0.310", "0.320", "0.840", "2.67x", "0.315", "1.02x"]
    assert "  wins after a CPU write: device (2.67x faster than the next mode)" in lines
    assert "  wins, GPU only: device, managed (within 5% of each other)" in lines
    assert "  managed: a CPU write before the launch costs 2.67x" in lines


def test_one_mode_only() -> None:
    lines = format_tables([row("matmul/2048", "zero_copy", 35.5)])
    assert lines[-1] == "  wins: only zero_copy ran"
    assert "<- wins" not in "\n".join(lines)


# -- the suite on the fake driver ------------------------------------------------------------------------
class Emulators:
    """numpy stand-ins for the demo's kernels, memoised on the input bytes (the demo repeats each launch)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[str, bytes], np.ndarray] = {}

    def _memo(self, name: str, inputs: tuple[np.ndarray, ...], compute: Callable[[], np.ndarray]) -> np.ndarray:
        h = hashlib.blake2b(digest_size=16)
        for a in inputs:
            h.update(str(a.shape).encode())
            h.update(a.tobytes())
        key = (name, h.digest())
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def conv2d(self, fake: FakeDriver, launch: Launch) -> None:
        w, h, kw, kh = (launch.value(i, np.int32) for i in range(3, 7))
        image = fake.view(launch.ptr(0), np.float32, w * h).reshape(h, w)
        k = fake.view(launch.ptr(2), np.float32, kw * kh).reshape(kh, kw)
        out = fake.view(launch.ptr(1), np.float32, w * h).reshape(h, w)
        out[...] = self._memo("conv2d", (image, k), lambda: fft_conv2d_replicate(image, k))

    def matmul(self, fake: FakeDriver, launch: Launch) -> None:
        m, n, k = (launch.value(i, np.int32) for i in range(3, 6))
        a = fake.view(launch.ptr(0), np.float32, m * k).reshape(m, k)
        b = fake.view(launch.ptr(1), np.float32, k * n).reshape(k, n)
        c = fake.view(launch.ptr(2), np.float32, m * n).reshape(m, n)
        c[...] = self._memo("matmul", (a, b), lambda: (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))

    def gray(self, fake: FakeDriver, launch: Launch) -> None:
        n = launch.value(2, np.int32)
        rgba = fake.view(launch.ptr(0), np.uint8, 4 * n).reshape(n, 4)
        out = fake.view(launch.ptr(1), np.uint8, n)
        from pytest_jetmem.demo.test_demo_camera import gray_reference

        out[...] = self._memo("gray", (rgba,), lambda: gray_reference(rgba))


def fft_conv2d_replicate(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """``reference.conv2d_replicate`` by FFT (the same sums in float64, fast for 45x45 kernels)."""
    kh, kw = kernel.shape
    ry, rx = kh // 2, kw // 2
    padded = np.pad(image.astype(np.float64), ((ry, ry), (rx, rx)), mode="edge")
    shape = (padded.shape[0] + kh - 1, padded.shape[1] + kw - 1)
    full = np.fft.irfft2(np.fft.rfft2(padded, shape) * np.fft.rfft2(kernel.astype(np.float64), shape), shape)
    h, w = image.shape
    return full[2 * ry : 2 * ry + h, 2 * rx : 2 * rx + w].astype(np.float32)


def test_fft_emulation_matches_the_reference() -> None:
    from pytest_jetmem.kernels.reference import conv2d_replicate

    rng = np.random.default_rng(0)
    img = rng.random((23, 31), dtype=np.float32)
    k = rng.standard_normal((7, 5)).astype(np.float32)
    np.testing.assert_allclose(fft_conv2d_replicate(img, k), conv2d_replicate(img, k), rtol=1e-5, atol=1e-5)


# Kernel cost on the fake's clock, by kernel (ms on device memory) and by kind of memory touched.
KERNEL_MS = {"conv2d_replicate": 0.3, "matmul_tiled": 1.9, "rgba_to_gray": 0.05}
KIND_FACTOR = {"device": 1.0, "managed": 1.0, "host": 5.0}


def demo_fake(install: InstallFake) -> FakeDriver:
    fake = install("orin")
    emu = Emulators()
    fake.emulators.update(conv2d_replicate=emu.conv2d, matmul_tiled=emu.matmul, rgba_to_gray=emu.gray)

    def cost(launch: Launch) -> float:
        base = KERNEL_MS.get(launch.kernel, 0.01)
        if launch.kernel == "conv2d_replicate":
            base *= launch.value(5, np.int32) * launch.value(6, np.int32) / 45**2
        return base * max((KIND_FACTOR[k] for k in fake.launch_kinds(launch)), default=1.0)

    fake.kernel_ms = cost
    return fake


def test_the_demo_suite_runs_on_the_fake_driver_and_prints_its_tables(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = demo_fake(install_fake_driver)
    result = pytester.runpytest(*demo.pytest_args(["--jetmem-max-time=0.05", "-p", "no:randomly"]))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    result.assert_outcomes(passed=8 * 3 + 3 + 3 + 3)
    # The grayscale kernel was compiled by NVRTC (for real) and launched in every mode.
    assert sum(1 for launch in fake.launches if launch.kernel == "rgba_to_gray") > 3 * 20
    lines = out.splitlines()
    section = lines.index(next(ln for ln in lines if "pytest-jetmem demo: what each memory mode costs here" in ln))
    tables = lines[section:]
    assert tables[1] == "device: Orin"
    titles = [ln for ln in tables if ln and not ln.startswith((" ", "=", "device:")) and " passed in " not in ln]
    assert titles == [
        "2D convolution 640x480 float32, replicate border, by kernel size (seed 001): kernel time (CUDA events: "
        "device time of the kernel alone)",
        "2D convolution 640x480 float32, replicate border, by kernel size (seed 001): end to end (wall time: the "
        "host writes the input, the kernel runs, the host reads the output)",
        "Unified-memory experiment (seed 001): 45x45 convolution on 640x480, the CPU writes the input before "
        "iterations 1-5 of 10: kernel time (CUDA events: device time of the kernel alone) of each iteration",
        "Tiled matrix product 2048x2048 @ 2048x2048 float32, 32x32 shared-memory tiles (seed 000): kernel time "
        "(CUDA events: device time of the kernel alone)",
        "Camera frame 1920x1080 RGBA8 written by the CPU, read once by a grayscale kernel (seed 003): end to end "
        "(wall time: the host writes the input, the kernel runs, the host reads the output)",
        "Camera frame 1920x1080 RGBA8 written by the CPU, read once by a grayscale kernel (seed 003): kernel time "
        "(CUDA events: device time of the kernel alone)",
    ]
    # The fake's clock: conv and matmul cost 5x on zero-copy (host) memory, exactly.
    assert any(re.fullmatch(r"  45x45 +device +0\.300 +1\.00x +0\.300  <- wins", ln) for ln in tables)
    assert any(re.fullmatch(r" +zero_copy +1\.500 +5\.00x +1\.500", ln) for ln in tables)
    assert any(re.fullmatch(r"  zero_copy +9\.500 +5\.00x +9\.500", ln) for ln in tables)
    assert "  wins: device, managed (within 5% of each other)" in tables  # matmul
    unified = tables[tables.index(titles[2]) + 1 :]
    assert unified[0].split()[:12] == ["mode", "1", "2", "3", "4", "5", "|", "6", "7", "8", "9", "10"]
    assert unified[3].split()[:2] == ["zero_copy", "1.500"]
    # The plugin's own table has every measurement: 24 conv items x 2, 3 x 10 iterations, 3 matmul, 3 x 2 camera.
    runtimes = lines.index(next(ln for ln in lines if "jetmem runtimes" in ln))
    assert section > runtimes
    assert len([ln for ln in lines[runtimes + 3 : section] if ln.startswith("test_")]) == 48 + 30 + 3 + 6


def test_without_a_gpu_the_demo_says_so_in_one_line(
    install_fake_driver: InstallFake, capsys: pytest.CaptureFixture[str]
) -> None:
    install_fake_driver("no_driver")
    assert demo.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    assert out.startswith("pytest-jetmem demo: no GPU here (no CUDA driver")
    assert out.endswith("the 33 demo tests over device, managed, zero_copy are skipped\n")


def test_without_a_gpu_a_broken_selection_is_shown(
    install_fake_driver: InstallFake, capsys: pytest.CaptureFixture[str]
) -> None:
    install_fake_driver("no_driver")
    assert demo.main(["-k", "no_such_test"]) == pytest.ExitCode.NO_TESTS_COLLECTED
    out = capsys.readouterr().out
    assert "deselected" in out and out.count("\n") > 1
