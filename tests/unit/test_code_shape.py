"""The code's shape, measured as radon measures it (``radon cc``, ``radon mi``, ``radon raw``): small functions with
one job each, and modules a person can read.

- no block (function, method, class) of cyclomatic complexity worse than D (21-30): E and F are split;
- blocks of C or worse (11 and more) at most ``MAX_C_DENSITY`` per 1000 source lines (pytest-benchmark's figure,
  3.8; pytest-xdist's is 2.7);
- every module's maintainability index at least ``MIN_MI`` (radon's "A" starts at 20).
"""

from __future__ import annotations

from pathlib import Path

import pytest

radon_complexity = pytest.importorskip("radon.complexity", reason="radon (the dev extra) measures the code's shape")
from radon.metrics import mi_visit  # noqa: E402
from radon.raw import analyze  # noqa: E402

import pytest_jetmem  # noqa: E402

PACKAGE = Path(pytest_jetmem.__file__).parent
MAX_C_DENSITY = 3.8
MIN_MI = 20.0
WORST_RANK = "D"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _blocks(path: Path) -> list[tuple[str, int]]:
    """(name, complexity) of every function, method and class in ``path``, as ``radon cc`` lists them."""
    out: list[tuple[str, int]] = []
    for block in radon_complexity.cc_visit(path.read_text()):
        out.append((block.fullname, block.complexity))
        out.extend((m.fullname, m.complexity) for m in getattr(block, "methods", ()))
    return out


def _where(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_no_block_is_worse_than_d() -> None:
    worse = [
        f"{_where(p)}: {name} {radon_complexity.cc_rank(cc)} ({cc})"
        for p in _modules()
        for name, cc in _blocks(p)
        if radon_complexity.cc_rank(cc) > WORST_RANK
    ]
    assert not worse, "blocks to split (one job a function):\n" + "\n".join(worse)


def test_few_blocks_of_c_or_worse() -> None:
    sloc = sum(analyze(p.read_text()).sloc for p in _modules())
    complex_blocks = [f"{_where(p)}: {n} ({cc})" for p in _modules() for n, cc in _blocks(p) if cc > 10]
    density = 1000 * len(complex_blocks) / sloc
    assert density <= MAX_C_DENSITY, (
        f"{len(complex_blocks)} blocks of complexity C or worse in {sloc} source lines: {density:.2f} per 1000 "
        f"(at most {MAX_C_DENSITY}):\n" + "\n".join(complex_blocks)
    )


def test_every_module_is_maintainable() -> None:
    low = {_where(p): round(mi_visit(p.read_text(), multi=True), 1) for p in _modules()}
    low = {name: mi for name, mi in low.items() if mi < MIN_MI}
    assert not low, f"modules under a maintainability index of {MIN_MI}: {low}"
