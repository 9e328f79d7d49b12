"""Measurement: timing GPU work, statistics, comparisons, baselines and pytest-benchmark JSON.

- :mod:`~pytest_jetmem.measure.timing`: CUDA-event and end-to-end samples, interleaved sampling, the per-GPU lock.
- :mod:`~pytest_jetmem.measure.stats`: robust summaries, the stopping rule, intervals and tests (GPU-free).
- :mod:`~pytest_jetmem.measure.compare`: a verdict from two sets of runs (GPU-free).
- :mod:`~pytest_jetmem.measure.baseline`: stored baselines (GPU-free).
- :mod:`~pytest_jetmem.measure.benchjson`: rows in pytest-benchmark's JSON format (GPU-free).
- :mod:`~pytest_jetmem.measure.defaults`: every default of the gate and the baselines, in one place (imports
  nothing: the plugin's options read it at start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_jetmem.measure.stats import StoppingRule, Summary, summarize
    from pytest_jetmem.measure.timing import Measurement, Sampler, measure

__all__ = ["Measurement", "Sampler", "StoppingRule", "Summary", "measure", "summarize"]

#: Each public name's module: imported on first use, so that a light submodule (``defaults``) loads without numpy.
_HOMES = {
    "Measurement": "timing",
    "Sampler": "timing",
    "measure": "timing",
    "StoppingRule": "stats",
    "Summary": "stats",
    "summarize": "stats",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
