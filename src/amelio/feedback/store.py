"""The feedback event store: append-only, HMAC-chained, verifiable, purgeable.

Every stored event gets the next ``seq`` and a signature
``HMAC(chain_key, previous_signature ‖ seq ‖ eventId ‖ received ‖ payload)``, so
changing, inserting or deleting any event breaks every signature from there on,
and :func:`verify` names the first event that is wrong or missing. The
chain's head (last seq and signature) is one MAC-signed row, locked for the
length of each write: on PostgreSQL that serializes writers, which is what keeps
one chain, and it also makes "is this eventId already stored?" race-free, so a
duplicate is answered ``duplicate`` rather than failing the batch.

Retention removes old events without breaking the chain: a purge moves the
chain's *anchor* (the last removed event's seq and signature, kept in the
signed head) past the removed prefix, and leaves a MAC-signed *tombstone* for
each event removed from the middle (one that arrived late), so verification
steps over legitimate gaps and still reports any other.

A write commits before the collector answers: on SQLite with
``synchronous=FULL`` for that transaction (the rest of Amelio runs at NORMAL),
on PostgreSQL with its default synchronous commit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import feedback_chain, feedback_events, feedback_tombstones
from amelio.privacy.signing import Signer

__all__ = [
    "ChainHead",
    "PreparedEvent",
    "PurgeReport",
    "VerifyReport",
    "append",
    "chain_key",
    "purge",
    "stats",
    "verify",
]

GENESIS = "0" * 64
_VERIFY_PAGE = 5000


def chain_key(secret: bytes) -> bytes:
    """The chain's own key, derived so it signs nothing but chain links."""
    return Signer(secret).digest(b"", "feedback-chain")


def _now_ms() -> int:
    return int(time.time() * 1000)


class PreparedEvent(NamedTuple):
    """An event ready to store: anonymized, scrubbed, serialized (a tuple: one is
    built per event on the hot path; its fields are the first columns of a row)."""

    event_id: str
    event_type: str
    event_time_ms: int
    session_hash: str
    user_hash: str | None
    query_id: str | None
    request_id: str | None
    doc_id: str | None
    rank_shown: int | None
    payload: str


def _link(
    key: bytes, previous: str, seq: int, event_id: str, received_ms: int, payload: str
) -> str:
    message = f"{previous}\x1e{seq}\x1e{event_id}\x1e{received_ms}\x1e{payload}"
    return hmac.digest(key, message.encode("utf-8"), "sha256").hex()


@dataclass(frozen=True)
class ChainHead:
    last_seq: int
    last_signature: str
    anchor_seq: int
    anchor_signature: str
    mac: str

    def expected_mac(self, key: bytes) -> str:
        message = (
            f"head\x1e{self.last_seq}\x1e{self.last_signature}\x1e{self.anchor_seq}"
            f"\x1e{self.anchor_signature}"
        )
        return hmac.new(key, message.encode("ascii"), hashlib.sha256).hexdigest()

    def signed(self, key: bytes, **changes: Any) -> ChainHead:
        unsigned = replace(self, **changes)
        return replace(unsigned, mac=unsigned.expected_mac(key))

    def genuine(self, key: bytes) -> bool:
        if not self.mac:  # as the migration left it: nothing was ever written
            return self.last_seq == 0 and self.anchor_seq == 0
        return hmac.compare_digest(self.mac, self.expected_mac(key))


def _tombstone_mac(key: bytes, seq: int, signature: str) -> str:
    return hmac.new(
        key, f"tomb\x1e{seq}\x1e{signature}".encode("ascii"), hashlib.sha256
    ).hexdigest()


# Driver-level SQL where it is on the ingestion path (constants only; values travel as
# parameters): SQLAlchemy's statement handling cost more than these queries.
_HEAD = (
    "SELECT last_seq, last_signature, anchor_seq, anchor_signature, mac "
    "FROM feedback_chain WHERE id = 1"
)
_STORED = "SELECT event_id FROM feedback_events WHERE event_id IN "
_PG_ID_LIST = "(SELECT jsonb_array_elements_text(%s::jsonb))"
_WRITE_HEAD = (
    feedback_chain.update()
    .where(feedback_chain.c.id == 1)
    .values(
        {
            name: sa.bindparam(name)
            for name in (
                "last_seq",
                "last_signature",
                "anchor_seq",
                "anchor_signature",
                "mac",
                "updated_ms",
            )
        }
    )
)


def _read_head(conn: sa.Connection, *, lock: bool) -> ChainHead:
    """The head; ``lock`` holds its row until the transaction ends (on SQLite the
    write transaction's own lock already does)."""
    locking = " FOR UPDATE" if lock and conn.dialect.name == "postgresql" else ""
    return ChainHead(*conn.exec_driver_sql(_HEAD + locking).one())


def _write_head(conn: sa.Connection, head: ChainHead) -> None:
    conn.execute(
        _WRITE_HEAD,
        {
            "last_seq": head.last_seq,
            "last_signature": head.last_signature,
            "anchor_seq": head.anchor_seq,
            "anchor_signature": head.anchor_signature,
            "mac": head.mac,
            "updated_ms": _now_ms(),
        },
    )


@contextmanager
def _durable_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction whose commit is on disk when it returns."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection if conn.dialect.name == "sqlite" else None
        if raw is not None:  # the level cannot change inside a transaction
            raw.execute("PRAGMA synchronous=FULL")
        try:
            conn.execution_options(amelio_write=True)
            with conn.begin():
                yield conn
        finally:
            if raw is not None:
                raw.execute("PRAGMA synchronous=NORMAL")


# A row is a PreparedEvent's fields followed by what the chain adds (the columns are
# listed in that order, so a row is built by one tuple display per event).
_COLUMNS = (
    "event_id",
    "event_type",
    "event_time_ms",
    "session_hash",
    "user_hash",
    "query_id",
    "request_id",
    "doc_id",
    "rank_shown",
    "payload",
    "seq",
    "received_ms",
    "signature",
)


def _insert(conn: sa.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Rows straight to the driver: COPY on PostgreSQL, executemany on SQLite.

    SQLAlchemy's per-row parameter processing was a fifth of ingestion time for
    plain values, and on PostgreSQL COPY is several times faster than any INSERT.
    """
    columns = ", ".join(_COLUMNS)
    if conn.dialect.name == "postgresql":
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        with cursor.copy(f"COPY {feedback_events.name} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    # Only constants go into this text; the values travel as parameters.
    marks = ", ".join("?" * len(_COLUMNS))
    conn.exec_driver_sql(f"INSERT INTO {feedback_events.name} ({columns}) VALUES ({marks})", rows)  # noqa: S608


def _stored_ids_sqlite(conn: sa.Connection, ids: list[str]) -> set[str]:
    """Which of ``ids`` are stored: at most 500 parameters a query (old builds of
    SQLite allow 999)."""
    seen: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = tuple(ids[start : start + 500])
        seen.update(
            conn.exec_driver_sql(f"{_STORED}({', '.join('?' * len(chunk))})", chunk).scalars()
        )
    return seen


def _head_and_stored(conn: sa.Connection, ids: list[str]) -> tuple[ChainHead, set[str]]:
    """The locked head, and which of ``ids`` are stored: the second read starts once
    the lock is held, so a writer that got there first has committed and its events
    are seen (an eventId it stored is answered ``duplicate``, not a unique-key error).

    On PostgreSQL both statements go in one round trip (psycopg's pipeline: the
    server still runs them in order, and under READ COMMITTED each statement reads
    what was committed when it starts), the ids as one JSON text (one parameter,
    cheaper to send than a 500-element array)."""
    if conn.dialect.name != "postgresql":  # SQLite: BEGIN IMMEDIATE holds the lock
        return _read_head(conn, lock=True), _stored_ids_sqlite(conn, ids)
    import psycopg  # on PostgreSQL, the driver is there

    raw = cast("psycopg.Connection[Any]", conn.connection.driver_connection)
    # Without pipeline support (libpq before 14) the two still run, one trip each.
    batched: AbstractContextManager[Any] = (
        raw.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()
    )
    with batched:
        head = raw.execute(_HEAD + " FOR UPDATE")
        stored = raw.execute(_STORED + _PG_ID_LIST, (json.dumps(ids),))
    row = head.fetchone()
    if row is None:
        raise RuntimeError("the feedback chain's head row is missing (not migrated?)")
    return ChainHead(*row), {event_id for (event_id,) in stored}


def append(engine: sa.Engine, key: bytes, events: Sequence[PreparedEvent]) -> list[bool]:
    """Store ``events`` in order, all in one transaction; for each, whether it was new
    (False: its eventId was already stored, or came earlier in ``events``)."""
    if not events:
        return []
    received = _now_ms()
    with _durable_transaction(engine) as conn:
        head, seen = _head_and_stored(conn, list({e.event_id for e in events}))
        fresh: list[bool] = []
        rows: list[tuple[Any, ...]] = []
        seq, signature = head.last_seq, head.last_signature
        for event in events:
            event_id = event.event_id
            if event_id in seen:
                fresh.append(False)
                continue
            seen.add(event_id)
            fresh.append(True)
            seq += 1
            signature = _link(key, signature, seq, event_id, received, event.payload)
            rows.append((*event, seq, received, signature))
        if rows:
            _insert(conn, rows)
            _write_head(conn, head.signed(key, last_seq=seq, last_signature=signature))
    return fresh


# -- verification -------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyReport:
    """The chain's state: ``ok``, or the first ``problem`` and where."""

    ok: bool
    checked: int
    last_seq: int
    anchor_seq: int
    problem: str | None = None
    seq: int | None = None
    event_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "lastSeq": self.last_seq,
            "anchorSeq": self.anchor_seq,
            "problem": self.problem,
            "seq": self.seq,
            "eventId": self.event_id,
        }


def _columns_match(row: sa.Row[Any]) -> bool:
    """The indexed copies still say what the signed payload says."""
    event = json.loads(row.payload)
    session = event.get("session", {})
    request = event.get("request", {})
    result = event.get("result", {})
    return (
        row.event_id,
        row.event_type,
        row.event_time_ms,
        row.session_hash,
        row.user_hash,
        row.query_id,
        row.request_id,
        row.doc_id,
        row.rank_shown,
    ) == (
        event.get("eventId"),
        event.get("eventType"),
        event.get("eventTimeMs"),
        session.get("sessionIdHash"),
        session.get("userIdHash"),
        request.get("queryId"),
        request.get("requestId"),
        result.get("docId"),
        result.get("rankShown"),
    )


@contextmanager
def _snapshot(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One consistent view for a multi-query read, while writers go on appending."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def verify(engine: sa.Engine, key: bytes) -> VerifyReport:
    """Walk the chain from its anchor; report the first tampered or missing event."""
    with _snapshot(engine) as conn:
        head = _read_head(conn, lock=False)
        report = _Walk(head)
        if not head.genuine(key):
            return report.fail("the chain head's signature does not match (rewound or forged)")
        stray = conn.execute(
            sa.select(sa.func.min(feedback_events.c.seq)).where(
                feedback_events.c.seq <= head.anchor_seq
            )
        ).scalar()
        if stray is not None:
            return report.fail(
                "an event lies before the chain's anchor (inserted after a purge)", seq=stray
            )
        tombstones: dict[int, str] = {}
        for seq, signature, mac in conn.execute(
            sa.select(
                feedback_tombstones.c.seq,
                feedback_tombstones.c.signature,
                feedback_tombstones.c.mac,
            ).where(feedback_tombstones.c.seq > head.anchor_seq)
        ):
            if not hmac.compare_digest(mac, _tombstone_mac(key, seq, signature)):
                return report.fail("a tombstone's signature does not match", seq=seq)
            tombstones[seq] = signature
        cursor = head.anchor_seq
        while True:
            rows = conn.execute(
                sa.select(feedback_events)
                .where(feedback_events.c.seq > cursor)
                .order_by(feedback_events.c.seq)
                .limit(_VERIFY_PAGE)
            ).all()
            for row in rows:
                if not report.reach(row.seq, tombstones):
                    return report.result
                expected = _link(
                    key, report.signature, row.seq, row.event_id, row.received_ms, row.payload
                )
                if not hmac.compare_digest(expected, row.signature) or not _columns_match(row):
                    return report.fail(
                        "tampered: its content does not match its signature",
                        seq=row.seq,
                        event_id=row.event_id,
                    )
                report.advance(row.seq, row.signature)
            if len(rows) < _VERIFY_PAGE:
                break
            cursor = rows[-1].seq
        if report.seq > head.last_seq:
            return report.fail(
                "an event lies beyond the chain's head (inserted outside Amelio)", seq=report.seq
            )
        if not report.reach(head.last_seq + 1, tombstones):
            return report.result
        if report.signature != head.last_signature:
            return report.fail("the newest event does not match the chain head", seq=head.last_seq)
        return report.result


class _Walk:
    """Where a verification is: the last seq reached and its signature."""

    def __init__(self, head: ChainHead) -> None:
        self.head = head
        self.seq = head.anchor_seq
        self.signature = head.anchor_signature
        self.checked = 0
        self.result = VerifyReport(True, 0, head.last_seq, head.anchor_seq)

    def fail(
        self, problem: str, *, seq: int | None = None, event_id: str | None = None
    ) -> VerifyReport:
        self.result = VerifyReport(
            False, self.checked, self.head.last_seq, self.head.anchor_seq, problem, seq, event_id
        )
        return self.result

    def reach(self, seq: int, tombstones: dict[int, str]) -> bool:
        """Step over purged seqs up to ``seq``; False (and a failure) at a missing one."""
        while self.seq + 1 < seq:
            gap = self.seq + 1
            if gap not in tombstones:
                self.fail("missing: this event was deleted", seq=gap)
                return False
            self.seq, self.signature = gap, tombstones[gap]
        return True

    def advance(self, seq: int, signature: str) -> None:
        self.seq, self.signature = seq, signature
        self.checked += 1
        self.result = VerifyReport(True, self.checked, self.head.last_seq, self.head.anchor_seq)


# -- retention ------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeReport:
    deleted: int
    anchor_seq: int
    tombstones: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "deleted": self.deleted,
            "anchorSeq": self.anchor_seq,
            "tombstones": self.tombstones,
        }


def purge(engine: sa.Engine, key: bytes, *, before_ms: int, batch: int = 10_000) -> PurgeReport:
    """Delete events that happened before ``before_ms``, keeping the chain verifiable."""
    deleted = 0
    while True:
        with db.transaction(engine) as conn:
            head = _read_head(conn, lock=True)
            doomed = conn.execute(
                sa.select(feedback_events.c.seq, feedback_events.c.signature)
                .where(feedback_events.c.event_time_ms < before_ms)
                .order_by(feedback_events.c.seq)
                .limit(batch)
            ).all()
            if not doomed:
                anchor = head.anchor_seq
                tombs = conn.execute(
                    sa.select(sa.func.count()).select_from(feedback_tombstones)
                ).scalar_one()
                return PurgeReport(deleted, anchor, tombs)
            gone: dict[int, str] = dict(
                conn.execute(
                    sa.select(feedback_tombstones.c.seq, feedback_tombstones.c.signature).where(
                        feedback_tombstones.c.seq > head.anchor_seq
                    )
                ).all()
            )
            gone.update((seq, sig) for seq, sig in doomed)
            anchor_seq, anchor_sig = head.anchor_seq, head.anchor_signature
            while anchor_seq + 1 in gone:
                anchor_seq += 1
                anchor_sig = gone[anchor_seq]
            seqs = [seq for seq, _ in doomed]
            for start in range(0, len(seqs), 500):
                conn.execute(
                    feedback_events.delete().where(
                        feedback_events.c.seq.in_(seqs[start : start + 500])
                    )
                )
            conn.execute(
                feedback_tombstones.delete().where(feedback_tombstones.c.seq <= anchor_seq)
            )
            now = _now_ms()
            stones = [
                {
                    "seq": seq,
                    "signature": sig,
                    "mac": _tombstone_mac(key, seq, sig),
                    "purged_ms": now,
                }
                for seq, sig in doomed
                if seq > anchor_seq
            ]
            if stones:
                conn.execute(feedback_tombstones.insert(), stones)
            _write_head(conn, head.signed(key, anchor_seq=anchor_seq, anchor_signature=anchor_sig))
            deleted += len(doomed)


# -- statistics -----------------------------------------------------------------------


def stats(engine: sa.Engine, *, since_ms: int | None = None) -> dict[str, Any]:
    """Counts per event type, the time span, and the chain's length."""
    query = sa.select(
        feedback_events.c.event_type,
        sa.func.count(),
        sa.func.min(feedback_events.c.event_time_ms),
        sa.func.max(feedback_events.c.event_time_ms),
    ).group_by(feedback_events.c.event_type)
    if since_ms is not None:
        query = query.where(feedback_events.c.event_time_ms >= since_ms)
    with db.reading(engine) as conn:
        rows = conn.execute(query).all()
        head = _read_head(conn, lock=False)
    by_type = {t: n for t, n, _, _ in sorted(rows)}
    firsts = [lo for _, _, lo, _ in rows]
    lasts = [hi for _, _, _, hi in rows]
    return {
        "total": sum(by_type.values()),
        "byType": by_type,
        "firstEventTimeMs": min(firsts) if firsts else None,
        "lastEventTimeMs": max(lasts) if lasts else None,
        "chain": {"lastSeq": head.last_seq, "anchorSeq": head.anchor_seq},
    }
