"""The docs say what the program does: the figures and lists they quote are compared with the program here.

- docs/quickstart.md: the demo's test count, modes and no-GPU line against what the demo collects and prints
  (under the fake driver's ``no_driver`` profile, as a machine without a GPU), and the items a bare marker runs;
- docs/troubleshooting.md: its mode lists against the registry (:mod:`pytest_jetmem.cuda.modes`), and every
  message it quotes against the string templates of the source;
- docs/reference.md: every option and ini key of :data:`pytest_jetmem.plugin.options.SETTINGS` in its table, with
  its default.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem import demo
from pytest_jetmem.cuda import modes
from pytest_jetmem.plugin import options

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "pytest_jetmem"


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def ticked(text: str) -> list[str]:
    """The ``code`` spans of ``text``, in order."""
    return re.findall(r"`([^`]+)`", text)


def paragraph_of(text: str, needle: str) -> str:
    """The paragraph (or table row) of ``text`` that holds ``needle``."""
    return next(p for p in re.split(r"\n\s*\n|\n(?=\|)", text) if needle in p)


# -- the quickstart and the demo -------------------------------------------------------------------------
@pytest.fixture
def demo_line(install_fake_driver: Callable[..., FakeDriver], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the demo prints without a GPU, from collecting it (every mode: nothing is left out there)."""
    install_fake_driver("no_driver")
    assert demo.main(["--collect-only"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out.strip()


def demo_figures(line: str) -> tuple[int, list[str]]:
    """(tests, modes) of the demo's no-GPU line."""
    match = re.search(r"the (\d+) demo tests over (.+) are skipped$", line)
    assert match, line
    return int(match[1]), match[2].split(", ")


def test_quickstart_quotes_the_demo_line_without_a_gpu(demo_line: str) -> None:
    quoted = next(ln for ln in doc("quickstart.md").splitlines() if ln.startswith("pytest-jetmem demo: no GPU here"))
    pattern = re.escape(quoted).replace(re.escape("(...)"), r"\(.*\)")  # the quote leaves out the driver's reason
    assert re.fullmatch(pattern, demo_line), (quoted, demo_line)


def test_quickstart_counts_the_demo_tests_and_modes(demo_line: str) -> None:
    tests, demo_modes = demo_figures(demo_line)
    assert demo_modes == list(modes.names())  # the demo runs every registered mode (jetmem_modes = all)
    text = paragraph_of(doc("quickstart.md"), "prints one table per scenario")
    per_mode = tests // len(demo_modes)
    said = re.search(r"(\d+) tests, (\d+) in each of the (\d+) memory modes \(([^)]*)\)", text.replace("\n", " "))
    assert said, text
    assert (int(said[1]), int(said[2]), int(said[3])) == (tests, per_mode, len(demo_modes))
    assert ticked(said[4]) == demo_modes
    # the excerpt's last line: every demo test passed or was deselected (the modes the device cannot do)
    summary = re.search(r"^(\d+) passed, (\d+) deselected in [\d.]+s$", doc("quickstart.md"), re.MULTILINE)
    assert summary, "the excerpt's summary line"
    assert int(summary[1]) + int(summary[2]) == tests and int(summary[2]) % per_mode == 0


def test_quickstart_names_the_items_a_bare_marker_runs() -> None:
    text = paragraph_of(doc("quickstart.md"), "items run, ")
    count = text.split(" items run", 1)[0].split()[-1].lower()
    named = [t for t in ticked(text.split(": a bare marker", 1)[0]) if t.startswith("test_scale[")]
    assert named == [f"test_scale[{m}]" for m in modes.default_names()]
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    assert count == words.get(len(named), str(len(named)))


# -- troubleshooting and the registry ------------------------------------------------------------------------
def test_troubleshooting_lists_every_mode_for_an_unknown_one() -> None:
    row = paragraph_of(doc("troubleshooting.md"), "`--jetmem-modes: unknown memory mode")
    advice = row.split("list modes from", 1)[1].split("separated")[0]
    assert ticked(advice) == list(modes.names())
    assert f"`{modes.EVERY_MODE}`" in row


def test_troubleshooting_gives_the_skip_reason_of_every_attribute_a_mode_needs() -> None:
    text = " ".join(doc("troubleshooting.md").split())  # reasons may break across lines
    for mode in modes.registered():
        for attribute in mode.requires:
            assert f"`{mode.name}: the device reports {attribute}=0" in text, (mode.name, attribute)
        if mode.needs_io_coherence:
            assert f"`{mode.name}: an integrated GPU of compute capability" in text, mode.name


def test_troubleshooting_names_the_modes_with_a_host_view() -> None:
    text = paragraph_of(doc("troubleshooting.md"), "`buf.host` exists")
    listed = ticked(text.split(":", 1)[1].split(".")[0])
    assert listed == [m.name for m in modes.registered() if m.has_host_view]
    assert [m.name for m in modes.registered() if not m.has_host_view] == ["device"]  # "every mode but `device`"


# -- quoted messages against the source ----------------------------------------------------------------------
#: Where a quote shows a value the program fills in: ``...``, ``<test>``, upper-case names (``NAME``, ``PATH``,
#: ``REF``, ``N``), quoted values, numbers, option, ini, marker and method names, file paths; and where messages
#: are joined (``: ``, ``; ``, ``expected``, ``got``), since a message is often one template's text around
#: another's (an exception's, a description passed in).
PLACEHOLDER = re.compile(
    r"\.\.\.|<\w+>|\b[A-Z][A-Z_]*\b|'[^']*'|\"[^\"]*\"|\b\d[\w.]*|--jetmem-[\w-]+(?:=\S+)?|jetmem_\w+|"
    r"@pytest\.mark\.\w+|jetmem\.\w+|\S*[/\\]\S*|: |; |\bexpected\b|\bgot\b"
)
#: Words of other programs that a quote shows inside a message of this one.
FOREIGN = ("invalid truth value",)  # pytest's, reading a bool ini key
MIN_FRAGMENT = 8  # shorter literal pieces ("got", "expected") say nothing
#: The share of a piece that one template's literal text must cover; the rest may be values the template fills in
#: (a marker's or option's name, a dtype) that the quote shows.
MIN_COVER = 0.75


@cache
def source_templates() -> tuple[tuple[str, ...], ...]:
    """Every string of the package's source as its literal parts, one more than its holes (``f"a{x}b"``: a, b)."""
    templates: list[tuple[str, ...]] = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                templates.append((node.value,))
            elif isinstance(node, ast.JoinedStr):
                parts = [""]
                for value in node.values:
                    if isinstance(value, ast.Constant):
                        parts[-1] += str(value.value)
                    else:
                        parts.append("")
                templates.append(tuple(parts))
    return tuple(templates)


def covered(piece: str, parts: tuple[str, ...]) -> int:
    """The most characters of ``piece`` that literal text covers where ``piece`` is read as a stretch of some string
    the template ``parts`` makes (its holes take any text)."""

    @cache
    def after_hole(start: int, j: int) -> int:  # piece[start:] begins in the hole before parts[j]
        best = 0
        for s in range(start, len(piece) + 1):
            tail = piece[s:]
            if parts[j].startswith(tail):
                best = max(best, len(tail))
            elif tail.startswith(parts[j]) and parts[j] and j + 1 < len(parts):
                best = max(best, len(parts[j]) + after_hole(s + len(parts[j]), j + 1))
        return best

    if any(piece in part for part in parts):
        return len(piece)
    best = max((after_hole(0, j) for j in range(1, len(parts))), default=0)
    for i, part in enumerate(parts[:-1]):
        for k in range(len(part)):
            if piece.startswith(part[k:]):
                best = max(best, len(part) - k + after_hole(len(part) - k, i + 1))
    return best


def in_source(piece: str) -> bool:
    """Whether some string of the source reads ``piece``, but for values it fills in (:data:`MIN_COVER`)."""
    if piece in FOREIGN:
        return True
    words = [w for w in re.split(r"\W+", piece) if len(w) >= 4] or [piece]
    candidates = (t for t in source_templates() if any(w in part for part in t for w in words))
    return any(covered(piece, t) >= MIN_COVER * len(piece) for t in candidates)


def quoted_messages(table: str) -> Iterator[str]:
    """The messages quoted in the first column of the troubleshooting's error table."""
    for row in table.splitlines():
        if row.startswith("| `"):
            yield from ticked(row.split(" | ", 1)[0])


def fragments(message: str) -> list[str]:
    """The literal pieces of a quoted message, long enough to mean something."""
    pieces = (f.strip(" .,()") for f in PLACEHOLDER.split(message))
    return [f for f in pieces if len(f) >= MIN_FRAGMENT]


def test_every_message_troubleshooting_quotes_is_one_the_program_prints() -> None:
    text = doc("troubleshooting.md")
    table = text.split("## Errors and what to do", 1)[1].split("\n## ", 1)[0]
    messages = list(quoted_messages(table))
    assert len(messages) > 30, messages
    missing = [(message, piece) for message in messages for piece in fragments(message) if not in_source(piece)]
    assert not missing, "\n".join(f"{m!r}: {p!r} is in no string of the source" for m, p in missing)


def test_a_quote_is_read_apart_from_its_values() -> None:
    assert fragments("--jetmem-fail: expected a percentage >= 0, got ...") == ["a percentage >="]
    assert fragments("<test>: @pytest.mark.memmode got memory mode 'device' more than once; expected") == [
        "memory mode",
        "more than once",
    ]
    assert covered("dtype <U1 cannot live", ("jetmem.", ": dtype ", " cannot live in GPU memory")) == 18
    assert in_source("cannot live in GPU memory")
    assert not in_source("cannot live in CPU memory")


# -- the reference's option table ----------------------------------------------------------------------------
def option_rows() -> dict[str, tuple[str, str]]:
    """``{setting name: (ini key cell, default cell)}`` of the reference's table of options and ini keys."""
    text = doc("reference.md").split("## Command-line options and ini keys", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for row in text.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 4 or not (cells[0].startswith("`--jetmem-") or cells[1].startswith("`jetmem_")):
            continue
        flag = re.match(r"`--jetmem-([\w-]+)", cells[0])
        ini = re.match(r"`jetmem_(\w+)`", cells[1])
        name = flag[1].replace("-", "_") if flag else ini[1] if ini else ""
        rows[name] = (cells[1], cells[2])
    return rows


def test_the_reference_documents_every_option_and_ini_key() -> None:
    rows = option_rows()
    assert set(rows) == {s.name for s in options.SETTINGS}
    for s in options.SETTINGS:
        ini_cell, default_cell = rows[s.name]
        has_ini = s.ini_help is not None
        assert (f"`jetmem_{s.name}`" in ini_cell) == has_ini, (s.name, ini_cell)
        if has_ini and isinstance(s.ini_default, str) and s.ini_default:
            assert f"`{s.ini_default}`" in default_cell, (s.name, s.ini_default, default_cell)


def test_the_reference_gives_each_option_its_real_spelling() -> None:
    text = doc("reference.md")
    spelled = set(re.findall(r"--jetmem-[a-z][a-z-]*[a-z]", text))
    known = {s.flag for s in options.SETTINGS if s.option}
    assert spelled <= known, sorted(spelled - known)
