"""Does the judge agree with people? Cohen's κ, per skill.

A benchmark's judge is an LLM; nothing guarantees that what it prefers is what the
skill's users prefer. People have said what they prefer twice over: with 👍, 👎 and
Fix It on answers, and by approving or rejecting proposals. Each is a pair of
labels, the judge's and a person's, good or bad:

* a voted answer: the judge scores the stored answer alone (1 to 10, good from
  :data:`GOOD_SCORE`); the person's label is 👍 (good) or 👎 / Fix It (bad);
* a decided proposal with a PASSED or FAILED verdict: PASSED against approved,
  FAILED against rejected (a TIE said nothing either way).

Cohen's κ corrects their agreement for what chance alone would give (two raters
who both say "good" 90 % of the time agree 82 % of the time by chance). Below
``bench_min_judge_kappa`` (0.6, "substantial" on Landis and Koch's scale) over at
least ``bench_min_judge_pairs`` pairs, a benchmark leaves the judge out and its
verdict rests on the skill's rules and pinned cases (:mod:`amelio.improve.bench`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from amelio.db.schema import benchmark_runs, feedback, interactions, projects, proposals
from amelio.llm import Completion, LLMRequest, Provider
from amelio.stats import weighted_kappa
from amelio.workspace.folder import Workspace

__all__ = [
    "GOOD_SCORE",
    "Agreement",
    "cohen_kappa",
    "json_objects",
    "judge_agreement",
    "judge_score",
    "parse_score",
]

#: A judge score from which an answer counts as one a person would keep.
GOOD_SCORE = 6

_ONE_SYSTEM = (
    "You are a strict, fair judge of AI assistant answers. You see a user message and one "
    "answer. Score it from 1 (useless or wrong) to 10 (excellent) for how well it helps the "
    "user, is correct, and follows good practice. Reply with JSON only: "
    '{"score": <1-10>, "reason": "<one sentence>"}'
)


def cohen_kappa(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Cohen's κ of two raters' yes/no labels (with two grades the quadratic
    weights are plain disagreement, so this is the unweighted κ); None when it is
    undefined (no pairs, or both raters gave one label throughout, so chance
    explains everything)."""
    return weighted_kappa([(int(a), int(b)) for a, b in pairs], categories=2)


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object in an LLM's reply, in order: judges add prose and fences
    around the object they were asked for."""
    for match in re.finditer(r"\{.*?\}", text, re.DOTALL):
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            yield data


def judge_score(value: object) -> float | None:
    """``value`` as a judge's score, 1 to 10, or None when it is not one."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 1 <= value <= 10:
        return float(value)
    return None


def parse_score(text: str) -> float:
    """The score from a one-answer judge reply; ValueError if there is none."""
    for data in json_objects(text):
        if (score := judge_score(data.get("score"))) is not None:
            return score
    raise ValueError(f"no valid score in judge reply: {text[:120]!r}")


@dataclass(frozen=True)
class Agreement:
    """The judge against people for one skill: the pairs, by kind, and κ."""

    votes: int
    decisions: int
    agreed: int
    kappa: float | None
    errors: int = 0

    @property
    def pairs(self) -> int:
        return self.votes + self.decisions

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "votes": self.votes,
            "decisions": self.decisions,
            "agreed": self.agreed,
            "kappa": None if self.kappa is None else round(self.kappa, 3),
            "errors": self.errors,
        }


def _voted(ws: Workspace, skill: str, project: str, limit: int) -> list[tuple[str, str, bool]]:
    """The newest ``limit`` answers of ``skill`` people voted on: (message, answer,
    kept). An answer anyone marked 👎 or Fix It is not kept, whatever else it got."""
    bad = sa.func.max(sa.case((feedback.c.kind != "up", 1), else_=0))
    query = (
        sa.select(interactions.c.message, interactions.c.answer, bad.label("bad"))
        .join(feedback, feedback.c.interaction_id == interactions.c.id)
        .join(projects, projects.c.id == interactions.c.project_id)
        .where(interactions.c.applied_skill == skill, projects.c.name == project)
        .group_by(interactions.c.id, interactions.c.message, interactions.c.answer)
        .order_by(interactions.c.id.desc())
        .limit(limit)
    )
    with ws.engine.connect() as conn:
        return [(r.message, r.answer, not r.bad) for r in conn.execute(query)]


def _decided(ws: Workspace, skill: str, project: str) -> list[tuple[bool, bool]]:
    """(verdict PASSED, approved) for each decided proposal of ``skill`` whose newest
    finished benchmark said PASSED or FAILED."""
    query = (
        sa.select(proposals.c.id, proposals.c.status, benchmark_runs.c.verdict)
        .join(benchmark_runs, benchmark_runs.c.proposal_id == proposals.c.id)
        .join(projects, projects.c.id == proposals.c.project_id)
        .where(
            proposals.c.skill_name == skill,
            projects.c.name == project,
            proposals.c.status.in_(("approved", "rejected")),
            benchmark_runs.c.status == "done",
        )
        .order_by(benchmark_runs.c.id)
    )
    with ws.engine.connect() as conn:
        newest = {r.id: (r.verdict, r.status) for r in conn.execute(query)}
    return [
        (verdict == "PASSED", status == "approved")
        for verdict, status in newest.values()
        if verdict in ("PASSED", "FAILED")
    ]


def judge_agreement(
    ws: Workspace,
    judging: Provider,
    skill: str,
    project: str,
    spent: list[Completion],
) -> Agreement:
    """The judge against people on ``skill``: it scores the newest
    ``judge_calibration_cases`` voted answers (at temperature 0, so a cached
    provider asks once per answer and judge), and past decisions count as they are."""
    pairs: list[tuple[bool, bool]] = []
    errors = 0
    for message, answer, kept in _voted(ws, skill, project, ws.settings.judge_calibration_cases):
        user = f"USER MESSAGE:\n{message}\n\nANSWER:\n{answer}"
        completion = judging.complete(
            LLMRequest.single(_ONE_SYSTEM, user, max_tokens=200, temperature=0)
        )
        spent.append(completion)
        try:
            pairs.append((parse_score(completion.text) >= GOOD_SCORE, kept))
        except ValueError:
            errors += 1
    votes = len(pairs)
    pairs += _decided(ws, skill, project)
    return Agreement(
        votes, len(pairs) - votes, sum(a == b for a, b in pairs), cohen_kappa(pairs), errors
    )
