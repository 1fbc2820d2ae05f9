"""Template proposals: a deterministic rewrite from the evidence, with no LLM.

The seed's nightly job proposes by template so that a skill improves even with
no model configured, and so a person can read exactly why each line is there.
The proposal is the current content plus one clearly delimited section of
instructions, one per failing eval rule (most failed first) and one per linked
learning; the rationale cites the numbers. The same evidence always gives the
same text: no dates, no randomness, stable ordering. A later proposal replaces
the section instead of stacking another one.

Each line is written the way the skill's own rules ask: a skill whose rule bans
a literal (git-help bans a plain ``--force``) must not be taught by a line that
quotes it, since the model copies what its prompt says. A line that would break
one of the skill's forbidding rules (:func:`amelio.improve.proposals.forbidding_rules`)
has the fewest words that break it left out, each run of them written ``…``, and
the section says so; a line that no such cut can save is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from amelio import evals
from amelio.assistant.quality import Finding
from amelio.improve.proposals import forbidding_rules
from amelio.skills.model import SkillSpec

__all__ = [
    "FINDINGS_END",
    "FINDINGS_START",
    "SECTION_END",
    "SECTION_START",
    "TemplateProposal",
    "finding_content",
    "template_proposal",
]

SECTION_START = "<!-- amelio:improvements (generated from use; edit freely) -->"
SECTION_END = "<!-- /amelio:improvements -->"
HEADING = "## Corrections from recent use"
MAX_LEARNINGS = 10
#: What stands for words a line leaves out because the skill forbids them.
LEFT_OUT = "…"
#: The section where each finding filed against the skill keeps one line; a finding's
#: next proposal replaces its own line and keeps the others.
FINDINGS_START = "<!-- amelio:findings (one line per known problem; edit freely) -->"
FINDINGS_END = "<!-- /amelio:findings -->"
FINDINGS_HEADING = "## Known problems from recent use"


@dataclass(frozen=True)
class TemplateProposal:
    content: str
    rationale: str
    evidence: Mapping[str, Any]


def _instruction(rule: Mapping[str, Any]) -> str:
    """What a failing rule asks of the answer, as an instruction to the model."""
    kind, name = rule.get("type"), str(rule.get("name") or rule.get("id"))
    negate = bool(rule.get("negate"))
    value: Any = rule.get("value")
    if kind == "string_contains" and not negate:
        return f"Always include `{value}` in the answer."
    if kind == "string_not_contains" or (kind == "string_contains" and negate):
        # The name says why; the value is the very text the rule forbids.
        return f"Avoid this: {name}." if rule.get("name") else f"Never include `{value}`."
    if kind == "icontains" and not negate:
        return f"Always mention {value!r} (in any case)."
    if kind == "max_length":
        return f"Keep the whole answer under {int(value):,} characters."
    if kind == "min_length":
        return f"Give a substantial answer: at least {int(value):,} characters."
    if kind == "regex_not_match" or (kind == "regex_match" and negate):
        return f"Avoid this: {name}."
    if kind == "starts_with" and not negate:
        return f"Start the answer with `{value}`."
    if kind in ("is_json", "json_schema"):
        return f"Return valid JSON as the rule requires: {name}."
    return f"Make sure of this: {name}."


def _leave_out(line: str, rules: Sequence[evals.EvalRule]) -> str | None:
    """``line`` with the fewest words that break one of ``rules`` left out, each run
    of them replaced by :data:`LEFT_OUT`; None when no such cut saves it.

    The rules are black boxes (a plugin's type included), so the words are found
    by probing: the shortest prefix of the line that breaks a rule ends on the
    offending run, and the shortest tail of that prefix that still breaks it is the
    run. One word of the run is enough when leaving it out mends the run ("git push
    …" rather than "…" for a rule against ``git push -f``); the last one is tried
    first, since the run ends where the forbidden text is complete.
    """

    def breaks(words: Sequence[str]) -> bool:
        return not evals.evaluate(" ".join(words), rules).success

    words = line.split(" ")
    while breaks(words):
        end = next(k for k in range(1, len(words) + 1) if breaks(words[:k]))
        start = max(i for i in range(end) if breaks(words[i:end]))
        if words[start:end] == [LEFT_OUT]:
            return None
        run = words[start:end]
        one = next(
            (
                j
                for j in reversed(range(len(run)))
                if not breaks([*run[:j], LEFT_OUT, *run[j + 1 :]])
            ),
            None,
        )
        if one is None:
            words[start:end] = [LEFT_OUT]
        else:
            words[start + one] = LEFT_OUT
    return " ".join(words)


def _strip_section(content: str) -> str:
    start = content.find(SECTION_START)
    end = content.find(SECTION_END)
    if start == -1 or end == -1 or end < start:
        return content.rstrip("\n")
    return (content[:start] + content[end + len(SECTION_END) :]).rstrip("\n")


def template_proposal(spec: SkillSpec, finding: Finding) -> TemplateProposal | None:
    """A proposal for ``spec`` from ``finding``, or None when the evidence holds
    nothing concrete to write (only feedback counts: that needs Sage or a person)."""
    rules = {str(r.get("id")): r for r in spec.evals or ()}
    forbidden = forbidding_rules(spec)
    m = finding.metrics
    failing = sorted(m.rule_failures.items(), key=lambda x: (-x[1], x[0]))
    drafted: list[str] = []
    cited: list[str] = []
    for rule_id, count in failing:
        rule = rules.get(rule_id)
        if rule is None:  # a rule since removed: its failures no longer guide anything
            continue
        drafted.append(
            f"- {_instruction(rule)} (Rule {rule_id} failed in {count} of "
            f"{m.applied_count} answers.)"
        )
        cited.append(f"{rule_id} “{rule.get('name', rule_id)}” failed {count}×")
    taught = sorted(finding.learnings, key=lambda x: x.id)[:MAX_LEARNINGS]
    for item in taught:
        drafted.append(f"- {item.rule} (Learned from {item.source} feedback.)")
    lines = [kept for line in drafted if (kept := _leave_out(line, forbidden)) is not None]
    left_out = sum(kept not in drafted for kept in lines)
    if not lines:
        return None
    intro = "Follow these rules; they come from answers that fell short."
    if left_out:
        intro += f" {LEFT_OUT} marks words left out because this skill forbids writing them."
    section = "\n".join([SECTION_START, HEADING, "", intro, "", *lines, SECTION_END])
    content = f"{_strip_section(spec.content)}\n\n{section}\n"
    rationale = (
        f"{spec.name} underperforms in project {m.project}: {'; '.join(finding.reasons)}. "
        + (f"Failing rules: {', '.join(cited)}. " if cited else "")
        + (f"Learnings: {len(taught)} linked correction(s). " if taught else "")
        + "The proposal adds one instruction per failing rule and per learning."
    )
    evidence = {
        "appliedCount": m.applied_count,
        "successCount": m.success_count,
        "successRate": round(m.success_rate, 4),
        "feedbackPositive": m.feedback_positive,
        "feedbackNegative": m.feedback_negative,
        "feedbackFixit": m.feedback_fixit,
        "reasons": list(finding.reasons),
        "ruleFailures": dict(failing),
        "learningIds": [i.id for i in taught],
        "linesDropped": len(drafted) - len(lines),
        "linesCut": left_out,
    }
    return TemplateProposal(content, rationale, evidence)


def finding_content(
    spec: SkillSpec,
    *,
    finding_id: int,
    title: str,
    count: int,
    examples: Sequence[str],
    rules: Sequence[Mapping[str, Any]] = (),
) -> str | None:
    """``spec``'s content with one line for finding ``finding_id`` in its findings
    section: the problem's name, how often people met it and what one of them said.
    The line is held to the skill's forbidding rules and to ``rules`` (the rule mined
    for the finding): what they forbid is left out, and an example that cannot be
    saved is dropped. None when the line says nothing new."""
    forbidden = forbidding_rules(replace(spec, evals=(*(spec.evals or ()), *rules)))
    tag = f"(finding #{finding_id})"
    head = f"- Avoid this problem people met {count} times: {title}."
    line = None
    for example in [*examples[:3], None]:
        said = "" if example is None else f" One of them said: “{' '.join(example.split())[:240]}”."
        line = _leave_out(f"{head}{said} {tag}", forbidden)
        if line is not None:
            break
    if line is None:
        return None
    content = spec.content
    start, end = content.find(FINDINGS_START), content.find(FINDINGS_END)
    if start != -1 and end > start:
        kept = [
            old
            for old in content[start + len(FINDINGS_START) : end].strip("\n").splitlines()
            if old.startswith("- ") and not old.endswith(tag)
        ]
        before, after = content[:start].rstrip("\n"), content[end + len(FINDINGS_END) :]
    else:
        kept, before, after = [], content.rstrip("\n"), "\n"
    section = "\n".join([FINDINGS_START, FINDINGS_HEADING, "", *kept, line, FINDINGS_END])
    new = f"{before}\n\n{section}{after if after.strip() else chr(10)}"
    return None if new == content else new
