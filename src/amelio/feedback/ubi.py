"""OpenSearch User Behavior Insights (UBI): Amelio's feedback in and out of that standard.

UBI (<https://github.com/o19s/ubi>) is the search community's open format for what
people do with search results: a *query* record per search (the hits it returned)
and an *event* record per action on them (a click, a purchase…), each a JSON object
checked by a JSON Schema. OpenSearch's UBI plugin stores them in its ``ubi_queries``
and ``ubi_events`` indexes; other tools (Quepid, OpenSearch's dashboards, judgment
builders) read them. Speaking it lets a team bring the clicks it already collects
into Amelio's relevance loop, and take Amelio's out to those tools.

The two records map onto Amelio's two halves of a search's feedback:

* a UBI **query** is an *impression*: the ranking shown for a query id, which the
  signals need to debias clicks by position (an event whose query was never shown
  counts for nothing); ``ingest`` writes it to the impression log, ``export`` writes
  one per logged impression;
* a UBI **event** is a ``MartyFeedbackEventV1`` about that query: ``ingest`` maps it
  and hands it to the :class:`~amelio.feedback.Collector`, so it is validated,
  anonymized, deduplicated and signed like any event (the table in
  ``docs/feedback.md#opensearch-ubi``).

Both directions validate every record against the standard's own JSON Schemas
(version 1.3.0, shipped in ``ubi_schemas/``, never fetched): a file that is not UBI
is refused line by line with the schema's reason, and an export that would not be
UBI is a bug that stops the export rather than a file other tools choke on.

Three things UBI does not carry are stated by the operator, not invented:

* **consent** — a UBI event has no consent field, and the collector drops an event
  without ``telemetry: granted``; ``ingest`` asks for ``consent="granted"`` (the CLI's
  ``--consent granted``), the operator's statement that the source collected the
  events with consent;
* **the feedback token** — events about a query must carry the token of the
  search response that showed it, which proves a client saw that query. An import is
  the operator's, who holds the workspace's key and vouches for the file, so
  ``ingest`` tells the collector not to ask for one (``require_token=False``); the
  public endpoint still demands one;
* **event ids** — UBI events have none; ``ingest`` derives a ULID from the event's
  time and a digest of its content, so importing a file twice stores nothing new.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError, best_match  # type: ignore[import-untyped]
from ulid import ULID

from amelio.db import insert_ignore, transaction
from amelio.db.schema import feedback_events, search_impressions
from amelio.errors import InvalidInput
from amelio.feedback.collector import Collector, _file_batches, _Unparsable
from amelio.feedback.schema import _KEY_PATTERN
from amelio.privacy.anonymize import SaltedHasher, day_from_index
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import validate_name

__all__ = [
    "ACTIONS",
    "UBI_VERSION",
    "UbiExportReport",
    "UbiIngestReport",
    "export_ubi",
    "ingest_ubi",
    "ubi_errors",
    "ubi_schema",
]

UBI_VERSION = "1.3.0"
SCHEMA_DIR = Path(__file__).resolve().parent / "ubi_schemas"
QUERIES_FILE = "ubi_queries.ndjson"
EVENTS_FILE = "ubi_events.ndjson"
#: ``application`` of the records Amelio writes.
APPLICATION = "amelio"
#: The profile name impressions imported from UBI are logged under.
IMPORTED_PROFILE = "ubi"

Kind = Literal["query", "event"]

#: UBI ``action_name`` → Amelio event type. UBI's standard click names, then
#: Amelio's own types, which ``export`` writes as action names (UBI allows any).
ACTIONS: Mapping[str, str] = {
    "click_through": "result_clicked",
    "click": "result_clicked",
    "result_dwell_time": "result_dwell_time",
    "query_reformulated": "query_reformulated",
    "query_abandoned": "query_abandoned",
    "result_pinned": "result_pinned",
    "result_hidden": "result_hidden",
}
#: Amelio event type → the ``action_name`` and ``message_type`` an export writes.
_EXPORTED: Mapping[str, tuple[str, str]] = {
    "result_clicked": ("click_through", "CLICK"),
    "result_dwell_time": ("result_dwell_time", "DWELL"),
    "query_reformulated": ("query_reformulated", "QUERY"),
    "query_abandoned": ("query_abandoned", "QUERY"),
    "result_pinned": ("result_pinned", "FEEDBACK"),
    "result_hidden": ("result_hidden", "FEEDBACK"),
}
#: Event types that name a result (UBI's ``event_attributes.object``).
_ABOUT_RESULT = frozenset({"result_clicked", "result_dwell_time", "result_pinned", "result_hidden"})
#: Where an exported event keeps what UBI has no field for (its extension point).
_EVENT_ID_ATTR = "amelio_event_id"
_DWELL_ATTR = "dwell_ms"
_KEY = re.compile(_KEY_PATTERN)
_IMPRESSION_ID_CHARS = 64  # search_impressions.query_id / request_id
#: Lines read, checked and stored at a time: a file's size does not bound memory.
_BATCH_LINES = 1000
#: Bound parameters per INSERT: what the oldest SQLite builds allow a statement.
_MAX_PARAMETERS = 999
#: Ids per ``IN (…)`` lookup, and rows fetched at a time by an export.
_ID_CHUNK = 500
_READ_BATCH = 1000
#: A collector's rejection names a field of the MartyFeedbackEventV1 the import built;
#: the user wrote the UBI one. (The session fields never get here: UBI's 100
#: characters fit the collector's 200, and ``context.view`` is set only when valid.)
_UBI_FIELDS: Mapping[str, str] = {
    "eventTimeMs": "timestamp",
    "request.queryId": "query_id",
    "result.docId": "event_attributes.object.object_id",
    "result.rankShown": "event_attributes.position.ordinal",
    "outcome.dwellMs": f"event_attributes.{_DWELL_ATTR}",
}


def _open_choices(node: Any) -> Any:
    """The schema with each ``oneOf`` of plain strings read as ``anyOf``.

    UBI 1.3.0 writes "one of our names, or any name" (``action_name``, ``object_id_type``)
    and "a UUID, or any id" (``query_id``) as a ``oneOf`` whose second branch also
    matches everything the first does, so read literally it refuses ``click_through``
    and every UUID query id, its own examples included (``tests/test_feedback_ubi.py`` keeps
    that on record). ``anyOf`` is what those branches mean; a ``oneOf`` of anything
    else (``position``: an ordinal *or* x,y) keeps its meaning."""
    if isinstance(node, list):
        return [_open_choices(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _open_choices(v) for k, v in node.items()}
    branches = out.get("oneOf")
    if isinstance(branches, list) and all(
        isinstance(b, dict) and b.get("type") == "string" for b in branches
    ):
        out["anyOf"] = out.pop("oneOf")
    return out


def ubi_schema(kind: Kind) -> dict[str, Any]:
    """The UBI JSON Schema of a ``kind`` record, as published (unchanged)."""
    name = "query.request.schema.json" if kind == "query" else "event.schema.json"
    return json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@cache
def _validator(kind: Kind) -> Draft202012Validator:
    schema = _open_choices(ubi_schema(kind))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FormatChecker())


def ubi_errors(record: object, kind: Kind) -> list[str]:
    """Why ``record`` is not a valid UBI ``kind`` (empty: it is), each reason prefixed
    with the path of the field at fault."""
    errors = sorted(_validator(kind).iter_errors(record), key=lambda e: list(e.path))
    return [f"{_path(e) or kind}: {e.message}" for e in errors]


def _first_error(record: object, kind: Kind) -> tuple[str, str] | None:
    """``(field, reason)`` of the most telling error (None: ``record`` is valid): a
    rejected line names one reason, so the others need not be sorted."""
    error = best_match(_validator(kind).iter_errors(record))
    return None if error is None else (_path(error) or kind, error.message)


def _path(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _kind(record: Mapping[str, Any]) -> Kind:
    """A line of either file: events name an action, queries a user query."""
    return "event" if "action_name" in record else "query"


def _time_ms(text: str) -> int:
    """UBI's ISO 8601 timestamp in Unix ms; one without an offset is taken as UTC
    (the schema's own example ``2018-11-13T20:20:39`` has none). The schema's
    ``date-time`` is only an annotation, so a bad one is refused here."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise _Refused("timestamp", str(exc)) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _timestamp(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _event_id(time_ms: int, record: Mapping[str, Any]) -> str:
    """A ULID from the event's time and content: the same UBI event always gets the
    same id, so a second import of a file is answered ``duplicate``."""
    digest = hashlib.sha256(
        json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")
    ).digest()
    return str(ULID.from_bytes(max(time_ms, 0).to_bytes(6, "big") + digest[:10]))


# -- ingest ----------------------------------------------------------------------------


@dataclass
class UbiIngestReport:
    """What became of each line: queries become impressions, events go through the
    collector (``accepted``, ``duplicate``, ``rejected``, ``dropped``), and events with
    an action Amelio has no type for are ``skipped``."""

    queries: dict[str, int] = field(
        default_factory=lambda: {"imported": 0, "duplicate": 0, "rejected": 0}
    )
    events: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("accepted", "duplicate", "rejected", "dropped", "skipped"), 0
        )
    )
    #: ``(line, field, reason)`` of each rejected or skipped line.
    problems: list[tuple[int, str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "events": self.events,
            "problems": [
                {"line": line, "field": where, "reason": reason}
                for line, where, reason in self.problems
            ],
        }


class _Refused(Exception):
    """A UBI line that cannot become Amelio feedback, and why."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(reason)
        self.where, self.reason = where, reason


def _query_impression(
    record: Mapping[str, Any], settings: Any, project: str, hasher: SaltedHasher, now_ms: int
) -> dict[str, Any]:
    from amelio.search.service import query_key

    query_id = record.get("query_id")
    if query_id is None:
        raise _Refused("query_id", "required: events join their query by it")
    if not query_id:
        raise _Refused("query_id", "empty: no event could name this query")
    if len(query_id) > _IMPRESSION_ID_CHARS:
        raise _Refused("query_id", f"at most {_IMPRESSION_ID_CHARS} characters here")
    request_id = record.get("query_response_id") or query_id
    if len(request_id) > _IMPRESSION_ID_CHARS:
        raise _Refused("query_response_id", f"at most {_IMPRESSION_ID_CHARS} characters")
    key = query_key(settings, record["user_query"])
    if not key:
        raise _Refused("user_query", "has no words to search for")
    hits = record.get("query_response_hit_ids") or []
    if any(not 1 <= len(h) <= 256 for h in hits):
        raise _Refused("query_response_hit_ids", "a document id is 1 to 256 characters")
    first_rank: dict[str, int] = {}
    for rank, doc in enumerate(hits, start=1):
        if doc in first_rank:  # the signals would count the document shown twice
            raise _Refused(
                "query_response_hit_ids",
                f"ranks {first_rank[doc]} and {rank} "
                "are the same document: a ranking shows each document once",
            )
        first_rank[doc] = rank
    experiment, interleaving = _interleaving(record, hits)
    created_ms = _time_ms(record["timestamp"]) if "timestamp" in record else now_ms
    client = record.get("client_id")
    session_hash = hasher.hash(client, day_from_index(created_ms // 86_400_000)) if client else None
    return {
        "query_id": query_id,
        "request_id": request_id,
        "project": project,
        "query_norm": key,
        "profile": IMPORTED_PROFILE,
        "alpha": 0.0,
        "beta": 0.0,
        "results": [[doc, rank, 0.0] for rank, doc in enumerate(hits, start=1)],
        "explored": False,
        "swapped_rank": None,
        "created_ms": created_ms,
        "session_hash": session_hash,
        "user_hash": None,
        "experiment": experiment,
        "interleaving": interleaving,
    }


def _interleaving(
    record: Mapping[str, Any], hits: Sequence[str]
) -> tuple[str | None, dict[str, Any] | None]:
    """The interleaving experiment a query's ``query_attributes`` name (as Amelio's
    export writes them), checked against the hits it was shown with; (None, None)
    when it names none."""
    from amelio.search.interleave import Interleaving

    attributes = record.get("query_attributes") or {}
    name, raw = attributes.get("experiment"), attributes.get("interleaving")
    if name is None and raw is None:
        return None, None
    if not isinstance(name, str) or not 1 <= len(name) <= 100:
        raise _Refused("query_attributes.experiment", "an experiment's name, 1 to 100 characters")
    if not isinstance(raw, dict):
        raise _Refused(
            "query_attributes.interleaving",
            "an object {method, teams, a, b} saying which ranker showed each hit",
        )
    try:
        shown = Interleaving.from_dict(raw, hits)
    except ValueError as exc:
        raise _Refused("query_attributes.interleaving", str(exc)) from None
    return name, shown.to_dict()


def _marty_event(record: Mapping[str, Any], event_type: str, consent: str) -> dict[str, Any]:
    """The ``MartyFeedbackEventV1`` a UBI event stands for; the collector checks it.

    It carries no feedbackToken: the import is the operator's, and the collector is
    told not to ask for one (``require_token=False``)."""
    query_id = record.get("query_id")
    if query_id is None:
        raise _Refused("query_id", "required: Amelio's search events are about a query")
    who = record.get("session_id") or record.get("client_id")
    if not who:
        raise _Refused(
            "session_id",
            "give session_id or client_id: every event needs a session (hashed, never stored)",
        )
    time_ms = _time_ms(record["timestamp"])
    session: dict[str, Any] = {"sessionId": who}
    if record.get("user_id"):
        session["userId"] = record["user_id"]
    event: dict[str, Any] = {
        "eventVersion": "v1",
        "eventId": _event_id(time_ms, record),
        "eventTimeMs": time_ms,
        "eventType": event_type,
        "session": session,
        "request": {"queryId": query_id},
        "consent": {"telemetry": consent},
    }
    application = record.get("application")
    if application and _KEY.match(application):
        event["context"] = {"view": application}
    attributes: Mapping[str, Any] = record.get("event_attributes") or {}
    if event_type in _ABOUT_RESULT:
        thing = attributes.get("object") or {}
        if "object_id" not in thing:
            raise _Refused(
                "event_attributes.object.object_id",
                f"required for {record['action_name']!r}: which result",
            )
        result: dict[str, Any] = {"docId": str(thing["object_id"])}
        ordinal = (attributes.get("position") or {}).get("ordinal")
        if ordinal is not None:
            result["rankShown"] = ordinal
        event["result"] = result
    if event_type == "result_dwell_time":
        dwell = attributes.get(_DWELL_ATTR)
        if dwell is None:
            raise _Refused(
                f"event_attributes.{_DWELL_ATTR}", "required for a dwell event: how long, in ms"
            )
        event["outcome"] = {"dwellMs": dwell}
    return event


def _ubi_field(marty_field: str) -> str:
    """The UBI field a collector's rejection of ``marty_field`` is about: the user
    wrote the UBI record, never the event."""
    for inner, outer in _UBI_FIELDS.items():
        if marty_field == inner or marty_field.startswith(inner + "."):
            return outer
    return marty_field


def _event_types(actions: Mapping[str, str] | None) -> dict[str, str]:
    """UBI action name → event type: the standard's, then the operator's ``actions``,
    which may only name a type :func:`_marty_event` can build."""
    mapping = dict(ACTIONS)
    allowed = sorted(set(ACTIONS.values()))
    for name, mapped in (actions or {}).items():
        if mapped not in allowed:
            raise InvalidInput(
                f"{name}={mapped}: {mapped!r} is not an event type a UBI "
                f"event can become (one of {', '.join(allowed)})",
                field="map",
            )
        mapping[name] = mapped
    return mapping


def ingest_ubi(
    workspace: Workspace,
    path: Path | str,
    *,
    consent: str,
    project: str = "default",
    actions: Mapping[str, str] | None = None,
) -> UbiIngestReport:
    """Import a UBI file (queries, events, or both mixed; NDJSON or a JSON array).

    ``consent`` is what the events' missing consent field is taken to be: only
    ``"granted"`` events are stored. ``actions`` maps more UBI action names onto
    Amelio event types (``{"add_to_cart": "result_pinned"}``); an action with no type
    is skipped and reported. Queries are logged as impressions of ``project``.

    The file is read batch by batch, so its size does not bound memory: each batch's
    queries are logged before its events are stored, which is all an event needs
    (the aggregator joins an event to its impression later, wherever it came from).
    """
    if consent not in ("granted", "denied", "unknown"):
        raise InvalidInput(
            f"consent is granted, denied or unknown, not {consent!r}", field="consent"
        )
    validate_name(project)
    mapping = _event_types(actions)
    collector = Collector(workspace)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    report = UbiIngestReport()
    for numbers, items in _file_batches(Path(path), _BATCH_LINES):
        impressions: list[dict[str, Any]] = []
        events: list[tuple[int, dict[str, Any]]] = []
        for number, item in zip(numbers, items, strict=True):
            kind: Kind = "event"
            try:
                if isinstance(item, _Unparsable):
                    raise _Refused("", item.reason)
                if not isinstance(item, dict):
                    raise _Refused("", "a UBI record is a JSON object")
                kind = _kind(item)
                error = _first_error(item, kind)
                if error is not None:
                    where, reason = error
                    raise _Refused(where, f"not a UBI {kind} ({reason})")
                if kind == "query":
                    impressions.append(
                        _query_impression(
                            item, workspace.settings, project, collector.hasher, now_ms
                        )
                    )
                    continue
                event_type = mapping.get(item["action_name"])
                if event_type is None:
                    report.events["skipped"] += 1
                    report.problems.append((number, "action_name", _unmapped(item)))
                    continue
                events.append((number, _marty_event(item, event_type, consent)))
            except _Refused as refusal:
                (report.queries if kind == "query" else report.events)["rejected"] += 1
                report.problems.append((number, refusal.where, refusal.reason))
        _store_impressions(workspace, impressions, report)
        _store_events(collector, events, report)
    report.problems.sort()
    return report


def _unmapped(record: Mapping[str, Any]) -> str:
    """Why an event with no Amelio type is skipped, and what to do about it."""
    if record["action_name"] in ("impression", "view"):
        return "impressions come from the UBI queries' hit lists"
    return (
        f"{record['action_name']!r} has no Amelio event type; map it with --map ACTION=EVENT_TYPE"
    )


def _store_events(
    collector: Collector, events: Sequence[tuple[int, dict[str, Any]]], report: UbiIngestReport
) -> None:
    """Hand a batch's ``(line, event)`` to the collector, naming each rejection by its
    line and the UBI field it came from."""
    size = collector.settings.feedback_max_events
    for start in range(0, len(events), size):
        chunk = events[start : start + size]
        result = collector.ingest(
            [e for _, e in chunk],
            rate_limit=False,
            require_token=False,
            indexes=[n for n, _ in chunk],
        )
        for status in result.statuses:
            report.events[status.status] += 1
            if status.status == "rejected":
                report.problems.append(
                    (status.position, _ubi_field(status.field or ""), status.reason or "")
                )


def _store_impressions(
    workspace: Workspace, rows: Sequence[dict[str, Any]], report: UbiIngestReport
) -> None:
    """Log a batch's queries as impressions, in one transaction. A query id the log
    already holds (an earlier import, a line above, a search this server answered,
    even one answered meanwhile) is kept and counted ``duplicate``: the insert ignores
    it rather than failing on the unique key and losing the batch."""
    if not rows:
        return
    per_statement = _MAX_PARAMETERS // len(rows[0])
    imported = 0
    with transaction(workspace.engine) as conn:
        for start in range(0, len(rows), per_statement):
            imported += len(
                insert_ignore(
                    conn,
                    search_impressions,
                    list(rows[start : start + per_statement]),
                    ["query_id"],
                    returning=search_impressions.c.query_id,
                )
            )
    report.queries["imported"] += imported
    report.queries["duplicate"] += len(rows) - imported


# -- export ----------------------------------------------------------------------------


@dataclass
class UbiExportReport:
    """How many records each file got, and the events UBI has no place for."""

    queries: int = 0
    events: int = 0
    #: Stored events left out: about an assistant answer rather than a search query.
    skipped: int = 0
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "events": self.events,
            "skipped": self.skipped,
            "files": self.files,
        }


def _query_record(row: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "application": APPLICATION,
        "query_id": row.query_id,
        "user_query": row.query_norm,
        "timestamp": _timestamp(row.created_ms),
        "query_response_id": row.request_id,
        "query_response_hit_ids": [doc for doc, _, _ in sorted(row.results, key=lambda r: r[1])],
        "query_attributes": {"project": row.project, "profile": row.profile},
        "object_id_field": "_id",
    }
    if row.experiment is not None:  # which ranker showed each hit: the experiment's credit
        record["query_attributes"] |= {
            "experiment": row.experiment,
            "interleaving": row.interleaving,
        }
    if row.session_hash:  # a pseudonym, the only client identity Amelio keeps
        record["client_id"] = row.session_hash
    return record


def _event_record(row: Any, ranks: Mapping[tuple[str, str], int]) -> dict[str, Any] | None:
    """The UBI event for a stored event, or None when UBI has no place for it."""
    exported = _EXPORTED.get(row.event_type)
    if exported is None or row.query_id is None:
        return None
    payload = json.loads(row.payload)
    action, message_type = exported
    session = payload["session"]
    record: dict[str, Any] = {
        "application": (payload.get("context") or {}).get("view") or APPLICATION,
        "action_name": action,
        "query_id": row.query_id,
        "session_id": session["sessionIdHash"],
        "client_id": session["sessionIdHash"],
        "timestamp": _timestamp(row.event_time_ms),
        "message_type": message_type,
    }
    if "userIdHash" in session:
        record["user_id"] = session["userIdHash"]
    attributes: dict[str, Any] = {_EVENT_ID_ATTR: row.event_id}
    if row.doc_id is not None:
        attributes["object"] = {"object_id": row.doc_id, "object_id_field": "_id"}
        rank = row.rank_shown or ranks.get((row.query_id, row.doc_id))
        if rank is not None:
            attributes["position"] = {"ordinal": rank}
    dwell = (payload.get("outcome") or {}).get("dwellMs")
    if row.event_type == "result_dwell_time" and dwell is not None:
        attributes[_DWELL_ATTR] = dwell
    if "position" in attributes:  # UBI requires a position in event_attributes
        record["event_attributes"] = attributes
    return record


def _ranks(conn: sa.Connection, rows: Sequence[Any]) -> dict[tuple[str, str], int]:
    """``(query id, doc id) → rank`` from the impression log, for the events of
    ``rows`` that name a document but not its rank: only those need the log, so a
    batch reads the few impressions it joins rather than the export the whole log."""
    wanted = sorted(
        {
            r.query_id
            for r in rows
            if r.doc_id is not None and r.rank_shown is None and r.query_id is not None
        }
    )
    ranks: dict[tuple[str, str], int] = {}
    i = search_impressions.c
    for start in range(0, len(wanted), _ID_CHUNK):
        for imp in conn.execute(
            sa.select(i.query_id, i.results).where(
                i.query_id.in_(wanted[start : start + _ID_CHUNK])
            )
        ):
            for doc, rank, _ in imp.results:
                ranks.setdefault((imp.query_id, doc), rank)
    return ranks


def _write(path: Path, records: Iterable[dict[str, Any]], kind: Kind) -> tuple[Path, int]:
    """Write ``records`` as NDJSON to a new hidden file beside ``path`` (returned, with
    the count, to be renamed over it), each checked against the UBI schema first.

    The file is made afresh (O_EXCL, a random name), so nothing planted beside the
    target, such as a symlink, is ever written through; whatever stops the writing
    (a record that does not validate, a database or disk error) removes it."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    partial = Path(name)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for record in records:
                errors = ubi_errors(record, kind)
                if errors:  # a mapping bug: stop rather than write what other tools refuse
                    raise RuntimeError(f"An exported UBI {kind} does not validate: {errors}")
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return partial, count


def export_ubi(
    workspace: Workspace, out_dir: Path | str, *, since_ms: int | None = None, force: bool = False
) -> UbiExportReport:
    """Write ``ubi_queries.ndjson`` (one UBI query per logged impression) and
    ``ubi_events.ndjson`` (one UBI event per stored search event) to ``out_dir``,
    from ``since_ms`` on (default: everything); refuses to overwrite without ``force``.

    Both files are written in full before either replaces its namesake, so a failed
    export leaves the previous pair as it was rather than one new file beside an old
    one. Rows are read in batches, never the whole log at once."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = [out / QUERIES_FILE, out / EVENTS_FILE]
    existing = [p.name for p in targets if p.exists()]
    if existing and not force:
        raise InvalidInput(
            f"{out} already holds {', '.join(existing)}: pass --force to "
            "replace them, or choose another folder.",
            field="out",
        )
    report = UbiExportReport()
    i, e = search_impressions.c, feedback_events.c
    with workspace.engine.connect() as conn:
        query = (
            sa.select(
                i.query_id,
                i.request_id,
                i.project,
                i.query_norm,
                i.profile,
                i.results,
                i.created_ms,
                i.session_hash,
                i.experiment,
                i.interleaving,
            )
            .order_by(i.id)
            .execution_options(yield_per=_READ_BATCH)
        )
        if since_ms is not None:
            query = query.where(i.created_ms >= since_ms)
        events = (
            sa.select(
                e.event_id,
                e.event_type,
                e.event_time_ms,
                e.query_id,
                e.doc_id,
                e.rank_shown,
                e.payload,
            )
            .order_by(e.seq)
            .execution_options(yield_per=_READ_BATCH)
        )
        if since_ms is not None:
            events = events.where(e.event_time_ms >= since_ms)

        def queries() -> Iterator[dict[str, Any]]:
            for row in conn.execute(query):
                yield _query_record(row)

        def records() -> Iterator[dict[str, Any]]:
            for batch in conn.execute(events).partitions():
                ranks = _ranks(conn, batch)
                for row in batch:
                    record = _event_record(row, ranks)
                    if record is None:
                        report.skipped += 1
                    else:
                        yield record

        written, report.queries = _write(targets[0], queries(), "query")
        try:
            events_file, report.events = _write(targets[1], records(), "event")
        except BaseException:
            written.unlink(missing_ok=True)
            raise
    # A rename replaces a link at the target's name, never the file it points to.
    os.replace(written, targets[0])
    os.replace(events_file, targets[1])
    report.files = [str(p) for p in targets]
    return report
