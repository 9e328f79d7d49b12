"""The advice as text: the ``jetmem advice`` section's lines, its header and each test's block.

The terminal section, the HTML report and the demo's tables print these lines (the report re-wraps them).
GPU-free and pytest-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from pytest_jetmem.measure.advice_model import Advice, DeviceKind, NoteRule, RuleKind, RuleVerdict, SessionAdvice
from pytest_jetmem.measure.advice_terms import CONFIDENCE, EQUIVALENCE_MARGIN, NOTE_URL, PCIE_MARGIN, interval, times

__all__ = ["advice_header", "advice_lines", "format_advice", "rule_line"]

#: How a line says the run's verdict on the note's rule.
_VERDICT_WORDS = {
    RuleVerdict.AGREES: "agrees",
    RuleVerdict.DISAGREES: "disagrees",
    RuleVerdict.NOT_APPLICABLE: "cannot tell",
}


def _cited(sections: Iterable[str]) -> str:
    return ", ".join(f'"{s}"' for s in sections)


def rule_line(rule: NoteRule) -> str:
    """The rule of the note, citing its sections, or why no rule applies."""
    if not rule.sections:
        return f"NVIDIA's CUDA for Tegra note: no rule applies: {rule.evidence}"
    return f"NVIDIA's CUDA for Tegra note ({_cited(rule.sections)}): {rule.text}"


def advice_lines(advice: Advice, *, indent: str = "  ", rule_text: bool = True) -> list[str]:
    """One test's advice as text: the pick or "no clear winner", the other modes, the reasons, the note's rule and
    this run's verdict on it (``rule_text`` False: the verdict alone, where the rule was printed once above)."""
    return [
        indent + advice.summary(),
        *_slower_lines(advice, indent),
        *(f"{indent}energy: {line}" for line in advice.energy),
        *_why_lines(advice, indent),
        *_rule_lines(advice.rule, indent, rule_text=rule_text),
    ]


def _slower_lines(advice: Advice, indent: str) -> list[str]:
    """The modes clearly slower than the fastest that the summary does not name (none: no line)."""
    shown = set(advice.leaders)
    if advice.runner_up is not None:
        shown.add(advice.runner_up.mode)
    rest = [s for s in advice.standings if s.mode not in shown and s.ratio is not None]
    if not rest or advice.fastest is None:
        return []
    slower = "; ".join(f"{s.mode} {times(s.ratio)} {advice.fastest} ({interval(s.ci)})" for s in rest)
    return [f"{indent}clearly slower: {slower}"]


def _why_lines(advice: Advice, indent: str) -> list[str]:
    """ "why:" and a line per reason (none without reasons)."""
    if not advice.reasons:
        return []
    return [indent + "why:", *(f"{indent}  - {r.text}" for r in advice.reasons)]


def _rule_lines(rule: NoteRule, indent: str, *, rule_text: bool) -> list[str]:
    """The rule (with ``rule_text``) and, where one applies, this run's verdict on it with its evidence."""
    lines = [f"{indent}{rule_line(rule)}"] if rule_text else []
    if rule.sections:
        verdict = _VERDICT_WORDS[rule.verdict]
        lines.append(f"{indent}the note ({_cited(rule.sections)}), this run {verdict}: {rule.evidence}")
    return lines


def _union(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*a, *b]))


def _session_rules(advice: Sequence[Advice]) -> list[NoteRule]:
    """The session's rules, each once: one per kind and text, citing every section any test's verdict cites (in the
    order they first come); tests measured in other modes cite other sections of the same rule."""
    merged: dict[tuple[RuleKind, str], NoteRule] = {}
    for a in advice:
        key = (a.rule.kind, a.rule.text)
        seen = merged.get(key)
        merged[key] = a.rule if seen is None else replace(seen, sections=_union(seen.sections, a.rule.sections))
    return list(merged.values())


def advice_header(session: SessionAdvice) -> list[str]:
    """The lines said once for a session: the device, how ties are called, the note's rule that applies (once)."""
    facts = session.facts
    device = facts.describe() if facts is not None else "not known (no GPU was opened)"
    discrete = facts is not None and facts.kind is DeviceKind.DISCRETE
    pcie = f" ({PCIE_MARGIN:.0%} where either reads over PCIe)" if discrete else ""
    return [
        f"device: {device}",
        f"ratios to the fastest mode with {CONFIDENCE:.0%} intervals; a mode is tied with it unless clearly more than "
        f"{EQUIVALENCE_MARGIN:.0%} slower{pcie}",
        *dict.fromkeys(rule_line(rule) for rule in _session_rules(session.advice)),
        f"the note: {NOTE_URL}",
    ]


def format_advice(session: SessionAdvice) -> list[str]:
    """The ``jetmem advice`` section's lines (empty where no test was measured in two or more modes): the header
    (:func:`advice_header`), then each test's advice (:func:`advice_lines`)."""
    if not session.advice:
        return []
    out = advice_header(session)
    for a in session.advice:
        out.extend(["", f"{a.test}  {a.key}", *advice_lines(a, rule_text=False)])
    return out
