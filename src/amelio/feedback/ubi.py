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
  the operator's, run with the workspace's own key, so ``ingest`` issues the token
  for each query id it imports; the public endpoint still demands one;
* **event ids** — UBI events have none; ``ingest`` derives a ULID from the event's
  time and a digest of its content, so importing a file twice stores nothing new.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]
from ulid import ULID

from amelio.db import transaction
from amelio.db.schema import feedback_events, search_impressions
from amelio.errors import InvalidInput
from amelio.feedback.anonymize import SaltedHasher, day_from_index
from amelio.feedback.collector import Collector, _file_batches, _Unparsable
from amelio.feedback.schema import EVENT_TYPES
from amelio.workspace import Workspace

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
_ABOUT_RESULT = frozenset({"result_clicked", "result_dwell_time", "result_pinned",
                           "result_hidden"})
#: Where an exported event keeps what UBI has no field for (its extension point).
_EVENT_ID_ATTR = "amelio_event_id"
_DWELL_ATTR = "dwell_ms"
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
_IMPRESSION_ID_CHARS = 64  # search_impressions.query_id / request_id


def _open_choices(node: Any) -> Any:
    """The schema with each ``oneOf`` of plain strings read as ``anyOf``.

    UBI 1.3.0 writes "one of our names, or any name" (``action_name``, ``object_id_type``)
    and "a UUID, or any id" (``query_id``) as a ``oneOf`` whose second branch also
    matches everything the first does, so read literally it refuses ``click_through``
    and every UUID query id, its own examples included (``tests/test_ubi.py`` keeps
    that on record). ``anyOf`` is what those branches mean; a ``oneOf`` of anything
    else (``position``: an ordinal *or* x,y) keeps its meaning."""
    if isinstance(node, list):
        return [_open_choices(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _open_choices(v) for k, v in node.items()}
    branches = out.get("oneOf")
    if isinstance(branches, list) and all(isinstance(b, dict) and b.get("type") == "string"
                                          for b in branches):
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
    return [f"{'.'.join(str(p) for p in e.path) or kind}: {e.message}" for e in errors]


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
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def _event_id(time_ms: int, record: Mapping[str, Any]) -> str:
    """A ULID from the event's time and content: the same UBI event always gets the
    same id, so a second import of a file is answered ``duplicate``."""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False)
                            .encode("utf-8")).digest()
    return str(ULID.from_bytes(max(time_ms, 0).to_bytes(6, "big") + digest[:10]))


# -- ingest ----------------------------------------------------------------------------


@dataclass
class UbiIngestReport:
    """What became of each line: queries become impressions, events go through the
    collector (``accepted``, ``duplicate``, ``rejected``, ``dropped``), and events with
    an action Amelio has no type for are ``skipped``."""

    queries: dict[str, int] = field(
        default_factory=lambda: {"imported": 0, "duplicate": 0, "rejected": 0})
    events: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("accepted", "duplicate", "rejected", "dropped", "skipped"), 0))
    #: ``(line, field, reason)`` of each rejected or skipped line.
    problems: list[tuple[int, str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"queries": self.queries, "events": self.events,
                "problems": [{"line": line, "field": where, "reason": reason}
                             for line, where, reason in self.problems]}


class _Refused(Exception):
    """A UBI line that cannot become Amelio feedback, and why."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(reason)
        self.where, self.reason = where, reason


def _records(path: Path) -> Iterator[tuple[int, object]]:
    """``(line number or array position, decoded record)``, read as ``amelio feedback
    ingest`` reads an event file (NDJSON or one JSON array; a line that is not JSON is
    an :class:`_Unparsable` of its own, its neighbours go on)."""
    for numbers, items in _file_batches(path, 1000):
        yield from zip(numbers, items, strict=True)


def _query_impression(record: Mapping[str, Any], settings: Any, project: str,
                      hasher: SaltedHasher, now_ms: int) -> dict[str, Any]:
    from amelio.search.service import query_key

    query_id = record.get("query_id")
    if query_id is None:
        raise _Refused("query_id", "required: events join their query by it")
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
    created_ms = _time_ms(record["timestamp"]) if "timestamp" in record else now_ms
    client = record.get("client_id")
    session_hash = (hasher.hash(client, day_from_index(created_ms // 86_400_000))
                    if client else None)
    return {"query_id": query_id, "request_id": request_id, "project": project,
            "query_norm": key, "profile": IMPORTED_PROFILE, "alpha": 0.0, "beta": 0.0,
            "results": [[doc, rank, 0.0] for rank, doc in enumerate(hits, start=1)],
            "explored": False, "swapped_rank": None, "created_ms": created_ms,
            "session_hash": session_hash, "user_hash": None}


def _marty_event(record: Mapping[str, Any], event_type: str, consent: str,
                 tokens: dict[str, str], issue: Any) -> dict[str, Any]:
    """The ``MartyFeedbackEventV1`` a UBI event stands for; the collector checks it."""
    query_id = record.get("query_id")
    if query_id is None:
        raise _Refused("query_id", "required: Amelio's search events are about a query")
    who = record.get("session_id") or record.get("client_id")
    if not who:
        raise _Refused("session_id", "give session_id or client_id: every event needs a "
                       "session (hashed, never stored)")
    time_ms = _time_ms(record["timestamp"])
    session: dict[str, Any] = {"sessionId": who}
    if record.get("user_id"):
        session["userId"] = record["user_id"]
    if query_id not in tokens:
        tokens[query_id] = issue(query_id)
    event: dict[str, Any] = {
        "eventVersion": "v1", "eventId": _event_id(time_ms, record), "eventTimeMs": time_ms,
        "eventType": event_type, "session": session,
        "request": {"queryId": query_id, "feedbackToken": tokens[query_id]},
        "consent": {"telemetry": consent}}
    application = record.get("application")
    if application and _KEY.match(application):
        event["context"] = {"view": application}
    attributes: Mapping[str, Any] = record.get("event_attributes") or {}
    if event_type in _ABOUT_RESULT:
        thing = attributes.get("object") or {}
        if "object_id" not in thing:
            raise _Refused("event_attributes.object.object_id",
                           f"required for {record['action_name']!r}: which result")
        result: dict[str, Any] = {"docId": str(thing["object_id"])}
        ordinal = (attributes.get("position") or {}).get("ordinal")
        if ordinal is not None:
            result["rankShown"] = ordinal
        event["result"] = result
    if event_type == "result_dwell_time":
        dwell = attributes.get(_DWELL_ATTR)
        if dwell is None:
            raise _Refused(f"event_attributes.{_DWELL_ATTR}",
                           "required for a dwell event: how long, in ms")
        event["outcome"] = {"dwellMs": dwell}
    return event


def ingest_ubi(workspace: Workspace, path: Path | str, *, consent: str,
               project: str = "default", actions: Mapping[str, str] | None = None
               ) -> UbiIngestReport:
    """Import a UBI file (queries, events, or both mixed; NDJSON or a JSON array).

    ``consent`` is what the events' missing consent field is taken to be: only
    ``"granted"`` events are stored. ``actions`` maps more UBI action names onto
    Amelio event types (``{"add_to_cart": "result_pinned"}``); an action with no type
    is skipped and reported. Queries are logged as impressions of ``project``.
    """
    if consent not in ("granted", "denied", "unknown"):
        raise InvalidInput(f"consent is granted, denied or unknown, not {consent!r}",
                           field="consent")
    mapping = dict(ACTIONS)
    for name, mapped in (actions or {}).items():
        if mapped not in EVENT_TYPES:
            raise InvalidInput(f"{name}={mapped}: {mapped!r} is not an event type "
                               f"(one of {', '.join(EVENT_TYPES)})", field="map")
        mapping[name] = mapped
    settings = workspace.settings
    collector = Collector(workspace)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    report = UbiIngestReport()
    tokens: dict[str, str] = {}
    request_ids: dict[str, str] = {}

    def issue(query_id: str) -> str:
        return collector.signer.issue(query_id, request_ids.get(query_id) or query_id)

    impressions: list[tuple[int, dict[str, Any]]] = []
    events: list[tuple[int, dict[str, Any]]] = []
    for number, item in _records(Path(path)):
        try:
            if isinstance(item, _Unparsable):
                raise _Refused("", item.reason)
            if not isinstance(item, dict):
                raise _Refused("", "a UBI record is a JSON object")
            kind = _kind(item)
            errors = ubi_errors(item, kind)
            if errors:
                where, _, reason = errors[0].partition(": ")
                raise _Refused(where, f"not a UBI {kind} ({reason})")
            if kind == "query":
                row = _query_impression(item, settings, project, collector.hasher, now_ms)
                request_ids[row["query_id"]] = row["request_id"]
                impressions.append((number, row))
                continue
            event_type = mapping.get(item["action_name"])
            if event_type is None:
                report.events["skipped"] += 1
                report.problems.append((number, "action_name", (
                    f"{item['action_name']!r} has no Amelio event type; map it with "
                    "--map ACTION=EVENT_TYPE" if item["action_name"] not in ("impression",
                                                                               "view")
                    else "impressions come from the UBI queries' hit lists")))
                continue
            events.append((number, _marty_event(item, event_type, consent, tokens, issue)))
        except _Refused as refusal:
            which = "queries" if isinstance(item, dict) and _kind(item) == "query" else "events"
            getattr(report, which)["rejected"] += 1
            report.problems.append((number, refusal.where, refusal.reason))
    _store_impressions(workspace, impressions, report)
    for start in range(0, len(events), settings.feedback_max_events):
        chunk = events[start:start + settings.feedback_max_events]
        result = collector.ingest([e for _, e in chunk], rate_limit=False,
                                  indexes=[n for n, _ in chunk])
        for status in result.statuses:
            report.events[status.status] += 1
            if status.status == "rejected":
                report.problems.append((status.position, status.field or "",
                                        status.reason or ""))
    report.problems.sort()
    return report


def _store_impressions(workspace: Workspace, rows: Sequence[tuple[int, dict[str, Any]]],
                       report: UbiIngestReport) -> None:
    """Log the imported queries as impressions, in one transaction; a query id the log
    already holds (an earlier import, or a search this server answered) is kept."""
    if not rows:
        return
    with transaction(workspace.engine) as conn:
        known: set[str] = set()
        ids = [r["query_id"] for _, r in rows]
        for start in range(0, len(ids), 500):
            known |= set(conn.scalars(sa.select(search_impressions.c.query_id).where(
                search_impressions.c.query_id.in_(ids[start:start + 500]))))
        fresh = []
        for _, row in rows:
            if row["query_id"] in known:
                report.queries["duplicate"] += 1
            else:
                known.add(row["query_id"])
                fresh.append(row)
        if fresh:
            conn.execute(search_impressions.insert(), fresh)
        report.queries["imported"] += len(fresh)


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
        return {"queries": self.queries, "events": self.events, "skipped": self.skipped,
                "files": self.files}


def _query_record(row: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "application": APPLICATION, "query_id": row.query_id, "user_query": row.query_norm,
        "timestamp": _timestamp(row.created_ms), "query_response_id": row.request_id,
        "query_response_hit_ids": [doc for doc, _, _ in sorted(row.results,
                                                                key=lambda r: r[1])],
        "query_attributes": {"project": row.project, "profile": row.profile},
        "object_id_field": "_id"}
    if row.session_hash:  # a pseudonym, the only client identity Amelio keeps
        record["client_id"] = row.session_hash
    return record


def _event_record(row: Any, ranks: Mapping[str, Mapping[str, int]]) -> dict[str, Any] | None:
    """The UBI event for a stored event, or None when UBI has no place for it."""
    exported = _EXPORTED.get(row.event_type)
    if exported is None or row.query_id is None:
        return None
    payload = json.loads(row.payload)
    action, message_type = exported
    session = payload["session"]
    record: dict[str, Any] = {
        "application": (payload.get("context") or {}).get("view") or APPLICATION,
        "action_name": action, "query_id": row.query_id,
        "session_id": session["sessionIdHash"], "client_id": session["sessionIdHash"],
        "timestamp": _timestamp(row.event_time_ms), "message_type": message_type}
    if "userIdHash" in session:
        record["user_id"] = session["userIdHash"]
    attributes: dict[str, Any] = {_EVENT_ID_ATTR: row.event_id}
    if row.doc_id is not None:
        attributes["object"] = {"object_id": row.doc_id, "object_id_field": "_id"}
        rank = row.rank_shown or ranks.get(row.query_id, {}).get(row.doc_id)
        if rank is not None:
            attributes["position"] = {"ordinal": rank}
    dwell = (payload.get("outcome") or {}).get("dwellMs")
    if row.event_type == "result_dwell_time" and dwell is not None:
        attributes[_DWELL_ATTR] = dwell
    if "position" in attributes:  # UBI requires a position in event_attributes
        record["event_attributes"] = attributes
    return record


def _write(path: Path, records: Iterable[dict[str, Any]], kind: Kind) -> int:
    """Write ``records`` as NDJSON, each checked against the UBI schema first; the
    file appears only once complete (a failed export leaves no half file)."""
    partial = path.with_suffix(path.suffix + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as out:
        for record in records:
            errors = ubi_errors(record, kind)
            if errors:  # a mapping bug: stop rather than write what other tools refuse
                out.close()
                partial.unlink()
                raise RuntimeError(f"An exported UBI {kind} does not validate: {errors}")
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    partial.replace(path)
    return count


def export_ubi(workspace: Workspace, out_dir: Path | str, *, since_ms: int | None = None,
               force: bool = False) -> UbiExportReport:
    """Write ``ubi_queries.ndjson`` (one UBI query per logged impression) and
    ``ubi_events.ndjson`` (one UBI event per stored search event) to ``out_dir``,
    from ``since_ms`` on (default: everything); refuses to overwrite without ``force``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = [out / QUERIES_FILE, out / EVENTS_FILE]
    existing = [p.name for p in targets if p.exists()]
    if existing and not force:
        raise InvalidInput(f"{out} already holds {', '.join(existing)}: pass --force to "
                           "replace them, or choose another folder.", field="out")
    report = UbiExportReport()
    i, e = search_impressions.c, feedback_events.c
    with workspace.engine.connect() as conn:
        query = sa.select(i.query_id, i.request_id, i.project, i.query_norm, i.profile,
                          i.results, i.created_ms, i.session_hash).order_by(i.id)
        if since_ms is not None:
            query = query.where(i.created_ms >= since_ms)
        rows = list(conn.execute(query))
        ranks = {r.query_id: {doc: rank for doc, rank, _ in r.results} for r in rows}
        report.queries = _write(targets[0], (_query_record(r) for r in rows), "query")
        events = sa.select(e.event_id, e.event_type, e.event_time_ms, e.query_id, e.doc_id,
                           e.rank_shown, e.payload).order_by(e.seq)
        if since_ms is not None:
            events = events.where(e.event_time_ms >= since_ms)

        def records() -> Iterator[dict[str, Any]]:
            for row in conn.execute(events):
                record = _event_record(row, ranks)
                if record is None:
                    report.skipped += 1
                else:
                    yield record

        report.events = _write(targets[1], records(), "event")
    report.files = [str(p) for p in targets]
    return report
