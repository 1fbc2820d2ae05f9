"""Interleaving experiments: two rankers compared on a share of live sessions.

``amelio experiments create NAME --a PROFILE --b PROFILE`` stores an experiment
for a project; from then on :class:`~amelio.search.service.Searcher` serves the
project's sessions that fall in its ``share`` an interleaved list of A's and B's
rankings (:mod:`amelio.search.interleave`), and records in the impression which
ranker contributed each result. Assignment is sticky: a session id hashed with
the experiment's name decides, so a person keeps their arm across searches and
days; a search without a session id is a session of its own. At most one
experiment runs per project, so no session is in two.

Results are read from the log, never kept: the experiment's impressions, the
clicks and dwells their feedback events report (each result's utility, as the
feedback score counts it: a satisfied click 1, a bounce 0, a click of unknown
dwell ½), the credit each side got per response, summed per session. A session
with more credit for A is a win for A; :func:`~amelio.search.interleave.preference`
gives the margin, its interval and the verdict.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from amelio.db.engine import transaction
from amelio.db.schema import feedback_events, search_experiments, search_impressions
from amelio.errors import Conflict, InvalidInput, NotFound
from amelio.search.aggregation import DWELL_POSITIVE_MS
from amelio.search.clickmodel import utility
from amelio.search.interleave import METHODS, Interleaving, Preference, credit, preference
from amelio.search.profiles import ProfileSpec, parse_profile
from amelio.workspace.projects import require_project, validate_name

if TYPE_CHECKING:
    from amelio.search.engines.registry import SearchEngine
    from amelio.workspace.folder import Workspace

__all__ = [
    "STATUSES",
    "Experiment",
    "ExperimentResults",
    "create_experiment",
    "experiment_results",
    "get_experiment",
    "list_experiments",
    "running_experiment",
    "stop_experiment",
]

STATUSES = ("running", "stopped")
_SCALE = float(2**64)


@dataclass(frozen=True)
class Experiment:
    """One stored experiment; ``a`` and ``b`` as they were given (a setting left out
    follows the workspace's)."""

    id: int
    name: str
    project: str
    a: ProfileSpec
    b: ProfileSpec
    share: float
    method: str
    status: str
    created_by: str
    created_ms: int
    stopped_ms: int | None

    def assigned(self, unit: str) -> bool:
        """Whether the session (or, without one, the search) ``unit`` is in the
        experiment: its hash with the experiment's name, read as a number in [0, 1),
        falls under ``share``. Stable across processes and restarts."""
        digest = hashlib.sha256(f"{self.name}\x00{unit}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / _SCALE < self.share

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "a": self.a.label(),
            "b": self.b.label(),
            "share": self.share,
            "method": self.method,
            "status": self.status,
            "createdBy": self.created_by,
            "createdMs": self.created_ms,
            "stoppedMs": self.stopped_ms,
        }


def _experiment(row: Any) -> Experiment:
    return Experiment(
        int(row.id),
        row.name,
        row.project,
        ProfileSpec.from_dict(row.a),
        ProfileSpec.from_dict(row.b),
        float(row.share),
        row.method,
        row.status,
        row.created_by,
        int(row.created_ms),
        None if row.stopped_ms is None else int(row.stopped_ms),
    )


def create_experiment(
    workspace: Workspace,
    name: str,
    a: str | ProfileSpec,
    b: str | ProfileSpec,
    *,
    project: str = "default",
    share: float = 0.2,
    method: str = "team-draft",
    by: str = "amelio",
    engine: SearchEngine | None = None,
) -> Experiment:
    """Store and start an experiment. Refused, with nothing written: a bad name or
    profile, two specs that rank alike, a share outside (0, 1], an unknown method,
    a project that does not exist or whose search has no documents, a name taken,
    or another experiment running on the project."""
    validate_name(name, what="experiment")
    require_project(workspace.engine, project)
    spec_a = a if isinstance(a, ProfileSpec) else parse_profile(a, field="a")
    spec_b = b if isinstance(b, ProfileSpec) else parse_profile(b, field="b")
    if spec_a.resolved(workspace.settings) == spec_b.resolved(workspace.settings):
        raise InvalidInput(
            f"A ({spec_a.label()}) and B ({spec_b.label()}) rank alike with this "
            "workspace's settings: there is nothing to compare. Change the profile "
            "or a setting of one (hybrid_with_feedback:beta=0.5).",
            field="b",
        )
    if not (isinstance(share, int | float) and 0.0 < share <= 1.0):
        raise InvalidInput(
            f"share is the part of sessions in the experiment, above 0 and at most 1, not {share}.",
            field="share",
        )
    if method not in METHODS:
        raise InvalidInput(
            f"Unknown interleaving method {method!r}; use {' or '.join(METHODS)}.",
            field="method",
        )
    if engine is None:
        from amelio.search.engines.registry import open_engine

        engine = open_engine(workspace.settings)
    if engine.count() == 0:
        raise InvalidInput(
            f"Project {project!r} has no search to compare: the corpus "
            f"({engine.name}) holds no documents. Import some with "
            "`amelio corpus import FILE` first.",
            field="project",
        )
    with transaction(workspace.engine) as conn:
        if conn.execute(
            sa.select(search_experiments.c.id).where(search_experiments.c.name == name)
        ).first():
            raise Conflict(f"An experiment named {name!r} exists already; pick another name.")
        running = conn.execute(
            sa.select(search_experiments.c.name).where(
                search_experiments.c.project == project,
                search_experiments.c.status == "running",
            )
        ).first()
        if running is not None:
            raise Conflict(
                f"Experiment {running.name!r} is running on project {project!r}; stop it "
                f"first (amelio experiments stop {running.name}): a session is in one "
                "experiment at a time."
            )
        conn.execute(
            search_experiments.insert().values(
                name=name,
                project=project,
                a=spec_a.to_dict(),
                b=spec_b.to_dict(),
                share=float(share),
                method=method,
                status="running",
                created_by=by[:200],
                created_ms=int(time.time() * 1000),
            )
        )
    return get_experiment(workspace, name)


def get_experiment(workspace: Workspace, name: str) -> Experiment:
    with workspace.engine.connect() as conn:
        row = conn.execute(
            sa.select(search_experiments).where(search_experiments.c.name == name)
        ).first()
    if row is None:
        raise NotFound(f"No experiment named {name!r}: `amelio experiments list` shows them.")
    return _experiment(row)


def list_experiments(
    workspace: Workspace, *, project: str | None = None, status: str | None = None
) -> list[Experiment]:
    """Experiments, newest first."""
    query = sa.select(search_experiments).order_by(search_experiments.c.id.desc())
    if project is not None:
        query = query.where(search_experiments.c.project == project)
    if status is not None:
        if status not in STATUSES:
            raise InvalidInput(f"status is running or stopped, not {status!r}.", field="status")
        query = query.where(search_experiments.c.status == status)
    with workspace.engine.connect() as conn:
        return [_experiment(r) for r in conn.execute(query)]


def running_experiment(conn: sa.Connection, project: str) -> Experiment | None:
    """The experiment running on ``project``, if any (what a search asks)."""
    row = conn.execute(
        sa.select(search_experiments).where(
            search_experiments.c.project == project, search_experiments.c.status == "running"
        )
    ).first()
    return None if row is None else _experiment(row)


def stop_experiment(workspace: Workspace, name: str) -> Experiment:
    """Stop serving it; its impressions and results stay. Stopping twice is a
    :class:`Conflict` (the first stop's time is kept)."""
    with transaction(workspace.engine) as conn:
        stopped = conn.execute(
            search_experiments.update()
            .where(search_experiments.c.name == name, search_experiments.c.status == "running")
            .values(status="stopped", stopped_ms=int(time.time() * 1000))
        ).rowcount
    if not stopped:
        found = get_experiment(workspace, name)  # NotFound when it does not exist
        raise Conflict(f"Experiment {found.name!r} is stopped already.")
    return get_experiment(workspace, name)


@dataclass(frozen=True)
class ExperimentResults:
    """What an experiment's log says: responses and sessions served, how many were
    competitive (the two rankers' lists differed), each side's total credit, and
    the preference over sessions with a credited click."""

    experiment: Experiment
    impressions: int
    competitive_impressions: int
    sessions: int
    competitive_sessions: int
    credit_a: float
    credit_b: float
    preference: Preference

    @property
    def competitive_share(self) -> float:
        return self.competitive_sessions / self.sessions if self.sessions else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.experiment.to_dict(),
            "impressions": self.impressions,
            "competitiveImpressions": self.competitive_impressions,
            "sessions": self.sessions,
            "competitiveSessions": self.competitive_sessions,
            "competitiveShare": round(self.competitive_share, 4),
            "credit": {"a": round(self.credit_a, 3), "b": round(self.credit_b, 3)},
            "preference": self.preference.to_dict(),
        }


def _utilities(conn: sa.Connection, name: str) -> dict[str, dict[str, float]]:
    """Per impression of the experiment, each clicked document's
    :func:`~amelio.search.clickmodel.utility`, its longest dwell deciding between a
    satisfied click and a bounce (:data:`DWELL_POSITIVE_MS`). Repeated clicks on
    one result of one response count once."""
    fe, si = feedback_events, search_impressions
    rows = conn.execute(
        sa.select(fe.c.query_id, fe.c.doc_id, fe.c.event_type, fe.c.payload)
        .join(si, si.c.query_id == fe.c.query_id)
        .where(
            si.c.experiment == name,
            fe.c.event_type.in_(("result_clicked", "result_dwell_time")),
            fe.c.doc_id.is_not(None),
        )
    )
    clicked: dict[str, set[str]] = defaultdict(set)
    dwell: dict[str, dict[str, int]] = defaultdict(dict)
    for r in rows:
        if r.event_type == "result_clicked":
            clicked[r.query_id].add(r.doc_id)
        else:
            ms = int(json.loads(r.payload).get("outcome", {}).get("dwellMs", 0) or 0)
            seen = dwell[r.query_id]
            seen[r.doc_id] = max(seen.get(r.doc_id, 0), ms)
    out: dict[str, dict[str, float]] = {}
    for query_id in clicked.keys() | dwell.keys():
        values: dict[str, float] = {}
        for doc_id in clicked.get(query_id, set()) | dwell.get(query_id, {}).keys():
            longest = dwell.get(query_id, {}).get(doc_id)
            satisfied = longest is not None and longest >= DWELL_POSITIVE_MS
            values[doc_id] = utility(1, int(satisfied), int(longest is not None and not satisfied))
        out[query_id] = values
    return out


def experiment_results(workspace: Workspace, name: str) -> ExperimentResults:
    """Read the experiment's impressions and their clicks, credit them, and decide."""
    experiment = get_experiment(workspace, name)
    si = search_impressions
    per_session: dict[str, list[float]] = {}
    competitive_sessions: set[str] = set()
    impressions = competitive = 0
    total_a = total_b = 0.0
    with workspace.engine.connect() as conn:
        utilities = _utilities(conn, name)
        rows = conn.execute(
            sa.select(si.c.query_id, si.c.session_hash, si.c.results, si.c.interleaving)
            .where(si.c.experiment == name)
            .order_by(si.c.id)
        )
        for r in rows:
            impressions += 1
            unit = r.session_hash or r.query_id
            totals = per_session.setdefault(unit, [0.0, 0.0])  # credited or not
            docs = [doc for doc, _, _ in sorted(r.results, key=lambda x: x[1])]
            shown = Interleaving.from_dict(r.interleaving, docs)
            if not shown.competitive:
                continue
            competitive += 1
            competitive_sessions.add(unit)
            values = utilities.get(r.query_id, {})
            clicks = {i: values[d] for i, d in enumerate(docs, start=1) if d in values}
            got_a, got_b = credit(shown, clicks)
            totals[0] += got_a
            totals[1] += got_b
            total_a += got_a
            total_b += got_b
    outcomes = [
        (a > b) - (a < b)
        for unit, (a, b) in per_session.items()
        if unit in competitive_sessions and (a > 0 or b > 0)
    ]
    return ExperimentResults(
        experiment,
        impressions,
        competitive,
        len(per_session),
        len(competitive_sessions),
        total_a,
        total_b,
        preference(outcomes),
    )
