"""Judgment lists as stored: the ``judgment_lists`` and ``judgments`` tables, read,
written, graded and deleted.

How a list is *built* (from clicks, an LLM or people) and how two are compared is
:mod:`amelio.search.judgments`, which re-exports what is here: callers import that
one module. This one holds the values and the SQL, so that neither grows past what
a reader can hold.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa

from amelio.db.engine import transaction
from amelio.db.schema import judgment_lists, judgments
from amelio.errors import Conflict, InvalidInput, NotFound
from amelio.workspace.projects import validate_name

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = [
    "GRADES",
    "SOURCES",
    "Judgment",
    "JudgmentList",
    "Pair",
    "check_name",
    "delete_list",
    "get_list",
    "get_pair",
    "grade",
    "graded_pairs",
    "list_lists",
    "next_ungraded",
    "now_ms",
    "pairs_of",
    "refuse_taken",
    "store_list",
]

SOURCES = ("clicks", "llm", "human")
GRADES = (0, 1, 2, 3)


# -- values ------------------------------------------------------------------------------


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


@dataclass(frozen=True)
class JudgmentList:
    """A list and its counts: pairs, graded pairs, queries, and pairs per grade."""

    name: str
    source: str
    created_by: str
    created_ms: int
    meta: dict[str, Any]
    pairs: int
    graded: int
    queries: int
    histogram: dict[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "createdBy": self.created_by,
            "createdAt": _iso(self.created_ms),
            "meta": self.meta,
            "pairs": self.pairs,
            "graded": self.graded,
            "ungraded": self.pairs - self.graded,
            "queries": self.queries,
            "grades": {str(g): self.histogram.get(g, 0) for g in GRADES},
        }


@dataclass(frozen=True)
class Judgment:
    """One (query, document) pair; ``grade`` None until someone (or something) grades it."""

    id: int
    query: str
    doc_id: str
    grade: int | None
    evidence: dict[str, Any]
    graded_by: str | None
    graded_ms: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "docId": self.doc_id,
            "grade": self.grade,
            "evidence": self.evidence,
            "gradedBy": self.graded_by,
            "gradedAt": _iso(self.graded_ms),
        }


class Pair(NamedTuple):
    """A pair as a builder makes it, before it is stored."""

    query: str
    doc_id: str
    grade: int | None
    evidence: dict[str, Any]


# -- reading and writing lists -------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def check_name(name: str) -> str:
    return validate_name(name, what="judgment list")


def _list_row(conn: sa.Connection, name: str) -> Any:
    row = conn.execute(sa.select(judgment_lists).where(judgment_lists.c.name == name)).first()
    if row is None:
        raise NotFound(
            f"No judgment list {name!r}: `amelio judgments list` shows them.", judgments=name
        )
    return row


def _counts(
    conn: sa.Connection, list_ids: Sequence[int]
) -> dict[int, tuple[int, int, dict[int, int]]]:
    """(pairs, queries, {grade: pairs}) per list, counted by the database."""
    j = judgments.c
    out: dict[int, tuple[int, int, dict[int, int]]] = {i: (0, 0, {}) for i in list_ids}
    if not list_ids:
        return out
    totals = conn.execute(
        sa.select(j.list_id, sa.func.count(), sa.func.count(sa.distinct(j.query)))
        .where(j.list_id.in_(list_ids))
        .group_by(j.list_id)
    ).all()
    for list_id, pairs, queries in totals:
        out[list_id] = (int(pairs), int(queries), {})
    for list_id, grade_, n in conn.execute(
        sa.select(j.list_id, j.grade, sa.func.count())
        .where(j.list_id.in_(list_ids), j.grade.is_not(None))
        .group_by(j.list_id, j.grade)
    ).all():
        out[list_id][2][int(grade_)] = int(n)
    return out


def _from_row(row: Any, counts: tuple[int, int, dict[int, int]]) -> JudgmentList:
    pairs, queries, histogram = counts
    return JudgmentList(
        name=row.name,
        source=row.source,
        created_by=row.created_by,
        created_ms=int(row.created_ms),
        meta=dict(row.meta),
        pairs=pairs,
        graded=sum(histogram.values()),
        queries=queries,
        histogram=histogram,
    )


def list_lists(ws: Workspace) -> list[JudgmentList]:
    """Every judgment list, newest first, with its counts."""
    with ws.engine.connect() as conn:
        rows = conn.execute(sa.select(judgment_lists).order_by(judgment_lists.c.id.desc())).all()
        counts = _counts(conn, [r.id for r in rows])
    return [_from_row(r, counts[r.id]) for r in rows]


def get_list(ws: Workspace, name: str) -> JudgmentList:
    with ws.engine.connect() as conn:
        row = _list_row(conn, name)
        return _from_row(row, _counts(conn, [row.id])[row.id])


def _judgment(r: Any) -> Judgment:
    return Judgment(
        int(r.id),
        r.query,
        r.doc_id,
        None if r.grade is None else int(r.grade),
        dict(r.evidence),
        r.graded_by,
        None if r.graded_ms is None else int(r.graded_ms),
    )


def pairs_of(
    ws: Workspace, name: str, *, ungraded: bool = False, limit: int | None = None
) -> list[Judgment]:
    """The list's pairs in the order they were added (the pool's: query, then rank)."""
    with ws.engine.connect() as conn:
        row = _list_row(conn, name)
        query = sa.select(judgments).where(judgments.c.list_id == row.id)
        if ungraded:
            query = query.where(judgments.c.grade.is_(None))
        query = query.order_by(judgments.c.id)
        if limit is not None:
            query = query.limit(limit)
        return [_judgment(r) for r in conn.execute(query)]


def graded_pairs(ws: Workspace, name: str) -> dict[str, dict[str, int]]:
    """The list's grades: query → document → grade, graded pairs only."""
    out: dict[str, dict[str, int]] = {}
    with ws.engine.connect() as conn:
        row = _list_row(conn, name)
        for query, doc_id, grade_ in conn.execute(
            sa.select(judgments.c.query, judgments.c.doc_id, judgments.c.grade).where(
                judgments.c.list_id == row.id, judgments.c.grade.is_not(None)
            )
        ):
            out.setdefault(query, {})[doc_id] = int(grade_)
    return out


def get_pair(ws: Workspace, name: str, pair_id: int) -> Judgment:
    """Pair ``pair_id`` of list ``name`` (the dashboard's form names pairs by id)."""
    with ws.engine.connect() as conn:
        row = _list_row(conn, name)
        found = conn.execute(
            sa.select(judgments).where(judgments.c.list_id == row.id, judgments.c.id == pair_id)
        ).first()
    if found is None:
        raise NotFound(f"Judgment list {name!r} has no pair {pair_id}.", judgments=name)
    return _judgment(found)


def next_ungraded(ws: Workspace, name: str, *, after: int = 0) -> Judgment | None:
    """The first ungraded pair after pair id ``after``, wrapping round to the start,
    so a pair someone skipped comes back once the others are done; None when
    every pair is graded."""
    with ws.engine.connect() as conn:
        row = _list_row(conn, name)
        base = sa.select(judgments).where(
            judgments.c.list_id == row.id, judgments.c.grade.is_(None)
        )
        found = (
            conn.execute(
                base.where(judgments.c.id > after).order_by(judgments.c.id).limit(1)
            ).first()
            or conn.execute(base.order_by(judgments.c.id).limit(1)).first()
        )
    return None if found is None else _judgment(found)


def _check_grade(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in GRADES:
        raise InvalidInput(
            f"A grade is 0 (irrelevant), 1 (related), 2 (relevant) or 3 (perfect), not {value!r}.",
            field="grade",
        )
    return value


def grade(ws: Workspace, name: str, query: str, doc_id: str, value: int, *, by: str) -> Judgment:
    """Grade one pair of list ``name`` (any source: a person may overrule the clicks
    or the LLM; the grade it replaces stays in the evidence as ``before``)."""
    _check_grade(value)
    from amelio.search.service import query_key

    with transaction(ws.engine) as conn:
        row = _list_row(conn, name)
        j = judgments.c
        found = None
        for key in dict.fromkeys((query, query_key(ws.settings, query))):
            found = conn.execute(
                sa.select(judgments).where(j.list_id == row.id, j.query == key, j.doc_id == doc_id)
            ).first()
            if found is not None:
                break
        if found is None:
            raise NotFound(
                f"Judgment list {name!r} has no pair ({query!r}, {doc_id!r}).",
                judgments=name,
                query=query,
                docId=doc_id,
            )
        evidence = dict(found.evidence)
        if found.grade is not None and found.graded_by != by:
            evidence["before"] = {"grade": found.grade, "by": found.graded_by}
        now = now_ms()
        conn.execute(
            judgments.update()
            .where(j.id == found.id)
            .values(grade=value, evidence=evidence, graded_by=by[:200], graded_ms=now)
        )
    return Judgment(found.id, found.query, doc_id, value, evidence, by[:200], now)


def delete_list(ws: Workspace, name: str) -> None:
    """Delete the list and its pairs."""
    with transaction(ws.engine) as conn:
        row = _list_row(conn, name)
        conn.execute(judgments.delete().where(judgments.c.list_id == row.id))
        conn.execute(judgment_lists.delete().where(judgment_lists.c.id == row.id))


def refuse_taken(ws: Workspace, name: str) -> None:
    """Before any costly work (an LLM grading hundreds of pairs): the name is free."""
    with ws.engine.connect() as conn:
        taken = conn.execute(
            sa.select(judgment_lists.c.id).where(judgment_lists.c.name == name)
        ).first()
    if taken is not None:
        raise Conflict(
            f"A judgment list named {name!r} exists: pick another name, or "
            f"`amelio judgments delete {name}` first.",
            judgments=name,
        )


def store_list(
    ws: Workspace, name: str, source: str, by: str, meta: dict[str, Any], pairs: list[Pair]
) -> JudgmentList:
    """The list and its pairs, in one transaction (a pair met twice keeps its first grade)."""
    first: dict[tuple[str, str], Pair] = {}
    for pair in pairs:
        first.setdefault((pair.query, pair.doc_id), pair)
    unique = list(first.values())
    try:
        with transaction(ws.engine) as conn:
            result = conn.execute(
                judgment_lists.insert().values(
                    name=name, source=source, created_by=by[:200], created_ms=now_ms(), meta=meta
                )
            )
            assert result.inserted_primary_key is not None
            list_id = int(result.inserted_primary_key[0])
            graded_by = None if source == "human" else source
            now = now_ms()
            for start in range(0, len(unique), 500):
                conn.execute(
                    judgments.insert(),
                    [
                        {
                            "list_id": list_id,
                            "query": p.query,
                            "doc_id": p.doc_id,
                            "grade": p.grade,
                            "evidence": p.evidence,
                            "graded_by": None if p.grade is None else (graded_by or by[:200]),
                            "graded_ms": None if p.grade is None else now,
                        }
                        for p in unique[start : start + 500]
                    ],
                )
    except sa.exc.IntegrityError:  # a concurrent build of the same name won
        refuse_taken(ws, name)
        raise
    return get_list(ws, name)
