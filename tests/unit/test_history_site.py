"""history.site and history.svg: ``pytest-jetmem history publish``'s static site over a real SQLite store of an Orin
with a code step (commit 30) and a driver/JetPack upgrade (commit 45), one step acknowledged, and an H100.

Read back with the standard library's ``html.parser``: every page listed exists, every internal link resolves,
nothing is fetched from the network, the index lists the unacknowledged change points (newest first) before the
acknowledged one with its reason, each test page has a chart per key and device with its marks, change points and
the machine-class boundary, the fleet page and its JSON; a publish replaces the site whole or not at all.

A second, crowded store (five modes, two of them measuring the same, ten change points at two commits beside two
machine-class changes, an outlier and a session of uncommitted changes) checks the layout by geometry: every text
inside its chart, no two labels overlapping, no change point label across a boundary line."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from history_sessions import H100, MODES, ORIN, commit_of, record, session
from pytest_jetmem.cuda.mode_styles import mode_style
from pytest_jetmem.history import forked as forked_module
from pytest_jetmem.history import site as site_module
from pytest_jetmem.history.analysis import analysed, changes
from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.fleet import fleet_matrix
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.site import LIST_LEFT_OUT, MARKER, page_name, publish
from pytest_jetmem.history.sparkline import sparkline
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.history.svg import MAX_POINTS, Point, nice_ticks, thin
from pytest_jetmem.history.thinning import thin_indices
from pytest_jetmem.history.timeline import read_history
from pytest_jetmem.report import charts

UPGRADED = replace(ORIN, driver_version=12080, l4t_release="36.5.0")
CODE_STEP, UPGRADE = 30, 45
REASON = "bigger tiles, accepted"
ACKED_TEST = "tests/test_k.py::test_0"


# -- reading HTML back ---------------------------------------------------------------------------------------------

VOID = {"meta", "br", "link", "img", "input", "hr", "wbr", "source", "col", "area", "base", "embed", "track"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    parts: list[Node | str] = field(default_factory=list)  # the children and the text, in document order

    def walk(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            yield from c.walk()

    def all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        return [n for n in self.walk() if (tag is None or n.tag == tag)
                and (cls is None or cls in n.attrs.get("class", "").split())]

    def content(self) -> str:
        """All the text inside, in document order, as a reader gets it (entities decoded)."""
        return "".join(part if isinstance(part, str) else part.content() for part in self.parts)

    def find_id(self, ident: str) -> Node | None:
        return next((n for n in self.walk() if n.attrs.get("id") == ident), None)

    def by_id(self, ident: str) -> Node:
        found = self.find_id(ident)
        assert found is not None, f"no element of id {ident!r}"
        return found


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#document", {})
        self.stack = [self.root]
        self.doctype = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.stack[-1].parts.append(node)

    def handle_endtag(self, tag: str) -> None:
        assert tag not in VOID, f"an end tag for the void element {tag}"
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].text.append(data)
        self.stack[-1].parts.append(data)


def parse(path: Path) -> Node:
    builder = TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    builder.close()
    assert builder.stack == [builder.root], f"{path.name}: unclosed {[n.tag for n in builder.stack[1:]]}"
    assert builder.doctype.lower() == "doctype html", path.name
    return builder.root


# -- the store ------------------------------------------------------------------------------------------------------


def _build(store: Store) -> None:
    """Commits 0..59 on the Orin (every test +10% from 30, the upgrade +20% more from 45), then 30 on an H100."""
    for seed in range(60):
        if seed < UPGRADE:
            store.add(session(seed, step_at=CODE_STEP, step=1.10))
        else:
            store.add(session(seed, step_at=0, step=1.10 * 1.20, machine=UPGRADED))
    for seed in range(100, 130):
        store.add(session(seed, tests=2, machine=H100))
    (code_step,) = [c for c in changes(read_history(store, "main")) if c.series.nodeid == f"{ACKED_TEST}[device]"
                    and c.after.uid == f"session-{CODE_STEP}"]
    assert store.ack(code_step.series, code_step.device, code_step.after.uid, code_step.after.context.commit,
                     REASON, "ci")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("site") / "h.sqlite"
    with open_store(str(path)) as store:
        _build(store)
    return path


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    with open_store(str(store_path), create=False) as s:
        yield s


@pytest.fixture
def site(store: Store, tmp_path: Path) -> tuple[Path, list[Path]]:
    out = tmp_path / "site"
    return out, publish(store, *analysed(read_history(store, "main")), out)


def _test_page(out: Path, test: str) -> Node:
    return parse(out / page_name(test))


# -- the pages ------------------------------------------------------------------------------------------------------


def test_every_page_listed_exists_and_is_a_whole_html5_page(site: tuple[Path, list[Path]]) -> None:
    out, pages = site
    names = {p.name for p in pages}
    assert {"index.html", "fleet.html", "fleet.json"} <= names
    assert {page_name(f"tests/test_k.py::test_{t}") for t in range(4)} <= names
    assert {p.name for p in out.iterdir()} == names | {MARKER}  # nothing else in the folder
    for p in pages:
        assert p.is_file() and p.parent == out
        if p.suffix != ".html":
            continue
        doc = parse(p)
        (html,) = doc.all("html")
        assert html.attrs.get("lang") == "en"
        (head,) = doc.all("head")
        (title,) = head.all("title")
        assert title.content().strip()
        assert any(m.attrs.get("charset", "").lower() == "utf-8" for m in doc.all("meta"))


def test_every_internal_link_resolves_to_a_written_file_and_an_id(site: tuple[Path, list[Path]]) -> None:
    out, pages = site
    checked = 0
    for p in (q for q in pages if q.suffix == ".html"):
        for a in parse(p).all("a"):
            href = a.attrs["href"]
            parts = urlsplit(href)
            if parts.scheme:
                continue
            target = out / parts.path if parts.path else p
            assert target.is_file(), f"{p.name}: {href} -> no such file"
            assert target.resolve().parent == out.resolve()
            if parts.fragment:
                assert parse(target).find_id(parts.fragment) is not None, f"{p.name}: {href}: no such id"
            checked += 1
    assert checked > 24  # the index links every series; every page links the index and the fleet


def test_nothing_is_fetched_from_the_network(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "site"
    pages = publish(store, *analysed(read_history(store, "main")), out, repo_url="https://github.com/example/project")
    for p in (q for q in pages if q.suffix == ".html"):
        text = p.read_text(encoding="utf-8")
        assert "@import" not in text and "url(" not in text
        for node in parse(p).walk():
            assert node.tag not in ("script", "iframe", "object", "embed", "img") or not node.attrs.get("src")
            for name in ("src", "srcset", "data", "poster"):
                value = node.attrs.get(name, "")
                assert not value.startswith(("http://", "https://", "//")), f"{p.name}: <{node.tag} {name}={value}>"
            if node.tag == "link":
                assert not node.attrs.get("href", "").startswith(("http://", "https://", "//")), p.name


def _rows(table: Node) -> list[Node]:
    (body,) = table.all("tbody")
    return body.all("tr")


def test_index_lists_unacknowledged_change_points_newest_first_then_the_acknowledged_one(
        site: tuple[Path, list[Path]]) -> None:
    out, _ = site
    doc = parse(out / "index.html")
    ids = [n.attrs.get("id") for n in doc.walk() if n.attrs.get("id") in ("changes", "acked", "quiet-series")]
    assert ids == ["changes", "acked", "quiet-series"]  # unacknowledged, acknowledged, quiet: in that order
    open_rows, acked_rows = _rows(doc.by_id("changes")), _rows(doc.by_id("acked"))
    assert len(open_rows) == 4 * len(MODES) * 2 - 1 and len(acked_rows) == 1
    assert not any("acked" in r.attrs.get("class", "") for r in open_rows)
    upgrade, code = commit_of(UPGRADE)[:10], commit_of(CODE_STEP)[:10]
    firsts = [upgrade in r.content() for r in open_rows]
    assert firsts == sorted(firsts, reverse=True) and firsts.count(True) == 12  # the newest (the upgrade) first
    for r in open_rows[:12]:
        assert "driver_version 12060 -> 12080" in r.content() and "▲ slower" in r.content()
        assert r.all("svg", "spark") and r.all("a")
    for r in open_rows[12:]:
        assert f"code ({commit_of(CODE_STEP - 1)[:10]}..{code})" in r.content()
    (acked,) = acked_rows
    assert "acked" in acked.attrs["class"] and REASON in acked.content() and code in acked.content()
    assert f"{ACKED_TEST}[device]" in acked.content()
    quiet = _rows(doc.by_id("quiet-series"))
    assert len(quiet) == 2 * len(MODES) and all(H100.device in r.content() for r in quiet)
    assert any(a.attrs["href"] == "fleet.html" for a in doc.all("a"))


def test_a_test_page_has_a_chart_per_key_and_device_with_its_marks(site: tuple[Path, list[Path]]) -> None:
    out, _ = site
    doc = _test_page(out, ACKED_TEST)
    charts = doc.all("svg", "chart")
    assert len(charts) == 2  # k:kernel on the Orin, and on the H100
    orin, h100 = sorted(charts, key=lambda c: H100.device in c.content())
    for chart in charts:
        assert chart.attrs["role"] == "img"
        labelled = chart.attrs["aria-labelledby"].split()
        assert [chart.by_id(i).tag for i in labelled] == ["title", "desc"]
        lines = chart.all("polyline", "mark")
        assert len(lines) == len(MODES)
        assert len({line.attrs.get("stroke-dasharray", "") for line in lines}) == len(MODES)  # told apart by dash
        shapes = [tuple(sorted({n.tag for n in g.all(cls="point")})) for g in chart.all("g", "series")]
        assert len(set(shapes)) == len(MODES)  # and by marker shape
        assert len(chart.all(cls="spread")) == len(MODES)  # every session's spread
    assert "device: 60 session(s)" in orin.by_id(orin.attrs["aria-labelledby"].split()[1]).content()
    assert len(orin.all(cls="changepoint")) == 2 * len(MODES) and not h100.all(cls="changepoint")
    (acked,) = orin.all(cls="acked")
    assert REASON in acked.content()  # its tooltip
    labels = [t.content() for t in orin.all("text", "changepoint-label")]
    assert sum("acknowledged" in t for t in labels) == 1 and all("%" in t for t in labels)
    (boundary,) = orin.all("g", "boundary")
    assert "driver 12060→12080" in boundary.content() and "L4T 36.4.3→36.5.0" in boundary.content()
    assert not h100.all("g", "boundary")
    tables = doc.all("table", "changes")
    assert len(tables) == 1 and len(_rows(tables[0])) == 2 * len(MODES)
    assert sum(REASON in r.content() for r in _rows(tables[0])) == 1


def test_a_mode_is_drawn_in_the_colour_and_dash_of_the_session_report(site: tuple[Path, list[Path]]) -> None:
    drawn = set()
    for page in site[1]:
        text = page.read_text(encoding="utf-8")
        drawn |= set(re.findall(r'<g class="series" data-mode="(\w+)">\s*<[^>]*>\s*<polyline class="mark line" '
                                r'points="[^"]*" fill="none" stroke="(#\w+)" stroke-width="[\d.]+"'
                                r'(?: stroke-dasharray="([\d ]+)")?', text))
    assert {mode for mode, _, _ in drawn} >= {"device", "managed"}
    for mode, colour, dash in drawn:
        assert (colour, dash) == (charts.mode_color(mode, [mode]), mode_style(mode).dash), mode


def test_a_test_of_the_orin_alone_has_one_chart(site: tuple[Path, list[Path]]) -> None:
    out, _ = site
    charts = _test_page(out, "tests/test_k.py::test_3").all("svg", "chart")
    assert len(charts) == 1 and ORIN.device in charts[0].content()


def test_commits_link_to_the_repository_where_it_is_known(store: Store, tmp_path: Path) -> None:
    with_repo = publish(store, *analysed(read_history(store, "main")), tmp_path / "a", repo_url="https://example.org/r/")
    hrefs = {a.attrs["href"] for a in parse(with_repo[0]).all("a")}
    assert f"https://example.org/r/commit/{commit_of(UPGRADE)}" in hrefs
    without = publish(store, *analysed(read_history(store, "main")), tmp_path / "b")
    assert not [a for p in without if p.suffix == ".html" for a in parse(p).all("a") if "/commit/" in a.attrs["href"]]


def test_the_fleet_page_and_its_json(store: Store, site: tuple[Path, list[Path]]) -> None:
    out, _ = site
    matrix = fleet_matrix(store, read_history(store, "main"))
    assert json.loads((out / "fleet.json").read_text(encoding="utf-8")) == json.loads(json.dumps(matrix.to_json()))
    table = parse(out / "fleet.html").find_id("fleet")
    assert table is not None and table.tag == "table"
    assert len(matrix.classes) == 3  # the Orin before and after the upgrade, the H100
    (head,) = table.all("thead")
    assert len(head.all("th")) == 2 + len(matrix.classes)
    rows = _rows(table)
    assert len(rows) == len(matrix.rows) > 0
    for (test, key), row in zip(matrix.rows, rows, strict=True):
        cells = row.all("td")[1:]
        assert test in row.content() and key in row.content()
        for cls, td in zip(matrix.classes, cells, strict=True):
            cell = matrix.cells.get((test, key, cls.machine_class))
            if cell is None:
                assert "not measured" in td.content()
            else:
                assert (cell.pick or "no clear winner") in td.content() and cell.text in td.content()


def test_progress_is_told_after_each_file(store: Store, tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    history = read_history(store, "main")
    pages = publish(store, *analysed(history), tmp_path / "site", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, len(pages)) for i in range(1, len(pages) + 1)]


def test_pages_made_in_forked_processes_are_the_pages_made_here(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history, found = analysed(read_history(store, "main"))
    here = publish(store, history, found, tmp_path / "here")
    monkeypatch.setattr(site_module, "PARALLEL_POINTS", 0)
    monkeypatch.setattr(forked_module.os, "cpu_count", lambda: 2)
    calls: list[tuple[int, int]] = []
    forked = publish(store, history, found, tmp_path / "forked", progress=lambda d, t: calls.append((d, t)))
    assert [p.name for p in forked] == [p.name for p in here] and len(here) >= 4
    assert calls == [(i, len(forked)) for i in range(1, len(forked) + 1)]
    stamp = re.compile(r"Published [0-9T:-]+Z")
    for a, b in zip(here, forked, strict=True):
        assert stamp.sub("", a.read_text(encoding="utf-8")) == stamp.sub("", b.read_text(encoding="utf-8")), a.name


# -- writing it -----------------------------------------------------------------------------------------------------


def test_a_publish_replaces_the_site_whole(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "site"
    publish(store, *analysed(read_history(store, "main")), out)
    (out / "stale.html").write_text("old")
    pages = publish(store, *analysed(read_history(store, "main")), out)
    assert not (out / "stale.html").exists()
    assert {p.name for p in out.iterdir()} == {p.name for p in pages} | {MARKER}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no temporary folder left beside it


def test_a_failed_publish_leaves_the_old_site(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "site"
    publish(store, *analysed(read_history(store, "main")), out)
    (out / "stale.html").write_text("old")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(done: int, total: int) -> None:
        if done == 3:
            raise RuntimeError("disk full (simulated)")

    with pytest.raises(RuntimeError, match="simulated"):
        publish(store, *analysed(read_history(store, "main")), out, progress=fail)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_a_folder_of_other_files_is_never_replaced(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"docs: a folder of other files \(no \.jetmem-site in it\)"):
        publish(store, *analysed(read_history(store, "main")), out)
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file: not a folder"):
        publish(store, *analysed(read_history(store, "main")), tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert publish(store, *analysed(read_history(store, "main")), empty)[0] == empty / "index.html"


def test_names_are_escaped_and_page_names_are_safe(tmp_path: Path) -> None:
    rng = random.Random(1)
    nodeid = "tests/tëst_<b>.py::test_ü[\"x&y\"]"  # the test; its node ids add the mode to the parameters
    with open_store(str(tmp_path / "h.sqlite")) as store:
        for seed in range(3):
            records = tuple(record(f"{nodeid[:-1]}-{m}]", m, 1.0 + i, rng) for i, m in enumerate(MODES))
            ctx = SessionContext(commit=commit_of(seed), branch="main", commit_time=f"2026-11-01T00:0{seed}:00Z")
            store.add(StoredSession(f"s{seed}", f"2026-11-01T00:0{seed}:00Z", ctx, ORIN, records))
        pages = publish(store, *analysed(read_history(store, "main")), tmp_path / "site")
    name = page_name(nodeid)
    assert name in {p.name for p in pages}
    assert name.isascii() and all(ch.isalnum() or ch in "-_." for ch in name)
    assert page_name("a/b") != page_name("a-b")  # one slug, two hashes
    text = (tmp_path / "site" / name).read_text(encoding="utf-8")
    assert "<b>" not in text and "&lt;b&gt;" in text
    assert nodeid in parse(tmp_path / "site" / name).content()


# -- the charts -----------------------------------------------------------------------------------------------------


def test_thinning_keeps_the_ends_the_extremes_and_the_change_points() -> None:
    rng = random.Random(3)
    points = [Point(i, 1.0 + 0.01 * rng.gauss(0, 1), 0.01) for i in range(5000)]
    points[1234] = Point(1234, 9.0, 0.01)  # a spike
    points[2345] = Point(2345, 0.1, 0.01)  # a dip
    kept = thin(points, frozenset({4321}))
    xs = [p.x for p in kept]
    assert len(kept) <= MAX_POINTS + 1 and xs == sorted(set(xs))
    assert {0, 4999, 1234, 2345, 4321} <= set(xs)
    assert thin(points[:MAX_POINTS]) == points[:MAX_POINTS]  # nothing thinned up to the limit


def test_ticks_cover_the_range_in_round_steps() -> None:
    for lo, hi in ((0.93, 1.27), (0.0, 10.0), (12.5, 13.1), (1e-4, 3e-4)):
        ticks = nice_ticks(lo, hi)
        assert 3 <= len(ticks) <= 11 and all(lo <= t <= hi for t in ticks)
        steps = {round(b - a, 12) for a, b in itertools.pairwise(ticks)}
        assert len(steps) == 1
        (step,) = steps
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 9) in (1.0, 2.0, 2.5, 5.0)


def test_a_sparkline_marks_its_change_points() -> None:
    values = [1.0] * 30 + [1.1] * 30
    builder = TreeBuilder()
    builder.feed(sparkline(values, [30], label="a series"))
    (svg,) = builder.root.all("svg")
    assert svg.attrs["role"] == "img" and svg.attrs["aria-label"] == "a series"
    assert len(svg.all("polyline", "mark")) == 1 and len(svg.all("circle", "spark-cp")) == 1


def test_a_long_sparkline_is_thinned_around_its_change_point_and_keeps_every_left_out_session() -> None:
    rng = random.Random(5)
    values = np.array([1.0 + 0.01 * rng.gauss(0, 1) for _ in range(5000)])
    values[3000:] *= 1.2
    values[777] = 5.0  # a spike (left out: off the line)
    builder = TreeBuilder()
    builder.feed(sparkline(values, [3000], label="long", width=120, left_out=[777, 4000]))
    (svg,) = builder.root.all("svg")
    (line,) = svg.all("polyline", "mark")
    xy = [tuple(map(float, pair.split(","))) for pair in line.attrs["points"].split()]
    assert len(xy) <= 2 * 120 + 1 and [x for x, _ in xy] == sorted(x for x, _ in xy)
    x_of = {i: round(1 + 118 * i / 4999, 1) for i in (0, 777, 2999, 3000, 4000, 4999)}
    xs = {x for x, _ in xy}
    assert {x_of[0], x_of[3000], x_of[4999]} <= xs and x_of[777] not in xs  # the change kept, the spike off it
    assert min(y for _, y in xy) > 2.0  # the spike (top of the box) is not on the line
    assert len(svg.all("circle", "spark-left-out")) == 2 and len(svg.all("circle", "spark-cp")) == 1


def test_thinning_on_arrays_keeps_what_thinning_points_keeps() -> None:
    rng = random.Random(8)
    values = [1.0 + 0.01 * rng.gauss(0, 1) for _ in range(3333)]
    points = [Point(i, v, 0.0) for i, v in enumerate(values)]
    assert [p.x for p in thin(points, frozenset({17, 2048}))] == thin_indices(values, [17, 2048]).tolist()
    assert thin_indices(values[:10], [99]).tolist() == list(range(10))


def test_an_empty_store_publishes_an_index_and_an_empty_fleet(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "h.sqlite")) as store:
        pages = publish(store, *analysed(read_history(store, "main")), tmp_path / "site")
    assert [p.name for p in pages] == ["index.html", "fleet.html", "fleet.json"]
    index = parse(pages[0])
    assert all(not _rows(index.by_id(i)) for i in ("changes", "acked", "quiet-series"))
    assert not parse(pages[1]).by_id("fleet").all("tr")
    assert json.loads(pages[2].read_text(encoding="utf-8"))["rows"] == []


# -- the crowded store: sessions left out, identical series, labels that would collide -------------------------------

CROWDED_TEST = "tests/test_c.py::test_crowded"
CROWDED_MODES = {"device": 1.0, "managed": 1.0, "zero_copy": 1.6, "registered": 1.7, "system": 2.2}
CROWDED_SESSIONS, OUTLIER, DIRTY = 31, 8, 25


def crowded_session(seed: int) -> StoredSession:
    """Session ``seed`` of the crowded store: every mode +30% from commit 15 (the code), +30% from 20 (a driver and
    JetPack upgrade) and +20% from 22 (a power mode change); device and managed measure the same samples;
    zero_copy is 3x at commit 8 (an outlier); commit 25 is measured with uncommitted changes, every mode 0.6x."""
    machine = ORIN if seed < 20 else UPGRADED if seed < 22 else replace(UPGRADED, nvpmodel_mode="15W")
    factor = (1.3 if seed >= 15 else 1.0) * (1.3 if seed >= 20 else 1.0) * (1.2 if seed >= 22 else 1.0)
    records = []
    for mode, base in CROWDED_MODES.items():
        median = base * factor * (3.0 if (seed, mode) == (OUTLIER, "zero_copy") else 1.0) * (
            0.6 if seed == DIRTY else 1.0)
        records.append(record(f"{CROWDED_TEST}[{mode}]", mode, median, random.Random(seed)))
    plain = session(seed, tests=0, machine=machine)
    return replace(plain, uid=f"crowded-{seed}", records=tuple(records),
                   context=replace(plain.context, dirty=seed == DIRTY))


def crowded_store(path: Path) -> None:
    with open_store(str(path)) as store:
        for seed in range(CROWDED_SESSIONS):
            store.add(crowded_session(seed))


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The crowded store's site."""
    root = tmp_path_factory.mktemp("crowded")
    crowded_store(root / "h.sqlite")
    with open_store(str(root / "h.sqlite"), create=False) as store:
        publish(store, *analysed(read_history(store, "main")), root / "site")
    return root / "site"


def _chart(page: Node) -> Node:
    (chart,) = page.all("svg", "chart")
    return chart


def _series(chart: Node, mode: str) -> Node:
    (group,) = [g for g in chart.all("g", "series") if g.attrs["data-mode"] == mode]
    return group


def test_sessions_that_do_not_count_are_hollow_and_said(crowded: Path) -> None:
    page = parse(crowded / page_name(CROWDED_TEST))
    chart = _chart(page)
    outlier, dirty = commit_of(OUTLIER)[:10], commit_of(DIRTY)[:10]
    for mode in CROWDED_MODES:
        rings = _series(chart, mode).all("g", "left-out")
        notes = sorted(r.all("title")[0].content() for r in rings)
        expected = [dirty] + ([outlier] if mode == "zero_copy" else [])
        assert len(notes) == len(expected)
        assert all("uncommitted changes: left out" in n for n in notes if dirty in n)
        assert [n for n in notes if "outlier: left out" in n] == ([n for n in notes if outlier in n])
        assert all(r.all("circle")[0].attrs["fill"] == "#fff" for r in rings)  # hollow
    desc = chart.by_id(chart.attrs["aria-labelledby"].split()[1]).content()
    assert "zero_copy: 31 session(s)" in desc
    assert "2 left out of change points (1 outlier, 1 with uncommitted changes; hollow rings)" in desc
    assert desc.count("1 left out of change points (1 with uncommitted changes; hollow rings)") == 4
    (listed,) = page.all("ul", "left-out")
    items = [li.content() for li in listed.all("li")]
    assert len(items) == 6 and sum("outlier: left out" in i and outlier in i for i in items) == 1
    assert sum("uncommitted changes: left out" in i and dirty in i for i in items) == 5
    (modes,) = [t for t in page.all("table") if "Memory modes" in t.content()]
    assert "1 outlier, 1 with uncommitted changes" in modes.content()
    index = parse(crowded / "index.html")
    rows = [r for t in ("changes", "quiet-series") for r in _rows(index.by_id(t))]
    zero_copy = [r for r in rows if f"{CROWDED_TEST}[zero_copy]" in r.content()]
    assert zero_copy and all("2 of 31 session(s) left out of change points (1 outlier, 1 with uncommitted changes)"
                             in r.content() for r in zero_copy)
    assert all(r.all("circle", "spark-left-out") for r in rows)
    assert "5 series have sessions left out of change points" in index.content()


def test_include_dirty_counts_the_sessions_of_uncommitted_changes(tmp_path: Path) -> None:
    crowded_store(tmp_path / "h.sqlite")
    with open_store(str(tmp_path / "h.sqlite"), create=False) as store:
        publish(store, *analysed(read_history(store, "main", include_dirty=True)), tmp_path / "site")
    chart = _chart(parse(tmp_path / "site" / page_name(CROWDED_TEST)))
    rings = [r.content() for r in chart.all("g", "left-out")]
    assert not [r for r in rings if "uncommitted changes" in r]  # they count: judged as any session
    assert [r for r in rings if commit_of(OUTLIER)[:10] in r] == [r for r in rings if r.startswith("zero_copy")
                                                                   and commit_of(OUTLIER)[:10] in r] != []


def test_a_long_list_of_sessions_left_out_is_cut_and_counted(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "h.sqlite")) as store:
        for seed in range(30):
            plain = session(seed, tests=1)
            store.add(replace(plain, context=replace(plain.context, dirty=True)))
        publish(store, *analysed(read_history(store, "main")), tmp_path / "site")
    page = parse(tmp_path / "site" / page_name("tests/test_k.py::test_0"))
    (listed,) = page.all("ul", "left-out")
    items = [li.content() for li in listed.all("li")]
    assert len(items) == LIST_LEFT_OUT + 1 and items[-1] == f"and {3 * 30 - LIST_LEFT_OUT} more"
    assert "left out of change points (hollow rings), 90:" in page.content()
    chart = _chart(page)
    assert len(chart.all("g", "left-out")) == 90 and len(chart.all("polyline", "line")) == len(MODES)


def test_identical_series_are_both_visible_and_the_legend_says_so(crowded: Path) -> None:
    chart = _chart(parse(crowded / page_name(CROWDED_TEST)))

    def xs(mode: str) -> list[float]:
        (line,) = _series(chart, mode).all("polyline", "line")
        return [float(pair.split(",")[0]) for pair in line.attrs["points"].split()]

    device, managed = xs("device"), xs("managed")
    assert len(device) == len(managed) > 20
    assert all(abs(b - a - 3.0) < 0.11 for a, b in zip(device, managed, strict=True))  # drawn 3 px right
    assert xs("zero_copy")[0] == device[0]  # a series of its own stays where it is
    (legend,) = chart.all("g", "legend")
    assert "managed (same values as device: drawn 3 px right)" in legend.content()
    assert "device (" not in legend.content()


def test_the_fleet_says_no_clear_winner_once(store: Store, crowded: Path, site: tuple[Path, list[Path]]) -> None:
    tied = 0
    for folder in (crowded, site[0]):
        for td in _rows(parse(folder / "fleet.html").by_id("fleet"))[0].all("td")[1:]:
            text = td.content()
            assert text.count("no clear winner") <= 1, text
            tied += "no clear winner (tied: device, managed)" in text
    assert tied >= 1
    matrix = fleet_matrix(store, read_history(store, "main"))
    for row, (test, key) in zip(_rows(parse(site[0] / "fleet.html").by_id("fleet")), matrix.rows, strict=True):
        for td in row.all("td")[1:]:
            first = next((n for n in td.all("span", "pick")), None)
            if first is not None:  # the pick in bold, said once before the ratios
                assert td.content().split(first.content(), 1)[0] == "" and test in row.content() and key


def _outside(node: Node, cls: str) -> str:
    """The text of ``node`` outside every element of class ``cls``."""
    return "".join(part if isinstance(part, str) else "" if cls in part.attrs.get("class", "").split()
                   else _outside(part, cls) for part in node.parts)


def test_a_cause_keeps_each_arrow_with_what_it_joins(site: tuple[Path, list[Path]]) -> None:
    out, _ = site
    cells = [td for table in ("changes", "acked") for r in _rows(parse(out / "index.html").by_id(table))
             for td in r.all("td")]
    cells += [td for t in _test_page(out, ACKED_TEST).all("table", "changes") for td in t.all("td")]
    spans = [span for td in cells for span in td.all("span", "nw")]
    assert len(spans) > 24
    assert all(re.fullmatch(r"\S+ (->|→) \S+", span.content()) for span in spans)
    assert not [td.content() for td in cells if "->" in _outside(td, "nw") or "→" in _outside(td, "nw")]
    assert ".nw{white-space:nowrap}" in (out / "index.html").read_text(encoding="utf-8")


# -- the layout, by geometry --------------------------------------------------------------------------------------

#: A character's estimated width, in font sizes.
CHAR = 0.6
LABELS = {"changepoint-label", "boundary-label", "x-tick", "y-tick", "key-entry", "legend-label"}

Box = tuple[float, float, float, float]


def _boxes(svg: Node) -> list[tuple[str, str, Box]]:
    """(class, text, estimated box) of every unrotated text of a chart."""
    size = float(svg.attrs["font-size"])
    out = []
    for t in svg.all("text"):
        if "transform" in t.attrs:  # the y axis title, along the left edge
            continue
        text = "".join(part for part in t.parts if isinstance(part, str))
        x, y, w = float(t.attrs["x"]), float(t.attrs["y"]), CHAR * size * len(text)
        anchor = t.attrs.get("text-anchor", "start")
        x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
        y0, y1 = (y - size / 2, y + size / 2) if t.attrs.get("dominant-baseline") == "middle" else (
            y - 0.8 * size, y + 0.2 * size)
        out.append((t.attrs.get("class", ""), text, (x0, y0, x0 + w, y1)))
    return out


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def layout_faults(texts: list[tuple[str, str, Box]], lines: list[tuple[float, float, float]], width: float,
                  height: float) -> list[str]:
    """What is wrong with a chart's layout: a text outside (0, 0, width, height), two labels that overlap, a change
    point label across a boundary line (x, y0, y1)."""
    faults = [f"{text!r} outside the chart: {box}" for _, text, box in texts
              if box[0] < 0 or box[1] < 0 or box[2] > width or box[3] > height]
    labels = [(text, box) for cls, text, box in texts if cls in LABELS]
    faults += [f"{a!r} overlaps {b!r}" for (a, p), (b, q) in itertools.combinations(labels, 2) if _overlap(p, q)]
    faults += [f"{text!r} across the boundary at x={x}" for cls, text, box in texts if cls == "changepoint-label"
               for x, y0, y1 in lines if box[0] < x < box[2] and box[1] < y1 and y0 < box[3]]
    return faults


def _svg_layout(svg: Node) -> list[str]:
    _, _, width, height = (float(v) for v in svg.attrs["viewbox"].split())
    lines = [(float(ln.attrs["x1"]), float(ln.attrs["y1"]), float(ln.attrs["y2"]))
             for g in svg.all("g", "boundary") for ln in g.all("line")]
    return layout_faults(_boxes(svg), lines, width, height)


def test_no_label_overlaps_another_or_leaves_the_chart(crowded: Path, site: tuple[Path, list[Path]]) -> None:
    charts = [svg for folder in (crowded, site[0]) for page in sorted(folder.glob("test-*.html"))
              for svg in parse(page).all("svg", "chart")]
    assert len(charts) >= 7
    for svg in charts:
        assert _svg_layout(svg) == [], svg.attrs["id"]
    chart = _chart(parse(crowded / page_name(CROWDED_TEST)))
    assert len(chart.all(cls="changepoint")) == 10 and len(chart.all("g", "boundary")) == 2
    labels = chart.all("text", "changepoint-label")
    keyed = ["".join(part for part in t.parts if isinstance(part, str)) for t in chart.all("text", "key-entry")]
    assert len(labels) == 10  # each change point labelled: its label, or its number and the label in the key
    assert all(re.fullmatch(r"#\d+ \S+ [+-]\d+\.\d%.*", k) for k in keyed)
    numbers = {t.content() for t in labels if t.content().startswith("#")}
    assert numbers == {k.split()[0] for k in keyed}
    ticks = sorted(chart.all("text", "x-tick"), key=lambda t: float(t.attrs["x"]))
    assert len(ticks) >= 5 and ticks[-1].content() == commit_of(CROWDED_SESSIONS - 1)[:7]  # labelled, inside


def test_the_layout_check_finds_what_it_looks_for() -> None:
    inside = ("x-tick", "abcdefg", (700.0, 250.0, 746.2, 261.0))
    assert layout_faults([inside], [], 760, 330) == []
    assert layout_faults([("x-tick", "abcdefg", (720.0, 250.0, 766.2, 261.0))], [], 760, 330)  # clipped
    assert layout_faults([inside, ("changepoint-label", "x", (740.0, 255.0, 750.0, 262.0))], [], 760, 330)
    assert layout_faults([("changepoint-label", "device +1%", (100.0, 50.0, 160.0, 61.0))], [(120.0, 30.0, 258.0)],
                         760, 330)
