"""Answer feedback and the quality metrics derived from what was stored.

Answer feedback is the seed's three buttons under one assistant answer: 👍 (``up``),
👎 (``down``) and 🛠️ Fix It (``fixit``). The comment of a 👎 or a Fix It becomes a
learning (distilled into one rule when asked to); without a comment they stay
feedback only, because a learning goes into every prompt of the skill and into
proposals, and "something was wrong with this answer" tells neither the model nor
a reviewer what to do. 👍 bumps the helpful counter of every learning the answer's
prompt used; 👎 bumps the harmful counter of those scoped to the skill that
answered (a general rule is in every prompt, so blaming it for any bad answer
would retire it at random). A user's repeated vote on one interaction counts
once: the last one stands. A 👍 also pins the answer as a case its skill must keep
passing, and a Fix It pins the message with its correction (:mod:`.cases`).
Under ``pii_scrub = all`` a comment is scrubbed before it is stored, distilled
or turned into a learning (:mod:`amelio.privacy.pii`).

Answer feedback is not :mod:`amelio.feedback`: those are the typed, anonymized
``MartyFeedbackEventV1`` events (clicks, dwell, votes on search results) that the
collector validates, signs and stores for the relevance loop.

Metrics are never stored: they are aggregates over interactions, eval results
and answer feedback, so they can always be rebuilt and never drift from the data.
The API (``/v1/quality``), ``amelio quality``, the nightly loop and the dashboard
all read them from here.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.assistant import cases, learnings
from amelio.assistant.stats import wilson_interval
from amelio.db.schema import aware, eval_results, feedback, interactions, projects, utcnow
from amelio.errors import AmelioError, InvalidInput, NotFound
from amelio.llm import LLMRequest, get_provider
from amelio.privacy.identity import user_ref
from amelio.privacy.pii import scrub_for_storage
from amelio.routing import examples as routing_examples
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import project_id

__all__ = [
    "ANSWER_FEEDBACK_KINDS",
    "MAX_COMMENT_CHARS",
    "AnswerFeedbackResult",
    "DailyMetrics",
    "FailedCheck",
    "Finding",
    "RuleStats",
    "SkillMetrics",
    "daily_metrics",
    "evidence_sources",
    "find_underperformers",
    "give_answer_feedback",
    "quality_metrics",
    "recent_failed_answers",
    "rule_stats",
]

log = logging.getLogger(__name__)

#: The buttons under an answer: 👍, 👎 and 🛠️ Fix It.
ANSWER_FEEDBACK_KINDS = ("up", "down", "fixit")
MAX_COMMENT_CHARS = 2000

_DISTILL_SYSTEM = (
    "You turn a user's correction of an AI assistant's answer into ONE concrete, general "
    "rule the assistant must follow from now on. Answer with the rule only: one sentence, "
    "imperative mood, no preamble, no quotes."
)


@dataclass(frozen=True)
class AnswerFeedbackResult:
    feedback_id: int
    interaction_id: int
    kind: str
    replaced: str | None
    learning: learnings.Learning | None
    retired_learning_ids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "feedbackId": self.feedback_id,
            "interactionId": self.interaction_id,
            "kind": self.kind,
            "replaced": self.replaced,
            "learning": self.learning.to_dict() if self.learning else None,
            "retiredLearningIds": list(self.retired_learning_ids),
        }


@dataclass(frozen=True)
class SkillMetrics:
    """One skill's use in one project. ``feedback_positive`` counts 👍;
    ``feedback_negative`` counts answers a person found wrong, by 👎 or by asking for
    a Fix It (once per person and answer); ``feedback_fixit`` says how many of those
    asked for a fix."""

    project: str
    skill: str
    applied_count: int
    success_count: int
    feedback_positive: int
    feedback_negative: int
    last_used: datetime | None
    rule_failures: dict[str, int] = field(default_factory=dict)
    rule_names: dict[str, str] = field(default_factory=dict, compare=False)
    feedback_fixit: int = 0

    @property
    def success_rate(self) -> float:
        return self.success_count / self.applied_count if self.applied_count else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "skill": self.skill,
            "appliedCount": self.applied_count,
            "successCount": self.success_count,
            "successRate": round(self.success_rate, 4),
            "feedbackPositive": self.feedback_positive,
            "feedbackNegative": self.feedback_negative,
            "feedbackFixit": self.feedback_fixit,
            "lastUsed": self.last_used.isoformat() if self.last_used else None,
            "ruleFailures": [
                {"ruleId": rid, "name": self.rule_names.get(rid, rid), "count": n}
                for rid, n in sorted(self.rule_failures.items(), key=lambda x: (-x[1], x[0]))
            ],
        }


def _distill(ws: Workspace, kind: str, message: str, answer: str, comment: str) -> str | None:
    """One concrete rule from a correction, or None (the caller falls back)."""
    try:
        provider = get_provider(ws.settings, purpose="Distilling learnings")
        user = (
            f"User message:\n{message[:2000]}\n\nAssistant answer:\n{answer[:4000]}\n\n"
            f"User's {'fix request' if kind == 'fixit' else 'complaint'}:\n{comment}"
        )
        rule = provider.complete(LLMRequest.single(_DISTILL_SYSTEM, user, max_tokens=200)).text
    except AmelioError as exc:
        log.warning("could not distill a learning, storing the comment as is: %s", exc.message)
        return None
    rule = " ".join(rule.strip().strip('"').split())
    return rule if 0 < len(rule) <= learnings.MAX_RULE_CHARS else None


def give_answer_feedback(
    ws: Workspace,
    interaction_id: int,
    kind: str,
    *,
    comment: str | None = None,
    user: str | None = None,
) -> AnswerFeedbackResult:
    """Record 👍, 👎 or Fix It on an interaction's answer, and learn from it."""
    if kind not in ANSWER_FEEDBACK_KINDS:
        raise InvalidInput(f"Unknown feedback kind {kind!r}: use up, down or fixit.", field="kind")
    comment = " ".join((comment or "").split()) or None
    if comment and len(comment) > MAX_COMMENT_CHARS:
        raise InvalidInput(
            f"A comment is at most {MAX_COMMENT_CHARS:,} characters.", field="comment"
        )
    if comment:
        comment = scrub_for_storage(ws.settings, comment, "comments")
    ref = user_ref(ws.settings, user)
    channel = "fixit" if kind == "fixit" else "vote"
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(interactions, projects.c.name.label("project"))
            .join(projects, projects.c.id == interactions.c.project_id)
            .where(interactions.c.id == interaction_id)
        ).first()
        if row is None:
            raise NotFound(f"No interaction {interaction_id}.", interaction_id=interaction_id)
        where = sa.and_(
            feedback.c.interaction_id == interaction_id,
            feedback.c.user_ref == ref,
            feedback.c.channel == channel,
        )
        previous = conn.execute(sa.select(feedback).where(where)).first()
        if previous is None:
            result = conn.execute(
                feedback.insert().values(
                    interaction_id=interaction_id,
                    user_ref=ref,
                    channel=channel,
                    kind=kind,
                    comment=comment,
                    created_at=now,
                    updated_at=now,
                )
            )
            assert result.inserted_primary_key is not None
            feedback_id = int(result.inserted_primary_key[0])
        else:
            feedback_id = int(previous.id)
            conn.execute(
                feedback.update()
                .where(feedback.c.id == feedback_id)
                .values(kind=kind, comment=comment, updated_at=now)
            )
        # Whether anyone marked this answer 👎 or Fix It (this vote included): a kept
        # answer becomes a routing example and a pinned case only if no one did.
        objected = (
            kind != "up"
            or conn.execute(
                sa.select(feedback.c.id)
                .where(feedback.c.interaction_id == interaction_id, feedback.c.kind != "up")
                .limit(1)
            ).first()
            is not None
        )
        routing_examples.on_answer_feedback(conn, row, kind, objected=objected)
        cases.on_answer_feedback(conn, ws.settings, row, kind, comment, objected=objected)
    project = str(row.project)
    changed = previous is None or previous.kind != kind or previous.comment != comment

    learning = None
    if kind in ("down", "fixit") and changed and comment:
        rule = comment
        if ws.settings.distill_learnings and ws.settings.llm_provider != "none":
            rule = _distill(ws, kind, row.message, row.answer, comment) or comment
        learning, _ = learnings.add_learning(
            ws,
            rule,
            source="fixit" if kind == "fixit" else "negative",
            project=project,
            skill=row.applied_skill,
            origin=learnings.Origin(
                feedback_id=feedback_id, interaction_id=interaction_id, author=ref
            ),
        )
        with db.transaction(ws.engine) as conn:
            conn.execute(
                feedback.update()
                .where(feedback.c.id == feedback_id)
                .values(learning_id=learning.id)
            )

    retired: list[int] = []
    if channel == "vote" and (previous is None or previous.kind != kind):
        used = [i for i in row.learning_ids if learning is None or i != learning.id]
        if kind == "down":
            # A 👎 blames only the learnings written for the skill that answered: a
            # general rule in every prompt would otherwise be retired by any bad answer.
            used = [
                item.id
                for item in learnings.list_learnings(ws, project=project)
                if item.id in used and item.skill is not None and item.skill == row.applied_skill
            ]
        retired = learnings.record_outcome(ws, used, helpful=kind == "up", project=project)
    return AnswerFeedbackResult(
        feedback_id,
        interaction_id,
        kind,
        previous.kind if previous is not None else None,
        learning,
        tuple(retired),
    )


# -- metrics ------------------------------------------------------------------------------

#: An interaction counts as a use of the skill that answered it.
_USED = interactions.c.applied_skill.is_not(None)
#: 👍 and 👎 are votes; a Fix It is a correction (its own channel), not a vote.
_VOTE = feedback.c.channel == "vote"
#: Negative feedback: a 👎, or a Fix It, which says "this should have been different"
#: as plainly as a 👎 does (and is what most people press under a wrong answer).
_NEGATIVE = sa.or_(sa.and_(_VOTE, feedback.c.kind == "down"), feedback.c.channel == "fixit")
_VOTES = feedback.join(interactions, interactions.c.id == feedback.c.interaction_id).join(
    projects, projects.c.id == interactions.c.project_id
)
_CHECKS = eval_results.join(interactions, interactions.c.id == eval_results.c.interaction_id).join(
    projects, projects.c.id == interactions.c.project_id
)
_KEY = (projects.c.name.label("project"), interactions.c.applied_skill)


def _scope(ws: Workspace, project: str | None) -> list[sa.ColumnElement[bool]]:
    """The filter for one project (all projects for None); an unknown project is an
    error, not "no data"."""
    if project is None:
        return []
    with ws.engine.connect() as conn:
        project_id(conn, project)
    return [projects.c.name == project]


def _rule_counts(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Per (project, skill, rule): the answers checked against the rule and how many
    passed, the source of every per-rule figure."""
    e = eval_results
    return (
        sa.select(
            *_KEY,
            e.c.rule_id,
            sa.func.max(e.c.rule_name).label("rule_name"),
            sa.func.count().label("n"),
            sa.func.sum(sa.case((e.c.passed, 1), else_=0)).label("ok"),
        )
        .select_from(_CHECKS)
        .where(_USED, *where)
        .group_by(projects.c.name, interactions.c.applied_skill, e.c.rule_id)
    )


def _negatives(*where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """One row per (answer, person) with negative feedback: a person who pressed 👎
    and also asked for a Fix It on one answer said it was wrong once, not twice.
    ``fixit`` is 1 where that person asked for a fix; ``at`` is their latest change."""
    f, i = feedback, interactions
    return (
        sa.select(
            *_KEY,
            f.c.interaction_id,
            sa.func.max(sa.case((f.c.channel == "fixit", 1), else_=0)).label("fixit"),
            sa.func.max(f.c.updated_at).label("at"),
        )
        .select_from(_VOTES)
        .where(_NEGATIVE, _USED, *where)
        .group_by(projects.c.name, i.c.applied_skill, f.c.interaction_id, f.c.user_ref)
    )


def quality_metrics(ws: Workspace, project: str | None = None) -> list[SkillMetrics]:
    """Per (project, skill) metrics over every stored interaction; all projects when
    ``project`` is None."""
    i, f, p = interactions, feedback, projects
    scope = _scope(ws, project)
    base = (
        sa.select(
            *_KEY,
            sa.func.count().label("n"),
            sa.func.sum(sa.case((i.c.success, 1), else_=0)).label("ok"),
            sa.func.max(i.c.created_at).label("last"),
        )
        .join(p, p.c.id == i.c.project_id)
        .where(_USED, *scope)
        .group_by(p.c.name, i.c.applied_skill)
    )
    ups = (
        sa.select(*_KEY, sa.func.count().label("n"))
        .select_from(_VOTES)
        .where(_VOTE, f.c.kind == "up", _USED, *scope)
        .group_by(p.c.name, i.c.applied_skill)
    )
    per_answer = _negatives(*scope).subquery()
    downs = sa.select(
        per_answer.c.project,
        per_answer.c.applied_skill,
        sa.func.count().label("n"),
        sa.func.sum(per_answer.c.fixit).label("fixits"),
    ).group_by(per_answer.c.project, per_answer.c.applied_skill)
    with ws.engine.connect() as conn:
        rows = conn.execute(base).all()
        up_rows = conn.execute(ups).all()
        down_rows = conn.execute(downs).all()
        rule_rows = conn.execute(_rule_counts(*scope)).all()
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for r in up_rows:
        counts[(r.project, r.applied_skill)]["up"] = int(r.n)
    for r in down_rows:
        counts[(r.project, r.applied_skill)] |= {"down": int(r.n), "fixit": int(r.fixits or 0)}
    fails: dict[tuple[str, str], dict[str, int]] = {}
    names: dict[tuple[str, str], dict[str, str]] = {}
    for r in rule_rows:
        failed = int(r.n) - int(r.ok or 0)
        if failed:
            fails.setdefault((r.project, r.applied_skill), {})[r.rule_id] = failed
            names.setdefault((r.project, r.applied_skill), {})[r.rule_id] = r.rule_name
    out = []
    for r in rows:
        k = (r.project, r.applied_skill)
        last = None if r.last is None else aware(r.last)  # max() may lose the column type
        out.append(
            SkillMetrics(
                project=r.project,
                skill=r.applied_skill,
                applied_count=int(r.n),
                success_count=int(r.ok or 0),
                feedback_positive=counts.get(k, {}).get("up", 0),
                feedback_negative=counts.get(k, {}).get("down", 0),
                feedback_fixit=counts.get(k, {}).get("fixit", 0),
                last_used=last,
                rule_failures=fails.get(k, {}),
                rule_names=names.get(k, {}),
            )
        )
    return sorted(out, key=lambda m: (m.project, m.skill))


def _moment(value: datetime | str) -> datetime:
    """A timestamp read back through max(), which loses the column type on SQLite."""
    return aware(value if isinstance(value, datetime) else datetime.fromisoformat(value))


@dataclass(frozen=True)
class DailyMetrics:
    """One skill's uses and feedback on one day (UTC): a point of the quality charts
    (negative feedback as :class:`SkillMetrics` counts it)."""

    project: str
    skill: str
    day: date
    applied_count: int
    success_count: int
    feedback_positive: int
    feedback_negative: int

    @property
    def success_rate(self) -> float | None:
        """None on a day with votes but no answers."""
        return self.success_count / self.applied_count if self.applied_count else None


def daily_metrics(ws: Workspace, project: str | None = None) -> list[DailyMetrics]:
    """:func:`quality_metrics`' uses, successes and feedback, day by day (an answer
    counts on the day it was given, feedback on the day it was last changed), sorted
    by project, skill and day; all projects when ``project`` is None."""
    i, f, p = interactions, feedback, projects
    scope = _scope(ws, project)
    with ws.engine.connect() as conn:
        uses = conn.execute(
            sa.select(*_KEY, i.c.created_at, i.c.success)
            .join(p, p.c.id == i.c.project_id)
            .where(_USED, *scope)
        ).all()
        ups = conn.execute(
            sa.select(*_KEY, f.c.updated_at.label("at"))
            .select_from(_VOTES)
            .where(_VOTE, f.c.kind == "up", _USED, *scope)
        ).all()
        downs = conn.execute(_negatives(*scope)).all()
    days: dict[tuple[str, str, date], Counter[str]] = defaultdict(Counter)
    for r in uses:
        day = days[(r.project, r.applied_skill, aware(r.created_at).date())]
        day["n"] += 1
        day["ok"] += int(bool(r.success))
    for kind, found in (("up", ups), ("down", downs)):
        for given in found:
            days[(given.project, given.applied_skill, _moment(given.at).date())][kind] += 1
    return [
        DailyMetrics(project, skill, day, c["n"], c["ok"], c["up"], c["down"])
        for (project, skill, day), c in sorted(days.items())
    ]


@dataclass(frozen=True)
class FailedCheck:
    """An answer that failed one eval rule."""

    interaction_id: int
    rule_id: str
    detail: str
    answer: str  # an excerpt
    at: datetime


@dataclass(frozen=True)
class RuleStats:
    """How one eval rule of a skill fared over the answers checked against it."""

    rule_id: str
    name: str
    total: int
    passed: int
    failures: tuple[FailedCheck, ...] = ()  # the latest, newest first

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


def _failed_checks(
    conn: sa.Connection,
    project: str,
    skill: str,
    *,
    limit: int,
    excerpt: int,
    warning_only: bool = False,
) -> list[FailedCheck]:
    """The latest failed checks of a skill's answers, newest first."""
    i, e = interactions, eval_results
    query = (
        sa.select(e.c.rule_id, e.c.detail, i.c.id, i.c.answer, i.c.created_at)
        .select_from(_CHECKS)
        .where(
            projects.c.name == project,
            i.c.applied_skill == skill,
            sa.not_(e.c.passed),
            *([e.c.severity == "warning"] if warning_only else []),
        )
        .order_by(i.c.id.desc())
        .limit(limit)
    )
    return [
        FailedCheck(r.id, r.rule_id, r.detail, r.answer[:excerpt], r.created_at)
        for r in conn.execute(query)
    ]


def rule_stats(ws: Workspace, project: str, skill: str, failures: int = 3) -> dict[str, RuleStats]:
    """Per rule id of ``skill`` in ``project``: answers checked, passed, and the latest
    ``failures`` failing answers (what the dashboard's evals tab shows)."""
    with ws.engine.connect() as conn:
        totals = conn.execute(
            _rule_counts(projects.c.name == project, interactions.c.applied_skill == skill)
        ).all()
        failing = _failed_checks(conn, project, skill, limit=200, excerpt=300)
    latest: dict[str, list[FailedCheck]] = defaultdict(list)
    for check in failing:
        if len(latest[check.rule_id]) < failures:
            latest[check.rule_id].append(check)
    return {
        r.rule_id: RuleStats(
            r.rule_id, r.rule_name, int(r.n), int(r.ok or 0), tuple(latest[r.rule_id])
        )
        for r in totals
    }


# -- underperformers ----------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """An underperforming skill and the evidence that says so."""

    metrics: SkillMetrics
    reasons: tuple[str, ...]
    success_bounds: tuple[float, float]
    learnings: tuple[learnings.Learning, ...] = ()
    failed_answers: tuple[tuple[str, str], ...] = ()  # (rule id, answer excerpt)
    #: The interactions behind this evidence (:func:`evidence_sources`): a proposal
    #: drafted from it was written from them, and its benchmark leaves them out.
    sources: tuple[int, ...] = ()

    @property
    def skill(self) -> str:
        return self.metrics.skill

    @property
    def project(self) -> str:
        return self.metrics.project

    def to_dict(self) -> dict[str, Any]:
        return self.metrics.to_dict() | {
            "reasons": list(self.reasons),
            "successBounds": [round(b, 4) for b in self.success_bounds],
            "learnings": [{"id": i.id, "rule": i.rule, "source": i.source} for i in self.learnings],
        }


def find_underperformers(
    ws: Workspace,
    project: str | None = None,
    *,
    min_applied: int | None = None,
    min_success_rate: float | None = None,
    mode: str | None = None,
    confidence: float | None = None,
) -> list[Finding]:
    """The seed's rule: ``applied >= min_applied`` and (``success_rate < min_success_rate``
    or more negative feedback than 👍, a Fix It counting as negative). In ``wilson``
    mode the success rate must be below the threshold with ``confidence`` (the upper
    Wilson bound is under it), so a few unlucky answers do not make a skill
    "underperforming"."""
    settings = ws.settings
    min_applied = settings.underperform_min_applied if min_applied is None else min_applied
    threshold = (
        settings.underperform_min_success_rate if min_success_rate is None else min_success_rate
    )
    mode = mode or settings.underperform_mode
    confidence = confidence or settings.underperform_confidence
    if mode not in ("seed", "wilson"):
        raise InvalidInput(
            f"Unknown underperformance mode {mode!r}: use seed or wilson.", field="mode"
        )
    findings = []
    for m in quality_metrics(ws, project):
        if m.applied_count < min_applied:
            continue
        bounds = wilson_interval(m.success_count, m.applied_count, confidence)
        reasons = []
        low_rate = m.success_rate < threshold if mode == "seed" else bounds[1] < threshold
        if low_rate:
            reasons.append(
                f"success rate {m.success_rate:.0%} ({m.success_count} of {m.applied_count}) "
                f"is under {threshold:.0%}"
                + (
                    f" with {confidence:.0%} confidence (Wilson upper bound {bounds[1]:.0%})"
                    if mode == "wilson"
                    else ""
                )
            )
        if m.feedback_negative > m.feedback_positive:
            negative = (
                f"👎 or Fix It ({m.feedback_negative}, {m.feedback_fixit} of them Fix It)"
                if m.feedback_fixit
                else f"👎 ({m.feedback_negative})"
            )
            reasons.append(f"more {negative} than 👍 ({m.feedback_positive})")
        if not reasons:
            continue
        linked = tuple(
            item
            for item in learnings.list_learnings(ws, project=m.project)
            if item.skill == m.skill
        )
        findings.append(
            Finding(
                m,
                tuple(reasons),
                bounds,
                linked,
                recent_failed_answers(ws, m.project, m.skill),
                evidence_sources(ws, m.project, m.skill, [i.id for i in linked]),
            )
        )
    return findings


def evidence_sources(
    ws: Workspace, project: str, skill: str, learning_ids: Sequence[int], failed: int = 5
) -> tuple[int, ...]:
    """The interactions a rewrite of ``skill`` reads, in order: the ``failed`` most
    recent answers that failed a warning rule (:func:`recent_failed_answers`) and the
    answers whose 👎 or Fix It taught the learnings ``learning_ids``.

    A proposal written from them has seen their messages, so a benchmark that
    replayed them would test it on its own training cases: it leaves them out.
    """
    with ws.engine.connect() as conn:
        checks = _failed_checks(conn, project, skill, limit=failed, excerpt=0, warning_only=True)
        taught = (
            conn.scalars(
                sa.select(feedback.c.interaction_id)
                .where(feedback.c.learning_id.in_(list(learning_ids)))
                .order_by(feedback.c.interaction_id)
            ).all()
            if learning_ids
            else []
        )
    return tuple(dict.fromkeys([*(c.interaction_id for c in checks), *taught]))


def recent_failed_answers(
    ws: Workspace, project: str, skill: str, limit: int = 5
) -> tuple[tuple[str, str], ...]:
    """Recent answers of ``skill`` that failed a warning rule, as (rule id, answer
    excerpt): the failure text a rewrite learns from (a :class:`Finding` carries
    them; Sage reads them for a skill that is not underperforming too)."""
    with ws.engine.connect() as conn:
        checks = _failed_checks(conn, project, skill, limit=limit, excerpt=1000, warning_only=True)
    return tuple((c.rule_id, c.answer) for c in checks)
