"""The CI summary: a session's measurement records as one Markdown section (GitHub Actions' job summary page,
``$GITHUB_STEP_SUMMARY``, or ``--jetmem-summary=PATH``). GPU-free and pytest-free; the pytest glue that decides
where and when it is written is :mod:`pytest_jetmem.plugin.summary`.

The section: a heading with the counts, what the session was compared with, then one table row per measurement,
the regressed first (a failed verdict, or a comparison that says regression), then the ambiguous, then the rest,
each group in the session's order. Every cell is Markdown-escaped, so a node id's ``|`` or backtick cannot break
the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_jetmem.measure.compare import Verdict
from pytest_jetmem.measure.record import BaselineComparison, MeasurementRecord, RecordVerdict

__all__ = ["TITLE", "ComparedWith", "escape", "rank", "summary_markdown"]

TITLE = "pytest-jetmem"
HEADER = ("test", "mode", "what", "median ms", "vs base", "verdict")

#: The characters a table cell escapes with a backslash (CommonMark lets any ASCII punctuation be escaped; these are
#: the ones that end a cell, open a code span, emphasis, a link or HTML, or escape the next one).
_SPECIAL = frozenset("\\`|*_[]<>")

REGRESSED, AMBIGUOUS, OTHER = 0, 1, 2


@dataclass(frozen=True)
class ComparedWith:
    """What the session's measurements were compared with: ``--jetmem-against`` REF, ``--jetmem-compare`` NAME, or
    nothing (both None)."""

    against: str | None = None
    compare: str | None = None

    @property
    def text(self) -> str:
        """The sentence's Markdown (values escaped)."""
        if self.against is not None:
            return f"Compared with the base {escape(self.against)} (--jetmem-against), measured in turns on this GPU."
        if self.compare is not None:
            return f"Compared with the baseline {escape(self.compare)} (--jetmem-compare)."
        return "No comparison: neither --jetmem-compare nor --jetmem-against was given."


def escape(text: str) -> str:
    """``text`` as the plain text of one Markdown table cell: the characters of :data:`_SPECIAL` backslash-escaped,
    line breaks as spaces."""
    flat = " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text
    return "".join(f"\\{c}" if c in _SPECIAL else c for c in flat)


def rank(record: MeasurementRecord) -> int:
    """:data:`REGRESSED` (a failed verdict, or a comparison that says regression), :data:`AMBIGUOUS` (an ambiguous
    verdict or comparison), else :data:`OTHER`."""
    verdict, judgement = record.judgement.verdict, record.judgement
    compared = {c.verdict for c in (judgement.baseline, judgement.energy_baseline) if isinstance(c, BaselineComparison)}
    if verdict.failed or Verdict.REGRESSION in compared:
        return REGRESSED
    if verdict is RecordVerdict.AMBIGUOUS or Verdict.AMBIGUOUS in compared:
        return AMBIGUOUS
    return OTHER


def _median(ms: float) -> str:
    return f"{ms:.4g}" if math.isfinite(ms) else str(ms)


def _row(record: MeasurementRecord, energy: bool) -> str:
    """One table row; ``energy``: with the energy comparison's cell."""
    cmp, energy_cmp = record.judgement.baseline, record.judgement.energy_baseline
    verdict = escape(record.judgement.verdict.value)
    cells = (
        escape(record.nodeid),
        escape(record.mode),
        escape(record.key),
        _median(record.statistics.median),
        escape(cmp.text) if cmp is not None else "",
        *((escape(energy_cmp.text) if energy_cmp is not None else "",) if energy else ()),
        f"**{verdict}**" if rank(record) == REGRESSED else verdict,
    )
    return "| " + " | ".join(cells) + " |"


def _heading(records: Sequence[MeasurementRecord], ranks: Sequence[int]) -> str:
    if not records:
        return f"## {TITLE}: nothing measured"
    counts = [f"{len(records)} measured", f"{ranks.count(REGRESSED)} regressed"]
    if AMBIGUOUS in ranks:
        counts.append(f"{ranks.count(AMBIGUOUS)} ambiguous")
    return f"## {TITLE}: {', '.join(counts)}"


def summary_markdown(
    records: Sequence[MeasurementRecord], compared_with: ComparedWith, *, interrupted: str | None = None
) -> str:
    """The Markdown section of ``records`` (ending in a newline): heading, the interruption (``interrupted``: what
    interrupted the session, None: it was not), what was compared with, the table of every measurement (regressed,
    then ambiguous, then the rest); one sentence instead of the table where nothing was measured."""
    ranks = [rank(r) for r in records]
    lines = [_heading(records, ranks), ""]
    if interrupted is not None:
        lines += [f"**The session was interrupted ({escape(interrupted)}):** the table holds only what ran.", ""]
    if not records:
        lines.append("Nothing was measured in this session.")
        return "\n".join(lines) + "\n"
    lines += [compared_with.text, ""]
    energy = any(r.judgement.energy_baseline is not None for r in records)  # no empty column without energy
    header = (*HEADER[:-1], *(("energy vs base",) if energy else ()), HEADER[-1])
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---:" if h == "median ms" else "---" for h in header) + "|")
    order = sorted(range(len(records)), key=lambda i: (ranks[i], i))
    lines += [_row(records[i], energy) for i in order]
    return "\n".join(lines) + "\n"
