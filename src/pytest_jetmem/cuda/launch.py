"""Kernel launches from Python: arguments checked against the kernel's signature and packed for cuLaunchKernel.

The signature is read from the kernel's source by :mod:`pytest_jetmem.cuda.signature` (whose names the package
imports from here too: :func:`parse_signature`, :class:`Param`, :data:`POINTER`).
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.compiler import CompiledKernel
from pytest_jetmem.cuda.driver import FunctionHandle, StreamHandle
from pytest_jetmem.cuda.signature import C_TYPES, POINTER, Param, parse_signature
from pytest_jetmem.errors import LaunchArgumentError, hide_for_user_errors

__all__ = [
    "C_TYPES",
    "POINTER",
    "Kernel",
    "LaunchArgumentError",
    "LaunchContext",
    "LaunchTarget",
    "Param",
    "pack_args",
    "parse_signature",
]


def pack_args(kernel_name: str, args: Sequence[Any], params: list[Param] | None) -> tuple[list[np.ndarray], np.ndarray]:
    """Turn launch arguments into the array of argument addresses cuLaunchKernel takes.

    Buffers and objects with ``__cuda_array_interface__`` pass their device address; numpy scalars
    pass their own type; Python numbers take the declared parameter type (range checked). Returns
    the value holders (keep them alive until the launch returns) and the address array. A wrong
    ``args`` (no tuple or list), count, type or value is a :class:`LaunchArgumentError` naming the kernel,
    the argument and what it expected.
    """
    __tracebackhide__ = hide_for_user_errors  # the user's launch is the line to show
    _check_count(kernel_name, args, params)
    holders = []
    for i, value in enumerate(args):
        param = params[i] if params is not None else None
        holders.append(_pack_one(kernel_name, i, value, param))
    addresses = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
    return holders, addresses


def _check_count(kernel_name: str, args: Any, params: list[Param] | None) -> None:
    """``args`` is a tuple or list (any non-text sequence) of as many arguments as the kernel has parameters."""
    __tracebackhide__ = hide_for_user_errors
    declared = f" ({', '.join(p.describe() for p in params)})" if params is not None else ""
    if isinstance(args, (str, bytes, bytearray)) or not isinstance(args, Sequence):
        raise LaunchArgumentError(
            f"kernel {kernel_name!r} args: expected a tuple of the kernel's arguments{declared}, got "
            f"{type(args).__name__} {_short(args)}; pass args=(a, b, ...) (one argument: args=(a,))"
        )
    if params is not None and len(args) != len(params):
        raise LaunchArgumentError(f"kernel {kernel_name!r} takes {len(params)} arguments{declared}, got {len(args)}")


def _pack_one(kernel_name: str, index: int, value: Any, param: Param | None) -> np.ndarray:
    """One argument as the value cuLaunchKernel reads: a device address, or a scalar of the parameter's type."""
    __tracebackhide__ = hide_for_user_errors
    where = f"kernel {kernel_name!r} argument {index}" + (f" ({param.name})" if param else "")
    kind = param.kind if param else None
    address = _device_address(where, value)
    if address is not None:
        if kind not in (None, POINTER):
            raise LaunchArgumentError(f"{where}: expected {kind}, got a device buffer")
        return np.array([address], dtype=np.uint64)
    if isinstance(value, np.generic):
        return _pack_numpy(where, value, param)
    if isinstance(value, (bool, int, float)):
        return _pack_number(where, value, param)
    got = f"{type(value).__name__} {_short(value)}"
    raise LaunchArgumentError(f"{where}: cannot pass {got} to a kernel; {_wanted(param)}")


def _pack_numpy(where: str, value: np.generic, param: Param | None) -> np.ndarray:
    """A numpy scalar: its own type, which must be the declared one."""
    __tracebackhide__ = hide_for_user_errors
    kind = param.kind if param else None
    if isinstance(kind, np.dtype) and value.dtype != kind:
        raise LaunchArgumentError(f"{where}: expected {kind}, got numpy {value.dtype} {value!r}")
    if kind == POINTER:
        raise LaunchArgumentError(_pointer_expected(where, param, f"numpy {value.dtype} {value}"))
    return np.array([value], dtype=value.dtype)


def _pack_number(where: str, value: bool | int | float, param: Param | None) -> np.ndarray:
    """A Python number: a raw device address for a pointer, else the declared type (range checked)."""
    __tracebackhide__ = hide_for_user_errors
    kind = param.kind if param else None
    if kind == POINTER:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LaunchArgumentError(_pointer_expected(where, param, f"{type(value).__name__} {value!r}"))
        if not 0 <= value < 2**64:
            raise LaunchArgumentError(f"{where}: {value} is out of range for a pointer")
        return np.array([value], dtype=np.uint64)  # a raw device address
    if not isinstance(kind, np.dtype):
        raise LaunchArgumentError(
            f"{where}: a plain Python {type(value).__name__} needs a declared parameter type; "
            "pass a numpy scalar such as np.int32(...) or np.float32(...)"
        )
    return _typed(where, value, kind)


def _wanted(param: Param | None) -> str:
    """What an argument for ``param`` may be, for the error about one of another type."""
    if param is None or param.kind is None:
        return (
            "expected a jetmem buffer, a device array (__cuda_array_interface__), an int device pointer or a numpy "
            "scalar such as np.int32(...)"
        )
    if param.kind == POINTER:
        return (
            f"expected a pointer for {param.declared()}: a jetmem buffer, a device array (__cuda_array_interface__) "
            "or an int device pointer (a host numpy array: copy it to the GPU with jetmem.array(...))"
        )
    return f"expected {param.kind} for {param.declared()}: a numpy scalar np.{param.kind}(...) or a Python number"


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (an array's or a long list's repr runs on for lines)."""
    try:
        text = repr(value)
    except Exception:  # a repr that fails: the type says enough
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _device_address(where: str, value: Any) -> int | None:
    """The device address of an object with ``__cuda_array_interface__`` (None: it has none); an interface
    without an int ``data[0]`` is a LaunchArgumentError saying what the CUDA Array Interface expects."""
    __tracebackhide__ = hide_for_user_errors
    try:
        cai = getattr(value, "__cuda_array_interface__", None)
    except Exception as exc:  # a property that raises: the object says it is a device array and is not one
        raise LaunchArgumentError(
            f"{where}: {type(value).__name__}.__cuda_array_interface__ raised {type(exc).__name__}: {exc}"
        ) from None
    if cai is None:
        return None
    address = _cai_address(value)
    if address is None:
        raise LaunchArgumentError(
            f"{where}: {type(value).__name__}.__cuda_array_interface__ is {_short(cai)}; expected a dict whose "
            "'data' is (device pointer as int, read-only flag) (the CUDA Array Interface, version 3)"
        )
    return address


def _pointer_expected(where: str, param: Param | None, got: str) -> str:
    """The error for a value that is no pointer passed for a pointer parameter: what a pointer can be."""
    declared = f" for {param.declared()}" if param is not None else ""
    return (
        f"{where}: expected a pointer{declared}: a jetmem buffer, a device array (__cuda_array_interface__) "
        f"or an int device pointer; got {got}"
    )


def _typed(where: str, value: bool | int | float, dtype: np.dtype) -> np.ndarray:
    """A Python number as a value of ``dtype``; a LaunchArgumentError where it does not fit."""
    __tracebackhide__ = hide_for_user_errors
    if dtype.kind == "b" and not isinstance(value, bool) and value not in (0, 1):
        raise LaunchArgumentError(f"{where}: expected a bool (or 0/1), got {value!r}")
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            arr = np.array([value], dtype=dtype)
        if math.isfinite(value) and not np.isfinite(arr[0]):
            raise LaunchArgumentError(f"{where}: {value!r} is out of range for {dtype}")
        return arr
    if dtype.kind in "iu":
        if isinstance(value, float):
            raise LaunchArgumentError(f"{where}: expected an integer ({dtype}), got float {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise LaunchArgumentError(f"{where}: {value} is out of range for {dtype} [{info.min}, {info.max}]")
    return np.array([value], dtype=dtype)


def _dim3(value: int | Sequence[int], what: str) -> tuple[int, int, int]:
    """``value`` (an int or 1 to 3 of them, each >= 1) as a dim3; a ValueError naming ``what`` otherwise."""
    __tracebackhide__ = hide_for_user_errors
    try:
        dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    except TypeError:
        raise ValueError(f"{what}: expected 1 to 3 positive integers, got {value!r}") from None
    if (
        not 1 <= len(dims) <= 3
        or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in dims)
        or any(int(d) < 1 for d in dims)
    ):
        raise ValueError(f"{what}: expected 1 to 3 positive integers, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


# numpy dtype -> struct format of one argument, padded to 8 bytes (every argument sits at an 8-aligned offset).
_STRUCT_CODES = {
    "float32": "f4x",
    "float64": "d",
    "float16": "e6x",
    "bool": "?7x",
    "int8": "b7x",
    "uint8": "B7x",
    "int16": "h6x",
    "uint16": "H6x",
    "int32": "i4x",
    "uint32": "I4x",
    "int64": "q",
    "uint64": "Q",
}


def _accepted(kind: np.dtype) -> tuple[type, ...]:
    """The Python and numpy types a parameter of ``kind`` takes as they are (struct range-checks the value)."""
    if kind.kind == "b":
        return (bool, kind.type)
    if kind.kind == "f":
        return (float, int, kind.type)
    return (int, kind.type)


def _cai_address(value: Any) -> int | None:
    """The device address of an object with a well-formed ``__cuda_array_interface__``, else None (never raises:
    the generated packer calls it, and :func:`pack_args` then says what is wrong)."""
    try:
        address = value.__cuda_array_interface__["data"][0]
    except Exception:  # no interface, or one without an address
        return None
    return int(address) if isinstance(address, (int, np.integer)) and not isinstance(address, bool) else None


def _packer(params: list[Param], into: Any) -> Callable[[Sequence[Any]], bool]:
    """A function packing one launch's arguments for ``params`` into the buffer ``into``; False where the
    slow path (:func:`pack_args`) must pack them or say what is wrong.

    It is generated once per signature (as :mod:`dataclasses` generates ``__init__``) so that a launch runs
    straight-line code: a pointer slot takes a Buffer's address, a raw int address or a
    ``__cuda_array_interface__`` address; a number slot takes the types of :func:`_accepted` and
    ``struct.pack_into`` range-checks the values. The generated text holds only argument indices.
    """
    names = [f"a{i}" for i in range(len(params))]
    env: dict[str, Any] = {
        "Buffer": Buffer,
        "cai_address": _cai_address,
        "pack_into": struct.Struct(
            "=" + "".join("Q" if p.kind == POINTER else _STRUCT_CODES[str(p.kind)] for p in params)
        ).pack_into,
        "into": into,
        "errors": (struct.error, OverflowError, TypeError, ValueError),
    }
    lines = ["def pack(args):"]
    if names:
        lines += ["    try:", f"        {', '.join(names)}, = args", "    except (TypeError, ValueError):"]
        lines += ["        return False"]
    else:
        lines += ["    if len(args):", "        return False"]
    for i, (name, param) in enumerate(zip(names, params, strict=True)):
        if param.kind == POINTER:
            lines += [f"    t = type({name})", "    if t is Buffer:", f"        {name} = {name}.ptr"]
            lines += ["    elif t is not int:", f"        {name} = cai_address({name})", f"        if {name} is None:"]
            lines += ["            return False"]
        else:
            env[f"accepted{i}"] = _accepted(param.kind)  # type: ignore[arg-type]
            lines += [f"    if type({name}) not in accepted{i}:", "        return False"]
    lines += ["    try:", f"        pack_into(into, 0{''.join(', ' + n for n in names)})", "    except errors:"]
    lines += ["        return False", "    return True"]
    exec("\n".join(lines), env)  # generated from indices only, see the docstring
    pack: Callable[[Sequence[Any]], bool] = env["pack"]
    return pack


class _Layout:
    """The packed-argument layout of one kernel signature, one per thread that launches the kernel.

    The arguments sit at 8-byte slots of one ctypes buffer; the address table points at them. :attr:`pack`
    (see :func:`_packer`) fills the buffer for one launch or returns False, and :func:`pack_args` then packs
    the arguments or raises the :class:`LaunchArgumentError` naming the parameter. Not for signatures with
    a parameter of unknown type (the argument decides its size).
    """

    def __init__(self, params: list[Param]) -> None:
        self.values = ctypes.create_string_buffer(max(8 * len(params), 8))
        base = ctypes.addressof(self.values)
        self.table = (ctypes.c_uint64 * max(len(params), 1))(*(base + 8 * i for i in range(len(params))))
        self.table_address = ctypes.addressof(self.table)
        self.pack = _packer(params, self.values)

    @staticmethod
    def possible(params: list[Param] | None) -> bool:
        return params is not None and all(p.kind == POINTER or str(p.kind) in _STRUCT_CODES for p in params)


class _NoLayout:
    """The layout of a signature :class:`_Layout` cannot pack (a parameter of unknown type): :func:`pack_args` packs
    every launch's arguments."""

    table_address = 0

    @staticmethod
    def pack(args: Sequence[Any]) -> bool:
        return False


_NO_LAYOUT = _NoLayout()


@dataclass(frozen=True)
class LaunchTarget:
    """Where one kernel's launches go, resolved on its first launch and reused by every later one.

    ``observers`` is the context's live list of observers: ``before_launch`` is called before a launch
    only while the list is not empty (most launches have nobody to tell).
    """

    func: FunctionHandle  # the loaded CUfunction
    stream: StreamHandle  # the default stream
    launch: Callable[[FunctionHandle, tuple[int, int, int], tuple[int, int, int], int, StreamHandle, int], None]
    """The driver's launch (``DriverBackend.launch_kernel``)."""
    observers: Sequence[Any]
    before_launch: Callable[[Any], None]


class LaunchContext(Protocol):
    """What launches need: where a kernel's launches go (its loaded function, the default stream, the driver
    call, and who is told before each launch)."""

    def launch_target(self, compiled: CompiledKernel) -> LaunchTarget:
        """The :class:`LaunchTarget` of ``compiled`` on this context (loads its module if needed)."""


class Kernel:
    """A compiled kernel bound to a launch context (a test's workspace or the CUDA session)."""

    def __init__(self, ctx: LaunchContext, compiled: CompiledKernel, params: list[Param] | None) -> None:
        self._ctx = ctx
        self.compiled = compiled
        self.params = params
        self._fast = _Layout.possible(params)
        self._layouts = threading.local()  # one argument buffer per launching thread: no lock on the hot path
        self._shapes: dict[tuple[int, ...], tuple[int, int, int]] = {}  # launch shapes already checked
        self._target: LaunchTarget | None = None

    def _shape(self, value: int | Sequence[int], what: str) -> tuple[int, int, int]:
        """``value`` as a checked dim3; tuples of ints checked once per kernel (the same shape is the common case)."""
        __tracebackhide__ = hide_for_user_errors
        if type(value) is tuple:
            known = self._shapes.get(value)
            if known is not None:
                for d in value:  # equal is not enough: (2.0, 3) == (2, 3), and a float is refused
                    if type(d) is not int:
                        break
                else:
                    return known
        dims = _dim3(value, f"kernel {self.name!r} {what}")
        if type(value) is tuple and len(self._shapes) < 64 and all(type(d) is int for d in value):
            self._shapes[value] = dims
        return dims

    @property
    def name(self) -> str:
        return self.compiled.name

    def __repr__(self) -> str:
        return f"<Kernel {self.name} {self.compiled.arch}{' cached' if self.compiled.from_cache else ''}>"

    def launch(
        self,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[Any] = (),
        shared_mem: int = 0,
        stream: Any = None,
    ) -> None:
        """Queue the kernel on jetmem's stream (or ``stream``); returns without waiting.

        The arguments are checked against the kernel's parameters before anything is queued; a wrong
        count, type or value raises :class:`LaunchArgumentError` naming the parameter.
        """
        __tracebackhide__ = hide_for_user_errors  # a wrong argument shows its message and the test's line
        g = (grid, 1, 1) if type(grid) is int and grid > 0 else self._shape(grid, "grid")
        b = (block, 1, 1) if type(block) is int and block > 0 else self._shape(block, "block")
        target = self._target or self._resolve()
        try:
            layout = self._layouts.layout
        except AttributeError:  # this thread's first launch of the kernel
            layout = self._layouts.layout = self._new_layout()
        if layout.pack(args):  # cuLaunchKernel copies the arguments before it returns
            params_ptr, keep = layout.table_address, None
        else:  # packs them, or says what is wrong with them
            keep = pack_args(self.name, args, self.params)
            params_ptr = keep[1].ctypes.data
        queue = target.stream if stream is None else stream
        if target.observers:
            target.before_launch(queue)
        target.launch(target.func, g, b, shared_mem, queue, params_ptr)
        del keep  # the packed values lived until cuLaunchKernel copied them

    def _new_layout(self) -> _Layout | _NoLayout:
        """The argument layout of a launching thread (one per thread: no lock on the hot path)."""
        return _Layout(self.params) if self._fast else _NO_LAYOUT  # type: ignore[arg-type]

    def _resolve(self) -> LaunchTarget:
        """The launch target, asked of the context on the first launch and kept."""
        self._target = self._ctx.launch_target(self.compiled)
        return self._target
