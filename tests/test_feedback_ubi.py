"""OpenSearch UBI in and out: the standard's own schemas and examples, a round trip
through Amelio's collector and impression log, and the signals the import feeds."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from amelio.cli import main
from amelio.db.schema import feedback_events, search_impressions, search_signals
from amelio.errors import InvalidInput
from amelio.feedback import Collector, ubi
from amelio.feedback.examples import example_event
from amelio.feedback.tokens import TokenSigner
from amelio.feedback.ubi import (
    EVENTS_FILE,
    QUERIES_FILE,
    _first_error,
    _time_ms,
    export_ubi,
    ingest_ubi,
    ubi_errors,
    ubi_schema,
)
from amelio.search import Searcher, aggregate
from amelio.search.engines.registry import workspace_corpus
from amelio.workspace.folder import Workspace, init_workspace

EVENT = ubi_schema("event")
QUERY = ubi_schema("query")


def _examples(schema: dict[str, Any], *path: str) -> list[Any]:
    """Every ``examples`` value under ``schema``'s property at ``path`` (its branches too)."""
    node = schema
    for name in path:
        node = node["properties"][name]
    found = list(node.get("examples", []))
    for branch in node.get("oneOf", []) + node.get("anyOf", []):
        found += branch.get("examples", [])
    return found


def _ndjson(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def ubi_workspace(
    tmp_path: Path, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workspace]:
    """The schemas' example timestamps are from 2018: keep events that old."""
    monkeypatch.setenv("AMELIO_DATABASE_URL", migrated_database_url)
    monkeypatch.setenv("AMELIO_FEEDBACK_RETENTION_DAYS", "10000")
    ws, _ = init_workspace(tmp_path / "ws")
    yield ws
    ws.dispose()


def _example_queries() -> list[dict[str, Any]]:
    """One UBI query per example query id, cycling through the other fields' examples."""
    fields = {
        "application": _examples(QUERY, "application"),
        "client_id": _examples(QUERY, "client_id"),
        "timestamp": _examples(QUERY, "timestamp"),
        "query_response_id": _examples(QUERY, "query_response_id"),
        "query_response_hit_ids": _examples(QUERY, "query_response_hit_ids"),
    }
    rows = []
    for n, query_id in enumerate(_examples(QUERY, "query_id")):
        record = {name: values[n % len(values)] for name, values in fields.items()}
        rows.append({"query_id": query_id, "user_query": f"toner cartridge {n}", **record})
    return rows


def _example_events(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Click-throughs on every example object id at every example ordinal, about the
    example queries, from the example sessions, clients and users."""
    sessions = itertools.cycle(_examples(EVENT, "session_id"))
    clients = itertools.cycle(_examples(EVENT, "client_id"))
    users = itertools.cycle(_examples(EVENT, "user_id"))
    times = itertools.cycle(_examples(EVENT, "timestamp"))
    apps = itertools.cycle(_examples(EVENT, "application"))
    ordinals = _examples(EVENT, "event_attributes", "position")  # none at this level
    assert ordinals == []
    position = EVENT["properties"]["event_attributes"]["properties"]["position"]
    ordinals = position["oneOf"][0]["properties"]["ordinal"]["examples"]
    object_ids = EVENT["properties"]["event_attributes"]["properties"]["object"]["properties"][
        "object_id"
    ]["examples"]
    events = []
    for (query, object_id), ordinal in zip(
        itertools.product(queries, object_ids), itertools.cycle(ordinals)
    ):
        events.append(
            {
                "application": next(apps),
                "action_name": "click_through",
                "query_id": query["query_id"],
                "session_id": next(sessions),
                "client_id": next(clients),
                "user_id": next(users),
                "timestamp": next(times),
                "message_type": "CLICK",
                "event_attributes": {
                    "object": {"object_id": object_id},
                    "position": {"ordinal": ordinal},
                },
            }
        )
    return events


# -- the schemas -----------------------------------------------------------------------


def test_the_published_schemas_refuse_their_own_examples_read_literally() -> None:
    """UBI 1.3.0's open enums are a ``oneOf`` whose branches overlap: the literal schema
    refuses ``click_through`` and every UUID query id. Amelio reads those as ``anyOf``
    (the intent); if a new release fixes the schema, this test says so."""
    literal = Draft202012Validator(EVENT)
    click = {"action_name": "click_through", "timestamp": "2018-11-13T20:20:39Z"}
    assert not literal.is_valid(click)
    assert ubi_errors(click, "event") == []
    uuid_query = {"user_query": "toner", "query_id": "00112233-4455-6677-8899-aabbccddeeff"}
    assert not Draft202012Validator(QUERY).is_valid(uuid_query)
    assert ubi_errors(uuid_query, "query") == []


def test_every_example_of_the_schemas_validates() -> None:
    queries = _example_queries()
    events = _example_events(queries)
    assert len(queries) == 2 and len(events) == 6
    for record in queries:
        assert ubi_errors(record, "query") == []
    for record in events:
        assert ubi_errors(record, "event") == []
    for action in EVENT["properties"]["action_name"]["oneOf"][0]["enum"]:
        assert (
            ubi_errors({"action_name": action, "timestamp": "2018-11-13T20:20:39"}, "event") == []
        )


@pytest.mark.parametrize(
    ("record", "kind", "where"),
    [
        ({"timestamp": "2018-11-13T20:20:39Z", "action_name": "x" * 101}, "event", "action_name"),
        ({"action_name": "click"}, "event", "event"),  # no timestamp
        (
            {
                "action_name": "click",
                "timestamp": "2018-11-13T20:20:39Z",
                "event_attributes": {"position": {"ordinal": 1, "xy": {"x": 1, "y": 2}}},
            },
            "event",
            "event_attributes.position",
        ),  # an ordinal *or* x,y, not both
        ({"query_id": "q1"}, "query", "query"),  # no user_query
        (
            {"user_query": "a", "query_response_hit_ids": [1, 2]},
            "query",
            "query_response_hit_ids.0",
        ),
    ],
)
def test_what_is_not_ubi_is_named(record: dict[str, Any], kind: str, where: str) -> None:
    errors = ubi_errors(record, kind)  # type: ignore[arg-type]
    assert errors and errors[0].startswith(f"{where}: ")


# -- the round trip --------------------------------------------------------------------


def test_the_schemas_examples_round_trip(
    ubi_workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = _example_queries()
    events = _example_events(queries)
    source = _ndjson(tmp_path / "ubi.ndjson", queries + events)
    report = ingest_ubi(ubi_workspace, source, consent="granted")
    assert report.queries == {"imported": 2, "duplicate": 0, "rejected": 0}
    assert report.events["accepted"] == 6, report.problems
    assert report.problems == []

    again = ingest_ubi(ubi_workspace, source, consent="granted")
    assert again.queries["duplicate"] == 2 and again.events["duplicate"] == 6
    assert again.events["accepted"] == 0

    out = tmp_path / "out"
    exported = export_ubi(ubi_workspace, out)
    assert (exported.queries, exported.events, exported.skipped) == (2, 6, 0)
    back_queries = [json.loads(line) for line in (out / QUERIES_FILE).read_text().splitlines()]
    back_events = [json.loads(line) for line in (out / EVENTS_FILE).read_text().splitlines()]
    for record in back_queries:
        assert ubi_errors(record, "query") == []
    for record in back_events:
        assert ubi_errors(record, "event") == []

    def query_key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["query_id"],
            r.get("query_response_id", r["query_id"]),
            tuple(r["query_response_hit_ids"]),
            r["user_query"],
        )

    assert sorted(map(query_key, back_queries)) == sorted(map(query_key, queries))

    def event_key(r: dict[str, Any]) -> tuple[Any, ...]:
        attributes = r["event_attributes"]
        return (
            r["action_name"],
            r["query_id"],
            str(attributes["object"]["object_id"]),
            attributes["position"]["ordinal"],
            _time_ms(r["timestamp"]),
            r["application"],
        )

    assert sorted(map(event_key, back_events)) == sorted(map(event_key, events))
    # Identities leave as the stored pseudonyms, never as the raw ids that came in.
    raw_ids = set(
        _examples(EVENT, "session_id")
        + _examples(EVENT, "client_id")
        + _examples(EVENT, "user_id")
        + _examples(QUERY, "client_id")
    )
    for record in back_events + back_queries:
        for name in ("session_id", "client_id", "user_id"):
            assert record.get(name) not in raw_ids
            assert name not in record or len(record[name]) == 8  # the stored pseudonym

    # What Amelio wrote is UBI another Amelio takes back whole.
    monkeypatch.delenv("AMELIO_DATABASE_URL")  # another workspace, on its own SQLite file
    second, _ = init_workspace(tmp_path / "second")
    try:
        both = tmp_path / "both.ndjson"
        both.write_text((out / QUERIES_FILE).read_text() + (out / EVENTS_FILE).read_text())
        moved = ingest_ubi(second, both, consent="granted")
        assert moved.queries["imported"] == 2 and moved.events["accepted"] == 6
    finally:
        second.dispose()

    with pytest.raises(InvalidInput, match="--force"):  # the same folder again: only forced
        export_ubi(ubi_workspace, out)
    assert export_ubi(ubi_workspace, out, force=True).events == 6


def test_imported_clicks_reach_the_signals(workspace: Workspace, tmp_path: Path) -> None:
    """An import is worth something only if the relevance loop learns from it: the
    queries become impressions, the clicks join them, the signals count them."""
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    records: list[dict[str, Any]] = []
    for n in range(20):
        records.append(
            {
                "query_id": f"q{n}",
                "user_query": "reset password",
                "client_id": f"browser-{n}",
                "timestamp": now,
                "query_response_hit_ids": ["sso", "reset", "expire"],
            }
        )
        records.append(
            {
                "action_name": "click_through",
                "query_id": f"q{n}",
                "client_id": f"browser-{n}",
                "timestamp": now,
                "event_attributes": {"object": {"object_id": "reset"}, "position": {"ordinal": 2}},
            }
        )
    report = ingest_ubi(workspace, _ndjson(tmp_path / "u.ndjson", records), consent="granted")
    assert report.queries["imported"] == 20 and report.events["accepted"] == 20
    done = aggregate(workspace)
    assert done.to_dict()["events"] == 20
    with workspace.engine.connect() as conn:
        clicks = {
            row.doc_id: row.clicks
            for row in conn.execute(
                sa.select(search_signals.c.doc_id, search_signals.c.clicks).where(
                    search_signals.c.query_norm == "reset password"
                )
            )
        }
    assert clicks.get("reset", 0) > 0 and clicks.get("sso", 0) == 0


def test_amelio_search_feedback_exports_as_ubi(workspace: Workspace, tmp_path: Path) -> None:
    corpus = workspace_corpus(workspace.settings)
    docs = tmp_path / "docs.ndjson"
    docs.write_text(
        "".join(
            json.dumps(d) + "\n"
            for d in [
                {"_id": "reset", "title": "Reset your password", "text": "Open settings."},
                {"_id": "sso", "title": "Single sign-on", "text": "Company password."},
            ]
        )
    )
    corpus.import_file(docs)
    searcher = Searcher(workspace, engine=corpus, background_aggregation=False)
    response = searcher.search("password", profile="bm25", session="tab-1").to_dict()
    signer = Collector(workspace).signer
    clicked = example_event("result_clicked", signer=signer)
    clicked["request"] = {
        "queryId": response["queryId"],
        "requestId": response["requestId"],
        "feedbackToken": response["feedbackToken"],
    }
    clicked["result"] = {"docId": response["results"][1]["docId"], "rankShown": 2}
    dwell = example_event("result_dwell_time", signer=signer)
    dwell["request"] = dict(clicked["request"])
    dwell["result"] = {"docId": response["results"][1]["docId"]}  # no rank: from the log
    dwell["outcome"] = {"dwellMs": 12_000}
    vote = example_event("vote_down")  # about an assistant answer: not UBI's business
    statuses = Collector(workspace).ingest([clicked, dwell, vote]).counts()
    assert statuses["accepted"] == 3

    report = export_ubi(workspace, tmp_path / "out")
    assert (report.queries, report.events, report.skipped) == (1, 2, 1)
    [query] = [json.loads(x) for x in (tmp_path / "out" / QUERIES_FILE).read_text().splitlines()]
    assert query["query_id"] == response["queryId"]
    assert query["query_response_hit_ids"] == [r["docId"] for r in response["results"]]
    assert query["user_query"] == "password" and query["client_id"] != "tab-1"
    events = [json.loads(x) for x in (tmp_path / "out" / EVENTS_FILE).read_text().splitlines()]
    assert [e["action_name"] for e in events] == ["click_through", "result_dwell_time"]
    assert events[1]["event_attributes"]["position"] == {"ordinal": 2}
    assert events[1]["event_attributes"]["dwell_ms"] == 12_000
    assert events[0]["event_attributes"]["amelio_event_id"] == clicked["eventId"].upper()


def test_ingest_names_each_problem_and_keeps_the_rest(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    now = "2026-11-30T10:00:00Z"
    path = tmp_path / "mixed.ndjson"
    good = {
        "action_name": "click",
        "query_id": "q1",
        "session_id": "s1",
        "timestamp": now,
        "event_attributes": {"object": {"object_id": 42}, "position": {"ordinal": 1}},
    }
    path.write_text(
        "\n".join(
            [
                json.dumps(
                    {
                        "query_id": "q1",
                        "user_query": "toner",
                        "timestamp": now,
                        "query_response_hit_ids": ["42", "7"],
                    }
                ),
                json.dumps(good),
                "{not json",
                json.dumps({**good, "action_name": "add_to_cart"}),
                json.dumps({**good, "action_name": "impression"}),
                json.dumps({**good, "session_id": None}),
                json.dumps({k: v for k, v in good.items() if k != "session_id"}),
                json.dumps({**good, "event_attributes": {"position": {"ordinal": 1}}}),
                json.dumps({**good, "timestamp": "yesterday"}),
                "",
            ]
        )
    )
    report = ingest_ubi(sqlite_workspace, path, consent="granted")
    assert report.queries["imported"] == 1
    assert report.events == {
        "accepted": 1,
        "duplicate": 0,
        "rejected": 5,
        "dropped": 0,
        "skipped": 2,
    }
    problems = {line: (where, reason) for line, where, reason in report.problems}
    assert problems[3][1].startswith("not valid JSON")
    assert problems[4] == (
        "action_name",
        "'add_to_cart' has no Amelio event type; map it with --map ACTION=EVENT_TYPE",
    )
    assert "hit lists" in problems[5][1]
    assert problems[6][0] == "session_id" and "not a UBI event" in problems[6][1]
    assert problems[7][0] == "session_id"
    assert problems[8][0] == "event_attributes.object.object_id"
    assert problems[9][0] == "timestamp"

    mapped = ingest_ubi(
        sqlite_workspace, path, consent="granted", actions={"add_to_cart": "result_pinned"}
    )
    assert mapped.events["accepted"] == 1 and mapped.events["duplicate"] == 1
    with sqlite_workspace.engine.connect() as conn:
        types = sorted(conn.scalars(sa.select(feedback_events.c.event_type)))
        shown = conn.scalar(sa.select(search_impressions.c.results))
    assert types == ["result_clicked", "result_pinned"]
    assert shown == [["42", 1, 0.0], ["7", 2, 0.0]]

    denied = tmp_path / "denied.ndjson"
    _ndjson(denied, [{**good, "timestamp": "2026-11-30T10:00:01Z"}])
    assert ingest_ubi(sqlite_workspace, denied, consent="unknown").events["dropped"] == 1
    with pytest.raises(InvalidInput, match="not an event type"):
        ingest_ubi(sqlite_workspace, denied, consent="granted", actions={"buy": "purchase"})


def test_cli_ingest_and_export(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    runner = CliRunner()
    w = ["-w", str(sqlite_workspace.root)]
    now = "2026-11-30T10:00:00Z"
    path = _ndjson(
        tmp_path / "u.ndjson",
        [
            {
                "query_id": "q1",
                "user_query": "toner",
                "timestamp": now,
                "query_response_hit_ids": ["a", "b"],
            },
            {
                "action_name": "add_to_cart",
                "query_id": "q1",
                "client_id": "c1",
                "timestamp": now,
                "event_attributes": {"object": {"object_id": "b"}, "position": {"ordinal": 2}},
            },
        ],
    )
    no_consent = runner.invoke(main, [*w, "feedback", "ingest", "--format", "ubi", str(path)])
    assert no_consent.exit_code == 2 and "--consent granted" in no_consent.output
    wrong = runner.invoke(main, [*w, "feedback", "ingest", str(path), "--consent", "granted"])
    assert wrong.exit_code == 2 and "--format ubi only" in wrong.output
    bad_map = runner.invoke(
        main,
        [
            *w,
            "feedback",
            "ingest",
            "--format",
            "ubi",
            str(path),
            "--consent",
            "granted",
            "--map",
            "add_to_cart",
        ],
    )
    assert bad_map.exit_code == 2 and "ACTION=EVENT_TYPE" in bad_map.output
    result = runner.invoke(
        main,
        [
            *w,
            "feedback",
            "ingest",
            "--format",
            "ubi",
            str(path),
            "--consent",
            "granted",
            "--map",
            "add_to_cart=result_pinned",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "queries: 1 imported" in result.stdout and "1 accepted" in result.stdout
    out = tmp_path / "out"
    exported = runner.invoke(
        main, [*w, "feedback", "export", "--format", "ubi", str(out), "--json"]
    )
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout)["events"] == 1
    again = runner.invoke(main, [*w, "feedback", "export", "--format", "ubi", str(out)])
    assert again.exit_code != 0 and "--force" in again.output
    [event] = [json.loads(x) for x in (out / EVENTS_FILE).read_text().splitlines()]
    assert event["action_name"] == "result_pinned"
    assert event["event_attributes"]["object"]["object_id"] == "b"


def test_a_query_with_a_bad_timestamp_is_a_rejected_query(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    """The schema's date-time is only an annotation: the import parses it, and a bad
    one is the query's rejection, not an event's."""
    path = _ndjson(
        tmp_path / "q.ndjson",
        [{"query_id": "q1", "user_query": "toner", "timestamp": "last tuesday"}],
    )
    report = ingest_ubi(sqlite_workspace, path, consent="granted")
    assert report.queries == {"imported": 0, "duplicate": 0, "rejected": 1}
    assert report.events["rejected"] == 0
    assert report.problems[0][:2] == (1, "timestamp")


# -- what the import refuses, and how it says so ---------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _click(**fields: Any) -> dict[str, Any]:
    return {
        "action_name": "click",
        "query_id": "q1",
        "session_id": "s1",
        "timestamp": _now(),
        "event_attributes": {"object": {"object_id": "a"}, "position": {"ordinal": 1}},
        **fields,
    }


def test_bad_lines_are_rejected_by_line_and_ubi_field(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    """Every refusal names the line and the field the user wrote: never an abort of
    the whole file, never a field of the MartyFeedbackEventV1 the import built."""
    records: list[dict[str, Any]] = [
        {"query_id": "q1", "user_query": "toner", "query_response_hit_ids": ["a", "b"]},
        {"query_id": "", "user_query": "toner"},
        {"query_id": "q2", "user_query": "toner", "query_response_hit_ids": ["a", "b", "a"]},
        _click(query_id=""),
        _click(query_id="q\n1"),
        _click(event_attributes={"object": {"object_id": "a"}, "position": {"ordinal": 0}}),
        _click(
            action_name="result_dwell_time",
            event_attributes={
                "object": {"object_id": "a"},
                "position": {"ordinal": 1},
                "dwell_ms": -5,
            },
        ),
        _click(timestamp="2999-01-01T00:00:00Z"),
        _click(),
    ]
    report = ingest_ubi(
        sqlite_workspace, _ndjson(tmp_path / "bad.ndjson", records), consent="granted"
    )
    assert report.queries == {"imported": 1, "duplicate": 0, "rejected": 2}
    assert report.events == {
        "accepted": 1,
        "duplicate": 0,
        "rejected": 5,
        "dropped": 0,
        "skipped": 0,
    }
    problems = {line: (where, reason) for line, where, reason in report.problems}
    assert problems[2][0] == "query_id" and "empty" in problems[2][1]
    assert problems[3] == (
        "query_response_hit_ids",
        "ranks 1 and 3 are the same document: a ranking shows each document once",
    )
    assert problems[4][0] == "query_id"
    assert problems[5][0] == "query_id"
    assert problems[6][0] == "event_attributes.position.ordinal"
    assert problems[7][0] == "event_attributes.dwell_ms"
    assert problems[8] == ("timestamp", "more than 5 minutes in the future")
    assert 9 not in problems
    with sqlite_workspace.engine.connect() as conn:
        assert list(conn.scalars(sa.select(search_impressions.c.query_id))) == ["q1"]


def test_a_map_must_name_a_type_a_ubi_event_can_become(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    path = _ndjson(tmp_path / "u.ndjson", [_click(action_name="add_to_cart")])
    with pytest.raises(InvalidInput, match="result_clicked") as caught:
        ingest_ubi(
            sqlite_workspace, path, consent="granted", actions={"add_to_cart": "vote_up"}
        )  # an event type, but not from UBI
    assert caught.value.details["field"] == "map" and "'vote_up'" in str(caught.value)


def test_the_project_is_validated_up_front(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    path = _ndjson(tmp_path / "u.ndjson", [{"query_id": "q1", "user_query": "toner"}])
    with pytest.raises(InvalidInput) as caught:
        ingest_ubi(sqlite_workspace, path, consent="granted", project="Not A/Project")
    assert caught.value.details["field"] == "project"
    with sqlite_workspace.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(search_impressions)) == 0


def test_the_first_error_is_a_schema_error_and_ubi_errors_lists_them_all() -> None:
    record = {"user_query": "a", "query_response_hit_ids": [1, 2]}
    assert ubi_errors(record, "query") == [
        "query_response_hit_ids.0: 1 is not of type 'string'",
        "query_response_hit_ids.1: 2 is not of type 'string'",
    ]
    first = _first_error(record, "query")
    assert first is not None and first[0].startswith("query_response_hit_ids.")
    assert first[1].endswith("is not of type 'string'")
    assert _first_error({"user_query": "a"}, "query") is None


# -- the import, batch by batch ----------------------------------------------------------


def test_the_import_goes_batch_by_batch(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small batches (and INSERTs of a few rows) give the counts one big batch gives:
    a query repeated in a later batch is a duplicate, each batch's queries are logged
    before its events are stored, and no token is minted on the way."""
    monkeypatch.setattr(ubi, "_BATCH_LINES", 7)
    monkeypatch.setattr(ubi, "_MAX_PARAMETERS", 30)  # two impressions an INSERT

    def no_token(*args: Any, **kw: Any) -> str:
        raise AssertionError("an import mints no feedbackToken")

    monkeypatch.setattr(TokenSigner, "issue", no_token)
    records: list[dict[str, Any]] = []
    for n in range(25):
        records.append(
            {
                "query_id": f"q{n}",
                "user_query": "reset password",
                "client_id": f"browser-{n}",
                "timestamp": _now(),
                "query_response_hit_ids": ["sso", "reset"],
            }
        )
        records.append(_click(query_id=f"q{n}", session_id=f"s{n}"))
    records.append({"query_id": "q3", "user_query": "again"})  # a line far below
    seen: list[tuple[int, int | None]] = []
    ingest = Collector.ingest

    def counting(self: Collector, items: Any, **kw: Any) -> Any:
        with workspace.engine.connect() as conn:
            logged = conn.scalar(sa.select(sa.func.count()).select_from(search_impressions))
        seen.append((len(items), logged))
        return ingest(self, items, **kw)

    monkeypatch.setattr(Collector, "ingest", counting)
    report = ingest_ubi(workspace, _ndjson(tmp_path / "u.ndjson", records), consent="granted")
    assert report.queries == {"imported": 25, "duplicate": 1, "rejected": 0}
    assert report.events["accepted"] == 25 and report.problems == []
    assert len(seen) > 3 and all(n <= 4 for n, _ in seen)
    # The batch with the click of q{n} logged q{n} first: 7 lines hold 3 or 4 clicks.
    assert [logged for _, logged in seen][:2] == [4, 7]


def test_a_query_id_already_logged_is_kept(workspace: Workspace, tmp_path: Path) -> None:
    path = _ndjson(
        tmp_path / "q.ndjson",
        [{"query_id": "q1", "user_query": "toner", "query_response_hit_ids": ["a"]}],
    )
    assert ingest_ubi(workspace, path, consent="granted").queries["imported"] == 1
    _ndjson(
        path,
        [
            {"query_id": "q1", "user_query": "other", "query_response_hit_ids": ["b"]},
            {"query_id": "q1", "user_query": "twice"},
            {"query_id": "q2", "user_query": "toner"},
        ],
    )
    report = ingest_ubi(workspace, path, consent="granted")
    assert report.queries == {"imported": 1, "duplicate": 2, "rejected": 0}
    with workspace.engine.connect() as conn:
        kept = conn.scalar(
            sa.select(search_impressions.c.results).where(search_impressions.c.query_id == "q1")
        )
    assert kept == [["a", 1, 0.0]]


# -- the collector's token, waived for an operator's import only -------------------------


def test_only_an_operator_import_may_go_without_a_token(sqlite_workspace: Workspace) -> None:
    collector = Collector(sqlite_workspace)
    event = example_event("result_clicked", signer=collector.signer)
    del event["request"]["feedbackToken"]
    refused = collector.ingest([event], rate_limit=False)
    assert refused.statuses[0].status == "rejected"
    assert refused.statuses[0].field == "request.feedbackToken"
    assert (
        collector.ingest([event], rate_limit=False, require_token=False).statuses[0].status
        == "accepted"
    )
    forged = example_event("result_clicked", signer=collector.signer)
    forged["request"]["feedbackToken"] = "v1.forged.token"
    [status] = collector.ingest([forged], rate_limit=False, require_token=False).statuses
    assert (status.status, status.field) == ("rejected", "request.feedbackToken")


# -- the export, all or nothing ---------------------------------------------------------


def _exported_pair(workspace: Workspace, tmp_path: Path) -> Path:
    path = _ndjson(
        tmp_path / "u.ndjson",
        [{"query_id": "q1", "user_query": "toner", "query_response_hit_ids": ["a", "b"]}, _click()],
    )
    assert ingest_ubi(workspace, path, consent="granted").events["accepted"] == 1
    out = tmp_path / "out"
    assert export_ubi(workspace, out).events == 1
    return out


@pytest.mark.parametrize("failure", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_export_leaves_the_previous_pair(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    out = _exported_pair(workspace, tmp_path)
    before = {p.name: p.read_text() for p in out.iterdir()}

    def broken(row: Any, ranks: Any) -> Any:
        raise failure

    monkeypatch.setattr(ubi, "_event_record", broken)
    with pytest.raises(type(failure)):
        export_ubi(workspace, out, force=True)
    assert {p.name: p.read_text() for p in out.iterdir()} == before  # no .partial either


def test_an_export_that_would_not_be_ubi_writes_nothing(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _exported_pair(workspace, tmp_path)
    before = {p.name: p.read_text() for p in out.iterdir()}
    monkeypatch.setattr(ubi, "_query_record", lambda row: {"user_query": 1})
    with pytest.raises(RuntimeError, match="does not validate"):
        export_ubi(workspace, out, force=True)
    assert {p.name: p.read_text() for p in out.iterdir()} == before


def test_cli_lists_the_first_problems_and_counts_the_rest(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    path = _ndjson(tmp_path / "u.ndjson", [_click(action_name="add_to_cart")] * 23)
    result = CliRunner().invoke(
        main,
        [
            "-w",
            str(sqlite_workspace.root),
            "feedback",
            "ingest",
            "--format",
            "ubi",
            str(path),
            "--consent",
            "granted",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("line ") == 20
    assert "line 1: action_name: 'add_to_cart' has no Amelio event type" in result.stdout
    assert "… and 3 more problems (--json lists them all)." in result.stdout


def test_a_planted_link_beside_the_export_is_never_written_through(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Someone who can write to the export folder plants ``ubi_events.ndjson.partial``
    pointing at a file of the exporting user's: the export must not write through it."""
    out = _exported_pair(workspace, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for name in ("ubi_queries.ndjson", "ubi_events.ndjson"):
        (out / f"{name}.partial").symlink_to(victim)
    report = export_ubi(workspace, out, force=True)
    assert report.events == 1
    assert victim.read_text() == "precious\n"
    assert not (out / "ubi_events.ndjson").is_symlink()
    assert json.loads((out / "ubi_events.ndjson").read_text().splitlines()[0])
    assert sorted(p.name for p in out.iterdir() if not p.is_symlink()) == [
        "ubi_events.ndjson",
        "ubi_queries.ndjson",
    ]
