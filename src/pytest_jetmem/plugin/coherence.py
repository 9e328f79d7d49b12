"""The ``memmode_coherence`` marker: after a test passes, check its buffers' CPU/GPU round trips.

For every buffer the test allocated through ``jetmem`` that is still live when the test body returns,
:func:`pytest_jetmem.correctness.coherence.check_round_trips` runs in the buffer's memory mode; any mismatch fails
the item with a message naming the buffer, the mode, the first differing index and both values. Marker arguments are
validated at collection; a bad one is a collection error naming the test.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from pytest_jetmem.plugin import markers

if TYPE_CHECKING:  # imported where used: a run without the marker loads neither the CUDA layer nor numpy
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.workspace import Workspace

MARKER = markers.COHERENCE
MAX_ROUNDS = 1000
MAX_DELAY_US = 1_000_000  # one second per probe launch


@dataclass(frozen=True)
class CoherenceOptions:
    """The validated arguments of a ``memmode_coherence`` marker."""

    rounds: int = 2
    cpu_touch: bool = True
    gpu_delay_us: float = 0
    labels: tuple[str, ...] | None = None  # None: every live buffer


def parse_marker(marker: pytest.Mark, test_name: str) -> CoherenceOptions:
    """Validate a ``memmode_coherence`` marker; ValueError names the test and the bad argument."""
    where = f"{test_name}: @pytest.mark.{MARKER}"
    if marker.args:
        raise ValueError(f"{where} takes keyword arguments only, got positional {marker.args!r}")
    fields = CoherenceOptions.__dataclass_fields__
    unknown = [k for k in marker.kwargs if k not in fields]
    if unknown:
        raise ValueError(
            f"{where}: unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"expected {', '.join(fields)}"
        )
    kw = dict(marker.kwargs)
    return CoherenceOptions(
        _rounds(kw.get("rounds", CoherenceOptions.rounds), where),
        _cpu_touch(kw.get("cpu_touch", CoherenceOptions.cpu_touch), where),
        _delay_us(kw.get("gpu_delay_us", CoherenceOptions.gpu_delay_us), where),
        _labels(kw.get("labels"), where),
    )


def _rounds(rounds: object, where: str) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"{where}: rounds must be an int from 1 to {MAX_ROUNDS}, got {rounds!r}")
    return rounds


def _cpu_touch(cpu_touch: object, where: str) -> bool:
    if not isinstance(cpu_touch, bool):
        raise ValueError(f"{where}: cpu_touch must be True or False, got {cpu_touch!r}")
    return cpu_touch


def _delay_us(delay: object, where: str) -> float:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= MAX_DELAY_US:
        raise ValueError(f"{where}: gpu_delay_us must be a number from 0 to {MAX_DELAY_US}, got {delay!r}")
    return delay


def _labels(labels: object, where: str) -> tuple[str, ...] | None:
    """None (every live buffer), or the labels named, each once; one label may be given as a str."""
    if labels is None:
        return None
    if isinstance(labels, str):
        labels = (labels,)
    if not isinstance(labels, (list, tuple)) or not labels or not all(isinstance(x, str) and x for x in labels):
        raise ValueError(f"{where}: labels must be a non-empty list of buffer labels (str), got {labels!r}")
    return tuple(dict.fromkeys(labels))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(rounds=2, cpu_touch=True, gpu_delay_us=0, labels=None): after the test passes, check that "
        "what the CPU wrote a kernel reads and what a kernel wrote the CPU reads, in each live jetmem buffer's "
        "memory mode, across CPU touches between launches",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if markers.validated(metafunc.definition, MARKER, parse_marker) is None:
        return
    name = metafunc.definition.nodeid
    if "jetmem" not in metafunc.fixturenames:
        pytest.fail(
            f"{name}: @pytest.mark.{MARKER} checks the buffers a test allocates through the jetmem fixture; "
            "the test does not use jetmem (add it, with @pytest.mark.memmode)",
            pytrace=False,
        )


def judge_body(item: pytest.Item) -> None:
    """After the test body passed and its measurements were judged (a step of :mod:`~.core`'s life of a test):
    the round trips of the ``memmode_coherence`` marker on every live ``jetmem`` buffer, or nothing unmarked."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return
    from pytest_jetmem.plugin.handles import opened_of

    opened = opened_of(item)  # the workspace the jetmem fixture built for this item
    if opened is None or opened.workspace.closed:
        return
    jm = opened.workspace
    opts = parse_marker(marker, item.nodeid)
    problems, report = run_checks(jm, opts)
    item.user_properties.append(("jetmem_coherence", report))
    item.add_report_section("call", "jetmem coherence", "\n".join(report))
    if problems:  # the message alone: this hook's source says nothing about the test
        pytest.fail(
            f"jetmem coherence ({jm.mode}, {opts.rounds} round{'s' if opts.rounds > 1 else ''}, "
            f"cpu_touch={opts.cpu_touch}):\n" + "\n".join(f"  {p}" for p in problems),
            pytrace=False,
        )


def run_checks(jm: Workspace, opts: CoherenceOptions) -> tuple[list[str], list[str]]:
    """Check every live buffer of ``jm`` (or those ``opts.labels`` names): (problems, report lines)."""
    broken = jm.session.device.broken
    if broken:
        return [], [f"skipped: {broken}"]
    buffers = list(jm.live_buffers())  # before the probes allocate their counters
    missing = _missing_labels(buffers, opts.labels)
    if missing:
        return [f"no live buffer labelled {lab!r}" for lab in missing], []
    if opts.labels is not None:
        buffers = [b for b in buffers if b.label in opts.labels]
    jm.synchronize()  # the test's own work first
    problems: list[str] = []
    report: list[str] = []
    for buf in buffers:
        found, line = _check_buffer(jm, buf, opts)
        report.append(line)
        problems.extend(found)
    if not buffers:
        warnings.warn(
            pytest.PytestWarning(f"@pytest.mark.{MARKER}: the test left no live jetmem buffer to check"),
            stacklevel=1,
        )
        report.append("no live buffer to check")
    return problems, report


def _missing_labels(buffers: list[Buffer], labels: tuple[str, ...] | None) -> list[str]:
    """The ``labels`` no buffer of ``buffers`` has (none where every live buffer is checked)."""
    return [lab for lab in labels or () if not any(b.label == lab for b in buffers)]


def _check_buffer(jm: Workspace, buf: Buffer, opts: CoherenceOptions) -> tuple[list[str], str]:
    """The round trips of one buffer: (problems, its report line); an empty buffer is skipped."""
    from pytest_jetmem.correctness import coherence

    name = coherence.buffer_name(buf)
    n = coherence.word_count(buf)
    if n == 0:
        return [], f"{name} [{buf.mode}]: skipped (empty)"
    found = coherence.check_round_trips(jm, buf, opts.rounds, opts.cpu_touch, delay_us=opts.gpu_delay_us)
    unit = "uint32 words" if coherence.word_dtype(buf.dtype).itemsize == 4 else "bytes (byte-level pattern)"
    return found, f"{name} [{buf.mode}]: {n} {unit}, {opts.rounds} rounds: {'FAILED' if found else 'ok'}"
