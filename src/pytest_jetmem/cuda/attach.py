"""Stream association of managed buffers: ``cuStreamAttachMemAsync`` from Python.

On a device with ``CONCURRENT_MANAGED_ACCESS=0`` (Jetson) the stream association decides when the CPU may touch
a managed buffer while kernels run:

- :func:`attach_host` (``CU_MEM_ATTACH_HOST``): the CPU may use it at any time; no kernel may use it on such a
  device (re-attach it before one does).
- :func:`attach_single` (``CU_MEM_ATTACH_SINGLE``): only kernels in that stream may use it, and the CPU may
  touch it whenever that stream is idle, even while other streams run kernels.
- :func:`attach_global` (``CU_MEM_ATTACH_GLOBAL``, how jetmem allocates managed memory): any stream may use
  it, and the CPU may touch it only while no kernel is in flight anywhere.

The call is stream-ordered: it takes effect once the earlier work in its stream has finished. With
``wait=True`` (the default) these functions synchronize that stream afterwards, so the new association is in
effect when they return; with ``wait=False`` they only queue it. Under ``--jetmem-tegra-strict`` the handle's
tracker (:mod:`pytest_jetmem.correctness.strict`) is told, so host access is judged by the new association.

Sources: the ``cuStreamAttachMemAsync`` and ``cuMemAllocManaged`` reference, the CUDA programming guide
("Managing Data Visibility and Concurrent CPU + GPU Access with Streams") and the CUDA for Tegra app note;
docs/concurrency.md has the links.
"""

from __future__ import annotations

from typing import Any

from pytest_jetmem.cuda.attachment import Attachment, stream_key
from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.driver import MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST, MEM_ATTACH_SINGLE
from pytest_jetmem.cuda.workspace import Workspace, WorkspaceLike, workspace_of
from pytest_jetmem.errors import AttachError, hide_for_user_errors

__all__ = ["AttachError", "Attachment", "attach", "attach_global", "attach_host", "attach_single"]

_CALLS = {MEM_ATTACH_GLOBAL: "attach_global", MEM_ATTACH_HOST: "attach_host", MEM_ATTACH_SINGLE: "attach_single"}


def attach(jm: WorkspaceLike, buf: Buffer, flags: int, stream: Any = None, *, wait: bool = True) -> None:
    """Queue ``cuStreamAttachMemAsync(stream, buf.ptr, 0, flags)`` (``stream`` None: jetmem's stream).

    ``jm``: the ``jetmem`` handle (or a workspace). With ``wait`` the stream is synchronized afterwards, so the
    attachment is in effect on return. An attachment the buffer or stream cannot have is an AttachError.
    """
    __tracebackhide__ = hide_for_user_errors
    ws = workspace_of(jm)
    call = _CALLS.get(flags)
    if call is None:
        raise ValueError(f"flags must be MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST or MEM_ATTACH_SINGLE, got {flags!r}")
    target = ws.stream if stream is None else stream
    key = stream_key(target)
    _check_attachable(f"{ws.nodeid}: jetmem.{call}" if ws.nodeid else f"jetmem.{call}", buf, flags, key)
    ws.drv.stream_attach_mem_async(target, buf.ptr, flags)
    if wait:
        ws.drv.stream_synchronize(target)
    attachment = Attachment(flags, key if flags == MEM_ATTACH_SINGLE else None)
    for owner in {id(w): w for w in (ws, buf.owner)}.values():
        if isinstance(owner, Workspace):
            owner.attached(buf, attachment, target, pending=not wait)


def _check_attachable(where: str, buf: Buffer, flags: int, key: int) -> None:
    """AttachError, naming the call ``where``, for a freed or unmanaged buffer, or a single-stream attachment to the
    legacy default stream (``key`` 0)."""
    __tracebackhide__ = hide_for_user_errors
    if buf.freed:
        raise AttachError(f"{where}({buf!r}): the buffer was freed")
    if not buf.memory_mode.is_managed:
        raise AttachError(
            f"{where}({buf!r}): cuStreamAttachMemAsync works on managed memory (cuMemAllocManaged) only, "
            f"and this buffer is {buf.mode!r} memory; {buf.memory_mode.host_rule}"
        )
    if flags == MEM_ATTACH_SINGLE and key == 0:
        raise AttachError(
            f"{where}({buf!r}): a single-stream attachment needs a created stream, not the legacy default "
            "stream (pass stream=None for jetmem's own stream)"
        )


def attach_host(ws: WorkspaceLike, buf: Buffer, *, wait: bool = True) -> None:
    """Attach a managed buffer to the host (``CU_MEM_ATTACH_HOST``): the CPU may touch it while kernels run.

    On a device with ``CONCURRENT_MANAGED_ACCESS=0`` no kernel may then use the buffer; attach it globally or
    to a stream again first.
    """
    __tracebackhide__ = hide_for_user_errors
    attach(ws, buf, MEM_ATTACH_HOST, None, wait=wait)


def attach_global(ws: WorkspaceLike, buf: Buffer, *, wait: bool = True) -> None:
    """Attach a managed buffer globally (``CU_MEM_ATTACH_GLOBAL``, how it was allocated): any stream may use it."""
    __tracebackhide__ = hide_for_user_errors
    attach(ws, buf, MEM_ATTACH_GLOBAL, None, wait=wait)


def attach_single(ws: WorkspaceLike, buf: Buffer, stream: Any = None, *, wait: bool = True) -> None:
    """Attach a managed buffer to one stream (``CU_MEM_ATTACH_SINGLE``; None: jetmem's stream).

    Only kernels in that stream may use it; the CPU may touch it whenever that stream is idle.
    """
    __tracebackhide__ = hide_for_user_errors
    attach(ws, buf, MEM_ATTACH_SINGLE, stream, wait=wait)
