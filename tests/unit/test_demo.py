"""The demo suite (``pytest-jetmem-demo``) without a GPU: its tables, and the whole suite on the fake driver.

The fake driver runs NVRTC for real (so the demo's own grayscale kernel is compiled here exactly as on a
GPU) and emulates the demo's kernels on the host with numpy (registered below as the fake's emulators), so
every demo test runs: allocation in each mode, the plugin's ``jetmem.measure``, the checks against the
numpy references, and the tables at the end. Kernel times come from the fake's virtual clock, charged per
kernel and per kind of memory, so the tables' ratios and winners are exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, Launch
from fakes.records import record
from pytest_jetmem import demo
from pytest_jetmem.demo.tables import Scenarios, format_tables, reference_mode, split_label, wins
from pytest_jetmem.measure.advice import DeviceFacts, advise
from pytest_jetmem.measure.record import MeasurementRecord

InstallFake = Callable[..., FakeDriver]


# -- the tables ----------------------------------------------------------------------------------------
ORIN = DeviceFacts("Orin", integrated=True, concurrent_managed_access=False, pageable_memory_access=False)
H100 = DeviceFacts(
    "NVIDIA H100 80GB HBM3", integrated=False, concurrent_managed_access=True, pageable_memory_access=False
)


def row(label: str, mode: str, median: float, scope: str = "kernel", first: float | None = None) -> MeasurementRecord:
    """A record as the runtime plugin publishes it (the fields the tables read): 10 samples at ``median``."""
    first_call_ms = median * 2 if first is None else first
    return record(f"test_x.py::test_x[{mode}]", mode, label, median, scope=scope, first_call_ms=first_call_ms)


def test_split_label_reference_mode_and_wins_words() -> None:
    assert split_label("conv2d/45x45") == ("conv2d", "45x45")
    assert split_label("matmul") == ("matmul", "")
    assert reference_mode() == "device"  # the first registered mode without a host view
    tied = advise([row("m", "device", 1.0), row("m", "managed", 1.04), row("m", "zero_copy", 5.0)], ORIN).advice[0]
    assert wins(tied) == "no clear winner (device, managed tied)"
    clear = advise([row("m", "zero_copy", 0.9), row("m", "device", 1.0)], ORIN).advice[0]
    assert wins(clear) == "zero_copy"
    few = advise([record("test_x.py::test_x[device]", "device", "m", 1.0, n=3), row("m", "managed", 2.0)], ORIN).advice[
        0
    ]
    assert wins(few) == "no clear winner (too few samples)"
    assert wins(None) == "no advice"


def test_table_per_scenario_and_scope_with_ratio_first_call_winner_and_advice() -> None:
    rows = []
    for size, dev in (("15x15", 0.087), ("3x3", 0.024), ("45x45", 0.310)):  # out of order: sorted naturally
        rows += [row(f"conv2d/{size}", "device", dev), row(f"conv2d/{size}", "managed", dev * 1.02)]
        rows.append(row(f"conv2d/{size}", "zero_copy", dev * 5.5))
    rows += [row("camera/1920x1080", m, v, "end_to_end") for m, v in (("device", 2.0), ("zero_copy", 1.0))]
    scenarios = Scenarios()
    scenarios.describe("conv2d", "Convolution (seed 001)")
    lines = format_tables(rows, scenarios, ORIN)
    text = "\n".join(lines)
    assert lines[0] == "device: Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)"
    assert "Convolution (seed 001): kernel time (CUDA events: device time of the kernel alone)" in lines
    assert "camera: end to end (wall time: the host writes the input, the kernel runs, the host reads the output)" in (
        lines
    )
    assert [ln.split()[0] for ln in lines if re.match(r"  \d+x\d+ ", ln)] == ["3x3", "15x15", "45x45"]
    assert ["zero_copy", "1.705", "5.50x", "3.410"] in [ln.split() for ln in lines]
    # managed is 2% slower than device: within the 5% margin, a tie, so no mode wins the convolution
    assert "  45x45  device          0.310      1.00x          0.620  <- tied" in lines
    assert "  wins: no clear winner (device, managed tied) at 3x3, 15x15, 45x45" in lines
    assert "  advice for 45x45, the largest case:" in lines
    assert "    clearly slower: zero_copy 5.50x device (99% CI 5.50x..5.50x)" in lines
    # the camera: zero_copy half device's time, clear of the margin: it wins, and its advice says by how much
    assert "  zero_copy       1.000      0.50x          2.000  <- wins" in lines  # one case: no case column
    assert (
        "    pick zero_copy: the next mode, device, takes 2.00x as long (99% CI 2.00x..2.00x; more than the 5% margin)"
        in lines
    )
    assert "<- wins" not in text.split("camera:")[1].split("device ")[1].split("\n")[0]


def test_tables_call_no_winner_where_the_interval_does_not_support_one() -> None:
    """Medians 10% apart with a wide spread: the table marks a tie, not the lower median."""
    rng = np.random.default_rng(7)
    rows = []
    for mode, med in (("device", 1.0), ("managed", 1.1)):
        r = row("matmul/2048", mode, med)
        samples = tuple(float(v) for v in med * (1 + 0.4 * rng.standard_normal(10)))
        rows.append(replace(r, statistics=replace(r.statistics, samples=samples, median=float(np.median(samples)))))
    lines = format_tables(rows, None, ORIN)
    assert "<- wins" not in "\n".join(lines)
    assert sum("<- tied" in ln for ln in lines) == 2
    assert any(ln.startswith("    no clear winner: device and managed are tied") for ln in lines)


def test_series_table_has_a_column_per_iteration_and_advice_per_phase() -> None:
    scenarios = Scenarios()
    scenarios.describe("unified", "Unified", series=True, touched=5)
    rows = []
    firsts = {"device": [0.31] * 10, "managed": [0.98, 0.70, 0.65, 0.68, 0.62, 0.31, 0.32, 0.31, 0.31, 0.32]}
    for mode, values in firsts.items():
        rows += [row(f"unified/{i}", mode, 0.3, first=v) for i, v in enumerate(values, start=1)]
    lines = format_tables(rows, scenarios, ORIN)
    start = lines.index("Unified: kernel time (CUDA events: device time of the kernel alone) of each iteration")
    header = lines[start + 1].split()
    assert header[:7] == ["mode", "1", "2", "3", "4", "5", "|"]
    assert lines[start + 2].split()[:7] == ["device", "0.310", "0.310", "0.310", "0.310", "0.310", "|"]
    assert lines[start + 3].split()[-4:] == ["0.680", "2.19x", "0.310", "1.00x"]
    assert "  wins after a CPU write (iterations 1-5): device" in lines
    assert "  wins GPU only (iterations 6-10): no clear winner (device, managed tied)" in lines
    touch = [ln for ln in lines if ln.startswith("      - managed: a CPU write before the launch")]
    assert touch == [
        "      - managed: a CPU write before the launch makes the kernel take 2.19x (99% CI 1.94x..3.16x) its time "
        "without one (0.680 against 0.310 ms)"
    ]


@pytest.mark.parametrize("touched", [0, 3, 5])
def test_series_table_where_one_phase_has_no_iterations(touched: int) -> None:
    """Every iteration after a CPU write (or none): the table has one phase's advice, and does not crash."""
    scenarios = Scenarios()
    scenarios.describe("unified", "Unified", series=True, touched=touched)
    rows = [row(f"unified/{i}", m, 0.3, first=v) for i in (1, 2, 3) for m, v in (("device", 0.31), ("managed", 0.6))]
    lines = format_tables(rows, scenarios, ORIN)
    assert lines.count("  wins after a CPU write (iterations 1-3): no clear winner (too few samples)") == (touched > 0)
    assert lines.count("  wins GPU only (iterations 1-3): no clear winner (too few samples)") == (touched == 0)
    start = lines.index("Unified: kernel time (CUDA events: device time of the kernel alone) of each iteration")
    phase = ["0.600", "1.94x", "-", "-"] if touched else ["-", "-", "0.600", "1.94x"]  # CPU wrote, then GPU only
    assert lines[start + 3].split()[-4:] == phase


def test_one_mode_only() -> None:
    lines = format_tables([row("matmul/2048", "zero_copy", 35.5)], None, H100)
    assert lines[-1] == "  only zero_copy ran"
    assert "<- wins" not in "\n".join(lines)
    assert (
        lines[0]
        == "device: NVIDIA H100 80GB HBM3 (discrete GPU; CONCURRENT_MANAGED_ACCESS=1, PAGEABLE_MEMORY_ACCESS=0)"
    )


# -- the suite on the fake driver ------------------------------------------------------------------------
class Emulators:
    """numpy stand-ins for the demo's kernels, memoised on the inputs (the demo repeats each launch): a launch whose
    inputs equal an earlier launch's, element for element, gets that launch's output. The inputs are compared, not
    hashed (hashing the 16 MB operands of each matmul launch took most of the demo run's time); a strided sample of
    their bytes picks the earlier launches worth comparing."""

    def __init__(self) -> None:
        self.cache: dict[tuple[object, ...], list[tuple[tuple[np.ndarray, ...], np.ndarray]]] = {}

    def _memo(self, name: str, inputs: tuple[np.ndarray, ...], compute: Callable[[], np.ndarray]) -> np.ndarray:
        key = (name, *((a.shape, a.dtype.str, a.reshape(-1)[:: max(1, a.size // 512)].tobytes()) for a in inputs))
        seen = self.cache.setdefault(key, [])
        for earlier, out in seen:
            if all(np.array_equal(a, b) for a, b in zip(inputs, earlier, strict=True)):
                return out
        out = compute()
        seen.append((tuple(a.copy() for a in inputs), out))
        return out

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
# Orin: pinned (host) and registered memory are not cached by the integrated GPU; pageable memory (system) is only
# reachable where PAGEABLE_MEMORY_ACCESS=1 (Thor), where the GPU caches it: as fast as device memory here.
KIND_FACTOR = {"device": 1.0, "managed": 1.0, "host": 5.0, "registered": 5.0, "pageable": 1.0}
#: The modes ``jetmem_modes = all`` runs on the fake Orin: every registered mode it supports (not system).
ORIN_MODES = ("device", "managed", "zero_copy", "registered")


def demo_fake(install: InstallFake, profile: str = "orin", factors: dict[str, float] | None = None) -> FakeDriver:
    """The fake ``profile`` with the demo's kernels emulated and charged per kind of memory (``factors``)."""
    kind_factor = factors or KIND_FACTOR
    fake = install(profile)
    emu = Emulators()
    fake.emulators.update(conv2d_replicate=emu.conv2d, matmul_tiled=emu.matmul, rgba_to_gray=emu.gray)

    def cost(launch: Launch) -> float:
        base = KERNEL_MS.get(launch.kernel, 0.01)
        if launch.kernel == "conv2d_replicate":
            base *= launch.value(5, np.int32) * launch.value(6, np.int32) / 45**2
        return base * max((kind_factor[k] for k in fake.launch_kinds(launch)), default=1.0)

    fake.kernel_ms = cost
    return fake


def test_the_demo_suite_runs_on_the_fake_driver_and_prints_its_tables(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = demo_fake(install_fake_driver)
    result = pytester.runpytest(*demo.pytest_args(["--jetmem-max-time=0.05", "-p", "no:randomly"]))
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out
    # jetmem_modes = all: every mode the fake Orin supports (system needs PAGEABLE_MEMORY_ACCESS=1: deselected)
    result.assert_outcomes(passed=(8 + 1 + 1 + 1) * len(ORIN_MODES), deselected=8 + 1 + 1 + 1)
    # The grayscale kernel was compiled by NVRTC (for real) and launched in every mode.
    assert sum(1 for launch in fake.launches if launch.kernel == "rgba_to_gray") > len(ORIN_MODES) * 20
    lines = out.splitlines()
    section = lines.index(next(ln for ln in lines if "pytest-jetmem demo: what each memory mode costs here" in ln))
    tables = lines[section:]
    assert tables[1] == "device: Orin (integrated GPU; CONCURRENT_MANAGED_ACCESS=0, PAGEABLE_MEMORY_ACCESS=0)"
    assert not any("jetmem advice" in ln for ln in lines)  # the plugin's section is off: the tables carry the advice
    titles = [
        ln
        for ln in tables
        if ln and not ln.startswith((" ", "=", "device:", "ratios ", "NVIDIA's ", "the note:")) and " passed" not in ln
    ]
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
    # The fake's clock: conv and matmul cost 5x on zero-copy and registered memory, exactly; device and managed tie.
    assert any(re.fullmatch(r"  45x45 +device +0\.300 +1\.00x +0\.300  <- tied", ln) for ln in tables)
    assert any(re.fullmatch(r" +zero_copy +1\.500 +5\.00x +1\.500", ln) for ln in tables)
    assert any(re.fullmatch(r"  registered +9\.500 +5\.00x +9\.500", ln) for ln in tables)  # matmul
    assert "  wins: no clear winner (device, managed tied) at 3x3, 5x5, 7x7, 9x9, 15x15, 25x25, 35x35, 45x45" in tables
    # The advice of the 45x45 convolution: not zero-copy, nor registered memory, and the note agrees.
    conv = tables[tables.index("  advice for 45x45, the largest case:") :]
    # (device and managed cost the same on the fake's clock: either may be the fastest by a rounding error)
    ref = r"(device|managed)"
    assert conv[1].startswith("    no clear winner: device and managed are tied (")
    assert re.fullmatch(rf"    clearly slower: zero_copy 5\.00x {ref} \(.*\); registered 5\.00x {ref} \(.*\)", conv[2])
    assert re.fullmatch(
        rf"      - zero_copy's kernel takes 5\.00x {ref}'s time \(99% CI 5\.00x\.\.5\.00x\): the .*", conv[4]
    )
    assert any(ln.startswith('    the note ("Memory Selection", ') and ", this run agrees: " in ln for ln in conv[:9])
    unified = tables[tables.index(titles[2]) + 1 :]
    assert unified[0].split()[:12] == ["mode", "1", "2", "3", "4", "5", "|", "6", "7", "8", "9", "10"]
    assert unified[3].split()[:2] == ["zero_copy", "1.500"]
    assert "  wins after a CPU write (iterations 1-5): no clear winner (device, managed tied)" in unified
    # The camera frame, end to end: every mode's figures and the copies' share in device mode, said in words.
    camera = tables[tables.index(titles[4]) :]
    advice = camera[camera.index("  advice:") + 1 :]
    assert advice[0].startswith(("    pick ", "    no clear winner: "))
    assert any(
        re.match(r"      - device spends \d+% of its end-to-end [\d.]+ ms outside the kernel", ln) for ln in advice
    )
    # The plugin's own table has every measurement: 8 conv items x 2, 10 iterations, 1 matmul, 2 camera, per mode.
    runtimes = lines.index(next(ln for ln in lines if "jetmem runtimes" in ln))
    assert section > runtimes
    rows = [ln for ln in lines[runtimes + 3 : section] if ln.startswith("test_")]
    assert len(rows) == (16 + 10 + 1 + 2) * len(ORIN_MODES)


def test_the_demo_on_a_thor_says_whether_this_run_agrees_with_the_full_coherency_rule(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    """Thor (the fake): pinned memory uncached, managed memory mapped GPU-uncached (CONCURRENT_MANAGED_ACCESS=1),
    registered and pageable memory cached by sysmem full coherency: the note's rule holds in this run."""
    factors = {"device": 1.0, "managed": 5.0, "host": 5.0, "registered": 1.0, "pageable": 1.0}
    demo_fake(install_fake_driver, "thor", factors)
    result = pytester.runpytest(*demo.pytest_args(["--jetmem-max-time=0.05", "-p", "no:randomly", "-k", "matmul"]))
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=5)  # every registered mode: Thor supports them all
    lines = result.outlines
    assert "device: NVIDIA Thor (integrated GPU; CONCURRENT_MANAGED_ACCESS=1, PAGEABLE_MEMORY_ACCESS=1)" in lines
    assert (
        'NVIDIA\'s CUDA for Tegra note ("Memory Selection", "Sysmem Full Coherency"): with sysmem full coherency, '
        "host-registered memory and pageable host memory used directly by the GPU can outperform both pinned and "
        "unified memory" in lines
    )
    assert "    no clear winner: device, registered and system are tied" in "\n".join(lines)
    verdict = next(ln for ln in lines if ln.startswith('    the note ("Memory Selection", "Sysmem Full Coherency")'))
    assert ", this run agrees: " in verdict and "it outperforms it" in verdict


def test_without_a_gpu_the_demo_says_so_in_one_line(
    install_fake_driver: InstallFake, capsys: pytest.CaptureFixture[str]
) -> None:
    install_fake_driver("no_driver")
    assert demo.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    assert out.startswith("pytest-jetmem demo: no GPU here (no CUDA driver")
    assert out.endswith("the 55 demo tests over device, managed, zero_copy, registered, system are skipped\n")


def test_without_a_gpu_a_broken_selection_is_shown(
    install_fake_driver: InstallFake, capsys: pytest.CaptureFixture[str]
) -> None:
    install_fake_driver("no_driver")
    assert demo.main(["-k", "no_such_test"]) == pytest.ExitCode.NO_TESTS_COLLECTED
    out = capsys.readouterr().out
    assert "deselected" in out and out.count("\n") > 1
