"""What pytest-jetmem writes by hand that a maintained library also does, in one table, each module saying why.

The rule: no hand-written copy of what a well-kept library does; where one is kept, the module says why. Each module
below keeps its own code on purpose, and its docstring says why in a paragraph starting ``Hand-written, not
<library>: ...``. A note dropped from a module, or added to one not listed here, fails this file, so the list stays
whole. Plain stdlib or numpy use (argparse, ``os.replace``, ``csv``, ``ProcessPoolExecutor``, ``git`` run as a
command) is no copy and is not listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_jetmem

PACKAGE = Path(pytest_jetmem.__file__).parent
NOTE = "Hand-written, not "

#: module (relative to the package) -> the library it could have used, as its note names it.
HAND_WRITTEN: dict[str, str] = {
    "atomic.py": "atomicwrites",
    "validate.py": "jsonschema",
    "cuda/headers.py": "cuda.pathfinder",
    "cuda/nvrtc_loader.py": "cuda.pathfinder",
    "cuda/signature.py": "pycparser or libclang",
    "draw/page.py": "Jinja2",
    "draw/svg.py": "matplotlib",
    "history/detection_cache.py": "diskcache",
    "history/locate.py": "pytest's own finder",
    "history/location.py": "psycopg's ``conninfo`` parser",
    "history/store.py": "SQLAlchemy",
    "history/svg.py": "uPlot",
    "history/thinning.py": "tsdownsample",
    "machine/jetson.py": "jetson-stats",
    "machine/power.py": "jetson-stats",
    "measure/energy.py": "Zeus",
    "measure/changepoints.py": "ruptures",
    "measure/stats.py": "scipy.stats",
}


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""


@pytest.mark.parametrize(("module", "library"), sorted(HAND_WRITTEN.items()))
def test_the_module_says_why_it_is_hand_written(module: str, library: str) -> None:
    doc = _docstring(PACKAGE / module)
    assert f"{NOTE}{library}" in doc, f"pytest_jetmem/{module}: its docstring lost '{NOTE}{library}: <why>'"
    line = next(ln for ln in doc.splitlines() if NOTE in ln)
    assert line.startswith(NOTE), f"pytest_jetmem/{module}: the note starts its own line: {line!r}"


def test_every_note_is_in_the_table() -> None:
    noted = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if NOTE in _docstring(p)}
    assert noted == set(HAND_WRITTEN), (
        f"notes not in HAND_WRITTEN: {sorted(noted - set(HAND_WRITTEN))}; "
        f"listed without a note: {sorted(set(HAND_WRITTEN) - noted)}"
    )
