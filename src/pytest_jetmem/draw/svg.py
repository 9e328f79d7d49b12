"""One way to draw SVG, for the session report's charts (:mod:`pytest_jetmem.report.charts`) and the history site's
(:mod:`pytest_jetmem.history.svg`, :mod:`pytest_jetmem.history.sparkline`) alike:

- :class:`Scale`: data to pixels, a linear map (either way up), on numbers and on numpy arrays alike;
- :func:`nice_ticks` and :func:`tick_labels`: the one tick algorithm and how its ticks are written, :func:`padded`
  the one rule for the room a range leaves around its data;
- :func:`text_width`, :class:`Box`, :func:`text_box`, :class:`Placer` and :class:`Flow`: labels placed inside their
  area and clear of each other, by their estimated boxes;
- :func:`marker` and :func:`dash_attr`: a mode's marker shape and dash pattern (its
  :class:`~pytest_jetmem.cuda.mode_styles.ModeStyle`) as SVG;
- :func:`esc` (:mod:`~.page`'s, re-exported), :func:`tooltip`: the one escaping rule for text and attribute values;
- :func:`frame`: the accessible frame of a chart, ``<svg role="img">`` named by its ``<title>`` and ``<desc>``.

Imports neither numpy (an array passed in is computed on as it is) nor pytest, nor the report or the history.

Hand-written, not matplotlib (``MaxNLocator``, its SVG back end): matplotlib is the optional ``report`` extra, and
its SVG draws text as glyph paths with no ``<title>`` per mark: a chart could be neither read aloud nor tested as text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from pytest_jetmem.draw.page import esc

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "FONT",
    "FONT_ATTRS",
    "Box",
    "Flow",
    "Placer",
    "Scale",
    "coord",
    "dash_attr",
    "esc",
    "frame",
    "marker",
    "nice_ticks",
    "number",
    "padded",
    "text_box",
    "text_width",
    "tick_labels",
    "tooltip",
]

#: The font size of every text of a chart (user units), as :func:`text_width` estimates it.
FONT = 11.0
#: The font attributes of a chart's ``<svg>`` (after :func:`frame`'s own), that :func:`text_width` assumes.
FONT_ATTRS = f' font-size="{FONT:g}" font-family="system-ui, sans-serif"'
# The width of a character as labels are placed, in em: on the wide side of DejaVu Sans (the usual fallback of
# ``system-ui`` on Linux: digits 0.636 em, "m" 0.974, "%" 0.95, "#" 0.838, a space 0.318), so that labels placed
# apart are apart in a browser. Wide characters and the space by name; capitals and digits 0.7; the rest 0.62.
_EMS = dict.fromkeys("mwMW%#@→▼▲±", 1.0) | {" ": 0.35}


# -- text --------------------------------------------------------------------------------------------------------


def tooltip(tip: str) -> str:
    """``tip`` as the ``<title>`` child of an element (its tooltip, and what assistive technology reads); ``""``
    where ``tip`` is empty."""
    return f"<title>{esc(tip)}</title>" if tip else ""


def coord(v: float) -> str:
    """A coordinate: one decimal (a tenth of a pixel)."""
    return f"{v:.1f}"


def number(v: float, digits: int = 4) -> str:
    """A figure: ``digits`` significant digits (``%g``)."""
    return f"{v:.{digits}g}"


# -- scales and ticks --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """Data to pixels: the values ``lo``..``hi`` onto the pixels ``start``..``end`` linearly (``end`` < ``start``:
    up the page, as a y axis). Where the range is empty (``hi == lo``), every value goes to the pixels' middle."""

    lo: float
    hi: float
    start: float
    end: float

    @overload
    def __call__(self, v: float) -> float: ...

    @overload
    def __call__(self, v: NDArray[np.float64]) -> NDArray[np.float64]: ...

    def __call__(self, v: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
        """The pixel of value ``v``, or of each value of an array of them."""
        if self.hi == self.lo:
            return v * 0.0 + (self.start + self.end) / 2
        return self.start + (self.end - self.start) * (v - self.lo) / (self.hi - self.lo)


def padded(lo: float, hi: float, pad: float) -> tuple[float, float]:
    """The range an axis shows of data from ``lo`` to ``hi``: ``pad`` of its span (of ``|hi|`` where the span is
    empty, else 1) added either side, not below 0 where the data is not."""
    room = (hi - lo) * pad or abs(hi) * pad or 1.0
    return max(lo - room, 0.0) if lo >= 0 else lo - room, hi + room


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values inside [lo, hi], evenly spaced (1, 2, 2.5 or 5 times a power of ten apart);
    ``[lo]`` where the range is empty or not finite."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    n = math.floor((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 12) for i in range(n)]


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """The labels of :func:`nice_ticks`' ``ticks``: 4 significant digits, more where the step or the ticks'
    magnitude needs them, so that no two labels read the same and no integer part is cut to an exponent."""
    if len(ticks) < 2:
        return [number(v) for v in ticks]
    top, step = max(abs(v) for v in ticks), abs(ticks[1] - ticks[0])
    whole = math.floor(math.log10(top)) + 1
    digits = min(12, max(4, whole, whole - math.floor(math.log10(step)) + 1))
    return [number(v, digits) for v in ticks]


# -- placing text ------------------------------------------------------------------------------------------------


def text_width(text: str) -> float:
    """The width of ``text`` at :data:`FONT` size as labels are placed: an estimate on the wide side of the
    browser's own, so that two labels placed apart by it do not touch when drawn."""
    return FONT * sum(_EMS.get(ch, 0.7 if ch.isupper() or ch.isdigit() else 0.62) for ch in text)


@dataclass(frozen=True)
class Box:
    """A rectangle of a chart in user units: left, top, right, bottom (y grows downwards, as in SVG). Boxes that
    only touch do not overlap."""

    x0: float
    y0: float
    x1: float
    y1: float

    def hits(self, other: Box) -> bool:
        """Whether the two overlap by more than an edge."""
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def within(self, other: Box) -> bool:
        """Whether this box lies wholly inside ``other``."""
        return other.x0 <= self.x0 and self.x1 <= other.x1 and other.y0 <= self.y0 and self.y1 <= other.y1


def text_box(x: float, y: float, text: str, anchor: str, *, middle: bool = False) -> Box:
    """The estimated box of ``text`` drawn at (x, y) with ``anchor`` (start, middle, end); ``y`` its baseline (the
    box from 0.93 em above to 0.24 em below, DejaVu Sans's ascent and descent), or its middle; a pixel of room
    either side."""
    w = text_width(text)
    left = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
    top, bottom = (y - 0.6 * FONT, y + 0.6 * FONT) if middle else (y - 0.93 * FONT, y + 0.24 * FONT)
    return Box(left - 1, top, left + w + 1, bottom)


class Placer:
    """Places labels where no label placed before and no obstacle is: ``taken`` holds the boxes of both (what no
    label may cross is put there before any label is placed)."""

    def __init__(self) -> None:
        self.taken: list[Box] = []

    def place(self, text: str, candidates: Iterable[tuple[float, float, str]], area: Box) -> tuple[float, float,
                                                                                                      str] | None:
        """The first of ``candidates`` (x, baseline y, text-anchor) where ``text`` lies inside ``area`` and clear of
        everything taken (then taken); None where none is."""
        for x, y, anchor in candidates:
            box = text_box(x, y, text, anchor)
            if box.within(area) and not any(box.hits(t) for t in self.taken):
                self.taken.append(box)
                return x, y, anchor
        return None


class Flow:
    """Lays entries (a legend's, a key's) left to right from ``x0``, a new row ``step`` lower where one would cross
    ``right``; an entry wider than that still goes first on a row of its own."""

    def __init__(self, x0: float, y: float, step: float, right: float) -> None:
        self.x0, self.x, self.y, self.step, self.right = x0, x0, y, step, right

    def at(self, width: float) -> tuple[float, float]:
        """Where an entry ``width`` wide goes: after the one before on its row, or first on the next row."""
        if self.x > self.x0 and self.x + width > self.right:
            self.x, self.y = self.x0, self.y + self.step
        spot = self.x, self.y
        self.x += width
        return spot


# -- marks -------------------------------------------------------------------------------------------------------


def dash_attr(dash: str) -> str:
    """A mode's dash pattern as a ``stroke-dasharray`` attribute (with its leading space); ``""`` for solid."""
    return f' stroke-dasharray="{dash}"' if dash else ""


def marker(kind: str, x: float, y: float, r: float, attrs: str, tip: str = "") -> str:
    """A marker of shape ``kind`` (a mode style's: circle, square, triangle, diamond, cross, plus; or ``down``, a
    triangle pointing down) centred on (x, y), ``r`` its half size, ``attrs`` its other attributes (markup),
    ``tip`` its tooltip."""
    title = tooltip(tip)
    if kind == "circle":
        return f'<circle cx="{coord(x)}" cy="{coord(y)}" r="{coord(r)}" {attrs}>{title}</circle>'
    if kind == "square":
        return (f'<rect x="{coord(x - r)}" y="{coord(y - r)}" width="{coord(2 * r)}" height="{coord(2 * r)}" '
                f"{attrs}>{title}</rect>")
    return f'<path d="{_outline(kind, x, y, r)}" {attrs}>{title}</path>'


#: Marker shapes drawn as strokes alone (no area to fill).
STROKED = frozenset({"cross", "plus"})


def mark_paint(kind: str, colour: str) -> str:
    """A marker's paint: a filled shape in ``colour`` with a thin white edge (it stands out from the line it sits
    on); a shape of strokes alone (cross, plus) in ``colour``, a white edge would hide it."""
    if kind in STROKED:
        return f'fill="none" stroke="{colour}" stroke-width="1.6"'
    return f'fill="{colour}" stroke="#fff" stroke-width="0.8"'


def _outline(kind: str, x: float, y: float, r: float) -> str:
    """The path of a marker drawn as a path (any shape not known: a plus)."""
    c = coord
    if kind == "triangle":
        return f"M{c(x)} {c(y - r * 1.2)}L{c(x + r * 1.1)} {c(y + r * 0.8)}H{c(x - r * 1.1)}Z"
    if kind == "down":
        return f"M{c(x)} {c(y + r * 1.2)}L{c(x + r * 1.1)} {c(y - r * 0.8)}H{c(x - r * 1.1)}Z"
    if kind == "diamond":
        return f"M{c(x)} {c(y - r * 1.3)}L{c(x + r)} {c(y)}L{c(x)} {c(y + r * 1.3)}L{c(x - r)} {c(y)}Z"
    if kind == "cross":
        return f"M{c(x - r)} {c(y - r)}L{c(x + r)} {c(y + r)}M{c(x - r)} {c(y + r)}L{c(x + r)} {c(y - r)}"
    return f"M{c(x - r)} {c(y)}H{c(x + r)}M{c(x)} {c(y - r)}V{c(y + r)}"


# -- the frame ---------------------------------------------------------------------------------------------------


def frame(width: float, height: float, *, title: str, desc: str = "", ident: str = "", cls: str = "chart",
          attrs: str = "") -> str:
    """The opening of an accessible chart, up to and with its names (close it with ``</svg>``): ``<svg role="img">``
    of class ``cls``, ``width`` x ``height`` user units, and ``attrs`` (markup, with its leading space); then its
    ``<title>`` and ``<desc>``. With ``ident`` (unique in its page) the ``<svg>`` has that id and is labelled by its
    title and description (``aria-labelledby``: ids ``{ident}-t`` and ``{ident}-d``); without, by its title alone
    (``aria-label``: a small picture with no description, such as a sparkline, kept on one line)."""
    size = f'viewBox="0 0 {width:g} {height:g}" width="{width:g}" height="{height:g}"{attrs}'
    if not ident:
        return f'<svg class="{esc(cls)}" role="img" aria-label="{esc(title)}" {size}>{tooltip(title)}'
    ident = esc(ident)
    return (f'<svg class="{esc(cls)}" id="{ident}" role="img" aria-labelledby="{ident}-t {ident}-d" {size}>\n'
            f'<title id="{ident}-t">{esc(title)}</title><desc id="{ident}-d">{esc(desc)}</desc>')
