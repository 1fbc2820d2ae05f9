"""A binary rule mined from a finding's failing answers: the fix that catches it again.

Given the answers behind a finding (the *evidence*) and the same skill's answers
nobody complained about (the *clean* ones), :func:`mine_rule` looks for a phrase
that sets them apart, either way round:

* **forbidden**: in nearly every failing answer and nearly no clean one ("git push
  --force" where people wanted ``--force-with-lease``): a ``regex_not_match``
  rule, any case;
* **required**: in nearly every clean answer and missing from nearly every failing
  one ("Verdict:" when the review had none): a ``regex_match`` rule.

Candidates are runs of one to three words as written (casefolded, outer
punctuation trimmed). A rule is kept only if it *fires* (fails) on at least
``min_evidence`` of the evidence and at most ``max_clean`` of the clean answers,
both measured by the eval engine itself on the rule as it would be stored, so
the rates on the card are the ones the skill would see. Among those, the widest
margin wins, then a forbidden phrase (it names what went wrong), then the longer
phrase (more specific), then the first in order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MinedRule", "mine_rule"]

_TRIM = ".,;:!?()[]{}\"'`*"
#: Candidates checked with the engine at most (the most frequent first).
MAX_CANDIDATES = 200


@dataclass(frozen=True)
class MinedRule:
    rule: dict[str, Any]
    fires_on_evidence: float
    fires_on_clean: float
    evidence: int
    clean: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "firesOnEvidence": round(self.fires_on_evidence, 4),
            "firesOnClean": round(self.fires_on_clean, 4),
            "evidence": self.evidence,
            "clean": self.clean,
        }


def _phrases(text: str) -> set[str]:
    words = [w.strip(_TRIM) for w in text.casefold().split()]
    words = [w for w in words if w]
    found: set[str] = set()
    for size in (1, 2, 3):
        for start in range(len(words) - size + 1):
            phrase = " ".join(words[start : start + size])
            if len(phrase) >= 4:
                found.add(phrase)
    return found


def _frequent(texts: Sequence[str], share: float) -> list[str]:
    counts = Counter(p for text in texts for p in _phrases(text))
    least = max(1, int(share * len(texts) + 0.999999))
    ranked = sorted(
        (p for p, n in counts.items() if n >= least), key=lambda p: (-counts[p], -len(p), p)
    )
    return ranked[:MAX_CANDIDATES]


def _pattern(phrase: str) -> str:
    """The words as written, any run of spaces between them, not inside a longer word
    ("--force" is not found in "--force-with-lease"; RE2 has no lookaround, hence
    the explicit edges)."""
    words = r"\s+".join(re.escape(word) for word in phrase.split(" "))
    return rf"(?:^|[^\w-]){words}(?:[^\w-]|$)"


def _rate(rule: Any, texts: Sequence[str]) -> float:
    from amelio.evals.engine import evaluate

    fails = sum(not evaluate(text, [rule]).results[0].passed for text in texts)
    return fails / len(texts) if texts else 0.0


def mine_rule(
    evidence: Sequence[str],
    clean: Sequence[str],
    *,
    rule_id: str,
    name_hint: str = "",
    min_evidence: float = 0.9,
    max_clean: float = 0.05,
) -> MinedRule | None:
    """The best rule that fires on at least ``min_evidence`` of ``evidence`` and at
    most ``max_clean`` of ``clean``, or None. Needs clean answers to compare with:
    a rule that fires on every answer would catch nothing."""
    from amelio.evals.engine import parse_rules

    if not evidence or not clean:
        return None
    candidates: list[tuple[str, str]] = [("forbidden", p) for p in _frequent(evidence, 0.9)]
    candidates += [("required", p) for p in _frequent(clean, 0.95)]
    best: tuple[tuple[float, bool, int], MinedRule] | None = None
    for way, phrase in candidates:
        spec: dict[str, Any] = {
            "id": rule_id,
            "name": (f"Never says “{phrase}”" if way == "forbidden" else f"Says “{phrase}”")
            + (f" ({name_hint})" if name_hint else ""),
            "type": "regex_not_match" if way == "forbidden" else "regex_match",
            "pattern": _pattern(phrase),
            "flags": "i",
            "severity": "warning",
        }
        [rule] = parse_rules([spec])
        on_evidence = _rate(rule, evidence)
        if on_evidence < min_evidence:
            continue
        on_clean = _rate(rule, clean)
        if on_clean > max_clean:
            continue
        mined = MinedRule(spec, on_evidence, on_clean, len(evidence), len(clean))
        key = (on_evidence - on_clean, way == "forbidden", len(phrase))
        if best is None or key > best[0]:
            best = (key, mined)
    return best[1] if best else None
