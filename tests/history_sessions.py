"""Sessions for the results-store tests: made from seeds (the same seed, the same session, in any process), and the
history of a store as plain values to compare stores with."""

from __future__ import annotations

import random

from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.store import Store
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import Clocks, Conditions, Identity, Judgement, MeasurementRecord, Statistics

MODES = ("device", "managed", "zero_copy")
ORIN = Machine("Orin", "8.7", 12060, "12.6.2", "12.6", "36.4.3", "MAXN", clocks_locked=True)
H100 = Machine("NVIDIA H100 80GB HBM3", "9.0", 13000, "13.3.1", "13.0")


def record(nodeid: str, mode: str, median: float, rng: random.Random, label: str = "k") -> MeasurementRecord:
    samples = tuple(median * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(10))
    ordered = sorted(samples)
    stats = Statistics(median=ordered[5], mad=0.01 * median, p5=ordered[0], p95=ordered[-1], min=ordered[0], n=10,
                       samples=samples, first_call_ms=median * 3)
    clocks = Clocks((1300.0, 1301.0), 1301.0)
    return MeasurementRecord(Identity(nodeid, mode, label, "kernel"), stats, Conditions(clocks), Judgement())


def commit_of(seed: int) -> str:
    """The commit of session ``seed``: 40 hex digits that start with the seed (so short hashes differ)."""
    return f"{seed:06x}" + "ab" * 17


def session(seed: int, *, tests: int = 4, machine: Machine = ORIN, branch: str = "main", step_at: int | None = None,
            step: float = 1.0) -> StoredSession:
    """Session ``seed`` of a history: commit ``c<seed>`` one minute after the previous, ``tests`` tests in every mode;
    from commit ``step_at`` on, every time multiplied by ``step``."""
    rng = random.Random(seed)
    factor = step if step_at is not None and seed >= step_at else 1.0
    records = tuple(
        record(f"tests/test_k.py::test_{t}[{mode}]", mode, (1.0 + t + 0.5 * m) * factor, rng)
        for t in range(tests)
        for m, mode in enumerate(MODES)
    )
    minute = f"2026-11-{1 + seed // 1440:02d}T{(seed // 60) % 24:02d}:{seed % 60:02d}:00Z"
    context = SessionContext(commit=commit_of(seed), branch=branch, commit_time=minute,
                             parents=(commit_of(seed - 1),) if seed else (), dirty=False)
    facts = {"name": machine.device_name, "integrated": machine.l4t_release is not None,
             "concurrent_managed_access": machine.l4t_release is None, "pageable_memory_access": False}
    return StoredSession(f"session-{seed}", minute, context, machine, records, "pytest", "0.1.0", facts)


def history(store: Store) -> list[tuple[object, ...]]:
    """Everything a store holds, in a form that does not depend on the order it was written in or on its ids."""
    names = store.series()
    out: list[tuple[object, ...]] = []
    for row in store.sessions():
        for rec in store.records(row.id):
            out.append((row.uid, row.started, row.context, row.machine, row.device_facts, rec.identity,
                        rec.statistics))
    out.extend(("ack", a.series, a.device, a.session_uid, a.reason) for a in store.acks())
    assert len({(k.nodeid, k.mode, k.label, k.scope) for k in names.values()}) == len(names)  # no series twice
    return sorted(out, key=repr)
