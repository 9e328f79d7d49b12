"""Tegra-strict mode: Jetson's managed-memory rule, enforced on a device that does not need it.

On a device whose ``CONCURRENT_MANAGED_ACCESS`` attribute is 0 (Jetson up to Orin, and any GPU older than
Pascal), the GPU owns every managed allocation that a stream may use while work runs there: a CPU access
then kills the process with a segmentation fault (SIGSEGV). A discrete GPU with the attribute at 1 lets the
same code run, so a bug that will crash on the Jetson passes on the desktop. With ``--jetmem-tegra-strict`` the
``jetmem`` handle keeps the books Jetson's driver keeps and turns the access into a :class:`TegraStrictError` instead.

The rule (docs/concurrency.md has the sources):

- a kernel launch, a memset, a device-side copy or a prefetch queued through jetmem (``jetmem.zeros``,
  ``Buffer.fill_bytes``, ``jetmem.copy``, and jetmem's own: the timing code's L2 flush, the coherence probes'
  counters, the state machine's copies) makes its stream *busy* (the CUDA programming guide, unified memory
  on devices without concurrent managed access: a ``cudaMemcpy*``/``cudaMemset*`` on a stream makes it active
  like a kernel does); the stream stays busy until the program synchronizes it, even when the work finished
  long ago (explicit synchronization is required even if the kernel runs quickly; the GPU is "logically
  active" until then);
- a managed buffer allocated while a stream is busy is unspecified until that work is synchronized (the guide
  leaves memory allocated while the GPU is active unspecified until it is synchronized): no host access to
  it until then, whatever its attachment;
- a managed buffer attached globally (``CU_MEM_ATTACH_GLOBAL``, how jetmem allocates it) may not be touched by
  the CPU while *any* stream is busy; one attached to a single stream (``CU_MEM_ATTACH_SINGLE``) only while
  that stream is busy; one attached to the host (``CU_MEM_ATTACH_HOST``) always may;
- ``cuStreamAttachMemAsync`` is stream-ordered: a new attachment takes effect only once earlier work in its
  stream is done, so until the stream is synchronized both the old and the new attachment's restrictions hold.

What counts as a host access: taking a buffer's host view (``Buffer.host``), which is also what
``Buffer.to_numpy`` and ``Buffer.copy_from`` do for host-visible memory. Those two synchronize jetmem's
stream first, so they never trip the check on their own (they are safe on Jetson too); a raw ``buf.host``
right after a launch does. Only work launched through jetmem is seen, and only ``jetmem.synchronize()`` (and
whatever the handle reports to :meth:`TegraStrict.synchronized`) ends it: work queued by CuPy or PyTorch and
their synchronizations are invisible here. Numpy views taken *before* a launch and used during it cannot be
caught (docs/concurrency.md, "Views taken before the launch", says why).

Which memory the rule covers is the mode's to say, never its name: buffers whose mode is managed memory
(``MemoryMode.is_managed``) are checked. The others are not, each for a reason the sources give: ``zero_copy``
and ``registered`` are pinned host memory, which the CPU may use while kernels run (CUDA for Tegra, "Pinned
Memory Guidelines on Tegra Systems with no I/O coherency" and "I/O Coherency"); ``system`` memory runs only
where the device reports PAGEABLE_MEMORY_ACCESS=1, full unified memory support, where CPU and GPU may touch it
at once (the CUDA Programming Guide, unified memory on devices with full CUDA unified memory support; on
Tegra, Thor onwards: "Sysmem Full Coherency"); ``device`` memory has no host view.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any

from pytest_jetmem.cuda.attachment import GLOBAL, Attachment, stream_key
from pytest_jetmem.cuda.workspace import KERNEL, workspace_of
from pytest_jetmem.errors import TegraStrictError

if TYPE_CHECKING:
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.workspace import WorkspaceLike

__all__ = ["TegraStrict", "TegraStrictError", "enable", "tracker_of"]


class TegraStrict:
    """The books for one ``jetmem`` handle: which streams may have work in flight, how buffers are attached.

    A :class:`~pytest_jetmem.cuda.workspace.WorkObserver`: the handle reports allocations (:meth:`allocated`),
    queued GPU work (:meth:`queued`: kernels, memsets, copies, prefetches), synchronizations (:meth:`synchronized`,
    :meth:`synchronized_all`) and asks before a host access (:meth:`check_host_access`); ``pytest_jetmem.cuda.attach``
    reports attachments (:meth:`attached`).
    """

    def __init__(self, default_stream: Any = None, nodeid: str = "") -> None:
        self.nodeid = nodeid
        self.default_stream = stream_key(default_stream)
        self.launches = 0
        self.violations = 0
        self._busy: dict[int, Counter[str]] = {}  # stream -> work queued since it was last synchronized, by kind
        # managed buffers allocated while streams were busy -> those of them not synchronized since
        self._born_busy: weakref.WeakKeyDictionary[Buffer, set[int]] = weakref.WeakKeyDictionary()
        self._attached: weakref.WeakKeyDictionary[Buffer, Attachment] = weakref.WeakKeyDictionary()
        # attachments queued but maybe not in effect yet: buffer -> (attachment, the stream it was queued on)
        self._pending: weakref.WeakKeyDictionary[Buffer, tuple[Attachment, int]] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        busy = ", ".join(f"0x{s:x}: {_work(n)}" for s, n in sorted(self._busy.items())) or "none"
        return f"<TegraStrict {self.nodeid or '?'}: busy streams {busy}>"

    # -- events -------------------------------------------------------------------------------------
    def _key(self, stream: Any) -> int:
        return self.default_stream if stream is None else stream_key(stream)

    def queued(self, stream: Any, what: str) -> None:
        """GPU work of kind ``what`` (kernel, memset, copy) was queued on ``stream`` (None: the handle's own)."""
        key = self._key(stream)
        self._busy.setdefault(key, Counter())[what] += 1
        if what == KERNEL:
            self.launches += 1

    def launched(self, stream: Any = None) -> None:
        """A kernel was queued on ``stream`` (None: the handle's own stream)."""
        self.queued(stream, KERNEL)

    def allocated(self, buf: Buffer) -> None:
        """``buf`` was just allocated: a managed one allocated while streams are busy is unspecified until then."""
        if buf.memory_mode.is_managed and self._busy:
            self._born_busy[buf] = set(self._busy)

    def synchronized(self, stream: Any = None) -> None:
        """``stream`` (None: the handle's own) finished all its work, as far as the host knows."""
        key = self._key(stream)
        self._busy.pop(key, None)
        for buf, (att, queued_on) in list(self._pending.items()):
            if queued_on == key:
                self._settle(buf, att)
        for buf, streams in list(self._born_busy.items()):
            streams.discard(key)
            if not streams:
                del self._born_busy[buf]

    def synchronized_all(self) -> None:
        """Every stream is idle (``cuCtxSynchronize``, or the handle's teardown)."""
        self._busy.clear()
        self._born_busy.clear()
        for buf, (att, _) in list(self._pending.items()):
            self._settle(buf, att)

    def attached(self, buf: Buffer, attachment: Attachment, queued_on: Any = None, *, pending: bool = False) -> None:
        """``buf`` was attached with ``attachment`` by an operation queued on ``queued_on``.

        ``pending``: the stream was not synchronized afterwards, so the attachment may not be in effect yet.
        """
        if pending:
            self._pending[buf] = (attachment, self._key(queued_on))
        else:
            self._settle(buf, attachment)

    def _settle(self, buf: Buffer, attachment: Attachment) -> None:
        self._pending.pop(buf, None)
        if attachment == GLOBAL:
            self._attached.pop(buf, None)
        else:
            self._attached[buf] = attachment

    # -- questions ----------------------------------------------------------------------------------
    @property
    def busy_streams(self) -> dict[int, int]:
        """Stream -> pieces of work (kernels, memsets, copies) queued on it through jetmem since its last sync."""
        return {s: sum(c.values()) for s, c in self._busy.items()}

    @property
    def busy(self) -> bool:
        return bool(self._busy)

    def attachment(self, buf: Buffer) -> Attachment:
        """The attachment in effect for ``buf`` (jetmem allocates managed memory attached globally)."""
        return self._attached.get(buf, GLOBAL)

    def pending_attachment(self, buf: Buffer) -> Attachment | None:
        entry = self._pending.get(buf)
        return entry[0] if entry else None

    def blocking_streams(self, buf: Buffer) -> set[int]:
        """The busy streams that forbid a host access to ``buf`` right now (empty: the access is fine)."""
        if not buf.memory_mode.is_managed or buf.freed:
            return set()
        blocking = self.attachment(buf).blocking(self._busy)
        pending = self.pending_attachment(buf)
        if pending is not None:  # stream-ordered: either may be in effect, so both restrict
            blocking |= pending.blocking(self._busy)
        return blocking | self._born_busy.get(buf, set())

    def allocated_while_busy(self, buf: Buffer) -> set[int]:
        """The streams that were busy when ``buf`` was allocated and have not been synchronized since."""
        return set(self._born_busy.get(buf, set()))

    def check_host_access(self, buf: Buffer, access: str = "host view (Buffer.host)") -> None:
        """Raise :class:`TegraStrictError` if Jetson would kill the process for this host access to ``buf``."""
        blocking = self.blocking_streams(buf)
        if blocking:
            self.violations += 1
            raise TegraStrictError(self.message(buf, blocking, access))

    def message(self, buf: Buffer, blocking: set[int], access: str) -> str:
        att = self.attachment(buf)
        pending = self.pending_attachment(buf)
        where = att.describe()
        if pending is not None:
            where += f", with an attachment {pending.describe()} queued but not known to be in effect"
        streams = ", ".join(f"0x{s:x} ({_work(self._busy[s])})" for s in sorted(blocking))
        prefix = f"{self.nodeid}: " if self.nodeid else ""
        born = self._born_busy.get(buf)
        if born:
            births = ", ".join(f"0x{s:x}" for s in sorted(born))
            why = (
                f"It was allocated while work queued through jetmem was in flight on stream {births}: the CUDA "
                "programming guide leaves managed memory allocated while the GPU is active unspecified until the "
                "GPU is synchronized, whatever its attachment, and a CPU access before then may kill the process "
                "with a segmentation fault (SIGSEGV) on Jetson (CONCURRENT_MANAGED_ACCESS=0). Fix: call "
                "jetmem.synchronize() before touching it on the host (to_numpy() and copy_from() do), or allocate "
                "it before queuing the work."
            )
        else:
            why = (
                "On Jetson (CONCURRENT_MANAGED_ACCESS=0) the GPU owns this memory until the stream is synchronized "
                "(kernels, memsets and copies alike), and this CPU access kills the process with a segmentation "
                "fault (SIGSEGV) (the CUDA for Tegra app note; the CUDA programming guide, unified memory on "
                "devices without concurrent managed access). Fix: call jetmem.synchronize() before touching it on "
                "the host (to_numpy() and copy_from() do), or attach it to the host with jetmem.attach_host(buf) "
                "if no kernel needs it meanwhile, or attach it to its own stream with "
                "jetmem.attach_single(buf, stream) and run the other work on other streams."
            )
        return (
            f"{prefix}Tegra-strict: {access} of managed {buf!r}, {where}, while work queued through jetmem may "
            f"still run on stream {streams} (not synchronized since). {why}"
        )


_PLURALS = {"copy": "copies", "prefetch": "prefetches"}


def _work(counts: Counter[str]) -> str:
    """``Counter({"kernel": 2, "memset": 1})`` -> ``"2 kernels, 1 memset"`` (kernels first, then by name)."""
    kinds = sorted(counts, key=lambda k: (k != KERNEL, k))
    return ", ".join(f"{counts[k]} {k if counts[k] == 1 else _PLURALS.get(k, k + 's')}" for k in kinds if counts[k])


def tracker_of(ws: WorkspaceLike) -> TegraStrict | None:
    """The Tegra-strict tracker of a ``jetmem`` handle (or workspace), or None when strict mode is off for it."""
    for observer in workspace_of(ws).observers:
        if isinstance(observer, TegraStrict):
            return observer
    return None


def enable(jm: WorkspaceLike) -> TegraStrict:
    """Turn Tegra-strict mode on for a ``jetmem`` handle (or workspace; idempotent); returns its tracker."""
    ws = workspace_of(jm)
    tracker = tracker_of(ws)
    if tracker is None:
        tracker = TegraStrict(ws.stream, ws.nodeid)
        ws.add_observer(tracker)
    return tracker
