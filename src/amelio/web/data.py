"""What the dashboard pages show, read from the same tables the API uses.

Quality metrics (per skill, per day, per rule) are :mod:`amelio.assistant.quality`'s, the same
functions behind ``/v1/quality``; this module holds the views only the dashboard has.
"""

from __future__ import annotations

import difflib
import hashlib
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from amelio import knowledge
from amelio.assistant.learnings import HEADERS
from amelio.assistant.prompt import MESSAGE_HEADER, assemble, skill_block
from amelio.contributions import CPU_SECONDS_PER_HOUR, TRUST_FLOOR, contribution_stats
from amelio.db.schema import (
    contribution_clients,
    contribution_leases,
    contribution_results,
    eval_results,
    feedback,
    interactions,
    learnings,
    projects,
)
from amelio.errors import SkillNotFound
from amelio.improve.triggers import MIN_EXAMPLES
from amelio.routing.examples import list_examples
from amelio.routing.router import RouteHit, hint_block
from amelio.search import Searcher
from amelio.search.clickmodel import load_propensities
from amelio.search.counts import busiest_queries, signals_for
from amelio.search.service import query_key
from amelio.skills.store import list_skills, list_versions
from amelio.workspace.folder import Workspace

__all__ = [
    "contributions_view",
    "knowledge_answer",
    "knowledge_view",
    "recent_interactions",
    "routing_view",
    "search_view",
    "version_history",
]


def version_history(ws: Workspace, skill: str, project: str) -> list[dict[str, Any]]:
    """Versions newest first, each with the diff from the one before it."""
    versions = list_versions(ws.engine, skill, project)
    out = []
    previous = ""
    for v in versions:
        diff = "".join(
            difflib.unified_diff(
                previous.splitlines(keepends=True),
                v.spec.content.splitlines(keepends=True),
                fromfile=f"v{v.version - 1}" if v.version > 1 else "(none)",
                tofile=f"v{v.version}",
            )
        )
        out.append(
            {
                "version": v.version,
                "author": v.author,
                "reason": v.reason,
                "at": v.created_at,
                "diff": diff,
            }
        )
        previous = v.spec.content
    return list(reversed(out))


def routing_view(ws: Workspace, skill: str, project: str) -> dict[str, Any]:
    """The Routing tab: the examples the learned router learns ``skill`` from (SKILL.md's
    first, then kept and added ones, newest first), and how many are removed."""
    listed = list_examples(ws, skill, project=project, removed=True)
    active = [e for e in listed if e.removed_at is None]
    return {
        "examples": active,
        "removed_count": len(listed) - len(active),
        "min_examples": MIN_EXAMPLES,
        "has_skill_md": any(e.source == "skill" for e in active),
    }


def _prompt(ws: Workspace, row: Any, rules: dict[int, str], project: str) -> tuple[str, bool]:
    """The interaction's prompt rebuilt from what was stored, and whether it hashes to
    the recorded promptHash (it does unless settings or descriptions changed since)."""
    described = {s.name: s.spec.description for s in list_skills(ws.engine, project)}
    hits = [RouteHit(h["name"], described.get(h["name"], ""), h["score"], ()) for h in row.hinted]
    lines = [f"- {rules[i]}" for i in row.learning_ids if i in rules]
    block = (
        "\n".join([HEADERS.get(ws.settings.learnings_header, ws.settings.learnings_header), *lines])
        if lines
        else ""
    )
    body = ""
    if row.applied_skill and row.skill_version and ws.settings.prompt_skill_body == "top":
        try:
            versions = list_versions(ws.engine, row.applied_skill, project)
            match = [v for v in versions if v.version == row.skill_version]
            if match:
                body = skill_block(row.applied_skill, match[0].spec.content)
        except SkillNotFound:
            body = ""
    system = assemble(ws.settings.system_prompt, hint_block(hits), block, body)
    text = f"{system}\n\n{MESSAGE_HEADER}\n{row.message}"
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest() == row.prompt_hash


def recent_interactions(ws: Workspace, project: str, limit: int = 30) -> list[dict[str, Any]]:
    """The newest interactions with their prompt, evals and feedback."""
    i, p = interactions, projects
    with ws.engine.connect() as conn:
        rows = conn.execute(
            sa.select(i)
            .join(p, p.c.id == i.c.project_id)
            .where(p.c.name == project)
            .order_by(i.c.id.desc())
            .limit(limit)
        ).all()
        ids = [r.id for r in rows]
        checks = conn.execute(
            sa.select(eval_results)
            .where(eval_results.c.interaction_id.in_(ids))
            .order_by(eval_results.c.id)
        ).all()
        votes = conn.execute(sa.select(feedback).where(feedback.c.interaction_id.in_(ids))).all()
        used = {lid for r in rows for lid in r.learning_ids}
        rules = (
            dict(
                conn.execute(
                    sa.select(learnings.c.id, learnings.c.rule).where(learnings.c.id.in_(used))
                ).all()
            )
            if used
            else {}
        )
    by_interaction: dict[int, list[Any]] = defaultdict(list)
    for c in checks:
        by_interaction[c.interaction_id].append(c)
    fb: dict[int, list[Any]] = defaultdict(list)
    for v in votes:
        fb[v.interaction_id].append(v)
    out = []
    for r in rows:
        prompt, verified = _prompt(ws, r, rules, project)
        failed = [c for c in by_interaction[r.id] if not c.passed]
        out.append(
            {
                "id": r.id,
                "at": r.created_at,
                "message": r.message,
                "answer": r.answer,
                "skill": r.applied_skill,
                "version": r.skill_version,
                "success": r.success,
                "model": r.model,
                "prompt": prompt,
                "promptVerified": verified,
                "evals": by_interaction[r.id],
                "footnotes": [
                    ("⚠️ " if c.severity == "warning" else "ℹ️ ") + c.rule_name for c in failed
                ],
                "feedback": [{"kind": v.kind, "comment": v.comment} for v in fb[r.id]],
            }
        )
    return out


def search_view(
    searcher: Searcher, query: str, profile: str, alpha: float | None
) -> dict[str, Any]:
    """The search page: a ranking with each document's signals (through
    :meth:`Searcher.rank`, so looking logs no impression), and what was learned
    overall. Bad input raises the searcher's own errors, which name the field."""
    ws = searcher.workspace
    propensities = load_propensities(ws.engine)
    view: dict[str, Any] = {
        "documents": searcher.engine.count(),
        "version": propensities.version,
        "theta": propensities.theta,
        "gamma0": propensities.gamma0,
        "busiest": busiest_queries(ws.engine),
        "results": [],
        "query_norm": "",
    }
    if not query:
        return view
    ranking, parts = searcher.explained(query, profile=profile, alpha=alpha)  # checks it
    view["query_norm"] = query_key(ws.settings, query)  # what signals are kept under
    titles = searcher.engine.documents([d.doc_id for d in ranking])
    signals = signals_for(ws.engine, view["query_norm"], [d.doc_id for d in ranking])
    view["results"] = [
        {
            "rank": rank,
            "doc_id": d.doc_id,
            "title": titles[d.doc_id].title if d.doc_id in titles else "",
            "score": d.score,
            "first_phase": d.first_phase,
            "feedback": d.feedback,
            "signals": signals.get(d.doc_id),
            "explain": parts.get(d.doc_id),
        }
        for rank, d in enumerate(ranking, start=1)
    ]
    return view


def why(part: Mapping[str, Any] | None, t: Mapping[str, str]) -> str:
    """One result's explanation (:mod:`amelio.search.explain`) in a sentence of the
    page's language: "moved up 3 places: 41 debiased clicks of 120 examinations
    (34 %, 95 % 26–43 %, average 20 %); BM25 rank 4"."""
    if not part:
        return ""
    moved = part.get("moved") or 0
    if moved:
        way = "up" if moved > 0 else "down"
        head = (
            t[f"why_moved_{way}_one"]
            if abs(moved) == 1
            else t[f"why_moved_{way}"].format(n=abs(moved))
        )
    else:
        head = t["why_kept"] if part.get("feedback") else t["why_engine"]
    bits: list[str] = []
    fb = part.get("feedback")
    if fb:
        if fb["examinations"] > 0 or fb["satisfiedClicks"] > 0:
            low, high = fb["interval"]
            bits.append(
                t["why_clicks"].format(
                    clicks=f"{fb['satisfiedClicks']:g}",
                    examinations=f"{fb['examinations']:g}",
                    rate=f"{fb['rate']:.0%}",
                    low=f"{low:.0%}",
                    high=f"{high:.0%}",
                    average=f"{fb['averageRate']:.0%}",
                )
            )
        else:
            bits.append(t["why_no_evidence"])
        if fb["held"]:
            bits.append(t["why_held"].format(actors=fb["actors"]))
    if part.get("pins") or part.get("hides"):
        bits.append(t["why_pins"].format(pins=part["pins"], hides=part["hides"]))
    exploration = part.get("exploration") or {}
    if exploration.get("swapped"):
        bits.append(t["why_swapped"])
    elif exploration.get("thompson"):
        bits.append(t["why_explored"])
    rank = (part.get("bm25") or {}).get("rank")
    if rank:
        bits.append(t["why_bm25"].format(rank=rank))
    return head + (": " + "; ".join(bits) if bits else "")


#: Links a citation or source may carry (``Source.parse`` admits no others).
_LINKABLE = ("http://", "https://", "file://")
EXCERPT_CHARS = 320


def _link(url: str | None) -> str | None:
    return url if url and url.startswith(_LINKABLE) else None


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """A passage shortened for a citation, on one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def knowledge_view(ws: Workspace, notebook: str, project: str) -> dict[str, Any]:
    """A notebook's page: its health, its sources and its dead letters, from the
    functions behind ``GET /v1/knowledge/notebooks``, ``…/{name}/sources`` and
    ``GET /v1/knowledge/failures`` (:class:`NotFound` for an unknown notebook)."""
    found = knowledge.get_notebook(ws, notebook, project=project)
    sources = [
        s
        | {
            "href": _link(s["url"]),
            "synced": datetime.fromisoformat(s["indexedAt"]),
            "updated": datetime.fromisoformat(s["updatedAt"]),
        }
        for s in knowledge.list_sources(ws, notebook, project=project)
    ]
    return {
        "notebook": found,
        "sources": sources,
        "failures": knowledge.failures(ws, notebook=notebook, project=project),
    }


def knowledge_answer(ws: Workspace, notebook: str, project: str, question: str) -> dict[str, Any]:
    """A question asked of a notebook through :func:`amelio.knowledge.answer_question`
    (what ``POST /v1/knowledge/query`` calls): the answer, its mode, and each
    citation ``[n]`` with an excerpt of its passage."""
    answer = knowledge.answer_question(ws, notebook, question, project=project)
    return {
        "answer": answer,
        "citations": [
            {
                "n": n,
                "title": p.title,
                "source_id": p.source_id,
                "kind": p.kind,
                "position": p.position,
                "href": _link(p.url),
                "url": p.url,
                "excerpt": excerpt(p.text),
                "cited": n in answer.cited,
            }
            for n, p in enumerate(answer.citations, start=1)
        ],
    }


def contributions_view(ws: Workspace) -> dict[str, Any]:
    """The Contributions page: ``GET /v1/contributions/stats`` (its ``byTier`` gives each
    tier's clients), plus what the stats do not split by tier: the clients' average
    trust and how many are under the floor, the leases they were ever given, the
    CPU-seconds they gave and their results' outcomes (counted from the leases and
    results). The totals' "Leased" is the open tasks a live lease holds now; the
    tiers' column is every lease given, under a label of its own."""
    c, le, r = contribution_clients.c, contribution_leases.c, contribution_results.c
    leases = sa.select(le.client_id, sa.func.count().label("n")).group_by(le.client_id).subquery()
    results = (
        sa.select(
            r.client_id,
            sa.func.sum(r.compute_ms).label("cpu_ms"),
            sa.func.sum(sa.case((r.status == "accepted", 1), else_=0)).label("accepted"),
            sa.func.sum(sa.case((r.status == "rejected", 1), else_=0)).label("rejected"),
        )
        .group_by(r.client_id)
        .subquery()
    )
    query = (
        sa.select(
            c.tier,
            sa.func.avg(c.trust),
            sa.func.sum(sa.case((c.trust < TRUST_FLOOR, 1), else_=0)),
            sa.func.sum(results.c.cpu_ms),
            sa.func.sum(leases.c.n),
            sa.func.sum(results.c.accepted),
            sa.func.sum(results.c.rejected),
        )
        .outerjoin(leases, leases.c.client_id == c.id)
        .outerjoin(results, results.c.client_id == c.id)
        .group_by(c.tier)
    )
    stats = contribution_stats(ws)
    with ws.engine.connect() as conn:
        rows = {row[0]: row for row in conn.execute(query)}
    tiers = [
        {
            "tier": tier,
            "clients": clients,
            "trust": float(row[1] or 0.0),
            "low_trust": int(row[2] or 0),
            "cpu_seconds": float(row[3] or 0.0) / 1000,
            "leased": int(row[4] or 0),
            "accepted": int(row[5] or 0),
            "rejected": int(row[6] or 0),
        }
        for tier, clients in stats["clients"]["byTier"].items()
        if (row := rows.get(tier)) is not None
    ]
    order = {tier: i for i, tier in enumerate(CPU_SECONDS_PER_HOUR)}
    tiers.sort(key=lambda t: order.get(t["tier"], len(order)))
    return {
        "stats": stats,
        "tiers": tiers,
        "enabled": ws.settings.contributions,
        "budgets": CPU_SECONDS_PER_HOUR,
    }
