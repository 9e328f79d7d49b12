"""The CUDA headers for NVRTC: which include directories were chosen, and where they were looked for.

:func:`pytest_jetmem.cuda.driver.find_cuda_headers` gathers the places (``cuda.pathfinder``'s first, then the
toolkits') and :func:`choose_headers` picks, per component, the first that holds its marker header. Nothing here
imports ``cuda``.

Hand-written, not cuda.pathfinder alone: the cuda-bindings this package allows (12.6 on) may come without it, or with
one older than its CUDA header search (1.2.3); and every place looked at is said where no header is found.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# A header each component's include directory must hold to count as found.
_CUDART_MARKER = "cuda_fp16.h"
_CCCL_MARKER = os.path.join("cuda", "std", "version")
_MARKERS = {"cudart": _CUDART_MARKER, "cccl": _CCCL_MARKER}

#: A place to look: (component, directory, how it was found), or (None, a note, "") for a place with nothing to try.
Place = tuple[str | None, str, str]


@dataclass(frozen=True)
class HeaderSearch:
    """Where NVRTC finds the CUDA headers: the include directories chosen, and every place looked at.

    ``dirs`` are ``(directory, how it was found)`` pairs, in ``-I`` order: the CUDA runtime headers
    (``cuda_fp16.h``, ``cooperative_groups.h``, ...) and CCCL (``cub/``, ``cuda/std/``, ``thrust/``).
    ``looked`` says, for each place in the search order, what was found there (for error messages).
    """

    dirs: tuple[tuple[str, str], ...]
    looked: tuple[str, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.dirs)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of the chosen directories and their marker headers (part of the kernel cache key)."""
        digest = hashlib.sha256()
        for directory, _ in self.dirs:
            digest.update(directory.encode() + b"\0")
            for marker in (_CUDART_MARKER, _CCCL_MARKER):
                with contextlib.suppress(OSError):
                    digest.update(Path(directory, marker).read_bytes())
        return digest.hexdigest()

    def describe(self) -> str:
        """One line per place looked at, in search order."""
        return "; ".join(self.looked) if self.looked else "nowhere (CUDA header discovery was turned off)"


def toolkit_places(roots: Iterable[tuple[str, str]]) -> list[Place]:
    """The include directories of each toolkit root (``roots``: (how named, root), "" where unset), in order."""
    places: list[Place] = []
    for via, root in roots:
        if not root:
            places.append((None, f"{via}: not set", ""))
            continue
        include = os.path.join(root, "include")
        places += [("cudart", include, via), ("cccl", os.path.join(include, "cccl"), via), ("cccl", include, via)]
    return places


def choose_headers(places: Iterable[Place]) -> HeaderSearch:
    """Per component (runtime headers, CCCL), the first of ``places`` that holds its marker header; every place
    looked at is said in :attr:`HeaderSearch.looked`."""
    chosen: dict[str, tuple[str, str]] = {}
    looked: list[str] = []
    for component, directory, via in places:
        if component is None:
            looked.append(directory)
        elif component not in chosen:
            looked.append(_look(component, directory, via, chosen))
    dirs = list(dict.fromkeys(chosen[c] for c in ("cudart", "cccl") if c in chosen))
    return HeaderSearch(tuple(dirs), tuple(looked))


def _look(component: str, directory: str, via: str, chosen: dict[str, tuple[str, str]]) -> str:
    """Look for ``component``'s marker in ``directory``: where it is, record the directory in ``chosen``; say what
    was found."""
    marker = _MARKERS[component]
    if not os.path.isfile(os.path.join(directory, marker)):
        return f"{via}: {directory} (no {marker})"
    chosen[component] = (os.path.realpath(directory), via)
    return f"{via}: {directory} (has {marker}: used)"
