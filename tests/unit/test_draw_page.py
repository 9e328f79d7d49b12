"""draw.page: one page frame and one escaping rule for the session report and the history site.

- :func:`esc` escapes text and attribute values, and leaves :class:`Markup` as it is (nothing escaped twice);
  :func:`join` and :func:`page` escape what is not markup (nothing slips in unescaped);
- a title, test name, mode, measurement, note, machine field, acknowledgement and repository URL holding
  ``<script>`` and both quotes comes out as text, exactly as given, in the report page and in every page of the
  site (read back with the standard library's parser: the text decoded equals the value, so it was escaped once);
- the report page and the site's pages share the frame: the same head up to the generator, the base stylesheet;
- ``report/html.py`` and ``history/site.py`` define no escaping of their own, import none, write no document
  shell, and make :class:`Markup` only of literals and f-strings whose every value is ``esc(...)`` or a number
  with a format spec (or of a chart the drawing modules drew); the checker itself fails on a bad fragment.
"""

from __future__ import annotations

import ast
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from history_sessions import MODES, ORIN, commit_of, record
from pytest_jetmem.draw import page as page_module
from pytest_jetmem.draw.page import BASE_CSS, Markup, esc, join, mode_swatch, page
from pytest_jetmem.history.analysis import analysed, changes
from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.site import page_name, publish
from pytest_jetmem.history.store import open_store
from pytest_jetmem.history.timeline import read_history
from pytest_jetmem.measure.advice import advise
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.report import html as report_html
from pytest_jetmem.report.html import render_html

SRC = Path(page_module.__file__).parents[1]
BUILDERS = (SRC / "report" / "html.py", SRC / "history" / "site.py")
EVIL = "<script>alert(\"x\")</script> & 'q'"


# -- reading a page back ------------------------------------------------------------------------------------------


class _Page(HTMLParser):
    """The tags, attribute values and text (entities decoded) of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.values: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.values.extend(v or "" for _, v in attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def read(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    p.close()
    return p


def assert_text_not_markup(text: str, value: str = EVIL) -> None:
    """``value`` is on the page as text or an attribute value, decoded exactly (escaped once, not twice), and never
    as markup: no ``<script`` in the source but the page's own script tag."""
    doc = read(text)
    assert any(value in t for t in doc.text) or any(value in v for v in doc.values)
    assert "<script>alert" not in text and "&amp;lt;" not in text and "&amp;#x27;" not in text
    assert doc.tags.count("script") == text.count("<script>")


# -- the rule and the frame on their own --------------------------------------------------------------------------


def test_esc_escapes_text_and_attribute_values_once() -> None:
    assert esc(EVIL) == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;"
    assert isinstance(esc(EVIL), Markup)
    assert esc(esc(EVIL)) == esc(EVIL)  # markup is never escaped again
    assert esc(Markup("<b>x</b>")) == "<b>x</b>"
    assert esc(1.5) == "1.5" and esc(None) == "None"
    assert join([Markup("<i>"), EVIL, Markup("</i>")]) == f"<i>{esc(EVIL)}</i>"  # type: ignore[list-item]
    assert join([Markup("<td>a</td>"), Markup("<td>b</td>")], "\n") == "<td>a</td>\n<td>b</td>"


def test_the_frame_is_one_whole_document() -> None:
    text = page(EVIL, [Markup("<p>hi</p>"), EVIL], generator=EVIL, css="p{color:red}")  # type: ignore[list-item]
    lines = text.splitlines()
    assert lines[:5] == ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
                         '<meta name="viewport" content="width=device-width, initial-scale=1">']
    assert f"<title>{esc(EVIL)}</title>" in text and f'<meta name="generator" content="{esc(EVIL)}">' in text
    assert f"<style>{BASE_CSS}p{{color:red}}</style>" in text
    assert "<p>hi</p>" in lines and esc(EVIL) in lines  # a plain string in the body is text
    assert text.endswith("</body>\n</html>\n") and "<script>" not in text
    assert page("t", [], generator="g", script="var a = 1;").count("<script>var a = 1;</script>") == 1
    assert_text_not_markup(text)


def test_the_swatch_has_the_mode_colour_of_the_charts() -> None:
    from pytest_jetmem.cuda.mode_styles import mode_style

    assert mode_swatch("managed") == f'<span class="mode" style="background:{mode_style("managed").colour}"></span>'
    assert mode_style("device").colour in BASE_CSS  # the focus ring: the first mode's colour


# -- the pages ----------------------------------------------------------------------------------------------------


def _evil_rows() -> list[MeasurementRecord]:
    rng = random.Random(0)
    return [record(f"t.py::test_x[{EVIL}-{m}]", m, 1.0 + i, rng, label=EVIL) for i, m in enumerate(MODES)]


def _report() -> str:
    rows = _evil_rows()
    return render_html(rows, machine={EVIL: EVIL}, notes=[EVIL], title=EVIL, charts="svg", created=EVIL,
                       advice=advise(rows, None))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site whose test, measurement, acknowledgement, branch and repository URL hold :data:`EVIL`."""
    root = tmp_path_factory.mktemp("evil")
    rng = random.Random(1)
    with open_store(str(root / "h.sqlite")) as store:
        for seed in range(12):
            step = 2.0 if seed >= 6 else 1.0
            records = tuple(record(f"tests/t.py::test_{EVIL}[{m}]", m, (1.0 + i) * step, rng, label=EVIL)
                            for i, m in enumerate(MODES))
            ctx = SessionContext(commit=commit_of(seed), branch=EVIL, commit_time=f"2026-11-01T00:{seed:02d}:00Z",
                                 parents=(commit_of(seed - 1),) if seed else ())
            store.add(StoredSession(f"s{seed}", f"2026-11-01T00:{seed:02d}:00Z", ctx, ORIN, records))
        found = changes(read_history(store, EVIL))
        assert found
        store.ack(found[0].series, found[0].device, found[0].after.uid, found[0].after.context.commit, EVIL, EVIL)
        publish(store, *analysed(read_history(store, EVIL)), root / "site", repo_url=f"https://example.org/{EVIL}")
    return root / "site"


def test_every_value_on_the_report_page_is_escaped_once() -> None:
    text = _report()
    assert_text_not_markup(text)
    doc = read(text)
    assert f"<title>{esc(EVIL)}</title>" in text and f"<h1>{esc(EVIL)}</h1>" in text
    assert any(v == "t.py::test_x[" + EVIL + "-device]" for v in doc.values)  # a test's tooltip, an attribute
    assert text.count('<section class="advice">') == 1 and text.count("<script>") == 1  # the page's own script


def test_every_value_on_every_site_page_is_escaped_once(site: Path) -> None:
    pages = sorted(site.glob("*.html"))
    assert len(pages) == 3 and (site / page_name(f"tests/t.py::test_{EVIL}")).is_file()
    for p in pages:
        text = p.read_text(encoding="utf-8")
        assert_text_not_markup(text)
        assert "<script" not in text  # the site runs no script at all
    index = read((site / "index.html").read_text(encoding="utf-8"))
    assert any(f"https://example.org/{EVIL}/commit/" in v for v in index.values)  # the repository, an href
    assert sum(EVIL in t for t in index.text) >= 3  # the branch, the test, the acknowledgement


def _head(text: str) -> str:
    return text.split('<meta name="generator"', 1)[0]


def _style(text: str) -> str:
    return text.split("<style>", 1)[1].split("</style>", 1)[0]


def test_the_report_and_the_site_share_the_frame(site: Path) -> None:
    report = _report()
    for p in sorted(site.glob("*.html")):
        text = p.read_text(encoding="utf-8")
        assert _head(text) == _head(report)  # doctype, lang, charset, viewport
        assert _style(text).startswith(BASE_CSS) and _style(report).startswith(BASE_CSS)
        assert _style(text) != _style(report)  # each with its own rules after the shared ones
        assert text.count("<!DOCTYPE html>") == report.count("<!DOCTYPE html>") == 1
        assert "<title>" in text and text.endswith("</body>\n</html>\n") and report.endswith("</body>\n</html>\n")


# -- the builders' code -------------------------------------------------------------------------------------------

ESCAPERS = re.compile(r"escape|^esc$|quote", re.IGNORECASE)
SHELL = re.compile(r"<!doctype|<html|<head|<meta|<style|<body", re.IGNORECASE)
NUMBER_SPEC = re.compile(r".*[bdeEfFgGnoxX%]$")


def _drawing_names(tree: ast.Module) -> set[str]:
    """The names a module imports from the drawing modules (charts and sparklines that escape their own text)."""
    drawing = re.compile(r"^pytest_jetmem\.(draw\.svg|report\.charts|history\.svg|history\.sparkline)$")
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and drawing.match(n.module or "")]
    return {a.asname or a.name for n in imports for a in n.names}


def _is_constant(node: ast.expr) -> bool:
    if isinstance(node, ast.IfExp):
        return _is_constant(node.body) and _is_constant(node.orelse)
    return isinstance(node, ast.Constant)


def _safe_value(v: ast.FormattedValue) -> bool:
    """``esc(...)``, a number formatted with a numeric format spec, or a constant."""
    if isinstance(v.value, ast.Call) and isinstance(v.value.func, ast.Name) and v.value.func.id == "esc":
        return v.conversion == -1 and v.format_spec is None
    if v.format_spec is not None:
        spec = [s.value for s in v.format_spec.values if isinstance(s, ast.Constant)]
        return len(spec) == len(v.format_spec.values) and bool(NUMBER_SPEC.match("".join(map(str, spec))))
    return _is_constant(v.value)


def _trusted(arg: ast.expr, drawn: set[str]) -> bool:
    """A literal string, an f-string of safe values (:func:`_safe_value`) or a chart of a drawing module."""
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, str)
    if isinstance(arg, ast.Call):
        return isinstance(arg.func, ast.Name) and arg.func.id in drawn
    if isinstance(arg, ast.JoinedStr):
        return all(_safe_value(v) for v in arg.values if isinstance(v, ast.FormattedValue))
    return False


def markup_faults(source: str) -> list[str]:
    """Every ``Markup(...)`` of ``source`` made of something else than :func:`_trusted` allows, as
    ``line: code``."""
    tree = ast.parse(source)
    drawn = _drawing_names(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "Markup"]
    return [f"{c.lineno}: {ast.unparse(c)[:100]}" for c in calls if len(c.args) != 1 or not _trusted(c.args[0], drawn)]


def test_the_checker_finds_a_value_not_escaped() -> None:
    assert markup_faults('Markup(f"<td>{esc(name)}</td><td>{n:d}</td><td>{x:.4g}</td>")') == []
    assert markup_faults('Markup("<tr>")') == []
    assert len(markup_faults('Markup(f"<td>{name}</td>")')) == 1
    assert len(markup_faults('Markup(f"<td>{name:s}</td>")')) == 1  # a string with a format spec: still text
    assert len(markup_faults('Markup(f"<td>{name!r}</td>")')) == 1
    assert len(markup_faults('Markup(f"<td>{esc(a)!s}</td>")')) == 1
    assert len(markup_faults("Markup(text)")) == 1
    assert len(markup_faults("Markup(fragment())")) == 1
    assert markup_faults("from pytest_jetmem.history.svg import series_chart\nMarkup(series_chart(c))") == []


@pytest.mark.parametrize("path", BUILDERS, ids=lambda p: p.name)
def test_the_page_builders_have_no_escaping_or_shell_of_their_own(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert not [name for name in defined if ESCAPERS.search(name)], "escaping belongs to pytest_jetmem.draw.page"
    imported = {(n.module or "") if isinstance(n, ast.ImportFrom) else a.name for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert not imported & {"html", "markupsafe", "jinja2", "xml.sax.saxutils"}
    others = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module != "pytest_jetmem.draw.page"
              for a in n.names}
    assert not {name for name in others if ESCAPERS.search(name)}  # e.g. charts' escape: esc is draw.page's
    assert "pytest_jetmem.draw.page" in imported
    shells = [s.value for s in ast.walk(tree) if isinstance(s, ast.Constant) and isinstance(s.value, str)
              and SHELL.search(s.value)]
    assert not shells, "the document shell is pytest_jetmem.draw.page's"


@pytest.mark.parametrize("path", BUILDERS, ids=lambda p: p.name)
def test_the_page_builders_make_markup_only_of_escaped_values(path: Path) -> None:
    assert markup_faults(path.read_text(encoding="utf-8")) == []


def test_the_report_module_builds_its_page_through_the_frame() -> None:
    assert report_html.page is page  # one frame, not a copy
