"""Search: corpus import, the API contract, impressions, signals and the feedback ranking."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio.cli import main
from amelio.db.schema import search_impressions, search_signals, search_state
from amelio.errors import InvalidInput
from amelio.feedback import Collector, new_event_id
from amelio.feedback.tokens import token_signer
from amelio.search import Fts5Engine, Searcher, SearchResponse, aggregate, rebuild
from amelio.search.clickmodel import SwapCounts, fit_pbm, utility
from amelio.search.counts import signals_for
from amelio.search.engines.registry import workspace_corpus
from amelio.search.engines.tantivy import TantivyEngine
from amelio.search.simulate import ARMS, _examined_as_shown, ndcg_at, simulate
from amelio.search.simulate import click_events as sim_click_events
from amelio.search.store import DocumentStore
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace

DOCS = [
    {
        "_id": "reset",
        "title": "Reset your password",
        "text": "Open settings, choose "
        "security, then reset the password. A reset link arrives by email.",
    },
    {
        "_id": "sso",
        "title": "Single sign-on",
        "text": "Sign in with your company account; "
        "the password is managed by your identity provider.",
    },
    {
        "_id": "expire",
        "title": "Password expiry",
        "text": "Passwords expire after 90 days; you are asked to choose a new password.",
    },
    {"_id": "invoice", "title": "Download an invoice", "text": "Invoices are under billing."},
    {"_id": "refund", "title": "Ask for a refund", "text": "Refunds go back to the card."},
]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def corpus(workspace: Workspace, tmp_path: Path) -> DocumentStore:
    """The workspace's corpus on the default engine."""
    c = workspace_corpus(workspace.settings)
    c.import_file(write_jsonl(tmp_path / "docs.jsonl", DOCS))
    return c


@pytest.fixture
def searcher(workspace: Workspace, corpus: Fts5Engine) -> Searcher:
    """No exploration: these tests are about what feedback does to the ranking
    (exploration has tests of its own, with ``_explorer``)."""
    engine = Searcher(workspace, engine=corpus, background_aggregation=False, rng=random.Random(0))
    engine.settings = workspace.settings.model_copy(
        update={"search_thompson": 0.0, "search_exploration": 0.0}
    )
    return engine


def click_events(
    response: SearchResponse, doc_id: str, session: str, *, dwell_ms: int = 20_000, times: int = 1
) -> list[dict[str, Any]]:
    rank = next(i for i, d in enumerate(response.results, start=1) if d.doc_id == doc_id)
    request = {
        "queryId": response.query_id,
        "requestId": response.request_id,
        "feedbackToken": response.token,
    }
    common = {
        "eventVersion": "v1",
        "session": {"sessionId": session},
        "consent": {"telemetry": "granted"},
        "request": request,
        "result": {"docId": doc_id, "rankShown": rank},
    }
    events: list[dict[str, Any]] = []
    now = int(time.time() * 1000)
    for _ in range(times):
        events.append(
            {**common, "eventId": new_event_id(), "eventTimeMs": now, "eventType": "result_clicked"}
        )
        events.append(
            {
                **common,
                "eventId": new_event_id(),
                "eventTimeMs": now,
                "eventType": "result_dwell_time",
                "outcome": {"dwellMs": dwell_ms},
            }
        )
    return events


# -- the corpus (each embedded engine) ----------------------------------------------------


@pytest.fixture(params=[Fts5Engine, TantivyEngine], ids=["fts5", "tantivy"])
def store(request: pytest.FixtureRequest) -> type[DocumentStore]:
    """Each embedded engine: the same documents must give the same answers."""
    engine: type[DocumentStore] = request.param
    return engine


def test_import_reads_beir_and_ndjson_updates_and_deletes(
    store: type[DocumentStore], sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    c = store.for_workspace(sqlite_workspace.settings.data_dir)
    assert c.import_file(write_jsonl(tmp_path / "a.jsonl", DOCS)).total == 5
    report = c.import_file(
        write_jsonl(
            tmp_path / "b.jsonl",
            [
                {
                    "docId": "refund",
                    "title": "Refund policy",
                    "body": "Refunds within 14 days.",
                    "lang": "en",
                },
                {"docId": "invoice", "deleted": True},
            ],
        )
    )
    assert (report.upserted, report.deleted, report.total) == (1, 1, 4)
    assert c.documents(["refund"])["refund"].extra == {"lang": "en"}
    assert [h.doc_id for h in c.lexical("invoice", 5)] == []
    assert [h.doc_id for h in c.lexical("refund policy", 5)] == ["refund"]
    # a fresh Fts5Engine on the same workspace (another process) sees the same index
    assert store.for_workspace(sqlite_workspace.settings.data_dir).count() == 4


def test_a_line_without_an_id_is_refused_with_its_line(
    store: type[DocumentStore], sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    c = store.for_workspace(sqlite_workspace.settings.data_dir)
    bad = write_jsonl(tmp_path / "bad.jsonl", [DOCS[0], {"title": "no id", "text": "x"}])
    with pytest.raises(InvalidInput, match=r"bad.jsonl line 2: the document has no id"):
        c.import_file(bad)
    assert c.count() == 0  # checked before anything is written


def test_lexical_folds_accents_and_ignores_fts_syntax(
    store: type[DocumentStore], sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    c = store.for_workspace(sqlite_workspace.settings.data_dir)
    c.import_file(
        write_jsonl(
            tmp_path / "fr.jsonl",
            [{"_id": "1", "title": "Réinitialiser le mot de passe", "text": "Paramètres."}],
        )
    )
    assert [h.doc_id for h in c.lexical("REINITIALISER", 3)] == ["1"]
    assert c.lexical('passe" OR NOT *', 3)[0].doc_id == "1"


def test_a_title_match_outranks_body_matches_and_survives_the_cut(
    store: type[DocumentStore], sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    """Titles count double: a document naming the query in its title beats six that
    mention it once in a longer body (it would lose with both fields weighted 1), and
    the candidate cut keeps it however few are asked for."""
    c = store.for_workspace(sqlite_workspace.settings.data_dir)
    c.import_file(
        write_jsonl(
            tmp_path / "engines.jsonl",
            [
                {
                    "_id": "title",
                    "title": "Turbine blade cooling",
                    "text": (
                        "How the blades are cooled under load in the hot section of the engine."
                    ),
                },
                *(
                    {
                        "_id": f"body{i}",
                        "title": f"Engine note {i}",
                        "text": (
                            "The turbine sits behind the combustor, where the hot gas leaves "
                            "the chamber."
                        ),
                    }
                    for i in range(6)
                ),
                *(
                    {
                        "_id": f"other{i}",
                        "title": f"Wing note {i}",
                        "text": "The flaps extend on approach and retract after take-off.",
                    }
                    for i in range(20)
                ),
            ],
        )
    )
    hits = c.lexical("turbine", 10)
    assert [h.doc_id for h in hits][:2] == ["title", "body0"] and len(hits) == 7
    assert hits[0].score > hits[1].score
    assert [h.doc_id for h in c.lexical("turbine", 1)] == ["title"]


def test_lexical_results_are_sorted_by_the_score_they_report(
    store: type[DocumentStore], sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    """The order, the LIMIT cut and the reported score are one number, so each
    shorter list is the head of the longer one, and the bm25 profile shows them so."""
    rng = random.Random(3)
    words = [f"w{i}" for i in range(40)]
    c = store.for_workspace(sqlite_workspace.settings.data_dir)
    c.import_file(
        write_jsonl(
            tmp_path / "random.jsonl",
            [
                {
                    "_id": f"d{i}",
                    "title": " ".join(rng.choices(words, k=rng.randint(1, 6))),
                    "text": " ".join(rng.choices(words, k=rng.randint(5, 60))),
                }
                for i in range(300)
            ],
        )
    )
    engine = Searcher(sqlite_workspace, engine=c, background_aggregation=False)
    for query in ("w1 w7", "w3", "w12 w30 w2", "w39 w0"):
        hits = c.lexical(query, 100)
        scores = [h.score for h in hits]
        assert len(hits) == 100 and scores == sorted(scores, reverse=True)
        assert c.lexical(query, 10) == hits[:10]
        shown = engine.search(query, profile="bm25", limit=20).to_dict()["results"]
        assert [r["docId"] for r in shown] == [h.doc_id for h in hits[:20]]
        assert [r["score"] for r in shown] == sorted((r["score"] for r in shown), reverse=True)


# -- search and impressions --------------------------------------------------------------


def test_search_contract_token_and_impression(workspace: Workspace, corpus: Fts5Engine) -> None:
    _, key = keys.create_key(workspace.engine, name="bot", role="bot")
    with TestClient(create_app(workspace)) as client:
        r = client.post(
            "/v1/search",
            headers={"Authorization": f"Bearer {key}"},
            json={"query": "reset my password", "rankProfile": "bm25"},
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"queryId", "requestId", "rankProfile", "alpha", "results", "feedbackToken"}
    assert body["rankProfile"] == "bm25" and body["results"][0]["docId"] == "reset"
    assert [x["rank"] for x in body["results"]] == list(range(1, len(body["results"]) + 1))
    assert {"docId", "rank", "score", "scoreVespa", "feedbackScore"} <= set(body["results"][0])
    token_signer(workspace.settings).verify(
        body["feedbackToken"], body["queryId"], body["requestId"]
    )
    with workspace.engine.connect() as conn:
        row = conn.execute(sa.select(search_impressions)).one()
    assert row.query_id == body["queryId"] and row.query_norm == "reset my password"
    assert row.results[0][:2] == ["reset", 1]


@pytest.mark.parametrize(
    ("payload", "field", "status"),
    [
        ({"query": "password", "rankProfile": "fancy"}, "rankProfile", 422),
        ({"query": "password", "rankProfile": "hybrid", "alpha": 1.5}, "alpha", 422),
        ({"query": "  ?! ", "rankProfile": "bm25"}, "query", 422),
        ({"query": "password", "limit": 0}, "limit", 422),
    ],
)
def test_bad_requests_get_clear_errors(
    workspace: Workspace, corpus: Fts5Engine, payload: dict[str, Any], field: str, status: int
) -> None:
    _, key = keys.create_key(workspace.engine, name="bot", role="bot")
    with TestClient(create_app(workspace)) as client:
        r = client.post("/v1/search", headers={"Authorization": f"Bearer {key}"}, json=payload)
    assert r.status_code == status, r.text
    assert r.json()["error"]["details"]["field"] == field


# -- signals and the feedback ranking ----------------------------------------------------


def test_clicks_become_signals_once_and_rebuild_matches(
    workspace: Workspace, searcher: Searcher
) -> None:
    collector = Collector(workspace)
    events: list[dict[str, Any]] = []
    for i in range(3):
        response = searcher.search("password", profile="hybrid_with_feedback")
        events += click_events(response, "expire", f"s{i}")
    # one session clicking ten times counts once (the click-spam guard)
    events += click_events(response, "expire", "spammer", times=10)
    assert collector.ingest(events, rate_limit=False).count("accepted") == len(events)
    first = aggregate(workspace)
    assert first.impressions == 3 and first.version == 1
    row = signals_for(workspace.engine, "password")["expire"]
    assert (row.impressions, row.clicks, row.dwell_clicks) == (3, 4, 4)
    again = aggregate(workspace)  # nothing new: nothing counted twice
    assert again.rows == 0 and signals_for(workspace.engine, "password")["expire"] == row
    rebuild(workspace)
    assert signals_for(workspace.engine, "password")["expire"] == row


def test_feedback_moves_a_result_up_and_beta_zero_is_the_kill_switch(
    workspace: Workspace, searcher: Searcher
) -> None:
    query = "password"
    before = [d.doc_id for d in searcher.rank(query, profile="hybrid")]
    target = before[-1]
    collector = Collector(workspace)
    events: list[dict[str, Any]] = []
    for i in range(30):
        response = searcher.search(query, profile="hybrid_with_feedback")
        events += click_events(response, target, f"s{i}")
    collector.ingest(events, rate_limit=False)
    aggregate(workspace)
    after = searcher.rank(query, profile="hybrid_with_feedback")
    assert after[0].doc_id == target and after[0].feedback > 0
    assert [
        d.doc_id for d in searcher.rank(query, profile="hybrid_with_feedback", beta=0.0)
    ] == before
    # the warm cache is keyed by the signals version: cached before, fresh after
    assert searcher.search(query, profile="hybrid_with_feedback").cached


def test_one_session_moves_a_document_a_bounded_amount(
    workspace: Workspace, searcher: Searcher
) -> None:
    response = searcher.search("password", profile="hybrid_with_feedback")
    Collector(workspace).ingest(click_events(response, "expire", "one", times=50), rate_limit=False)
    aggregate(workspace)
    boosted = next(
        d for d in searcher.rank("password", profile="hybrid_with_feedback") if d.doc_id == "expire"
    )
    assert 0 < boosted.feedback < 0.5


def test_bounces_count_for_nothing_and_unreported_dwell_for_half(
    workspace: Workspace, searcher: Searcher
) -> None:
    collector = Collector(workspace)
    events: list[dict[str, Any]] = []
    for i in range(4):
        response = searcher.search("password", profile="hybrid_with_feedback")
        events += click_events(response, "reset", f"long{i}", dwell_ms=30_000)
        events += click_events(response, "sso", f"bounce{i}", dwell_ms=2_000)
        events += [
            e
            for e in click_events(response, "expire", f"quiet{i}")
            if e["eventType"] == "result_clicked"
        ]  # a client that sends no dwell
    collector.ingest(events, rate_limit=False)
    aggregate(workspace)
    rows = signals_for(workspace.engine, "password")
    assert (rows["reset"].dwell_clicks, rows["reset"].bounces) == (4, 0)
    assert (rows["sso"].clicks, rows["sso"].dwell_clicks, rows["sso"].bounces) == (4, 0, 4)
    assert (rows["expire"].clicks, rows["expire"].bounces) == (4, 0)
    assert utility(4, 4, 0) == 4 and utility(4, 0, 4) == 0 and utility(4, 0, 0) == 2
    feedback = {
        d.doc_id: d.feedback for d in searcher.rank("password", profile="hybrid_with_feedback")
    }
    assert feedback["reset"] > feedback["expire"] > feedback["sso"]


def test_position_bias_is_harvested_from_documents_seen_at_several_ranks(
    sqlite_workspace: Workspace,
) -> None:
    """Clicks drawn from a known position-based model: examination 1/rank, each
    document its own attractiveness, shown at a few random ranks. The fit must
    find 1/rank, whatever the documents' attractiveness, and not EM's bias."""
    rng = random.Random(5)
    rows = []
    for d in range(3000):
        gamma = rng.choice([0.05, 0.1, 0.3, 0.6, 1.0])
        shown = rng.sample(range(1, 11), rng.randint(1, 3))
        imps: dict[str, int] = {}
        clicks: dict[str, int] = {}
        for rank in shown:
            n = rng.randint(2, 30)
            imps[str(rank)] = n
            clicks[str(rank)] = sum(rng.random() < gamma / rank for _ in range(n))
        total = sum(clicks.values())
        rows.append(
            {
                "query_norm": f"q{d % 300}",
                "doc_id": f"d{d}",
                "impressions": sum(imps.values()),
                "impressions_by_rank": imps,
                "clicks_by_rank": clicks,
                "clicks": total,
                "dwell_clicks": total,
                "pins": 0,
                "hides": 0,
                "votes_up": 0,
                "votes_down": 0,
                "reformulations": 0,
                "abandonments": 0,
                "updated_ms": 0,
            }
        )
    with sqlite_workspace.engine.begin() as conn:
        assert fit_pbm(conn)[0] == [1.0]  # nothing seen yet
        conn.execute(search_signals.insert(), rows)
        theta, gamma0 = fit_pbm(conn)
    assert len(theta) == 10 and theta[0] == 1.0
    assert theta == sorted(theta, reverse=True)  # a lower rank is never examined more
    for rank, t in enumerate(theta, start=1):
        assert abs(t - 1 / rank) < 0.04, (rank, theta)
    assert 0.2 < gamma0 < 0.5  # the mean attractiveness is 0.41


def test_adjacent_swaps_measure_position_bias_whatever_the_documents() -> None:
    """A randomized experiment: the ranker puts ever less appealing documents lower,
    half the impressions swap one adjacent pair, people examine rank k with
    probability 1/k. The swap estimate finds θ_{k+1}/θ_k = k/(k+1) although raw
    click-through by rank falls much faster (appeal and position confounded)."""
    rng = random.Random(11)
    swaps = SwapCounts()
    appeal = [0.9 / j for j in range(1, 11)]  # of the document the ranker put at j
    raw = [0] * 10
    for _ in range(40_000):
        order = list(range(10))
        swapped = None
        if rng.random() < 0.5:
            swapped = rng.randrange(1, 10)
            order[swapped - 1], order[swapped] = order[swapped], order[swapped - 1]
        swaps.shown(10, swapped)
        for rank, original in enumerate(order, start=1):
            if rng.random() < 1 / rank and rng.random() < appeal[original]:
                swaps.clicked(rank, 10, swapped)
                raw[rank - 1] += 1
    for k, tolerance in ((1, 0.05), (2, 0.05), (3, 0.06), (5, 0.12)):  # fewer clicks deeper
        measured = swaps.ratio(k)
        assert measured is not None
        ratio, _ = measured
        assert abs(ratio - k / (k + 1)) < tolerance, (k, ratio)
        assert raw[k] / raw[k - 1] < k / (k + 1) - 0.15  # the naive ratio is far off
    assert SwapCounts.load(swaps.dump()).cells == swaps.cells
    assert SwapCounts().ratio(1) is None


def test_swaps_are_recorded_and_counted(workspace: Workspace, tmp_path: Path) -> None:
    searcher = _explorer(workspace, tmp_path, share=0.0)
    searcher.settings = searcher.settings.model_copy(update={"search_exploration": 0.5})
    events: list[dict[str, Any]] = []
    for i in range(30):
        response = searcher.search("password", profile="bm25", limit=5)
        events += click_events(response, response.results[0].doc_id, f"s{i}")
    Collector(workspace).ingest(events, rate_limit=False)
    aggregate(workspace)
    with workspace.engine.connect() as conn:
        swapped = conn.execute(sa.select(search_impressions.c.swapped_rank)).scalars().all()
        state = conn.execute(sa.select(search_state.c.propensities)).scalar_one()
    assert {s for s in swapped if s is not None} <= {1, 2, 3, 4}
    treated = sum(1 for s in swapped if s == 1)
    cells = SwapCounts.load(state["swaps"]).cells
    assert cells[1][1] == treated and cells[1][0] == sum(1 for s in swapped if s is None or s > 2)
    # each rank-1 click is in pair 1's control or treated group, unless the swap
    # was at ranks 2–3, which leaves rank 2 holding another document
    assert cells[1][2] + cells[1][4] == sum(1 for s in swapped if s != 2)


# -- the simulation ----------------------------------------------------------------------


def test_ndcg() -> None:
    assert ndcg_at(["a", "b"], {"a": 2, "b": 1}) == pytest.approx(1.0)
    assert ndcg_at(["b", "a"], {"a": 2, "b": 1}) < 1.0
    assert ndcg_at(["x"], {"a": 1}) == 0.0


def _small_dataset(tmp_path: Path) -> Path:
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    # The relevant d8 and d9 match the query least: no "help" in their titles.
    docs = [
        {
            "_id": f"d{i}",
            "title": f"password help {i}" if i < 8 else f"account {i}",
            "text": "password " * (10 - i) + "account",
        }
        for i in range(10)
    ]
    write_jsonl(data / "corpus.jsonl", docs)
    write_jsonl(data / "queries.jsonl", [{"_id": "q1", "text": "password help"}])
    (data / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td9\t4\nq1\td8\t3\n", encoding="utf-8"
    )
    return data


def test_simulation_learns_on_a_small_dataset(tmp_path: Path) -> None:
    data = _small_dataset(tmp_path)
    result = simulate(data, sessions_per_query=60, rounds=3, eval_sessions=5, seed=1, thompson=0.2)
    assert result.final("bm25", "ndcg10") < 0.5
    assert result.gap_closed("hybrid_with_feedback") > 0.5
    assert result.gap_closed("naive_ctr") > 0.0
    assert set(result.settings["arms"]) == {"hybrid_with_feedback", "naive_ctr"}
    assert 0.0 < result.training_ctr("hybrid_with_feedback") <= 1.0
    files = result.write(tmp_path / "out")
    assert (tmp_path / "out" / "simulation.csv") in files
    png = tmp_path / "out" / "simulation.png"  # matplotlib comes with the dev extras
    assert png in files and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "out" / "simulation.csv").read_text().splitlines()
    assert rows[0] == "round,sessions,profile,ndcg10,ctr3,train_ctr3" and len(rows) == 1 + 4 * 4


def test_a_tuning_run_trains_the_arms_it_names_with_the_beta_it_is_given(
    tmp_path: Path,
) -> None:
    """``beta`` reaches the learning arm: at 0 its ranking is the first phase's,
    whatever it was taught; ``arms`` trains the named arm alone."""
    hybrid = [a for a in ARMS if a.name == "hybrid_with_feedback"]
    data = _small_dataset(tmp_path)
    options: dict[str, Any] = {"sessions_per_query": 30, "rounds": 1, "eval_sessions": 5, "seed": 1}
    off = simulate(data, beta=0.0, arms=hybrid, **options)
    on = simulate(data, beta=1.0, arms=hybrid, **options)
    assert off.settings["beta"] == 0.0 and set(off.settings["arms"]) == {"hybrid_with_feedback"}
    assert off.final("hybrid_with_feedback", "ndcg10") == off.final("bm25", "ndcg10")
    assert on.final("hybrid_with_feedback", "ndcg10") > on.final("bm25", "ndcg10")
    assert "naive_ctr" not in on.to_dict()["final"]
    with pytest.raises(InvalidInput, match="beta"):
        simulate(data, beta=11.0, **options)


def test_the_naive_arm_counts_clicks_over_raw_impressions_with_the_same_prior(
    workspace: Workspace, searcher: Searcher
) -> None:
    """The simulation's naive baseline is smoothed click counting, not a strawman:
    the product's scorer and prior (``search_prior_weight`` at the average rate),
    with every impression counted as examined and every click the same."""
    collector = Collector(workspace)
    for i in range(4):
        response = searcher.search("password", session=f"s{i}")
        rank = next(k for k, d in enumerate(response.results, start=1) if d.doc_id == "expire")
        now = int(time.time() * 1000)
        collector.ingest(sim_click_events(response, rank, f"s{i}", None, now), rate_limit=False)
    aggregate(workspace)
    _examined_as_shown(workspace)
    with workspace.engine.connect() as conn:
        fitted = conn.execute(sa.select(search_state.c.propensities)).scalar_one()
        rows = signals_for(conn, "password")
    shown = sum(r.impressions for r in rows.values())
    assert fitted["theta"] == [1.0] * 10
    assert fitted["gamma0"] == pytest.approx(0.5 * 4 / shown, abs=1e-6)  # ½: no dwell sent
    m, c0 = workspace.settings.search_prior_weight, 4 / shown
    expected = math.log((4 + m * c0) / (rows["expire"].impressions + m) / c0)
    scores = {
        d.doc_id: d.feedback for d in searcher.rank("password", profile="hybrid_with_feedback")
    }
    assert scores["expire"] == pytest.approx(expected, abs=1e-4)
    assert scores["reset"] == pytest.approx(math.log(m / (4 + m)), abs=1e-4)  # shown, unclicked


def test_cli_import_search_and_signals(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    runner = CliRunner()
    ws = ["--workspace", str(sqlite_workspace.root)]
    r = runner.invoke(main, [*ws, "corpus", "import", str(write_jsonl(tmp_path / "d.jsonl", DOCS))])
    assert r.exit_code == 0 and "5 document(s) imported" in r.output, r.output
    r = runner.invoke(main, [*ws, "search", "refund", "--profile", "bm25", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["results"][0]["docId"] == "refund"
    r = runner.invoke(main, [*ws, "search", "refund", "--alpha", "2"])
    assert r.exit_code == 1 and "alpha" in r.output
    r = runner.invoke(main, [*ws, "signals", "update"])
    assert r.exit_code == 0 and "1 impression(s)" in r.output, r.output


@pytest.fixture(autouse=True)
def _no_background(monkeypatch: pytest.MonkeyPatch) -> None:
    """Background aggregation would race the assertions; tests aggregate explicitly."""
    monkeypatch.setattr("amelio.search.service.AGGREGATE_EVERY_S", 1e9)


# -- exploration -------------------------------------------------------------------------


def _explorer(workspace: Workspace, tmp_path: Path, share: float) -> Searcher:
    c = Fts5Engine.for_workspace(workspace.settings.data_dir)
    c.import_file(
        write_jsonl(
            tmp_path / "many.jsonl",
            [
                {"_id": f"d{i:02}", "title": f"password note {i}", "text": "password " * (40 - i)}
                for i in range(30)
            ],
        )
    )
    searcher = Searcher(workspace, engine=c, background_aggregation=False, rng=random.Random(3))
    searcher.settings = workspace.settings.model_copy(
        update={"search_thompson": share, "search_exploration": 0.0}
    )
    return searcher


def test_thompson_sampling_shows_unseen_candidates_at_their_recorded_rank(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Exploring responses draw each feedback score from its posterior: candidates
    nobody has examined reach the page, the impression records where they were
    shown, and a click counts at that rank."""
    searcher = _explorer(workspace, tmp_path, share=1.0)
    page = [d.doc_id for d in searcher.rank("password", profile="hybrid_with_feedback", limit=5)]
    assert page == ["d00", "d01", "d02", "d03", "d04"]  # rank() never explores
    seen: set[str] = set()
    for _ in range(30):
        response = searcher.search("password", profile="hybrid_with_feedback", limit=5)
        assert response.explored and not response.cached and len(response.results) == 5
        scores = [d.score for d in response.results]
        assert scores == sorted(scores, reverse=True)  # ordered by the sampled score
        seen |= {d.doc_id for d in response.results}
        if {d.doc_id for d in response.results} - set(page):
            clicked = response
    assert len(seen - set(page)) >= 5  # the deeper candidates got their turn
    newcomer = next(d.doc_id for d in clicked.results if d.doc_id not in page)
    rank = next(i for i, d in enumerate(clicked.results, start=1) if d.doc_id == newcomer)
    Collector(workspace).ingest(click_events(clicked, newcomer, "explorer"), rate_limit=False)
    aggregate(workspace)
    row = signals_for(workspace.engine, "password")[newcomer]
    assert row.clicks_by_rank == {str(rank): 1}
    assert row.impressions_by_rank.get(str(rank), 0) >= 1
    with workspace.engine.connect() as conn:
        flags = conn.execute(sa.select(search_impressions.c.explored)).scalars().all()
    assert len(flags) == 30 and all(flags)


def test_exploration_follows_uncertainty(workspace: Workspace, tmp_path: Path) -> None:
    """A document many sessions were satisfied by stays on top of sampled rankings;
    one shown often and never clicked rarely comes back."""
    searcher = _explorer(workspace, tmp_path, share=1.0)
    events: list[dict[str, Any]] = []
    for batch in range(3):  # the service aggregates as it goes
        for i in range(60):
            response = searcher.search("password", profile="hybrid_with_feedback", limit=5)
            if any(d.doc_id == "d20" for d in response.results):
                events += click_events(response, "d20", f"s{batch}-{i}")
        Collector(workspace).ingest(events, rate_limit=False)
        events = []
        aggregate(workspace)
    tops = [
        searcher.search("password", profile="hybrid_with_feedback", limit=5).results[0].doc_id
        for _ in range(40)
    ]
    assert tops.count("d20") >= 30
    assert searcher.rank("password", profile="hybrid_with_feedback")[0].doc_id == "d20"


def test_no_exploration_when_its_share_is_zero(workspace: Workspace, tmp_path: Path) -> None:
    searcher = _explorer(workspace, tmp_path, share=0.0)
    first = [d.doc_id for d in searcher.search("password", limit=5).results]
    for _ in range(20):
        response = searcher.search("password", limit=5)
        assert not response.explored and [d.doc_id for d in response.results] == first


def test_adjacent_swaps_are_recorded(workspace: Workspace, tmp_path: Path) -> None:
    searcher = _explorer(workspace, tmp_path, share=0.0)
    searcher.settings = searcher.settings.model_copy(update={"search_exploration": 0.5})
    page = [d.doc_id for d in searcher.rank("password", profile="bm25", limit=5)]
    swapped = 0
    for _ in range(40):
        response = searcher.search("password", profile="bm25", limit=5)
        shown = [d.doc_id for d in response.results]
        assert sorted(shown) == sorted(page)
        moved = [i for i in range(5) if shown[i] != page[i]]
        assert response.explored == bool(moved)
        if moved:
            swapped += 1
            assert len(moved) == 2 and moved[1] == moved[0] + 1
    assert 10 <= swapped <= 30


# -- GET /v1/search/signals --------------------------------------------------------------


def test_signals_route_shows_one_query_to_admins_only(
    workspace: Workspace, searcher: Searcher
) -> None:
    response = searcher.search("Password!", profile="bm25")
    Collector(workspace).ingest(click_events(response, "expire", "s1"), rate_limit=False)
    aggregate(workspace)
    _, admin = keys.create_key(workspace.engine, name="admin", role="admin")
    _, bot = keys.create_key(workspace.engine, name="bot", role="bot")
    with TestClient(create_app(workspace)) as client:
        r = client.get(
            "/v1/search/signals",
            params={"query": "  PASSWORD "},
            headers={"Authorization": f"Bearer {admin}"},
        )
        denied = client.get(
            "/v1/search/signals",
            params={"query": "password"},
            headers={"Authorization": f"Bearer {bot}"},
        )
        unknown = client.get(
            "/v1/search/signals",
            params={"query": "nothing here"},
            headers={"Authorization": f"Bearer {admin}"},
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["query"] == "password"
    expire = body["documents"]["expire"]
    assert expire["clicks"] == 1 and expire["dwellClicks"] == 1 and expire["impressions"] == 1
    rank = str(next(i for i, d in enumerate(response.results, start=1) if d.doc_id == "expire"))
    assert expire["clicksByRank"] == {rank: 1} and expire["impressionsByRank"][rank] == 1
    assert set(body["documents"]) == {d.doc_id for d in response.results}
    assert denied.status_code == 403
    assert unknown.status_code == 200 and unknown.json()["documents"] == {}
