"""amelio.js, the browser feedback client, in a real browser (Debian's Chromium driven by
Playwright) over real HTTP on loopback.

The set-up is what a real integration looks like: a search page on its own origin
whose *backend* runs the search with a bot key (bot keys never reach a browser: they
can chat and read skills) and hands the response to the page; the page renders it,
loads ``/static/amelio.js`` from Amelio (another origin, so CORS is on for the page's
origin) and binds the results with a client key, which can only send events.
"""

from __future__ import annotations

import json
import mimetypes
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from amelio.db.schema import feedback_events, search_impressions
from amelio.feedback import Collector
from amelio.feedback.examples import example_event
from amelio.feedback.ratelimit import Bucket, RateLimiter
from amelio.search.engines.registry import workspace_corpus
from amelio.server import create_app
from amelio.testing import ThreadedServer
from amelio.workspace import keys
from amelio.workspace.config import load_settings
from amelio.workspace.folder import Workspace, init_workspace, open_workspace
from browser_support import launch_chromium, wait_for, workspace_with

STATIC = Path(__file__).resolve().parent.parent / "src" / "amelio" / "web" / "static"

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
]

# The search page. Its options come from its own query string, so each test picks
# consent, the flush interval and whether Do Not Track is respected.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Help search</title></head>
<body><ol id="results"></ol>
<script type="module">
import { Amelio } from "%(amelio)s/static/amelio.js";
const params = new URLSearchParams(location.search);
const amelio = window.amelio = Amelio.init({
  endpoint: "%(amelio)s", key: "%(key)s", project: "default",
  consent: params.get("consent") || "unknown",
  flushIntervalMs: Number(params.get("flush") || 300),
  respectDoNotTrack: params.get("dnt") !== "ignore",
  onError: (e) => (window.errors = window.errors || []).push(e.message),
});
window.search = async (q) => {
  // The page's own backend searches with its bot key, in the person's tab session.
  const session = amelio.sessionId || "";
  const response = await (await fetch("/api/search?" + new URLSearchParams({ q, session }))).json();
  const list = document.getElementById("results");
  list.replaceChildren(...response.results.map((r) => {
    const li = document.createElement("li");
    li.dataset.docId = r.docId;
    const a = document.createElement("a");
    a.href = "/doc/" + encodeURIComponent(r.docId);
    a.textContent = r.title;
    const vote = document.createElement("button");
    vote.dataset.amelioIgnore = "";
    vote.textContent = "+1";
    vote.onclick = () => amelio.vote(r.docId, "up");
    li.append(a, " ", vote);
    return li;
  }));
  amelio.track(response, list.children, { query: q });
  window.last = response;
  document.body.dataset.ready = response.queryId;
  return response;
};
if (params.get("q")) window.search(params.get("q"));
</script></body></html>"""


class Recorder:
    """ASGI wrapper that notes each request to the collector: when, how it authenticated,
    its content type, and the status it got."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[dict[str, Any]] = []
        self.busy = 0
        self.quiet_since = time.monotonic()

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != "/v1/feedback/events"
            or scope["method"] != "POST"
        ):
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        call: dict[str, Any] = {
            "at": time.monotonic(),
            "query": scope["query_string"].decode(),
            "authorization": "authorization" in headers,
            "type": headers.get("content-type", ""),
            "status": None,
            "headers": {},
        }

        async def record(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                call["status"] = message["status"]
                call["headers"] = {
                    k.decode().lower(): v.decode() for k, v in message.get("headers", [])
                }
            await send(message)

        self.busy += 1
        try:
            await self.app(scope, receive, record)
        finally:
            self.busy -= 1
            self.quiet_since = time.monotonic()
        self.calls.append(call)

    def settle(self, quiet: float = 0.3, timeout: float = 5.0) -> None:
        """Wait until nothing has come for ``quiet`` seconds (a closing page's beacon)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
            self.busy or time.monotonic() - self.quiet_since < quiet
        ):
            time.sleep(0.05)


def page_app(cfg: dict[str, Any]) -> Starlette:
    """The search site: its page, its backend's search (bot key, server side), a result."""

    async def page(_: Request) -> HTMLResponse:
        return HTMLResponse(PAGE % {"amelio": cfg["amelio"], "key": cfg["client"]})

    async def search(request: Request) -> JSONResponse:
        body: dict[str, Any] = {"query": request.query_params["q"]}
        if request.query_params.get("session"):
            body["sessionId"] = request.query_params["session"]
        async with httpx.AsyncClient() as client:
            r = await client.post(
                f"{cfg['amelio']}/v1/search",
                json=body,
                headers={"Authorization": f"Bearer {cfg['bot']}"},
            )
        r.raise_for_status()
        cfg["served"].append((time.monotonic(), r.json()["queryId"]))
        return JSONResponse(r.json())

    async def doc(request: Request) -> HTMLResponse:
        return HTMLResponse(f"<p>{request.path_params['doc']}</p>")

    return Starlette(
        routes=[Route("/search", page), Route("/api/search", search), Route("/doc/{doc}", doc)]
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("client-js")
    cfg: dict[str, Any] = {"served": []}
    with ThreadedServer(page_app(cfg)) as page_server:
        ws = workspace_with(
            root / "ws",
            cors_origins=page_server.url,
            search_thompson=0.0,
            search_exploration=0.0,
            warm_up=False,
        )
        docs = root / "docs.jsonl"
        docs.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
        workspace_corpus(ws.settings).import_file(docs)
        client_key, cfg["client"] = keys.create_key(ws.engine, name="web", role="client")
        _, cfg["bot"] = keys.create_key(ws.engine, name="site-backend", role="bot")
        app = create_app(ws)
        recorder = Recorder(app)
        with ThreadedServer(recorder) as amelio_server:
            cfg["amelio"] = amelio_server.url
            yield {
                "page": page_server.url,
                "amelio": amelio_server.url,
                "ws": ws,
                "app": app,
                "recorder": recorder,
                "client_key_id": client_key.id,
                "served": cfg["served"],
            }
        ws.dispose()


@pytest.fixture(scope="module")
def browser(site: dict[str, Any], chromium: str) -> Iterator[Any]:
    with launch_chromium(chromium) as browser:
        yield browser


def close(ctx: Any, site: dict[str, Any]) -> None:
    """Leave every page (their pagehide beacons go now), let them land, then close."""
    for page in ctx.pages:
        page.goto("about:blank")
    site["recorder"].settle()
    ctx.close()


@pytest.fixture
def context(browser: Any, site: dict[str, Any]) -> Iterator[Any]:
    """A fresh browser profile: its own tab session (sessionStorage)."""
    ctx = browser.new_context(locale="en-US")
    ctx.set_default_timeout(10_000)
    yield ctx
    close(ctx, site)


def stored(site: dict[str, Any], since: float) -> list[dict[str, Any]]:
    """Stored feedback events about the searches served since ``since``, oldest first."""
    queries = [q for at, q in site["served"] if at >= since]
    with site["ws"].engine.connect() as conn:
        rows = (
            conn.execute(
                sa.select(feedback_events)
                .where(feedback_events.c.query_id.in_(queries))
                .order_by(feedback_events.c.seq)
            )
            .mappings()
            .all()
        )
    return [{**row, "event": json.loads(row["payload"])} for row in rows]


def open_search(context: Any, site: dict[str, Any], query: str, **params: str) -> Any:
    page = context.new_page()
    page.goto(f"{site['page']}/search?" + str(httpx.QueryParams({"q": query, **params})))
    page.wait_for_selector("body[data-ready]")
    return page


def feedback_calls(site: dict[str, Any], since: float) -> list[dict[str, Any]]:
    return [c for c in site["recorder"].calls if c["at"] >= since]


# -- in the browser ----------------------------------------------------------------------


@pytest.mark.slow
def test_nothing_leaves_the_page_before_consent(context: Any, site: dict[str, Any]) -> None:
    since = time.monotonic()
    page = open_search(context, site, "reset password")
    assert page.evaluate("amelio.consent") == "unknown"
    assert page.evaluate("amelio.sessionId") is None
    page.locator("#results li").nth(1).locator("a").click()  # leave for a result …
    page.wait_for_url("**/doc/**")
    page.go_back()  # … and come back: the page searches again
    page.wait_for_selector("body[data-ready]")
    doc = page.evaluate("window.last.results[0].docId")
    assert page.evaluate(f"amelio.vote({doc!r}, 'up')") is False
    page.wait_for_timeout(700)  # over twice the page's flush interval
    assert feedback_calls(site, since) == []
    assert stored(site, since) == []
    assert page.evaluate("amelio.stats.discarded") >= 1
    assert page.evaluate("Object.keys(sessionStorage)") == []  # nothing kept either

    page.evaluate("amelio.setConsent('granted')")  # what came before is not replayed
    page.evaluate(f"amelio.vote({doc!r}, 'down')")
    rows = wait_for(lambda: stored(site, since))
    assert [r["event_type"] for r in rows] == ["vote_down"]
    assert rows[0]["doc_id"] == doc and rows[0]["rank_shown"] == 1
    assert rows[0]["event"]["request"]["branch"] == "search"


@pytest.mark.slow
def test_click_leave_and_return_sends_the_click_and_its_dwell(
    context: Any, site: dict[str, Any]
) -> None:
    ws, since = site["ws"], time.monotonic()
    page = open_search(context, site, "reset password", consent="granted")
    response = page.evaluate("window.last")
    session = page.evaluate("amelio.sessionId")
    assert session and len(session) == 32
    second = response["results"][1]["docId"]
    started = time.monotonic()
    page.locator(f"#results li[data-doc-id='{second}'] a").click()
    page.wait_for_url("**/doc/**")
    page.wait_for_timeout(1500)  # reading the result
    page.go_back()
    page.wait_for_selector("body[data-ready]")
    back = time.monotonic()
    rows = wait_for(
        lambda: [r for r in stored(site, since) if r["event_type"] == "result_dwell_time"]
    )
    assert rows, page.evaluate("window.errors")
    events = {r["event_type"]: r for r in stored(site, since)}
    assert set(events) == {"result_clicked", "result_dwell_time"}  # clicked: no abandonment
    for row in events.values():
        assert row["query_id"] == response["queryId"]  # accepted: its feedbackToken held
        assert row["request_id"] == response["requestId"]
        assert row["doc_id"] == second and row["rank_shown"] == 2
        assert "feedbackToken" not in row["event"]["request"]  # checked, then dropped
    dwell = events["result_dwell_time"]["event"]["outcome"]["dwellMs"]
    assert 1500 <= dwell <= (back - started) * 1000 + 100
    # The search ran in the same tab session, so events and impression join.
    with ws.engine.connect() as conn:
        shown = conn.execute(
            sa.select(search_impressions.c.session_hash).where(
                search_impressions.c.query_id == response["queryId"]
            )
        ).scalar_one()
    assert shown is not None and events["result_clicked"]["session_hash"] == shown


@pytest.mark.slow
def test_the_last_events_leave_with_sendbeacon_on_pagehide(
    context: Any, site: dict[str, Any]
) -> None:
    since = time.monotonic()
    # A minute between flushes: only the page going away can send these.
    page = open_search(context, site, "password", consent="granted", flush="60000")
    docs = [r["docId"] for r in page.evaluate("window.last.results")]
    sent_since = time.monotonic()
    page.locator("#results li").first.locator("button").click()  # vote_up, not a click
    page.evaluate(f"amelio.pin({docs[1]!r}); amelio.hide({docs[2]!r}, 'outdated')")
    assert len(page.evaluate("amelio.pending")) == 3
    page.wait_for_timeout(300)
    assert feedback_calls(site, sent_since) == []
    page.goto(f"{site['page']}/doc/elsewhere")  # pagehide: results seen, none clicked
    rows = wait_for(lambda: len(stored(site, since)) >= 4 and stored(site, since))
    assert sorted(r["event_type"] for r in rows) == [
        "query_abandoned",
        "result_hidden",
        "result_pinned",
        "vote_up",
    ]
    by_type = {r["event_type"]: r for r in rows}
    assert by_type["vote_up"]["doc_id"] == docs[0]
    assert (by_type["result_pinned"]["doc_id"], by_type["result_pinned"]["rank_shown"]) == (
        docs[1],
        2,
    )
    assert by_type["result_hidden"]["event"]["hide"] == {"reason": "outdated"}
    # The recorder notes a call once the app has answered it, which is after its rows
    # are stored: wait for the note too.
    [call] = wait_for(lambda: feedback_calls(site, sent_since))
    assert call["status"] == 202
    assert call["query"].startswith("key=amk_") and not call["authorization"]
    assert call["type"].startswith("text/plain")  # CORS-safelisted: no preflight


@pytest.mark.slow
def test_a_429_is_retried_after_its_retry_after(context: Any, site: dict[str, Any]) -> None:
    ws, app, since = site["ws"], site["app"], time.monotonic()
    page = open_search(context, site, "invoice", consent="granted")
    doc = page.evaluate("window.last.results[0].docId")
    saved = getattr(app.state, "feedback_collector", None)
    limiter = RateLimiter(per_key=Bucket(0.4, 1), per_session=Bucket(0, 1))
    app.state.feedback_collector = Collector(ws, limiter=limiter)
    try:
        # The client key has just spent its one event: the next waits 2.5 s for a token,
        # less the time the page takes to send it (Retry-After 3, or 2 on a slow day).
        assert limiter.try_acquire(f"key:{site['client_key_id']}", {}, key_cost=1) is None
        sent_since = time.monotonic()
        page.evaluate(f"amelio.pin({doc!r})")
        rows = wait_for(lambda: stored(site, since))
    finally:
        app.state.feedback_collector = saved
    assert [r["event_type"] for r in rows] == ["result_pinned"]
    # The event is stored a moment before the 202 that answers it is recorded.
    calls = wait_for(lambda: (found := feedback_calls(site, sent_since))[1:] and found)
    assert [c["status"] for c in calls] == [429, 202]
    retry_after = int(calls[0]["headers"]["retry-after"])
    assert retry_after >= 2
    # The retry waited Retry-After, not the 0.5–1 s of the client's own first backoff.
    assert calls[1]["at"] - calls[0]["at"] >= retry_after - 0.1
    assert page.evaluate("amelio.stats.retries") == 1


@pytest.mark.slow
def test_do_not_track_and_global_privacy_control_send_nothing(
    browser: Any, site: dict[str, Any]
) -> None:
    since = time.monotonic()
    signals = {
        "doNotTrack": "Object.defineProperty(Navigator.prototype, 'doNotTrack', "
        "{get: () => '1', configurable: true})",
        "globalPrivacyControl": "Object.defineProperty(Navigator.prototype, "
        "'globalPrivacyControl', {get: () => true, "
        "configurable: true})",
    }
    contexts = []
    for name, script in signals.items():
        ctx = browser.new_context()
        ctx.set_default_timeout(10_000)
        ctx.add_init_script(script)
        contexts.append(ctx)
        page = open_search(ctx, site, "reset password", consent="granted")
        assert page.evaluate("[amelio.consent, amelio.blockedBy, amelio.sessionId]") == [
            "denied",
            name,
            None,
        ]
        page.evaluate("amelio.setConsent('granted')")  # the signal still wins
        page.locator("#results li").first.locator("button").click()
        page.evaluate("amelio.flush()")
        page.locator("#results li").nth(1).locator("a").click()
        page.wait_for_url("**/doc/**")
        if name == "doNotTrack":  # and back: a dwell, had it been allowed
            page.go_back()
            page.wait_for_selector("body[data-ready]")
        assert page.evaluate("Object.keys(sessionStorage)") == []
    page.wait_for_timeout(500)  # over the page's flush interval
    site["recorder"].settle()
    assert feedback_calls(site, since) == []
    assert stored(site, since) == []
    # A page may decide otherwise, explicitly (respectDoNotTrack: false).
    page = open_search(contexts[0], site, "reset password", consent="granted", dnt="ignore")
    assert page.evaluate("amelio.consent") == "granted"
    page.locator("#results li").first.locator("button").click()
    assert [r["event_type"] for r in wait_for(lambda: stored(site, since))] == ["vote_up"]
    for ctx in contexts:
        close(ctx, site)


@pytest.mark.slow
def test_the_next_query_reports_reformulation_and_abandonment(
    context: Any, site: dict[str, Any]
) -> None:
    since = time.monotonic()
    page = open_search(context, site, "reset password", consent="granted")
    first = page.evaluate("window.last.queryId")
    page.evaluate("window.search('reset my password')")  # within 30 s, similar, no click
    page.wait_for_function(f"document.body.dataset.ready !== {first!r}")
    page.evaluate("window.search('download an invoice')")  # unrelated: abandonment only
    rows = wait_for(lambda: len(stored(site, since)) >= 3 and stored(site, since))
    second = page.evaluate("window.last.queryId")
    got = sorted((r["event_type"], r["query_id"] == first) for r in rows)
    assert got == [
        ("query_abandoned", False),
        ("query_abandoned", True),
        ("query_reformulated", True),
    ]
    reformulated = next(r for r in rows if r["event_type"] == "query_reformulated")
    assert reformulated["event"]["outcome"] == {"reformulatedAfter": True}
    assert all(r["query_id"] != second for r in rows)  # the current query is still open


@pytest.mark.slow
def test_a_result_read_in_another_tab_dwells_until_the_results_show_again(
    context: Any, site: dict[str, Any]
) -> None:
    """Ctrl+click opens the result in a tab of its own; the results page goes hidden while
    the person reads it. Headless Chromium keeps every page visible, so the page's
    visibility is set by hand here (the browser's own events drive the other tests)."""
    since = time.monotonic()
    page = open_search(context, site, "password", consent="granted", flush="60000")
    doc = page.evaluate("window.last.results[2].docId")
    with context.expect_page() as opened:
        page.locator(f"#results li[data-doc-id='{doc}'] a").click(modifiers=["Control"])
    opened.value.close()
    visibility = """(state) => {
        Object.defineProperty(document, "visibilityState", {configurable: true,
                                                            get: () => state});
        document.dispatchEvent(new Event("visibilitychange"));
    }"""
    page.evaluate(visibility, "hidden")  # hidden: the queue leaves at once (keepalive fetch)
    hidden = time.monotonic()
    sent = wait_for(lambda: stored(site, since))
    assert [r["event_type"] for r in sent] == ["result_clicked"]
    page.wait_for_timeout(1000)
    page.evaluate(visibility, "visible")
    shown = time.monotonic()
    page.evaluate("amelio.flush()")
    rows = wait_for(lambda: len(stored(site, since)) >= 2 and stored(site, since))
    dwell = rows[1]["event"]
    assert (dwell["eventType"], dwell["result"]) == (
        "result_dwell_time",
        {"docId": doc, "rankShown": 3},
    )
    assert 1000 <= dwell["outcome"]["dwellMs"] <= (shown - hidden) * 1000 + 100
    calls = [c for c in feedback_calls(site, since) if c["status"] == 202]
    assert len(calls) == 2 and all(c["authorization"] and not c["query"] for c in calls)


@pytest.mark.slow
def test_a_page_that_only_sends_feedback_never_loads_compute(
    context: Any, site: dict[str, Any]
) -> None:
    """Idle compute and its panel are modules of their own, imported when a page asks for
    them: a page that only sends feedback downloads the entry and the feedback client."""
    static = f"{site['amelio']}/static/"
    loaded: list[str] = []
    context.on(
        "request",
        lambda r: loaded.append(r.url[len(static) :]) if r.url.startswith(static) else None,
    )
    since = time.monotonic()
    page = open_search(context, site, "reset password", consent="granted")
    doc = page.evaluate("window.last.results[0].docId")
    page.evaluate(f"amelio.vote({doc!r}, 'up')")
    assert wait_for(lambda: stored(site, since), page=page)  # feedback sent and stored
    assert sorted(loaded) == ["amelio.js", "amelio/feedback.js"]
    assert page.evaluate("amelio.compute") is None and page.workers == []
    # Asked for, compute comes (and the panel only with the panel): the requests seen
    # above would have shown them.
    page.evaluate("amelio.loadCompute().then((compute) => compute.status().state)")
    assert wait_for(lambda: "amelio/compute.js" in loaded, page=page), loaded
    assert "amelio/panel.js" not in loaded and page.evaluate("amelio.compute !== null")
    page.evaluate("amelio.settingsPanel(document.body).then(() => true)")
    assert wait_for(lambda: "amelio/panel.js" in loaded, page=page), loaded
    assert page.workers == []  # loaded, not started: no worker, no lease
    assert not [url for url in loaded if "embed-worker" in url]


# -- the server side of it -------------------------------------------------------------


@contextmanager
def _client_app(workspace: Workspace, **overrides: Any) -> Iterator[TestClient]:
    """A client of ``workspace``'s service under other settings."""
    root = workspace.settings.workspace
    ws = open_workspace(root, settings=load_settings(root, **overrides))
    try:
        with TestClient(create_app(ws)) as client:
            yield client
    finally:
        ws.dispose()


@pytest.fixture
def host_calls_js_application_javascript() -> Iterator[None]:
    """The MIME table of a host without /etc/mime.types (Python 3.11's own)."""
    before = mimetypes.guess_type("x.js")[0] or "text/javascript"
    mimetypes.add_type("application/javascript", ".js")
    yield
    mimetypes.add_type(before, ".js")


@pytest.mark.usefixtures("host_calls_js_application_javascript")
def test_the_client_modules_and_their_types_are_served(sqlite_workspace: Workspace) -> None:
    """A module script must come as JavaScript whatever the host's MIME table says, and
    the type declarations as text (Python's table knows .ts as video/mp2t)."""
    modules = sorted(p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*.js"))
    declarations = sorted(p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*.d.ts"))
    assert {"amelio.js", "amelio/feedback.js", "amelio/compute.js", "amelio/panel.js"} <= set(
        modules
    )
    assert "amelio.d.ts" in declarations
    with TestClient(create_app(sqlite_workspace)) as client:
        assert "export const Amelio" in client.get("/static/amelio.js").text
        for name in modules:
            r = client.get(f"/static/{name}")
            assert r.status_code == 200, name
            assert r.headers["content-type"] == "text/javascript; charset=utf-8", name
        for name in declarations:
            r = client.get(f"/static/{name}")
            assert r.text == (STATIC / name).read_text(encoding="utf-8"), name
            assert r.headers["content-type"] == "text/plain; charset=utf-8", name
        # Revalidated (the browser's cache holds it): 304, no body and no type.
        etag = client.get("/static/amelio.js").headers["etag"]
        r = client.get("/static/amelio.js", headers={"If-None-Match": etag})
        assert r.status_code == 304 and "content-type" not in r.headers


def test_a_client_key_may_come_as_a_query_parameter_only_for_events(
    sqlite_workspace: Workspace,
) -> None:
    ws = sqlite_workspace
    token = {
        role: keys.create_key(ws.engine, name=role, role=role)[1]
        for role in ("client", "bot", "admin")
    }
    signer = Collector(ws).signer
    with TestClient(create_app(ws)) as client:

        def send(params: dict[str, str], headers: dict[str, str] | None = None) -> Any:
            body = json.dumps(example_event("result_clicked", signer=signer))
            return client.post(
                "/v1/feedback/events",
                params=params,
                content=body,
                headers={"Content-Type": "text/plain;charset=UTF-8", **(headers or {})},
            )

        r = send({"key": token["client"]})
        assert r.status_code == 202 and r.json()["accepted"] == 1
        for role in ("bot", "admin"):  # never in a URL: they can do more than send events
            r = send({"key": token[role]})
            assert r.status_code == 403, role
            assert "Authorization" in r.json()["error"]["message"]
        assert send({"key": "amk_forged"}).status_code == 401
        assert send({}).status_code == 401
        r = send({"key": token["client"]}, {"Authorization": f"Bearer {token['client']}"})
        assert r.status_code == 422
        # The key in the query string opens the collector and nothing else.
        r = client.get("/v1/feedback/stats", params={"key": token["client"]})
        assert r.status_code == 401
        h = {"Authorization": f"Bearer {token['client']}"}
        for method, path, body in (
            ("GET", "/v1/skills", None),
            ("POST", "/v1/chat", {"message": "hi"}),
            ("POST", "/v1/search", {"query": "x"}),
            ("GET", "/v1/feedback/stats", None),
            ("GET", "/v1/learnings", None),
        ):
            r = client.request(method, path, headers=h, json=body)
            assert r.status_code == 403, (path, r.text)
            assert r.json()["error"]["code"] == "forbidden"


def test_cors_is_off_by_default_and_on_for_the_configured_origins(
    sqlite_workspace: Workspace,
) -> None:
    preflight = {
        "Origin": "https://shop.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    with TestClient(create_app(sqlite_workspace)) as client:
        r = client.options("/v1/feedback/events", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
        r = client.get("/static/amelio.js", headers={"Origin": "https://shop.example"})
        assert "access-control-allow-origin" not in r.headers
    with _client_app(
        sqlite_workspace, cors_origins="https://shop.example, http://127.0.0.1:8080"
    ) as client:
        r = client.options("/v1/feedback/events", headers=preflight)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://shop.example"
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in r.headers  # keys, never cookies
        r = client.get("/static/amelio.js", headers={"Origin": "http://127.0.0.1:8080"})
        assert r.headers["access-control-allow-origin"] == "http://127.0.0.1:8080"
        r = client.post(
            "/v1/feedback/events", headers={"Origin": "https://shop.example"}, content=b"[]"
        )
        assert r.status_code == 401  # CORS opens the door to the browser, not to the API
        assert r.headers["access-control-expose-headers"] == "Retry-After"
        r = client.options(
            "/v1/feedback/events", headers=preflight | {"Origin": "https://evil.example"}
        )
        assert r.headers.get("access-control-allow-origin") != "https://evil.example"


@pytest.mark.parametrize(
    "value", ["https://shop.example/", "shop.example", "https://a.example https://b.example"]
)
def test_a_cors_origin_is_scheme_host_and_port(value: str, tmp_path: Path) -> None:
    from amelio.errors import ConfigError

    init_workspace(tmp_path / "ws")[0].dispose()
    with pytest.raises(ConfigError, match="cors_origins"):
        load_settings(tmp_path / "ws", cors_origins=value)
