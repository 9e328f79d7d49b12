"""Kernel launches from Python: the kernel's signature read from its source, arguments packed for cuLaunchKernel."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pytest_jetmem.cuda.compiler import CompiledKernel
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
    """One kernel parameter: its name and a numpy dtype, ``POINTER``, or None when unknown."""

    name: str
    kind: np.dtype | str | None

    def describe(self) -> str:
        if self.kind is None:
            return f"{self.name} (type not known: pass a numpy scalar)"
        return f"{self.name} ({'a pointer' if self.kind == POINTER else self.kind})"


def parse_signature(source: str, name: str) -> list[Param] | None:
    """The parameters of ``__global__ ... name(...)`` in ``source``, or None if it cannot be read."""
    m = re.search(rf"__global__[^;{{]*?\b{re.escape(name)}\s*\(([^)]*)\)", _strip_comments(source))
    if not m:
        return None
    body = m.group(1).strip()
    if not body or body == "void":
        return []
    params = []
    for i, raw in enumerate(body.split(",")):
        text = raw.split("=")[0].strip()
        if "<" in text:  # templates: leave it to the caller
            return None
        pointer = "*" in text or "&" in text
        tokens = [t for t in re.split(r"[\s*&]+", text) if t and t not in _QUALIFIERS]
        named = len(tokens) >= 2 and tokens[-1] not in _TYPE_WORDS
        pname = tokens[-1] if named else f"arg{i}"
        base = " ".join(tokens[:-1] if named else tokens)
        params.append(Param(pname, POINTER if pointer else C_TYPES.get(base)))
    return params


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
            raise LaunchArgumentError(f"{where}: expected a pointer (a buffer), got numpy {value.dtype}")
        return np.array([value], dtype=value.dtype)
    if isinstance(value, (bool, int, float)):
        if kind == POINTER and isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < 2**64:
                raise LaunchArgumentError(f"{where}: {value} is out of range for a pointer")
            return np.array([value], dtype=np.uint64)  # a raw device address
        if not isinstance(kind, np.dtype):
            raise LaunchArgumentError(
                f"{where}: a plain Python {type(value).__name__} needs a declared parameter type; "
                "pass a numpy scalar such as np.int32(...) or np.float32(...)"
            )
        return _typed(where, value, kind)
    raise LaunchArgumentError(f"{where}: cannot pass {type(value).__name__} {value!r} to a kernel")


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


class LaunchContext(Protocol):
    """What a launch needs: the driver, a default stream, loaded functions, and a hook before each launch."""

    @property
    def drv(self) -> Any: ...

    @property
    def stream(self) -> Any: ...

    def function(self, compiled: CompiledKernel) -> Any:
        """The loaded ``CUfunction`` of ``compiled``."""

    def before_launch(self, stream: Any) -> None:
        """Called with the target stream right before ``cuLaunchKernel``."""


class Kernel:
    """A compiled kernel bound to a launch context (a test's workspace or the CUDA session)."""

    def __init__(self, ctx: LaunchContext, compiled: CompiledKernel, params: list[Param] | None) -> None:
        self._ctx = ctx
        self.compiled = compiled
        self.params = params

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
        """Queue the kernel on jetmem's stream (or ``stream``); returns without waiting."""
        g, b = _dim3(grid, f"kernel {self.name!r} grid"), _dim3(block, f"kernel {self.name!r} block")
        holders, addresses = pack_args(self.name, args, self.params)
        ctx = self._ctx
        func = ctx.function(self.compiled)
        target = stream if stream is not None else ctx.stream
        ctx.before_launch(target)
        ctx.drv.launch_kernel(func, g, b, shared_mem, target, addresses.ctypes.data)
        del holders
