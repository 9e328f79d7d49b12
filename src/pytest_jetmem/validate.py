"""Small value checks shared by the readers of JSON files (baselines, machine records).

Hand-written, not jsonschema: the files have no schema document, and jsonschema would bring attrs, referencing and
rpds-py (a Rust extension) onto Jetson images, for three checks whose messages say the key, value and expectation.
"""

from __future__ import annotations

import numbers


def is_int(x: object) -> bool:
    """An integral number that is not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_number(x: object) -> bool:
    """A real number that is not a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def expect(cond: bool, what: str, value: object, expected: str) -> None:
    """Raise ``ValueError("<what>: expected <expected>, got <value>")`` unless ``cond``."""
    if not cond:
        raise ValueError(f"{what}: expected {expected}, got {value!r}")
