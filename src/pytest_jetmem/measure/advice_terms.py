"""The advice's terms: the figures it judges by, the note it cites, and how its figures read as words.

The constants here are the ones :mod:`pytest_jetmem.measure.advice` documents and exports; the word functions
turn figures into the few forms every sentence of the advice uses (milliseconds, ratios, intervals, lists of
modes), so the same figure always reads the same way. GPU-free and pytest-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_jetmem.measure.timing import SCOPES

__all__ = [
    "COHERENT_RULE",
    "CONFIDENCE",
    "END_TO_END",
    "EQUIVALENCE_MARGIN",
    "KERNEL",
    "MEMORY_SELECTION",
    "MIN_SAMPLES",
    "NOTE_URL",
    "PCIE_MARGIN",
    "SYSMEM_FULL_COHERENCY",
    "UNCACHED_RULE",
    "finite_or_none",
    "interval",
    "ms",
    "names",
    "times",
]

#: The confidence of every interval here: the regression gate's (:mod:`pytest_jetmem.measure.compare`).
CONFIDENCE = 0.99
#: A mode is tied with the fastest unless its interval clears 1 + this (modes measured one after the other drift
#: by a few percent between them, which no interval of one mode's samples holds).
EQUIVALENCE_MARGIN = 0.05
#: The margin where either mode reads over PCIe on a discrete GPU (``crosses_pcie``): such figures moved by up to
#: 24% between processes on an H100 (docs/performance.md), whatever one process's interval says.
PCIE_MARGIN = 0.25
#: Fewer samples than this in a mode: no interval, so no winner.
MIN_SAMPLES = 5
#: NVIDIA's CUDA for Tegra application note, whose sections the rules cite.
NOTE_URL = "https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/"
MEMORY_SELECTION = "Memory Selection"
#: The note's section on Thor's two-way coherency (its rule: host-registered and pageable memory used in place).
SYSMEM_FULL_COHERENCY = "Sysmem Full Coherency"
KERNEL, END_TO_END = SCOPES  # the two scopes of jetmem.measure

#: The note's rule on an integrated GPU without full coherency (Orin and older).
UNCACHED_RULE = (
    "the integrated GPU does not cache pinned memory: for buffers a kernel reads repeatedly, prefer device or "
    "unified memory; pinned memory suits small buffers, and buffers read once and coalesced, where it can be as "
    "good as unified memory; weigh these overheads against the copies device memory needs"
)
#: The note's rule on an integrated GPU with sysmem full coherency (Thor onwards).
COHERENT_RULE = (
    "with sysmem full coherency, host-registered memory and pageable host memory used directly by the GPU can "
    "outperform both pinned and unified memory"
)


def finite_or_none(x: float | None) -> float | None:
    """``x`` where it is a finite number, else None (JSON has no NaN)."""
    return x if x is not None and math.isfinite(x) else None


def ms(x: float | None) -> str:
    """Three significant digits, no scientific notation: 0.0312, 0.312, 3.12, 31.2, 312 ("-": no figure)."""
    if x is None or not math.isfinite(x):
        return "-"
    if x == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def times(r: float | None) -> str:
    """A ratio: ``1.23x`` (``123x`` from 100 on; "-": no figure)."""
    if r is None or not math.isfinite(r):
        return "-"
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def interval(ci: tuple[float, float] | None) -> str:
    """A ratio's interval: ``99% CI 1.02x..1.10x`` ("no interval" for None)."""
    if ci is None:
        return "no interval"
    return f"{CONFIDENCE:.0%} CI {times(ci[0])}..{times(ci[1])}"


def names(modes: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(modes) <= 2:
        return " and ".join(modes)
    return ", ".join(modes[:-1]) + " and " + modes[-1]
