"""How a memory mode looks in every chart, the session report's and the history site's alike: one colour, dash
pattern and marker shape per mode, by the mode's place in the registry (:attr:`~.modes.MemoryMode.order`), so that
``device`` is the same blue circle, solid line, wherever it is drawn.

Colours are Okabe & Ito's (told apart in the common colour-vision deficiencies: https://jfly.uni-koeln.de/color/);
the dash patterns and marker shapes tell the modes apart without colour. Imports neither numpy nor the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_jetmem.cuda.modes import find_mode, registered

__all__ = ["COLOURS", "DASHES", "GREY", "SHAPES", "ModeStyle", "mode_style"]

#: Okabe & Ito's colours, in the order modes take them.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
#: SVG ``stroke-dasharray`` patterns ("": solid), in the order modes take them.
DASHES = ("", "8 4", "2 3", "10 3 2 3", "5 2 1 2 1 2", "1 5")
#: Marker shapes, in the order modes take them.
SHAPES = ("circle", "square", "triangle", "diamond", "cross", "plus")
#: The colour of a mode that is neither registered nor among a chart's modes.
GREY = "#8a8a8a"


@dataclass(frozen=True)
class ModeStyle:
    """A mode's colour (``#rrggbb``), dash pattern (``stroke-dasharray``; "" solid) and marker shape."""

    colour: str
    dash: str
    shape: str


def mode_style(mode: str, modes: Sequence[str] = ()) -> ModeStyle:
    """The style of ``mode``: a registered mode's by its registry order; a mode not registered here (a store's, a
    report's of another process) by its place among the unregistered ones of ``modes`` (a chart's modes), after
    the registered ones; grey, solid, circles where it is neither."""
    known = find_mode(mode)
    if known is not None:
        at = known.order
    else:
        others = [m for m in modes if find_mode(m) is None]
        if mode not in others:
            return ModeStyle(GREY, "", SHAPES[0])
        at = len(registered()) + others.index(mode)
    return ModeStyle(COLOURS[at % len(COLOURS)], DASHES[at % len(DASHES)], SHAPES[at % len(SHAPES)])
