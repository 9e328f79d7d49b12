"""One pytester session shared by the cases of a parametrized test (what every case would run alone, made once).

Each pytest session costs the same fixed time to configure, collect and end, a collection error more (pytest formats
its traceback): a parametrized test whose cases each need only a few lines of one session's output shares it. The
first case to run on a process makes the session in its own pytester folder, from every case's files; the others
read its result. The cases stay separate tests, each asserting its own lines; under pytest-xdist each worker makes
the session once for the cases it runs. A session that raised is made again by the next case (and raises there too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_MADE: dict[str, object] = {}


def shared(key: str, make: Callable[[], T]) -> T:
    """``make()``'s result, made by the first caller with ``key`` in this process and kept for the others."""
    if key not in _MADE:
        _MADE[key] = make()
    return _MADE[key]  # type: ignore[return-value]
