"""A fake driver whose GPU work happens when the host waits, for the coherence tests.

:class:`AsyncFake` extends the shared fake driver so that kernels, async memsets and async copies take effect when
the host waits (a stream or device synchronisation, a synchronous copy, a free), as on a GPU, and not at launch: a
host read that skips its synchronisation then sees stale memory, deterministically. The probe and machine kernels
are emulated on the host from the numpy reference of the bundled pattern.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fakes.fake_driver import FakeDriver, FakeFault, Launch
from pytest_jetmem import open_handle
from pytest_jetmem.cuda.driver import DriverBackend
from pytest_jetmem.cuda.modes import default_names
from pytest_jetmem.kernels.reference import coherence_pattern

MODES = default_names()  # the built-in modes: nothing else is registered when the tests import this


# -- a fake whose GPU work happens when the host waits ---------------------------------------------------------
def _pattern_at(idx: np.ndarray, seed: int, wdt: np.dtype) -> np.ndarray:
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size == 0:
        return np.empty(0, wdt)
    pattern: np.ndarray = coherence_pattern(int(idx.max()) + 1, seed)[idx].astype(wdt)
    return pattern


def _emulate_probe(wdt: np.dtype) -> Callable[[FakeDriver, Launch], None]:
    shift = 8 * wdt.itemsize

    def run(fake: FakeDriver, launch: Launch) -> None:
        ptr, start = launch.ptr(0), launch.value(1, np.uint64)
        step, count = launch.value(2, np.int64), launch.value(3, np.uint64)
        expect, new, flags = launch.value(4, np.uint32), launch.value(5, np.uint32), launch.value(6, np.int32)
        idx = start + step * np.arange(count, dtype=np.int64)
        lo, hi = int(idx.min()), int(idx.max()) + 1
        words = fake.view(ptr + lo * wdt.itemsize, wdt, hi - lo)
        if flags & 1:
            seen = words[idx - lo].copy()
            bad = np.flatnonzero(seen != _pattern_at(idx, expect, wdt))
            if bad.size:
                result = fake.view(launch.ptr(8), np.uint64, 2)
                packed = min((int(idx[b]) << shift) | int(seen[b]) for b in bad)
                result[0] += np.uint64(bad.size)
                result[1] = min(int(result[1]), packed)
        if flags & 2:
            words[idx - lo] = _pattern_at(idx, new, wdt)

    return run


def _emulate_add(fake: FakeDriver, launch: Launch) -> None:
    start, step, count = launch.value(1, np.uint64), launch.value(2, np.int64), launch.value(3, np.uint64)
    idx = start + step * np.arange(count, dtype=np.int64)
    words = fake.view(launch.ptr(0), np.uint32, int(idx.max()) + 1)
    words[idx] += np.uint32(launch.value(4, np.uint32))


def _emulate_compare(fake: FakeDriver, launch: Launch) -> None:
    start, step, count = launch.value(2, np.uint64), launch.value(3, np.int64), launch.value(4, np.uint64)
    idx = start + step * np.arange(count, dtype=np.int64)
    seen = fake.view(launch.ptr(0), np.uint32, int(idx.max()) + 1)[idx]
    bad = np.flatnonzero(seen != fake.view(launch.ptr(1), np.uint32, count))
    if bad.size:
        result = fake.view(launch.ptr(5), np.uint64, 2)
        result[0] += np.uint64(bad.size)
        result[1] = min(int(result[1]), (int(bad[0]) << 32) | int(seen[bad[0]]))


EMULATORS: dict[str, Callable[[FakeDriver, Launch], None]] = {
    "jetmem_probe_u32": _emulate_probe(np.dtype(np.uint32)),
    "jetmem_probe_u8": _emulate_probe(np.dtype(np.uint8)),
    "jetmem_machine_add": _emulate_add,
    "jetmem_machine_compare": _emulate_compare,
    "jetmem_machine_wait": lambda fake, launch: None,
}


class AsyncFake(FakeDriver):
    """The shared fake, with kernels and async memsets/copies applied when the host waits for the stream."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.emulators.update(EMULATORS)
        self.emulators = {name: self._deferred(fn) for name, fn in self.emulators.items()}
        self.pending: list[Callable[[], None]] = []
        self.flushes = 0

    def _deferred(self, fn: Callable[[FakeDriver, Launch], None]) -> Callable[[FakeDriver, Launch], None]:
        def later(fake: FakeDriver, launch: Launch) -> None:
            self.pending.append(lambda: fn(self, launch))

        return later

    def flush(self) -> None:
        """Run the queued GPU work, in order (what a synchronisation waits for)."""
        if self.pending:
            self.flushes += 1
        while self.pending:
            work = self.pending.pop(0)
            try:
                work()
            except FakeFault as fault:
                self.sticky = fault.error

    def _later_write(
        self, ptr: int, nbytes: int, call: Callable[[], None], compute: Callable[[], bytes] | None
    ) -> None:
        """Validate and apply ``call`` now, then undo it and queue ``compute()`` bytes (None: what ``call`` wrote)
        for the flush."""
        alloc = self._device_allocation(int(ptr), nbytes) if nbytes else None
        if alloc is None:
            call()  # nothing to defer (or the fake refuses it as the driver would)
            return
        before = ctypes.string_at(int(ptr), nbytes)
        call()
        staged = ctypes.string_at(int(ptr), nbytes)
        ctypes.memmove(int(ptr), before, nbytes)

        def apply() -> None:
            ctypes.memmove(int(ptr), compute() if compute is not None else staged, nbytes)

        self.pending.append(apply)

    # host waits: the queued work runs first
    def stream_synchronize(self, stream: Any) -> None:
        super().stream_synchronize(stream)
        self.flush()

    def ctx_synchronize(self) -> None:
        super().ctx_synchronize()
        self.flush()

    def event_synchronize(self, event: Any) -> None:
        super().event_synchronize(event)
        self.flush()

    def mem_free(self, ptr: int) -> None:
        self.flush()
        super().mem_free(ptr)

    def mem_free_host(self, host_ptr: int) -> None:
        self.flush()
        super().mem_free_host(host_ptr)

    def memcpy_dtoh(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        self.flush()  # to pageable memory: synchronous in both forms
        super().memcpy_dtoh(dst_host, src, nbytes, stream)

    def memcpy_htod(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self.flush()
            super().memcpy_htod(dst, src_host, nbytes)
            return
        self._later_write(dst, nbytes, lambda: super(AsyncFake, self).memcpy_htod(dst, src_host, nbytes, stream), None)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self.flush()
            super().memcpy_dtod(dst, src, nbytes)
            return
        self._later_write(
            dst,
            nbytes,
            lambda: super(AsyncFake, self).memcpy_dtod(dst, src, nbytes, stream),
            lambda: ctypes.string_at(int(src), nbytes),
        )

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: Any = None) -> None:
        if stream is None:
            self.flush()
            super().memset_d8(ptr, value, nbytes)
            return
        self._later_write(ptr, nbytes, lambda: super(AsyncFake, self).memset_d8(ptr, value, nbytes, stream), None)


if TYPE_CHECKING:  # mypy checks the fake against the driver interface (.ci/run: mypy tests/fakes)
    _ASYNC: DriverBackend = AsyncFake()


@contextlib.contextmanager
def handle(mode: str) -> Iterator[Any]:
    with open_handle(mode) as jm:
        yield jm
