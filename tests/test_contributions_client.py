"""Idle compute in amelio.js (``amelio/compute.js``, MartyContributionV1) in a real browser:
Debian's Chromium driven by Playwright, over real HTTP on loopback, against a real
Amelio whose search store has documents without vectors.

As in a real integration the page lives on its own origin and loads ``amelio.js``
from Amelio's (CORS on for the page's origin); the embedding worker, which must be of
the page's origin, is started through a same-origin module that imports Amelio's.
Each browser context is a browser of its own (its own localStorage, so its own
client token) on a network of its own (its leases carry an ``X-Forwarded-For`` that
the server, as behind a proxy it trusts, takes for the remote address): two contexts
are two independent contributing clients.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from amelio.contributions import decode_vectors, encode_vectors
from amelio.demo.app import create_demo_app, prepare_demo
from amelio.embeddings import load_embedder
from amelio.search.engines.registry import workspace_corpus
from amelio.search.store import EMBED_CHARS
from amelio.server import create_app
from amelio.testing import ThreadedServer
from amelio.workspace import keys
from browser_support import launch_chromium, wait_for, workspace_with

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "demo" / "corpus.jsonl"
TASKS_PATH = "/v1/contributions/tasks"

# The page: its compute options and the person's preferences come from its query
# string, so each test sets consent, intensity, windows and idleness.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Idle compute</title></head>
<body><main id="panel"></main>
<script type="module">
import { Amelio } from "%(amelio)s/static/amelio.js";
const params = new URLSearchParams(location.search);
const options = JSON.parse(params.get("compute") || "{}");
window.errors = [];
const amelio = window.amelio = Amelio.init({
  endpoint: "%(amelio)s", key: "%(key)s", project: "default",
  compute: { ...options, enabled: false },
  onError: (e) => window.errors.push(e.message),
});
const compute = await amelio.loadCompute();
window.amelioModule = await import("%(amelio)s/static/amelio/compute.js");
window.statuses = [];
compute.addEventListener("status", (e) => window.statuses.push(e.detail));
if (params.get("prefs")) compute.setPreferences(JSON.parse(params.get("prefs")));
if (params.get("panel")) {
  window.panel = await amelio.settingsPanel(document.getElementById("panel"));
}
if (options.enabled) compute.start();
document.body.dataset.ready = "1";
</script></body></html>"""

GRANTED = {"consent": {"embed_documents": {"search_index": "granted"}}}


def page_app(cfg: dict[str, Any]) -> Starlette:
    async def page(_: Request) -> HTMLResponse:
        return HTMLResponse(PAGE % {"amelio": cfg["amelio"], "key": cfg["client"]})

    return Starlette(routes=[Route("/compute", page)])


def corpus(start: int, count: int) -> list[dict[str, Any]]:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()[start : start + count]
    return [json.loads(line) for line in lines]


def import_docs(site: dict[str, Any], docs: list[dict[str, Any]]) -> list[str]:
    """Into the search store, without vectors: what the browsers are to compute."""
    path = site["root"] / f"docs-{docs[0]['_id']}.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    workspace_corpus(site["ws"].settings).import_file(path)
    return [d["_id"] for d in docs]


def stored_vectors(site: dict[str, Any], doc_ids: list[str]) -> dict[str, np.ndarray]:
    """The search store's wordllama vectors of ``doc_ids`` (read from its SQLite file)."""
    path = workspace_corpus(site["ws"].settings).path
    marks = ",".join("?" * len(doc_ids))
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT d.doc_id, v.vec FROM vectors v JOIN docs d ON d.rowid = v.rowid "
            f"WHERE v.model = 'wordllama' AND d.doc_id IN ({marks})",
            doc_ids,
        ).fetchall()
    return {doc_id: np.frombuffer(vec, dtype=np.float32) for doc_id, vec in rows}


def server_vectors(site: dict[str, Any], doc_ids: list[str]) -> dict[str, np.ndarray]:
    """What the server's own embedder makes of the same documents."""
    docs = workspace_corpus(site["ws"].settings).documents(doc_ids)
    texts = [f"{docs[d].title}\n{docs[d].body}"[:EMBED_CHARS] for d in doc_ids]
    vectors = load_embedder("wordllama").embed(texts)
    return {d: np.asarray(v, dtype=np.float32) for d, v in zip(doc_ids, vectors, strict=True)}


def cosines(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, float]:
    return {d: float(a[d] @ b[d] / (np.linalg.norm(a[d]) * np.linalg.norm(b[d]))) for d in a}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, chromium: str) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("client-compute")
    cfg: dict[str, Any] = {}
    with ThreadedServer(page_app(cfg)) as page_server:
        ws = workspace_with(
            root / "ws",
            cors_origins=page_server.url,
            search_thompson=0.0,
            search_exploration=0.0,
            warm_up=False,
            contributions=True,
            contributions_batch=8,
            # Established clients: the server's own checks of new identities, and
            # identities minted together being one party, are tested in
            # test_contributions_independence.py; here two contexts must agree.
            contributions_probation=0,
            contributions_related_seconds=0,
        )
        # No document yet: each test that computes imports its own, so the leases the
        # other tests make find nothing to do.
        _, cfg["client"] = keys.create_key(ws.engine, name="web", role="client")
        _, admin = keys.create_key(ws.engine, name="admin", role="admin")
        with ThreadedServer(create_app(ws)) as amelio_server:
            cfg["amelio"] = amelio_server.url
            yield {
                "page": page_server.url,
                "amelio": amelio_server.url,
                "ws": ws,
                "root": root,
                "admin": admin,
            }
        ws.dispose()


@pytest.fixture(scope="module")
def browser(site: dict[str, Any], chromium: str) -> Iterator[Any]:
    with launch_chromium(chromium) as browser:
        yield browser


_NETWORKS = itertools.count(1)


class Browser:
    """A browser profile of its own (a context) on a network of its own, noting its
    requests to the task route."""

    def __init__(self, browser: Any, site: dict[str, Any]) -> None:
        self.site = site
        self.context = browser.new_context(locale="en-US")
        self.context.set_default_timeout(15_000)
        self.leases: list[str] = []
        self.context.on(
            "request", lambda r: self.leases.append(r.url) if TASKS_PATH in r.url else None
        )
        address = f"198.51.{next(_NETWORKS) % 250}.7"

        def from_network(route: Any) -> None:
            route.continue_(headers=route.request.headers | {"x-forwarded-for": address})

        self.context.route(lambda url: TASKS_PATH in url, from_network)

    def open(
        self, prefs: dict[str, Any] | None = None, *, panel: bool = False, **compute: Any
    ) -> Any:
        params: dict[str, str] = {"compute": json.dumps(compute)}
        if prefs is not None:
            params["prefs"] = json.dumps(prefs)
        if panel:
            params["panel"] = "1"
        page = self.context.new_page()
        query = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
        page.goto(f"{self.site['page']}/compute?{query}")
        page.wait_for_selector("body[data-ready]", state="attached")
        return page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def browsers(browser: Any, site: dict[str, Any]) -> Iterator[Callable[[], Browser]]:
    made: list[Browser] = []

    def make() -> Browser:
        made.append(Browser(browser, site))
        return made[-1]

    yield make
    for b in made:
        b.close()


def status(page: Any) -> dict[str, Any]:
    return dict(page.evaluate("amelio.compute.status()"))


def compute_keys(page: Any) -> list[str]:
    return list(
        page.evaluate("Object.keys(localStorage).filter((k) => k.startsWith('amelio:compute'))")
    )


# -- the device tier ----------------------------------------------------------------------

TIER_CASES: list[tuple[dict[str, Any], str]] = [
    ({"cores": 16, "memoryGb": 8, "webgpu": True}, "HIGH+"),
    ({"cores": 8, "memoryGb": 8}, "HIGH"),
    ({"cores": 8, "memoryGb": None, "webgpu": False}, "HIGH"),  # no deviceMemory: cores decide
    ({"cores": 8, "memoryGb": 4, "webgpu": True}, "MID+"),  # memory caps the class
    ({"cores": 4, "memoryGb": 8}, "MID"),
    ({"cores": 6, "memoryGb": 2, "webgpu": True}, "LOW+"),
    ({"cores": 2, "memoryGb": 2}, "LOW"),
    ({}, "LOW"),  # nothing known: the lowest class that runs
    ({"cores": 1, "memoryGb": 8, "webgpu": True}, "DEGRADED"),
    ({"cores": 8, "memoryGb": 1}, "DEGRADED"),
    ({"cores": 16, "memoryGb": 8, "saveData": True}, "DEGRADED"),
    # On battery: one class lower; under 30 % and not charging: nothing.
    (
        {"cores": 16, "memoryGb": 8, "webgpu": True, "battery": {"level": 0.8, "charging": False}},
        "MID+",
    ),
    ({"cores": 4, "memoryGb": 4, "battery": {"level": 0.3, "charging": False}}, "LOW"),
    ({"cores": 2, "memoryGb": 4, "battery": {"level": 0.9, "charging": False}}, "LOW"),
    ({"cores": 16, "memoryGb": 8, "battery": {"level": 0.29, "charging": False}}, "DEGRADED"),
    ({"cores": 16, "memoryGb": 8, "battery": {"level": 0.05, "charging": True}}, "HIGH"),
    # A browser that does not say whether it charges is not taken as discharging.
    ({"cores": 16, "memoryGb": 8, "battery": {"level": 0.05}}, "HIGH"),
]


@pytest.mark.slow
def test_device_tier_table(browsers: Callable[[], Browser]) -> None:
    page = browsers().open()
    got = page.evaluate(
        "(cases) => cases.map((f) => amelioModule.deviceTier(f))",
        [facts for facts, _ in TIER_CASES],
    )
    assert got == [tier for _, tier in TIER_CASES]
    budgets = page.evaluate("amelioModule.CPU_SECONDS_PER_HOUR")
    assert budgets == {
        "HIGH+": 120,
        "HIGH": 90,
        "MID+": 60,
        "MID": 45,
        "LOW+": 30,
        "LOW": 15,
        "DEGRADED": 0,
    }
    # This browser's own facts give a tier, and detecting it sends nothing.
    tier = page.evaluate("amelio.compute.detectTier()")
    assert tier == page.evaluate("amelioModule.deviceFacts().then(amelioModule.deviceTier)")
    assert tier in budgets


# -- when it must not run -----------------------------------------------------------------


@pytest.mark.slow
def test_nothing_runs_before_compute_consent(browsers: Callable[[], Browser]) -> None:
    # Started, idle at once, feedback consent irrelevant: no compute consent yet.
    waiting = browsers()
    page = waiting.open(idleAfterMs=0, enabled=True)
    assert status(page)["reason"] == "consent"
    # Control: a browser that consented, opened after it, leases; by then the first
    # had as long to do the same, and did nothing.
    control = browsers()
    control_page = control.open(GRANTED, idleAfterMs=0, enabled=True)
    assert wait_for(lambda: control.leases, page=control_page)
    assert waiting.leases == []
    assert page.workers == []
    assert compute_keys(page) == []  # nothing kept either
    assert status(page)["state"] == "waiting" and status(page)["reason"] == "consent"
    # The person says yes: it leases now, with the tier and the consented purpose.
    page.evaluate("amelio.compute.setConsent('granted')")
    [url] = wait_for(lambda: waiting.leases[:1], page=page)
    assert "purposes=search_index" in url and "types=embed_documents" in url
    assert f"tier={quote(status(page)['tier'], safe='')}" in url
    assert compute_keys(page)  # the choice is kept


@pytest.mark.slow
def test_no_lease_at_intensity_zero_or_outside_the_time_window(
    browsers: Callable[[], Browser],
) -> None:
    off = browsers()
    off_page = off.open({**GRANTED, "intensity": "off"}, idleAfterMs=0, enabled=True)
    elsewhere = browsers()
    # A window on another day of the week than today's (local time in the browser).
    elsewhere_page = elsewhere.open(None, idleAfterMs=0)
    elsewhere_page.evaluate("""() => {
        const day = (new Date().getDay() + 3) % 7;
        amelio.compute.setPreferences({consent: {embed_documents: {search_index: "granted"}},
                                       windows: [{days: [day], from: "00:00", to: "00:00"}]});
        amelio.compute.start();
    }""")
    busy = browsers()  # consented, but the person keeps using the page
    busy_page = busy.open(GRANTED, idleAfterMs=60_000, enabled=True)
    control = browsers()
    control_page = control.open(GRANTED, idleAfterMs=0, enabled=True)
    assert wait_for(lambda: control.leases, page=control_page)
    reasons = wait_for(
        lambda: (
            [status(p)["reason"] for p in (off_page, elsewhere_page, busy_page)]
            == ["intensity", "window", "active"]
        )
    )
    assert reasons, [status(p) for p in (off_page, elsewhere_page, busy_page)]
    assert (off.leases, elsewhere.leases, busy.leases) == ([], [], [])
    assert status(off_page)["cpuSecondsPerHour"] == 0
    # Back inside the window: it leases.
    elsewhere_page.evaluate("amelio.compute.setPreferences({windows: []})")
    assert wait_for(lambda: elsewhere.leases, page=elsewhere_page)


# -- the person's controls ------------------------------------------------------------------


@pytest.mark.slow
def test_settings_panel_renders_and_changes_persist(browsers: Callable[[], Browser]) -> None:
    person = browsers()
    page = person.open(panel=True)
    box = page.get_by_label("Compute search-index embeddings of documents")
    assert not box.is_checked()
    assert page.locator("#intensity").input_value() == "50"
    assert page.get_by_role("button", name="Balanced (50)").get_attribute("aria-pressed") == "true"
    assert page.locator("#quota").input_value() == "600"
    wait_for(lambda: page.locator("#tier").text_content() != "…")
    tier = page.evaluate("amelio.compute.tier")
    assert page.locator("#tier").text_content() == tier
    assert page.get_by_role("status").text_content() == "Stopped."
    budget = {
        "HIGH+": 120,
        "HIGH": 90,
        "MID+": 60,
        "MID": 45,
        "LOW+": 30,
        "LOW": 15,
        "DEGRADED": 0,
    }[tier]
    assert status(page)["cpuSecondsPerHour"] == budget / 2  # balanced: half the tier's
    assert page.locator("#cpu-hour").text_content().startswith("0.0 s of ")
    assert compute_keys(page) == []  # looking at the panel keeps nothing

    box.check()
    page.get_by_role("button", name="Max (100)").click()
    page.get_by_label("Only between").check()
    page.get_by_label("From").fill("08:30")
    page.get_by_label("To").fill("17:15")
    page.get_by_label("Daily limit").fill("120")
    page.get_by_label("Daily limit").press("Tab")
    prefs = page.evaluate("amelio.compute.preferences()")
    assert prefs == {
        "consent": {"embed_documents": {"search_index": "granted"}},
        "intensity": 100,
        "windows": [{"from": "08:30", "to": "17:15"}],
        "dailyQuotaSeconds": 120,
    }

    again = person.open(panel=True)  # another page of the same browser
    assert again.evaluate("amelio.compute.preferences()") == prefs
    assert again.get_by_label("Compute search-index embeddings of documents").is_checked()
    assert again.locator("#intensity").input_value() == "100"
    assert again.get_by_role("button", name="Max (100)").get_attribute("aria-pressed") == "true"
    assert again.locator("#window-from").input_value() == "08:30"
    assert again.locator("#quota").input_value() == "120"
    # The slider moves by keyboard too, and its value is saved on change.
    again.locator("#intensity").focus()
    again.keyboard.press("ArrowLeft")
    assert wait_for(lambda: again.evaluate("amelio.compute.preferences().intensity") == 99)

    # Unticking withdraws consent; a bad value is refused, not kept.
    again.get_by_label("Compute search-index embeddings of documents").uncheck()
    assert again.evaluate("amelio.compute.consentFor('embed_documents', 'search_index')") == (
        "denied"
    )
    error = again.evaluate("""() => { try { amelio.compute.setPreferences({intensity: 101}); }
                                      catch (e) { return e.name; } }""")
    assert error == "TypeError"
    assert again.evaluate("amelio.compute.preferences().intensity") == 99


@pytest.mark.slow
def test_consent_for_an_unknown_task_type_or_purpose_is_refused(
    browsers: Callable[[], Browser],
) -> None:
    page = browsers().open()
    refused = page.evaluate(
        """(cases) => cases.map((which) => {
        try { amelio.compute.setConsent("granted", which); return null; }
        catch (e) { return [e.name, e.message]; } })""",
        [
            {"taskType": "classify"},
            {"purpose": "ads"},
            {"taskType": "embed_documents", "purpose": "ads"},
        ],
    )
    assert [name for name, _ in refused] == ["TypeError"] * 3, refused
    assert '"classify"' in refused[0][1] and "embed_documents" in refused[0][1]
    assert '"ads"' in refused[1][1] and '"ads"' in refused[2][1]
    assert page.evaluate("amelio.compute.preferences().consent") == {}
    assert compute_keys(page) == []  # nothing kept under a guessed name either
    page.evaluate(
        "amelio.compute.setConsent('granted', "
        "{taskType: 'embed_documents', purpose: 'search_index'})"
    )
    assert page.evaluate("amelio.compute.preferences().consent") == GRANTED["consent"]


@pytest.mark.slow
def test_the_panel_edits_the_first_window_and_keeps_the_others(
    browsers: Callable[[], Browser],
) -> None:
    second = {"days": [6], "from": "10:00", "to": "11:00"}
    page = browsers().open({"windows": [{"from": "09:00", "to": "12:00"}, second]}, panel=True)
    assert page.locator("#window-from").input_value() == "09:00"
    assert page.locator("#window-more").text_content() == "(and 1 other window, unchanged here)"
    page.get_by_label("From").fill("08:30")
    assert page.evaluate("amelio.compute.preferences().windows") == [
        {"from": "08:30", "to": "12:00"},
        second,
    ]
    page.get_by_label("Only between").uncheck()  # any time: no window at all
    assert page.evaluate("amelio.compute.preferences().windows") == []
    assert page.locator("#window-more").text_content() == ""


# navigator.getBattery answering a BatteryManager of the test's: 10 %, and whether it
# charges unknown. It and navigator.connection (Chromium has it) count their listeners.
FAKE_BATTERY = """(() => {
  const counted = (target) => {
    const add = target.addEventListener.bind(target);
    const remove = target.removeEventListener.bind(target);
    target.listeners = 0;
    target.addEventListener = (...a) => { target.listeners++; add(...a); };
    target.removeEventListener = (...a) => { target.listeners--; remove(...a); };
    return target;
  };
  const battery = window.fakeBattery = counted(new EventTarget());
  battery.level = 0.1;
  battery.charging = undefined;
  counted(navigator.connection);
  window.getBatteryCalls = 0;
  Object.defineProperty(Navigator.prototype, "getBattery", { configurable: true,
    value() { window.getBatteryCalls++; return Promise.resolve(battery); } });
})();"""

HELD = "[fakeBattery.listeners, navigator.connection.listeners]"


@pytest.mark.slow
def test_battery_and_connection_are_followed_only_while_started(
    browsers: Callable[[], Browser],
) -> None:
    b = browsers()
    b.context.add_init_script(FAKE_BATTERY)
    page = b.open(panel=True)
    tier = page.evaluate("amelio.compute.detectTier()")  # the panel asked already
    # One look at the battery, kept: and the panel, without consent, listens to nothing.
    assert page.evaluate("window.getBatteryCalls") == 1
    assert page.evaluate(HELD) == [0, 0]
    # 10 % and charging unknown: the tier and the pause agree that it is not on battery.
    assert tier == page.evaluate(
        """(tier) => amelioModule.deviceTier({
        cores: navigator.hardwareConcurrency, memoryGb: navigator.deviceMemory,
        webgpu: tier.endsWith("+")})""",
        tier,
    )
    page.evaluate("""() => { amelio.compute.setConsent("granted");
                             amelio.compute.start(); }""")
    assert wait_for(lambda: status(page)["reason"] == "active", page=page), status(page)
    assert page.evaluate(HELD) == [2, 1]
    # Unplugged: the battery's event pauses it.
    page.evaluate("""() => { fakeBattery.charging = false;
                             fakeBattery.dispatchEvent(new Event("chargingchange")); }""")
    assert status(page)["reason"] == "battery" and status(page)["tier"] == "DEGRADED"
    # Stopped: nothing listens, and the battery's events change nothing.
    page.evaluate("amelio.compute.stop()")
    assert page.evaluate(HELD) == [0, 0]
    seen = page.evaluate("window.statuses.length")
    page.evaluate("""() => { fakeBattery.charging = true;
                             fakeBattery.dispatchEvent(new Event("chargingchange"));
                             fakeBattery.dispatchEvent(new Event("levelchange")); }""")
    page.wait_for_timeout(200)
    assert page.evaluate("window.statuses.length") == seen
    # Started again: it reads what changed meanwhile, and listens again.
    page.evaluate("amelio.compute.start()")
    assert status(page)["reason"] == "active" and status(page)["tier"] == tier
    assert page.evaluate(HELD) == [2, 1]
    assert page.evaluate("window.getBatteryCalls") == 1
    assert b.leases == []


@pytest.mark.slow
def test_the_page_cannot_raise_the_hourly_budget(browsers: Callable[[], Browser]) -> None:
    b = browsers()
    page = b.open({"intensity": "max"}, cpuSecondsPerHour=100_000)
    tier = page.evaluate("amelio.compute.detectTier()")
    table = page.evaluate("amelioModule.CPU_SECONDS_PER_HOUR")
    assert status(page)["cpuSecondsPerHour"] == table[tier]  # not 100,000
    # The table is frozen: writing to it changes nothing.
    page.evaluate("""() => { amelioModule.CPU_SECONDS_PER_HOUR[amelio.compute.tier] = 1e6;
                             try { delete amelioModule.CPU_SECONDS_PER_HOUR.LOW; } catch {} }""")
    assert page.evaluate("Object.isFrozen(amelioModule.CPU_SECONDS_PER_HOUR)")
    assert status(page)["cpuSecondsPerHour"] == table[tier]
    # Preferences carry no budget; unknown fields are ignored, and intensity scales down.
    page.evaluate("amelio.compute.setPreferences({intensity: 'low', cpuSecondsPerHour: 1e6})")
    assert status(page)["cpuSecondsPerHour"] == pytest.approx(table[tier] * 0.25)
    # A page may lower it.
    low = b.open({"intensity": "max"}, cpuSecondsPerHour=5)
    low.evaluate("amelio.compute.detectTier()")
    assert status(low)["cpuSecondsPerHour"] == min(5, table[tier])


@pytest.mark.slow
def test_a_forged_client_token_is_dropped_for_a_new_identity(
    browsers: Callable[[], Browser], site: dict[str, Any]
) -> None:
    b = browsers()
    page = b.open(GRANTED, idleAfterMs=0)
    # A token of the format before one signer made them all: what a browser kept from
    # an older Amelio, or forged. Either way it is dropped for a new identity.
    forged = "c1.01HZZZZZZZZZZZZZZZZZZZZZZZ." + "A" * 43
    page.evaluate(
        """([key, token]) => {
        localStorage.setItem(key, JSON.stringify({clientToken: token, trust: 1}));
        amelio.compute.start();
    }""",
        [f"amelio:compute:state:{site['amelio']}#default", forged],
    )
    assert wait_for(lambda: len(b.leases) >= 2, page=page), (b.leases, status(page))
    assert f"clientToken={forged}" in b.leases[0]  # refused: 422 invalid_client_token
    assert "clientToken=" not in b.leases[1]  # asked afresh, and given a token of its own
    issued = wait_for(lambda: status(page)["clientId"], page=page)
    assert issued and issued not in forged and status(page)["trust"] == 0.5
    assert page.evaluate("window.errors") == []


# -- computing for real -------------------------------------------------------------------

IDLE_MAX = {"idleAfterMs": 0, "enabled": True, "tasksPerLease": 8}


@pytest.mark.slow
def test_two_browsers_embed_the_index_and_their_vectors_are_the_servers(
    browsers: Callable[[], Browser], site: dict[str, Any]
) -> None:
    doc_ids = import_docs(site, corpus(0, 24))  # 3 tasks of 8 documents
    assert stored_vectors(site, doc_ids) == {}  # the server embedded none of them
    pages = [browsers().open({**GRANTED, "intensity": "max"}, **IDLE_MAX) for _ in range(2)]
    got = wait_for(
        lambda: len(found := stored_vectors(site, doc_ids)) == len(doc_ids) and found,
        timeout=60,
        page=pages[0],
    )
    assert got, ([status(p) for p in pages], [p.evaluate("window.errors") for p in pages])
    # The browsers' vectors, accepted because the two agreed, are the server's own.
    agreement = cosines(got, server_vectors(site, doc_ids))
    assert min(agreement.values()) >= 0.9999, agreement
    for page in pages:
        s = wait_for(lambda p=page: (s := status(p))["tasks"]["computed"] == 3 and s, page=page)
        assert s, status(page)
        assert s["tasks"]["accepted"] + s["tasks"]["pending"] == 3
        assert s["tasks"]["rejected"] == s["tasks"]["failed"] == 0
        if s["tasks"]["accepted"]:  # the answer that accepted it says the trust it raised
            assert s["trust"] > 0.5
        assert 0 < s["usedLastHour"] <= s["cpuSecondsPerHour"]
        assert page.evaluate("window.errors") == []
    # Each client's first result waited for the other's: both agreed, none was rejected.
    assert sum(status(p)["tasks"]["accepted"] for p in pages) == 3
    stats = httpx.get(
        f"{site['amelio']}/v1/contributions/stats",
        headers={"Authorization": f"Bearer {site['admin']}"},
    ).json()
    assert stats["tasks"]["accepted"] >= 3 and stats["results"]["rejected"] == 0
    assert stats["documentsEmbedded"] >= len(doc_ids)


@pytest.mark.slow
def test_a_browser_that_tampers_with_its_vectors_is_rejected_and_loses_trust(
    browsers: Callable[[], Browser], site: dict[str, Any]
) -> None:
    doc_ids = import_docs(site, corpus(24, 16))  # 2 tasks
    verdicts: list[dict[str, Any]] = []

    def tamper(route: Any) -> None:
        """Between the page and the server: every vector reversed (still a unit
        vector, so the schema passes it; but not the document's)."""
        if route.request.method != "POST":
            route.continue_()
            return
        body = json.loads(route.request.post_data or "{}")
        result = body["result"]  # the wire form: base64 of the n×d float32 matrix
        vectors = decode_vectors(result["vectors"], result["dimensions"])
        assert vectors.shape == (8, 256)  # a task of contributions_batch texts
        result["vectors"] = encode_vectors(vectors[:, ::-1])
        response = route.fetch(post_data=json.dumps(body))
        verdicts.append(response.json())
        route.fulfill(response=response)

    cheat = browsers()
    cheat.context.route(f"{site['amelio']}/v1/contributions", tamper)
    cheat_page = cheat.open({**GRANTED, "intensity": "max"}, **IDLE_MAX)
    # It computes both tasks first (each pending: no second opinion yet) …
    assert wait_for(lambda: len(verdicts) == 2, timeout=30, page=cheat_page), verdicts
    assert [v["status"] for v in verdicts] == ["pending", "pending"]
    cheat_id = status(cheat_page)["clientId"]
    # … then an honest browser disagrees: the server checks, and the cheat loses.
    honest_page = browsers().open({**GRANTED, "intensity": "max"}, **IDLE_MAX)
    got = wait_for(
        lambda: len(found := stored_vectors(site, doc_ids)) == len(doc_ids) and found,
        timeout=60,
        page=honest_page,
    )
    assert got, status(honest_page)
    agreement = cosines(got, server_vectors(site, doc_ids))
    assert min(agreement.values()) >= 0.9999  # what was stored is the honest result
    # (The vectors are stored a moment before the answer that says so reaches the page.)
    honest = wait_for(
        lambda: (s := status(honest_page))["tasks"]["accepted"] == 2 and s, page=honest_page
    )
    assert honest and honest["trust"] > 0.5, status(honest_page)
    stats = httpx.get(
        f"{site['amelio']}/v1/contributions/stats",
        headers={"Authorization": f"Bearer {site['admin']}"},
    ).json()
    assert stats["results"]["rejected"] >= 2 and stats["clients"]["lowTrust"] >= 1
    assert stats["disagreements"] >= 2
    # The cheat's next visit learns it: its trust fell under the floor, and it gets nothing.
    again = cheat.open({**GRANTED, "intensity": "max"}, **IDLE_MAX)
    assert wait_for(lambda: status(again)["reason"] == "no-tasks", page=again), status(again)
    assert status(again)["trust"] < 0.2
    assert status(again)["clientId"] == cheat_id  # the server knew its token
    assert again.workers == []  # no task: no worker started


VISIBILITY = """(state) => {
    Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
    document.dispatchEvent(new Event("visibilitychange"));
}"""


@pytest.mark.slow
def test_a_hidden_page_works_and_the_person_coming_back_stops_the_worker(
    browsers: Callable[[], Browser], site: dict[str, Any]
) -> None:
    """Headless Chromium keeps pages visible: the page's visibility is set by hand (as in
    test_client_js). The model files are held back, so the task is still running when
    the person comes back."""
    import_docs(site, corpus(40, 8))  # 1 task
    held: list[Any] = []
    b = browsers()
    b.context.route(f"{site['amelio']}/v1/contributions/models/**", lambda r: held.append(r))
    posts: list[str] = []
    b.context.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page = b.open({**GRANTED, "intensity": "max"}, idleAfterMs=60_000, enabled=True)
    assert wait_for(lambda: status(page)["reason"] == "active", page=page)  # the minute of
    assert b.leases == []  # quiet after load has not passed
    page.evaluate(VISIBILITY, "hidden")  # the person went to another tab: idle at once
    assert wait_for(lambda: held and page.workers, page=page), status(page)
    assert len(b.leases) == 1 and status(page)["state"] == "working"
    page.evaluate(VISIBILITY, "visible")  # back: the worker goes, the task is dropped
    assert status(page)["state"] == "waiting" and status(page)["reason"] == "active"
    assert wait_for(lambda: page.workers == [], page=page)
    assert status(page)["tasks"]["interrupted"] == 1
    for route in held:
        route.continue_()
    page.mouse.move(20, 20)  # input too keeps it waiting
    assert status(page)["reason"] == "active" and status(page)["tasks"]["computed"] == 0
    assert posts == []  # nothing sent: the lease simply expires on the server
    assert len(b.leases) == 1


# A worker of the test's, on the page's origin (as `workerUrl`): it loads nothing and
# answers each task at once, as MODE says: unit vectors of 256 dimensions ("ok"), of 255
# ("short"), or an error ("error").
FAKE_WORKER = """const MODE = "%s";
self.onmessage = ({ data: m }) => {
  if (m.type === "init") {
    self.postMessage({ type: "ready", model: "wordllama", dimensions: 256, loadMs: 1 });
  } else if (MODE === "error") {
    self.postMessage({ type: "error", id: m.id, message: "out of memory" });
  } else {
    const d = MODE === "short" ? 255 : 256;
    const vectors = new Float32Array(m.texts.length * d);
    m.texts.forEach((_, i) => { vectors[i * d] = 1; });
    self.postMessage({ type: "result", id: m.id, vectors, computeMs: 1 }, [vectors.buffer]);
  }
};"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "start", "says"),
    [
        ("ok", 48, "compute: "),  # the server refuses the result: 422
        ("error", 56, "compute: the worker: out of memory"),
        ("short", 64, "compute: the worker returned vectors of the wrong count or size"),
    ],
)
def test_a_failed_task_is_reported_and_waits_before_leasing_again(
    browsers: Callable[[], Browser], site: dict[str, Any], mode: str, start: int, says: str
) -> None:
    """Failing again at once would loop lease, fail, lease: each failure waits 10 min."""
    import_docs(site, corpus(start, 8))  # 1 task
    b = browsers()
    worker = f"{site['page']}/fake-worker-{mode}.js"
    b.context.route(
        worker, lambda r: r.fulfill(body=FAKE_WORKER % mode, content_type="text/javascript")
    )
    refused: list[int] = []

    def spoil(route: Any) -> None:
        """The result made unreadable on its way, so the real server answers 422."""
        if route.request.method != "POST":
            route.continue_()
            return
        body = json.loads(route.request.post_data or "{}")
        body["result"]["vectors"] = "not base64!"
        response = route.fetch(post_data=json.dumps(body))
        refused.append(response.status)
        route.fulfill(response=response)

    if mode == "ok":
        b.context.route(f"{site['amelio']}/v1/contributions", spoil)
    page = b.open({**GRANTED, "intensity": "max"}, **IDLE_MAX, workerUrl=worker)
    failed = wait_for(lambda: (s := status(page))["reason"] == "error" and s, page=page)
    assert failed, (status(page), page.evaluate("window.errors"))
    assert failed["state"] == "waiting" and failed["tasks"]["failed"] == 1
    assert failed["tasks"]["computed"] == 0
    assert failed["resumeAtMs"] > page.evaluate("Date.now()") + 9 * 60_000
    [error] = page.evaluate("window.errors")
    assert error.startswith(says) and failed["error"] and failed["error"] in error
    assert refused == ([422] if mode == "ok" else [])
    page.wait_for_timeout(3000)  # no lease follows the failure
    assert len(b.leases) == 1 and status(page)["reason"] == "error"
    assert page.evaluate("window.errors") == [error]


# -- the demo page ----------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_page_asks_for_compute_consent_apart_and_shows_the_settings(
    tmp_path: Path, browser: Any
) -> None:
    ws, _ = prepare_demo(tmp_path / "demo")
    assert ws.settings.contributions  # the demo turns contributions on for its workspace
    toml = (tmp_path / "demo" / "amelio.toml").read_text(encoding="utf-8")
    prepare_demo(tmp_path / "demo")[0].dispose()  # a re-run leaves the file as it was
    assert (tmp_path / "demo" / "amelio.toml").read_text(encoding="utf-8") == toml
    try:
        with ThreadedServer(create_demo_app(ws), lifespan="on") as server:
            ctx = browser.new_context(locale="en-US")
            ctx.set_default_timeout(15_000)
            leases: list[str] = []
            ctx.on("request", lambda r: leases.append(r.url) if TASKS_PATH in r.url else None)
            page = ctx.new_page()
            page.goto(f"{server.url}/demo/search")
            # Compute's modules load after the page's own script: its panel says when.
            page.wait_for_selector("#compute-panel .amelio-settings", state="attached")
            assert page.is_visible("#consent")
            box = page.locator("#consent-compute")
            assert not box.is_checked()  # compute is a choice of its own, off by default
            # Feedback accepted, compute not ticked: compute stays off.
            page.click("#consent-accept")
            assert page.evaluate("amelio.consent") == "granted"
            assert (
                page.evaluate("amelio.compute.consentFor('embed_documents', 'search_index')")
                == "denied"
            )
            assert page.text_content("#compute-state") == "off"
            page.evaluate(VISIBILITY, "hidden")  # idle, but not consented: nothing
            assert status(page)["reason"] == "consent"
            page.evaluate(VISIBILITY, "visible")
            # Ticked in the banner: granted, and the panel shows it.
            page.click("#consent-change")
            box.check()
            page.click("#consent-accept")
            assert page.text_content("#compute-state") == "on"
            page.click("#compute-settings summary")
            panel_box = page.get_by_label("Compute search-index embeddings of documents")
            assert panel_box.is_visible() and panel_box.is_checked()
            assert page.locator("#intensity").input_value() == "50"
            assert wait_for(lambda: status(page)["reason"] == "active", page=page)
            assert leases == []  # the person is here: it waits for 30 s of quiet
            # With contributions on, the demo left its articles' vectors to browsers.
            page.evaluate(VISIBILITY, "hidden")  # gone to another tab: it works
            # The worker runs from the page's own origin here (the other tests: a
            # cross-origin page). Alone, its results wait for a second browser (new, its
            # results had a sample of their texts checked by the server: right).
            done = wait_for(lambda: (s := status(page))["tasks"]["computed"] >= 2 and s, page=page)
            assert done and done["tasks"]["pending"] == done["tasks"]["computed"], done
            assert done["clientId"] and done["error"] is None
            # Unticked in the panel: off again, everywhere on the page.
            panel_box.uncheck()
            assert page.text_content("#compute-state") == "off"
            ctx.close()
    finally:
        ws.dispose()
