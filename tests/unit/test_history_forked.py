"""Work mapped over forked processes comes back whole and in order, as it would here; an error in a child is
raised here."""

from __future__ import annotations

import os

import pytest

from pytest_jetmem.history.forked import forked_map


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _fails_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError(f"job {x}")
    return x


def test_results_come_back_in_order_from_other_processes() -> None:
    out = forked_map(_square_and_pid, list(range(40)), workers=2)
    assert [v for v, _ in out] == [x * x for x in range(40)]
    assert {pid for _, pid in out} - {os.getpid()}  # worked out elsewhere
    assert {pid for _, pid in forked_map(_square_and_pid, [1, 2], workers=1)} == {os.getpid()}


def test_an_error_in_a_child_is_raised_here() -> None:
    with pytest.raises(ValueError, match="job 7"):
        forked_map(_fails_on_seven, list(range(10)), workers=2)
