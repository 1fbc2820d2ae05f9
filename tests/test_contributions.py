"""Idle compute lent by browsers (MartyContributionV1): leases, verification, trust,
budgets, stats and the dashboard page, over HTTP against a real workspace, real
documents and the real wordllama embedder, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic import ValidationError

from amelio.contributions import (
    TRUST_FLOOR,
    ClientTokens,
    Contributions,
    InvalidClientToken,
    contribution_adapter,
    decode_vectors,
    encode_vectors,
    input_digest,
    policy,
)
from amelio.db.schema import contribution_task_docs, contribution_tasks
from amelio.embeddings import Embedder, load_embedder
from amelio.privacy.signing import signer
from amelio.search.documents import Document
from amelio.search.engines.registry import workspace_corpus
from amelio.search.store import DocumentStore
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace
from support.contributions import contribution_body
from test_web_dashboard_forms import login

pytest.importorskip("wordllama")

TASKS = "/v1/contributions/tasks"
SEND = "/v1/contributions"
STATS = "/v1/contributions/stats"
MODEL = "wordllama"
TOPICS = (
    "reset a password",
    "download an invoice",
    "ask for a refund",
    "change the email",
    "close the account",
    "update a card",
    "export the data",
    "invite a colleague",
    "enable two-factor login",
    "rename a project",
    "delete a file",
    "restore a backup",
)


def corpus(n: int) -> list[Document]:
    return [
        Document(
            f"doc-{i}",
            f"How to {TOPICS[i % len(TOPICS)]}",
            f"Step {i}: open Settings, then follow the guide to {TOPICS[i % len(TOPICS)]}.",
            {},
        )
        for i in range(n)
    ]


class Counting:
    """The real embedder, counting the texts the server embeds (spot-checks)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += len(texts)
        return self.inner.embed(texts)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def wordllama() -> Embedder:
    return load_embedder(MODEL)


@dataclass
class Site:
    ws: Workspace
    app: Any
    http: TestClient
    service: Contributions
    store: DocumentStore
    clock: Clock
    embedder: Counting
    client_key: str
    admin_key: str
    browsers: list[Browser] = field(default_factory=list)

    def browser(self, tier: str = "MID", address: str | None = None) -> Browser:
        """A browser of its own network (``address``: a chosen one)."""
        found = Browser(self, tier, address or f"198.51.{len(self.browsers) + 1}.7")
        self.browsers.append(found)
        return found

    def stats(self) -> dict[str, Any]:
        r = self.http.get(STATS, headers={"Authorization": f"Bearer {self.admin_key}"})
        assert r.status_code == 200, r.text
        return r.json()

    def vectors(self) -> dict[str, np.ndarray]:
        """The store's vectors of the model, read from its file."""
        conn = sqlite3.connect(self.store.path)
        try:
            rows = conn.execute(
                "SELECT d.doc_id, v.vec FROM vectors v JOIN docs d "
                "ON d.rowid = v.rowid WHERE v.model = ?",
                (MODEL,),
            ).fetchall()
        finally:
            conn.close()
        return {doc_id: np.frombuffer(vec, dtype=np.float32) for doc_id, vec in rows}


class Browser:
    """One amelio.js client: leases with its token and sends results, from ``address``
    (the remote address the server sees)."""

    def __init__(self, site: Site, tier: str, address: str = "198.51.100.7") -> None:
        self.site = site
        self.tier = tier
        self.token: str | None = None
        self.headers = {"Authorization": f"Bearer {site.client_key}"}
        self.http = TestClient(site.app, client=(address, 50000))

    def lease(self, n: int = 1, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"tier": self.tier, "purposes": "search_index", "max": n}
        if self.token:
            params["clientToken"] = self.token
        r = self.http.get(TASKS, params=params | extra, headers=self.headers)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        self.token = body["clientToken"] or self.token
        return body

    def tasks(self, n: int = 1) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.lease(n)["tasks"]
        return found

    def body(
        self,
        task: dict[str, Any],
        vectors: list[list[float]] | None = None,
        compute_ms: float = 4.0,
    ) -> dict[str, Any]:
        if vectors is None:
            vectors = self.site.embedder.inner.embed(task["input"]["texts"])
        return contribution_body(
            task,
            vectors,
            client_token=self.token,
            tier=self.tier,
            compute_ms=compute_ms,
            timings={"leasedMs": 1, "startedMs": 2, "finishedMs": 3},
        )

    def send(
        self,
        task: dict[str, Any],
        vectors: list[list[float]] | None = None,
        compute_ms: float = 4.0,
        body: dict[str, Any] | None = None,
    ) -> httpx.Response:
        return self.http.post(
            SEND, json=body or self.body(task, vectors, compute_ms), headers=self.headers
        )

    def verdict(
        self,
        task: dict[str, Any],
        vectors: list[list[float]] | None = None,
        compute_ms: float = 4.0,
    ) -> dict[str, Any]:
        r = self.send(task, vectors, compute_ms)
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found


def tampered(vectors: list[list[float]]) -> list[list[float]]:
    """Honest vectors with the first one nudged off (still a unit vector)."""
    out = np.asarray(vectors, dtype=np.float64)
    out[0] += np.random.default_rng(7).normal(0, 0.05, out.shape[1])
    out[0] /= np.linalg.norm(out[0])
    return out.tolist()


#: The defences against one party posing as several independent clients, as a server
#: has them by default (the sites below turn them off unless a test asks for them).
DEFENCES = {
    name: Settings.model_fields[name].default
    for name in ("contributions_probation", "contributions_related_seconds")
}


@contextmanager
def open_site(ws: Workspace, wordllama: Embedder, docs: int = 6, **settings: Any) -> Iterator[Site]:
    """Contributions on, ``docs`` documents without vectors, tasks of three, no random
    spot-check. Its browsers are established and independent clients unless a test
    asks for :data:`DEFENCES`: past probation (the server checks none of their
    results), and each on its own network, minted at any time."""
    options = {
        "contributions": True,
        "contributions_batch": 3,
        "contributions_spot_check": 0.0,
        "contributions_probation": 0,
        "contributions_related_seconds": 0,
    } | settings
    ws = Workspace(ws.settings.model_copy(update=options), ws.engine)
    store = workspace_corpus(ws.settings)
    store.apply(corpus(docs))  # no embedder: the documents wait for their vectors
    clock, embedder = Clock(), Counting(wordllama)
    service = Contributions(ws, store=store, embedder=embedder, clock=clock)
    _, client_key = keys.create_key(ws.engine, name="page", role="client")
    _, admin_key = keys.create_key(ws.engine, name="ops", role="admin")
    app = create_app(ws)
    app.state.contributions = service
    with TestClient(app) as http:
        yield Site(ws, app, http, service, store, clock, embedder, client_key, admin_key)


@pytest.fixture
def site(workspace: Workspace, wordllama: Embedder) -> Iterator[Site]:
    """Contributions on, six documents without vectors, tasks of three; both databases."""
    with open_site(workspace, wordllama) as found:
        yield found


@pytest.fixture
def lite(sqlite_workspace: Workspace, wordllama: Embedder) -> Iterator[Site]:
    """The same on SQLite only, for what does not depend on the database."""
    with open_site(sqlite_workspace, wordllama) as found:
        yield found


def cosine(a: np.ndarray, b: Sequence[float]) -> float:
    v = np.asarray(b, dtype=np.float32)
    return float(a @ v / (np.linalg.norm(a) * np.linalg.norm(v)))


# -- the happy path -------------------------------------------------------------------


def test_two_clients_agree_and_the_store_gets_their_vectors(
    site: Site, wordllama: Embedder
) -> None:
    alice, bob = site.browser("MID"), site.browser("HIGH")
    [task] = alice.tasks()
    assert (task["taskType"], task["purpose"], task["model"], task["dimensions"]) == (
        "embed_documents",
        "search_index",
        MODEL,
        256,
    )
    texts = task["input"]["texts"]
    assert texts == [f"{d.title}\n{d.body}" for d in corpus(3)]  # what the server embeds
    assert task["inputDigest"] == input_digest(texts)
    [same] = bob.tasks()
    assert same["taskId"] == task["taskId"] and same["leaseId"] != task["leaseId"]

    first = alice.verdict(task)
    assert first == {"status": "pending", "reason": first["reason"], "trust": 0.5}
    assert site.vectors() == {}
    second = bob.verdict(same)
    assert second["status"] == "accepted" and second["trust"] > 0.5

    stored = site.vectors()
    assert sorted(stored) == ["doc-0", "doc-1", "doc-2"]
    own = wordllama.embed(texts)  # what the server would have computed
    for i, doc_id in enumerate(["doc-0", "doc-1", "doc-2"]):
        assert cosine(stored[doc_id], own[i]) >= 0.9999
    assert site.embedder.texts == 0  # the server embedded nothing itself
    assert [d for d, _ in site.store.missing_vectors(MODEL)] == ["doc-3", "doc-4", "doc-5"]

    again = alice.send(task)  # the same (task, client) again: counted once
    assert again.status_code == 200
    assert again.json()["status"] == "duplicate" and "accepted" in again.json()["reason"]
    assert alice.lease()["trust"] > 0.5  # alice's pending result was accepted by bob's

    stats = site.stats()
    assert stats["clients"] == {"total": 2, "byTier": {"MID": 1, "HIGH": 1}, "lowTrust": 0}
    assert stats["tasks"]["accepted"] == 1 and stats["results"]["accepted"] == 2
    assert stats["documentsEmbedded"] == 3 and stats["disagreements"] == 0
    assert stats["cpuSecondsGiven"] == pytest.approx(0.008)


def test_a_random_spot_check_confirms_an_agreement(
    sqlite_workspace: Workspace, wordllama: Embedder
) -> None:
    with open_site(sqlite_workspace, wordllama, contributions_spot_check=1.0) as site:
        alice, bob = site.browser(), site.browser()
        [task], [same] = alice.tasks(), bob.tasks()
        assert alice.verdict(task)["status"] == "pending"
        assert bob.verdict(same)["status"] == "accepted"
        assert site.embedder.texts == 3  # one spot-check of the three texts
        assert site.stats()["spotChecks"] == 1 and len(site.vectors()) == 3


# -- wrong results ---------------------------------------------------------------------


def test_a_tampered_result_is_caught_and_its_client_loses_trust(site: Site) -> None:
    honest, cheat = site.browser(), site.browser()
    [task], [same] = honest.tasks(), cheat.tasks()
    assert honest.verdict(task)["status"] == "pending"
    caught = cheat.verdict(same, tampered(cheat.site.embedder.inner.embed(same["input"]["texts"])))
    assert caught["status"] == "rejected" and "spot-check" in caught["reason"]
    assert caught["trust"] < TRUST_FLOOR  # one proven lie is enough to stop it
    assert site.embedder.texts == 3  # the disagreement was checked by the server

    assert honest.lease()["trust"] > 0.5  # the honest one was accepted
    assert len(site.vectors()) == 3
    refused = cheat.lease()
    assert refused["tasks"] == [] and "trust" in refused["reason"]
    assert refused["retryAfterMs"] > 0
    stats = site.stats()
    assert stats["disagreements"] == 1 and stats["spotChecks"] == 1
    assert stats["results"] == {"accepted": 1, "rejected": 1, "pending": 0, "cancelled": 0}
    assert stats["clients"]["lowTrust"] == 1


def test_results_that_do_not_fit_the_task_are_refused(lite: Site) -> None:
    alice = lite.browser()
    [task] = alice.tasks()
    good = alice.body(task)

    def refused(change: dict[str, Any], field: str) -> None:
        body = good | change
        r = alice.send(task, body=body)
        assert r.status_code == 422, (field, r.text)
        assert r.json()["error"]["details"]["field"] == field, r.text

    honest = decode_vectors(good["result"]["vectors"], 256)
    assert honest.shape == (3, 256) and honest.dtype == np.float32

    def result(vectors: Any, **change: Any) -> dict[str, Any]:
        return {"result": good["result"] | {"vectors": encode_vectors(vectors)} | change}

    refused({"inputDigest": "sha256:" + "0" * 64}, "inputDigest")
    refused(result(honest[:, :255], dimensions=255), "result.dimensions")
    refused(result(honest[:2]), "result.vectors")  # two vectors for three texts
    refused({"result": good["result"] | {"model": "other-model"}}, "result.model")
    refused(result(2 * honest), "result.vectors.0")  # not unit vectors
    # the schema's own checks: unknown fields, numbers as strings, a matrix that does
    # not split into vectors of `dimensions`, numbers that are not finite, not base64
    refused({"extra": 1}, "extra")
    refused({"timings": {"computeMs": "4"}}, "timings.computeMs")
    ragged = good["result"] | {"vectors": encode_vectors(honest.ravel()[:-1])}
    refused({"result": ragged}, "result")
    nan = honest.copy()
    nan[1, 7] = np.nan
    refused(result(nan), "result")
    refused(
        {"result": good["result"] | {"vectors": good["result"]["vectors"][:-1]}}, "result.vectors"
    )  # padding cut: not base64
    refused({"result": good["result"] | {"vectors": [[1.0] * 256] * 3}}, "result.vectors")
    assert alice.verdict(task)["status"] == "pending"  # none of them counted


def test_the_schema_is_public_and_strict(lite: Site) -> None:
    r = lite.http.get("/v1/contributions/schema")
    assert r.status_code == 200
    schema = r.json()
    assert schema["title"] == "MartyContributionV1"
    assert schema["$id"].endswith("MartyContributionV1.json")
    assert schema["additionalProperties"] is False
    assert {
        "taskId",
        "leaseId",
        "clientToken",
        "inputDigest",
        "result",
        "deviceTier",
        "timings",
        "consent",
    } <= set(schema["required"])

    good = {
        "contributionVersion": "v1",
        "taskId": "01J0000000000000000000000A",
        "leaseId": "01J0000000000000000000000B",
        "clientToken": "c1.x.y",
        "taskType": "embed_documents",
        "inputDigest": "sha256:" + "a" * 64,
        "result": {
            "model": MODEL,
            "dimensions": 2,
            "vectors": encode_vectors([[0.6, 0.8], [1, 0]]),
        },
        "deviceTier": "LOW+",
        "timings": {"computeMs": 1.5},
        "consent": {"compute": "granted", "purpose": "search_index"},
    }
    vectors = schema["$defs"]["Result"]["properties"]["vectors"]
    assert vectors["type"] == "string" and vectors["contentEncoding"] == "base64"
    adapter = contribution_adapter()
    sent = adapter.validate_python(good)["result"]["vectors"]
    assert sent == "mpkZP83MTD8AAIA/AAAAAA=="  # 0.6, 0.8, 1, 0 as little-endian float32
    assert decode_vectors(sent, 2).tolist() == [[np.float32(0.6), np.float32(0.8)], [1, 0]]
    for bad in (
        good | {"surprise": True},
        good | {"result": good["result"] | {"norm": 1}},
        good | {"result": good["result"] | {"vectors": encode_vectors([0.6, 0.8, 1])}},
        good | {"result": good["result"] | {"vectors": [[0.6, 0.8], [1, 0]]}},
        good | {"result": good["result"] | {"vectors": "mpkZP83MTD8AAIA/AAAAAA"}},
        good | {"result": good["result"] | {"vectors": "mpkZP83MTD8AAIA_AAAAAA=="}},
        good | {"result": good["result"] | {"vectors": ""}},
        good | {"result": good["result"] | {"dimensions": 3}},
        good | {"deviceTier": "ULTRA"},
        good | {"consent": {"compute": "denied", "purpose": "search_index"}},
    ):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)
    with pytest.raises(ValidationError, match="finite"):
        adapter.validate_python(
            good | {"result": good["result"] | {"vectors": encode_vectors([[float("nan"), 1]])}}
        )
    with pytest.raises(ValidationError, match="at most 256"):
        adapter.validate_python(
            good | {"result": good["result"] | {"vectors": encode_vectors(np.ones((257, 2)))}}
        )


# -- leases ------------------------------------------------------------------------------


def test_an_expired_lease_is_refused_and_the_task_leased_again(site: Site) -> None:
    alice, bob, carol = site.browser(), site.browser(), site.browser()
    [task] = alice.tasks()
    [same] = bob.tasks()
    assert carol.tasks()[0]["taskId"] != task["taskId"]  # two clients hold it already
    site.clock.now += 121  # contributions_lease_seconds is 120
    r = alice.send(task)
    assert r.status_code == 409 and "expired" in r.json()["error"]["message"]
    [again] = site.browser().tasks()  # bob's lease expired too: a newcomer gets it
    assert again["taskId"] == task["taskId"]
    for t in alice.tasks(4):
        assert t["taskId"] != task["taskId"]  # never the same task twice
    assert bob.send(same).status_code == 409


def test_a_lease_is_this_clients_only(lite: Site) -> None:
    alice, mallory = lite.browser(), lite.browser()
    [task] = alice.tasks()
    mallory.lease()  # a genuine client of its own
    stolen = mallory.send(task)  # alice's lease with mallory's token
    assert stolen.status_code == 409
    unknown = alice.send(task, body=alice.body(task) | {"leaseId": "01J0000000000000000000000Z"})
    assert unknown.status_code == 409


def test_a_forged_client_token_is_refused(lite: Site) -> None:
    alice = lite.browser()
    [task] = alice.tasks()
    assert alice.token is not None
    client_id = lite.service.tokens.read(alice.token)
    purpose, payload, mac = alice.token.split(".")
    other = base64.urlsafe_b64encode(b"01J0000000000000000000000Q").rstrip(b"=").decode()
    altered = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    forged = (
        f"{purpose}.{other}.{mac}",  # someone else's id under alice's signature
        f"{purpose}.{payload}.{altered}",
    )  # an altered signature
    for token in (*forged, "c1.not-a-ulid.x", "nonsense"):
        r = lite.http.get(
            TASKS,
            params={"tier": "MID", "purposes": "search_index", "clientToken": token},
            headers=alice.headers,
        )
        assert r.status_code == 422, token
        error = r.json()["error"]
        # invalid_client_token either way: the code that makes a browser drop its token
        assert error["code"] == "invalid_client_token", token
        if token in forged:  # the signature gives it away
            assert "forged" in error["message"]
        else:  # it does not even look like one (or is of an older Amelio's format)
            assert "clientToken" in error["message"]
        sent = alice.send(task, body=alice.body(task) | {"clientToken": token})
        assert sent.status_code == 422, token
        assert sent.json()["error"]["code"] == "invalid_client_token"
        assert sent.json()["error"]["details"]["field"] == "clientToken"
    # a token another workspace signed does not verify here either
    elsewhere = ClientTokens(b"another workspace's secret").issue(client_id)
    with pytest.raises(InvalidClientToken, match="signature"):
        lite.service.tokens.read(elsewhere)
    # nor does this workspace's own token for another purpose, the same id inside
    other_use = signer(lite.ws.settings).sign(client_id, "feedback-token")
    with pytest.raises(InvalidClientToken, match="signed for 'feedback-token' purpose"):
        lite.service.tokens.read(other_use)


def test_keys_and_roles(lite: Site) -> None:
    params = {"tier": "MID", "purposes": "search_index"}
    assert lite.http.get(TASKS, params=params).status_code == 401
    as_query = lite.http.get(TASKS, params=params | {"key": lite.client_key})
    assert as_query.status_code == 200 and as_query.json()["tasks"]  # like sendBeacon
    _, bot = keys.create_key(lite.ws.engine, name="bot", role="bot")
    assert (
        lite.http.get(TASKS, params=params, headers={"Authorization": f"Bearer {bot}"}).status_code
        == 200
    )
    client = {"Authorization": f"Bearer {lite.client_key}"}
    assert lite.http.get(STATS, headers=client).status_code == 403  # stats are the admin's
    assert lite.http.get(TASKS, params={"tier": "MID"}, headers=client).status_code == 422
    assert (
        lite.http.get(TASKS, params=params | {"tier": "ULTRA"}, headers=client).status_code == 422
    )
    assert lite.http.get(TASKS, params=params | {"max": 9}, headers=client).status_code == 422


# -- no tasks, with a reason -----------------------------------------------------------


def test_degraded_devices_and_spent_budgets_get_no_tasks(
    sqlite_workspace: Workspace, wordllama: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each task of three texts costs a browser 7.5 s by the server's estimate.
    monkeypatch.setitem(policy.COSTS, MODEL, policy.TaskCost(per_text_ms=2500, per_char_ms=0))
    with open_site(sqlite_workspace, wordllama, docs=9) as lite:
        degraded = lite.browser("DEGRADED").lease()
        assert degraded["tasks"] == [] and "DEGRADED" in degraded["reason"]
        assert degraded["budget"]["cpuSecondsPerHour"] == 0

        low = lite.browser("LOW")  # 15 CPU-seconds an hour
        for _ in range(2):
            [task] = low.tasks()
            assert low.verdict(task)["status"] == "pending"
        spent = low.lease()
        assert spent["tasks"] == [] and "budget" in spent["reason"]
        assert spent["budget"] == {"cpuSecondsPerHour": 15, "usedLastHour": 15.0}
        assert 3_000_000 < spent["retryAfterMs"] <= 3_600_000
        lite.clock.now += 3601  # an hour later the budget is back
        assert low.tasks()

        reported = lite.browser("MID").lease(cpuSecondsLastHour=50)  # over MID's 45
        assert reported["tasks"] == [] and "budget" in reported["reason"]
        unconsented = lite.browser("MID").lease(purposes="analytics")
        assert unconsented["tasks"] == [] and "consented" in unconsented["reason"]


def test_contributions_off_gives_nothing(sqlite_workspace: Workspace, wordllama: Embedder) -> None:
    with open_site(sqlite_workspace, wordllama, contributions=False) as site:
        body = site.browser().lease()
        assert body["tasks"] == [] and body["clientId"] is None
        assert "contributions = true" in body["reason"] and body["retryAfterMs"] > 0
        assert site.stats()["clients"]["total"] == 0  # no identity handed out while off
        late = Browser(site, "MID")  # a result for a lease given before it was turned off
        late.token = site.service.tokens.issue("01J0000000000000000000000C")
        task = {
            "taskId": "01J0000000000000000000000D",
            "leaseId": "01J0000000000000000000000E",
            "taskType": "embed_documents",
            "inputDigest": input_digest(["x"]),
            "model": MODEL,
            "dimensions": 256,
            "input": {"texts": ["x"]},
        }
        r = late.send(task)
        assert r.status_code == 409 and "off" in r.json()["error"]["message"]
    with open_site(sqlite_workspace, wordllama, search_embedding_model="") as site:
        body = site.browser().lease()
        assert body["tasks"] == [] and "search_embedding_model" in body["reason"]


def test_nothing_to_do_once_every_document_has_a_vector(lite: Site) -> None:
    lite.store.apply([], embedder=lite.embedder.inner)  # the server embeds the rest itself
    body = lite.browser().lease()
    assert body["tasks"] == [] and "Nothing to embed" in body["reason"]


# -- documents that change -----------------------------------------------------------------


def test_a_document_changed_since_its_task_cancels_it(site: Site) -> None:
    alice, bob = site.browser(), site.browser()
    [task], [same] = alice.tasks(), bob.tasks()
    changed = Document("doc-1", "How to reset a password", "Use the new portal instead.", {})
    site.store.apply([changed])
    assert alice.verdict(task)["status"] == "pending"
    cancelled = bob.verdict(same)
    assert cancelled["status"] == "rejected" and "cancelled" in cancelled["reason"]
    assert cancelled["trust"] == 0.5  # not the client's fault
    assert site.vectors() == {}  # nothing written
    assert site.stats()["tasks"]["cancelled"] == 1
    fresh = site.browser().tasks(2)  # the documents are tasked again, with the new text
    assert task["taskId"] not in {t["taskId"] for t in fresh}
    texts = [text for t in fresh for text in t["input"]["texts"]]
    assert f"{changed.title}\n{changed.body}" in texts and len(texts) == 6


def test_a_task_gone_stale_before_it_is_leased_is_cancelled(lite: Site) -> None:
    alice = lite.browser()
    [task] = alice.tasks()
    lite.store.apply([Document("doc-0", "Retitled", "New body.", {})])
    others = lite.browser().tasks(2)
    assert others and task["taskId"] not in {t["taskId"] for t in others}
    assert "Retitled\nNew body." in [text for t in others for text in t["input"]["texts"]]
    with lite.ws.engine.connect() as conn:
        state = conn.scalar(
            sa.select(contribution_tasks.c.state).where(contribution_tasks.c.id == task["taskId"])
        )
    assert state == "cancelled"


# -- concurrency -------------------------------------------------------------------------


def slowed(find: Callable[..., list[tuple[str, str]]]) -> Callable[..., list[tuple[str, str]]]:
    def slow(model: str, **options: Any) -> list[tuple[str, str]]:
        found = find(model, **options)
        if options.get("limit") is not None:  # looking for documents to task
            time.sleep(0.03)
        return found

    return slow


def test_concurrent_leases_never_task_a_document_twice(
    workspace: Workspace, wordllama: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two services (as two processes would, each with its own store object) and many
    threads lease at once: no document is in two tasks, and no client holds a task twice.
    Finding the documents to task is slowed down, so that on PostgreSQL the threads all
    pick the same documents before any of them commits, and the claims must decide."""
    ws = Workspace(
        workspace.settings.model_copy(update={"contributions": True, "contributions_batch": 2}),
        workspace.engine,
    )
    workspace_corpus(ws.settings).apply(corpus(40))
    services = []
    for _ in range(2):
        store = workspace_corpus(ws.settings)
        monkeypatch.setattr(store, "missing_vectors", slowed(store.missing_vectors))
        services.append(Contributions(ws, store=store, embedder=wordllama))
    barrier = threading.Barrier(8)
    leases: list[tuple[str, list[str]]] = []
    errors: list[BaseException] = []

    def lease(service: Contributions, token: str | None, address: str) -> None:
        try:
            barrier.wait()
            got = service.lease(
                tier="HIGH",
                purposes=["search_index"],
                max_tasks=3,
                client_token=token,
                address=address,
            )
            leases.append((got["clientId"], [t["taskId"] for t in got["tasks"]]))
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append(exc)

    def run(tokens: Sequence[str | None]) -> None:
        threads = [
            threading.Thread(target=lease, args=(services[i % 2], token, f"10.0.{i}.1"))
            for i, token in enumerate(tokens)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors

    run([None] * 8)  # eight new clients at once
    regular = services[0].lease(tier="HIGH", purposes=["search_index"], max_tasks=1)
    run([regular["clientToken"]] * 8)  # one client asking from eight tabs at once

    with workspace.engine.connect() as conn:
        tasks = conn.execute(sa.select(contribution_tasks)).all()
        claims = conn.execute(sa.select(contribution_task_docs)).all()
    docs = [d for t in tasks for d in t.doc_ids]
    assert len(docs) == len(set(docs)) and set(docs) <= {f"doc-{i}" for i in range(40)}
    assert {c.doc_id for c in claims} == set(docs)
    by_client: dict[str, list[str]] = {}
    for client_id, task_ids in leases:
        by_client.setdefault(client_id, []).extend(task_ids)
    by_client[regular["clientId"]] += [t["taskId"] for t in regular["tasks"]]
    for client_id, task_ids in by_client.items():
        assert len(task_ids) == len(set(task_ids)), client_id
    assert len(by_client[regular["clientId"]]) >= 2  # the tabs shared the work


# -- the dashboard ---------------------------------------------------------------------------


def test_the_dashboard_page_shows_what_browsers_gave(lite: Site) -> None:
    alice, bob, cheat = lite.browser("MID"), lite.browser("HIGH"), lite.browser("LOW")
    [task], [same] = alice.tasks(), bob.tasks()
    alice.verdict(task, compute_ms=1500)
    bob.verdict(same, compute_ms=500)
    [other] = cheat.tasks()
    honest = lite.browser("MID")
    [second] = honest.tasks()
    assert second["taskId"] == other["taskId"]
    honest.verdict(second)
    cheat.verdict(other, tampered(lite.embedder.inner.embed(other["input"]["texts"])))

    _, bot = keys.create_key(lite.ws.engine, name="bot", role="bot")
    login(lite.http, bot)
    assert ">Contributions</a>" not in lite.http.get("/skills").text  # admins only
    assert lite.http.get("/contributions", follow_redirects=False).status_code == 403
    login(lite.http, lite.admin_key)
    page = lite.http.get("/contributions")
    assert page.status_code == 200
    html = page.text
    assert 'aria-current="page">Contributions</a>' in html
    assert 'class="results-accepted">3<' in html and 'class="results-rejected">1<' in html
    assert 'class="disagreements">1<' in html and 'class="cpu-seconds">2.0<' in html
    assert 'data-tier="LOW"' in html and 'data-tier="HIGH"' in html
    french = lite.http.get("/contributions", headers={"Accept-Language": "fr"}).text
    assert "Désaccords" in french and "Secondes de CPU données" in french


def test_new_identities_are_rate_limited(sqlite_workspace: Workspace, wordllama: Embedder) -> None:
    """A page's client key is public: without a limit, anyone could mint identities
    (rows, and fresh trust) by the thousand. Known clients are not charged."""
    with open_site(sqlite_workspace, wordllama, contributions_new_clients_per_minute=2) as site:
        first, second = site.browser(address="203.0.113.9"), site.browser(address="203.0.113.9")
        first.lease()
        second.lease()
        params = {"tier": "MID", "purposes": "search_index"}
        refused = first.http.get(TASKS, params=params, headers=first.headers)
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["details"]["scope"] == "client key"
        assert first.lease()["clientToken"]  # a known client leases as before
        _, other = keys.create_key(site.ws.engine, name="other page", role="client")
        same_address = first.http.get(
            TASKS, params=params, headers={"Authorization": f"Bearer {other}"}
        )
        assert same_address.status_code == 429
        assert same_address.json()["error"]["details"]["scope"] == "address"
        assert site.stats()["clients"]["total"] == 2


# -- healing, and what the review asked for ---------------------------------------------


def broken_spot_checks(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's embedder fails (the spot-check of a disagreement, or a random one)."""

    def down(texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("the embedder is down")

    monkeypatch.setattr(site.embedder, "embed", down)


def failed_second_result(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> tuple[Browser, Browser, dict[str, Any], dict[str, Any]]:
    """Two clients send a task's results; the second submit fails between recording its
    result and settling both (its spot-check's embedder raises)."""
    alice, bob = site.browser(), site.browser()
    [task], [same] = alice.tasks(), bob.tasks()
    assert alice.verdict(task)["status"] == "pending"
    with monkeypatch.context() as patch:
        broken_spot_checks(site, patch)
        try:
            failed = bob.send(same)
        except RuntimeError:  # the test client re-raises what the server did not handle
            pass
        else:
            assert failed.status_code == 500, failed.text
    assert site.stats()["results"]["pending"] == 2 and site.vectors() == {}
    return alice, bob, task, same


def test_a_result_sent_again_settles_a_submit_that_failed(
    workspace: Workspace, wordllama: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, both results stayed pending forever: the task was never leased again, a
    retry answered duplicate, and its documents stayed claimed."""
    with open_site(workspace, wordllama, contributions_spot_check=1.0) as site:
        alice, bob, task, same = failed_second_result(site, monkeypatch)
        newcomer = site.browser().tasks(2)
        assert task["taskId"] not in {t["taskId"] for t in newcomer}  # two results hold it
        again = bob.verdict(same)  # the client retries after the error: settled now
        assert again["status"] == "accepted" and again["trust"] > 0.5
        assert sorted(site.vectors()) == ["doc-0", "doc-1", "doc-2"]
        assert alice.lease()["trust"] > 0.5  # alice's result was settled with it
        stats = site.stats()
        assert stats["tasks"]["accepted"] == 1 and stats["results"]["pending"] == 0
        assert stats["spotChecks"] == 1
        repeat = bob.send(same).json()  # settled: a plain duplicate from now on
        assert repeat["status"] == "duplicate" and "accepted" in repeat["reason"]


def test_a_lease_settles_a_task_left_unsettled(
    workspace: Workspace, wordllama: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No retry comes (the process died, or the client left): a later lease settles the
    task once its results have waited longer than any submit takes."""
    with open_site(workspace, wordllama, contributions_spot_check=1.0) as site:
        _, bob, task, same = failed_second_result(site, monkeypatch)
        early = site.browser().tasks(2)  # too soon: the submit might still be running
        assert task["taskId"] not in {t["taskId"] for t in early} and site.vectors() == {}
        site.clock.now += 61
        site.browser().lease()
        assert sorted(site.vectors()) == ["doc-0", "doc-1", "doc-2"]
        stats = site.stats()
        assert stats["tasks"]["accepted"] == 1 and stats["results"]["accepted"] == 2
        assert bob.send(same).json()["status"] == "duplicate"


def test_a_lease_that_cannot_settle_still_answers(
    lite: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stuck task whose settling fails again (the embedder still down) does not fail the
    lease that tried: the next poll tries again."""
    lite.service.settings = lite.service.settings.model_copy(
        update={"contributions_spot_check": 1.0}
    )
    failed_second_result(lite, monkeypatch)
    broken_spot_checks(lite, monkeypatch)
    lite.clock.now += 61
    assert lite.browser().lease()["tasks"]  # the other documents' task
    assert lite.stats()["results"]["pending"] == 2


def test_a_document_changed_as_the_vectors_go_in_keeps_no_stale_vector(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store compares the texts in its own write transaction: a document updated
    after the task's texts were checked is skipped, and tasked again with its new text."""
    changed = Document("doc-1", "How to reset a password", "Use the new portal instead.", {})
    put = site.store.put_vectors

    def racing(model: str, vectors: Any, **options: Any) -> list[str]:
        site.store.apply([changed])  # lands between the check and the write
        return put(model, vectors, **options)

    monkeypatch.setattr(site.store, "put_vectors", racing)
    alice, bob = site.browser(), site.browser()
    [task], [same] = alice.tasks(), bob.tasks()
    assert alice.verdict(task)["status"] == "pending"
    assert bob.verdict(same)["status"] == "accepted"
    monkeypatch.undo()
    assert sorted(site.vectors()) == ["doc-0", "doc-2"]
    assert site.embedder.texts == 0  # nothing embedded by the server, either
    texts = [text for t in site.browser().tasks(2) for text in t["input"]["texts"]]
    assert f"{changed.title}\n{changed.body}" in texts


def test_a_result_is_decoded_once(lite: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    from amelio.contributions import schema, service

    calls: list[int] = []

    def counting(text: str, dimensions: int) -> np.ndarray:
        calls.append(dimensions)
        return decode_vectors(text, dimensions)

    monkeypatch.setattr(schema, "decode_vectors", counting)
    monkeypatch.setattr(service, "decode_vectors", counting)
    alice = lite.browser()
    [task] = alice.tasks()
    assert alice.verdict(task)["status"] == "pending"
    assert calls == [256]


def test_polling_while_off_writes_nothing(sqlite_workspace: Workspace, wordllama: Embedder) -> None:
    with open_site(sqlite_workspace, wordllama) as site:
        alice = site.browser()
        alice.lease()
        off = Contributions(
            Workspace(site.ws.settings.model_copy(update={"contributions": False}), site.ws.engine),
            store=site.store,
            clock=site.clock,
        )
        with site.ws.engine.connect() as conn:
            seen = conn.execute(
                sa.text("SELECT tier, last_seen_ms FROM contribution_clients")
            ).all()
        site.clock.now += 30
        body = off.lease(tier="HIGH", purposes=["search_index"], client_token=alice.token)
        assert body["tasks"] == [] and "contributions = true" in body["reason"]
        assert body["clientToken"] == alice.token and body["trust"] == 0.5
        with site.ws.engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT tier, last_seen_ms FROM contribution_clients")).all()
                == seen
            )


def test_browsers_embed_exactly_when_tasks_are_handed_out(sqlite_workspace: Workspace) -> None:
    from amelio.contributions.policy import browsers_embed

    for options in (
        {"contributions": False},
        {"contributions": True},
        {"contributions": True, "search_embedding_model": ""},
        {"contributions": True, "search_embedding_model": "all-MiniLM-L6-v2"},
    ):
        ws = Workspace(
            sqlite_workspace.settings.model_copy(
                update={"search_embedding_model": MODEL} | options
            ),
            sqlite_workspace.engine,
        )
        service = Contributions(ws)
        assert browsers_embed(ws.settings) == (service.unavailable() is None), options


def test_the_dashboard_labels_all_time_leases_apart(lite: Site) -> None:
    [task], [same] = lite.browser("MID").tasks(), lite.browser("MID").tasks()
    assert same["taskId"] == task["taskId"]
    login(lite.http, lite.admin_key)
    html = lite.http.get("/contributions").text
    assert 'class="tasks-leased">1<' in html  # one open task a live lease holds now
    assert "Leases (all time)" in html and 'class="leased">2<' in html  # two leases given
    assert 'class="clients">2<' in html
    french = lite.http.get("/contributions", headers={"Accept-Language": "fr"}).text
    assert "Prêts (au total)" in french
