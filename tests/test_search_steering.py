"""One actor cannot steer ranking.

A session that searched a query forty times and clicked its tenth result each time
used to lift that document to rank 4: clicks were capped per session, but the
forty examinations without a click sank every document above it. These tests
drive the real path — ``Searcher.search`` (or ``POST /v1/search``), feedback
events with the response's ``feedbackToken`` through the ``Collector``, and the
aggregator — on a small help-desk corpus where the tenth result is 0.12 below the
ninth (first-phase scores are min-max normalized to [0, 1]), and on the demo
corpus, whose deep ranks lie within a few hundredths of each other: there one
capped, satisfied click once lifted the tenth result to the top three. Repeating
the search adds nothing to one person's click, and feedback from fewer than
``search_min_actors`` people moves a document two ranks at most.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio.cli import main
from amelio.db.schema import feedback_events, search_impressions
from amelio.errors import InvalidInput
from amelio.feedback import Collector, new_event_id
from amelio.search import Fts5Engine, Searcher, SearchResponse, aggregate, rebuild
from amelio.search.counts import signals_for
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace

QUERY = "rollback a deployment"
DOCS = [
    (
        "roll-back",
        "Roll back a deployment",
        "To roll back a deployment, redeploy the previous "
        "release tag from the pipeline page. The rollback keeps the database as it is.",
    ),
    (
        "rollback-db",
        "Rollback and database migrations",
        "A rollback of the application does "
        "not undo migrations. Write a down migration before you deploy, or restore the backup "
        "taken by the deployment job.",
    ),
    (
        "deploy-checklist",
        "Deployment checklist",
        "Before a deployment: tests are green, the "
        "changelog is written, a rollback plan exists and someone is on call.",
    ),
    (
        "canary",
        "Canary releases",
        "A canary release sends a few percent of traffic to the new "
        "version first; if errors rise, the deployment stops and traffic goes back to the old "
        "version.",
    ),
    (
        "blue-green",
        "Blue-green deployment",
        "Two identical environments: deploy to the idle "
        "one, switch the router, and switch back to roll back in seconds.",
    ),
    (
        "failed-deploy",
        "What to do when a deployment fails",
        "Read the job log, then decide: "
        "fix forward with a small patch, or rollback to the last good release.",
    ),
    (
        "feature-flags",
        "Feature flags instead of rollbacks",
        "Hide unfinished work behind a "
        "flag; turning the flag off is faster than a rollback and needs no deployment.",
    ),
    (
        "helm",
        "Helm rollback",
        "helm rollback RELEASE REVISION returns a Kubernetes release to "
        "an earlier revision; helm history lists the revisions.",
    ),
    (
        "kubectl",
        "kubectl rollout undo",
        "kubectl rollout undo deployment/api returns a "
        "Kubernetes deployment to its previous ReplicaSet.",
    ),
    (
        "freeze",
        "Deployment freeze",
        "No deployment on Friday afternoons or during the "
        "end-of-year freeze, except fixes approved by the release manager.",
    ),
    (
        "post-mortem",
        "Writing a post-mortem",
        "After an incident, write what happened, the "
        "timeline, why the rollback took long, and what changes.",
    ),
    (
        "env-vars",
        "Environment variables in a deployment",
        "Secrets and settings come from the "
        "environment; a deployment fails early when one is missing.",
    ),
    (
        "release-notes",
        "Release notes",
        "Every release gets notes: what changed, what to watch, how to roll back.",
    ),
    (
        "db-backup",
        "Database backups",
        "Backups run nightly and before each deployment; restoring one takes about twenty minutes.",
    ),
]
DEMO_CORPUS = Path(__file__).resolve().parents[1] / "examples" / "demo" / "corpus.jsonl"
SEARCHES = 40
#: The service folds new events in every few seconds: every few searches here.
AGGREGATE_EVERY = 5
#: How far one actor may move a document, in ranks.
ONE_ACTOR_RANKS = 2


@pytest.fixture
def searcher(workspace: Workspace, tmp_path: Path) -> Searcher:
    corpus = Fts5Engine.for_workspace(workspace.settings.data_dir)
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in DOCS),
        encoding="utf-8",
    )
    corpus.import_file(source)
    # exploration is off in tests (conftest): rankings are deterministic
    return Searcher(workspace, engine=corpus, background_aggregation=False, rng=random.Random(0))


def clicks(
    response: SearchResponse | dict[str, Any],
    doc_id: str,
    session: str,
    dwell_ms: int,
    user: str | None = None,
) -> list[dict[str, Any]]:
    """What a client sends when its person opens ``doc_id`` of ``response`` (from
    the library, or the JSON of ``POST /v1/search``) and reads it."""
    body = response.to_dict() if isinstance(response, SearchResponse) else response
    rank = next(r["rank"] for r in body["results"] if r["docId"] == doc_id)
    who = {"sessionId": session} | ({"userId": user} if user else {})
    common = {
        "eventVersion": "v1",
        "eventTimeMs": int(time.time() * 1000),
        "session": who,
        "consent": {"telemetry": "granted"},
        "request": {
            "queryId": body["queryId"],
            "requestId": body["requestId"],
            "feedbackToken": body["feedbackToken"],
        },
        "result": {"docId": doc_id, "rankShown": rank},
    }
    return [
        {**common, "eventId": new_event_id(), "eventType": "result_clicked"},
        {
            **common,
            "eventId": new_event_id(),
            "eventType": "result_dwell_time",
            "outcome": {"dwellMs": dwell_ms},
        },
    ]


def rank_of(searcher: Searcher, doc_id: str, query: str = QUERY) -> int:
    ranking = searcher.rank(query, profile="hybrid_with_feedback", limit=30)
    return next(i for i, d in enumerate(ranking, start=1) if d.doc_id == doc_id)


def steer(
    workspace: Workspace,
    searcher: Searcher,
    actor: Callable[[int], tuple[str | None, str, str | None]],
    query: str = QUERY,
) -> tuple[str, int, int]:
    """Forty searches of :data:`QUERY`, each clicking the document that was tenth
    before any feedback and reading it for half a minute or so. ``actor(i)`` names
    who did search ``i``: (search sessionId, event sessionId, userId).

    Returns that document and its rank before and after."""
    target = searcher.rank(query, profile="hybrid_with_feedback")[9].doc_id
    before = rank_of(searcher, target, query)
    collector, dwell = Collector(workspace), random.Random(7)
    for i in range(SEARCHES):
        search_session, event_session, user = actor(i)
        response = searcher.search(
            query, profile="hybrid_with_feedback", session=search_session, user=user
        )
        if any(d.doc_id == target for d in response.results):
            ms = int(max(dwell.gauss(30_000, 8_000), 9_000))
            collector.ingest(clicks(response, target, event_session, ms, user), rate_limit=False)
        if (i + 1) % AGGREGATE_EVERY == 0:
            aggregate(workspace)
    return target, before, rank_of(searcher, target, query)


def test_forty_people_lift_the_document(workspace: Workspace, searcher: Searcher) -> None:
    target, before, after = steer(
        workspace, searcher, lambda i: (f"person-{i}", f"person-{i}", None)
    )
    assert before == 10
    assert after == 1, (target, after)
    row = signals_for(workspace.engine, QUERY)[target]
    assert row.clicks == row.dwell_clicks == SEARCHES


def test_one_session_searching_forty_times_moves_it_at_most_two_ranks(
    workspace: Workspace, searcher: Searcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, before, after = steer(workspace, searcher, lambda i: ("spammer", "spammer", None))
    assert before - after <= ONE_ACTOR_RANKS, (target, before, after)
    rows = signals_for(workspace.engine, QUERY)
    # one session is one examination of each document it was shown, and one click:
    # what a single search and click of one person counts
    assert {r.impressions for r in rows.values()} == {1}
    assert (rows[target].clicks, rows[target].dwell_clicks) == (1, 1)
    # counted over eight aggregation runs as a replay counts it in one
    rebuild(workspace)
    assert signals_for(workspace.engine, QUERY) == rows
    # and as a replay counts it that writes its marks out every few impressions
    monkeypatch.setattr("amelio.search.aggregation._CHUNK", 3)
    monkeypatch.setattr("amelio.search.aggregation._MARKS_IN_MEMORY", 0)
    rebuild(workspace)
    assert signals_for(workspace.engine, QUERY) == rows


@pytest.mark.parametrize(
    "query", ["rollback a deployment", "docker image too big", "slow sql query index"]
)
def test_one_session_moves_a_crowded_tenth_result_at_most_two_ranks(
    sqlite_workspace: Workspace, tmp_path: Path, query: str
) -> None:
    """On the demo corpus the deep ranks lie within a few hundredths of each other,
    and one capped, satisfied click lifted the tenth result to the top three: one
    person is not enough people for feedback to move a rank."""
    corpus = Fts5Engine.for_workspace(sqlite_workspace.settings.data_dir)
    corpus.import_file(DEMO_CORPUS)
    searcher = Searcher(
        sqlite_workspace, engine=corpus, background_aggregation=False, rng=random.Random(0)
    )
    target, before, after = steer(
        sqlite_workspace, searcher, lambda i: ("spammer", "spammer", None), query
    )
    assert before - after <= ONE_ACTOR_RANKS, (target, before, after)
    row = signals_for(sqlite_workspace.engine, query)[target]
    assert (row.clicks, row.dwell_clicks, row.actors) == (1, 1, 1)


@pytest.mark.parametrize(("people", "moved"), [(2, False), (3, True)])
def test_it_takes_search_min_actors_people_to_move_a_document(
    workspace: Workspace, searcher: Searcher, people: int, moved: bool
) -> None:
    """Forty searches shared by two sessions move nothing; by three (the default
    ``search_min_actors``) their three capped clicks count."""
    target, before, after = steer(
        workspace, searcher, lambda i: (f"person-{i % people}", f"person-{i % people}", None)
    )
    row = signals_for(workspace.engine, QUERY)[target]
    assert (row.clicks, row.actors) == (people, people)
    assert (after < before - ONE_ACTOR_RANKS) is moved, (before, after)


@pytest.mark.parametrize(("passers_by", "beyond_two"), [(1, False), (12, True)])
def test_a_held_document_rises_past_what_enough_people_passed_over(
    sqlite_workspace: Workspace, passers_by: int, beyond_two: bool
) -> None:
    """A document one person clicked moves two ranks at most from where the ranking
    on enough people's evidence puts it, not from its first-phase place: once
    identified people (``search_min_actors`` of them at least) were shown the
    documents above it and opened none, those sink in that ranking and the held
    one may pass them. Two people (a passer-by and the one who clicks) are not
    enough, and searches without a session or user are nobody (the test below). On
    the demo corpus, whose deep ranks lie within a few hundredths."""
    workspace = sqlite_workspace
    corpus = Fts5Engine.for_workspace(workspace.settings.data_dir)
    corpus.import_file(DEMO_CORPUS)
    searcher = Searcher(workspace, engine=corpus, background_aggregation=False)
    target = searcher.rank(QUERY, profile="hybrid_with_feedback")[9].doc_id
    before = rank_of(searcher, target)
    for i in range(passers_by):
        searcher.search(QUERY, profile="hybrid_with_feedback", session=f"passer-{i}")
    response = searcher.search(QUERY, profile="hybrid_with_feedback", session="clicker")
    Collector(workspace).ingest(clicks(response, target, "clicker", 30_000), rate_limit=False)
    aggregate(workspace)
    row = signals_for(workspace.engine, QUERY)[target]
    assert (row.actors, row.viewers) == (1, passers_by + 1)
    after = rank_of(searcher, target)
    assert (before - after > ONE_ACTOR_RANKS) is beyond_two, (before, after)


def test_without_a_session_id_each_search_is_a_session_of_its_own(
    workspace: Workspace, searcher: Searcher
) -> None:
    """Why clients must send sessionId: the server cannot tell forty searches of one
    person from forty people's, and the forty examinations without a click sink
    the documents above the one clicked (it once lifted it to the top). Its click
    counts once, from one person: it stays held to two ranks."""
    target, before, after = steer(workspace, searcher, lambda i: (None, "spammer", None))
    rows = signals_for(workspace.engine, QUERY)
    assert rows[target].impressions == SEARCHES and rows[target].clicks == 1
    assert rows[target].actors == 1
    assert {r.viewers for r in rows.values()} == {0}  # forty searches, nobody we can count
    assert before - after == ONE_ACTOR_RANKS, (before, after)


def test_one_user_over_many_sessions_is_one_actor(workspace: Workspace, searcher: Searcher) -> None:
    target, before, after = steer(
        workspace, searcher, lambda i: (f"tab-{i}", f"tab-{i}", "the-same-person")
    )
    assert before - after <= ONE_ACTOR_RANKS, (target, before, after)
    rows = signals_for(workspace.engine, QUERY)
    assert rows[target].clicks == 1
    assert {r.viewers for r in rows.values()} == {1}  # forty tabs, one user


def test_switching_session_ids_between_search_and_click_gains_nothing(
    workspace: Workspace, searcher: Searcher
) -> None:
    """The click counts under the impression's session too: forty fresh event
    sessions clicking what one search session was shown still count once."""
    target, before, after = steer(workspace, searcher, lambda i: ("spammer", f"fresh-{i}", None))
    assert before - after <= ONE_ACTOR_RANKS, (target, before, after)
    rows = signals_for(workspace.engine, QUERY)
    assert rows[target].clicks == 1
    assert {r.viewers for r in rows.values()} == {1}  # forty tabs, one user


# -- the request: sessionId, userId, project, stored text --------------------------------


def test_session_and_user_are_stored_as_the_hashes_of_feedback_events(
    workspace: Workspace, searcher: Searcher
) -> None:
    _, key = keys.create_key(workspace.engine, name="bot", role="bot")
    with TestClient(create_app(workspace)) as client:
        r = client.post(
            "/v1/search",
            headers={"Authorization": f"Bearer {key}"},
            json={"query": QUERY, "sessionId": "browser-tab-77", "userId": "alice@example.com"},
        )
        assert r.status_code == 200, r.text
        anonymous = client.post(
            "/v1/search", headers={"Authorization": f"Bearer {key}"}, json={"query": QUERY}
        )
        assert anonymous.status_code == 200, anonymous.text
    body = r.json()
    result = Collector(workspace).ingest(
        clicks(body, body["results"][0]["docId"], "browser-tab-77", 20_000, "alice@example.com"),
        rate_limit=False,
    )
    assert result.count("accepted") == 2
    with workspace.engine.connect() as conn:
        rows = conn.execute(sa.select(search_impressions).order_by(search_impressions.c.id)).all()
        event = conn.execute(
            sa.select(feedback_events.c.session_hash, feedback_events.c.user_hash)
        ).first()
    assert event is not None
    assert (rows[0].session_hash, rows[0].user_hash) == (event.session_hash, event.user_hash)
    assert len(rows[0].session_hash) == 8 and rows[0].user_hash != rows[0].session_hash
    stored = " ".join(str(v) for v in rows[0])
    assert "browser-tab-77" not in stored and "alice" not in stored
    assert (rows[1].session_hash, rows[1].user_hash) == (None, None)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"sessionId": "x" * 201}, "sessionId"),
        ({"sessionId": ""}, "sessionId"),
        ({"userId": "u" * 201}, "userId"),
        ({"project": "../../etc"}, "project"),
        ({"project": "Acme"}, "project"),
    ],
)
def test_bad_ids_and_project_names_are_refused_and_nothing_is_stored(
    sqlite_workspace: Workspace, payload: dict[str, Any], field: str
) -> None:
    _, key = keys.create_key(sqlite_workspace.engine, name="bot", role="bot")
    with TestClient(create_app(sqlite_workspace)) as client:
        r = client.post(
            "/v1/search",
            headers={"Authorization": f"Bearer {key}"},
            json={"query": QUERY, **payload},
        )
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["error"]["details"]["errors"]] == [field]
    with sqlite_workspace.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(search_impressions)) == 0


def test_the_library_and_the_cli_refuse_a_project_name_that_is_a_path(
    sqlite_workspace: Workspace,
) -> None:
    searcher = Searcher(sqlite_workspace, background_aggregation=False)
    with pytest.raises(InvalidInput, match=r"Invalid project name '\.\./\.\./etc'") as info:
        searcher.search("anything", project="../../etc")
    assert info.value.details["field"] == "project"
    with pytest.raises(InvalidInput) as too_long:
        searcher.search("anything", session="s" * 201)
    assert too_long.value.details["field"] == "sessionId"
    assert "s" * 20 not in too_long.value.message  # a raw id never reaches a message
    r = CliRunner().invoke(
        main,
        ["--workspace", str(sqlite_workspace.root), "search", "anything", "--project", "../../etc"],
    )
    assert r.exit_code == 1 and "Invalid project name '../../etc'" in r.output, r.output
    r = CliRunner().invoke(
        main,
        [
            "--workspace",
            str(sqlite_workspace.root),
            "search",
            "anything",
            "--session",
            "cli-1",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    with sqlite_workspace.engine.connect() as conn:
        stored = conn.execute(
            sa.select(search_impressions.c.project, search_impressions.c.session_hash)
        ).all()
    day = datetime.now(UTC).date()
    assert [tuple(s) for s in stored] == [("default", searcher.hasher.hash("cli-1", day))]


def test_the_openapi_document_shows_the_request_contract(sqlite_workspace: Workspace) -> None:
    with TestClient(create_app(sqlite_workspace)) as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]["SearchBody"]
    fields = schema["properties"]
    assert fields["project"]["pattern"] == "^[a-z0-9][a-z0-9_-]{0,99}$"
    assert fields["sessionId"]["anyOf"][0]["maxLength"] == 200
    assert "userId" in fields


def test_an_email_address_in_a_query_is_not_stored(
    workspace: Workspace, searcher: Searcher
) -> None:
    query = "rollback a deployment for jean.dupont@example.com"
    doc = searcher.rank(query, profile="hybrid_with_feedback")[1].doc_id
    for person in ("s1", "s2"):  # what two people teach (one alone cannot: see above)
        response = searcher.search(query, profile="hybrid_with_feedback", session=person)
        Collector(workspace).ingest(clicks(response, doc, person, 20_000), rate_limit=False)
    with workspace.engine.connect() as conn:
        stored = conn.execute(sa.select(search_impressions.c.query_norm)).scalars().all()
    assert len(set(stored)) == 1
    assert "dupont" not in stored[0] and "example" not in stored[0]
    assert stored[0].startswith("rollback a deployment")
    # what is learned for such a query is kept, and found again, under the same key
    aggregate(workspace)
    _, admin = keys.create_key(workspace.engine, name="admin", role="admin")
    with TestClient(create_app(workspace)) as client:
        r = client.get(
            "/v1/search/signals",
            params={"query": query},
            headers={"Authorization": f"Bearer {admin}"},
        )
    assert r.status_code == 200, r.text
    assert r.json()["query"] == stored[0] and r.json()["documents"][doc]["clicks"] == 2
    assert searcher.rank(query, profile="hybrid_with_feedback")[0].doc_id == doc
