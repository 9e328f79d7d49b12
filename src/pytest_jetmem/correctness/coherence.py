"""Coherence checks: what the CPU wrote is what a kernel reads, and what a kernel wrote is what the CPU reads.

Every helper takes the ``jetmem`` handle first and works on a buffer's *words*: a buffer whose dtype size
is a multiple of 4 bytes is seen as uint32 words, any other as bytes. Word ``i`` of a pattern written
with ``seed`` holds ``coherence_pattern(i, seed)`` (the hash of the bundled ``coherence.cu`` kernel; the
low byte of it for byte-sized words), so the reader of a pattern needs only the seed to check it.

The host side goes through the memory mode the way a correct program must: a host view after the
stream has finished for ``managed`` and ``zero_copy``, explicit copies for ``device``. The GPU side is a
probe kernel (compiled with NVRTC from the bundled ``coherence.cu`` plus a strided variant here) that
checks a slice against one seed and writes another.

Every host read goes through :func:`cpu_read`; the project's self-tests replace it with one that skips the
synchronisation (tests/fakes/planted.py) to show that the marker and the state machine catch that bug.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from pytest_jetmem.cuda import bundled, driver
from pytest_jetmem.cuda.attach import attach
from pytest_jetmem.cuda.workspace import workspace_of
from pytest_jetmem.kernels.reference import coherence_pattern

if TYPE_CHECKING:
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.workspace import Workspace, WorkspaceLike

CHECK, WRITE = 1, 2  # probe kernel flags
BLOCK = 256
_U32_LIMIT = 1 << 32  # the u32 probe packs (index << 32 | value) into one 64-bit atomicMin


def probe_source() -> str:
    """The probe kernels' CUDA source: the bundled ``kernels/coherence.cu`` (with ``jetmem_pattern``)."""
    return bundled.source("jetmem_probe_u32")


# -- words, patterns, messages ------------------------------------------------------------------------------------
def word_dtype(dtype: Any) -> np.dtype:
    """uint32 where the dtype's size is a multiple of 4 bytes, else uint8 (a byte-level pattern)."""
    return np.dtype(np.uint32) if np.dtype(dtype).itemsize % 4 == 0 else np.dtype(np.uint8)


def word_count(buf: Buffer) -> int:
    """How many words (see :func:`word_dtype`) the buffer holds."""
    return buf.nbytes // word_dtype(buf.dtype).itemsize


def pattern(wdtype: Any, n: int, seed: int, sl: slice = slice(None)) -> np.ndarray:
    """The words ``sl`` of an ``n``-word pattern of ``seed`` (the probe kernel's values)."""
    idx = np.arange(n, dtype=np.uint64)[sl]
    return pattern_at(wdtype, idx, seed)


def pattern_at(wdtype: Any, idx: np.ndarray, seed: int) -> np.ndarray:
    """The pattern of ``seed`` at word indices ``idx``."""
    idx = np.asarray(idx, dtype=np.uint64)
    if idx.size == 0:
        return np.empty(idx.shape, np.dtype(wdtype))
    lo = int(idx.min())
    full = coherence_pattern(int(idx.max()) - lo + 1, seed, start=lo)
    words: np.ndarray = full[(idx - np.uint64(lo)).astype(np.intp)].astype(np.dtype(wdtype))
    return words


def fresh_seed(*avoid: int | None) -> int:
    """A random 32-bit seed, none of ``avoid``."""
    while True:
        seed = secrets.randbits(32)
        if seed not in avoid:
            return seed


def buffer_name(buf: Buffer) -> str:
    """The buffer's label, or its repr."""
    return repr(buf.label) if buf.label else repr(buf)


def element_index(buf: Buffer, word: int) -> Any:
    """The index (an int, or a tuple for more than one dimension) of the element holding ``word``."""
    element = word * word_dtype(buf.dtype).itemsize // buf.dtype.itemsize
    if len(buf.shape) <= 1:
        return element
    return tuple(int(i) for i in np.unravel_index(element, buf.shape))


def _hex(value: int, wdtype: np.dtype) -> str:
    return f"0x{int(value):0{2 * wdtype.itemsize}x}"


def describe_mismatch(
    buf: Buffer, what: str, word: int, got: int, expected: int, mismatches: int = 1, checked: int | None = None
) -> str:
    """One line naming the buffer, its mode, the first differing index and both values."""
    wdt = word_dtype(buf.dtype)
    unit = "word" if wdt.itemsize == 4 else "byte"
    count = f"{mismatches} of {checked}" if checked is not None else f"{mismatches}"
    return (
        f"{buffer_name(buf)} [{buf.mode}]: {what}: {count} {unit}s differ; first differing index "
        f"{element_index(buf, word)} ({unit} {word} of the {wdt} view): read {_hex(got, wdt)}, "
        f"expected {_hex(expected, wdt)}"
    )


def first_mismatch(got: np.ndarray, expected: np.ndarray, indices: range | None = None) -> tuple[int, int | None]:
    """(mismatch count, position of the first one or None) of two equally long word arrays.

    With ``indices`` (the word index of each position), the first is the one at the lowest word index
    (what the probe kernel reports), whatever the slice's direction.
    """
    bad = np.flatnonzero(np.asarray(got).ravel() != np.asarray(expected).ravel())
    if not bad.size:
        return 0, None
    if indices is not None and indices.step < 0:
        return int(bad.size), int(bad[-1])
    return int(bad.size), int(bad[0])


def _indices(n: int, sl: slice) -> range:
    if not isinstance(sl, slice):
        raise TypeError(f"expected a slice of the buffer's words, got {sl!r}")
    return range(*sl.indices(n))


# -- the host side ------------------------------------------------------------------------------------------------
def host_words(ws: Workspace, buf: Buffer) -> np.ndarray:
    """The buffer's host view as a flat array of words (a mode with a host view; no synchronisation here)."""
    return buf.host.reshape(-1).view(word_dtype(buf.dtype))


def cpu_read(ws: WorkspaceLike, buf: Buffer, sl: slice = slice(None)) -> np.ndarray:
    """A copy of words ``sl`` as the CPU sees them after the mode's synchronisation.

    A mode with a host view (managed, zero_copy): wait for jetmem's stream, then read the host view. Other modes
    (device): the mode's host read of the span (a device-to-host copy), after the stream.
    """
    ws = workspace_of(ws)
    n = word_count(buf)
    rng = _indices(n, sl)
    wdt = word_dtype(buf.dtype)
    if buf.memory_mode.has_host_view:
        ws.synchronize()
        return np.array(host_words(ws, buf)[sl], copy=True)
    ws.synchronize()
    if len(rng) == 0:
        return np.empty(0, wdt)
    lo, hi = min(rng[0], rng[-1]), max(rng[0], rng[-1]) + 1
    out = np.empty(hi - lo, wdt)
    buf.memory_mode.read_host(ws.drv, buf.allocation, out, lo * wdt.itemsize)
    return out[rng[0] - lo :: rng.step]


def cpu_write(ws: WorkspaceLike, buf: Buffer, values: Any, sl: slice = slice(None)) -> None:
    """Write ``values`` (words) to words ``sl`` from the host, the way the mode requires.

    A mode with a host view (managed, zero_copy): wait for jetmem's stream (never write host-visible memory the
    GPU may be using), then store through the host view. Other modes (device): the mode's host writes (host-to-
    device copies) after the stream.
    """
    ws = workspace_of(ws)
    n = word_count(buf)
    rng = _indices(n, sl)
    wdt = word_dtype(buf.dtype)
    vals = np.broadcast_to(np.asarray(values).astype(wdt, copy=False), (len(rng),))
    ws.synchronize()
    if len(rng) == 0:
        return
    if buf.memory_mode.has_host_view:
        host_words(ws, buf)[sl] = vals
        return
    lo, hi = min(rng[0], rng[-1]), max(rng[0], rng[-1]) + 1
    if abs(rng.step) == 1:
        chunk = np.ascontiguousarray(vals if rng.step > 0 else vals[::-1])
    else:  # a strided slice: read the span, change it, write it back
        chunk = np.empty(hi - lo, wdt)
        buf.memory_mode.read_host(ws.drv, buf.allocation, chunk, lo * wdt.itemsize)
        chunk[rng[0] - lo :: rng.step][: len(rng)] = vals
    buf.memory_mode.write_host(ws.drv, buf.allocation, chunk, lo * wdt.itemsize)


def cpu_touch(ws: WorkspaceLike, buf: Buffer, pattern_seed: int | None = None, sl: slice = slice(None)) -> int:
    """Write the pattern of ``pattern_seed`` (random if None) to words ``sl`` from the host; return the seed."""
    ws = workspace_of(ws)
    return _write_pattern(ws, buf, pattern_seed, sl)


def _write_pattern(ws: Workspace, buf: Buffer, seed: int | None, sl: slice) -> int:
    seed = fresh_seed() if seed is None else int(seed) & 0xFFFFFFFF
    cpu_write(ws, buf, pattern(word_dtype(buf.dtype), word_count(buf), seed, sl), sl)
    return seed


class Check(NamedTuple):
    """A check's outcome: how many words differ, the first bad word index, what was read there and expected."""

    mismatches: int
    first_bad: int | None
    got: int | None = None
    expected: int | None = None
    checked: int = 0

    def __bool__(self) -> bool:  # truthy when something differs
        return self.mismatches > 0

    def describe(self, buf: Buffer, what: str) -> str:
        assert self.first_bad is not None and self.got is not None and self.expected is not None
        return describe_mismatch(buf, what, self.first_bad, self.got, self.expected, self.mismatches, self.checked)


def cpu_check(ws: WorkspaceLike, buf: Buffer, expect_seed: int, sl: slice = slice(None)) -> Check:
    """Read words ``sl`` on the host (after the mode's synchronisation) and compare with the pattern."""
    ws = workspace_of(ws)
    n = word_count(buf)
    rng = _indices(n, sl)
    got = cpu_read(ws, buf, sl)
    want = pattern(word_dtype(buf.dtype), n, expect_seed, sl)
    count, pos = first_mismatch(got, want, rng)
    if pos is None:
        return Check(0, None, checked=len(rng))
    return Check(count, rng[pos], int(got[pos]), int(want[pos]), len(rng))


# -- the GPU side -------------------------------------------------------------------------------------------------
@dataclass
class PendingProbe:
    """A probe kernel queued on jetmem's stream; :meth:`result` waits for it and reads its counters."""

    ws: Workspace
    buf: Buffer
    expect_seed: int | None
    checked: int
    result_buf: Buffer | None
    owns_result: bool
    _done: Check | None = None

    def result(self) -> Check:
        """Wait for the probe (synchronises jetmem's stream) and return what it found."""
        if self._done is not None:
            return self._done
        if self.result_buf is None or self.expect_seed is None:  # nothing checked: just wait for the writes
            if self.result_buf is not None:
                self.ws.synchronize()
                if self.owns_result:
                    self.result_buf.free()
            self._done = Check(0, None, checked=self.checked if self.expect_seed is not None else 0)
            return self._done
        counts = self.result_buf.to_numpy()
        if self.owns_result:
            self.result_buf.free()
        mismatches, packed = int(counts[0]), int(counts[1])
        if mismatches == 0:
            self._done = Check(0, None, checked=self.checked)
            return self._done
        wdt = word_dtype(self.buf.dtype)
        shift = 8 * wdt.itemsize
        index, got = packed >> shift, packed & ((1 << shift) - 1)
        expected = int(pattern_at(wdt, np.array([index]), self.expect_seed)[0])
        self._done = Check(mismatches, index, got, expected, self.checked)
        return self._done


def probe_kernel(ws: WorkspaceLike, wdtype: Any) -> Any:
    """The probe kernel for ``uint32`` or ``uint8`` words, compiled for the handle's device."""
    ws = workspace_of(ws)
    name = "jetmem_probe_u32" if np.dtype(wdtype).itemsize == 4 else "jetmem_probe_u8"
    return ws.kernel(name)


def result_buffer(ws: WorkspaceLike) -> Buffer:
    """A small device buffer for probe counters (reusable with ``launch_probe(..., result=...)``)."""
    ws = workspace_of(ws)
    buf = ws.empty(2, np.uint64, mode="device")
    buf.label = "jetmem coherence probe counters"
    return buf


def launch_probe(
    ws: WorkspaceLike,
    buf: Buffer,
    expect_seed: int | None = None,
    new_seed: int | None = None,
    sl: slice = slice(None),
    *,
    delay_us: float = 0,
    result: Buffer | None = None,
) -> PendingProbe:
    """Queue the probe kernel over words ``sl``; returns at once (call ``.result()`` to wait).

    ``expect_seed``: check the words against that pattern (None: no check). ``new_seed``: then write
    that pattern (None: no write). ``result``: a counter buffer from :func:`result_buffer` to reuse.
    """
    ws = workspace_of(ws)
    rng, wdt = _probe_words(buf, sl, expect_seed, new_seed, delay_us)
    count = len(rng)
    if count == 0:
        return PendingProbe(ws, buf, expect_seed, 0, None, False)
    flags = (CHECK if expect_seed is not None else 0) | (WRITE if new_seed is not None else 0)
    res = result_buffer(ws) if result is None else result
    ws.memset_range(res.ptr, 0, 8)  # the mismatch count
    ws.memset_range(res.ptr + 8, 0xFF, 8)  # the first bad word (an atomicMin)
    sms = ws.device.attr("MULTIPROCESSOR_COUNT") or 1
    grid = max(1, min((count + BLOCK - 1) // BLOCK, sms * 32))
    seeds = ((expect_seed or 0) & 0xFFFFFFFF, (new_seed or 0) & 0xFFFFFFFF)
    args = (buf.ptr, rng.start, rng.step, count, *seeds, flags, round(delay_us * 1000), res)
    probe_kernel(ws, wdt).launch(grid, BLOCK, args)
    return PendingProbe(ws, buf, expect_seed, count, res, result is None)


def _probe_words(
    buf: Buffer, sl: slice, expect_seed: int | None, new_seed: int | None, delay_us: float
) -> tuple[range, np.dtype]:
    """The word indices ``sl`` selects and the word dtype of a probe's arguments, checked (a ValueError names
    the buffer): a seed to check or write, a delay >= 0, at most 2**32 words of 4 bytes."""
    if expect_seed is None and new_seed is None:
        raise ValueError(f"{buffer_name(buf)}: a probe needs expect_seed, new_seed or both")
    if delay_us < 0:
        raise ValueError(f"delay_us must be >= 0, got {delay_us!r}")
    n = word_count(buf)
    wdt = word_dtype(buf.dtype)
    if wdt.itemsize == 4 and n > _U32_LIMIT:
        raise ValueError(f"{buffer_name(buf)}: coherence probes handle up to 2**32 words (16 GiB), not {n}")
    return _indices(n, sl), wdt


def gpu_touch(
    ws: WorkspaceLike,
    buf: Buffer,
    expect_seed: int | None = None,
    new_seed: int | None = None,
    sl: slice = slice(None),
    *,
    write: bool = True,
    delay_us: float = 0,
) -> GpuTouch:
    """Run the probe kernel over words ``sl`` and wait for it.

    Checks the words against the pattern of ``expect_seed`` (None: no check), then writes the pattern of
    ``new_seed`` (None: a fresh random seed; ``write=False``: no write). Returns
    ``GpuTouch(mismatches, first_bad, got, expected, seed)``; ``seed`` is the seed written (or None).
    """
    ws = workspace_of(ws)
    seed: int | None = None
    if write:
        seed = (fresh_seed(expect_seed) if new_seed is None else new_seed) & 0xFFFFFFFF
    if expect_seed is None and seed is None:
        raise ValueError(f"{buffer_name(buf)}: gpu_touch with write=False needs expect_seed")
    found = launch_probe(ws, buf, expect_seed, seed, sl, delay_us=delay_us).result()
    return GpuTouch(found.mismatches, found.first_bad, found.got, found.expected, seed)


class GpuTouch(NamedTuple):
    """What :func:`gpu_touch` found: mismatch count, first bad word index, the values there, the seed written."""

    mismatches: int
    first_bad: int | None
    got: int | None
    expected: int | None
    seed: int | None


# -- the round trips the marker checks -----------------------------------------------------------------------------
def prepare(ws: WorkspaceLike, buf: Buffer) -> None:
    """Put a buffer in a state every probe may use: managed memory attached globally again."""
    ws = workspace_of(ws)
    if buf.memory_mode.is_managed and buf.nbytes:
        attach(ws, buf, driver.MEM_ATTACH_GLOBAL, wait=False)


def check_round_trips(
    ws: WorkspaceLike, buf: Buffer, rounds: int = 2, cpu_touch: bool = True, *, delay_us: float = 0
) -> list[str]:
    """Check the round trips of one buffer in its memory mode; return the problems (empty: coherent).

    Round 1 starts with a CPU write of a fresh pattern. Each round then launches the probe, which checks
    what it reads and writes a new pattern, and *before* waiting for the probe's counters the CPU reads
    the buffer after the mode's synchronisation (a kernel's write must be visible there). With
    ``cpu_touch`` the CPU writes again before every later launch: all of the buffer in odd rounds, its
    first half in even ones (the seed-001 experiment of CPU writes between launches); without it the
    CPU only reads between launches, and the next kernel must read what the previous one wrote.
    """
    ws = workspace_of(ws)
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    n = word_count(buf)
    if n == 0:
        return []
    prepare(ws, buf)
    gpu_seed: int | None = None
    for r in range(1, rounds + 1):
        segments = _round_segments(ws, buf, r, cpu_touch, gpu_seed)
        written = fresh_seed(gpu_seed, *(seed for _, seed, _ in segments))
        problems = _probe_round(ws, buf, segments, written, f"round {r}/{rounds}", delay_us)
        if problems:
            return problems
        gpu_seed = written
    return []


#: One span of words a round's probe checks: (its slice, the seed of the pattern it must hold, what wrote it).
Segment = tuple[slice, int, str]


def _round_segments(ws: Workspace, buf: Buffer, r: int, cpu_touch: bool, gpu_seed: int | None) -> list[Segment]:
    """What round ``r`` expects where, after its CPU write: all of the buffer in round 1 and (``cpu_touch``) in
    odd rounds, its first half in even ones (the rest holds the previous kernel's pattern); without
    ``cpu_touch`` after round 1, the previous kernel's pattern everywhere."""
    n = word_count(buf)
    if r == 1 or (cpu_touch and (r % 2 == 1 or n < 2)):
        return [(slice(None), _write_pattern(ws, buf, None, slice(None)), "what the CPU wrote")]
    assert gpu_seed is not None
    if not cpu_touch:
        return [(slice(None), gpu_seed, "what the previous kernel wrote (the CPU read it in between)")]
    half = n // 2
    seed = _write_pattern(ws, buf, None, slice(0, half))
    return [
        (slice(0, half), seed, "what the CPU wrote over the first half"),
        (slice(half, n), gpu_seed, "what the previous kernel wrote (the CPU touched the other half)"),
    ]


def _probe_round(
    ws: Workspace, buf: Buffer, segments: list[Segment], written: int, where: str, delay_us: float
) -> list[str]:
    """Launch the probes of ``segments`` (each writes ``written``), let the CPU read before waiting for their
    counters (the mode's own synchronisation must do), then collect what either side found."""
    pending = [(launch_probe(ws, buf, seed, written, sl, delay_us=delay_us), what) for sl, seed, what in segments]
    problems: list[str] = []
    host = cpu_check(ws, buf, written)
    if host:
        problems.append(host.describe(buf, f"{where}: the CPU read what a kernel wrote"))
    for probe, what in pending:
        found = probe.result()
        if found:
            problems.append(found.describe(buf, f"{where}: a kernel read {what}"))
    return problems


__all__ = [
    "Check",
    "GpuTouch",
    "PendingProbe",
    "check_round_trips",
    "cpu_check",
    "cpu_read",
    "cpu_touch",
    "cpu_write",
    "describe_mismatch",
    "fresh_seed",
    "gpu_touch",
    "launch_probe",
    "pattern",
    "word_count",
    "word_dtype",
]
