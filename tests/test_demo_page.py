"""``/demo/search``, the public search page ``amelio demo`` serves, in a real browser
(Debian's Chromium driven by Playwright): its consent banner keeps amelio.js quiet until
Accept, then a click on a result is stored as ``result_clicked`` with its rank; a result
opens its own page (``/demo/doc/{id}``), and Back shows the results again and records
the time spent on the result as ``result_dwell_time``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from amelio.db.schema import feedback_events
from amelio.demo.app import create_demo_app, demo_client_key, prepare_demo
from amelio.server import create_app
from amelio.testing import ThreadedServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace
from browser_support import launch_chromium


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, str]]:
    ws, _ = prepare_demo(tmp_path_factory.mktemp("demo") / "ws")
    with ThreadedServer(create_demo_app(ws), lifespan="on") as server:
        yield ws, server.url
    ws.dispose()


def count_events(ws: Workspace) -> int:
    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(feedback_events)) or 0)


def wait_for(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_the_page_has_a_client_key_and_searches_server_side(demo: tuple[Workspace, str]) -> None:
    ws, base = demo
    key = demo_client_key(ws)
    assert demo_client_key(ws) == key  # saved: a re-run gives the page the same key
    found = keys.authenticate(ws.engine, key)
    assert found is not None and found.role == "client"
    page = httpx.get(f"{base}/demo/search")
    assert page.status_code == 200
    assert f'data-key="{key}"' in page.text and "/static/amelio.js" in page.text
    response = httpx.post(f"{base}/demo/search/query", json={"query": "undo the last commit"})
    assert response.status_code == 200
    body = response.json()
    assert body["queryId"] and body["feedbackToken"]
    assert [r["rank"] for r in body["results"]] == list(range(1, len(body["results"]) + 1))
    assert httpx.post(f"{base}/demo/search/query", json={"query": ""}).status_code == 422


def test_plain_serve_has_no_demo_routes(demo: tuple[Workspace, str]) -> None:
    ws, _ = demo
    with TestClient(create_app(ws)) as client:  # what `amelio serve` runs
        assert client.get("/demo/search").status_code == 404
        assert client.post("/demo/search/query", json={"query": "git"}).status_code in {404, 405}


@pytest.mark.slow
def test_consent_then_a_click_is_stored(demo: tuple[Workspace, str], chromium: str) -> None:
    ws, base = demo
    with launch_chromium(chromium) as browser:
        ctx = browser.new_context(locale="en-US")
        ctx.set_default_timeout(10_000)
        sent: list[str] = []
        ctx.on("request", lambda r: sent.append(r.url) if "/v1/feedback/events" in r.url else None)
        page = ctx.new_page()
        page.goto(f"{base}/demo/search")
        assert page.is_visible("#consent")

        # Before consent: search, click; nothing leaves the page.
        before = count_events(ws)
        page.fill("#q", "undo the last commit")
        page.click("#search button[type=submit]")
        page.wait_for_selector("body[data-ready] #results li a")
        page.click("#results li:nth-child(2) a")
        page.wait_for_url("**/demo/doc/**")
        page.go_back()
        page.wait_for_selector("body[data-ready] #results li a")
        time.sleep(1.5)  # past the page's 1 s flush interval
        assert sent == []
        assert count_events(ws) == before

        # Accept: the choice is kept, and the next search's click is stored.
        page.click("#consent-accept")
        assert not page.is_visible("#consent")
        assert page.evaluate("localStorage.getItem('amelio-demo-consent')") == "granted"
        page.fill("#q", "rotate a leaked secret")
        page.evaluate("delete document.body.dataset.ready")
        page.click("#search button[type=submit]")
        page.wait_for_selector("body[data-ready] #results li a")
        query_id = page.evaluate("document.body.dataset.ready")
        doc_id = page.get_attribute("#results li:nth-child(2)", "data-doc-id")
        page.click("#results li:nth-child(2) a")

        def clicked() -> list[Any]:
            with ws.engine.connect() as conn:
                return list(
                    conn.execute(
                        sa.select(feedback_events).where(
                            feedback_events.c.query_id == query_id,
                            feedback_events.c.event_type == "result_clicked",
                        )
                    ).mappings()
                )

        rows = wait_for(clicked)
        assert len(rows) == 1
        assert rows[0]["doc_id"] == doc_id and rows[0]["rank_shown"] == 2
        assert json.loads(rows[0]["payload"])["consent"]["telemetry"] == "granted"

        # A reload remembers the choice: no banner.
        page.go_back()
        page.wait_for_selector("#q")
        page.reload()
        page.wait_for_selector("#q")
        assert not page.is_visible("#consent")
        assert page.evaluate("window.amelio.consent") == "granted"
        ctx.close()


def test_a_result_has_a_page_of_its_own(demo: tuple[Workspace, str]) -> None:
    """What a result links to: the document itself, with a way back to the results."""
    _, base = demo
    found = httpx.post(f"{base}/demo/search/query", json={"query": "undo the last commit"})
    first = found.json()["results"][0]
    page = httpx.get(f"{base}/demo/doc/{first['docId']}", params={"q": "undo the last commit"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert f"<h1>{first['title']}</h1>" in page.text
    assert 'href="/demo/search?q=undo+the+last+commit"' in page.text
    missing = httpx.get(f"{base}/demo/doc/no-such-article")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
    hostile = httpx.get(f"{base}/demo/doc/x", params={"q": '"><script>alert(1)</script>'})
    assert "<script>alert(1)" not in hostile.text


@pytest.mark.slow
def test_back_from_a_result_shows_the_results_again_and_records_the_dwell(
    demo: tuple[Workspace, str], chromium: str
) -> None:
    """The dwell loop the page advertises: search, open a result, read it, come back.
    The query is in the URL, Back shows the same results (the same impression, not a
    new search), and the time spent on the result is stored as result_dwell_time."""
    ws, base = demo
    query = "rotate a leaked secret"
    with launch_chromium(chromium) as browser:
        ctx = browser.new_context(locale="en-US")
        ctx.set_default_timeout(10_000)
        page = ctx.new_page()
        page.goto(f"{base}/demo/search")
        page.click("#consent-accept")
        page.fill("#q", query)
        page.click("#search button[type=submit]")
        page.wait_for_selector("body[data-ready] #results li a")
        assert page.url == f"{base}/demo/search?q=rotate+a+leaked+secret"
        query_id = page.evaluate("document.body.dataset.ready")
        shown = page.eval_on_selector_all("#results li", "els => els.map(e => e.dataset.docId)")
        doc_id = shown[1]

        page.click("#results li:nth-child(2) a")
        page.wait_for_url(f"{base}/demo/doc/{doc_id}?q=rotate+a+leaked+secret")
        assert page.inner_text("h1")
        page.wait_for_timeout(1_200)  # reading the result
        page.go_back()

        page.wait_for_selector("body[data-ready] #results li a")
        assert page.url == f"{base}/demo/search?q=rotate+a+leaked+secret"
        assert page.input_value("#q") == query
        assert page.evaluate("document.body.dataset.ready") == query_id  # the same results
        assert shown == page.eval_on_selector_all(
            "#results li", "els => els.map(e => e.dataset.docId)"
        )

        def dwell() -> list[Any]:
            with ws.engine.connect() as conn:
                return list(
                    conn.execute(
                        sa.select(feedback_events).where(
                            feedback_events.c.query_id == query_id,
                            feedback_events.c.event_type == "result_dwell_time",
                        )
                    ).mappings()
                )

        rows = wait_for(dwell)
        assert len(rows) == 1
        assert rows[0]["doc_id"] == doc_id and rows[0]["rank_shown"] == 2
        assert json.loads(rows[0]["payload"])["outcome"]["dwellMs"] >= 1_000

        # A link with the query in it (shared, bookmarked) opens on its results.
        page.goto(f"{base}/demo/search?q=undo+the+last+commit")
        page.wait_for_selector("body[data-ready] #results li a")
        assert page.input_value("#q") == "undo the last commit"
        ctx.close()
