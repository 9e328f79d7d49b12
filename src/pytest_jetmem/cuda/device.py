"""The session's CUDA device: probing, primary context, the work stream, and the broken state after sticky errors."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.driver import ClockState, DriverBackend, StreamHandle
from pytest_jetmem.errors import CudaError, CudaUnavailable, DeviceChoiceError


@dataclass(frozen=True)
class DeviceInfo:
    """Facts about one device, read once per session (GPU-free once read)."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    driver_version: int
    total_mem: int
    attributes: dict[str, int] = field(default_factory=dict)
    bindings_version: str = ""
    nvrtc_version: tuple[int, int] | None = None
    nvrtc_library: str = ""  # where NVRTC was loaded from (NvrtcLibrary.describe)

    @property
    def arch(self) -> str:
        """``sm_XY`` for NVRTC."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def integrated(self) -> bool:
        return bool(self.attributes.get("INTEGRATED", 0))

    def attr(self, name: str) -> int:
        return int(self.attributes.get(name, 0))

    @property
    def driver_version_str(self) -> str:
        return f"{self.driver_version // 1000}.{(self.driver_version % 1000) // 10}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def header_lines(self) -> list[str]:
        cc = ".".join(map(str, self.compute_capability))
        nvrtc = ".".join(map(str, self.nvrtc_version)) if self.nvrtc_version else "missing"
        mem = ", ".join(f"{k}={self.attributes.get(k, '?')}" for k in driver.MEMORY_ATTRIBUTES)
        lines = [
            f"jetmem: device {self.ordinal}: {self.name}, compute capability {cc}, "
            f"{self.total_mem / 2**30:.1f} GiB, CUDA driver {self.driver_version_str}, "
            f"cuda-bindings {self.bindings_version}, NVRTC {nvrtc}",
            f"jetmem: memory attributes: {mem}",
        ]
        if self.nvrtc_library:
            lines.append(f"jetmem: NVRTC library: {self.nvrtc_library}")
        return lines


def probe_device(drv: DriverBackend, ordinal: int) -> DeviceInfo:
    """Read a device's facts through the driver layer (cuInit must have succeeded)."""
    dev = drv.device_get(ordinal)
    attrs = {name: drv.device_attribute(dev, name) for name in (*driver.MEMORY_ATTRIBUTES, *driver.OTHER_ATTRIBUTES)}
    try:
        nvrtc = drv.nvrtc_version()
    except CudaUnavailable:
        nvrtc = None
    return DeviceInfo(
        nvrtc_library=nvrtc_library_line(drv),
        ordinal=ordinal,
        name=drv.device_name(dev),
        compute_capability=(attrs["COMPUTE_CAPABILITY_MAJOR"], attrs["COMPUTE_CAPABILITY_MINOR"]),
        driver_version=drv.driver_version(),
        total_mem=drv.device_total_mem(dev),
        attributes=attrs,
        bindings_version=drv.bindings_version,
        nvrtc_version=nvrtc,
    )


def nvrtc_library_line(drv: DriverBackend | None) -> str:
    """Where ``drv`` loaded NVRTC from, or why it could not ("" for no backend, or one that does not say)."""
    if drv is None:
        return ""
    try:
        library = drv.nvrtc_library()
    except CudaUnavailable as exc:
        return f"none ({exc.reason})"
    return library.describe() if library is not None else ""


def select_ordinal(device_count: int, env: dict[str, str] | None = None) -> int:
    """The device ordinal for this process: ``JETMEM_DEVICE``, else one GPU per xdist worker, else 0.

    xdist worker ``gwN`` takes GPU ``N % device_count``; workers that share a GPU never time at once
    (``timing.gpu_lock``). ``device_count`` and the ordinals are the driver's: the devices ``CUDA_VISIBLE_DEVICES``
    leaves visible, numbered from 0. The child sessions of a process (the relay, the ``--jetmem-against`` sides,
    ``memmode_concurrency``) inherit its environment, ``PYTEST_XDIST_WORKER`` included, so they choose its device.
    """
    env = dict(os.environ) if env is None else env
    chosen = chosen_ordinal(env)
    if chosen is not None:
        return chosen
    worker = env.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit() and device_count > 0:
        return int(worker[2:]) % device_count
    return 0


def _expected_ordinals(count: int, env: dict[str, str] | None = None) -> str:
    """What an ordinal may be, for the no-such-device reason: ``", expected 0 to 1"``, and where
    ``CUDA_VISIBLE_DEVICES`` is set, that ordinals number the devices it leaves visible."""
    env = dict(os.environ) if env is None else env
    text = "" if count < 1 else f", expected {'0' if count == 1 else f'0 to {count - 1}'}"
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        text += f" (CUDA_VISIBLE_DEVICES={visible!r}: ordinals number the visible devices, from 0)"
    return text


def chosen_ordinal(env: dict[str, str] | None = None) -> int | None:
    """``JETMEM_DEVICE`` as an ordinal (None: not set); DeviceChoiceError where it is no ordinal >= 0."""
    env = dict(os.environ) if env is None else env
    raw = env.get("JETMEM_DEVICE", "")
    if not raw.strip():
        return None
    try:
        ordinal = int(raw)
    except ValueError:
        ordinal = -1
    if ordinal < 0:
        raise DeviceChoiceError(f"JETMEM_DEVICE={raw!r}: expected a device ordinal >= 0")
    return ordinal


class Device:
    """The primary context of one device, made current, with the stream jetmem work runs on.

    The stream is a blocking stream (it synchronises with the legacy default stream), so work
    that CuPy or PyTorch launch on the default stream orders with ours.
    """

    def __init__(self, drv: DriverBackend, info: DeviceInfo) -> None:
        self.drv = drv
        self.info = info
        self._dev = drv.device_get(info.ordinal)
        self.ctx = drv.primary_ctx_retain(self._dev)
        drv.ctx_set_current(self.ctx)
        self.stream: StreamHandle = drv.stream_create(driver.STREAM_DEFAULT)
        self.generation = 0  # bumped if the context is ever re-created: older modules are gone
        self.broken: str | None = None
        self.closed = False

    def synchronize(self) -> None:
        self.drv.stream_synchronize(self.stream)

    def clock_state(self) -> ClockState | None:
        """The SM clock and slowdown reasons now, where the driver backend can tell (else None)."""
        return self.drv.clock_state(self._dev)

    def nvml_energy_mj(self) -> int | None:
        """The GPU's NVML energy counter (mJ since the driver loaded), or None where NVML cannot say
        (``drv.nvml_error("total_energy")`` says why)."""
        return self.drv.nvml_total_energy_mj(self._dev)

    def nvml_power_mw(self) -> int | None:
        """The GPU board's NVML power draw (mW), or None where NVML cannot say (``drv.nvml_error("power_usage")``)."""
        return self.drv.nvml_power_usage_mw(self._dev)

    def free_memory(self) -> int:
        return self.drv.mem_get_info()[0]

    def mark_broken(self, reason: str) -> None:
        """Record a sticky CUDA error: the context cannot be used again in this process.

        CUDA cannot recover from sticky errors (illegal address, launch failure, ...) in-process;
        even cuDevicePrimaryCtxReset leaves the process unusable. Later GPU work skips with ``reason``.
        """
        if self.broken is None:
            self.broken = reason

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.broken:
            return  # any driver call on a context with a sticky error may crash the process
        try:
            self.drv.stream_destroy(self.stream)
        finally:
            self.drv.primary_ctx_release(self._dev)


@dataclass
class Availability:
    """Whether GPU tests can run here; ``reason`` says which of driver, device, NVRTC is missing."""

    ok: bool
    reason: str = ""
    info: DeviceInfo | None = None
    device: Device | None = None
    error: BaseException | None = None
    #: True where ``JETMEM_DEVICE`` is the problem (no ordinal, no such device): a usage error, not a skip
    misconfigured: bool = False


def open_device(drv: DriverBackend | None = None, ordinal: int | None = None) -> Availability:
    """Initialise CUDA and open the device, or explain why not."""
    try:
        chosen = chosen_ordinal() if ordinal is None else None  # a bad JETMEM_DEVICE is reported before the driver
        drv = drv or driver.get()
        probed = _probe(drv, ordinal, chosen)
    except DeviceChoiceError as exc:
        return Availability(False, exc.reason, error=exc, misconfigured=True)
    except CudaUnavailable as exc:
        return Availability(False, exc.reason, error=exc)
    except CudaError as exc:
        return Availability(False, f"CUDA driver error while probing the device: {exc}", error=exc)
    return probed if isinstance(probed, Availability) else _open(drv, probed)


def _probe(drv: DriverBackend, ordinal: int | None, chosen: int | None) -> DeviceInfo | Availability:
    """``cuInit`` and the facts of device ``ordinal`` (None: :func:`select_ordinal`'s), or why there is no such
    device (``chosen``: the ``JETMEM_DEVICE`` ordinal, which makes that a configuration mistake)."""
    drv.init()
    count = drv.device_count()
    ordinal = select_ordinal(count) if ordinal is None else ordinal
    if ordinal >= count:
        where = f"JETMEM_DEVICE={chosen}: " if chosen is not None else ""
        reason = f"{where}no CUDA device {ordinal}: only {count} device(s) present{_expected_ordinals(count)}"
        return Availability(False, reason, misconfigured=chosen is not None)
    return probe_device(drv, ordinal)


def _open(drv: DriverBackend, info: DeviceInfo) -> Availability:
    """Open the probed device (its primary context and stream), or say why not (no NVRTC, a failing call)."""
    if info.nvrtc_version is None:
        return Availability(False, "NVRTC not found: install pytest-jetmem[cu12] or [cu13]", info=info)
    try:
        dev = Device(drv, info)
    except CudaError as exc:
        return Availability(False, f"could not open CUDA device {info.ordinal}: {exc}", info=info, error=exc)
    return Availability(True, "", info=info, device=dev)
