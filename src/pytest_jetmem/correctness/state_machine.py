"""A hypothesis state machine that interleaves CPU and GPU work on buffers of one memory mode.

Its rules write, read and read-modify-write slices of buffers from the CPU (the way the mode requires)
and from the GPU (small NVRTC kernels, queued without waiting), copy between buffers on the device,
synchronise the stream or the device, prefetch and advise managed memory where the device allows it
(CONCURRENT_MANAGED_ACCESS=1), and attach managed buffers to the host, globally or to the stream with
cuStreamAttachMemAsync. Every value read, on either side, is checked against a numpy model
(:class:`CoherenceModel`). A failure is a short sequence of steps that hypothesis shrinks and prints.

Run it from a test with the ``jetmem`` fixture::

    @pytest.mark.memmode
    def test_coherence_machine(jetmem):
        CoherenceMachine.run_with(jetmem, settings(max_examples=200))

or, outside pytest-jetmem's fixtures, as ``TestMine = CoherenceMachine.TestCase`` (each example then opens its own
workspace with :func:`pytest_jetmem.cuda.workspace.open_workspace` in ``CoherenceMachine.mode``). Subclass it to add
rules for your own kernels; see docs/coherence.md.

The settings come from the user's hypothesis profile (example database, health checks, phases), with the GPU's
own choices on top (:func:`default_settings`): a failing sequence is saved and replayed first on the next run,
under a database key of the machine class, the handle's mode and test, and the run's attributes.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import hypothesis
import numpy as np
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pytest_jetmem.correctness import coherence
from pytest_jetmem.correctness import strategies as jst
from pytest_jetmem.cuda import attach as attach_mod
from pytest_jetmem.cuda import bundled, driver
from pytest_jetmem.cuda.modes import get_mode
from pytest_jetmem.cuda.workspace import Workspace, WorkspaceLike, open_workspace, workspace_of
from pytest_jetmem.errors import JetmemError

if TYPE_CHECKING:
    from pytest_jetmem.cuda.buffer import Buffer

#: The machine's kernels (jetmem_machine_wait/add/compare): the bundled ``kernels/coherence.cu``.
MACHINE_SOURCE = bundled.source("jetmem_machine_add")

BLOCK = 256
U32 = np.dtype(np.uint32)
ATTACH_FLAGS = {"global": driver.MEM_ATTACH_GLOBAL, "host": driver.MEM_ATTACH_HOST, "single": driver.MEM_ATTACH_SINGLE}
ADVICE = (
    "SET_READ_MOSTLY",
    "UNSET_READ_MOSTLY",
    "SET_PREFERRED_LOCATION",
    "UNSET_PREFERRED_LOCATION",
    "SET_ACCESSED_BY",
    "UNSET_ACCESSED_BY",
)
MAX_ELEMENTS = 4096  # elements per machine buffer (word-sized dtypes: up to 16 KiB words)
POISON = 0xA5A5A5A5  # what a new buffer holds before its first write (stale reads are then deterministic)


# -- the model --------------------------------------------------------------------------------------------------
class CoherenceModel:
    """What every uint32 word of every buffer must hold, as numpy arrays by buffer name."""

    def __init__(self) -> None:
        self.words: dict[str, np.ndarray] = {}

    def new(self, name: str, n: int, fill: int = 0) -> None:
        if name in self.words:
            raise KeyError(f"model: buffer {name!r} exists")
        self.words[name] = np.full(n, fill, dtype=U32)

    def drop(self, name: str) -> None:
        del self.words[name]

    def expected(self, name: str, sl: slice = slice(None)) -> np.ndarray:
        """A copy of the words ``sl`` of buffer ``name``."""
        words: np.ndarray = self.words[name][sl].copy()
        return words

    def write(self, name: str, sl: slice, values: Any) -> None:
        self.words[name][sl] = np.asarray(values).astype(U32, copy=False)

    def write_pattern(self, name: str, sl: slice, seed: int) -> None:
        """The coherence pattern of ``seed`` at the words' own indices (what cpu_touch and the probe write)."""
        self.write(name, sl, coherence.pattern(U32, len(self.words[name]), seed, sl))

    def add(self, name: str, sl: slice, value: int) -> None:
        """words[sl] += value, modulo 2**32."""
        view = self.words[name][sl]
        self.words[name][sl] = view + np.uint32(value & 0xFFFFFFFF)

    def apply(self, name: str, sl: slice, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """words[sl] = fn(words[sl]): the model of a user's kernel (``fn`` gets and returns uint32 arrays)."""
        self.write(name, sl, fn(self.words[name][sl].copy()))

    def copy(self, src: str, src_start: int, dst: str, dst_start: int, count: int) -> None:
        """A device-side copy of ``count`` words."""
        chunk = self.words[src][src_start : src_start + count].copy()
        self.words[dst][dst_start : dst_start + count] = chunk


@dataclass(eq=False)
class Tracked:
    """A buffer the machine allocated, with what it knows of it (the model holds its words)."""

    name: str
    buf: Buffer
    attach: int = driver.MEM_ATTACH_GLOBAL

    @property
    def words(self) -> int:
        return coherence.word_count(self.buf)

    def __repr__(self) -> str:
        return f"<{self.name}: {self.buf.mode} {self.buf.dtype}{list(self.buf.shape)}, {self.words} words>"


def default_settings(**overrides: Any) -> hypothesis.settings:
    """GPU state-machine settings over the current hypothesis profile.

    The profile decides the example database (a failing sequence is replayed first on the next run), the health
    checks (``too_slow`` is added to those it suppresses: the first example compiles the machine's kernels) and the
    phases (less the explain phase, which replays a failure many times under a tracer: slow on a GPU, and the
    shrunk sequence already says what happened). On top: 100 examples of 30 steps, no deadline. ``overrides``
    are hypothesis settings that replace any of these.
    """
    profile = hypothesis.settings()
    base: dict[str, Any] = {
        "max_examples": 100,
        "stateful_step_count": 30,
        "deadline": None,
        "suppress_health_check": list(dict.fromkeys([*profile.suppress_health_check, HealthCheck.too_slow])),
        "phases": [p for p in profile.phases if p is not Phase.explain],
    }
    base.update(overrides)
    return hypothesis.settings(**base)


class MachineFactory:
    """Builds the examples of one machine class bound to one handle: what ``run_state_machine_as_test`` calls.

    ``examples_run`` counts the machines built. The example database key (``_hypothesis_internal_add_digest``,
    which hypothesis reads from the factory) is the machine class's source, the handle's mode and test, and the
    attributes, so that a failure found in one mode or test is replayed there first and nowhere else. ``@seed``
    and ``@reproduce_failure`` on the machine class apply.
    """

    def __init__(self, machine: type[CoherenceMachine], jm: WorkspaceLike, attributes: dict[str, Any]) -> None:
        unknown = [k for k in attributes if not hasattr(machine, k)]
        if unknown:
            raise TypeError(f"{machine.__name__}.run_with: unknown attribute(s) {', '.join(unknown)}")
        self.machine = machine
        self.workspace = workspace_of(jm)
        self.jm = jm
        self.attributes = dict(attributes)
        self.examples_run = 0

    def __call__(self) -> CoherenceMachine:
        self.examples_run += 1
        return self.machine(self.jm, **self.attributes)

    def __repr__(self) -> str:
        return f"MachineFactory({self.machine.__name__}, {self.workspace.mode!r}, {self.workspace.nodeid!r})"

    @property
    def _hypothesis_internal_add_digest(self) -> bytes:
        return database_digest(self.machine, self.workspace.mode, self.workspace.nodeid, self.attributes)

    @property
    def _hypothesis_internal_use_seed(self) -> Any:
        return getattr(self.machine, "_hypothesis_internal_use_seed", None)

    @property
    def _hypothesis_internal_use_reproduce_failure(self) -> Any:
        return getattr(self.machine, "_hypothesis_internal_use_reproduce_failure", None)


def database_digest(machine: type, mode: str, nodeid: str, attributes: dict[str, Any]) -> bytes:
    """A stable digest of a machine run: the class's source (its qualified name if none), mode, test, attributes."""
    try:
        source = inspect.getsource(machine)
    except (OSError, TypeError):
        source = ""
    parts = [f"{machine.__module__}.{machine.__qualname__}", source, mode, nodeid, repr(sorted(attributes.items()))]
    return hashlib.sha384("\0".join(parts).encode()).digest()


class CoherenceMachine(RuleBasedStateMachine):
    """CPU and GPU reads and writes of slices, copies, synchronisation, prefetch, advice and attachment.

    Class attributes a subclass (or :meth:`run_with`) may set: ``jm`` (a bound handle; None: each
    example opens one in ``mode``), ``max_buffers``, ``gpu_delay_us`` (every GPU write waits that long
    first, so a missing synchronisation reads stale data deterministically).
    """

    jm: ClassVar[Any] = None
    mode: ClassVar[str] = "device"
    max_buffers: ClassVar[int] = 3
    gpu_delay_us: ClassVar[float] = 0.0
    examples_run: ClassVar[int] = 0

    buffers = Bundle("buffers")

    def __init__(self, jm: WorkspaceLike | None = None, **attributes: Any) -> None:
        """One example: on handle ``jm`` (default: the class's ``jm``; None opens a workspace in ``mode``).

        ``attributes`` set this example's ``mode``, ``max_buffers`` or ``gpu_delay_us`` (what
        :class:`MachineFactory` passes on). A subclass that defines ``__init__`` passes both on to this one.
        """
        super().__init__()
        for name, value in attributes.items():
            setattr(self, name, value)
        self._stack = contextlib.ExitStack()
        if jm is None:  # hypothesis builds the class itself (TestCase): the class counts the examples
            type(self).examples_run += 1
        bound = jm if jm is not None else type(self).jm
        if bound is None:
            handle = self._stack.enter_context(open_workspace(self.mode, nodeid=type(self).__name__))
        else:
            handle = workspace_of(bound)  # the jetmem handle's workspace (or a workspace)
        self.jm: Workspace = handle  # type: ignore[misc]  # the instance's handle shadows the class default
        self.model = CoherenceModel()
        self.tracked: list[Tracked] = []
        self.cma = bool(handle.device.attr("CONCURRENT_MANAGED_ACCESS"))
        self._kernels: dict[str, Any] = {}
        self._scratch: list[Buffer] = []
        self._result: Buffer | None = None
        self._expected: Buffer | None = None
        self._next = 0

    # -- running --------------------------------------------------------------------------------------------
    @classmethod
    def factory(cls, jm: WorkspaceLike, **attributes: Any) -> MachineFactory:
        """A factory of this machine's examples on handle ``jm`` (for ``run_state_machine_as_test``).

        ``attributes`` override class attributes for its examples (``gpu_delay_us=2000``, ``max_buffers=2``);
        an unknown one is a TypeError.
        """
        return MachineFactory(cls, jm, attributes)

    @classmethod
    def run_with(
        cls, jm: WorkspaceLike, settings: hypothesis.settings | None = None, **attributes: Any
    ) -> MachineFactory:
        """Run the machine as a test on handle ``jm``; returns the factory it ran (``.examples_run`` counts).

        ``settings``: hypothesis settings (default :func:`default_settings`; build yours with
        ``default_settings(max_examples=200)`` to keep its GPU-friendly choices over your profile's).
        ``attributes`` override class attributes for this run (``gpu_delay_us=2000``, ``max_buffers=2``).
        """
        factory = cls.factory(jm, **attributes)
        run_state_machine_as_test(factory, settings=settings or default_settings())  # type: ignore[arg-type]
        return factory

    def teardown(self) -> None:
        """Free everything this example allocated (also after a failure)."""
        try:
            with contextlib.suppress(JetmemError):
                self.jm.synchronize()
            for t in self.tracked:
                with contextlib.suppress(JetmemError):
                    t.buf.free()
            for buf in self._scratch:
                with contextlib.suppress(JetmemError):
                    buf.free()
            self.tracked.clear()
        finally:
            self._stack.close()

    # -- helpers for rules (subclasses use them too) --------------------------------------------------------
    @property
    def memmode(self) -> str:
        mode: str = self.jm.mode
        return mode

    @property
    def managed(self) -> bool:
        """The handle's memory mode is managed memory (prefetch, advice and attachment apply)."""
        return get_mode(self.jm.mode).is_managed

    def kernel(self, name: str, source: str = MACHINE_SOURCE) -> Any:
        """Compile (once per example; NVRTC's disk cache makes it cheap) kernel ``name`` of ``source``."""
        key = f"{name}\0{hash(source)}"
        if key not in self._kernels:
            self._kernels[key] = self.jm.compile(source, name)
        return self._kernels[key]

    def grid(self, count: int) -> int:
        return max(1, (count + BLOCK - 1) // BLOCK)

    @staticmethod
    def draw_slice(data: st.DataObject, t: Tracked, contiguous: bool = False) -> slice:
        """A slice of ``t``'s words (any step; ``contiguous``: step 1)."""
        strategy = jst.contiguous_slices(t.words) if contiguous else jst.slices(t.words)
        return data.draw(strategy, label="sl")

    @staticmethod
    def span(t: Tracked, sl: slice) -> tuple[int, int, int]:
        """(start, step, count) of a slice of ``t``'s words, as the kernels take them."""
        r = range(*sl.indices(t.words))
        return r.start, r.step, len(r)

    def ensure_gpu_access(self, t: Tracked) -> None:
        """Before device access: where CONCURRENT_MANAGED_ACCESS=0, a host-attached buffer is attached globally."""
        if t.buf.memory_mode.is_managed and not self.cma and t.attach == driver.MEM_ATTACH_HOST:
            attach_mod.attach(self.jm, t.buf, driver.MEM_ATTACH_GLOBAL, wait=False)
            t.attach = driver.MEM_ATTACH_GLOBAL

    def result_buffer(self) -> Buffer:
        """The example's probe-counter buffer (device memory, 2 uint64)."""
        if self._result is None:
            self._result = coherence.result_buffer(self.jm)
            self._scratch.append(self._result)
        return self._result

    def check_words(self, t: Tracked, sl: slice, got: np.ndarray, what: str) -> None:
        """Compare words read from ``t`` with the model; AssertionError naming buffer, mode, index, values."""
        want = self.model.expected(t.name, sl)
        start, step, n = self.span(t, sl)
        count, pos = coherence.first_mismatch(got, want, range(start, start + n * step, step) if n else None)
        if pos is None:
            return
        raise AssertionError(
            coherence.describe_mismatch(
                t.buf, f"{what} {_fmt(sl)}", start + pos * step, int(got[pos]), int(want[pos]), count, n
            )
        )

    def gpu_wait(self) -> None:
        """With ``gpu_delay_us``, queue a kernel that only waits (so the next memset or copy lands late)."""
        if self.gpu_delay_us > 0:
            self.kernel("jetmem_machine_wait").launch(1, 1, (round(self.gpu_delay_us * 1000),))

    def _new(self, shape: tuple[int, ...], dtype: np.dtype, init: str, seed: int) -> Tracked:
        name = f"buffer {self._next}"
        self._next += 1
        buf = self.jm.empty(shape, dtype)
        buf.label = f"coherence machine {name}"
        t = Tracked(name, buf)
        self.tracked.append(t)
        # fresh memory may hold what an earlier example left at the same address: poison it first, so a
        # replayed failure reads the same stale values
        coherence.cpu_write(self.jm, buf, np.uint32(POISON))
        self.model.new(name, t.words)
        if init == "zeros":  # a memset queued on the stream
            self.gpu_wait()
            self.jm.memset(buf, 0)
        elif init == "cpu":
            coherence.cpu_touch(self.jm, buf, seed)
            self.model.write_pattern(name, slice(None), seed)
        elif init == "gpu":
            coherence.launch_probe(self.jm, buf, None, seed, delay_us=self.gpu_delay_us, result=self.result_buffer())
            self.model.write_pattern(name, slice(None), seed)
        return t

    # -- buffers --------------------------------------------------------------------------------------------
    @initialize(
        target=buffers,
        shape=jst.shapes(max_dims=2, max_side=128, max_size=MAX_ELEMENTS),
        dtype=jst.dtypes(word_sized=True),
        init=st.sampled_from(["cpu", "gpu", "zeros"]),
        seed=jst.seeds(),
    )
    def first_buffer(self, shape: tuple[int, ...], dtype: np.dtype, init: str, seed: int) -> Tracked:
        return self._new(shape, dtype, init, seed)

    @precondition(lambda self: len(self.tracked) < self.max_buffers)
    @rule(
        target=buffers,
        shape=jst.shapes(max_dims=2, max_side=128, max_size=MAX_ELEMENTS),
        dtype=jst.dtypes(word_sized=True),
        init=st.sampled_from(["cpu", "gpu", "zeros"]),
        seed=jst.seeds(),
    )
    def new_buffer(self, shape: tuple[int, ...], dtype: np.dtype, init: str, seed: int) -> Tracked:
        return self._new(shape, dtype, init, seed)

    @precondition(lambda self: len(self.tracked) > 1)
    @rule(t=consumes(buffers))
    def free_buffer(self, t: Tracked) -> None:
        self.jm.synchronize()  # never free memory queued work may still use
        t.buf.free()
        self.tracked.remove(t)
        self.model.drop(t.name)

    # -- the CPU --------------------------------------------------------------------------------------------
    @rule(t=buffers, seed=jst.seeds(), data=st.data())
    def cpu_write(self, t: Tracked, seed: int, data: st.DataObject) -> None:
        sl = self.draw_slice(data, t)
        coherence.cpu_touch(self.jm, t.buf, seed, sl)
        self.model.write_pattern(t.name, sl, seed)

    @rule(t=buffers, data=st.data())
    def cpu_read(self, t: Tracked, data: st.DataObject) -> None:
        sl = self.draw_slice(data, t)
        self.check_words(t, sl, coherence.cpu_read(self.jm, t.buf, sl), "the CPU read words")

    @rule(t=buffers, value=st.integers(0, 0xFFFFFFFF), data=st.data())
    def cpu_add(self, t: Tracked, value: int, data: st.DataObject) -> None:
        sl = self.draw_slice(data, t)
        got = coherence.cpu_read(self.jm, t.buf, sl)
        self.check_words(t, sl, got, "the CPU read (to add to) words")
        coherence.cpu_write(self.jm, t.buf, got + np.uint32(value), sl)
        self.model.add(t.name, sl, value)

    @rule()
    def check_all(self) -> None:
        for t in self.tracked:
            self.check_words(t, slice(None), coherence.cpu_read(self.jm, t.buf), "the CPU read all words")

    # -- the GPU --------------------------------------------------------------------------------------------
    @rule(t=buffers, seed=jst.seeds(), data=st.data())
    def gpu_write(self, t: Tracked, seed: int, data: st.DataObject) -> None:
        sl = self.draw_slice(data, t)
        self.ensure_gpu_access(t)
        coherence.launch_probe(self.jm, t.buf, None, seed, sl, delay_us=self.gpu_delay_us, result=self.result_buffer())
        self.model.write_pattern(t.name, sl, seed)

    @rule(t=buffers, value=st.integers(0, 0xFFFFFFFF), data=st.data())
    def gpu_add(self, t: Tracked, value: int, data: st.DataObject) -> None:
        sl = self.draw_slice(data, t)
        start, step, count = self.span(t, sl)
        if count:
            self.ensure_gpu_access(t)
            self.kernel("jetmem_machine_add").launch(
                self.grid(count), BLOCK, (t.buf.ptr, start, step, count, value, round(self.gpu_delay_us * 1000))
            )
        self.model.add(t.name, sl, value)

    @rule(t=buffers, data=st.data())
    def gpu_read(self, t: Tracked, data: st.DataObject) -> None:
        """A kernel compares a slice with the model's words (uploaded asynchronously), then the host waits."""
        sl = self.draw_slice(data, t)
        start, step, count = self.span(t, sl)
        if not count:
            return
        self.ensure_gpu_access(t)
        want = np.ascontiguousarray(self.model.expected(t.name, sl))
        if self._expected is None or self._expected.size < count:
            if self._expected is not None:
                self._expected.free()
                self._scratch.remove(self._expected)
            self._expected = self.jm.empty(max(count, 1024), U32, mode="device")
            self._expected.label = "coherence machine expected words"
            self._scratch.append(self._expected)
        res = self.result_buffer()
        self.jm.copy_from_host(self._expected.ptr, want.ctypes.data, want.nbytes)  # `want` outlives the wait below
        self.jm.memset_range(res.ptr, 0, 8)
        self.jm.memset_range(res.ptr + 8, 0xFF, 8)
        self.kernel("jetmem_machine_compare").launch(
            self.grid(count), BLOCK, (t.buf.ptr, self._expected, start, step, count, res)
        )
        mismatches, packed = (int(v) for v in res.to_numpy())
        if mismatches:
            k, seen = packed >> 32, packed & 0xFFFFFFFF
            raise AssertionError(
                coherence.describe_mismatch(
                    t.buf, f"a kernel read words {_fmt(sl)}", start + k * step, seen, int(want[k]), mismatches, count
                )
            )

    @rule(src=buffers, dst=buffers, data=st.data())
    def gpu_copy(self, src: Tracked, dst: Tracked, data: st.DataObject) -> None:
        """cuMemcpyDtoDAsync of a run of words between (or within, without overlap) buffers."""
        if not src.words or not dst.words:
            return
        count = data.draw(st.integers(1, min(src.words, dst.words)), label="count")
        a = data.draw(st.integers(0, src.words - count), label="src_start")
        b = data.draw(st.integers(0, dst.words - count), label="dst_start")
        if src is dst and a < b + count and b < a + count:
            return  # overlapping copies are undefined
        self.ensure_gpu_access(src)
        self.ensure_gpu_access(dst)
        self.gpu_wait()
        self.jm.copy_range(dst.buf.ptr + 4 * b, src.buf.ptr + 4 * a, 4 * count)
        self.model.copy(src.name, a, dst.name, b, count)

    # -- synchronisation --------------------------------------------------------------------------------------
    @rule()
    def stream_sync(self) -> None:
        self.jm.synchronize()

    @rule()
    def device_sync(self) -> None:
        self.jm.synchronize_device()

    # -- managed memory: prefetch, advice, attachment --------------------------------------------------------
    @precondition(lambda self: self.managed and self.cma)
    @rule(t=buffers, to_device=st.booleans(), data=st.data())
    def prefetch(self, t: Tracked, to_device: bool, data: st.DataObject) -> None:
        sl = self.draw_slice(data, t, contiguous=True)
        start, _, count = self.span(t, sl)
        if count:
            where = self.jm.device.ordinal if to_device else driver.CPU_DEVICE_ID
            self.jm.prefetch(t.buf.ptr + 4 * start, 4 * count, where)

    @precondition(lambda self: self.managed and self.cma)
    @rule(t=buffers, advice=st.sampled_from(ADVICE), to_device=st.booleans())
    def advise(self, t: Tracked, advice: str, to_device: bool) -> None:
        if not t.words:
            return
        where = self.jm.device.ordinal if to_device or "ACCESSED_BY" in advice else driver.CPU_DEVICE_ID
        self.jm.advise(t.buf.ptr, t.buf.nbytes, advice, where)

    @precondition(lambda self: self.managed)
    @rule(t=buffers, how=st.sampled_from(sorted(ATTACH_FLAGS)))
    def attach(self, t: Tracked, how: str) -> None:
        """cuStreamAttachMemAsync on jetmem's stream (queued, no wait): to the host, globally, or to that stream."""
        attach_mod.attach(self.jm, t.buf, ATTACH_FLAGS[how], wait=False)
        t.attach = ATTACH_FLAGS[how]


def _fmt(sl: slice) -> str:
    parts = ["" if v is None else str(v) for v in (sl.start, sl.stop, sl.step)]
    return f"[{parts[0]}:{parts[1]}" + (f":{parts[2]}]" if sl.step is not None else "]")


__all__ = [
    "MACHINE_SOURCE",
    "CoherenceMachine",
    "CoherenceModel",
    "MachineFactory",
    "Tracked",
    "database_digest",
    "default_settings",
]
