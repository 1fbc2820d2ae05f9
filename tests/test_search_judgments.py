"""Judgment lists from clicks, an LLM and people; their agreement; offline relevance
evaluation against them, from the library, the CLI, the API and the dashboard."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio.cli import main
from amelio.errors import Conflict, InvalidInput, LLMNotConfigured, NotFound
from amelio.feedback import Collector
from amelio.search import Searcher, aggregate
from amelio.search import judgment_lists as store
from amelio.search import judgments as jl
from amelio.search.clickmodel import Propensities, load_propensities
from amelio.search.counts import SignalRow, signals_for
from amelio.search.engines.registry import workspace_corpus
from amelio.search.evaluation import evaluate, query_metrics
from amelio.search.scoring import RankedDoc
from amelio.server import create_app
from amelio.stats import average_ranks, bootstrap_mean, spearman, weighted_kappa
from amelio.testing import FakeLLMServer, FakeRequest, ThreadedServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace
from browser_support import launch_chromium
from test_search import click_events

DOCS = [
    {
        "_id": "reset",
        "title": "Reset your password",
        "text": "Open settings, choose security, then reset the password. A link arrives by email.",
    },
    {
        "_id": "sso",
        "title": "Single sign-on",
        "text": "Sign in with your company account; the password is managed elsewhere.",
    },
    {
        "_id": "expire",
        "title": "Password expiry",
        "text": "Passwords expire after 90 days; you are asked to choose a new password.",
    },
    {"_id": "invoice", "title": "Download an invoice", "text": "Invoices are under billing."},
    {"_id": "refund", "title": "Ask for a refund", "text": "Refunds go back to the card."},
]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def qrels(tmp_path: Path, name: str, rows: list[tuple[str, str, int]]) -> Path:
    """A BEIR qrels file (with its header) and, beside it, the queries it names."""
    write_lines(
        tmp_path / "queries.jsonl",
        [
            json.dumps({"_id": "q1", "text": "Password?"}),
            json.dumps({"_id": "q2", "text": "refund"}),
        ],
    )
    return write_lines(
        tmp_path / name, ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{s}" for q, d, s in rows)]
    )


@pytest.fixture
def ws(workspace: Workspace, tmp_path: Path) -> Workspace:
    """The workspace with DOCS in its own corpus (the engine ``search_backend`` names)."""
    workspace_corpus(workspace.settings).import_file(
        write_lines(tmp_path / "docs.jsonl", [json.dumps(d) for d in DOCS])
    )
    return workspace


@pytest.fixture
def searcher(ws: Workspace) -> Searcher:
    """Exploration is off in tests (conftest): every response shows the ranking."""
    return Searcher(ws, background_aggregation=False)


# -- the statistics, by hand ---------------------------------------------------------------


def test_weighted_kappa_and_spearman_match_hand_computed_values() -> None:
    """(0,0) (1,2) (2,2) (3,3): the one disagreement weighs (1−2)²/9 = 1/9; chance's
    weighted disagreement, from the marginals (1,1,1,1) and (1,0,2,1), is 10/9; so
    κ = 1 − 1/10 = 0.9. Ranks (1,2,3,4) against (1,2.5,2.5,4): ρ = 4.5/√(5·4.5) = √0.9."""
    pairs = [(0, 0), (1, 2), (2, 2), (3, 3)]
    assert weighted_kappa(pairs) == pytest.approx(0.9)
    assert spearman([(float(a), float(b)) for a, b in pairs]) == pytest.approx(math.sqrt(0.9))
    assert average_ranks([3, 1, 3, 2]) == [3.5, 1.0, 3.5, 2.0]
    assert weighted_kappa([(2, 2), (2, 2)]) is None  # no disagreement chance could make
    assert spearman([(1.0, 0.0), (2.0, 0.0)]) is None  # one grader gave one grade


def test_the_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    values = [0.1, 0.9, 0.4, 0.6, 0.5, 0.2, 0.8]
    first = bootstrap_mean(values, seed=3)
    assert first == bootstrap_mean(values, seed=3)
    assert first.value == pytest.approx(sum(values) / 7)
    assert first.low < first.value < first.high
    assert min(values) <= first.low and first.high <= max(values)
    assert bootstrap_mean([0.5] * 4) == (0.5, 0.5, 0.5)


def test_query_metrics_by_hand() -> None:
    """a is unjudged (grade 0), b is graded 3 at rank 2, x (graded 2) is not retrieved:
    NDCG@10 = (7/log2 3) / (7 + 3/log2 3), MRR = 1/2, P@5 = 1/5."""
    got = query_metrics(["a", "b", "c", "d", "e"], {"b": 3, "c": 0, "x": 2}, relevant=1)
    assert got["ndcg@10"] == pytest.approx((7 / math.log2(3)) / (7 + 3 / math.log2(3)))
    assert got["mrr"] == 0.5 and got["p@5"] == pytest.approx(0.2)
    assert query_metrics(["x"], {"b": 3, "x": 2}, relevant=3)["mrr"] == 0.0


# -- clicks --------------------------------------------------------------------------------


def test_click_grades_by_hand() -> None:
    """θ = (1, 0.5), γ0 = 0.1, prior 10: 20 impressions at rank 1 with 10 long-dwell
    clicks are 20 examinations and 10 satisfied; rate = (10 + 1) / (20 + 10) = 0.367,
    3.67 times the average: grade 2 (from 2×, below 4×)."""
    p = Propensities((1.0, 0.5), 0.1, 1)
    row = SignalRow(
        impressions=20, impressions_by_rank={"1": 20}, clicks=10, dwell_clicks=10, actors=10
    )
    value, evidence = jl.click_grade(row, p, 10.0)
    assert value == 2
    assert evidence["examinations"] == 20 and evidence["satisfiedClicks"] == 10
    assert evidence["rate"] == pytest.approx(11 / 30, abs=1e-4)
    # 8 impressions at rank 2 are 4 examinations: too little to grade
    thin = SignalRow(impressions=8, impressions_by_rank={"2": 8})
    assert jl.click_grade(thin, p, 10.0)[0] is None
    # shown 60 times at rank 1, never clicked: well below the average
    assert jl.click_grade(SignalRow(impressions=60, impressions_by_rank={"1": 60}), p, 10.0)[0] == 0
    # hidden as often as satisfied: 0, whatever the clicks
    hidden = SignalRow(20, {"1": 20}, {"1": 10}, clicks=10, dwell_clicks=10, hides=10)
    value, evidence = jl.click_grade(hidden, p, 10.0)
    assert value == 0 and evidence["hidden"] is True


def test_a_clicks_list_grades_pairs_from_real_events_with_their_counts(
    ws: Workspace, searcher: Searcher
) -> None:
    """Twelve people search "password": each reads "expire" (a long dwell) and bounces
    off "sso"; forty searches for billing click nothing, so the average satisfaction
    is low and "expire" stands far above it."""
    events: list[dict[str, Any]] = []
    for i in range(12):
        response = searcher.search("Password", profile="bm25", session=f"reader{i}")
        events += click_events(response, "expire", f"reader{i}", dwell_ms=30_000)
        events += click_events(response, "sso", f"reader{i}", dwell_ms=1_500)
    for i in range(40):
        searcher.search("invoice refund", profile="bm25", session=f"idle{i}")
    assert Collector(ws).ingest(events, rate_limit=False).count("accepted") == len(events)
    aggregate(ws)

    report = jl.build(ws, "from-clicks", "clicks", created_by="ana")
    grades = {(p.query, p.doc_id): p for p in store.pairs_of(ws, "from-clicks")}
    expire = grades[("password", "expire")]
    assert expire.grade is not None and expire.grade >= 2
    assert grades[("password", "sso")].grade == 0  # clicked, but every click bounced
    assert grades[("password", "reset")].grade == 0  # shown first twelve times, never clicked
    signals = signals_for(ws.engine, "password")["expire"]
    assert (
        {k: expire.evidence[k] for k in ("impressions", "clicks", "dwellClicks", "actors")}
        == {
            "impressions": signals.impressions,
            "clicks": signals.clicks,
            "dwellClicks": signals.dwell_clicks,
            "actors": signals.actors,
        }
        == {"impressions": 12, "clicks": 12, "dwellClicks": 12, "actors": 12}
    )
    assert grades[("password", "sso")].evidence["bounces"] == 12
    gamma0 = load_propensities(ws.engine).gamma0
    assert report.list.meta["gamma0"] == gamma0 and report.list.meta["thresholds"] == [1, 2, 4]
    assert expire.evidence["ratio"] == pytest.approx(expire.evidence["rate"] / gamma0, abs=1e-3)
    assert expire.graded_by == "clicks" and report.list.source == "clicks"
    assert report.list.queries == 2 and report.list.graded == report.list.pairs

    with pytest.raises(Conflict, match="exists"):
        jl.build(ws, "from-clicks", "clicks")
    # a query with no signals gives no pairs; one list of a single query can be asked for
    only = jl.build(ws, "one-query", "clicks", queries=["PASSWORD!"])
    assert only.list.queries == 1 and only.list.pairs == 3


def test_bad_builds_say_what_is_missing_and_leave_nothing_behind(ws: Workspace) -> None:
    with pytest.raises(InvalidInput, match="No search signals yet"):
        jl.build(ws, "empty", "clicks")
    with pytest.raises(LLMNotConfigured, match="AMELIO_LLM_PROVIDER"):
        jl.build(ws, "empty", "llm", queries=["password"])  # none configured in tests
    with pytest.raises(InvalidInput, match="No searches logged yet"):
        jl.build(ws, "empty", "human")
    with pytest.raises(InvalidInput, match="Unknown rank profile"):
        jl.build(ws, "empty", "human", queries=["password"], profile="bm99")
    with pytest.raises(NotFound):
        store.get_list(ws, "empty")  # nothing half-made stays behind
    capped = jl.build(ws, "capped", "human", queries=["password", "refund"], max_queries=1)
    assert capped.list.queries == 1 and capped.list.meta["queries"] == 1


# -- the LLM -------------------------------------------------------------------------------


def test_parse_grade_reads_json_labels_and_lone_digits() -> None:
    assert jl.parse_grade('Sure.\n```json\n{"grade": 2}\n```') == 2
    assert jl.parse_grade('{"grade": "3", "why": "exact"}') == 3
    assert jl.parse_grade("Grade: 1 — on topic only") == 1
    assert jl.parse_grade(" 0.\n") == 0
    assert jl.parse_grade('{"grade": 7}') is None
    assert jl.parse_grade("It is quite relevant.") is None
    assert jl.parse_grade("2 or 3") is None


@pytest.fixture
def llm(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Workspace, FakeLLMServer]]:
    """The workspace reopened with the fake server as its configured (OpenAI) LLM."""

    def grader(request: FakeRequest) -> str:
        if "Password expiry" in request.prompt:
            return '{"grade": 3}'
        if "Reset your password" in request.prompt:
            return "Grade: 2"
        if "Single sign-on" in request.prompt:
            return "1"
        return "I would rather not say."

    with FakeLLMServer(default=grader) as server:
        monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
        monkeypatch.setenv("AMELIO_LLM_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-grader")
        monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
        configured = open_workspace(ws.root)
        try:
            yield configured, server
        finally:
            configured.dispose()


def test_the_llm_grades_the_pool_with_the_rubric_and_keeps_unparsed_replies(
    llm: tuple[Workspace, FakeLLMServer], tmp_path: Path
) -> None:
    ws, server = llm
    queries = write_lines(
        tmp_path / "q.jsonl", [json.dumps({"query": "password"}), json.dumps({"text": "refund"})]
    )
    report = jl.build(ws, "by-llm", "llm", queries=jl.read_queries(queries), depth=3)
    grades = {(p.query, p.doc_id): p for p in store.pairs_of(ws, "by-llm")}
    assert {k: p.grade for k, p in grades.items()} == {
        ("password", "expire"): 3,
        ("password", "reset"): 2,
        ("password", "sso"): 1,
        ("refund", "refund"): None,
    }
    assert report.unparsed == 1 and report.failed == 0
    assert grades[("refund", "refund")].evidence["reply"] == "I would rather not say."
    assert grades[("password", "expire")].evidence["rank"] in (1, 2, 3)
    asked = server.requests
    assert len(asked) == 4 and all(r.body["temperature"] == 0 for r in asked)
    assert asked[0].system == jl.RUBRIC and "QUERY: password" in asked[0].prompt
    meta = report.list.meta
    assert (meta["provider"], meta["model"], meta["depth"], meta["profile"]) == (
        "openai",
        "fake-grader",
        3,
        "bm25",
    )
    assert report.list.histogram == {1: 1, 2: 1, 3: 1} and report.list.graded == 3


def test_an_unreachable_llm_stops_the_build(
    llm: tuple[Workspace, FakeLLMServer], tmp_path: Path
) -> None:
    from amelio.errors import LLMError

    ws, server = llm
    for _ in range(3):
        server.fail(500)
    with pytest.raises(LLMError):
        jl.build(ws, "down", "llm", queries=["password"], depth=3)
    with pytest.raises(NotFound):
        store.get_list(ws, "down")


# -- people: the API and the dashboard -------------------------------------------------------


def test_people_grade_a_human_list_through_the_api(ws: Workspace) -> None:
    report = jl.build(ws, "people", "human", queries=["password"], depth=3)
    assert (report.list.pairs, report.list.graded, report.list.source) == (3, 0, "human")
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    _, bot = keys.create_key(ws.engine, name="bot", role="bot")
    as_admin = {"Authorization": f"Bearer {admin}"}
    with TestClient(create_app(ws)) as client:
        r = client.post(
            "/v1/judgments/people/grades",
            json={"query": "Password", "docId": "expire", "grade": 3},
            headers=as_admin,
        )
        assert r.status_code == 200, r.text
        assert (r.json()["grade"], r.json()["gradedBy"], r.json()["query"]) == (
            3,
            "key:ana",
            "password",
        )
        denied = client.post(
            "/v1/judgments/people/grades",
            json={"query": "password", "docId": "sso", "grade": 1},
            headers={"Authorization": f"Bearer {bot}"},
        )
        assert denied.status_code == 403
        for body, status in (
            ({"query": "password", "docId": "refund", "grade": 1}, 404),  # not in the list
            ({"query": "password", "docId": "sso", "grade": 4}, 422),
        ):
            assert (
                client.post("/v1/judgments/people/grades", json=body, headers=as_admin).status_code
                == status
            )
        missing = client.post(
            "/v1/judgments/nobody/grades",
            json={"query": "password", "docId": "sso", "grade": 1},
            headers=as_admin,
        )
        assert missing.status_code == 404 and "nobody" in missing.json()["error"]["message"]
        listed = client.get("/v1/judgments", headers=as_admin).json()["lists"]
        assert [(x["name"], x["graded"], x["ungraded"]) for x in listed] == [("people", 1, 2)]
        one = client.get("/v1/judgments/people?ungraded=true", headers=as_admin).json()
        assert one["grades"] == {"0": 0, "1": 0, "2": 0, "3": 1}
        assert {p["docId"] for p in one["judgments"]} == {"reset", "sso"}
        assert (
            client.get("/v1/judgments", headers={"Authorization": f"Bearer {bot}"}).status_code
            == 403
        )


def login(client: TestClient, token: str) -> str:
    r = client.post("/login", data={"api_key": token, "next": "/judgments"}, follow_redirects=False)
    assert r.status_code == 303
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/judgments").text)
    assert match
    return match.group(1)


def shown_pair(page: str) -> int:
    match = re.search(r'name="pair" value="(\d+)"', page)
    assert match, page
    return int(match.group(1))


def test_a_person_grades_pairs_one_at_a_time_on_the_dashboard(ws: Workspace) -> None:
    jl.build(ws, "people", "human", queries=["password"], depth=3)
    pool = store.pairs_of(ws, "people")
    titles = {d["_id"]: d["title"] for d in DOCS}
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    _, bot = keys.create_key(ws.engine, name="bot", role="bot")
    with TestClient(create_app(ws)) as client:
        csrf = login(client, admin)
        listing = client.get("/judgments").text
        assert 'href="/judgments/people"' in listing and "0 of 3 graded" in listing
        page = client.get("/judgments/people").text
        first = shown_pair(page)
        assert first == pool[0].id and titles[pool[0].doc_id] in page
        assert "0 of 3 graded" in page and "/static/judgments.js" in page
        for key in "0123":  # the keys the script presses: one button per grade
            assert re.search(rf'value="{key}" data-key="{key}"', page)
        # s: the skip link shows the next pair; past the last, it wraps round
        skip = re.search(r'href="(/judgments/people\?after=\d+)" data-key="s"', page)
        assert skip and shown_pair(client.get(skip.group(1)).text) == pool[1].id
        assert shown_pair(client.get(f"/judgments/people?after={pool[2].id}").text) == first
        assert (
            client.post(
                "/judgments/people/grade", data={"csrf": "forged", "pair": first, "grade": 2}
            ).status_code
            == 403
        )
        r = client.post(
            "/judgments/people/grade",
            data={"csrf": csrf, "pair": first, "grade": 2},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == f"/judgments/people?after={first}"
        page = client.get(r.headers["location"]).text
        assert "1 of 3 graded" in page and shown_pair(page) == pool[1].id
        for pair in pool[1:]:
            client.post("/judgments/people/grade", data={"csrf": csrf, "pair": pair.id, "grade": 0})
        assert "Every pair of this list is graded." in client.get("/judgments/people").text
        script = client.get("/static/judgments.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith(
            "text/javascript"
        )
        assert "keydown" in script.text
    assert {p.doc_id: p.grade for p in store.pairs_of(ws, "people")} == {
        pool[0].doc_id: 2,
        pool[1].doc_id: 0,
        pool[2].doc_id: 0,
    }
    assert store.pairs_of(ws, "people")[0].graded_by == "key:ana"
    jl.build(ws, "more", "human", queries=["refund"], depth=1)
    with TestClient(create_app(ws)) as client:
        csrf = login(client, bot)
        page = client.get("/judgments/more").text
        assert "Only an admin can grade." in page and 'name="pair"' not in page
        pair = store.pairs_of(ws, "more")[0].id
        refused = client.post(
            "/judgments/more/grade", data={"csrf": csrf, "pair": pair, "grade": 3}
        )
        assert refused.status_code == 403
    assert store.pairs_of(ws, "more")[0].grade is None


@pytest.mark.slow
def test_the_keyboard_grades_and_skips_in_a_browser(
    sqlite_workspace: Workspace, tmp_path: Path, chromium: str
) -> None:
    """Keys 0-3 press the grade buttons and s the skip link (judgments.js), in Chromium."""
    ws = sqlite_workspace
    workspace_corpus(ws.settings).import_file(
        write_lines(tmp_path / "docs.jsonl", [json.dumps(d) for d in DOCS])
    )
    jl.build(ws, "people", "human", queries=["password"], depth=3)
    pool = store.pairs_of(ws, "people")
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    with ThreadedServer(create_app(ws)) as server, launch_chromium(chromium) as browser:
        page = browser.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{server.url}/judgments/people")
        page.get_by_label("API key").fill(admin)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(re.compile(r".*/judgments/people$"))
        progress = page.get_by_test_id("judgment-progress")
        assert "0 of 3 graded" in progress.inner_text()
        page.keyboard.press("2")
        page.wait_for_url(re.compile(rf".*after={pool[0].id}$"))
        assert "1 of 3 graded" in progress.inner_text()
        assert page.locator("input[name=pair]").get_attribute("value") == str(pool[1].id)
        page.keyboard.press("s")
        page.wait_for_url(re.compile(rf".*after={pool[1].id}$"))
        assert page.locator("input[name=pair]").get_attribute("value") == str(pool[2].id)
        assert "1 of 3 graded" in progress.inner_text()  # skipping grades nothing
        page.keyboard.press("0")
        page.wait_for_url(re.compile(rf".*after={pool[2].id}$"))
        # the skipped pair comes back once the others are done
        assert page.locator("input[name=pair]").get_attribute("value") == str(pool[1].id)
    graded = {p.doc_id: p.grade for p in store.pairs_of(ws, "people")}
    assert graded == {pool[0].doc_id: 2, pool[1].doc_id: None, pool[2].doc_id: 0}


# -- imports and agreement -------------------------------------------------------------------


def test_qrels_import_clips_grades_and_lists_agree_as_computed_by_hand(
    ws: Workspace, tmp_path: Path
) -> None:
    a = jl.import_qrels(
        ws,
        "gold",
        qrels(
            tmp_path,
            "a.tsv",
            [
                ("q1", "reset", -1),
                ("q1", "sso", 1),
                ("q1", "expire", 2),
                ("q2", "refund", 3),
                ("q2", "invoice", 1),
            ],
        ),
        tmp_path / "queries.jsonl",
    )
    b = jl.import_qrels(
        ws,
        "silver",
        qrels(
            tmp_path,
            "b.tsv",
            [("q1", "reset", 0), ("q1", "sso", 2), ("q1", "expire", 2), ("q2", "refund", 4)],
        ),
        tmp_path / "queries.jsonl",
    )
    assert (a.list.source, a.list.pairs, a.list.queries) == ("human", 5, 2)
    silver = {(p.query, p.doc_id): p for p in store.pairs_of(ws, "silver")}
    assert silver[("refund", "refund")].grade == 3  # 4 is clipped to 3
    assert silver[("refund", "refund")].evidence == {"qrels": 4, "queryId": "q2"}
    assert {(p.query, p.doc_id): p.grade for p in store.pairs_of(ws, "gold")}[
        ("password", "reset")
    ] == 0  # -1 is clipped to 0
    assert b.list.histogram == {0: 1, 2: 2, 3: 1}

    # shared: (0,0) (1,2) (2,2) (3,3); invoice is graded in gold only
    found = jl.compare(ws, "gold", "silver")
    assert (found.pairs, found.exact) == (4, 3)
    assert found.kappa == pytest.approx(0.9)
    assert found.rho == pytest.approx(math.sqrt(0.9))
    assert found.confusion[1][2] == 1 and sum(map(sum, found.confusion)) == 4

    jl.build(ws, "people", "human", queries=["refund"], depth=1)
    store.grade(ws, "people", "refund", "refund", 3, by="ana")
    with pytest.raises(InvalidInput, match="share 1 graded pair"):
        jl.compare(ws, "gold", "people")  # its only pair in common; nothing to correlate
    with pytest.raises(NotFound, match="nope"):
        jl.compare(ws, "gold", "nope")


def test_an_import_naming_unknown_documents_is_refused_with_their_ids(
    ws: Workspace, tmp_path: Path
) -> None:
    rows = [("q1", "reset", 1), ("q1", "ghost-1", 2), ("q2", "ghost-2", 1)]
    with pytest.raises(InvalidInput) as caught:
        jl.import_qrels(ws, "bad", qrels(tmp_path, "bad.tsv", rows), tmp_path / "queries.jsonl")
    assert "2 document(s)" in caught.value.message
    assert "ghost-1, ghost-2" in caught.value.message
    with pytest.raises(NotFound):
        store.get_list(ws, "bad")
    unknown_query = qrels(tmp_path, "q.tsv", [("q9", "reset", 1)])
    with pytest.raises(InvalidInput, match="q9"):
        jl.import_qrels(ws, "bad", unknown_query, tmp_path / "queries.jsonl")


# -- evaluation ----------------------------------------------------------------------------


def test_evaluation_metrics_and_interval_on_two_queries_by_hand(
    ws: Workspace, searcher: Searcher, tmp_path: Path
) -> None:
    """ "password": the second and third of bm25's ranking graded 3 and 1 (the first is
    unjudged: grade 0); "refund": its one result graded 2 and an unretrieved 0.
    NDCG@10: password (7/log2 3 + 1/2) / (7 + 1/log2 3), refund 1."""
    ranked = [d.doc_id for d in searcher.rank("password", profile="bm25")]
    assert len(ranked) == 3
    rows = [("q1", ranked[1], 3), ("q1", ranked[2], 1), ("q2", "refund", 2), ("q2", "invoice", 0)]
    jl.import_qrels(ws, "gold", qrels(tmp_path, "g.tsv", rows), tmp_path / "queries.jsonl")

    result = evaluate(ws, "gold", ["bm25"], seed=7)
    [scores] = result.profiles
    password = (7 / math.log2(3) + 1 / 2) / (7 + 1 / math.log2(3))
    assert scores.per_query["password"]["ndcg@10"] == pytest.approx(password)
    assert scores.per_query["refund"] == {"ndcg@10": 1.0, "mrr": 1.0, "p@5": 0.2}
    ndcg = scores.metrics["ndcg@10"]
    assert ndcg.value == pytest.approx((password + 1) / 2)
    # two queries: a resampled mean is one of password, the mean, or 1
    assert (ndcg.low, ndcg.high) == (pytest.approx(password), 1.0)
    assert scores.metrics["mrr"].value == pytest.approx(0.75)
    assert scores.metrics["p@5"].value == pytest.approx(0.3)
    assert evaluate(ws, "gold", ["bm25"], seed=7).profiles[0].metrics == scores.metrics
    assert (result.queries, result.left_out, result.differences, result.changed) == (2, 0, [], [])
    # grade 2 and up only: password's grade 1 no longer counts towards P@5
    assert evaluate(ws, "gold", ["bm25"], relevant=2).profiles[0].metrics["p@5"].value == 0.2
    assert evaluate(ws, "gold", ["bm25"], relevant=3).queries == 1  # refund has no 3


class FixedRanker:
    """A stand-in searcher whose rankings are written down, per profile and query."""

    def __init__(self, rankings: dict[str, dict[str, list[str]]]) -> None:
        self.rankings = rankings

    def rank(self, query: str, *, profile: str, limit: int, **_: Any) -> tuple[RankedDoc, ...]:
        return tuple(RankedDoc(d, 1.0, 1.0, 0.0) for d in self.rankings[profile][query][:limit])


def test_paired_differences_and_the_queries_that_changed_most(
    ws: Workspace, tmp_path: Path
) -> None:
    rows = [("q1", "expire", 3), ("q2", "refund", 3)]
    jl.import_qrels(ws, "gold", qrels(tmp_path, "g.tsv", rows), tmp_path / "queries.jsonl")
    ranker = FixedRanker(
        {
            "bm25": {"password": ["sso", "expire"], "refund": ["refund"]},
            "hybrid": {"password": ["expire", "sso"], "refund": ["refund"]},
        }
    )
    result = evaluate(ws, "gold", ["bm25", "hybrid:alpha=0.5"], searcher=ranker)  # type: ignore[arg-type]
    [diff] = result.differences
    assert (diff.profile, diff.baseline) == ("hybrid:alpha=0.5", "bm25")
    lifted = 1 - 1 / math.log2(3)  # password: expire from rank 2 to rank 1
    assert diff.metrics["ndcg@10"].value == pytest.approx(lifted / 2)
    assert diff.metrics["mrr"].value == pytest.approx(0.25)
    assert diff.metrics["ndcg@10"].low == 0.0 and diff.metrics["ndcg@10"].high == pytest.approx(
        lifted
    )
    assert [(c.query, round(c.diff, 6)) for c in result.changed] == [("password", round(lifted, 6))]


def test_bad_evaluations_say_what_is_wrong(ws: Workspace, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="No judgment list 'gold'"):
        evaluate(ws, "gold", ["bm25"])
    jl.import_qrels(
        ws, "gold", qrels(tmp_path, "g.tsv", [("q1", "expire", 3)]), tmp_path / "queries.jsonl"
    )
    with pytest.raises(InvalidInput, match="Unknown rank profile 'bm52'"):
        evaluate(ws, "gold", ["bm25", "bm52"])
    with pytest.raises(InvalidInput, match="relevant"):
        evaluate(ws, "gold", ["bm25"], relevant=0)
    jl.import_qrels(
        ws, "zeros", qrels(tmp_path, "z.tsv", [("q1", "expire", 0)]), tmp_path / "queries.jsonl"
    )
    with pytest.raises(InvalidInput, match="nothing to find"):
        evaluate(ws, "zeros", ["bm25"])


# -- the CLI ---------------------------------------------------------------------------------


def test_the_cli_builds_shows_compares_evaluates_and_deletes(ws: Workspace, tmp_path: Path) -> None:
    runner = CliRunner()
    at = ["--workspace", str(ws.root)]

    def run(*args: str, code: int = 0) -> str:
        r = runner.invoke(main, [*at, *args])
        assert r.exit_code == code, r.output
        return r.output

    qfile = write_lines(tmp_path / "queries.txt", ["password", "", "refund"])
    out = run(
        "judgments", "build", "people", "--from", "human", "--queries", str(qfile), "--depth", "2"
    )
    assert "3 pair(s) over 2 queries, 0 graded" in out and "/judgments/people" in out
    store.grade(ws, "people", "password", "expire", 3, by="ana")
    store.grade(ws, "people", "refund", "refund", 2, by="ana")
    path = qrels(tmp_path, "g.tsv", [("q1", "expire", 3), ("q2", "refund", 1)])
    out = run(
        "judgments", "import", "gold", str(path), "--queries", str(tmp_path / "queries.jsonl")
    )
    assert "2 pair(s) over 2 queries imported" in out
    listed = json.loads(run("judgments", "list", "--json"))
    assert [(x["name"], x["graded"]) for x in listed] == [("gold", 2), ("people", 2)]
    out = run("judgments", "show", "people", "--pairs", "3")
    assert "3 pair(s) over 2 queries; 2 graded, 1 not yet" in out and "grade 3: 1" in out
    compared = json.loads(run("judgments", "compare", "gold", "people", "--json"))
    assert compared["pairs"] == 2 and compared["rho"] == 1.0
    evaluated = json.loads(
        run(
            "relevance",
            "eval",
            "--judgments",
            "gold",
            "--profile",
            "bm25",
            "--profile",
            "hybrid:alpha=0",
            "--json",
        )
    )
    assert [p["profile"] for p in evaluated["profiles"]] == ["bm25", "hybrid:alpha=0"]
    assert set(evaluated["profiles"][0]) == {"profile", "ndcg@10", "mrr", "p@5"}
    table = run("relevance", "eval", "--judgments", "gold", "--profile", "bm25")
    assert "ndcg@10" in table and "interval" in table
    assert "Unknown rank profile" in run(
        "relevance", "eval", "--judgments", "gold", "--profile", "fancy", code=1
    )
    assert "No judgment list 'nope'" in run("judgments", "show", "nope", code=1)
    assert "Deleted judgment list people." in run("judgments", "delete", "people")
    assert [x["name"] for x in json.loads(run("judgments", "list", "--json"))] == ["gold"]


def test_the_docs_show_the_rubric_the_llm_is_given() -> None:
    """docs/judgments.md quotes the rubric: it must be the one in the code."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "judgments.md").read_text()
    assert " ".join(jl.RUBRIC.split()) in " ".join(docs.split())
