"""draw.svg: the one way the session report and the history site draw.

Its primitives on their own (the tick algorithm and its labels over random ranges, the scale's ends, the placer's
boxes, escaping), then the two charts drawn with them: the report's SVG chart and the history site's series chart
carry the same accessible frame and the same ticks for the same range, and neither module defines a tick, scale or
escaping function of its own."""

from __future__ import annotations

import ast
import itertools
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest_jetmem
from pytest_jetmem.cuda.mode_styles import SHAPES, mode_style
from pytest_jetmem.draw import svg as draw
from pytest_jetmem.draw.svg import (
    Box,
    Flow,
    Placer,
    Scale,
    esc,
    frame,
    marker,
    nice_ticks,
    padded,
    text_box,
    text_width,
    tick_labels,
)
from pytest_jetmem.history.svg import Chart, Line, Point, series_chart
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.report.charts import draw_chart
from pytest_jetmem.report.rows import Group, Trends

PACKAGE = Path(pytest_jetmem.__file__).parent
NASTY = "<b>&\"'</b>"


# -- reading SVG back --------------------------------------------------------------------------------------------


class Element:
    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.children, self.text = tag, attrs, list[Element](), ""

    def walk(self) -> list[Element]:
        return [self, *(n for c in self.children for n in c.walk())]

    def all(self, tag: str, **attrs: str) -> list[Element]:
        return [n for n in self.walk() if n.tag == tag and all(n.attrs.get(k) == v for k, v in attrs.items())]


class Reader(HTMLParser):
    """Every element with its attributes and its own text, entities decoded."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {})
        self.stack = [self.root]
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while len(self.stack) > 1 and self.stack.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def the_svg(markup: str) -> Element:
    (svg,) = Reader(markup).root.all("svg")
    return svg


# -- the charts drawn here -------------------------------------------------------------------------------------------


def record(nodeid: str, mode: str, median: float, p95: float | None = None) -> MeasurementRecord:
    p95 = median * 1.05 if p95 is None else p95
    return MeasurementRecord.from_json({
        "version": 1, "nodeid": nodeid, "mode": mode, "key": "conv:kernel", "label": "conv", "scope": "kernel",
        "median": median, "mad": median * 0.01, "p5": median * 0.97, "p95": p95, "min": median * 0.95, "n": 12,
        "first_call_ms": median * 3, "first_call_wall_ms": median * 3.2, "stop_reason": "noise", "runs": 1,
        "samples": [median] * 12, "verdict": "reported",
    })


def report_chart(rows: list[MeasurementRecord], name: str = "t.py::test_x") -> str:
    return draw_chart(Group(name, "t1", rows), Trends(), "svg")


def history_chart(points: tuple[Point, ...], title: str = "a series", mode: str = "device") -> str:
    line = Line(mode, points, mode_style(mode, [mode]))
    return series_chart(Chart("c1", title, "what it shows", tuple(f"s{p.x}" for p in points), (line,)))


# -- ticks and scales --------------------------------------------------------------------------------------------

spans = st.tuples(st.floats(-1e6, 1e6), st.floats(1e-4, 1e7)).map(
    lambda t: (t[0], t[0] + t[1] * max(1.0, abs(t[0]))))


@settings(max_examples=300, deadline=None)
@given(spans)
def test_ticks_cover_the_range_in_round_even_steps_and_read_apart(span: tuple[float, float]) -> None:
    lo, hi = span
    ticks = nice_ticks(lo, hi)
    assert 2 <= len(ticks) <= 6
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1.0, 2.0, 2.5, 5.0, 10.0)) < 1e-6  # round
    assert all(math.isclose(b - a, step, rel_tol=1e-6) for a, b in itertools.pairwise(ticks))  # even
    slack = step * 1e-6
    assert lo - slack <= ticks[0] < lo + step and hi - step < ticks[-1] <= hi + slack  # inside, no room for more
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels)  # no two read the same
    assert all(abs(float(label) - t) < step / 2 for label, t in zip(labels, ticks, strict=True))


def test_tick_labels_keep_the_digits_a_narrow_range_needs_and_write_whole_numbers_whole() -> None:
    assert tick_labels(nice_ticks(1234.1, 1234.9)) == ["1234.2", "1234.4", "1234.6", "1234.8"]
    assert tick_labels(nice_ticks(0.0, 2.0)) == ["0", "0.5", "1", "1.5", "2"]
    assert tick_labels(nice_ticks(0.0, 250000.0)) == ["0", "50000", "100000", "150000", "200000", "250000"]
    assert nice_ticks(3.0, 3.0) == [3.0] and nice_ticks(0.0, math.inf) == [0.0]


def test_the_scale_maps_ends_to_ends_either_way_up_and_arrays_alike() -> None:
    up = Scale(2.0, 6.0, 300.0, 20.0)  # a y axis: larger values higher up the page
    assert up(2.0) == 300.0 and up(6.0) == 20.0 and up(4.0) == 160.0
    across = Scale(0.0, 9.0, 64.0, 740.0)
    assert across(0.0) == 64.0 and across(9.0) == 740.0
    values = np.array([0.0, 1.5, 9.0])
    assert across(values).tolist() == [across(v) for v in values.tolist()]
    assert Scale(1.0, 1.0, 10.0, 30.0)(1.0) == 20.0  # an empty range: the middle
    assert Scale(1.0, 1.0, 10.0, 30.0)(np.array([1.0, 1.0])).tolist() == [20.0, 20.0]


def test_padding_leaves_room_either_side_and_stays_at_zero_for_data_that_does() -> None:
    assert padded(0.0, 10.0, 0.05) == (0.0, 10.5)
    assert padded(-10.0, 10.0, 0.05) == (-11.0, 11.0)
    assert padded(5.0, 5.0, 0.1) == (4.5, 5.5)
    assert padded(0.0, 0.0, 0.08) == (0.0, 1.0)


# -- placing labels ----------------------------------------------------------------------------------------------

labels = st.lists(
    st.tuples(st.text("abcXY01 #%", min_size=1, max_size=12), st.floats(0, 400), st.floats(0, 200),
              st.sampled_from(["start", "middle", "end"])),
    max_size=40)


@settings(max_examples=200, deadline=None)
@given(labels, st.lists(st.tuples(st.floats(0, 400), st.floats(0, 200)), max_size=5))
def test_the_placer_never_returns_overlapping_boxes(wanted: list[tuple[str, float, float, str]],
                                                     obstacles: list[tuple[float, float]]) -> None:
    placer, area = Placer(), Box(0, 0, 400, 200)
    walls = [Box(x, y, x + 20, y + 20) for x, y in obstacles]
    placer.taken.extend(walls)
    placed = []
    for text, x, y, anchor in wanted:
        candidates = [(x, y, anchor), (x, y + 14, anchor), (x, y - 14, anchor)]
        spot = placer.place(text, candidates, area)
        if spot is not None:
            assert spot in candidates
            placed.append(text_box(spot[0], spot[1], text, spot[2]))
    assert all(box.within(area) for box in placed)
    assert not [(a, b) for a, b in itertools.combinations(placed, 2) if a.hits(b)]
    assert not [(a, w) for a in placed for w in walls if a.hits(w)]


def test_a_box_that_only_touches_does_not_hit_and_the_flow_wraps_at_its_right_edge() -> None:
    assert not Box(0, 0, 10, 10).hits(Box(10, 0, 20, 10)) and Box(0, 0, 10, 10).hits(Box(9, 9, 20, 20))
    flow = Flow(8.0, 16.0, 16.0, 100.0)
    assert [flow.at(40.0), flow.at(40.0), flow.at(40.0), flow.at(200.0)] == [
        (8.0, 16.0), (48.0, 16.0), (8.0, 32.0), (8.0, 48.0)]
    assert text_width("mm") > text_width("ii") > 0


def test_every_mode_shape_is_one_element_with_its_tooltip() -> None:
    for kind in (*SHAPES, "down"):
        (shape,) = Reader(marker(kind, 10.0, 10.0, 3.5, 'fill="#000"', NASTY)).root.children
        assert shape.tag in ("circle", "rect", "path") and shape.attrs["fill"] == "#000"
        (title,) = shape.all("title")
        assert title.text == NASTY


# -- escaping and the frame ----------------------------------------------------------------------------------------


def test_escaping_covers_text_and_attribute_values() -> None:
    assert esc(NASTY) == "&lt;b&gt;&amp;&quot;&#x27;&lt;/b&gt;"
    svg = the_svg(frame(100, 50, title=NASTY, desc=NASTY, ident='x"1') + "</svg>")
    assert svg.attrs["id"] == 'x"1' and svg.attrs["aria-labelledby"] == 'x"1-t x"1-d'
    assert [(n.tag, n.text) for n in svg.children] == [("title", NASTY), ("desc", NASTY)]
    small = the_svg(frame(120, 24, title=NASTY, cls="spark") + "</svg>")
    assert small.attrs["aria-label"] == NASTY and small.all("title")[0].text == NASTY


def test_both_charts_escape_what_they_are_given() -> None:
    report = the_svg(report_chart([record("t.py::test_x[device]", "device", 1.0),
                                   record(f"t.py::test_x[{NASTY}]", NASTY, 2.0)], name=f"t.py::test_x {NASTY}"))
    assert f"timings of t.py::test_x {NASTY}" in {n.text for n in report.all("title")}
    assert NASTY in {n.text for n in report.all("text")}  # the legend's and the x axis's name of the mode
    history = the_svg(history_chart((Point(0, 1.0, 0.1, NASTY), Point(1, 1.1, 0.1)), title=NASTY, mode=NASTY))
    assert history.all("title")[0].text == NASTY and NASTY in {n.text for n in history.all("text")}
    assert any(NASTY in n.text for n in history.all("title"))  # a point's tooltip


def accessible_frame(svg: Element) -> tuple[str, str, str]:
    """(role, the title's text, the description's text), found through ``aria-labelledby``."""
    title_id, desc_id = svg.attrs["aria-labelledby"].split()
    (title,) = [n for n in svg.children if n.attrs.get("id") == title_id]
    (desc,) = [n for n in svg.children if n.attrs.get("id") == desc_id]
    assert (title.tag, desc.tag) == ("title", "desc") and svg.children[:2] == [title, desc]
    return svg.attrs["role"], title.text, desc.text


def test_the_report_and_the_history_chart_carry_the_same_accessible_frame() -> None:
    report = the_svg(report_chart([record("t.py::test_x[device]", "device", 1.0)]))
    history = the_svg(history_chart((Point(0, 1.0, 0.1), Point(1, 1.1, 0.1))))
    role, title, desc = accessible_frame(report)
    assert role == "img" and title == "timings of t.py::test_x" and "p5 to p95" in desc
    assert accessible_frame(history) == ("img", "a series", "what it shows")
    assert list(report.attrs)[:4] == list(history.attrs)[:4] == ["class", "id", "role", "aria-labelledby"]


def test_the_report_and_the_history_chart_tick_the_same_range_alike() -> None:
    # The same y range, 0 to 1.134 ms: the report's bars pad their top (p95 1.05) by 8%, the history chart pads
    # its data (median +- MAD: 0 to 1.08) by 5%.
    report = the_svg(report_chart([record("t.py::test_x[device]", "device", 1.0, p95=1.05)]))
    history = the_svg(history_chart((Point(0, 0.54, 0.54), Point(1, 0.54, 0.54))))
    in_report = [n.text for n in report.all("text", **{"class": "tick", "text-anchor": "end"})]
    in_history = [n.text for n in history.all("text", **{"class": "y-tick"})]
    assert in_report == in_history == tick_labels(nice_ticks(0.0, 1.134)) == ["0", "0.25", "0.5", "0.75", "1"]


def test_the_report_keeps_its_labels_apart_and_its_legend_inside() -> None:
    modes = ["device", "managed", "zero_copy", "pinned_staging_long", "write_combined_long", "another_long_mode"]
    svg = the_svg(report_chart([record(f"t.py::test_x[{m}]", m, 1.0 + i) for i, m in enumerate(modes)]))
    width = float(svg.attrs["width"])
    boxes = [text_box(float(n.attrs["x"]), float(n.attrs["y"]), n.text, n.attrs.get("text-anchor", "start"))
             for n in svg.all("text") if "transform" not in n.attrs]
    assert not [(a, b) for a, b in itertools.combinations(boxes, 2) if a.hits(b)]
    legend = [n for n in svg.all("text", **{"class": "tick"}) if "text-anchor" not in n.attrs]
    assert sorted(n.text for n in legend) == sorted(modes)
    assert all(text_box(float(n.attrs["x"]), float(n.attrs["y"]), n.text, "start").x1 <= width for n in legend)


# -- one way to draw -----------------------------------------------------------------------------------------------

CHART_MODULES = ("report/charts.py", "history/svg.py", "history/sparkline.py")


def defined_names(path: Path) -> set[str]:
    """The names of every function and class ``path`` defines, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def test_the_charts_define_no_tick_scale_or_escaping_function_of_their_own() -> None:
    own = {name: sorted(n for n in defined_names(PACKAGE / name)
                        if any(word in n.lower() for word in ("tick", "scale", "escape", "esc")))
           for name in CHART_MODULES}
    assert own == {name: [] for name in CHART_MODULES}
    assert {"nice_ticks", "tick_labels", "Scale", "padded"} <= defined_names(PACKAGE / "draw/svg.py")
    for name in CHART_MODULES:
        imported = {alias.name for node in ast.walk(ast.parse((PACKAGE / name).read_text(encoding="utf-8")))
                    if isinstance(node, ast.ImportFrom) and node.module == "pytest_jetmem.draw.svg"
                    for alias in node.names}
        assert imported, f"{name} draws without pytest_jetmem.draw.svg"
    assert draw.esc is esc and set(draw.__all__) >= {"Scale", "nice_ticks", "Placer", "frame", "esc", "marker"}


@pytest.mark.parametrize("kind", ["circle", "square", "triangle", "diamond", "cross", "plus"])
def test_every_marker_shape_is_visible_in_its_colour(kind: str) -> None:
    """A shape of strokes alone (cross, plus) is stroked in the mode's colour (a white edge hid it); a filled one is
    filled in it."""
    drawn = draw.marker(kind, 10, 10, 3.5, draw.mark_paint(kind, "#0072b2"))
    if kind in draw.STROKED:
        assert 'stroke="#0072b2"' in drawn and 'fill="none"' in drawn
    else:
        assert 'fill="#0072b2"' in drawn
