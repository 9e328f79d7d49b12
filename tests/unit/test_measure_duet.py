"""measure.duet: the two sides of --jetmem-against meet at each measure call and take turns, batch by batch.

Two threads stand in for the two pytest processes; the protocol is the same over the named pipes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from duet_runs import run_pair
from pytest_jetmem.errors import JetmemError
from pytest_jetmem.measure.duet import BASE, CHANGE, Duet, DuetError, make_channel


def one_call(duet: Duet, seq: int, label: str, done_after: int, log: list[tuple[Any, ...]]) -> Any:
    """One measure call: meet, then take turns until this side is done after ``done_after`` batches."""
    if not duet.meet(label):
        return "alone"
    batches = 0

    def batch() -> bool:
        nonlocal batches
        batches += 1
        log.append((duet.side, seq, label, batches))
        return batches >= done_after

    return duet.take_turns(lambda: log.append((duet.side, seq, label, "setup")), batch)


def measuring(tests: dict[int, list[str]], done_after: int, log: list[tuple[Any, ...]]) -> Callable[[Duet], Any]:
    """A side that runs ``tests`` (seq -> labels of its measure calls), each call done after ``done_after`` batches."""

    def body(duet: Duet) -> list[tuple[int, str, Any]]:
        out = []
        for seq, labels in tests.items():
            duet.begin_test(seq)
            out += [(seq, label, one_call(duet, seq, label, done_after, log)) for label in labels]
            duet.end_test()
        return out

    return body


def test_the_sides_alternate_and_stop_in_the_same_round(tmp_path: Path) -> None:
    channel = make_channel(tmp_path)
    log: list[tuple[Any, ...]] = []
    base, change = run_pair(channel, measuring({1: ["a"]}, 2, log), measuring({1: ["a"]}, 4, log))
    assert base == change == [(1, "a", 4)]  # the rounds go on until both are done: 4
    assert [entry[0] for entry in log] == [BASE, CHANGE] * 5  # setup, then 4 rounds, base first every time


def test_a_call_on_one_side_only_is_measured_alone_and_the_next_ones_pair_again(tmp_path: Path) -> None:
    channel = make_channel(tmp_path)
    log: list[tuple[Any, ...]] = []
    base, change = run_pair(
        channel,
        measuring({1: ["a", "extra"], 2: ["b"], 3: ["c"]}, 2, log),
        measuring({1: ["a"], 2: ["renamed"], 3: ["c"]}, 2, log),
    )
    assert base == [(1, "a", 2), (1, "extra", "alone"), (2, "b", "alone"), (3, "c", 2)]
    assert change == [(1, "a", 2), (2, "renamed", "alone"), (3, "c", 2)]


def test_a_silent_peer_is_an_error_that_names_the_other_side(tmp_path: Path) -> None:
    channel = make_channel(tmp_path)
    peer = Duet(channel, CHANGE)  # opened, never answers
    duet = Duet(channel, BASE, timeout_s=0.2)
    try:
        duet.begin_test(1)
        with pytest.raises(DuetError, match=r"the change side sent nothing for 0\.2 s") as exc:
            duet.meet("a")
        assert isinstance(exc.value, JetmemError)
    finally:
        duet.close()
        peer.close()


def test_side_must_be_base_or_change(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"side must be 0 .base. or 1 .change., got 2"):
        Duet(make_channel(tmp_path), 2)


def agreeing(answers: dict[int, bool | None], log: list[tuple[Any, ...]]) -> Callable[[Duet], Any]:
    """A side whose one measure call per test takes its turns, then says ``answers[seq]`` on going on to energy
    turns (None: it does not ask, as a pytest-jetmem before energy in turns); where both agree, a second round of
    turns (the energy windows), then the next test pairs again."""

    def body(duet: Duet) -> list[tuple[int, Any, Any]]:
        out = []
        for seq, answer in answers.items():
            duet.begin_test(seq)
            first = one_call(duet, seq, "a", 2, log)
            agreed = duet.agree("energy", answer) if first != "alone" and answer is not None else None
            energy = duet.take_turns(lambda: None, lambda: True) if agreed else None
            out.append((seq, agreed, energy))
            duet.end_test()
        return out

    return body


def test_both_sides_go_on_to_energy_turns_only_where_both_say_yes_and_the_next_call_still_pairs(
    tmp_path: Path,
) -> None:
    channel = make_channel(tmp_path)
    log: list[tuple[Any, ...]] = []
    base, change = run_pair(channel, agreeing({1: True, 2: True, 3: True}, log),
                            agreeing({1: True, 2: False, 3: True}, log))
    assert base == change == [(1, True, 1), (2, False, None), (3, True, 1)]  # one energy round where both agreed


def test_a_side_that_never_asks_leaves_the_other_measuring_alone_and_the_next_call_pairs(tmp_path: Path) -> None:
    channel = make_channel(tmp_path)
    log: list[tuple[Any, ...]] = []
    base, change = run_pair(channel, agreeing({1: True, 2: True}, log), agreeing({1: None, 2: None}, log))
    assert base == [(1, False, None), (2, False, None)] and change == [(1, None, None), (2, None, None)]
    assert [entry[1:] for entry in log if entry[0] == CHANGE] == [(1, "a", "setup"), (1, "a", 1), (1, "a", 2),
                                                                  (2, "a", "setup"), (2, "a", 1), (2, "a", 2)]
