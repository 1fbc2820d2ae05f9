"""Triggers and keywords mined from a skill's examples, proposed for a person to approve.

The learned router already learns from examples; a skill's triggers and keywords
are what every other scorer, the ``SKILLS_HINT`` reader and the skill's author
see. When people keep asking for a skill in words its metadata lacks, those words
belong in it. :func:`suggest_triggers` finds them: words (keywords) and pairs of
adjacent words (triggers) that many of the skill's examples use and few of the
other skills' examples and metadata do, scored as

    share in the skill's examples × log(1 + that share / share elsewhere)

(the share elsewhere smoothed by one document), keeping only terms at least twice
as common in the skill's examples as elsewhere. It proposes the skill's lists with those
terms added, as a routing proposal (:func:`amelio.improve.proposals.create_proposal`):
nothing changes until a person approves it. The evidence says how often each term
was seen, and how many of the skill's examples its metadata alone routes to it
before and after, so the reviewer sees what the change is worth.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from amelio.errors import InvalidInput
from amelio.improve.proposals import Proposal, create_proposal
from amelio.routing.learned import TrainingData
from amelio.routing.lexical import skill_text
from amelio.routing.router import Router, training_data
from amelio.skills.store import visible_skills
from amelio.text import BREAK, ROUTER, tokens
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["MIN_EXAMPLES", "TermEvidence", "TriggerSuggestion", "suggest_triggers"]

#: Fewer examples than this say too little about how people ask.
MIN_EXAMPLES = 3
#: A term must be in at least this share of the skill's examples (and in two of them).
MIN_SHARE = 0.2


@dataclass(frozen=True)
class TermEvidence:
    term: str
    kind: str  # "trigger" or "keyword"
    in_examples: int
    examples: int
    elsewhere: int
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "term": self.term,
            "kind": self.kind,
            "inExamples": self.in_examples,
            "examples": self.examples,
            "elsewhere": self.elsewhere,
            "score": round(self.score, 4),
        }


@dataclass(frozen=True)
class TriggerSuggestion:
    skill: str
    project: str
    examples: int
    triggers: tuple[str, ...]
    keywords: tuple[str, ...]
    terms: tuple[TermEvidence, ...]
    #: Of the skill's examples, how many its metadata alone routes to it first.
    routed_before: int = 0
    routed_after: int = 0
    proposal: Proposal | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "project": self.project,
            "examples": self.examples,
            "triggers": list(self.triggers),
            "keywords": list(self.keywords),
            "terms": [t.to_dict() for t in self.terms],
            "routedBefore": self.routed_before,
            "routedAfter": self.routed_after,
            "proposal": None if self.proposal is None else self.proposal.to_dict(),
        }


def _words(text: str) -> tuple[set[str], set[str]]:
    """A text's candidate keywords and triggers (adjacent pairs, no punctuation between,
    neither a stopword nor one character), as whole normalized words."""
    toks = tokens(text, breaks=True)
    unigrams = set(ROUTER.terms(toks))
    pairs = {
        f"{a} {b}"
        for a, b in pairwise(toks)
        if BREAK not in (a, b)
        and len(a) > 1
        and len(b) > 1
        and a not in ROUTER.stopwords
        and b not in ROUTER.stopwords
        and "'" not in a + b
    }
    return unigrams, pairs


def _mine(
    own: Sequence[str], background: Sequence[str], known: Iterable[str]
) -> list[TermEvidence]:
    seen = {" ".join(tokens(k)) for k in known}
    own_uni: Counter[str] = Counter()
    own_bi: Counter[str] = Counter()
    for text in own:
        uni, bi = _words(text)
        own_uni.update(uni)
        own_bi.update(bi)
    back_uni: Counter[str] = Counter()
    back_bi: Counter[str] = Counter()
    for text in background:
        uni, bi = _words(text)
        back_uni.update(uni)
        back_bi.update(bi)
    found: list[TermEvidence] = []
    n, m = len(own), max(1, len(background))
    for kind, counts, back in (("trigger", own_bi, back_bi), ("keyword", own_uni, back_uni)):
        for term, count in counts.items():
            share = count / n
            if count < 2 or share < MIN_SHARE or term in seen:
                continue
            elsewhere = back[term]
            if share < 2 * elsewhere / m:  # as common elsewhere: it would pull others' messages
                continue
            found.append(
                TermEvidence(
                    term,
                    kind,
                    count,
                    n,
                    elsewhere,
                    share * math.log(1 + share * (m + 1) / (elsewhere + 1)),
                )
            )
    found.sort(key=lambda t: (-t.score, t.term))
    return found


def suggest_triggers(
    ws: Workspace,
    skill: str,
    *,
    project: str = DEFAULT_PROJECT,
    author: str = "amelio",
    max_triggers: int = 3,
    max_keywords: int = 10,
    propose: bool = True,
) -> TriggerSuggestion:
    """Mine ``skill``'s examples (in ``project``) for triggers and keywords; with
    ``propose``, file them as a routing proposal when there is anything to add."""
    visible = visible_skills(ws.engine, project)
    by_name = {s.name: s for s in visible}
    if skill not in by_name:
        from amelio.skills.store import get_skill

        get_skill(ws.engine, skill, project)  # raises the usual SkillNotFound
    data = training_data(ws, visible, project)  # what the router learns from, as it does
    examples = {s.name: list(texts) for s, texts in zip(visible, data.examples, strict=True)}
    own = examples[skill]
    if len(own) < MIN_EXAMPLES:
        raise InvalidInput(
            f"Skill {skill!r} has {len(own)} routing example(s) in project {project!r}; "
            f"suggesting triggers needs at least {MIN_EXAMPLES}. Kept answers (👍, evals "
            "passed) add examples, as do SKILL.md examples: and `amelio skills examples add`.",
            field="skill",
        )
    background = [t for name, texts in examples.items() if name != skill for t in texts]
    background += [skill_text(s.spec) for s in visible if s.name != skill]
    spec = by_name[skill].spec
    terms = _mine(own, background, [*spec.triggers, *spec.keywords])
    new_triggers = [t for t in terms if t.kind == "trigger"][:max_triggers]
    new_keywords = [t for t in terms if t.kind == "keyword"][:max_keywords]
    chosen = tuple(new_triggers + new_keywords)
    triggers = (*spec.triggers, *(t.term for t in new_triggers))
    keywords = (*spec.keywords, *(t.term for t in new_keywords))

    # What the change is worth: the skill's examples routed on metadata alone.
    specs = [s.spec for s in visible]
    proposed = [
        replace(s, triggers=triggers, keywords=keywords) if s.name == skill else s for s in specs
    ]
    blank = TrainingData(examples=[], embedder=data.embedder, min_score=-math.inf)
    before = Router(specs, "learned", data=blank)
    after = Router(proposed, "learned", data=blank)
    routed_before = sum(before.route(t, limit=1).names == (skill,) for t in own)
    routed_after = sum(after.route(t, limit=1).names == (skill,) for t in own)

    suggestion = TriggerSuggestion(
        skill, project, len(own), triggers, keywords, chosen, routed_before, routed_after
    )
    if not propose or not chosen:
        return suggestion
    added = ", ".join(f"{t.kind} {t.term!r}" for t in chosen)
    proposal = create_proposal(
        ws,
        skill,
        project=project,
        author=author,
        proposed_by="template",
        routing={"triggers": triggers, "keywords": keywords},
        rationale=(
            f"Mined from {len(own)} routing examples: adds {added}. On metadata alone, "
            f"{routed_after} of {len(own)} examples route to {skill} first "
            f"(now {routed_before})."
        ),
        evidence={
            "kind": "routing",
            "terms": [t.to_dict() for t in chosen],
            "examples": len(own),
            "routedBefore": routed_before,
            "routedAfter": routed_after,
        },
    )
    return replace(suggestion, proposal=proposal)
