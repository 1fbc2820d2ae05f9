"""The counts behind the feedback score (``search_signals``), reading them, and
what one aggregation pass reports: what :mod:`amelio.search.aggregation` writes
and the searcher reads, kept apart from both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from amelio.db.schema import search_signals

__all__ = ["COUNTERS", "AggregateReport", "SignalRow", "busiest_queries", "signals_for"]

#: The plain counters of a :class:`SignalRow` (besides the per-rank ones).
COUNTERS = (
    "clicks",
    "dwell_clicks",
    "bounces",
    "pins",
    "hides",
    "votes_up",
    "votes_down",
    "reformulations",
    "abandonments",
    "actors",
    "viewers",
)


@dataclass
class SignalRow:
    """The counts for one (normalized query, docId); ranks are 1-based strings in JSON.

    ``actors`` is how many distinct people (told apart by their hashed session and
    user ids) clicked, dwelt, bounced, pinned, hid or voted: the feedback score
    counts those interactions only once there are ``search_min_actors`` of them.
    ``viewers`` is how many distinct people were shown it (impressions that named a
    session or user; one without either is nobody we can count)."""

    impressions: int = 0
    impressions_by_rank: dict[str, int] = field(default_factory=dict)
    clicks_by_rank: dict[str, int] = field(default_factory=dict)
    clicks: int = 0
    dwell_clicks: int = 0
    bounces: int = 0
    pins: int = 0
    hides: int = 0
    votes_up: int = 0
    votes_down: int = 0
    reformulations: int = 0
    abandonments: int = 0
    actors: int = 0
    viewers: int = 0

    def add(self, other: SignalRow) -> None:
        self.impressions += other.impressions
        for mine, theirs in (
            (self.impressions_by_rank, other.impressions_by_rank),
            (self.clicks_by_rank, other.clicks_by_rank),
        ):
            for rank, n in theirs.items():
                mine[rank] = mine.get(rank, 0) + n
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "impressions": self.impressions,
            "impressionsByRank": self.impressions_by_rank,
            "clicksByRank": self.clicks_by_rank,
            **{_camel(n): getattr(self, n) for n in COUNTERS},
        }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


@dataclass(frozen=True)
class AggregateReport:
    impressions: int
    events: int
    rows: int
    version: int
    event_seq: int
    impression_id: int

    def to_dict(self) -> dict[str, int]:
        return {
            "impressions": self.impressions,
            "events": self.events,
            "rows": self.rows,
            "version": self.version,
            "eventSeq": self.event_seq,
            "impressionId": self.impression_id,
        }


def signals_for(
    bind: sa.Engine | sa.Connection, query_norm: str, doc_ids: Sequence[str] | None = None
) -> dict[str, SignalRow]:
    """The signals of ``query_norm`` (only for ``doc_ids`` when given)."""
    stmt = sa.select(search_signals).where(search_signals.c.query_norm == query_norm)
    if doc_ids is not None:
        stmt = stmt.where(search_signals.c.doc_id.in_(list(doc_ids)))
    if isinstance(bind, sa.Connection):
        rows = bind.execute(stmt).all()
    else:
        with bind.connect() as conn:
            rows = conn.execute(stmt).all()
    return {r.doc_id: _row(r) for r in rows}


def busiest_queries(bind: sa.Engine, limit: int = 10) -> list[tuple[str, int, int]]:
    """The normalized queries with the most clicks: (query, clicks, documents)."""
    c = search_signals.c
    clicks = sa.func.sum(c.clicks).label("clicks")
    with bind.connect() as conn:
        rows = conn.execute(
            sa.select(c.query_norm, clicks, sa.func.count().label("docs"))
            .group_by(c.query_norm)
            .order_by(clicks.desc(), c.query_norm)
            .limit(limit)
        ).all()
    return [(r.query_norm, int(r.clicks or 0), int(r.docs)) for r in rows]


def _row(r: sa.Row[Any]) -> SignalRow:
    return SignalRow(
        r.impressions,
        dict(r.impressions_by_rank),
        dict(r.clicks_by_rank),
        *(getattr(r, n) for n in COUNTERS),
    )
