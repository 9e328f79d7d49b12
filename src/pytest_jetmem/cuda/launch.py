"""Kernel launches from Python: the kernel's signature read from its source, arguments packed for cuLaunchKernel."""

from __future__ import annotations

import ctypes
import math
import re
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.compiler import CompiledKernel
from pytest_jetmem.cuda.driver import FunctionHandle, StreamHandle
from pytest_jetmem.errors import LaunchArgumentError

POINTER = "pointer"

# C parameter types -> numpy dtypes (LP64, as on Linux aarch64 and x86-64).
C_TYPES: dict[str, np.dtype] = {
    k: np.dtype(v)
    for k, v in {
        "float": "float32",
        "double": "float64",
        "__half": "float16",
        "half": "float16",
        "bool": "bool",
        "char": "int8",
        "signed char": "int8",
        "unsigned char": "uint8",
        "short": "int16",
        "unsigned short": "uint16",
        "int": "int32",
        "signed": "int32",
        "signed int": "int32",
        "unsigned": "uint32",
        "unsigned int": "uint32",
        "long": "int64",
        "unsigned long": "uint64",
        "long long": "int64",
        "unsigned long long": "uint64",
        "size_t": "uint64",
        "ptrdiff_t": "int64",
        "int8_t": "int8",
        "uint8_t": "uint8",
        "int16_t": "int16",
        "uint16_t": "uint16",
        "int32_t": "int32",
        "uint32_t": "uint32",
        "int64_t": "int64",
        "uint64_t": "uint64",
    }.items()
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "restrict", "__restrict", "struct"}
_TYPE_WORDS = {w for k in C_TYPES for w in k.split()} | {"void"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name and a numpy dtype, ``POINTER``, or None when unknown; ``ctype``: its C
    type as declared, template arguments substituted (``const float*``; "" where not read from a source)."""

    name: str
    kind: np.dtype | str | None
    ctype: str = field(default="", compare=False)  # what the kernel expects; equal parameters pass alike

    def declared(self) -> str:
        """``const float* x`` (the parameter as declared), or its name where the type was not read."""
        return f"{self.ctype} {self.name}" if self.ctype else self.name

    def describe(self) -> str:
        if self.kind is None:
            return f"{self.name} (type not known: pass a numpy scalar)"
        return f"{self.name} ({'a pointer' if self.kind == POINTER else self.kind})"


def parse_signature(source: str, name: str) -> list[Param] | None:
    """The parameters of ``__global__ ... name(...)`` in ``source``, or None if it cannot be read.

    ``name`` may be a C++ name expression (``saxpy<float>``, ``ns::k<float, 4>``): the template's
    parameters are substituted with the expression's arguments (or their defaults), so ``T* x, T a``
    of ``saxpy<float>`` read as a pointer and a float32. A parameter whose type is not a known scalar
    or a pointer (a struct, a template type left open) has kind None.
    """
    base, targs = _split_name(name)
    if base is None:
        return None
    code = _strip_comments(source)
    m = re.search(rf"__global__[^;{{]*?\b{re.escape(base)}\s*\(", code)
    if not m:
        return None
    body = _balanced(code, m.end() - 1, "(", ")")
    if body is None:
        return None
    substitutions: dict[str, str] = {}
    if targs is not None:
        tparams = _template_params(code, m.start())
        if tparams is None or len(targs) > len(tparams):
            return None
        for i, (pname, default) in enumerate(tparams):
            value = targs[i] if i < len(targs) else default
            if value is None:
                return None
            substitutions[pname] = value
    body = body.strip()
    if not body or body == "void":
        return []
    params = []
    for i, raw in enumerate(_split_top(body)):
        text = raw.split("=")[0].strip()
        for tname, value in substitutions.items():
            text = re.sub(rf"\b{re.escape(tname)}\b", f" {value} ", text)
        pointer = "*" in text or "&" in text
        templated = "<" in text
        text = re.sub(r"(?:::)?\b(?:cuda\s*::\s*)?std\s*::\s*", " ", text)  # cuda::std::size_t, std::int32_t
        tokens = [t for t in re.split(r"[\s*&]+", re.sub(r"<.*>", " ", text)) if t and t not in _QUALIFIERS]
        named = len(tokens) >= 2 and tokens[-1] not in _TYPE_WORDS
        pname = tokens[-1] if named else f"arg{i}"
        base_type = " ".join(tokens[:-1] if named else tokens)
        kind: np.dtype | str | None = POINTER if pointer else (None if templated else C_TYPES.get(base_type))
        params.append(Param(pname, kind, _ctype(text, pname if named else "")))
    return params


def _ctype(text: str, pname: str) -> str:
    """A parameter's declaration ``text`` without its name, spaced as C is usually written (``const float*``)."""
    if pname:
        text = re.sub(rf"\b{re.escape(pname)}\s*$", "", text.strip())
    text = re.sub(r"([*&])\s+(?=[*&])", r"\1", re.sub(r"\s+", " ", text))
    return re.sub(r"\s*([*&]+)\s*", r"\1 ", text).strip()


def _split_name(name: str) -> tuple[str | None, list[str] | None]:
    """``ns::saxpy<float, 4>`` -> (``saxpy``, [``float``, ``4``]); a plain name has no argument list (None)."""
    text = name.strip()
    args: list[str] | None = None
    if text.endswith(">") and "<" in text:
        open_at = text.index("<")
        inner = _balanced(text, open_at, "<", ">")
        if inner is None:
            return None, None
        args = [a.strip() for a in _split_top(inner)] if inner.strip() else []
        text = text[:open_at]
    ident = text.split("::")[-1].strip()
    return (ident if re.fullmatch(r"[A-Za-z_]\w*", ident) else None), args


def _balanced(text: str, open_at: int, opening: str, closing: str) -> str | None:
    """The text between ``text[open_at]`` (an opening bracket) and its matching closing one."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None


def _split_top(text: str) -> list[str]:
    """Split at commas outside ``<>``, ``()``, ``[]`` and ``{}``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _template_params(code: str, global_at: int) -> list[tuple[str, str | None]] | None:
    """(name, default) of each parameter of the ``template <...>`` heading the declaration at ``global_at``."""
    head_start = max(code.rfind(";", 0, global_at), code.rfind("}", 0, global_at)) + 1
    head = code[head_start:global_at]
    t = re.search(r"\btemplate\s*<", head)
    if not t:
        return None
    inner = _balanced(head, t.end() - 1, "<", ">")
    if inner is None:
        return None
    out: list[tuple[str, str | None]] = []
    for raw in _split_top(inner):
        decl, _, default = raw.partition("=")
        if "..." in decl:
            return None  # a parameter pack: the arguments cannot be matched one to one
        words = re.findall(r"[A-Za-z_]\w*", decl)
        if len(words) < 2:
            return None
        out.append((words[-1], default.strip() or None))
    return out


def _strip_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)


def pack_args(kernel_name: str, args: Sequence[Any], params: list[Param] | None) -> tuple[list[np.ndarray], np.ndarray]:
    """Turn launch arguments into the array of argument addresses cuLaunchKernel takes.

    Buffers and objects with ``__cuda_array_interface__`` pass their device address; numpy scalars
    pass their own type; Python numbers take the declared parameter type (range checked). Returns
    the value holders (keep them alive until the launch returns) and the address array.
    """
    if params is not None and len(args) != len(params):
        raise LaunchArgumentError(
            f"kernel {kernel_name!r} takes {len(params)} arguments "
            f"({', '.join(p.describe() for p in params)}), got {len(args)}"
        )
    holders = []
    for i, value in enumerate(args):
        param = params[i] if params is not None else None
        holders.append(_pack_one(kernel_name, i, value, param))
    addresses = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
    return holders, addresses


def _pack_one(kernel_name: str, index: int, value: Any, param: Param | None) -> np.ndarray:
    where = f"kernel {kernel_name!r} argument {index}" + (f" ({param.name})" if param else "")
    kind = param.kind if param else None
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        if kind not in (None, POINTER):
            raise LaunchArgumentError(f"{where}: expected {kind}, got a device buffer")
        return np.array([cai["data"][0]], dtype=np.uint64)
    if isinstance(value, np.generic):
        if isinstance(kind, np.dtype) and value.dtype != kind:
            raise LaunchArgumentError(f"{where}: expected {kind}, got numpy {value.dtype} {value!r}")
        if kind == POINTER:
            raise LaunchArgumentError(_pointer_expected(where, param, f"numpy {value.dtype} {value}"))
        return np.array([value], dtype=value.dtype)
    if isinstance(value, (bool, int, float)):
        if kind == POINTER and isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < 2**64:
                raise LaunchArgumentError(f"{where}: {value} is out of range for a pointer")
            return np.array([value], dtype=np.uint64)  # a raw device address
        if kind == POINTER:
            raise LaunchArgumentError(_pointer_expected(where, param, f"{type(value).__name__} {value!r}"))
        if not isinstance(kind, np.dtype):
            raise LaunchArgumentError(
                f"{where}: a plain Python {type(value).__name__} needs a declared parameter type; "
                "pass a numpy scalar such as np.int32(...) or np.float32(...)"
            )
        return _typed(where, value, kind)
    raise LaunchArgumentError(f"{where}: cannot pass {type(value).__name__} {value!r} to a kernel")


def _pointer_expected(where: str, param: Param | None, got: str) -> str:
    """The error for a value that is no pointer passed for a pointer parameter: what a pointer can be."""
    declared = f" for {param.declared()}" if param is not None else ""
    return (
        f"{where}: expected a pointer{declared}: a jetmem buffer, a device array (__cuda_array_interface__) "
        f"or an int device pointer; got {got}"
    )


def _typed(where: str, value: bool | int | float, dtype: np.dtype) -> np.ndarray:
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
    """The device address of an object with ``__cuda_array_interface__``, or None."""
    cai = getattr(value, "__cuda_array_interface__", None)
    return None if cai is None else cai["data"][0]


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
        g = (grid, 1, 1) if type(grid) is int and grid > 0 else self._shape(grid, "grid")
        b = (block, 1, 1) if type(block) is int and block > 0 else self._shape(block, "block")
        target = self._target
        if target is None:
            target = self._target = self._ctx.launch_target(self.compiled)
        if stream is None:
            stream = target.stream
        if self._fast:
            try:
                layout = self._layouts.layout
            except AttributeError:
                layout = self._layouts.layout = _Layout(self.params)  # type: ignore[arg-type]
            if layout.pack(args):  # cuLaunchKernel copies the arguments before it returns
                if target.observers:
                    target.before_launch(stream)
                target.launch(target.func, g, b, shared_mem, stream, layout.table_address)
                return
        holders, addresses = pack_args(self.name, args, self.params)
        if target.observers:
            target.before_launch(stream)
        target.launch(target.func, g, b, shared_mem, stream, addresses.ctypes.data)
        del holders
