"""One page frame and one escaping rule for every HTML page pytest-jetmem writes: the session report
(:mod:`pytest_jetmem.report.html`) and the pages of the history site (:mod:`pytest_jetmem.history.site`).

The frame (:func:`page`): ``<!DOCTYPE html>``, ``lang``, UTF-8, the viewport, a generator, the title, one inline
stylesheet (:data:`BASE_CSS`, the rules every page shares, then the page's own) and the body; nothing is fetched.

The escaping rule: text reaches markup only through :func:`esc` (``& < > " '`` escaped, so one call serves text and
double-quoted attribute values alike). Markup already built is a :class:`Markup`, which :func:`esc` returns as it is,
so a fragment interpolated into another is escaped exactly once; :func:`join` and :func:`page` pass each part
through :func:`esc` too, so a plain string handed to them comes out as text, never as markup. A :class:`Markup` is
made only of a literal or an f-string whose every value is ``esc(...)`` or a number with a format spec
(``tests/unit/test_draw_page.py`` checks the report's and the site's modules for it), or of a chart drawn by the
package's drawing code. GPU-free and pytest-free; imports only the mode styles of the CUDA layer.

Hand-written, not Jinja2: a sixth runtime dependency on Jetson images for markup built mostly in loops, and templates
would leave mypy's and ruff's reach (docs/architecture.md, "Pages: one frame, one escaping rule, no template engine").
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from pytest_jetmem.cuda.mode_styles import COLOURS, mode_style

__all__ = ["BASE_CSS", "Markup", "esc", "join", "mode_swatch", "page"]


class Markup(str):
    """A string of HTML already built, its text escaped: :func:`esc` returns it as it is."""

    __slots__ = ()


def esc(value: object) -> Markup:
    """``value`` as HTML: a :class:`Markup` as it is, anything else ``str(value)`` with ``& < > " '`` escaped (for
    text and double-quoted attribute values alike)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[Markup], sep: str = "") -> Markup:
    """``parts`` one after another with ``sep`` (markup, a literal of the caller) between them; a part that is not
    :class:`Markup` is escaped as text."""
    return Markup(sep.join(map(esc, parts)))


def mode_swatch(mode: str, modes: Sequence[str] = ()) -> Markup:
    """A small square of ``mode``'s colour among the ``modes`` of one chart
    (:func:`~pytest_jetmem.cuda.mode_styles.mode_style`: the colour of its line and bars in every chart)."""
    return Markup(f'<span class="mode" style="background:{esc(mode_style(mode, modes).colour)}"></span>')


#: The rules every page shares: type, colours, headings, tables, figures, code, focus, the mode swatch and the
#: screen-reader-only caption; a page's own rules come after them (:func:`page`'s ``css``).
BASE_CSS = f"""
body{{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1b1b;background:#fff}}
h1{{font-size:22px;margin:0 0 8px}}h2{{font-size:18px;margin:28px 0 8px}}h3{{font-size:15px;margin:22px 0 6px}}
table{{border-collapse:collapse}}caption{{text-align:left;font-weight:600;padding:4px 0}}
th,td{{border:1px solid #d7d7d7;padding:3px 6px;text-align:left;vertical-align:top}}th{{background:#f2f4f7}}
td.num{{text-align:right;font-variant-numeric:tabular-nums}}.nw{{white-space:nowrap}}code{{font-size:12.5px}}
.chart{{max-width:100%;height:auto}}a:focus{{outline:2px solid {COLOURS[0]}}}
.mode{{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}}
.sr{{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}}
"""


def page(title: str, body: Iterable[Markup], *, generator: str, css: str = "", script: str = "") -> str:
    """A whole HTML5 document: doctype, ``lang="en"``, UTF-8, the viewport, ``generator`` and ``title`` (both text,
    escaped), :data:`BASE_CSS` then ``css`` in one ``<style>``, the ``body`` parts one a line (each through
    :func:`esc`), then ``script`` in a ``<script>`` where given. ``css`` and ``script`` are the page's own
    constants, never data: they go in as they are."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="{esc(generator)}">',
        f"<title>{esc(title)}</title>",
        f"<style>{BASE_CSS}{css}</style>",
        "</head>",
        "<body>",
    ]
    tail = [f"<script>{script}</script>"] if script else []
    return "\n".join([*head, *map(esc, body), *tail, "</body>", "</html>", ""])
