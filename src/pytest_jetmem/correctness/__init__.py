"""Correctness: coherence checks, the coherence state machine, strategies, isolation in a child, Tegra-strict.

- :mod:`~pytest_jetmem.correctness.coherence`: CPU/GPU round trips through a buffer's memory mode.
- :mod:`~pytest_jetmem.correctness.state_machine`: the hypothesis state machine (imports hypothesis).
- :mod:`~pytest_jetmem.correctness.strategies`: hypothesis strategies for modes, shapes, dtypes, patterns.
- :mod:`~pytest_jetmem.correctness.isolation`: running one test in a child process and classifying its end.
- :mod:`~pytest_jetmem.correctness.concurrency`: the ``memmode_concurrency`` verdict (GPU-free).
- :mod:`~pytest_jetmem.correctness.strict`: Tegra-strict mode, Jetson's managed-memory rule on any GPU.

Nothing is imported here, so that loading the plugin does not import hypothesis.
"""
