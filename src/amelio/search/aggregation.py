"""The aggregator: what people did with each (normalized query, docId), counted
incrementally into ``search_signals`` (read them with :mod:`amelio.search.counts`).

The aggregator reads two append-only logs past its checkpoint — search
impressions (what was shown, at which rank) and stored feedback events (what
people did) — and adds their counts to ``search_signals``. The checkpoint, the
counts and a version number are written in one transaction, so a crash or a
second run never counts anything twice; two aggregators queue on the state
row's lock. ``rebuild`` empties the signals and replays both logs from the start.

Impressions come only from the server's log (a client cannot claim its result
was shown); an event joins its impression by ``queryId`` and counts at the rank
the impression recorded.

**One actor, one vote.** One session — and one user, when the client names one
— counts at most ``search_session_cap`` of each kind per (query, document):
examinations (a response showing the document), clicks, dwells, bounces, pins,
hides, votes, reformulations and abandonments. Capping clicks alone was not
enough: a session that searched a query forty times and clicked its tenth result
each time raised it to rank 4, because forty examinations without a click sank
every document above it. An event counts under its own session and user *and*
under those of its impression, so changing session ids between the search and
the click gains nothing. An impression whose client named no session counts as
a session of its own. Hashes are salted per UTC day (as feedback events are), so
the cap is per day. What each identity has used is kept in
``search_session_marks``, written in the run's transaction like the counts.

**Enough people.** The cap still let one session's single satisfied click lift a
tenth result to the top when the lexical scores were close. So each signal row
also counts its ``actors``: the distinct people whose clicks, dwells, bounces,
pins, hides or votes it holds. Evidence comes from a new person when none of the
session and user hashes behind it (the event's and its impression's) has acted
on that query and document before; all of them are then marked (kind
``actor``), so a session that later names a known user, or a user's next
session, is the same person. The feedback score ignores those interactions
until ``search_min_actors`` people are behind them
(:class:`~amelio.search.scoring.FeedbackScorer`). Its ``viewers`` count the
distinct people it was shown to, the same way from the cap's ``shown`` marks: an
impression that names no session or user is no one we can count, so forty
searches without a session id are forty examinations but no viewer.

A reformulation is counted when the client says so (``query_reformulated``) or,
derived here, when the same session's next query came within 30 s and is similar
(``difflib`` ratio ≥ 0.6 on the normalized texts) but not equal.

After each run the examination propensities by rank of a position-based click
model (PBM: P(click) = θ_rank · γ_doc) are re-fitted from the counts
(:func:`~amelio.search.clickmodel.fit_pbm`, with the swap experiment's counts
kept in the state row), so the feedback score can divide clicks by the
examinations they had, not by raw impressions. The click model lives in
:mod:`amelio.search.clickmodel`.
"""

from __future__ import annotations

import difflib
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from amelio.db.engine import transaction
from amelio.db.schema import (
    feedback_events,
    search_impressions,
    search_session_marks,
    search_signals,
    search_state,
)
from amelio.search.clickmodel import (
    SwapCounts,
    fit_pbm,
)
from amelio.search.counts import COUNTERS, AggregateReport, SignalRow, signals_for
from amelio.workspace.folder import Workspace

__all__ = [
    "DWELL_POSITIVE_MS",
    "REFORMULATION_SIMILARITY",
    "REFORMULATION_WINDOW_MS",
    "AggregateReport",
    "SignalRow",
    "aggregate",
    "rebuild",
    "reworded",
]

DWELL_POSITIVE_MS = 8000
REFORMULATION_WINDOW_MS = 30_000
REFORMULATION_SIMILARITY = 0.6
#: Reformulations and abandonments are charged to what the person surely saw.
_SEEN_TOP = 3
_CHUNK = 2000
_EVENT_TYPES = (
    "result_clicked",
    "result_dwell_time",
    "result_pinned",
    "result_hidden",
    "vote_up",
    "vote_down",
    "query_reformulated",
    "query_abandoned",
)
#: The kind of mark (``search_session_marks.kind``, 8 characters with ``u:``) of
#: each capped event type; dwell events are ``dwell`` or ``bounce`` by their length.
_KIND_OF = {
    "result_clicked": "click",
    "result_pinned": "pin",
    "result_hidden": "hide",
    "vote_up": "up",
    "vote_down": "down",
    "query_reformulated": "reform",
    "query_abandoned": "quit",
}
_COUNTER_OF = {
    "shown": "impressions",
    "click": "clicks",
    "dwell": "dwell_clicks",
    "bounce": "bounces",
    "pin": "pins",
    "hide": "hides",
    "up": "votes_up",
    "down": "votes_down",
    "reform": "reformulations",
    "quit": "abandonments",
}
#: The kinds of evidence that make their author one of a row's ``actors``.
_INTERACTIONS = frozenset({"click", "dwell", "bounce", "pin", "hide", "up", "down"})
_ACTOR = "actor"
#: Marks held before they are written out, mid-run.
_MARKS_IN_MEMORY = 200_000


def reworded(before: str, after: str) -> bool:
    """Whether ``after`` reads as a reformulation of ``before`` (two normalized
    queries): similar (``difflib`` ratio at least :data:`REFORMULATION_SIMILARITY`)
    but not equal."""
    return (
        before != after
        and difflib.SequenceMatcher(None, before, after).ratio() >= REFORMULATION_SIMILARITY
    )


# -- the aggregator ----------------------------------------------------------------------


#: A mark's key in ``search_session_marks``: (query, docId, session or user hash, kind).
MarkKey = tuple[str, str, str, str]
#: Who is behind a piece of evidence: (hash, namespace) pairs; a user's marks have
#: their kind prefixed with ``u:``, so a user hash never meets an equal session hash.
Who = tuple[tuple[str, str], ...]
_USER = "u:"
#: (query, hash) pairs whose marks are read per statement.
_MARK_PAIRS = 400


class _Count(NamedTuple):
    """One piece of evidence about (query, document), counted unless someone behind
    it already used up ``search_session_cap`` for its kind. ``rank``, ``size`` and
    ``swapped`` place an examination or a click in the ranking that was shown."""

    query_norm: str
    doc_id: str
    kind: str
    who: Who
    rank: int = 0
    size: int = 0
    swapped: int | None = None


class _Shown(NamedTuple):
    """What an event's impression showed, and to whom (the hashes, or None)."""

    query_norm: str
    ranks: dict[str, int]
    served_ms: int
    size: int
    swapped: int | None
    who: tuple[str | None, str | None]


def _charge_top(query_norm: str, ranks: dict[str, int], kind: str, who: Who) -> list[_Count]:
    """Reformulations and abandonments are charged to what the person surely saw."""
    return [
        _Count(query_norm, doc_id, kind, who, rank)
        for doc_id, rank in ranks.items()
        if rank <= _SEEN_TOP
    ]


def _who(session: str | None, user: str | None, *more: tuple[str | None, str | None]) -> Who:
    """The distinct identities behind evidence: sessions, then users, Nones dropped."""
    pairs = ((session, user), *more)
    found = [(s, "") for s, _ in pairs if s is not None]
    found += [(u, _USER) for _, u in pairs if u is not None]
    return tuple(dict.fromkeys(found))


def _marks_of(count: _Count, kind: str) -> list[MarkKey]:
    """The marks of ``kind`` that everyone behind ``count`` holds for its query and
    document (a user's kinds are namespaced apart from a session's)."""
    return [(count.query_norm, count.doc_id, h, ns + kind) for h, ns in count.who]


class _Run:
    """One aggregation pass: deltas in memory, written at the end.

    Evidence is gathered a chunk at a time as :class:`_Count` values, the marks it
    needs are read in a few statements, then it is applied in log order."""

    def __init__(
        self, conn: sa.Connection, cap: int, recent: dict[str, list[Any]], swaps: SwapCounts
    ) -> None:
        self.conn = conn
        self.cap = cap
        self.recent = recent
        self.swaps = swaps
        self.deltas: dict[tuple[str, str], SignalRow] = defaultdict(SignalRow)
        self.marks: dict[MarkKey, int] = {}
        #: The hits of the marks that have a row, as stored: what a write must update.
        self.stored: dict[MarkKey, int] = {}
        self.said_reformulated: set[str] = set()

    def impressions(self, rows: Sequence[Any]) -> int:
        """Each impression is one examination of every document it showed, capped
        per session and user; the swap experiment counts every impression (whether
        one swaps does not depend on who searched, so repeats dilute both groups
        alike)."""
        counts: list[_Count] = []
        for r in rows:
            self.swaps.shown(len(r.results), r.swapped_rank)
            who = _who(r.session_hash, r.user_hash)
            counts += [
                _Count(r.query_norm, doc_id, "shown", who, rank)
                for doc_id, rank, _score in r.results
            ]
        self._apply(counts)
        return len(rows)

    def events(self, rows: Sequence[Any]) -> int:
        """Events join their impression by queryId; one counts under its own session
        and user and under the impression's, so switching session ids between the
        search and the click does not lift the cap."""
        query_ids = {r.query_id for r in rows}
        shown: dict[str, _Shown] = {}
        i = search_impressions.c
        for chunk in _chunks(sorted(query_ids), 500):
            for imp in self.conn.execute(
                sa.select(
                    i.query_id,
                    i.query_norm,
                    i.results,
                    i.created_ms,
                    i.swapped_rank,
                    i.session_hash,
                    i.user_hash,
                ).where(i.query_id.in_(chunk))
            ):
                shown[imp.query_id] = _Shown(
                    imp.query_norm,
                    {doc: rank for doc, rank, _ in imp.results},
                    imp.created_ms,
                    len(imp.results),
                    imp.swapped_rank,
                    (imp.session_hash, imp.user_hash),
                )
        counts: list[_Count] = []
        used = 0
        for r in rows:
            impression = shown.get(r.query_id)
            if impression is None:  # an event about a query this server never served
                continue
            used += 1
            who = _who(r.session_hash, r.user_hash, impression.who)
            counts += self._session_query(
                r.session_hash, r.query_id, impression, _who(r.session_hash, r.user_hash)
            )
            if r.event_type in ("query_reformulated", "query_abandoned"):
                if r.event_type == "query_reformulated":
                    if r.query_id in self.said_reformulated:
                        continue
                    self.said_reformulated.add(r.query_id)
                counts += _charge_top(
                    impression.query_norm, impression.ranks, _KIND_OF[r.event_type], who
                )
                continue
            doc_id = r.doc_id
            if doc_id is None or doc_id not in impression.ranks:
                continue  # only results that were shown can be clicked, pinned, voted on
            if r.event_type == "result_dwell_time":
                dwell = json.loads(r.payload).get("outcome", {}).get("dwellMs", 0)
                kind = "dwell" if dwell >= DWELL_POSITIVE_MS else "bounce"
            else:
                kind = _KIND_OF[r.event_type]
            counts.append(
                _Count(
                    impression.query_norm,
                    doc_id,
                    kind,
                    who,
                    impression.ranks[doc_id],
                    impression.size,
                    impression.swapped,
                )
            )
        self._apply(counts)
        return used

    def _apply(self, counts: Sequence[_Count]) -> None:
        self._load_marks(
            {(c.query_norm, c.doc_id, h, ns + c.kind) for c in counts for h, ns in c.who}
            | {
                (c.query_norm, c.doc_id, h, ns + _ACTOR)
                for c in counts
                if c.kind in _INTERACTIONS
                for h, ns in c.who
            }
        )
        for c in counts:
            first_view = c.kind == "shown" and self._unseen(c)
            if not self._allowed(c):
                continue
            delta = self.deltas[(c.query_norm, c.doc_id)]
            if first_view:
                delta.viewers += 1
            if c.kind in _INTERACTIONS and self._new_actor(c):
                delta.actors += 1
            setattr(delta, _COUNTER_OF[c.kind], getattr(delta, _COUNTER_OF[c.kind]) + 1)
            if c.kind == "shown":
                key = str(c.rank)
                delta.impressions_by_rank[key] = delta.impressions_by_rank.get(key, 0) + 1
            elif c.kind == "click":
                key = str(c.rank)
                delta.clicks_by_rank[key] = delta.clicks_by_rank.get(key, 0) + 1
                self.swaps.clicked(c.rank, c.size, c.swapped)

    def _load_marks(self, keys: set[MarkKey]) -> None:
        """Read the stored marks among ``keys`` not seen yet in this run.

        By (query, hash) pairs rather than by whole keys: a pair's marks (one per
        document shown and kind) come from one index range, and the statements
        carry a tenth of the parameters."""
        todo = keys - self.marks.keys()
        pairs = sorted({(k[0], k[2]) for k in todo})
        m = search_session_marks.c
        for start in range(0, len(pairs), _MARK_PAIRS):
            batch = pairs[start : start + _MARK_PAIRS]
            for row in self.conn.execute(
                sa.select(m.query_norm, m.doc_id, m.session_hash, m.kind, m.hits).where(
                    m.query_norm.in_({q for q, _ in batch}),
                    m.session_hash.in_({h for _, h in batch}),
                )
            ):
                key = (row.query_norm, row.doc_id, row.session_hash, row.kind)
                if key in todo:
                    self.marks[key] = self.stored[key] = row.hits
        for key in todo:
            self.marks.setdefault(key, 0)

    def _allowed(self, count: _Count) -> bool:
        """Whether everyone behind ``count`` is still under the cap for its kind on
        its query and document; if so, it is charged to each of them. Evidence from
        no one (an impression without a session) is a session of its own."""
        keys = _marks_of(count, count.kind)
        if any(self.marks[k] >= self.cap for k in keys):
            return False
        for k in keys:
            self.marks[k] += 1
        return True

    def _unseen(self, count: _Count) -> bool:
        """Whether someone is behind ``count`` and none of them was shown its
        document for its query before (the cap's marks for ``shown``)."""
        keys = _marks_of(count, count.kind)
        return bool(keys) and all(self.marks[k] == 0 for k in keys)

    def _new_actor(self, count: _Count) -> bool:
        """Whether no one behind ``count`` acted on its query and document before;
        everyone behind it is marked as having done so."""
        keys = _marks_of(count, _ACTOR)
        new = all(self.marks[k] == 0 for k in keys)
        for k in keys:
            self.marks[k] = 1
        return new

    def _session_query(self, session: str, query_id: str, shown: _Shown, who: Who) -> list[_Count]:
        """Derive a reformulation when this session moves on to a similar query soon."""
        last = self.recent.get(session)
        counts: list[_Count] = []
        if last is not None and last[1] == query_id:
            return counts
        if last is not None and shown.served_ms > last[0]:
            last_ms, last_id, last_norm, last_ranks = last
            if (
                shown.served_ms - last_ms <= REFORMULATION_WINDOW_MS
                and last_id not in self.said_reformulated
                and reworded(last_norm, shown.query_norm)
            ):
                self.said_reformulated.add(last_id)
                counts = _charge_top(last_norm, last_ranks, "reform", who)
        if last is None or shown.served_ms >= last[0]:
            top = {d: k for d, k in shown.ranks.items() if k <= _SEEN_TOP}
            self.recent[session] = [shown.served_ms, query_id, shown.query_norm, top]
        return counts

    def write(self, now_ms: int) -> int:
        keys = list(self.deltas)
        existing: dict[tuple[str, str], SignalRow] = {}
        by_query: dict[str, list[str]] = defaultdict(list)
        for query_norm, doc_id in keys:
            by_query[query_norm].append(doc_id)
        for query_norm, docs in by_query.items():
            for chunk in _chunks(docs, 500):
                for doc_id, row in signals_for(self.conn, query_norm, chunk).items():
                    existing[(query_norm, doc_id)] = row
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        for key in keys:
            known = existing.get(key)
            fresh = known is None
            row = known or SignalRow()
            row.add(self.deltas[key])
            values = {
                "query_norm": key[0],
                "doc_id": key[1],
                "impressions": row.impressions,
                "impressions_by_rank": row.impressions_by_rank,
                "clicks_by_rank": row.clicks_by_rank,
                "updated_ms": now_ms,
                **{n: getattr(row, n) for n in COUNTERS},
            }
            (inserts if fresh else updates).append(values)
        if inserts:
            self.conn.execute(search_signals.insert(), inserts)
        if updates:
            self.conn.execute(
                search_signals.update()
                .where(
                    search_signals.c.query_norm == sa.bindparam("k_query"),
                    search_signals.c.doc_id == sa.bindparam("k_doc"),
                )
                .values(
                    {c: sa.bindparam(c) for c in updates[0] if c not in ("query_norm", "doc_id")}
                ),
                [
                    {
                        **{k: v for k, v in u.items() if k not in ("query_norm", "doc_id")},
                        "k_query": u["query_norm"],
                        "k_doc": u["doc_id"],
                    }
                    for u in updates
                ],
            )
        self.flush_marks()
        return len(keys)

    def flush_marks(self) -> None:
        """Write the marks this run changed and forget them (a rebuild replays far more
        than fits in memory); in the run's transaction, so a crash writes none."""
        fresh = [
            {"query_norm": k[0], "doc_id": k[1], "session_hash": k[2], "kind": k[3], "hits": n}
            for k, n in self.marks.items()
            if n > 0 and k not in self.stored
        ]
        if fresh:
            self.conn.execute(search_session_marks.insert(), fresh)
        changed = [
            {"k_q": k[0], "k_d": k[1], "k_s": k[2], "k_k": k[3], "hits": n}
            for k, n in self.marks.items()
            if k in self.stored and self.stored[k] != n
        ]
        if changed:
            c = search_session_marks.c
            self.conn.execute(
                search_session_marks.update()
                .where(
                    c.query_norm == sa.bindparam("k_q"),
                    c.doc_id == sa.bindparam("k_d"),
                    c.session_hash == sa.bindparam("k_s"),
                    c.kind == sa.bindparam("k_k"),
                )
                .values(hits=sa.bindparam("hits")),
                changed,
            )
        self.marks.clear()
        self.stored.clear()


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _impression_horizon(workspace: Workspace) -> int:
    """The last impression id it is safe to consume. On PostgreSQL ids are taken
    before commit, so a brief SHARE lock waits for in-flight inserts: after it, no
    smaller id can still appear. SQLite has one writer, so ids are commit-ordered."""
    with transaction(workspace.engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("LOCK TABLE search_impressions IN SHARE MODE"))
        return int(conn.scalar(sa.select(sa.func.max(search_impressions.c.id))) or 0)


def aggregate(workspace: Workspace, *, now_ms: int | None = None) -> AggregateReport:
    """Consume new impressions and events into the signals; a no-op when none arrived."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    with workspace.engine.connect() as peek:
        event_horizon = int(peek.scalar(sa.select(sa.func.max(feedback_events.c.seq))) or 0)
    impression_horizon = _impression_horizon(workspace)  # after the events: see above
    with transaction(workspace.engine) as conn:
        state = conn.execute(
            sa.select(search_state).where(search_state.c.id == 1).with_for_update()
        ).one()
        if state.event_seq >= event_horizon and state.impression_id >= impression_horizon:
            return AggregateReport(0, 0, 0, state.version, state.event_seq, state.impression_id)
        swaps = SwapCounts.load((state.propensities or {}).get("swaps"))
        run = _Run(conn, workspace.settings.search_session_cap, dict(state.recent or {}), swaps)
        impressions = events = 0
        last_id = state.impression_id
        i = search_impressions.c
        while last_id < impression_horizon:
            imps = conn.execute(
                sa.select(
                    i.id, i.query_norm, i.results, i.swapped_rank, i.session_hash, i.user_hash
                )
                .where(i.id > last_id, i.id <= impression_horizon)
                .order_by(i.id)
                .limit(_CHUNK)
            ).all()
            if not imps:
                break
            impressions += run.impressions(imps)
            last_id = imps[-1].id
            if len(run.marks) > _MARKS_IN_MEMORY:
                run.flush_marks()
        last_seq = state.event_seq
        fe = feedback_events.c
        while last_seq < event_horizon:
            rows = conn.execute(
                sa.select(
                    fe.seq,
                    fe.event_type,
                    fe.session_hash,
                    fe.user_hash,
                    fe.query_id,
                    fe.doc_id,
                    fe.payload,
                )
                .where(
                    fe.seq > last_seq,
                    fe.seq <= event_horizon,
                    fe.query_id.is_not(None),
                    fe.event_type.in_(_EVENT_TYPES),
                )
                .order_by(fe.seq)
                .limit(_CHUNK)
            ).all()
            if not rows:
                break
            events += run.events(rows)
            last_seq = rows[-1].seq
            if len(run.marks) > _MARKS_IN_MEMORY:
                run.flush_marks()
        touched = run.write(now_ms)
        version = state.version + 1
        theta, gamma0 = fit_pbm(conn, swaps)
        horizon_ms = max((v[0] for v in run.recent.values()), default=0)
        recent = {
            s: v for s, v in run.recent.items() if v[0] >= horizon_ms - REFORMULATION_WINDOW_MS
        }
        conn.execute(
            search_state.update()
            .where(search_state.c.id == 1)
            .values(
                event_seq=event_horizon,
                impression_id=impression_horizon,
                version=version,
                propensities={"theta": theta, "gamma0": gamma0, "swaps": swaps.dump()},
                recent=recent,
                updated_ms=now_ms,
            )
        )
    return AggregateReport(impressions, events, touched, version, event_horizon, impression_horizon)


def rebuild(workspace: Workspace, *, now_ms: int | None = None) -> AggregateReport:
    """Forget every signal and recompute them from the stored impressions and events."""
    with transaction(workspace.engine) as conn:
        conn.execute(search_signals.delete())
        conn.execute(search_session_marks.delete())
        version = conn.scalar(sa.select(search_state.c.version)) or 0
        conn.execute(
            search_state.update()
            .where(search_state.c.id == 1)
            .values(event_seq=0, impression_id=0, version=version + 1, propensities={}, recent={})
        )
    return aggregate(workspace, now_ms=now_ms)
