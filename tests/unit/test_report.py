"""The HTML report (``--jetmem-report``) without a GPU: rows from pytester sessions on the fake driver.

The rows are real plugin output: inner pytest sessions run ``jetmem.measure`` on the fake driver (its virtual
clock makes kernel times exact; a seeded jitter per launch gives them a realistic spread), publish their rows
on the reports, and the report plugin writes the page. ``render_html`` and ``write_report`` are also checked
on their own (escaping, atomic writes, the SVG fallback), and, where Debian's ``chromium`` is installed, the
page is rendered by a real headless browser: the screenshot must not be blank and the rendered DOM must hold
the table and one chart per test.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import struct
import subprocess
import tempfile
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, Launch, conftest_source
from pytest_jetmem.measure.baseline import BaselineStore
from pytest_jetmem.measure.record import MeasurementRecord
from pytest_jetmem.plugin.judging import report_records
from pytest_jetmem.report import charts as report_charts
from pytest_jetmem.report.html import json_path_for, render_html, write_report
from pytest_jetmem.report.rows import group_name, group_rows, load_trends

InstallFake = Callable[..., FakeDriver]

# What the inner sessions run: a plain fill in every mode, a parametrized test with a kernel and an
# end-to-end measurement, a side-by-side ratio that zero_copy fails, and a test without measurements.
INNER = textwrap.dedent(
    """
    import numpy as np
    import pytest

    N = 1 << 14


    def fill(jetmem, launches=1):
        x = jetmem.zeros(N)
        k = jetmem.kernel("stream_fill")

        def work():
            for _ in range(launches):
                k.launch(4, 256, (x, np.uint64(N), np.float32(1)))

        return x, work


    @pytest.mark.memmode
    def test_fill(jetmem):
        jetmem.measure(fill(jetmem)[1], label="fill")


    @pytest.mark.memmode
    @pytest.mark.parametrize("launches", [1, 3])
    def test_frames(jetmem, launches):
        x, work = fill(jetmem, launches)
        jetmem.measure(work, label="fill")
        host = np.ones(N, np.float32)
        jetmem.measure(work, label="frame", scope="end_to_end", inputs=[(x, host)], outputs=[x])


    @pytest.mark.memmode("device", "zero_copy")
    @pytest.mark.memmode_runtime(max_ratio=1.5, relative_to="device")
    def test_ratio(jetmem):
        jetmem.measure(fill(jetmem)[1], label="fill")


    def test_plain():
        pass
    """
)

ODD_ID = "<script>alert('x')</script> & \"q\" ünï"
INNER_ODD = textwrap.dedent(
    f"""
    import numpy as np
    import pytest


    @pytest.mark.memmode("device", "managed")
    @pytest.mark.parametrize("what", [1], ids=[{ODD_ID!r}])
    def test_odd(jetmem, what):
        x = jetmem.zeros(1024)
        k = jetmem.kernel("stream_fill")
        jetmem.measure(lambda: k.launch(1, 256, (x, np.uint64(1024), np.float32(1))), label="<b>odd</b> ünï")
    """
)

COST_MS = {"device": 0.20, "managed": 0.24, "host": 1.10}  # zero-copy memory is host memory in the fake


def timed_fake(install: InstallFake, scale: float = 1.0, seed: int = 0) -> FakeDriver:
    """A fake whose launches cost by the memory they touch, with a seeded 3% jitter (a realistic spread)."""
    fake = install("orin")
    rng = np.random.default_rng(seed)

    def cost(launch: Launch) -> float:
        kinds = fake.launch_kinds(launch)
        base = max((COST_MS[k] for k in kinds), default=0.01)
        return scale * base * (1.0 + 0.03 * float(rng.standard_normal()))

    fake.kernel_ms = cost
    return fake


def rows_of(reprec: Any) -> list[MeasurementRecord]:
    """The records the runtime plugin published on the call reports of an inline run."""
    out = []
    for rep in reprec.getreports("pytest_runtest_logreport"):
        out.extend(report_records(rep))
    return out


def as_json(rows: list[MeasurementRecord]) -> Any:
    """The records' JSON objects, as a JSON document holds them."""
    return json.loads(json.dumps([r.to_json() for r in rows]))


def run_sessions(pytester: pytest.Pytester, install: InstallFake, sessions: int = 3) -> tuple[Any, Path]:
    """Run INNER ``sessions`` times, each saving a baseline run1, run2, ..., getting a bit slower every time;
    the last one writes the report. Returns (the last run's hook recorder, the report path)."""
    pytester.makepyfile(test_inner=INNER)
    out = pytester.path / "out" / "report.html"
    reprec = None
    for i in range(sessions):
        timed_fake(install, scale=1.0 + 0.04 * i, seed=i)
        args = ["-p", "no:cacheprovider", "--jetmem-max-time=0.05", f"--jetmem-save=run{i + 1}"]
        if i == sessions - 1:
            args.append(f"--jetmem-report={out}")
        reprec = pytester.inline_run(*args)
    assert reprec is not None
    return reprec, out


class _Dom(html.parser.HTMLParser):
    """Counts tags and collects attribute values of a page (the standard library's tolerant parser)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.attrs: list[tuple[str, str, str]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs.extend((tag, k, v or "") for k, v in attrs)
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text.append(data)


def dom(page: str) -> _Dom:
    d = _Dom()
    d.feed(page)
    return d


def assert_offline(page: str) -> None:
    """No URL that a browser would fetch: no http(s) at all, every src a data: URI, no <link>, no @import."""
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    d = dom(page)
    assert d.tags.get("link", 0) == 0 and "@import" not in page
    for tag, attr, value in d.attrs:
        if attr in ("src", "href", "xlink:href", "srcset", "action"):
            assert value.startswith(("data:", "#")), (tag, attr, value)


# -- grouping ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodeid", "mode", "expected"),
    [
        ("t.py::test_a[device]", "device", "t.py::test_a"),
        ("t.py::test_a[15x15-zero_copy]", "zero_copy", "t.py::test_a[15x15]"),
        ("t.py::test_a[managed-3]", "managed", "t.py::test_a[3]"),
        ("t.py::C::test_b[1-device-2]", "device", "t.py::C::test_b[1-2]"),
        ("t.py::test_c", "device", "t.py::test_c"),
        ("t.py::test_d[x-y]", "device", "t.py::test_d[x-y]"),
    ],
)
def test_group_name_takes_the_mode_out_of_the_parameter_id(nodeid: str, mode: str, expected: str) -> None:
    assert group_name(nodeid, mode) == expected


def test_json_path_for() -> None:
    assert json_path_for("a/report.html") == Path("a/report.json")
    assert json_path_for("a/report") == Path("a/report.json")
    assert json_path_for("a/r.json") == Path("a/r.json.json")


# -- the report of real sessions -------------------------------------------------------------------------
def test_report_of_a_session_has_every_row_one_chart_per_test_and_a_json_twin(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_charts, "matplotlib_available", lambda: False)  # the SVG charts, whatever is installed
    reprec, out = run_sessions(pytester, install_fake_driver)
    rows = rows_of(reprec)
    # test_fill x3, test_frames x2 params x3 modes x2 measurements, test_ratio x2
    assert len(rows) == 3 + 12 + 2
    page = out.read_text(encoding="utf-8")
    twin = json.loads(json_path_for(out).read_text(encoding="utf-8"))

    # The JSON twin holds the rows exactly as the plugin published them.
    assert twin["format"] == "pytest-jetmem-report" and twin["version"] == 1
    assert twin["rows"] == as_json(rows)
    assert twin["machine"]["device_name"] == "Orin"

    # One table row per measurement, in a table with the documented columns.
    d = dom(page)
    body = page.split('<table class="sortable" id="rows">', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr>") == 1 + len(rows)  # the header row and one per measurement
    for col in ("median ms", "MAD ms", "n", "ratio to ref.", "first call ms", "vs baseline", "verdict"):
        assert f"<th>{col}</th>" in body
    for r in rows:  # the item's name, the node id in the tooltip
        assert f'<td class="test" title="{r.nodeid}"><a href="#' in body
        assert f">{r.nodeid.split('::', 1)[1]}</a>" in body
    assert "1.00x device*" in body  # ratio of medians where no side-by-side ratio was measured
    assert 'class="fail">FAIL ratio</td>' in body  # zero_copy is ~5x device, over max_ratio=1.5
    assert "x device</td>" in body

    # One chart per test: test_fill, test_frames[1], test_frames[3], test_ratio (test_plain measured nothing).
    names = ["test_inner.py::test_fill", "test_inner.py::test_frames[1]", "test_inner.py::test_frames[3]"]
    names.append("test_inner.py::test_ratio")
    assert [g.name for g in group_rows(rows)] == names
    assert d.tags.get("svg", 0) == 4 and page.count('class="test-chart"') == 4
    assert html.escape(report_charts.NO_MATPLOTLIB_NOTE) in page
    for name in names:
        assert f"<h3>{name}</h3>" in page

    # Three saved baselines (run3 by this very session) hold every test: a trend line per mode.
    assert BaselineStore(out.parent.parent / ".jetmem" / "baselines").names() == ["run1", "run2", "run3"]
    assert len(twin["trends"]) == len(rows)
    pts = twin["trends"][0]["points"]
    assert [p["label"] for p in pts] == ["run1", "run2", "run3 (this run)"]
    assert pts[0]["median"] < pts[1]["median"] < pts[2]["median"]  # each session was 4% slower
    assert d.tags.get("polyline", 0) == 3 + 2 * 3 * 2 + 2

    # The advice: one per test and measurement measured in two or more modes, on the page and in the twin.
    advice = twin["advice"]
    assert advice["device"]["name"] == "Orin" and advice["device"]["kind"] == "integrated"
    assert advice["confidence"] == 0.99 and advice["equivalence_margin"] == 0.05
    subjects = [(a["test"], a["key"]) for a in advice["tests"]]
    assert subjects == [
        ("test_inner.py::test_fill", "fill:kernel"),
        ("test_inner.py::test_frames[1]", "fill:kernel"),
        ("test_inner.py::test_frames[1]", "frame:end_to_end"),
        ("test_inner.py::test_frames[3]", "fill:kernel"),
        ("test_inner.py::test_frames[3]", "frame:end_to_end"),
        ("test_inner.py::test_ratio", "fill:kernel"),
    ]
    fill = advice["tests"][0]  # device 0.20 ms, managed 0.24, zero-copy 1.10 (3% jitter): device, clearly
    assert (fill["pick"], fill["margin"]["mode"]) == ("device", "managed")
    assert fill["margin"]["ci"][0] > 1.05 and fill["rule"]["verdict"] == "agrees"
    assert {r["kind"] for r in fill["reasons"]} >= {"uncached_penalty"}
    assert "<h2>Advice</h2>" in page and page.index("<h2>Advice</h2>") < page.index("<h2>Charts</h2>")
    assert page.count('<section class="advice">') == 6
    assert html.escape(fill["summary"]) in page
    assert_offline(page)


def test_report_keeps_its_advice_when_the_terminal_section_is_off(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    timed_fake(install_fake_driver)
    pytester.makepyfile(test_odd=INNER_ODD)
    out = pytester.path / "r.html"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--jetmem-report={out}", "--jetmem-advice=off")
    assert result.ret == pytest.ExitCode.OK
    assert not any("jetmem advice" in line for line in result.outlines)
    advice = json.loads(json_path_for(out).read_text(encoding="utf-8"))["advice"]
    assert [t["key"] for t in advice["tests"]] == ["<b>odd</b> ünï:kernel"]  # device against managed
    assert "<h2>Advice</h2>" in out.read_text(encoding="utf-8")


def test_report_without_a_test_in_two_modes_has_no_advice(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    timed_fake(install_fake_driver)
    pytester.makepyfile(test_one=INNER_ODD.replace('memmode("device", "managed")', 'memmode("device")'))
    out = pytester.path / "r.html"
    reprec = pytester.inline_run("-p", "no:cacheprovider", f"--jetmem-report={out}")
    assert len(rows_of(reprec)) == 1
    assert json.loads(json_path_for(out).read_text(encoding="utf-8"))["advice"] is None
    assert "<h2>Advice</h2>" not in out.read_text(encoding="utf-8")


def test_report_escapes_odd_test_names(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    timed_fake(install_fake_driver)
    pytester.makepyfile(test_odd=INNER_ODD)
    out = pytester.path / "odd.html"
    reprec = pytester.inline_run("-p", "no:cacheprovider", f"--jetmem-report={out}")
    rows = rows_of(reprec)
    assert len(rows) == 2 and any("<script>" in r.nodeid for r in rows)
    page = out.read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<b>odd</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;q&quot; " in page  # pytest escapes ünï
    assert "&lt;b&gt;odd&lt;/b&gt; ünï:kernel" in page
    assert page.count('<section class="advice">') == 1  # the advice names the test and measurement, escaped
    d = dom(page)
    assert d.tags.get("script", 0) == 1  # only the page's own sorting script
    assert "alert" not in "".join(d.script_text)
    assert_offline(page)
    assert json.loads(json_path_for(out).read_text(encoding="utf-8"))["rows"] == as_json(rows)


def test_report_without_measurements_says_so(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makeini("[pytest]\njetmem_report = reports/r.html\n")
    pytester.makepyfile(test_none="def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == 0
    out = pytester.path / "reports" / "r.html"
    result.stdout.fnmatch_lines([f"jetmem: report written to {out} (rows as JSON: {out.with_suffix('.json')})"])
    page = out.read_text(encoding="utf-8")
    assert "No test recorded a measurement" in page
    assert json.loads(out.with_suffix(".json").read_text())["rows"] == []


def test_report_that_cannot_be_written_is_a_usage_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    """Checked before the session starts (issue 11); a failure at the end: test_plugin_usage_errors.py."""
    (pytester.path / "taken.html").mkdir()  # a directory where the page should go
    pytester.makepyfile(test_none="def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--jetmem-report=taken.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --jetmem-report=*taken.html: is a directory; expected a file path"])
    assert not (pytester.path / "taken.json").exists()


def test_only_the_xdist_controller_writes_the_report(pytester: pytest.Pytester, jetmem_kernel_cache: Path) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.25))
    pytester.makepyfile(test_inner=INNER)
    out = pytester.path / "x" / "r.html"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--jetmem-max-time=0.05", f"--jetmem-report={out}"
    )
    assert result.ret == pytest.ExitCode.OK  # every launch costs the same here: test_ratio passes
    twin = json.loads(out.with_suffix(".json").read_text())
    assert len(twin["rows"]) == 17
    assert {r["nodeid"] for r in twin["rows"]} >= {
        "test_inner.py::test_fill[device]",
        "test_inner.py::test_ratio[device]",
    }
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.html", "r.json"]  # one writer, no leftovers
    result.stdout.fnmatch_lines([f"jetmem: report written to {out} *"])


# -- render_html and write_report on their own -------------------------------------------------------------
def synthetic_rows() -> list[MeasurementRecord]:
    rows = []
    for mode, med in (("device", 0.31), ("managed", 0.32), ("zero_copy", 1.69)):
        rows.append(
            MeasurementRecord.from_json(
                {
                    "version": 1,
                    "nodeid": f"t.py::test_conv[45x45-{mode}]",
                    "mode": mode,
                    "key": "conv:kernel",
                    "label": "conv",
                    "scope": "kernel",
                    "median": med,
                    "mad": med * 0.01,
                    "p5": med * 0.97,
                    "p95": med * 1.05,
                    "min": med * 0.95,
                    "n": 12,
                    "first_call_ms": med * 3,
                    "first_call_wall_ms": med * 3.2,
                    "stop_reason": "noise",
                    "runs": 1,
                    "samples": [med] * 12,
                    "verdict": "reported",
                }
            )
        )
    return rows


def test_write_report_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.html"
    write_report(target, synthetic_rows(), charts="svg")
    before_html, before_json = target.read_bytes(), target.with_suffix(".json").read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left"):
        write_report(target, [*synthetic_rows(), *synthetic_rows()], charts="svg")
    assert target.read_bytes() == before_html and target.with_suffix(".json").read_bytes() == before_json
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json"]  # no temporary file left behind


def test_svg_fallback_and_matplotlib_charts(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = synthetic_rows()
    monkeypatch.setattr(report_charts, "matplotlib_available", lambda: False)
    page = render_html(rows)
    assert html.escape(report_charts.NO_MATPLOTLIB_NOTE) in page and dom(page).tags.get("svg") == 1
    assert "<title>zero_copy conv:kernel: median 1.69 ms, p5 1.639, p95 1.774, MAD 0.017, n=12</title>" in page
    assert "5.45x device*" in page
    with pytest.raises(ValueError, match="charts"):
        render_html(rows, charts="png")
    pytest.importorskip("matplotlib")
    page = render_html(rows, charts="matplotlib")
    assert html.escape(report_charts.NO_MATPLOTLIB_NOTE) not in page
    assert page.count('<img class="chart"') == 1 and 'src="data:image/png;base64,' in page
    assert_offline(page)


def test_trends_leave_out_other_machines_and_unreadable_baselines(tmp_path: Path) -> None:
    from pytest_jetmem.measure.baseline import Entry, Machine, entry_key

    store = BaselineStore(tmp_path)
    here = Machine("Orin", "8.7", 12060)
    there = Machine("NVIDIA H100 80GB HBM3", "9.0", 13000)
    rows = synthetic_rows()
    for name, machine, scale in (("a", here, 1.0), ("b", there, 9.0), ("c", here, 1.1)):
        entries = {
            entry_key(r.nodeid, r.mode, r.key): Entry(r.nodeid, r.mode, r.key, tuple(np.full(5, r.median * scale)))
            for r in rows
        }
        store.save(name, machine, entries, session=f"s-{name}")
    (tmp_path / "broken.json").write_text("{")
    trends = load_trends(store, rows, here, session_id="now", now="2030-01-01T00:00:00Z")
    assert trends.baselines == ["a", "c"]
    assert any("another machine" in n and "b" in n for n in trends.notes)
    assert any("could not be read" in n and "broken" in n for n in trends.notes)
    pts = trends.of(rows[0].nodeid, "device", "conv:kernel")
    assert [(p.label, round(p.median, 4)) for p in pts] == [("a", 0.31), ("c", 0.341), ("this run", 0.31)]
    # One baseline holding a test is no trend.
    assert load_trends(BaselineStore(tmp_path / "none"), rows, here).points == {}


# -- a real browser ----------------------------------------------------------------------------------------
def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def read_png(data: bytes) -> np.ndarray:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes) to an (h, w, channels) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    ch = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * ch)
    out = np.zeros((height, width * ch), dtype=np.int32)
    prev = np.zeros(width * ch, dtype=np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 0xFF
        else:  # Sub, Average, Paeth: left-to-right dependencies
            cur = np.zeros_like(line)
            for x in range(width * ch):
                a = cur[x - ch] if x >= ch else 0
                b, c = prev[x], (prev[x - ch] if x >= ch else 0)
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out.reshape(height, width, ch).astype(np.uint8)


def render_in_chromium(page: Path, png: Path, size: str = "1280,2000") -> str:
    """Screenshot ``page`` into ``png`` with headless Chromium, then return the rendered DOM."""
    browser = _chromium()
    assert browser is not None
    common = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
    ]
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [*common, f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={size}", page.as_uri()],
            check=True,
            capture_output=True,
            timeout=120,
        )
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [*common, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
    return done.stdout


@pytest.mark.skipif(_chromium() is None, reason="no chromium here (Debian: apt-get install chromium)")
@pytest.mark.xdist_group("chromium")  # one Chromium at a time under pytest-xdist (the suite runs --dist loadgroup)
@pytest.mark.parametrize("charts", ["svg", "matplotlib"])
def test_report_renders_in_a_real_browser(
    pytester: pytest.Pytester,
    install_fake_driver: InstallFake,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    charts: str,
) -> None:
    if charts == "matplotlib":
        pytest.importorskip("matplotlib")
    else:
        monkeypatch.setattr(report_charts, "matplotlib_available", lambda: False)
    reprec, out = run_sessions(pytester, install_fake_driver)
    png = tmp_path / "shot.png"
    rendered = render_in_chromium(out, png)

    img = read_png(png.read_bytes())
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    rgb = img[..., :3].astype(np.float64)
    assert rgb.std() > 20, "the screenshot is blank"
    non_white = np.mean(np.any(rgb < 200, axis=-1))
    assert 0.02 < non_white < 0.9, non_white
    colored = np.mean(np.abs(rgb[..., 0] - rgb[..., 2]) > 60)  # the mode colours of the bars
    assert colored > 0.002, colored

    d = dom(rendered)
    rows = rows_of(reprec)
    assert rendered.count('<table class="sortable" id="rows">') == 1
    body = rendered.split('id="rows">', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr>") == 1 + len(rows)
    charts_seen = d.tags.get("svg", 0) if charts == "svg" else rendered.count('<img class="chart"')
    assert charts_seen == len(group_rows(rows)) == 4
