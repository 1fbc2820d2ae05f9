"""Feedback events: schema, collector, anonymization, tokens, limits, the signed store.

Storage behaviour runs on SQLite and PostgreSQL (the ``workspace`` fixture);
pure logic (schema, scrubbing, hashing, tokens, buckets) needs no database.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Any

import pytest
import sqlalchemy as sa

from amelio.db.schema import feedback_chain, feedback_events, feedback_tombstones
from amelio.errors import InputTooLarge, InvalidInput, InvalidToken, RateLimited
from amelio.feedback import (
    EVENT_TYPES,
    Collector,
    feedback_stats,
    json_schema,
    purge_events,
    verify_events,
)
from amelio.feedback.examples import example_event
from amelio.feedback.ratelimit import Bucket, RateLimiter
from amelio.feedback.schema import event_adapter
from amelio.feedback.tokens import TokenSigner
from amelio.privacy.anonymize import SaltedHasher, scrub
from amelio.workspace.folder import Workspace

DAY_MS = 86_400_000
NOW_MS = 1_780_000_000_000  # 2026-05-28, a fixed "now" for the collector's clock


class Clock:
    """A settable clock for the collector and the rate limiter."""

    def __init__(self, ms: int = NOW_MS) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def collector(
    ws: Workspace, clock: Clock | None = None, limiter: RateLimiter | None = None
) -> Collector:
    clock = clock or Clock()
    return Collector(ws, clock=clock, limiter=limiter)


def event(c: Collector, kind: str = "result_clicked", **kw: Any) -> dict[str, Any]:
    kw.setdefault("time_ms", NOW_MS)
    if "token" not in kw:
        kw["token"] = c.signer.issue(
            kw.get("query_id", "q-1"), kw.get("request_id", "r-1"), now_ms=NOW_MS
        )
    return example_event(kind, **kw)


def stored(ws: Workspace) -> list[dict[str, Any]]:
    with ws.engine.connect() as conn:
        rows = (
            conn.execute(sa.select(feedback_events.c.payload).order_by(feedback_events.c.seq))
            .scalars()
            .all()
        )
    return [json.loads(r) for r in rows]


def dump(ws: Workspace) -> str:
    """Every stored value of the feedback tables, as one text to search."""
    with ws.engine.connect() as conn:
        return "\n".join(
            str(tuple(r))
            for t in (feedback_events, feedback_chain, feedback_tombstones)
            for r in conn.execute(sa.select(t))
        )


# -- schema (no database) -------------------------------------------------------------


@pytest.mark.parametrize("kind", EVENT_TYPES)
def test_every_type_has_a_valid_example(kind: str) -> None:
    event_adapter().validate_python(example_event(kind, token="t"))


REQUIRED = {
    "vote_up": ("vote", "vote"),
    "vote_down": ("request.branch", "request.branch"),
    "clarification_chosen": ("clarification", "clarification"),
    "result_pinned": ("result.rankShown", "result.rankShown"),
    "result_hidden": ("result", "result"),
    "report_problem": ("problem.freeText", "problem.freeText"),
    "correction_inline": ("correction.afterValue", "correction.afterValue"),
    "result_clicked": ("result.rankShown", "result.rankShown"),
    "result_dwell_time": ("outcome.dwellMs", "outcome.dwellMs"),
    "query_reformulated": ("request.queryId", "request.queryId"),
    "query_abandoned": ("request.queryId", "request.queryId"),
    "action_executed": ("request.requestId", "request.requestId"),
    "action_cancelled": ("request", "request"),
    "marty_response_replaced": ("request.requestId", "request.requestId"),
}


def _without(data: dict[str, Any], path: str) -> dict[str, Any]:
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[part]
    del node[last]
    return data


@pytest.mark.parametrize("kind", EVENT_TYPES)
def test_every_type_refuses_a_missing_required_part(sqlite_workspace: Workspace, kind: str) -> None:
    c = collector(sqlite_workspace)
    removed, reported = REQUIRED[kind]
    bad = _without(event(c, kind), removed)
    [status] = c.ingest([bad]).statuses
    assert (status.status, status.field) == ("rejected", reported)
    assert status.reason == "Field required"
    assert stored(sqlite_workspace) == []


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda e: e.update(extra=1), "extra", "Extra inputs are not permitted"),
        (lambda e: e["session"].update(email="a@b.c"), "session.email", "Extra inputs"),
        (lambda e: e["result"].update(rankShown="3"), "result.rankShown", "valid integer"),
        (lambda e: e["context"].update(deviceTier="ULTRA"), "context.deviceTier", "HIGH+"),
        (lambda e: e.update(eventType="teleported"), "eventType", "unknown or missing"),
        (lambda e: e.update(eventId="not-a-ulid"), "eventId", "pattern"),
        (lambda e: e.update(eventVersion="v2"), "eventVersion", "'v1'"),
        (lambda e: e.update(vote={"score": 1}), "vote", "Extra inputs"),  # wrong type's payload
        (lambda e: e["session"].pop("sessionId"), "session", "exactly one of sessionId"),
        (lambda e: e["request"].update(alpha=1.5), "request.alpha", "less than or equal"),
    ],
)
def test_invalid_events_name_the_field(
    sqlite_workspace: Workspace, change: Any, field: str, reason: str
) -> None:
    c = collector(sqlite_workspace)
    good, bad = event(c), event(c)
    change(bad)
    statuses = c.ingest([good, bad]).statuses
    assert [s.status for s in statuses] == ["accepted", "rejected"]
    assert statuses[1].field == field
    assert reason in str(statuses[1].reason)
    assert statuses[1].event_id in (bad["eventId"], None)


def test_json_schema_states_the_types_and_their_requirements() -> None:
    schema = json_schema()
    assert schema["title"] == "MartyFeedbackEventV1"
    assert set(schema["discriminator"]["mapping"]) == set(EVENT_TYPES)
    clicked = schema["$defs"]["ResultClicked"]
    assert clicked["additionalProperties"] is False
    assert {"request", "result", "session", "eventId"} <= set(clicked["required"])
    ranked = schema["$defs"][clicked["properties"]["result"]["$ref"].split("/")[-1]]
    assert set(ranked["required"]) == {"docId", "rankShown"}
    tiers = schema["$defs"]["Context"]["properties"]["deviceTier"]["enum"]
    assert tiers == ["HIGH+", "HIGH", "MID+", "MID", "LOW+", "LOW", "DEGRADED"]


# -- anonymization and scrubbing (no database) ----------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to jean.dupont+x@example.co.uk today", "write to [email] today"),
        ("call +33 6 12 34 56 78 or 06.12.34.56.78", "call [phone] or [phone]"),
        ("US: (555) 123-4567.", "US: [phone]."),
        ("IBAN FR76 3000 6000 0112 3456 7890 189 MERCI", "IBAN [iban] MERCI"),
        ("iban de89370400440532013000", "iban [iban]"),
        ("card 4111 1111 1111 1111 please", "card [card] please"),
        ("card 5500-0000-0000-0004", "card [card]"),
        ("on 2026-05-15 at 14:30, v3.2.1, 42 people, order 1234567", None),
        ("mistyped FR76 3000 6000 0112 3456 7890 188 ok", "mistyped [iban] ok"),
        ("AB12 CDEF GHIJ KLMN OPQR", None),
        ("plain words", None),
    ],
)
def test_scrub_removes_contact_and_payment_details(text: str, expected: str | None) -> None:
    assert scrub(text) == (text if expected is None else expected)


def test_salt_rotates_daily() -> None:
    hasher = SaltedHasher(b"secret")
    monday, tuesday = date(2026, 5, 25), date(2026, 5, 26)
    assert hasher.hash("alice", monday) == hasher.hash("alice", monday)
    assert hasher.hash("alice", monday) != hasher.hash("alice", tuesday)
    assert hasher.hash("alice", monday) != hasher.hash("bob", monday)
    assert SaltedHasher(b"other").hash("alice", monday) != hasher.hash("alice", monday)
    assert len(hasher.hash("alice", monday)) == 8
    assert set(hasher.hash("alice", monday)) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


# -- tokens and buckets (no database) --------------------------------------------------


def test_tokens_bind_query_request_and_expiry() -> None:
    signer = TokenSigner(b"secret", ttl_s=60)
    token = signer.issue("q-1", "r-1", now_ms=NOW_MS)
    assert signer.verify(token, "q-1", "r-1", now_ms=NOW_MS + 59_000).query_id == "q-1"
    assert signer.verify(token, "q-1", now_ms=NOW_MS).request_id == "r-1"
    with pytest.raises(InvalidToken, match="expired"):
        signer.verify(token, "q-1", now_ms=NOW_MS + 61_000)
    with pytest.raises(InvalidToken, match="another queryId"):
        signer.verify(token, "q-2", now_ms=NOW_MS)
    with pytest.raises(InvalidToken, match="another requestId"):
        signer.verify(token, "q-1", "r-2", now_ms=NOW_MS)
    forged = TokenSigner(b"guess", ttl_s=60).issue("q-1", "r-1", now_ms=NOW_MS)
    with pytest.raises(InvalidToken, match="forged"):
        signer.verify(forged, "q-1", now_ms=NOW_MS)
    purpose, claims, _expiry, mac = token.split(".")
    longer = TokenSigner(b"secret", ttl_s=10**6).issue("q-1", "r-1", now_ms=NOW_MS)
    with pytest.raises(InvalidToken, match="forged"):  # a later expiry under the old mac
        signer.verify(f"{purpose}.{claims}.{longer.split('.')[2]}.{mac}", "q-1", now_ms=NOW_MS)
    for junk in ("", "v1", "v2.a.b", "v1..", "v1.%%%.abc"):
        with pytest.raises(InvalidToken):
            signer.read(junk, now_ms=NOW_MS)
    with pytest.raises(InvalidInput):
        signer.issue("q\n1", "r-1")


def test_buckets_charge_all_or_nothing_and_say_when() -> None:
    clock = Clock()
    limiter = RateLimiter(per_key=Bucket(1, 20), per_session=Bucket(1, 5), clock=clock)
    assert limiter.try_acquire("k", {"a": 5, "b": 3}) is None
    refusal = limiter.try_acquire("k", {"a": 1, "b": 1})  # a is empty
    assert refusal is not None and refusal.scope == "session"
    assert refusal.retry_after_s == pytest.approx(1.0)
    assert limiter.try_acquire("k", {"b": 2}) is None  # b was not charged by the refusal
    clock.ms += 1000
    assert limiter.try_acquire("k", {"a": 1}) is None
    refusal = limiter.try_acquire("k", {"c": 5, "d": 5, "e": 1})  # key: 20 - 10 + 1 - 1
    assert refusal is not None and refusal.scope == "key"
    assert RateLimiter.retry_after(refusal) == 1
    big = RateLimiter(per_key=Bucket(0, 1), per_session=Bucket(1, 5), clock=clock)
    assert big.try_acquire(None, {"z": 50}) is None  # more than a bucket: one full bucket
    assert big.try_acquire(None, {"z": 1}) is not None


# -- the collector on both databases ---------------------------------------------------


def test_every_type_is_stored_anonymized_and_verifiable(
    workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    c = collector(workspace)
    events = [
        event(c, kind, session_id="session-RAW-42", user_id="alice@corp.example")
        for kind in EVENT_TYPES
    ]
    events[1]["vote"]["comment"] = "Mail alice@corp.example or call 06 12 34 56 78"
    result = c.ingest(events)
    assert result.counts() == {"accepted": 14, "duplicate": 0, "rejected": 0, "dropped": 0}
    rows = stored(workspace)
    assert [r["eventType"] for r in rows] == list(EVENT_TYPES)
    text = dump(workspace)
    for secret in ("session-RAW-42", "alice@corp.example", "06 12 34 56 78", "v1."):
        assert secret not in text
        assert secret not in caplog.text
    assert rows[1]["vote"]["comment"] == "Mail [email] or call [phone]"
    hashes = {(r["session"]["sessionIdHash"], r["session"]["userIdHash"]) for r in rows}
    assert len(hashes) == 1  # one session, one user, one day
    assert all("feedbackToken" not in r["request"] for r in rows)
    assert rows[7]["result"] == events[7]["result"]
    assert verify_events(workspace).ok
    stats = feedback_stats(workspace)
    assert stats["total"] == 14 and stats["byType"]["result_clicked"] == 1
    assert stats["chain"]["lastSeq"] == 14


def test_same_user_two_days_two_hashes(workspace: Workspace) -> None:
    c = collector(workspace)
    c.ingest(
        [
            event(c, "action_executed", time_ms=NOW_MS - DAY_MS, user_id="alice"),
            event(c, "action_executed", time_ms=NOW_MS, user_id="alice"),
            event(c, "action_executed", time_ms=NOW_MS, user_id="alice", session_id="other"),
        ]
    )
    yesterday, today, today_again = (r["session"] for r in stored(workspace))
    assert yesterday["userIdHash"] != today["userIdHash"]
    assert yesterday["sessionIdHash"] != today["sessionIdHash"]
    assert today["userIdHash"] == today_again["userIdHash"]
    assert today["sessionIdHash"] != today_again["sessionIdHash"]


def test_duplicates_are_idempotent(workspace: Workspace) -> None:
    c = collector(workspace)
    first, second = event(c), event(c)
    assert [s.status for s in c.ingest([first, first]).statuses] == ["accepted", "duplicate"]
    lower = {**first, "eventId": first["eventId"].lower()}
    result = c.ingest([second, lower, first])
    assert [s.status for s in result.statuses] == ["accepted", "duplicate", "duplicate"]
    assert result.statuses[1].event_id == first["eventId"]
    assert len(stored(workspace)) == 2
    assert verify_events(workspace).ok


def test_consent_other_than_granted_is_dropped(workspace: Workspace) -> None:
    c = collector(workspace)
    missing = event(c)
    del missing["consent"]
    events = [event(c, consent="denied"), event(c, consent="unknown"), missing, event(c)]
    result = c.ingest(events)
    assert [s.status for s in result.statuses] == ["dropped"] * 3 + ["accepted"]
    assert result.to_dict()["dropped"] == 3
    assert [r["eventId"] for r in stored(workspace)] == [events[3]["eventId"]]


def test_tokens_forged_expired_or_missing_are_rejected(workspace: Workspace) -> None:
    clock = Clock()
    c = collector(workspace, clock)
    stranger = TokenSigner(b"not the workspace key", ttl_s=3600)
    no_token = event(c)
    del no_token["request"]["feedbackToken"]
    events = [
        event(c),
        event(c, token=stranger.issue("q-1", "r-1", now_ms=NOW_MS)),
        event(c, token=c.signer.issue("q-9", "r-1", now_ms=NOW_MS)),  # another query
        event(c, token=c.signer.issue("q-1", "r-1", now_ms=NOW_MS - 86_401_000)),  # expired
        no_token,
        event(c, "action_executed"),  # about an answer, not a query: no token needed
    ]
    statuses = c.ingest(events).statuses
    assert [s.status for s in statuses] == ["accepted"] + ["rejected"] * 4 + ["accepted"]
    assert {s.field for s in statuses[1:5]} == {"request.feedbackToken"}
    assert [s.reason for s in statuses[1:5]] == [
        "feedbackToken signature does not match (forged, altered, or signed by another workspace)",
        "feedbackToken was issued for another queryId",
        "feedbackToken has expired",
        "required for an event about a query (the search response's feedbackToken)",
    ]
    assert len(stored(workspace)) == 2


def test_time_window(workspace: Workspace) -> None:
    c = collector(workspace)
    retention = workspace.settings.feedback_retention_days
    events = [
        event(c, time_ms=NOW_MS + 299_000),
        event(c, time_ms=NOW_MS + 301_000),
        event(c, time_ms=NOW_MS - retention * DAY_MS + 60_000),
        event(c, time_ms=NOW_MS - retention * DAY_MS - 60_000),
    ]
    statuses = c.ingest(events).statuses
    assert [s.status for s in statuses] == ["accepted", "rejected", "accepted", "rejected"]
    assert statuses[1].reason == "more than 5 minutes in the future"
    assert "retention" in str(statuses[3].reason)


def test_rate_limit_refuses_the_whole_request(workspace: Workspace) -> None:
    clock = Clock()
    limiter = RateLimiter(per_key=Bucket(1, 8), per_session=Bucket(1, 3), clock=clock)
    c = collector(workspace, clock, limiter)
    first = [event(c, session_id="a"), event(c, session_id="b"), event(c, session_id="b")]
    assert c.ingest(first, api_key="k").count("accepted") == 3
    burst = [event(c, session_id="b") for _ in range(2)] + [event(c, session_id="c")]
    with pytest.raises(RateLimited) as info:
        c.ingest(burst, api_key="k")
    assert info.value.retry_after == 1 and info.value.details["scope"] == "session"
    assert len(stored(workspace)) == 3  # not half-stored
    clock.ms += 1000
    assert c.ingest(burst, api_key="k").count("accepted") == 3
    with pytest.raises(RateLimited) as info:  # the key has 8 - 3 + 1 - 3 = 3 left
        c.ingest([event(c, session_id=f"s{i}") for i in range(4)], api_key="k")
    assert info.value.details["scope"] == "key"
    assert (
        c.ingest([event(c, session_id=f"t{i}") for i in range(3)], api_key="other").count(
            "accepted"
        )
        == 3
    )
    with pytest.raises(RateLimited):  # rejected events cost the key too: 8 - 3 - 6 < 0
        c.ingest([{"junk": i} for i in range(6)], api_key="other")


def test_batches_over_the_limits_are_413(sqlite_workspace: Workspace) -> None:
    c = collector(sqlite_workspace)
    line = json.dumps(event(c)).encode()
    with pytest.raises(InputTooLarge, match="at most 500 events"):
        c.ingest_body(b"\n".join([line] * 501))
    with pytest.raises(InputTooLarge, match="at most 500 events"):
        c.ingest_body(b"[" + b",".join([line] * 501) + b"]")
    with pytest.raises(InputTooLarge, match="bytes"):
        c.ingest_body(b" " * 1_000_001)
    with pytest.raises(InvalidInput, match="No events"):
        c.ingest_body(b"\n\n")
    with pytest.raises(InvalidInput, match="JSON array"):
        c.ingest_body(b"[{]")
    assert stored(sqlite_workspace) == []


def test_ndjson_and_arrays_with_bad_items(workspace: Workspace) -> None:
    c = collector(workspace)
    good = [json.dumps(event(c)) for _ in range(3)]
    body = "\n".join([good[0], "{not json", "", good[1], "[1]", good[2]]).encode()
    result = c.ingest_body(body)
    assert [s.status for s in result.statuses] == [
        "accepted",
        "rejected",
        "accepted",
        "rejected",
        "accepted",
    ]
    assert "not valid JSON" in str(result.statuses[1].reason)
    assert result.statuses[3].reason == "an event is a JSON object"
    array = json.dumps([event(c), 7, event(c, consent="denied")]).encode()
    assert [s.status for s in c.ingest_body(array).statuses] == ["accepted", "rejected", "dropped"]
    assert len(stored(workspace)) == 4
    two_on_a_line = (json.dumps(event(c)) + "," + json.dumps(event(c))).encode()
    result = c.ingest_body(two_on_a_line + b"\n" + json.dumps(event(c)).encode())
    assert [s.status for s in result.statuses] == ["rejected", "accepted"]


def test_concurrent_writers_keep_one_chain(workspace: Workspace) -> None:
    c = collector(workspace)
    shared = event(c)
    batches = [[shared] + [event(c, session_id=f"w{w}-{i}") for i in range(20)] for w in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(c.ingest, batches))
    assert sum(r.count("accepted") for r in results) == 81  # the shared event once
    assert sum(r.count("duplicate") for r in results) == 3
    report = verify_events(workspace)
    assert report.ok and report.checked == 81 and report.last_seq == 81


# -- the chain ------------------------------------------------------------------------


def _fill(ws: Workspace, times: list[int]) -> list[dict[str, Any]]:
    c = collector(ws)
    events = [event(c, time_ms=t) for t in times]
    assert c.ingest(events).count("accepted") == len(times)
    return events


def test_tampering_is_detected(workspace: Workspace) -> None:
    events = _fill(workspace, [NOW_MS] * 6)
    assert verify_events(workspace).checked == 6
    engine = workspace.engine
    with engine.begin() as conn:
        row = conn.execute(sa.select(feedback_events).where(feedback_events.c.seq == 3)).one()
        forged = row.payload.replace('"rankShown":3', '"rankShown":1')
        conn.execute(
            feedback_events.update().where(feedback_events.c.seq == 3).values(payload=forged)
        )
    report = verify_events(workspace)
    assert (report.ok, report.seq, report.event_id) == (False, 3, events[2]["eventId"])
    assert "tampered" in str(report.problem) and report.checked == 2
    with engine.begin() as conn:  # put it back; now change an indexed copy only
        conn.execute(
            feedback_events.update()
            .where(feedback_events.c.seq == 3)
            .values(payload=row.payload, doc_id="calendar_event:1:1")
        )
    assert verify_events(workspace).seq == 3
    with engine.begin() as conn:
        conn.execute(
            feedback_events.update().where(feedback_events.c.seq == 3).values(doc_id=row.doc_id)
        )
        conn.execute(feedback_events.delete().where(feedback_events.c.seq == 4))
    report = verify_events(workspace)
    assert (report.ok, report.seq, report.problem) == (False, 4, "missing: this event was deleted")
    with engine.begin() as conn:
        conn.execute(feedback_events.delete().where(feedback_events.c.seq >= 4))
    assert verify_events(workspace).seq == 4  # the newest ones, gone: still missing
    with engine.begin() as conn:  # rewind the head too: its MAC gives it away
        conn.execute(feedback_chain.update().values(last_seq=3, last_signature=row.signature))
    assert "chain head" in str(verify_events(workspace).problem)


def test_purge_keeps_the_chain_verifiable(workspace: Workspace) -> None:
    old, recent = NOW_MS - 40 * DAY_MS, NOW_MS - DAY_MS
    _fill(workspace, [old, old, recent, old, recent])  # seq 4 came late: a gap
    report = purge_events(workspace, 30, now_ms=NOW_MS)
    assert (report.deleted, report.anchor_seq, report.tombstones) == (3, 2, 1)
    assert len(stored(workspace)) == 2
    verified = verify_events(workspace)
    assert verified.ok and verified.checked == 2 and verified.anchor_seq == 2
    _fill(workspace, [NOW_MS])
    assert verify_events(workspace).ok
    with workspace.engine.begin() as conn:  # a forged tombstone hides a deleted event
        conn.execute(feedback_tombstones.update().values(signature="f" * 64))
    assert "tombstone" in str(verify_events(workspace).problem)
    with workspace.engine.begin() as conn:
        conn.execute(feedback_tombstones.delete())
    assert verify_events(workspace).seq == 4
    assert purge_events(workspace, 0, now_ms=NOW_MS + 1).deleted == 3
    assert feedback_stats(workspace)["total"] == 0
    assert verify_events(workspace).seq == 4  # a purge does not launder a deletion


def test_purging_everything_leaves_a_valid_empty_chain(workspace: Workspace) -> None:
    _fill(workspace, [NOW_MS - 2 * DAY_MS] * 3)
    assert purge_events(workspace, 1, now_ms=NOW_MS).to_dict() == {
        "deleted": 3,
        "anchorSeq": 3,
        "tombstones": 0,
    }
    assert purge_events(workspace, 1, now_ms=NOW_MS).deleted == 0
    report = verify_events(workspace)
    assert report.ok and report.checked == 0 and report.last_seq == 3
    _fill(workspace, [NOW_MS])
    assert verify_events(workspace).to_dict()["checked"] == 1
