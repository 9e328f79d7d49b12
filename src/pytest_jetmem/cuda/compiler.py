"""NVRTC compilation to CUBIN with a disk cache keyed by everything that makes the CUBIN.

The key: the source, the name, the options, the architecture, the NVRTC version, the include directories
(the user's and the CUDA headers found by :func:`pytest_jetmem.cuda.driver.find_cuda_headers`) and the
content of every user header the source includes. Runs without a GPU (NVRTC needs none), so CI
compiles every kernel for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.cuda import driver
from pytest_jetmem.errors import CompileError, hide_for_user_errors

CACHE_FORMAT = 2
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_MISSING_HEADER = re.compile(r'(?:could not|cannot) open source file "([^"]+)"')
#: What NVRTC's log says when it does not compile for the architecture asked for (NVRTC 12 and 13).
_ARCH_REJECTED = "invalid value for --gpu-architecture"
#: ``options`` of :func:`compile_kernel`: one string (split like a shell does) or a sequence of strings.
Options = str | Sequence[str]
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
    include_dirs: tuple[str, ...] = ()


def default_cache_dir() -> Path:
    """``$JETMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-jetmem/kernels``, else ``~/.cache/...``."""
    if os.environ.get("JETMEM_CACHE_DIR"):
        return Path(os.environ["JETMEM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-jetmem" / "kernels"


def normalize_options(options: Options | None, what: str = "options") -> tuple[str, ...]:
    """``options`` as a tuple of NVRTC options: a string is split as a shell would (``"-lineinfo -DN=4"``).

    Raises TypeError naming ``what`` for anything else (a list holding a non-string, a number, bytes).
    """
    if options is None:
        return ()
    if isinstance(options, str):
        return tuple(shlex.split(options))
    if isinstance(options, (bytes, bytearray)) or not isinstance(options, Sequence):
        raise TypeError(f"{what}: expected a string or a sequence of strings, got {options!r}")
    bad = [o for o in options if not isinstance(o, str)]
    if bad:
        raise TypeError(f"{what}: every option must be a string, got {bad[0]!r} in {list(options)!r}")
    return tuple(options)


def normalize_include_dirs(
    include_dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
) -> tuple[str, ...]:
    """User include directories as absolute paths, in order; a missing directory is a ValueError naming it."""
    if include_dirs is None:
        return ()
    items = [include_dirs] if isinstance(include_dirs, (str, os.PathLike)) else list(include_dirs)
    out = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"include_dirs: expected directory paths, got {item!r}")
        path = Path(item).expanduser().absolute()
        if not path.is_dir():
            raise ValueError(f"include_dirs: {str(item)!r} is not a directory")
        out.append(str(path))
    return tuple(dict.fromkeys(out))


def user_headers(source: str, include_dirs: Sequence[str]) -> dict[str, str]:
    """The user headers ``source`` includes, directly or through other user headers: path -> sha256 of content.

    A header counts as the user's when it is found in ``include_dirs`` (a quoted include of a user header
    is also looked up next to that header). Headers found nowhere there (the CUDA headers, NVRTC's
    built-ins) are not listed: the CUDA headers are keyed by :attr:`HeaderSearch.fingerprint`. Includes
    in ``#if`` branches are listed too, which can only cost a recompile.
    """
    found: dict[str, str] = {}
    pending: list[tuple[str, str | None]] = [(source, None)]
    while pending:
        text, here = pending.pop()
        for quote, name in _INCLUDE.findall(text):
            where = ([here] if quote == '"' and here else []) + list(include_dirs)
            for directory in where:
                path = os.path.join(directory, name)
                if os.path.isfile(path):
                    real = os.path.realpath(path)
                    if real not in found:
                        data = Path(real).read_bytes()
                        found[real] = hashlib.sha256(data).hexdigest()
                        pending.append((data.decode(errors="replace"), os.path.dirname(real)))
                    break
    return dict(sorted(found.items()))


def cache_key(
    source: str,
    name: str,
    options: tuple[str, ...],
    arch: str,
    nvrtc_version: tuple[int, int],
    include_dirs: Sequence[str] = (),
    cuda_headers: str = "",
    headers: dict[str, str] | None = None,
) -> str:
    """The cache key of one compilation (a hex sha256).

    ``include_dirs``: every ``-I`` directory in order; ``cuda_headers``: the CUDA headers' fingerprint;
    ``headers``: the included user headers' digests (:func:`user_headers`).
    """
    payload = json.dumps(
        {
            "format": CACHE_FORMAT,
            "source": source,
            "name": name,
            "options": list(options),
            "arch": arch,
            "nvrtc": list(nvrtc_version),
            "include_dirs": list(include_dirs),
            "cuda_headers": cuda_headers,
            "headers": headers or {},
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
    options: Options = (),
    cache: KernelCache | None = None,
    drv: driver.NvrtcBackend | None = None,
    filename: str | None = None,
    include_dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = (),
    cuda_headers: driver.HeaderSearch | None = None,
) -> CompiledKernel:
    """Compile ``name`` from ``source`` for ``arch`` (``sm_87``), or take it from the cache.

    ``source`` is the CUDA source text (a ``str``): to compile a file, pass ``Path(...).read_text()``; a
    ``Path``, or a one-line ``str`` naming a ``.cu``/``.cuh`` file, is an error that says so (:func:`check_source`).
    ``name`` is an ``extern "C"`` function name, or a C++ name expression (``scale<float>``)
    that NVRTC lowers to its mangled symbol. ``options``: a string (split as a shell would) or a
    sequence of NVRTC options. ``include_dirs``: the user's include directories, searched first
    (``-I``, in order), then the CUDA headers (``cuda_headers``, default: found by
    :func:`~pytest_jetmem.cuda.driver.find_cuda_headers`). A header found nowhere is a
    :class:`CompileError` that says where it was looked for.
    """
    __tracebackhide__ = hide_for_user_errors  # pytest shows the message and the caller's frames
    check_source(source, name)
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise ValueError(f"arch: expected 'sm_XY', got {arch!r}")
    opts = normalize_options(options)
    user_dirs = normalize_include_dirs(include_dirs)
    drv = drv or driver.get()
    search = cuda_headers if cuda_headers is not None else driver.find_cuda_headers()
    version = drv.nvrtc_version()
    all_dirs = (*user_dirs, *search.paths)
    key = cache_key(source, name, opts, arch, version, all_dirs, search.fingerprint, user_headers(source, user_dirs))
    hit = cache.get(key) if cache is not None else None
    if hit is not None:
        cubin, meta = hit
        log = meta.get("log", "")
        return CompiledKernel(name, meta["symbol"], arch, opts, version, cubin, log, key, True, all_dirs)
    filename = filename or f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}.cu"
    build = _Build(drv, source, name, arch, filename, user_dirs, search)
    cubin, log, symbol = build.run((*opts, *(f"-I{d}" for d in all_dirs)))
    if cache is not None:
        cache.put(key, cubin, {"symbol": symbol, "log": log, "name": name, "arch": arch})
    return CompiledKernel(name, symbol, arch, opts, version, cubin, log, key, False, all_dirs)


@dataclass(frozen=True)
class _Build:
    """One NVRTC compile of ``name`` for ``arch``, and what its error message needs to explain a failure."""

    drv: driver.NvrtcBackend
    source: str
    name: str
    arch: str
    filename: str
    user_dirs: tuple[str, ...]
    search: driver.HeaderSearch

    def run(self, options: tuple[str, ...]) -> tuple[bytes, str, str]:
        """(CUBIN, log, symbol) of the kernel compiled with ``options`` (the architecture is added). Always a name
        expression: NVRTC returns the symbol to look up, plain for ``extern "C"`` kernels, mangled for C++ ones."""
        __tracebackhide__ = hide_for_user_errors
        try:
            cubin, log, lowered = self.drv.nvrtc_compile(
                self.source, self.filename, (f"--gpu-architecture={self.arch}", *options), (self.name,)
            )
        except CompileError as exc:
            raise CompileError(self.failure(str(exc))) from None
        return cubin, log, lowered.get(self.name, self.name)

    def failure(self, error: str) -> str:
        """NVRTC's message, then what to do about a rejected architecture or a header it could not open."""
        message = f"kernel {self.name!r} failed to compile for {self.arch}: {error}"
        if _ARCH_REJECTED in error:
            message += "\n" + _arch_help(self.arch, self.drv.nvrtc_version(), self.drv)
        missing = _MISSING_HEADER.findall(error)
        if missing:
            message += "\n" + _header_help(missing, self.user_dirs, self.search)
        return message


#: A one-line ``source`` that names a CUDA file rather than holding its text.
_PATH_LIKE = re.compile(r"[^\n]*\.(cu|cuh)", re.IGNORECASE)


def check_source(source: object, name: str) -> None:
    """Refuse what is not CUDA source text declaring ``name``, saying how to compile a file: a TypeError for a
    ``Path`` (or any non-``str``); a CompileError for a one-line ``str`` ending in ``.cu``/``.cuh`` without
    ``__global__`` (a file name), and for a plain ``name`` that no ``__global__`` function of the source has."""
    __tracebackhide__ = hide_for_user_errors
    if isinstance(source, str):
        text = source.strip()
        if _PATH_LIKE.fullmatch(text) and "__global__" not in text:
            raise CompileError(f"kernel {name!r}: the source is {source!r}, {_path_note(text)}")
        if _IDENT.match(name) and not _declares(source, name):
            raise CompileError(
                f"kernel {name!r}: no __global__ function of that name in the source "
                "(or pass a C++ name expression such as 'fn<float>')"
            )
        return
    if isinstance(source, os.PathLike):
        raise TypeError(
            f"kernel {name!r}: compile takes the CUDA source text (a str), got the path {source!r}; to compile a "
            f"file, pass its text: compile(Path({os.fspath(source)!r}).read_text(), {name!r})"
        )
    raise TypeError(f"kernel {name!r}: compile takes the CUDA source text (a str), got {type(source).__name__}")


def _path_note(text: str) -> str:
    """Why a one-line source naming a .cu file is no source, and how to compile the file."""
    where = "a file here" if os.path.isfile(text) else f"no file here ({os.getcwd()}), but a file name all the same"
    return (
        f"which names {where}, not CUDA source text: compile takes the source itself; to compile a file, pass its "
        f"text: compile(Path({text!r}).read_text(), ...)"
    )


def _arch_help(arch: str, version: tuple[int, int], drv: driver.NvrtcBackend) -> str:
    """Why NVRTC rejected ``arch`` (the log said so): the architectures it compiles for, and for one that NVRTC 13
    dropped (sm_50 to sm_72: Xavier), that CUDA 12's NVRTC compiles it."""
    try:
        known = ", ".join(f"sm_{a}" for a in drv.nvrtc_supported_archs())
    except Exception:  # a backend that cannot list them
        known = ""
    text = f"NVRTC {version[0]}.{version[1]} does not compile for {arch}" + (
        f"; it compiles for {known}" if known else ""
    )
    number = int(re.sub(r"\D", "", arch))
    if version >= (13, 0) and 50 <= number <= 72:
        text += "; CUDA 12's NVRTC does: install pytest-jetmem[cu12]"
    return text


def _header_help(missing: list[str], user_dirs: tuple[str, ...], search: driver.HeaderSearch) -> str:
    """Where a header NVRTC could not open was looked for, and how to add a place."""
    headers = ", ".join(repr(m) for m in dict.fromkeys(missing))
    user = ", ".join(user_dirs) if user_dirs else "none given"
    cuda = ", ".join(f"{d} ({via})" for d, via in search.dirs) or "none found"
    return (
        f"header {headers} not found. Searched, in order: your include directories ({user}); "
        f"the CUDA headers ({cuda}). CUDA header discovery looked at: {search.describe()}. "
        "Pass include_dirs= to compile() (or the ini key jetmem_include_dirs) for your own headers; "
        "for the CUDA headers install pytest-jetmem[cu12] or [cu13], or set CUDA_HOME"
    )


def _declares(source: str, name: str) -> bool:
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    return re.search(rf"__global__[^;{{]*\b{re.escape(name)}\s*\(", code) is not None
