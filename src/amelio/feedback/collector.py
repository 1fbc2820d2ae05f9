"""The collector: from a batch of client events to stored, anonymous, signed rows.

Each event goes through, in order:

1. **validate** against ``MartyFeedbackEventV1`` (strict, unknown fields refused)
   and the time window (at most 5 minutes ahead, no older than the retention);
2. **consent**: anything but ``consent.telemetry == "granted"`` is ``dropped``,
   before any of its data is looked at further;
3. **token**: an event about a query must carry that query's ``feedbackToken``
   (an operator's import of a trusted file may waive it: ``require_token``);
4. **anonymize**: raw session and user ids become daily-salted hashes, free
   text is scrubbed (unless ``pii_scrub`` is ``off``), the token is dropped;

then the whole request is charged to the **rate limits** (all or nothing: 429
and nothing stored), and the events that passed are **stored** in one durable
transaction, where a known ``eventId`` is answered ``duplicate``. Every event
gets a status (``accepted``, ``duplicate``, ``rejected`` with the field and the
reason, ``dropped``); one bad event never fails its batch. Reasons never quote
the event's values, so a raw id cannot leak through an error message or a log.

**What is scrubbed**, field by field (``docs/feedback.md#what-is-scrubbed``):
every string a person can type or a page can put there without the client's
control, that is ``context.routeId`` (a URL path can hold an e-mail or an
order number), ``vote.comment``, ``hide.reason``, ``problem.freeText`` and
``correction.beforeValue`` / ``afterValue``, whatever the event's type;
``result.docId`` loses only e-mail addresses (a document keyed by one, in a
people directory), because a long number there is a key the signals need, not
a phone number. The other strings are identifiers and vocabulary the client's
code chooses (``Id`` and ``Key`` patterns: no ``@``, no spaces) and keep
their value, since the aggregates join and group on them; session ids are
hashed, the token dropped.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_json

from amelio.errors import InputTooLarge, InvalidInput, InvalidToken, RateLimited
from amelio.feedback import store
from amelio.feedback.ratelimit import Bucket, RateLimiter
from amelio.feedback.schema import (
    EVENT_TYPES,
    FeedbackEvent,
    MartyFeedbackEventV1,
    event_adapter,
)
from amelio.feedback.store import PreparedEvent, PurgeReport, VerifyReport
from amelio.feedback.tokens import TokenSigner, check_binding, token_signer
from amelio.ops.metrics import record_feedback
from amelio.privacy import pii  # a module, not its names: amelio.privacy.pii imports this package
from amelio.privacy.anonymize import SaltedHasher, day_from_index, scrub, scrub_emails
from amelio.privacy.signing import secret_key
from amelio.workspace.folder import Workspace

__all__ = [
    "Collector",
    "EventStatus",
    "IngestResult",
    "Status",
    "feedback_stats",
    "parse_batch",
    "purge_events",
    "verify_events",
]

Status = Literal["accepted", "duplicate", "rejected", "dropped"]
MAX_FUTURE_MS = 5 * 60 * 1000
_DAY_MS = 86_400_000
#: Free text, per section: scrubbed before storage (see the module's docstring).
_TEXT_FIELDS = (
    ("context", ("routeId",)),
    ("vote", ("comment",)),
    ("problem", ("freeText",)),
    ("hide", ("reason",)),
    ("correction", ("beforeValue", "afterValue")),
)


_BATCH: TypeAdapter[list[FeedbackEvent]] = TypeAdapter(list[MartyFeedbackEventV1])


class EventStatus(NamedTuple):
    """What became of one event; ``position`` is its index in the batch (or its file
    line), ``index`` in JSON."""

    position: int
    status: Status
    event_id: str | None = None
    field: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.position,
            "eventId": self.event_id,
            "status": self.status,
        }
        if self.status == "rejected":
            out |= {"field": self.field, "reason": self.reason}
        return out


@dataclass(frozen=True)
class IngestResult:
    statuses: tuple[EventStatus, ...]

    def count(self, status: Status) -> int:
        return sum(1 for s in self.statuses if s.status == status)

    def counts(self) -> dict[str, int]:
        tally = Counter(s.status for s in self.statuses)
        return {k: tally.get(k, 0) for k in ("accepted", "duplicate", "rejected", "dropped")}

    def to_dict(self) -> dict[str, Any]:
        return {**self.counts(), "events": [s.to_dict() for s in self.statuses]}


class _Unparsable:
    """A line that is not JSON: it becomes a rejection, its neighbours go on."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _load(line: bytes | str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        return _Unparsable(f"not valid JSON ({exc.msg} at character {exc.pos})")
    except UnicodeDecodeError:
        return _Unparsable("not UTF-8 text")
    except RecursionError:  # thousands of nested [[[…: no event is shaped like that
        return _Unparsable("nested too deeply")


def parse_batch(body: bytes, *, max_events: int, max_bytes: int) -> list[object]:
    """The events of a request body: a JSON array, or NDJSON (one event per line)."""
    if len(body) > max_bytes:
        raise _too_big(max_bytes)
    text = body.lstrip()
    if text.startswith(b"["):
        items = _load(text)
        if isinstance(items, _Unparsable) or not isinstance(items, list):
            reason = items.reason if isinstance(items, _Unparsable) else "not an array"
            raise InvalidInput(f"The body starts like a JSON array but is {reason}.")
    else:
        items = [_load(line) for line in body.splitlines() if line.strip()]
    if not items:
        raise InvalidInput(
            "No events: send a JSON array or NDJSON of "
            "MartyFeedbackEventV1 (GET /v1/feedback/schema)."
        )
    if len(items) > max_events:
        raise _too_many(len(items), max_events)
    return items


def _too_many(count: int, limit: int) -> InputTooLarge:
    return InputTooLarge(
        f"A feedback batch holds at most {limit} events, not {count}; split "
        "it (AMELIO_FEEDBACK_MAX_EVENTS).",
        limit=limit,
    )


def _too_big(limit: int) -> InputTooLarge:
    return InputTooLarge(
        f"A feedback batch is at most {limit:,} bytes; split it (AMELIO_FEEDBACK_MAX_BYTES).",
        limit=limit,
    )


def _as_array(body: bytes, max_bytes: int, max_events: int) -> tuple[bytes, int | None]:
    """``body`` as one JSON array (NDJSON lines joined) and how many events it must
    hold (None: whatever the array holds)."""
    if len(body) > max_bytes:
        raise _too_big(max_bytes)
    text = body.strip()
    if text.startswith(b"["):
        return text, None
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > max_events:
        raise _too_many(len(lines), max_events)
    return b"[" + b",".join(lines) + b"]", len(lines)


def _rejection(index: int, event_id: str | None, exc: ValidationError) -> EventStatus:
    error = exc.errors(include_url=False, include_input=False, include_context=False)[0]
    loc = [str(p) for p in error["loc"]]
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return EventStatus(
            index,
            "rejected",
            event_id,
            "eventType",
            "unknown or missing eventType (see GET /v1/feedback/schema)",
        )
    if loc and loc[0] in EVENT_TYPES:  # the union's tag is not part of the event's path
        loc = loc[1:]
    return EventStatus(index, "rejected", event_id, ".".join(loc), error["msg"])


class Collector:
    """Validates, anonymizes, rate-limits and stores feedback events for one workspace.

    Build one per process and keep it: it holds the rate limiter's buckets and
    the derived keys (the server keeps it on the app).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        limiter: RateLimiter | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = workspace.settings
        secret = secret_key(settings)
        self.workspace = workspace
        self.settings = settings
        self.signer: TokenSigner = token_signer(settings)
        self.hasher = SaltedHasher(secret)
        self._chain_key = store.chain_key(secret)
        self._clock = clock
        self.limiter = limiter or RateLimiter(
            per_key=Bucket(settings.feedback_rate_key, settings.feedback_burst_key),
            per_session=Bucket(settings.feedback_rate_session, settings.feedback_burst_session),
        )
        self._validate = event_adapter().validate_python
        self._scrub = pii.scrubs(settings, "events")

    # -- entry points ------------------------------------------------------------------

    def ingest_body(self, body: bytes, *, api_key: str | None = None) -> IngestResult:
        """A request body (JSON array or NDJSON) within the batch limits."""
        limit = self.settings.feedback_max_events
        joined, lines = _as_array(body, self.settings.feedback_max_bytes, limit)
        # The common case, a batch without a bad event, validates in one call; any
        # error (or a line holding two events) falls back to event by event, which
        # gives each event its own status.
        try:
            events = _BATCH.validate_json(joined)
        except ValidationError:
            pass
        else:
            if len(events) > limit:
                raise _too_many(len(events), limit)
            if events and lines in (None, len(events)):
                return self._ingest(events, validated=True, api_key=api_key)
        items = parse_batch(body, max_events=limit, max_bytes=self.settings.feedback_max_bytes)
        return self._ingest(items, api_key=api_key)

    def ingest(
        self,
        items: Sequence[object],
        *,
        api_key: str | None = None,
        rate_limit: bool = True,
        require_token: bool = True,
        indexes: Sequence[int] | None = None,
    ) -> IngestResult:
        """Process and store one batch of decoded JSON events; raises
        :class:`RateLimited` (storing nothing) when over a limit.

        ``indexes`` name the items in the statuses (default: their positions).
        ``require_token=False`` is for an operator importing a file it trusts (the UBI
        import): the token proves that a client saw the query, which an operator
        holding the workspace's key could mint anyway, so its events about a query may
        come without one. A token an event does carry is still checked, and every
        other check still applies; the public endpoint never passes it."""
        return self._ingest(
            items,
            api_key=api_key,
            rate_limit=rate_limit,
            indexes=indexes,
            require_token=require_token,
        )

    def ingest_file(self, path: Path | str, *, batch: int | None = None) -> Iterator[IngestResult]:
        """Ingest an NDJSON (or JSON array) file in batches; ``index`` is the 1-based
        line (or array position). No rate limit: this is an operator's import."""
        size = batch or self.settings.feedback_max_events
        for indexes, items in _file_batches(Path(path), size):
            yield self.ingest(items, rate_limit=False, indexes=indexes)

    def _ingest(
        self,
        items: Sequence[object],
        *,
        api_key: str | None,
        rate_limit: bool = True,
        indexes: Sequence[int] | None = None,
        validated: bool = False,
        require_token: bool = True,
    ) -> IngestResult:
        where = indexes if indexes is not None else range(len(items))
        batch = _Batch(int(self._clock() * 1000), self.settings.feedback_retention_days)
        statuses: list[EventStatus | None] = []
        ready: list[tuple[int, PreparedEvent]] = []
        prepare = self._prepare
        for offset, item in enumerate(items):
            outcome = prepare(where[offset], item, validated, batch, require_token)
            if isinstance(outcome, EventStatus):
                statuses.append(outcome)
            else:
                statuses.append(None)
                ready.append((offset, outcome))
        if rate_limit:
            sessions = Counter(event.session_hash for _, event in ready)
            # The key pays for every event it sent, rejected ones too: they cost work.
            refusal = self.limiter.try_acquire(api_key, sessions, key_cost=len(items))
            if refusal is not None:
                wait = RateLimiter.retry_after(refusal)
                record_feedback(("rate_limited", None) for _ in items)
                raise RateLimited(
                    f"Too many feedback events for this {refusal.scope}; "
                    f"retry in {wait} s. Nothing from this request was "
                    "stored.",
                    retry_after=wait,
                    scope=refusal.scope,
                )
        fresh = store.append(self.workspace.engine, self._chain_key, [e for _, e in ready])
        for (offset, event), new in zip(ready, fresh, strict=True):
            statuses[offset] = EventStatus(
                where[offset], "accepted" if new else "duplicate", event.event_id
            )
        done = tuple(s for s in statuses if s is not None)
        record_feedback((s.status, s.field if s.status == "rejected" else None) for s in done)
        return IngestResult(done)

    # -- one event ---------------------------------------------------------------------

    def _prepare(
        self, index: int, item: object, validated: bool, batch: _Batch, require_token: bool = True
    ) -> PreparedEvent | EventStatus:
        if validated:  # by the batch's validator: a dict of the schema's shape
            event = cast("dict[str, Any]", item)
        else:
            if isinstance(item, _Unparsable):
                return EventStatus(index, "rejected", None, "", item.reason)
            if not isinstance(item, dict):
                return EventStatus(index, "rejected", None, "", "an event is a JSON object")
            raw_id = item.get("eventId")
            event_id = raw_id.upper() if isinstance(raw_id, str) and len(raw_id) == 26 else None
            try:
                event = cast("dict[str, Any]", self._validate(item))
            except ValidationError as exc:
                return _rejection(index, event_id, exc)
        event_id = event["eventId"].upper()
        time_ms: int = event["eventTimeMs"]
        if time_ms > batch.latest_ms:
            return EventStatus(
                index, "rejected", event_id, "eventTimeMs", "more than 5 minutes in the future"
            )
        if time_ms < batch.oldest_ms:
            return EventStatus(
                index,
                "rejected",
                event_id,
                "eventTimeMs",
                "older than the retention period (feedback_retention_days)",
            )
        consent = event.get("consent")
        if consent is None or consent["telemetry"] != "granted":
            return EventStatus(index, "dropped", event_id)
        request: dict[str, Any] = event["request"]
        query_id = request.get("queryId")
        if query_id is not None and (require_token or "feedbackToken" in request):
            binding = (request.get("feedbackToken"), query_id, request.get("requestId"))
            if binding not in batch.tokens:  # a batch repeats a few tokens: check each once
                batch.tokens[binding] = self._check_token(*binding, batch.now_ms)
            problem = batch.tokens[binding]
            if problem is not None:
                return EventStatus(index, "rejected", event_id, "request.feedbackToken", problem)
        return self._anonymize(event, event_id, batch)

    def _check_token(
        self, token: str | None, query_id: str, request_id: str | None, now_ms: int
    ) -> str | None:
        """Why ``token`` does not prove this query (None: it does)."""
        if token is None:
            return "required for an event about a query (the search response's feedbackToken)"
        try:
            check_binding(self.signer.read(token, now_ms=now_ms), query_id, request_id)
        except InvalidToken as exc:
            return exc.message
        return None

    def _anonymize(self, event: dict[str, Any], event_id: str, batch: _Batch) -> PreparedEvent:
        """Rewrite the validated ``event`` (a fresh dict, ours to change) for storage."""
        day = event["eventTimeMs"] // _DAY_MS
        session = event["session"]
        hashes = batch.hashes
        raw = session.get("sessionId") or session["sessionIdHash"]
        session_hash = hashes.get((raw, day)) or self._hash(raw, day, hashes)
        stored_session = {"sessionIdHash": session_hash}
        user = session.get("userId") or session.get("userIdHash")
        user_hash = None
        if user is not None:
            user_hash = hashes.get((user, day)) or self._hash(user, day, hashes)
            stored_session["userIdHash"] = user_hash
        for name in ("rolesHash", "locale"):
            if name in session:
                stored_session[name] = session[name]
        event["session"] = stored_session
        event["eventId"] = event_id
        request = event["request"]
        request.pop("feedbackToken", None)
        result = event.get("result")
        if self._scrub:
            scrubbed = batch.scrubbed
            for name, fields in _TEXT_FIELDS:
                section: dict[str, Any] | None = event.get(name)
                if section is None:
                    continue
                for field in fields:
                    text = section.get(field)
                    if text is not None:
                        clean = scrubbed.get(text)
                        if clean is None:
                            clean = scrubbed[text] = scrub(text)
                        section[field] = clean
            if result is not None and "docId" in result:
                result["docId"] = scrub_emails(result["docId"])
        if result is None:
            doc_id = rank_shown = None
        else:
            doc_id, rank_shown = result.get("docId"), result.get("rankShown")
        return PreparedEvent(
            event_id,
            event["eventType"],
            event["eventTimeMs"],
            session_hash,
            user_hash,
            request.get("queryId"),
            request.get("requestId"),
            doc_id,
            rank_shown,
            to_json(event).decode("utf-8"),
        )

    def _hash(self, value: str, day: int, cache: dict[tuple[str, int], str]) -> str:
        """The hash of ``value`` on ``day``, remembered for one batch only (a batch
        repeats its sessions; raw ids are not kept beyond it). The caller looks in
        ``cache`` first: most ids of a batch are already there."""
        known = cache[(value, day)] = self.hasher.hash(value, day_from_index(day))
        return known


class _Batch:
    """What one batch works out once: its time window, and the token checks, hashes and
    scrubbed texts its events repeat (a batch holds a few sessions, queries and
    routes). Nothing here outlives the batch, so no raw id or text is kept."""

    __slots__ = ("hashes", "latest_ms", "now_ms", "oldest_ms", "scrubbed", "tokens")

    def __init__(self, now_ms: int, retention_days: int) -> None:
        self.now_ms = now_ms
        self.latest_ms = now_ms + MAX_FUTURE_MS
        self.oldest_ms = now_ms - retention_days * _DAY_MS
        self.tokens: dict[tuple[str | None, str, str | None], str | None] = {}
        self.hashes: dict[tuple[str, int], str] = {}
        self.scrubbed: dict[str, str] = {}


def _file_batches(path: Path, size: int) -> Iterator[tuple[list[int], list[object]]]:
    """(indexes, events) in batches: 1-based line numbers, or array positions."""
    with path.open("rb") as f:
        head = f.read(64).lstrip()
        f.seek(0)
        if head.startswith(b"["):
            items = _load(f.read())
            if not isinstance(items, list):
                raise InvalidInput(f"{path}: starts like a JSON array but is not one.")
            for start in range(0, len(items), size):
                chunk = items[start : start + size]
                yield list(range(start + 1, start + 1 + len(chunk))), chunk
            return
        yield from _line_batches(enumerate(f, start=1), size)


def _line_batches(
    lines: Iterable[tuple[int, bytes]], size: int
) -> Iterator[tuple[list[int], list[object]]]:
    numbers: list[int] = []
    batch: list[object] = []
    for number, line in lines:
        if not line.strip():
            continue
        numbers.append(number)
        batch.append(_load(line))
        if len(batch) == size:
            yield numbers, batch
            numbers, batch = [], []
    if batch:
        yield numbers, batch


# -- the store, for a workspace -------------------------------------------------------


def verify_events(workspace: Workspace) -> VerifyReport:
    """Check the whole chain of stored events (``amelio feedback verify``)."""
    return store.verify(workspace.engine, store.chain_key(secret_key(workspace.settings)))


def purge_events(
    workspace: Workspace, older_than_days: int | None = None, *, now_ms: int | None = None
) -> PurgeReport:
    """Delete events that happened more than ``older_than_days`` ago (default: the
    retention setting); the chain stays verifiable."""
    days = (
        workspace.settings.feedback_retention_days if older_than_days is None else older_than_days
    )
    if days < 0:
        raise InvalidInput("--older-than is a number of days, 0 or more.", field="older_than")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return store.purge(
        workspace.engine,
        store.chain_key(secret_key(workspace.settings)),
        before_ms=now_ms - days * _DAY_MS,
    )


def feedback_stats(workspace: Workspace) -> dict[str, Any]:
    """Stored events per type, their time span and the chain's length."""
    return store.stats(workspace.engine)
