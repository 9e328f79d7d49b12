"""Measurement: timing GPU work, statistics, comparisons, baselines and pytest-benchmark JSON.

- :mod:`~pytest_jetmem.measure.timing`: CUDA-event and end-to-end samples, interleaved sampling, the per-GPU lock.
- :mod:`~pytest_jetmem.measure.stats`: robust summaries, the stopping rule, intervals and tests (GPU-free).
- :mod:`~pytest_jetmem.measure.compare`: a verdict from two sets of runs (GPU-free).
- :mod:`~pytest_jetmem.measure.baseline`: stored baselines (GPU-free).
- :mod:`~pytest_jetmem.measure.benchjson`: rows in pytest-benchmark's JSON format (GPU-free).
"""

from __future__ import annotations

from pytest_jetmem.measure.stats import StoppingRule, Summary, summarize
from pytest_jetmem.measure.timing import Measurement, Sampler, measure

__all__ = ["Measurement", "Sampler", "StoppingRule", "Summary", "measure", "summarize"]
