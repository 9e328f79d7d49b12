"""Two processes taking turns on one GPU: the base and the change of ``--jetmem-against``, sample batch by batch.

Each side is a pytest session of its own (its own tree, its own kernels). The parent runs the same test in
both at once; when the test body calls ``jetmem.measure``, the two sides meet (:meth:`Duet.meet`, keyed by the
test's dispatch number and the call's index and label) and then take turns: first call and warm-up of the
base, of the change, then a batch of the base, a batch of the change, ... until both sides' stopping rules are
satisfied in the same round. Round ``r`` of the two sides ran back to back, so drift (clocks, temperature,
other tenants) hits both alike and their ratio holds. After its rounds a call may go on to more turns (the energy
windows) where both sides say so (:meth:`Duet.agree`).

The channel is two named pipes in a folder the parent made: ``side0.fifo`` (the base's inbox) and
``side1.fifo`` (the change's). A call one side makes and the other does not (a test changed) is measured alone
on that side and reported unpaired; so is the rest of a call whose other side stopped taking turns (its test
failed or skipped inside the measurement: it ended the test, :attr:`Duet.peer_left`). A side that stops
answering for ``timeout_s`` is an error. GPU-free and pytest-free: tested with two threads.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_jetmem.errors import DuetError

__all__ = ["BASE", "CHANGE", "Duet", "DuetError", "make_channel"]

BASE, CHANGE = 0, 1
DEFAULT_TIMEOUT_S = 600.0


def make_channel(folder: str | os.PathLike[str]) -> Path:
    """Create the two named pipes of a channel in ``folder``; returns the folder."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    for side in (BASE, CHANGE):
        fifo = path / f"side{side}.fifo"
        if not fifo.exists():
            os.mkfifo(fifo, 0o600)
    return path


@dataclass(frozen=True, order=True)
class _Key:
    seq: int  # the parent's dispatch number of the test
    index: int  # the measure call's index within that test
    label: str = ""


class Duet:
    """One side's end of the channel. ``side`` is :data:`BASE` (takes the first turn) or :data:`CHANGE`."""

    def __init__(self, channel: str | os.PathLike[str], side: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if side not in (BASE, CHANGE):
            raise ValueError(f"side must be {BASE} (base) or {CHANGE} (change), got {side!r}")
        self.side = side
        self.timeout_s = timeout_s
        folder = Path(channel)
        # O_RDWR: opening our own inbox never blocks, and it never reads end-of-file while we hold it
        self._inbox = os.open(folder / f"side{side}.fifo", os.O_RDWR)
        self._outbox = os.open(folder / f"side{1 - side}.fifo", os.O_RDWR)
        self._buffer = b""
        self._pending: list[str] = []  # messages read but not consumed yet
        self.seq = 0
        self.calls = 0  # measure calls met so far in the current test
        #: whether the other side ended the test while the last :meth:`take_turns` waited for its turn
        self.peer_left = False

    def close(self) -> None:
        for fd in (self._inbox, self._outbox):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- messages -----------------------------------------------------------------------------------
    def _send(self, message: str) -> None:
        data = (message + "\n").encode()
        while data:
            data = data[os.write(self._outbox, data) :]

    def _receive(self) -> str:
        if self._pending:
            return self._pending.pop(0)
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DuetError(
                    f"--jetmem-against: the {'change' if self.side == BASE else 'base'} side sent nothing for "
                    f"{self.timeout_s:g} s (it crashed, hung, or runs different code at this point)"
                )
            ready, _, _ = select.select([self._inbox], [], [], left)
            if ready:
                self._buffer += os.read(self._inbox, 65536)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    # -- tests --------------------------------------------------------------------------------------
    def begin_test(self, seq: int) -> None:
        """The parent dispatched test number ``seq`` (the same number on both sides)."""
        self.seq = seq
        self.calls = 0

    def end_test(self) -> None:
        """The test is over on this side: a peer still waiting to meet in it measures alone."""
        self._send(f"END {self.seq}")

    def meet(self, label: str = "") -> bool:
        """Meet the other side at this measure call; True when both make it (then take turns), else measure alone."""
        mine = _Key(self.seq, self.calls, label)
        self.calls += 1
        self._send(f"HELLO {mine.seq} {mine.index} {label}")
        while True:
            message = self._receive()
            kind, _, rest = message.partition(" ")
            if kind == "END":
                if int(rest) < mine.seq:
                    continue  # an earlier test's
                self._pending.insert(0, message)  # the peer is done with this test: keep it for the next meet
                return False
            if kind in ("TURN", "AGREE"):
                continue  # a turn or an answer of a call this side left (it raised while the peer went on)
            if kind != "HELLO":
                raise DuetError(f"--jetmem-against: expected a greeting, got {message!r}")
            seq, index, peer_label = rest.split(" ", 2) if rest.count(" ") >= 2 else (*rest.split(" "), "")
            theirs = _Key(int(seq), int(index), peer_label)
            if (theirs.seq, theirs.index) < (mine.seq, mine.index):
                continue  # a call we did not make: the peer measured it alone
            if (theirs.seq, theirs.index) > (mine.seq, mine.index):
                self._pending.insert(0, message)  # the peer has no such call: it comes back at our next meet
                return False
            return theirs.label == mine.label

    def agree(self, topic: str, mine: bool) -> bool:
        """After a call's turns: both sides say whether they go on to ``topic`` (the energy windows) in turns; True
        where both do. The other side ending its test instead counts as no (and sets :attr:`peer_left`)."""
        if self.peer_left:
            return False
        self._send(f"AGREE {topic} {int(mine)}")
        while True:
            message = self._receive()
            kind, _, rest = message.partition(" ")
            if kind == "AGREE":
                their_topic, _, flag = rest.rpartition(" ")
                return mine and their_topic == topic and flag == "1"
            if kind == "HELLO":  # the peer asked nothing and went on to its next call: that meet comes next
                self._pending.insert(0, message)
                return False
            if kind == "END" and rest.isdigit():
                if self._peer_ended(int(rest), message):
                    return False
                continue  # an earlier test's
            raise DuetError(f"--jetmem-against: expected the other side's answer on {topic}, got {message!r}")

    def _peer_ended(self, seq: int, message: str) -> bool:
        """Whether the peer's ``END seq`` (``message``) ends this test (it raised, failed or skipped inside the call):
        then it is kept for the later meets of this test (they measure alone at once) and :attr:`peer_left` is set;
        an earlier test's end is not (the caller reads on)."""
        if seq < self.seq:
            return False
        self._pending.insert(0, message)
        self.peer_left = True
        return True

    # -- turns --------------------------------------------------------------------------------------
    def _pass(self, done: bool) -> None:
        self._send(f"TURN {int(done)}")

    def _wait(self) -> bool:
        """The other side's turn: whether it is done. The peer ending the test instead (it raised, failed or
        skipped inside its turn) sets :attr:`peer_left` and counts as done: this side goes on alone."""
        while True:
            message = self._receive()
            kind, _, rest = message.partition(" ")
            if kind == "TURN":
                return rest == "1"
            if kind == "END" and rest.isdigit():
                if self._peer_ended(int(rest), message):
                    return True
                continue  # an earlier test's
            raise DuetError(f"--jetmem-against: expected the other side's turn, got {message!r}")

    def take_turns(self, setup: Callable[[], None], batch: Callable[[], bool]) -> int:
        """After a successful :meth:`meet`: ``setup()`` once, then ``batch()`` per round until both are done.

        ``batch()`` samples one batch and returns whether this side's stopping rule is satisfied. The base
        goes first in every round; the rounds end after the first round in which both sides were done.
        Where the other side ends its test instead of taking its turn, this side goes on alone until its own
        rule is satisfied (:attr:`peer_left` is then True). Returns the number of rounds.
        """
        self.peer_left = False
        self._set_up(setup)
        rounds = 1
        while not self._round(batch):
            rounds += 1
        return rounds

    def _set_up(self, setup: Callable[[], None]) -> None:
        """The first call and warm-up, in turns: the base's, then the change's."""
        if self.side == CHANGE:
            self._wait()
        setup()
        if not self.peer_left:
            self._pass(False)
            if self.side == BASE:
                self._wait()

    def _round(self, batch: Callable[[], bool]) -> bool:
        """One round: the base's batch, then the change's (alone once the peer left); whether both sides are done."""
        theirs = self._wait() if self.side == CHANGE and not self.peer_left else True
        mine = batch()
        if not self.peer_left:
            self._pass(mine)
            if self.side == BASE:
                theirs = self._wait()
        return mine and theirs
