"""Interleaving experiments: the two methods, credit, the verdict, serving, the faces."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio.cli import main
from amelio.db.schema import search_impressions
from amelio.errors import Conflict, InvalidInput, NotFound
from amelio.feedback import Collector
from amelio.feedback.ubi import export_ubi, ingest_ubi
from amelio.search import Searcher, aggregate
from amelio.search import experiments as ex
from amelio.search.engines.registry import workspace_corpus
from amelio.search.interleave import (
    MIN_SESSIONS,
    Interleaving,
    credit,
    interleave,
    preference,
)
from amelio.search.profiles import parse_profile
from amelio.search.store import DocumentStore
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace
from amelio.workspace.projects import create_project
from test_search import click_events

DOCS = [
    {"_id": "reset", "title": "Reset your password", "text": "Reset the password in settings."},
    {"_id": "sso", "title": "Single sign-on", "text": "The password is managed by your provider."},
    {"_id": "expire", "title": "Password expiry", "text": "Passwords expire after 90 days."},
    {"_id": "invoice", "title": "Download an invoice", "text": "Invoices are under billing."},
]
#: B: the feedback profile, which learns below that people want "expire" first.
B = "hybrid_with_feedback:alpha=0,beta=5,exploration=0"


# -- the methods -------------------------------------------------------------------------


def _chi_square(counts: list[int], total: int) -> float:
    """χ² of a 50/50 split for each cell (1 degree of freedom each)."""
    return max((2 * c - total) ** 2 / total for c in counts)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]),  # disjoint
        ([f"d{i}" for i in range(10)], [f"d{i}" for i in (1, 0, 3, 2, 5, 4, 7, 6, 9, 8)]),
    ],
    ids=["disjoint", "overlapping"],
)
def test_team_draft_gives_each_ranker_an_equal_chance_at_every_rank(
    a: list[str], b: list[str]
) -> None:
    rng = random.Random(7)
    trials = 4000
    team_a = [0] * 10
    for _ in range(trials):
        shown = interleave(a, b, 10, rng, "team-draft")
        for rank, team in enumerate(shown.teams):
            team_a[rank] += team == "a"
        assert len(set(shown.docs)) == len(shown.docs) == 10
    # 10.83 is χ²(1)'s 0.1 % point: no rank may favour a side.
    assert _chi_square(team_a, trials) < 10.83, team_a
    # A draft where A always picks first fails the same test at rank 1.
    assert _chi_square([trials, *team_a[1:]], trials) > 10.83


def test_balanced_keeps_each_rankers_top_in_the_top() -> None:
    a = [f"d{i}" for i in range(8)]
    b = ["d3", "d7", "d0", "x1", "x2", "d1", "x3", "x4"]
    for seed in range(20):
        shown = interleave(a, b, 8, random.Random(seed), "balanced")
        for n in range(1, 9):
            top = set(shown.docs[:n])
            ka = max((k for k in range(9) if set(a[:k]) <= top), default=0)
            kb = max((k for k in range(9) if set(b[:k]) <= top), default=0)
            assert max(ka, kb) >= (n + 1) // 2, (seed, n, shown.docs)


def test_credit_by_team_and_by_the_balanced_rule() -> None:
    drafted = Interleaving("team-draft", ("x", "y", "z"), "abb", (1, None, 2), (2, 1, None))
    assert credit(drafted, {1: 1.0, 3: 0.5}) == (1.0, 0.5)
    # "x" is first in both lists: the coin gave it to A, so its click counts for no one.
    agreed = Interleaving("team-draft", ("x", "y", "z"), "abb", (1, 2, None), (1, None, 2))
    assert credit(agreed, {1: 1.0, 2: 1.0}) == (0.0, 1.0)
    # Balanced: the lowest click is "z" (rank 3), A's rank 2 and B's none → k = 2.
    # Clicks on y and z: A's top 2 holds z, B's top 2 holds y: a tie.
    walked = Interleaving("balanced", ("x", "y", "z"), "aba", (1, None, 2), (3, 1, None))
    assert credit(walked, {2: 1.0, 3: 1.0}) == (1.0, 1.0)
    # Clicks on x and z: both in A's top 2, neither in B's (x is B's third).
    assert credit(walked, {1: 1.0, 3: 1.0}) == (2.0, 0.0)
    # The same list from both rankers says nothing: nothing is credited.
    same = Interleaving("team-draft", ("x", "y"), "ab", (1, 2), (1, 2))
    assert not same.competitive
    assert credit(same, {1: 1.0}) == (0.0, 0.0)


def test_the_verdict_waits_for_enough_sessions_and_an_interval_clear_of_zero() -> None:
    strong = preference([1] * 30 + [-1] * 8 + [0] * 4)
    assert strong.verdict == "A"
    assert strong.interval[0] > 0
    assert preference([-1] * 25 + [1] * 5 + [0] * 2).verdict == "B"
    few = preference([1] * (MIN_SESSIONS - 1))
    assert few.verdict == "undecided"
    balanced = preference([1, -1] * 40)
    assert balanced.verdict == "undecided"
    assert balanced.interval[0] < 0 < balanced.interval[1]


def test_stored_interleavings_are_checked_when_read_back() -> None:
    good = {"method": "team-draft", "teams": "ab", "a": [1, None], "b": [None, 1]}
    assert Interleaving.from_dict(good, ["x", "y"]).to_dict() == good
    for bad, says in (
        ({**good, "teams": "ac"}, "teams"),
        ({**good, "a": [1]}, "one entry per shown result"),
        ({**good, "method": "coin"}, "method"),
        ({**good, "b": [0, 1]}, "ranks"),
    ):
        with pytest.raises(ValueError, match=says):
            Interleaving.from_dict(bad, ["x", "y"])


# -- profiles ----------------------------------------------------------------------------


def test_profile_specs_parse_and_name_what_is_wrong() -> None:
    spec = parse_profile("hybrid_with_feedback:beta=1.5,exploration=0")
    assert (spec.profile, spec.beta, spec.exploration, spec.alpha) == (
        "hybrid_with_feedback",
        1.5,
        0.0,
        None,
    )
    assert spec.label() == "hybrid_with_feedback:beta=1.5,exploration=0"
    for text, says in (
        ("bm26", "Unknown rank profile"),
        ("hybrid:gamma=1", "not a setting"),
        ("hybrid:alpha=2", "between 0 and 1"),
        ("hybrid:alpha=x", "not a number"),
        ("hybrid:alpha=0.1,alpha=0.2", "twice"),
        ("hybrid:", "no settings"),
    ):
        with pytest.raises(InvalidInput, match=says):
            parse_profile(text)


# -- serving -----------------------------------------------------------------------------


@pytest.fixture
def corpus(workspace: Workspace, tmp_path: Path) -> DocumentStore:
    c = workspace_corpus(workspace.settings)
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    c.import_file(path)
    return c


def _searcher(workspace: Workspace, corpus: DocumentStore, seed: int = 0) -> Searcher:
    searcher = Searcher(
        workspace, engine=corpus, background_aggregation=False, rng=random.Random(seed)
    )
    searcher.settings = workspace.settings.model_copy(
        update={"search_thompson": 0.0, "search_exploration": 0.0}
    )
    return searcher


def _teach_expire_first(workspace: Workspace, searcher: Searcher) -> None:
    """Five people search "password" and read "expire" long: the feedback profile
    (B) puts it first, BM25 (A) does not."""
    collector = Collector(workspace)
    for i in range(5):
        response = searcher.search("password", session=f"teacher-{i}", profile=B.split(":")[0])
        collector.ingest(
            click_events(response, "expire", f"teacher-{i}", dwell_ms=30_000), rate_limit=False
        )
    aggregate(workspace)
    a = [d.doc_id for d in searcher.rank("password", profile="bm25")]
    b = [
        d.doc_id for d in searcher.rank("password", profile="hybrid_with_feedback", alpha=0, beta=5)
    ]
    assert a[0] != "expire"
    assert b[0] == "expire"


def test_an_experiment_serves_interleaved_lists_and_people_decide(
    workspace: Workspace, corpus: DocumentStore
) -> None:
    searcher = _searcher(workspace, corpus)
    _teach_expire_first(workspace, searcher)
    create_project(workspace.engine, "other")
    ex.create_experiment(workspace, "feedback-vs-bm25", "bm25", B, share=1.0, engine=corpus)
    searcher.forget_experiments()
    collector = Collector(workspace)
    for i in range(40):  # people who want "expire", wherever it is shown
        session = f"s{i}"
        response = searcher.search("password", session=session)
        assert response.experiment == "feedback-vs-bm25"
        assert response.to_dict()["experiment"] == "feedback-vs-bm25"
        collector.ingest(
            click_events(response, "expire", session, dwell_ms=20_000), rate_limit=False
        )
    other = searcher.search("password", project="other", session="s0")
    assert other.experiment is None
    assert "experiment" not in other.to_dict()
    with workspace.engine.connect() as conn:
        rows = conn.execute(
            sa.select(search_impressions.c.interleaving).where(
                search_impressions.c.experiment == "feedback-vs-bm25"
            )
        ).all()
    assert len(rows) == 40
    assert all(set(r.interleaving["teams"]) <= {"a", "b"} for r in rows)
    found = ex.experiment_results(workspace, "feedback-vs-bm25")
    assert found.impressions == 40
    assert found.sessions == found.competitive_sessions == 40
    assert found.credit_b == 40.0  # every satisfied click was on B's pick
    assert found.credit_a == 0.0
    assert found.preference.verdict == "B"
    assert found.preference.wins_b == 40
    # Stopped: the next search is served as usual, and the results stay.
    ex.stop_experiment(workspace, "feedback-vs-bm25")
    searcher.forget_experiments()
    assert searcher.search("password", session="s1").experiment is None
    assert ex.experiment_results(workspace, "feedback-vs-bm25").impressions == 40
    with pytest.raises(Conflict, match="stopped already"):
        ex.stop_experiment(workspace, "feedback-vs-bm25")


def test_a_session_stays_in_its_arm_and_the_share_holds(
    workspace: Workspace, corpus: DocumentStore
) -> None:
    searcher = _searcher(workspace, corpus)
    made = ex.create_experiment(
        workspace,
        "quarter",
        "bm25",
        "hybrid_with_feedback:alpha=0,beta=3",
        share=0.25,
        engine=corpus,
    )
    inside = [made.assigned(f"session-{i}") for i in range(4000)]
    assert 0.22 < sum(inside) / len(inside) < 0.28
    member = next(f"session-{i}" for i, yes in enumerate(inside) if yes)
    outsider = next(f"session-{i}" for i, yes in enumerate(inside) if not yes)
    for _ in range(3):
        assert searcher.search("password", session=member).experiment == "quarter"
        assert searcher.search("password", session=outsider).experiment is None


def test_bad_experiments_are_refused_and_nothing_is_written(
    workspace: Workspace, corpus: DocumentStore, tmp_path: Path
) -> None:
    for a, b, kwargs, error, says in (
        ("bm26", "bm25", {}, InvalidInput, "Unknown rank profile"),
        ("bm25", "bm25:beta=2", {}, InvalidInput, "rank alike"),
        ("bm25", B, {"share": 0}, InvalidInput, "share"),
        ("bm25", B, {"method": "coin"}, InvalidInput, "method"),
        ("bm25", B, {"project": "nowhere"}, NotFound, "No project named 'nowhere'"),
    ):
        with pytest.raises(error, match=says):
            ex.create_experiment(workspace, "bad", a, b, engine=corpus, **kwargs)
    assert ex.list_experiments(workspace) == []
    empty, _ = init_workspace(tmp_path / "empty")
    with pytest.raises(InvalidInput, match="no search"):
        ex.create_experiment(empty, "nothing", "bm25", B)
    empty.dispose()
    ex.create_experiment(workspace, "first", "bm25", B, engine=corpus)
    with pytest.raises(Conflict, match="'first' is running"):
        ex.create_experiment(workspace, "second", "bm25", "hybrid", engine=corpus)
    with pytest.raises(Conflict, match="exists already"):
        ex.create_experiment(workspace, "first", "bm25", B, engine=corpus)
    with pytest.raises(NotFound, match="No experiment named"):
        ex.experiment_results(workspace, "missing")


def test_ubi_export_carries_the_attribution_and_ingest_keeps_it(
    workspace: Workspace, corpus: DocumentStore, tmp_path: Path
) -> None:
    searcher = _searcher(workspace, corpus)
    _teach_expire_first(workspace, searcher)
    ex.create_experiment(workspace, "carried", "bm25", B, share=1.0, engine=corpus)
    searcher.forget_experiments()
    collector = Collector(workspace)
    for i in range(3):
        response = searcher.search("password", session=f"u{i}")
        collector.ingest(
            click_events(response, "expire", f"u{i}", dwell_ms=20_000), rate_limit=False
        )
    export_ubi(workspace, tmp_path / "ubi")
    queries = [
        json.loads(line)
        for line in (tmp_path / "ubi" / "ubi_queries.ndjson").read_text().splitlines()
    ]
    carried = [q for q in queries if q["query_attributes"].get("experiment") == "carried"]
    assert len(carried) == 3
    fresh, _ = init_workspace(tmp_path / "fresh")
    report = ingest_ubi(fresh, tmp_path / "ubi" / "ubi_queries.ndjson", consent="granted")
    assert report.queries["rejected"] == 0
    with workspace.engine.connect() as conn:
        before = {
            r.query_id: (r.experiment, r.interleaving)
            for r in conn.execute(
                sa.select(search_impressions).where(search_impressions.c.experiment.is_not(None))
            )
        }
    with fresh.engine.connect() as conn:
        after = {
            r.query_id: (r.experiment, r.interleaving)
            for r in conn.execute(
                sa.select(search_impressions).where(search_impressions.c.experiment.is_not(None))
            )
        }
    assert after == before
    # A forged attribution that does not fit its hits is a rejected line, not stored.
    forged = dict(carried[0], query_id="forged-1")
    forged["query_attributes"] = dict(
        forged["query_attributes"],
        interleaving={**forged["query_attributes"]["interleaving"], "teams": "a"},
    )
    (tmp_path / "forged.jsonl").write_text(json.dumps(forged) + "\n")
    refused = ingest_ubi(fresh, tmp_path / "forged.jsonl", consent="granted")
    assert refused.queries["rejected"] == 1
    assert "one entry per shown result" in refused.problems[0][2]
    fresh.dispose()


# -- explain -----------------------------------------------------------------------------


def test_explain_gives_each_part_of_the_score(workspace: Workspace, corpus: DocumentStore) -> None:
    searcher = _searcher(workspace, corpus)
    _teach_expire_first(workspace, searcher)
    response = searcher.search(
        "password", profile="hybrid_with_feedback", alpha=0, beta=5, explain=True
    )
    body = response.to_dict()
    top = body["results"][0]
    assert top["docId"] == "expire"
    part = top["explain"]
    assert part["bm25"]["rank"] > 1  # BM25 alone did not put it first
    assert part["moved"] == part["firstPhase"]["rank"] - 1 > 0
    assert part["feedback"]["weight"] == 5
    assert part["feedback"]["dwellClicks"] == 5
    assert part["feedback"]["clicks"] == 5
    assert part["feedback"]["actors"] == 5
    low, high = part["feedback"]["interval"]
    assert low < part["feedback"]["rate"] < high
    assert part["feedback"]["rate"] > part["feedback"]["averageRate"]
    assert part["exploration"] == {"thompson": False, "swapped": False}
    assert part["semantic"] is None
    plain = searcher.search("password", profile="bm25", explain=True).to_dict()
    first = plain["results"][0]["explain"]
    assert first["bm25"]["rank"] == 1
    assert first["feedback"] is None
    assert "explain" not in searcher.search("password").to_dict()["results"][0]


def test_explain_in_words() -> None:
    from amelio.web.data import why
    from amelio.web.i18n import strings

    part = {
        "moved": 3,
        "bm25": {"score": 1.2, "rank": 4},
        "feedback": {
            "examinations": 120.0,
            "satisfiedClicks": 41.0,
            "rate": 0.34,
            "interval": [0.26, 0.43],
            "averageRate": 0.2,
            "held": False,
            "actors": 12,
        },
        "exploration": {"thompson": False, "swapped": False},
        "pins": 0,
        "hides": 0,
    }
    words = why(part, strings("en"))
    assert words.startswith("moved up 3 places: 41 debiased clicks of 120 examinations")
    assert "BM25 rank 4" in words
    assert why(part, strings("fr")).startswith("monté de 3 places : 41 clics débiaisés") or (
        why(part, strings("fr")).startswith("monté de 3 places: 41 clics débiaisés")
    )
    held = {**part, "moved": -1, "feedback": {**part["feedback"], "held": True}}
    assert why(held, strings("en")).startswith("moved down 1 place:")
    assert "held: 12 person(s)" in why(held, strings("en"))


# -- the faces ---------------------------------------------------------------------------


def test_the_routes_are_for_admins_and_say_the_verdict(
    workspace: Workspace, corpus: DocumentStore
) -> None:
    _, admin = keys.create_key(workspace.engine, name="admin", role="admin")
    _, bot = keys.create_key(workspace.engine, name="bot", role="bot")
    with TestClient(create_app(workspace)) as client:
        body = {"name": "api", "a": "bm25", "b": B, "share": 1.0}
        refused = client.post(
            "/v1/experiments", json=body, headers={"Authorization": f"Bearer {bot}"}
        )
        assert refused.status_code == 403
        auth = {"Authorization": f"Bearer {admin}"}
        made = client.post("/v1/experiments", json=body, headers=auth)
        assert made.status_code == 201, made.text
        assert made.json()["b"] == B
        same = client.post("/v1/experiments", json={**body, "name": "again"}, headers=auth)
        assert same.status_code == 409
        bad = client.post("/v1/experiments", json={**body, "name": "x", "b": "bm25"}, headers=auth)
        assert bad.status_code == 422
        searched = client.post(
            "/v1/search",
            json={"query": "password", "sessionId": "s1", "explain": True},
            headers={"Authorization": f"Bearer {bot}"},
        )
        assert searched.json()["experiment"] == "api"
        assert all("interleaving" in r["explain"] for r in searched.json()["results"])
        shown = client.get("/v1/experiments/api", headers=auth).json()
        assert shown["impressions"] == 1
        assert shown["preference"]["verdict"] == "undecided"
        listed = client.get("/v1/experiments", headers=auth).json()["experiments"]
        assert [e["name"] for e in listed] == ["api"]
        stopped = client.post("/v1/experiments/api/stop", headers=auth)
        assert stopped.json()["status"] == "stopped"
        after = client.post(
            "/v1/search",
            json={"query": "password", "sessionId": "s1"},
            headers={"Authorization": f"Bearer {bot}"},
        )
        assert "experiment" not in after.json()
        assert client.get("/v1/experiments/none", headers=auth).status_code == 404


def test_the_cli_creates_shows_and_stops(workspace: Workspace, corpus: DocumentStore) -> None:
    runner = CliRunner()
    ws = ["-w", str(workspace.root)]
    made = runner.invoke(
        main, [*ws, "experiments", "create", "cli", "--a", "bm25", "--b", B, "--share", "0.5"]
    )
    assert made.exit_code == 0, made.output
    assert "50% of sessions" in made.output
    listed = runner.invoke(main, [*ws, "experiments", "list", "--json"])
    assert json.loads(listed.output)[0]["name"] == "cli"
    shown = runner.invoke(main, [*ws, "experiments", "show", "cli"])
    assert "verdict: undecided (needs 30 sessions" in shown.output
    stopped = runner.invoke(main, [*ws, "experiments", "stop", "cli", "--json"])
    assert json.loads(stopped.output)["status"] == "stopped"
    again = runner.invoke(main, [*ws, "experiments", "stop", "cli"])
    assert again.exit_code == 1
    assert "stopped already" in again.output
    bad = runner.invoke(main, [*ws, "experiments", "create", "x", "--a", "bm25", "--b", "bm25"])
    assert bad.exit_code == 1
    assert "rank alike" in bad.output


# -- the simulation ----------------------------------------------------------------------


def test_the_ab_moments_are_exact_under_the_click_model() -> None:
    """The A/B side of the comparison rests on :func:`_satisfaction`'s exact mean and
    variance: they must match what simulated people actually do."""
    from statistics import fmean, pvariance

    from amelio.search.interleaving_simulation import _satisfaction
    from amelio.search.simulate import _User

    ranking = [f"d{i}" for i in range(10)]
    judged = {"d0": 1, "d2": 3, "d5": 2}
    for model in ("pbm", "cascade"):
        user = _User(model, 3, random.Random(3))  # type: ignore[arg-type]
        draws = []
        for _ in range(20_000):
            clicks = user.clicks(ranking, judged)
            draws.append(sum(user.dwell_ms(judged.get(ranking[r - 1], 0)) >= 8000 for r in clicks))
        mean, variance = _satisfaction(ranking, judged, user)
        error = (variance / len(draws)) ** 0.5
        assert abs(fmean(draws) - mean) < 4 * error, model
        assert pvariance(draws) == pytest.approx(variance, rel=0.05), model


def test_simulate_interleave_says_how_many_sessions_each_design_needs(tmp_path: Path) -> None:
    from test_search import _small_dataset

    data = _small_dataset(tmp_path)
    runner = CliRunner()
    found = runner.invoke(
        main,
        [
            "simulate",
            "--dataset",
            str(data),
            "--interleave",
            "hybrid_with_feedback:alpha=0,beta=3,exploration=0,bm25",
            "--train-sessions",
            "30",
            "--sessions-per-query",
            "300",
            "--json",
        ],
    )
    assert found.exit_code == 0, found.output
    result = json.loads(found.output)
    assert result["settings"]["a"] == "hybrid_with_feedback:alpha=0,beta=3,exploration=0"
    assert result["ndcg10"]["a"] > result["ndcg10"]["b"]  # trained feedback beats bm25
    il = result["interleaving"]
    assert il["prefers"] == "A"
    assert il["agreesWithNdcg"]
    assert il["powerThere"] >= 0.8
    assert il["sessionsNeeded"] < result["ab"]["sessionsNeeded"]
    words = runner.invoke(
        main,
        ["simulate", "--dataset", str(data), "--interleave", "bm25", "--sessions-per-query", "2"],
    )
    assert words.exit_code == 1
    assert "two rankers" in words.output
    alike = runner.invoke(
        main,
        [
            "simulate",
            "--dataset",
            str(data),
            "--interleave",
            "bm25,bm25:beta=1",
            "--sessions-per-query",
            "2",
        ],
    )
    assert alike.exit_code == 1
    assert "rank alike" in alike.output
