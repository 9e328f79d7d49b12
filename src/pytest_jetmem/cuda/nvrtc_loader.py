"""Loading NVRTC from a CUDA toolkit where the wheel's library does not load (the fallback of
:func:`pytest_jetmem.cuda.driver.load_nvrtc`), and what to tell a user who has none.

Nothing here imports ``cuda``: the driver module asks ``cuda.pathfinder`` first and calls :func:`load_toolkit_nvrtc`
only where that failed; the library loaded here process-wide is then the one cuda-bindings finds already loaded.

Hand-written, not cuda.pathfinder alone: pathfinder raises where the first NVRTC it finds does not load (the wheel's
server build on L4T), and the cuda-bindings this package allows (12.6 on) may come without it.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_jetmem.errors import CudaUnavailable

#: (how a toolkit root was named, the root; "" where its variable is unset), in search order.
Roots = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class NvrtcLibrary:
    """The NVRTC library of this process: its path, how it was found, and why the wheel's was not used."""

    path: str
    found_via: str
    wheel_error: str = ""  # set where the wheel's library failed to load and a toolkit's is used instead

    def describe(self) -> str:
        """For the session header: ``/path/libnvrtc.so.13 (site-packages)``, and the fallback's reason."""
        text = f"{self.path} ({self.found_via})"
        if self.wheel_error:
            text += f"; the wheel's NVRTC did not load: {self.wheel_error}"
        return text


def toolkit_roots(cuda_home: str, cuda_path: str, system_cuda: str) -> list[tuple[str, str]]:
    """(how named, root) of the CUDA toolkits to look in, in order; a root is "" where its variable is unset."""
    return [("$CUDA_HOME", cuda_home), ("$CUDA_PATH", cuda_path), (system_cuda, system_cuda)]


def nvrtc_soname(bindings_major: int) -> str:
    """The NVRTC library cuda-bindings ``bindings_major`` loads (``libnvrtc.so.13``; either where unknown)."""
    return f"libnvrtc.so.{bindings_major}" if bindings_major else "libnvrtc.so.13 or libnvrtc.so.12"


def nvrtc_install_hint(bindings_major: int) -> str:
    """How to get the NVRTC of cuda-bindings ``bindings_major``: the matching extra, or a CUDA toolkit."""
    if bindings_major == 12:
        extras = "pytest-jetmem[cu12] (or pytest-jetmem[cu13] for CUDA 13)"
    else:
        extras = "pytest-jetmem[cu13] (or pytest-jetmem[cu12] on JetPack 6)"
    return f"install {extras}, or point CUDA_HOME at a CUDA toolkit"


def _libdirs() -> tuple[str, ...]:
    """Where a toolkit keeps its libraries, relative to its root."""
    return ("lib64", "lib", f"targets/{os.uname().machine}-linux/lib", "targets/sbsa-linux/lib")


def _candidates(root: str, sonames: Sequence[str]) -> list[str]:
    """The NVRTC libraries under a toolkit ``root``, in search order."""
    paths = (os.path.join(root, libdir, soname) for libdir in _libdirs() for soname in sonames)
    return [path for path in paths if os.path.isfile(path)]


def _load(candidate: str) -> str | None:
    """Load ``candidate`` and its builtins process-wide; None, or why it did not load."""
    try:
        ctypes.CDLL(candidate, mode=os.RTLD_GLOBAL)
        _preload_builtins(os.path.dirname(candidate))
    except OSError as exc:
        return f"{candidate}: {exc}"
    return None


def load_toolkit_nvrtc(bindings_major: int, roots: Roots, wheel_error: str) -> NvrtcLibrary:
    """The first ``libnvrtc.so.<major>`` under the toolkit ``roots`` that loads, loaded process-wide.

    ``wheel_error``: why the loader of cuda-bindings failed (a ``DynamicLibNotFoundError`` where it found no
    library at all). CudaUnavailable says where it looked, why each failed and how to get NVRTC.
    """
    sonames = [f"libnvrtc.so.{m}" for m in ([bindings_major] if bindings_major else [13, 12])]
    tried: list[str] = []
    found_one = not wheel_error.startswith("DynamicLibNotFoundError")  # a library found that did not load
    for via, root in roots:
        if not root:
            tried.append(f"{via}: not set")
            continue
        for candidate in _candidates(root, sonames):
            found_one = True
            error = _load(candidate)
            if error is None:
                return NvrtcLibrary(candidate, f"{via}, after the wheel's failed", wheel_error)
            tried.append(error)
        tried.append(f"{via}: no {' or '.join(sonames)} under {root}/{{{','.join(_libdirs())}}}")
    raise CudaUnavailable(_not_loaded(bindings_major, sonames, tried, wheel_error, found_one))


def _not_loaded(bindings_major: int, sonames: list[str], tried: list[str], wheel_error: str, found_one: bool) -> str:
    """Why no NVRTC could be loaded: none found anywhere, or found and failing, and how to get one."""
    hint = nvrtc_install_hint(bindings_major)
    if not found_one:  # nowhere a library: what a pip install without the cu12/cu13 extra leaves
        return (
            f"NVRTC not found ({' or '.join(sonames)}): {hint}; looked in: the NVRTC wheel, conda and the system "
            f"loader (cuda.pathfinder), {'; '.join(tried)}"
        )
    return f"NVRTC could not be loaded ({wheel_error}); also tried: {'; '.join(tried)}. {hint[0].upper()}{hint[1:]}"


def _preload_builtins(libdir: str) -> None:
    """Load the ``libnvrtc-builtins.so.*`` beside a toolkit's NVRTC, process-wide.

    NVRTC opens its builtins library by soname at the first compile. Some NVRTC releases (13.0.48) carry no
    ``$ORIGIN`` run path, so a toolkit outside the loader's search path (a ``CUDA_HOME`` not in ``ld.so.conf``)
    fails there with "failed to open libnvrtc-builtins.so.13.0"; loaded first, the soname is already there.
    """
    for path in sorted(glob.glob(os.path.join(libdir, "libnvrtc-builtins.so.*"))):
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
