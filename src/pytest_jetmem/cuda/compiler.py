"""NVRTC compilation to CUBIN with a disk cache keyed by source, options, architecture and NVRTC version.

Runs without a GPU (NVRTC needs none), so CI compiles every bundled kernel for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.cuda import driver
from pytest_jetmem.errors import CompileError

CACHE_FORMAT = 1
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class CompiledKernel:
    """A compiled kernel: its CUBIN and the symbol to look up in the module."""

    name: str
    symbol: str
    arch: str
    options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    cubin: bytes
    log: str
    key: str
    from_cache: bool


def default_cache_dir() -> Path:
    """``$JETMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-jetmem/kernels``, else ``~/.cache/...``."""
    if os.environ.get("JETMEM_CACHE_DIR"):
        return Path(os.environ["JETMEM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-jetmem" / "kernels"


def cache_key(source: str, name: str, options: tuple[str, ...], arch: str, nvrtc_version: tuple[int, int]) -> str:
    payload = json.dumps(
        {
            "format": CACHE_FORMAT,
            "source": source,
            "name": name,
            "options": list(options),
            "arch": arch,
            "nvrtc": list(nvrtc_version),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class KernelCache:
    """CUBINs on disk, ``<key>.cubin`` with a ``<key>.json`` sidecar; writes are atomic."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        try:
            meta = json.loads((self.directory / f"{key}.json").read_text())
            cubin = (self.directory / f"{key}.cubin").read_bytes()
        except (OSError, ValueError):
            self.misses += 1
            return None
        if (
            not isinstance(meta, dict)
            or not isinstance(meta.get("symbol"), str)
            or len(cubin) != meta.get("size")
            or hashlib.sha256(cubin).hexdigest() != meta.get("sha256")
        ):
            self.misses += 1
            return None
        self.hits += 1
        return cubin, meta

    def put(self, key: str, cubin: bytes, meta: dict[str, Any]) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(self.directory / f"{key}.cubin", cubin)
            sidecar = {**meta, "size": len(cubin), "sha256": hashlib.sha256(cubin).hexdigest()}
            write_atomic(self.directory / f"{key}.json", json.dumps(sidecar).encode())
        except OSError:
            pass  # a read-only cache costs a recompile next time, nothing more


def compile_kernel(
    source: str,
    name: str,
    arch: str,
    options: tuple[str, ...] | list[str] = (),
    cache: KernelCache | None = None,
    drv: Any = None,
    filename: str | None = None,
) -> CompiledKernel:
    """Compile ``name`` from ``source`` for ``arch`` (``sm_87``), or take it from the cache.

    ``name`` is an ``extern "C"`` function name, or a C++ name expression (``scale<float>``)
    that NVRTC lowers to its mangled symbol.
    """
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise ValueError(f"arch: expected 'sm_XY', got {arch!r}")
    drv = drv or driver.get()
    options = tuple(options)
    version = drv.nvrtc_version()
    key = cache_key(source, name, options, arch, version)
    filename = filename or f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}.cu"
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            cubin, meta = hit
            return CompiledKernel(name, meta["symbol"], arch, options, version, cubin, meta.get("log", ""), key, True)
    full_options = (f"--gpu-architecture={arch}", *options)
    if _IDENT.match(name) and not _declares(source, name):
        raise CompileError(
            f"kernel {name!r}: no __global__ function of that name in the source "
            "(or pass a C++ name expression such as 'fn<float>')"
        )
    try:
        # Always a name expression: NVRTC returns the symbol to look up, plain for extern "C"
        # kernels and mangled for C++ ones.
        cubin, log, lowered = drv.nvrtc_compile(source, filename, full_options, (name,))
    except CompileError as exc:
        raise CompileError(f"kernel {name!r} failed to compile: {exc}") from None
    symbol = lowered.get(name, name)
    if cache is not None:
        cache.put(key, cubin, {"symbol": symbol, "log": log, "name": name, "arch": arch})
    return CompiledKernel(name, symbol, arch, options, version, cubin, log, key, False)


def _declares(source: str, name: str) -> bool:
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    return re.search(rf"__global__[^;{{]*\b{re.escape(name)}\s*\(", code) is not None
