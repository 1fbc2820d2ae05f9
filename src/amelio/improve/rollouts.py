"""Canary rollouts: an approved version goes live for a share of conversations first,
and a sequential test decides whether it goes on or goes back.

**Starting one.** ``amelio proposals approve ID --canary PCT`` approves the proposal
as usual (the skill's new version is written, its files rotate) and starts a
rollout in the same transaction: PCT % of conversations get the new version
(``to_version``), the rest the version it replaced (``from_version``, read from the
skill's history).

**Assignment** (:func:`arm_for`) is a stable hash of the rollout's id and the
conversation's *unit*: the user when the caller names one, else the conversation,
else (a caller that names neither) a fresh draw per request. A unit's bucket never
changes, so raising the share only moves people from the old version to the new
one, never back. :func:`serving` is what every answer path asks (through
:func:`amelio.assistant.prompt.build_prompt`): it reads the skill's rollout from
the database on each request, so a stage change, a pause or an abort reaches every
worker and process at its next request, with no restart and no cache to expire.
The old version's spec is immutable, so it is cached by (skill, version).

**Judging it** (:func:`check_rollouts`, run by ``amelio serve`` at
``rollouts_schedule`` and by ``amelio rollouts check``). For each arm: answers, and
the share of them with a 👎, with a Fix It, and failing a rule. Each of the three
is tested with the **mixture sequential probability ratio test** (mSPRT) of
Johari, Koomen, Pekelis and Walsh, "Peeking at A/B Tests: Why it matters, and what
to do about it" (KDD 2017), and Johari, Pekelis and Walsh, "Always valid
inference: continuous monitoring of A/B tests" (Operations Research, 2022): on the
difference of the two rates θ̂ with plug-in variance V, and a normal mixing
distribution N(0, τ²) over the effect,

    Λ = sqrt(V / (V + τ²)) · exp(τ² θ̂² / (2 V (V + τ²)))

and the arm is declared different once Λ ≥ 1/α. Unlike a fixed-horizon test,
this stays valid when checked after every answer: the chance of a false alarm
over the whole rollout is at most α (``rollout_alpha``, split between the three
metrics). τ = :data:`MIXING_SD` (5 points) is the size of regression worth
catching. A metric counts as a regression only when the new version's rate is the
higher one.

* **On a regression** the rollout pauses: everyone is back on the old version at
  their next request, and the notifiers (Telegram admin chats included) say why,
  with the figures.
* **On success at a stage** (``rollout_stage_exposures`` answers of the new version
  in the stage, no regression): with ``rollout_promote = "auto"`` it moves on
  (PCT → 50 → 100; at 100 it is ``done``), with ``"manual"`` it waits for
  ``amelio rollouts promote``.
* **Aborting** rolls the skill back to the old version (a new version, history
  only grows) and ends the rollout.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import (
    feedback,
    interactions,
    projects,
    rollouts,
    skill_versions,
    skills,
    utcnow,
)
from amelio.errors import Conflict, InvalidInput, NotFound

if TYPE_CHECKING:
    from amelio.skills.model import Skill
    from amelio.workspace.folder import Workspace

__all__ = [
    "ACTIVE",
    "MIXING_SD",
    "STAGES",
    "Check",
    "Rollout",
    "abort_rollout",
    "arm_counts",
    "arm_for",
    "check_rollout",
    "check_rollouts",
    "decide",
    "get_rollout",
    "list_rollouts",
    "msprt",
    "pause_rollout",
    "promote_rollout",
    "rollout_curves",
    "serving",
    "start_rollout",
]

log = logging.getLogger(__name__)

#: Rollouts that hold their skill: one at a time.
ACTIVE = ("running", "paused")
STATUSES = ("running", "paused", "aborted", "done")
#: The shares a rollout moves through after the one it started at.
STAGES = (50, 100)
#: τ of the mSPRT's mixing distribution: the regression worth catching, in rate.
MIXING_SD = 0.05
#: Answers each arm needs before a metric is tested at all.
MIN_PER_ARM = 30
METRICS = ("down", "fixit", "failed")
_LABELS = {"down": "👎 rate", "fixit": "Fix It rate", "failed": "rule-failure rate"}
_BUCKETS = 10_000


# -- assignment --------------------------------------------------------------------------


def bucket(rollout_id: int, unit: str) -> float:
    """The unit's place in [0, 100) for this rollout: stable, and independent between
    rollouts (the id is hashed in), so the same people are not always first."""
    digest = hashlib.sha256(f"{rollout_id}:{unit}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % _BUCKETS * 100 / _BUCKETS


def arm_for(
    rollout_id: int, percent: int, unit: str | None, rng: random.Random | None = None
) -> str:
    """``"canary"`` or ``"control"`` for ``unit`` at ``percent`` % on the new version;
    without a unit, a fresh draw (sticky assignment needs someone to stick to)."""
    place = (rng or random).random() * 100 if unit is None else bucket(rollout_id, unit)
    return "canary" if place < percent else "control"


@dataclass(frozen=True)
class Serving:
    """Which version of a skill one request gets, and from which rollout."""

    skill: Skill
    rollout_id: int | None = None
    arm: str | None = None


# Every answer runs this query: built once, as the skills' stamp query is, instead of
# building the join on every answer (about 0.1 ms an answer).
_SERVING = (
    sa.select(
        rollouts.c.id.label("rollout_id"),
        rollouts.c.percent,
        rollouts.c.status,
        rollouts.c.from_version,
        rollouts.c.to_version,
        skill_versions,
    )
    .join(
        skill_versions,
        sa.and_(
            skill_versions.c.skill_id == rollouts.c.skill_id,
            skill_versions.c.version == rollouts.c.from_version,
        ),
    )
    .where(rollouts.c.skill_id == sa.bindparam("skill_id"), rollouts.c.status.in_(ACTIVE))
)


def serving(conn: sa.Connection, skill: Skill, unit: str | None) -> Serving:
    """The version of ``skill`` this request gets: the current one, unless a rollout
    of it is paused or puts this unit in its control arm (then the old one). One
    query, the old version's row with it, read afresh on every request."""
    from amelio.skills.store import spec_from_row

    row = conn.execute(_SERVING, {"skill_id": skill.id}).first()
    if row is None or skill.version != row.to_version:
        return Serving(skill)
    arm = "control" if row.status == "paused" else arm_for(row.rollout_id, row.percent, unit)
    if arm == "canary":
        return Serving(skill, row.rollout_id, arm)
    # The old rulebook, held to the new version's rules: both arms are measured with
    # one yardstick, so a rollout that adds a rule is not taken for a regression.
    spec = replace(spec_from_row(row._mapping, skill.name), evals=skill.spec.evals)
    return Serving(replace(skill, spec=spec, version=row.from_version), row.rollout_id, arm)


# -- the sequential test -----------------------------------------------------------------


def msprt(
    bad_new: int, n_new: int, bad_old: int, n_old: int, alpha: float, tau: float = MIXING_SD
) -> dict[str, Any]:
    """The mSPRT of the difference of two rates (new − old): the statistic Λ, whether
    it crossed 1/α, and the always-valid confidence interval at level 1 − α.

    The variance is the plug-in one, each rate smoothed by one success and one
    failure so that an arm with no 👎 yet does not have zero variance."""
    if n_new < MIN_PER_ARM or n_old < MIN_PER_ARM:
        return {"lambda": 0.0, "crossed": False, "diff": None, "interval": None}
    p1, p0 = bad_new / n_new, bad_old / n_old
    s1, s0 = (bad_new + 1) / (n_new + 2), (bad_old + 1) / (n_old + 2)
    v = s1 * (1 - s1) / n_new + s0 * (1 - s0) / n_old
    t2 = tau * tau
    diff = p1 - p0
    log_lambda = 0.5 * math.log(v / (v + t2)) + t2 * diff * diff / (2 * v * (v + t2))
    # The confidence sequence: every θ whose own test would not reject.
    half = math.sqrt((v * (v + t2) / t2) * (2 * math.log(1 / alpha) + math.log((v + t2) / v)))
    return {
        "lambda": math.exp(min(log_lambda, 700.0)),
        "crossed": log_lambda >= math.log(1 / alpha),
        "diff": diff,
        "interval": [diff - half, diff + half],
    }


# -- records -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout:
    id: int
    project: str
    skill: str
    proposal_id: int | None
    from_version: int
    to_version: int
    percent: int
    status: str
    started_by: str
    started_at: datetime
    stage_started_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    reason: str | None
    last_check: dict[str, Any] | None
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def iso(x: datetime | None) -> str | None:
            return x.isoformat() if x else None

        return {
            "id": self.id,
            "project": self.project,
            "skill": self.skill,
            "proposalId": self.proposal_id,
            "fromVersion": self.from_version,
            "toVersion": self.to_version,
            "percent": self.percent,
            "status": self.status,
            "startedBy": self.started_by,
            "startedAt": iso(self.started_at),
            "stageStartedAt": iso(self.stage_started_at),
            "updatedAt": iso(self.updated_at),
            "endedAt": iso(self.ended_at),
            "reason": self.reason,
            "lastCheck": self.last_check,
            "history": self.history,
        }


def _select() -> sa.Select[Any]:
    return sa.select(rollouts, projects.c.name.label("project_name")).join(
        projects, projects.c.id == rollouts.c.project_id
    )


def _from_row(row: Any) -> Rollout:
    return Rollout(
        id=row.id,
        project=row.project_name,
        skill=row.skill_name,
        proposal_id=row.proposal_id,
        from_version=row.from_version,
        to_version=row.to_version,
        percent=row.percent,
        status=row.status,
        started_by=row.started_by,
        started_at=row.started_at,
        stage_started_at=row.stage_started_at,
        updated_at=row.updated_at,
        ended_at=row.ended_at,
        reason=row.reason,
        last_check=None if row.last_check is None else dict(row.last_check),
        history=list(row.history),
    )


def check_percent(percent: int) -> int:
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 99:
        raise InvalidInput(
            f"A canary is between 1 and 99 % of conversations, not {percent!r}.", field="canary"
        )
    return percent


def active_for(conn: sa.Connection, skill_id: int, *, lock: bool = False) -> Any:
    """The skill's running or paused rollout row, or None."""
    query = sa.select(rollouts).where(
        rollouts.c.skill_id == skill_id, rollouts.c.status.in_(ACTIVE)
    )
    return conn.execute(query.with_for_update() if lock else query).first()


def start_rollout(
    conn: sa.Connection,
    *,
    project_id: int,
    skill_id: int,
    skill_name: str,
    proposal_id: int | None,
    from_version: int,
    to_version: int,
    percent: int,
    actor: str,
) -> int:
    """Start a rollout in the caller's transaction: the caller holds the skill's row
    lock, checked that no rollout of it is active (:func:`active_for`) and the share
    (:func:`check_percent`)."""
    now = utcnow()
    result = conn.execute(
        rollouts.insert().values(
            project_id=project_id,
            skill_id=skill_id,
            skill_name=skill_name,
            proposal_id=proposal_id,
            from_version=from_version,
            to_version=to_version,
            percent=percent,
            status="running",
            started_by=actor[:200],
            started_at=now,
            stage_started_at=now,
            updated_at=now,
            history=[_event(now, percent, "running", actor, f"started at {percent} %")],
        )
    )
    assert result.inserted_primary_key is not None
    return int(result.inserted_primary_key[0])


def _event(at: datetime, percent: int, status: str, by: str, why: str) -> dict[str, Any]:
    return {"at": at.isoformat(), "percent": percent, "status": status, "by": by, "why": why}


def list_rollouts(
    ws: Workspace, *, project: str | None = None, status: str | None = None
) -> list[Rollout]:
    """Rollouts, newest first; of one project's skills, or of one status."""
    if status is not None and status not in STATUSES:
        raise InvalidInput(
            f"Unknown rollout status {status!r}; use one of: {', '.join(STATUSES)}.",
            field="status",
        )
    query = _select().order_by(rollouts.c.id.desc())
    if project is not None:
        query = query.where(projects.c.name == project)
    if status is not None:
        query = query.where(rollouts.c.status == status)
    with ws.engine.connect() as conn:
        return [_from_row(r) for r in conn.execute(query)]


def get_rollout(ws: Workspace, rollout_id: int) -> Rollout:
    with ws.engine.connect() as conn:
        row = conn.execute(_select().where(rollouts.c.id == rollout_id)).first()
    if row is None:
        raise NotFound(f"No rollout {rollout_id}.", rollout_id=rollout_id)
    return _from_row(row)


# -- the figures -------------------------------------------------------------------------


def _scope(conn: sa.Connection, row: Any) -> sa.ColumnElement[bool]:
    """The interactions this rollout serves: its skill's name in the projects that see
    this skill row (a global skill: every project without a fork of its own)."""
    owner = conn.execute(sa.select(skills.c.project_id).where(skills.c.id == row.skill_id)).scalar()
    if owner is not None:
        return sa.and_(interactions.c.project_id == int(owner))
    forks = sa.select(skills.c.project_id).where(
        skills.c.name == row.skill_name, skills.c.project_id.is_not(None)
    )
    return interactions.c.project_id.not_in(forks)


def _answers_of(conn: sa.Connection, row: Any) -> tuple[sa.ColumnElement[bool], ...]:
    """The rollout's answers: its skill at either version, since it started, where it
    serves."""
    return (
        interactions.c.applied_skill == row.skill_name,
        interactions.c.skill_version.in_((row.from_version, row.to_version)),
        interactions.c.created_at >= row.started_at,
        _scope(conn, row),
    )


def arm_outcomes(conn: sa.Connection, row: Any) -> list[tuple[int, bool, bool, bool]]:
    """Every answer of the rollout so far, oldest first: (version, 👎, Fix It, failed)."""
    down = sa.select(feedback.c.interaction_id).where(feedback.c.kind == "down").scalar_subquery()
    fixit = sa.select(feedback.c.interaction_id).where(feedback.c.kind == "fixit").scalar_subquery()
    query = (
        sa.select(
            interactions.c.skill_version,
            interactions.c.id.in_(down).label("down"),
            interactions.c.id.in_(fixit).label("fixit"),
            sa.not_(interactions.c.success).label("failed"),
        )
        .where(*_answers_of(conn, row))
        .order_by(interactions.c.created_at, interactions.c.id)
    )
    return [
        (r.skill_version, bool(r.down), bool(r.fixit), bool(r.failed)) for r in conn.execute(query)
    ]


def arm_counts(conn: sa.Connection, row: Any) -> dict[str, dict[str, int]]:
    """Each arm's answers so far and how many had a 👎, a Fix It, a failed rule,
    counted by the database."""
    down = sa.select(feedback.c.interaction_id).where(feedback.c.kind == "down")
    fixit = sa.select(feedback.c.interaction_id).where(feedback.c.kind == "fixit")

    def tally(flag: sa.ColumnElement[bool]) -> Any:
        return sa.func.sum(sa.case((flag, 1), else_=0))

    arms: dict[str, dict[str, int]] = {
        arm: dict.fromkeys(("answers", *METRICS), 0) for arm in ("control", "canary")
    }
    for r in conn.execute(
        sa.select(
            interactions.c.skill_version,
            sa.func.count().label("answers"),
            tally(interactions.c.id.in_(down)).label("down"),
            tally(interactions.c.id.in_(fixit)).label("fixit"),
            tally(sa.not_(interactions.c.success)).label("failed"),
        )
        .where(*_answers_of(conn, row))
        .group_by(interactions.c.skill_version)
    ):
        arm = arms["canary" if r.skill_version == row.to_version else "control"]
        for name in ("answers", *METRICS):
            arm[name] += int(getattr(r, name) or 0)
    return arms


def decide(arms: dict[str, dict[str, int]], alpha: float) -> dict[str, Any]:
    """Each metric's mSPRT (α split three ways) and the metrics that regressed: the
    new version's rate credibly higher."""
    new, old = arms["canary"], arms["control"]
    tests = {
        m: msprt(new[m], new["answers"], old[m], old["answers"], alpha / len(METRICS))
        for m in METRICS
    }
    regressions = [m for m, t in tests.items() if t["crossed"] and (t["diff"] or 0) > 0]
    return {"arms": arms, "tests": tests, "regressions": regressions}


def curves(
    outcomes: list[tuple[int, bool, bool, bool]], to_version: int, points: int = 20
) -> dict[str, list[list[float]]]:
    """Each arm's cumulative 👎 rate against its answers, at about ``points`` points."""
    series: dict[str, list[list[float]]] = {"control": [], "canary": []}
    counts = {"control": [0, 0], "canary": [0, 0]}
    step = max(1, len(outcomes) // points)
    for i, (version, down, _, _) in enumerate(outcomes, start=1):
        arm = "canary" if version == to_version else "control"
        counts[arm][0] += 1
        counts[arm][1] += down
        if i % step == 0 or i == len(outcomes):
            for name, (n, bad) in counts.items():
                if n:
                    series[name].append([n, round(bad / n, 4)])
    return series


def rollout_curves(ws: Workspace, rollout_id: int) -> dict[str, list[list[float]]]:
    """Each arm's cumulative 👎 rate against its answers so far (:func:`curves`)."""
    with ws.engine.connect() as conn:
        row = conn.execute(sa.select(rollouts).where(rollouts.c.id == rollout_id)).first()
        if row is None:
            raise NotFound(f"No rollout {rollout_id}.", rollout_id=rollout_id)
        return curves(arm_outcomes(conn, row), row.to_version)


# -- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    rollout_id: int
    action: str  # none, paused, promoted, done, ready (manual promotion waits), aborted
    figures: dict[str, Any]
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rolloutId": self.rollout_id,
            "action": self.action,
            "reason": self.reason,
            **self.figures,
        }


def _describe(figs: dict[str, Any], metric: str) -> str:
    new, old = figs["arms"]["canary"], figs["arms"]["control"]
    test = figs["tests"][metric]
    low, high = test["interval"]
    return (
        f"{_LABELS[metric]} {new[metric] / new['answers']:.1%} on the new version "
        f"({new[metric]} of {new['answers']}) against {old[metric] / old['answers']:.1%} "
        f"on the old ({old[metric]} of {old['answers']}): +{test['diff'] * 100:.1f} points, "
        f"always-valid interval {low * 100:+.1f} to {high * 100:+.1f}"
    )


def _notify(ws: Workspace, rollout: Rollout, action: str, text: str) -> None:
    from amelio.improve.notifiers import Notification, notify_all

    title = f"Rollout #{rollout.id} of {rollout.skill} {action}"
    notify_all(
        ws.settings,
        Notification(
            f"rollout.{action}",
            title,
            f"{title}: {text}",
            {"project": rollout.project, "rollout": rollout.to_dict()},
        ),
    )


def _move(
    ws: Workspace,
    rollout_id: int,
    *,
    actor: str,
    why: str,
    allowed: tuple[str, ...],
    status: str | None = None,
    percent: int | None = None,
    check: dict[str, Any] | None = None,
) -> Rollout:
    """Change a rollout's status or stage under its row lock, refusing a change its
    current status does not allow."""
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(rollouts).where(rollouts.c.id == rollout_id).with_for_update()
        ).first()
        if row is None:
            raise NotFound(f"No rollout {rollout_id}.", rollout_id=rollout_id)
        if row.status not in allowed:
            raise Conflict(
                f"Rollout #{rollout_id} is {row.status}: {why} needs it {' or '.join(allowed)}.",
                rollout_id=rollout_id,
                status=row.status,
            )
        values: dict[str, Any] = {"updated_at": now}
        new_status = status or row.status
        new_percent = row.percent if percent is None else percent
        if status is not None:
            values["status"] = status
            if status in ("aborted", "done"):
                values["ended_at"] = now
            if status in ("paused", "aborted"):
                values["reason"] = why
        if percent is not None:
            values |= {"percent": percent, "stage_started_at": now}
        if check is not None:
            values["last_check"] = check
        if (new_status, new_percent) != (row.status, row.percent):
            values["history"] = [*row.history, _event(now, new_percent, new_status, actor, why)]
        conn.execute(rollouts.update().where(rollouts.c.id == rollout_id).values(**values))
    return get_rollout(ws, rollout_id)


def check_rollout(ws: Workspace, rollout_id: int) -> Check:
    """Test a running rollout once: pause it on a regression, move it on after a
    successful stage (or mark it ready, under manual promotion)."""
    settings = ws.settings
    with ws.engine.connect() as conn:
        row = conn.execute(
            sa.select(rollouts, skills.c.version.label("skill_version"))
            .join(skills, skills.c.id == rollouts.c.skill_id)
            .where(rollouts.c.id == rollout_id)
        ).first()
        if row is None:
            raise NotFound(f"No rollout {rollout_id}.", rollout_id=rollout_id)
        figs = decide(arm_counts(conn, row), settings.rollout_alpha)
        stage_new = int(
            conn.scalar(
                sa.select(sa.func.count())
                .select_from(interactions)
                .where(
                    *_answers_of(conn, row),
                    interactions.c.skill_version == row.to_version,
                    interactions.c.created_at >= row.stage_started_at,
                )
            )
            or 0
        )
    figs["stageAnswers"] = stage_new
    figs["checkedAt"] = utcnow().isoformat()
    if row.status != "running":
        return Check(rollout_id, "none", figs)
    version = row.skill_version
    if version != row.to_version:  # edited or rolled back by hand since
        why = (
            f"{row.skill_name} moved on to v{version} during the rollout: it no longer "
            "decides which version anyone gets"
        )
        _move(ws, rollout_id, actor="amelio rollouts", why=why, allowed=("running",),
              status="aborted", check=figs)  # fmt: skip
        return Check(rollout_id, "aborted", figs, why)
    if figs["regressions"]:
        why = "; ".join(_describe(figs, m) for m in figs["regressions"])
        done = _move(
            ws,
            rollout_id,
            actor="amelio rollouts",
            why=f"regression: {why}",
            allowed=("running",),
            status="paused",
            check=figs,
        )
        _notify(ws, done, "paused", f"everyone is back on v{done.from_version}. {why}.")
        return Check(rollout_id, "paused", figs, why)
    if stage_new < settings.rollout_stage_exposures:
        _move(ws, rollout_id, actor="amelio rollouts", why="checked", allowed=("running",),
              check=figs)  # fmt: skip
        return Check(rollout_id, "none", figs)
    if settings.rollout_promote == "manual":
        figs["ready"] = True
        done = _move(ws, rollout_id, actor="amelio rollouts", why="checked",
                     allowed=("running",), check=figs)  # fmt: skip
        if not (row.last_check or {}).get("ready"):
            _notify(ws, done, "ready", f"its {row.percent} % stage passed: amelio rollouts "
                    f"promote {rollout_id}.")  # fmt: skip
        return Check(rollout_id, "ready", figs)
    moved = _promote(ws, rollout_id, actor="amelio rollouts", check=figs)
    return Check(rollout_id, "done" if moved.status == "done" else "promoted", figs)


def _next_percent(percent: int) -> int:
    return next((s for s in STAGES if s > percent), 100)


def _promote(
    ws: Workspace, rollout_id: int, *, actor: str, check: dict[str, Any] | None = None
) -> Rollout:
    current = get_rollout(ws, rollout_id)
    if current.status == "paused":
        raise Conflict(
            f"Rollout #{rollout_id} is paused after a regression ({current.reason}): abort it, "
            "or approve a new proposal once it is mended.",
            rollout_id=rollout_id,
            status="paused",
        )
    target = _next_percent(current.percent)
    done = target >= 100
    moved = _move(
        ws,
        rollout_id,
        actor=actor,
        why="done: everyone on the new version" if done else f"promoted to {target} %",
        allowed=("running",),
        status="done" if done else None,
        percent=target,
        check=check,
    )
    _notify(ws, moved, "done" if done else "promoted", f"now {target} % on v{moved.to_version}.")
    return moved


def promote_rollout(ws: Workspace, rollout_id: int, *, actor: str) -> Rollout:
    """Move a running rollout to its next stage (its share → 50 → 100, then done)."""
    return _promote(ws, rollout_id, actor=actor)


def pause_rollout(
    ws: Workspace, rollout_id: int, *, actor: str, reason: str | None = None
) -> Rollout:
    """Put everyone back on the old version until it is aborted."""
    done = _move(
        ws,
        rollout_id,
        actor=actor,
        why=f"paused by {actor}" + (f": {reason}" if reason else ""),
        allowed=("running",),
        status="paused",
    )
    _notify(ws, done, "paused", f"everyone is back on v{done.from_version}.")
    return done


def abort_rollout(
    ws: Workspace, rollout_id: int, *, actor: str, reason: str | None = None
) -> Rollout:
    """End the rollout and roll the skill back to the old version (as a new version:
    history only grows)."""
    from amelio.skills.store import rollback_skill

    current = get_rollout(ws, rollout_id)
    if current.status not in ACTIVE:
        raise Conflict(
            f"Rollout #{rollout_id} is {current.status}: only a running or paused one aborts.",
            rollout_id=rollout_id,
            status=current.status,
        )
    with ws.engine.connect() as conn:
        owner = conn.execute(
            sa.select(skills.c.project_id, skills.c.version)
            .join(rollouts, rollouts.c.skill_id == skills.c.id)
            .where(rollouts.c.id == rollout_id)
        ).one()
        scope = (
            None
            if owner.project_id is None
            else conn.scalar(sa.select(projects.c.name).where(projects.c.id == owner.project_id))
        )
    # The skill goes back first: until the rollout ends, a request that reads the
    # rolled-back skill finds its version is no longer the rollout's new one and
    # gets it as it now is (the old content), so no request sees the new version.
    if owner.version == current.to_version:  # nothing changed the skill meanwhile
        rollback_skill(ws.engine, current.skill, current.from_version, project=scope, author=actor)
    done = _move(
        ws,
        rollout_id,
        actor=actor,
        why=f"aborted by {actor}" + (f": {reason}" if reason else ""),
        allowed=ACTIVE,
        status="aborted",
    )
    _notify(ws, done, "aborted", f"{current.skill} is back on v{current.from_version}.")
    return done


def check_rollouts(ws: Workspace, *, project: str | None = None) -> list[Check]:
    """Check every running rollout (of one project's skills with ``project``)."""
    checked: list[Check] = []
    for rollout in list_rollouts(ws, project=project, status="running"):
        try:
            checked.append(check_rollout(ws, rollout.id))
        except Conflict as exc:  # decided meanwhile by a person or another replica
            log.info("rollout #%s not checked: %s", rollout.id, exc.message)
    return checked


def unit_of(user: str | None, conversation: str | None) -> str | None:
    """What a rollout sticks to: the user, else the conversation, else nothing."""
    if user:
        return f"u:{user}"
    return f"c:{conversation}" if conversation else None
