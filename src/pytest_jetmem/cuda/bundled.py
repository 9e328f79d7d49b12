"""The bundled CUDA sources (``pytest_jetmem/kernels/*.cu``), read as package data.

GPU-free and import-free: the CUDA session compiles the stream-blocking kernel from here, and the
user-facing :mod:`pytest_jetmem.kernels` re-exports :func:`sources` and :func:`names`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.abc.Traversable warns (DeprecationWarning) from Python 3.13 on
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


def _cu_files() -> Iterator[Traversable]:
    for entry in resources.files("pytest_jetmem").joinpath("kernels").iterdir():
        if entry.name.endswith(".cu"):
            yield entry


@cache
def _index() -> dict[str, tuple[str, str]]:
    """Bundled kernel name -> (file name, file text)."""
    out: dict[str, tuple[str, str]] = {}
    for entry in _cu_files():
        text = entry.read_text()
        for name in _KERNEL.findall(text):
            out[name] = (entry.name, text)
    return out


def sources() -> dict[str, str]:
    """Bundled kernel name -> the text of the ``.cu`` file that defines it."""
    return {name: text for name, (_, text) in _index().items()}


def source(name: str) -> str:
    """The text of the ``.cu`` file defining bundled kernel ``name`` (KeyError if there is none)."""
    return _index()[name][1]


def source_file(name: str) -> str:
    """The ``.cu`` file name defining bundled kernel ``name`` (KeyError if there is none)."""
    return _index()[name][0]


def names() -> list[str]:
    """Every bundled kernel's name, sorted."""
    return sorted(_index())
