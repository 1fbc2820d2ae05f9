"""Vespa: the generated package, and the exact HTTP requests against a fake Vespa.

Vespa cannot run here, so :class:`FakeVespa` speaks its two APIs (document/v1 and
search/) on a real loopback port and records every request; the one integration
test runs only when ``AMELIO_VESPA_URL`` points at a deployed package.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from amelio.cli import main
from amelio.db.schema import search_impressions, search_signals
from amelio.search import Fts5Engine
from amelio.search.documents import Deletion, Document
from amelio.search.engines.vespa import VespaBackend, feed, query_body, sync_signals
from amelio.search.scoring import FEEDBACK_BOUND
from amelio.server import create_app
from amelio.testing import ThreadedServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace

pytest.importorskip("vespa", reason="pyvespa is not installed: pip install 'amelio[vespa]'")

#: Read at import: conftest strips AMELIO_* from every test's environment.
LIVE_VESPA = os.environ.get("AMELIO_VESPA_URL", "")

DOCS = [
    {"_id": "reset", "title": "Reset your password", "text": "Open settings, then reset."},
    {"_id": "sso/1", "title": "Single sign-on", "text": "Sign in with your company account."},
]


class FakeVespa:
    """A Starlette app answering like Vespa; ``requests`` is what it was sent."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.hits: list[dict[str, Any]] = []
        self.search_status = 200
        self.app = Starlette(
            routes=[
                Route(
                    "/document/v1/{ns}/{doctype}/docid/{doc_id:path}",
                    self.document,
                    methods=["POST", "PUT", "DELETE"],
                ),
                Route("/search/", self.search, methods=["POST"]),
            ]
        )

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        body = json.loads(raw) if raw else None
        self.requests.append(
            {
                "method": request.method,
                "path": request.scope["raw_path"].decode(),
                "query": request.url.query,
                "body": body,
            }
        )
        return body

    async def document(self, request: Request) -> JSONResponse:
        await self._record(request)
        doc_id = request.path_params["doc_id"]
        if doc_id == "broken":
            return JSONResponse({"message": "no such document"}, status_code=412)
        return JSONResponse({"pathId": request.url.path, "id": f"id:amelio:doc::{doc_id}"})

    async def search(self, request: Request) -> JSONResponse:
        await self._record(request)
        if self.search_status != 200:
            return JSONResponse(
                {"root": {"errors": [{"message": "boom"}]}}, status_code=self.search_status
            )
        return JSONResponse(
            {
                "root": {
                    "id": "toplevel",
                    "relevance": 1.0,
                    "fields": {"totalCount": len(self.hits)},
                    "children": self.hits,
                }
            }
        )


@pytest.fixture
def vespa() -> Iterator[tuple[FakeVespa, str]]:
    fake = FakeVespa()
    with ThreadedServer(fake.app) as server:
        yield fake, server.url


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# -- the package ---------------------------------------------------------------------------


def test_package_has_the_fields_and_rank_profiles(tmp_path: Path) -> None:
    init_workspace(tmp_path / "ws")
    out = tmp_path / "app"
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "ws"), "vespa", "package", str(out)])
    assert result.exit_code == 0, result.output
    sd = (out / "schemas" / "doc.sd").read_text()
    services = (out / "services.xml").read_text()
    for text in (
        "field id type string",
        "field title type string",
        "field text type string",
        "index: enable-bm25",
        "field embedding type tensor<float>(x[384])",
        "field feedback type tensor<float>(q{})",
        "fast-access",
        "rank-profile bm25",
        "rank-profile hybrid ",
        "rank-profile hybrid_with_feedback",
        "query(alpha) double",
        "query(beta) double",
        "query(qkey) tensor<float>(q{})",
        "rerank-count: 100",
    ):
        assert text in sd, text
    hybrid = sd.split("rank-profile hybrid ")[1].split("rank-profile")[0]
    with_feedback = sd.split("rank-profile hybrid_with_feedback")[1]
    # Feedback is applied after normalization, in the later phase, and only there.
    assert "feedback" not in hybrid
    assert "query(beta) * feedback" in with_feedback.split("global-phase")[1]
    assert "sum(attribute(feedback) * query(qkey))" in with_feedback
    assert "<document-api" in services and 'type="hugging-face-embedder"' in services


# -- feeding and signals ---------------------------------------------------------------------


def test_feed_sends_each_document_and_deletion(
    vespa: tuple[FakeVespa, str], tmp_path: Path
) -> None:
    fake, url = vespa
    lines = [*DOCS, {"_id": "gone", "deleted": True}, {"_id": "broken", "title": "x"}]
    init_workspace(tmp_path / "ws")
    result = CliRunner().invoke(
        main,
        [
            "-w",
            str(tmp_path / "ws"),
            "vespa",
            "feed",
            "--file",
            str(_jsonl(tmp_path / "d.jsonl", lines)),
            "--url",
            url,
            "--json",
        ],
    )
    assert result.exit_code == 1  # one document failed, the others were still sent
    assert json.loads(result.output)["sent"] == 3
    assert sorted(fake.requests, key=lambda r: r["path"]) == [
        {
            "method": "POST",
            "path": "/document/v1/amelio/doc/docid/broken",
            "query": "",
            "body": {"fields": {"id": "broken", "title": "x", "text": ""}},
        },
        {
            "method": "DELETE",
            "path": "/document/v1/amelio/doc/docid/gone",
            "query": "",
            "body": None,
        },
        {
            "method": "POST",
            "path": "/document/v1/amelio/doc/docid/reset",
            "query": "",
            "body": {
                "fields": {
                    "id": "reset",
                    "title": "Reset your password",
                    "text": "Open settings, then reset.",
                }
            },
        },
        {
            "method": "POST",
            "path": "/document/v1/amelio/doc/docid/sso%2F1",
            "query": "",
            "body": {
                "fields": {
                    "id": "sso/1",
                    "title": "Single sign-on",
                    "text": "Sign in with your company account.",
                }
            },
        },
    ]


def test_feed_sends_the_workspace_corpus(
    vespa: tuple[FakeVespa, str], sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    fake, url = vespa
    corpus = Fts5Engine.for_workspace(sqlite_workspace.settings.data_dir)
    corpus.import_file(_jsonl(tmp_path / "d.jsonl", DOCS))
    report = feed(url, corpus.all_documents(), concurrency=2)
    assert (report.sent, report.failed) == (2, 0)
    assert sorted(r["body"]["fields"]["id"] for r in fake.requests) == ["reset", "sso/1"]


def _signal(query: str, doc_id: str, *, impressions: int, clicks: int) -> dict[str, Any]:
    return {
        "query_norm": query,
        "doc_id": doc_id,
        "impressions": impressions,
        "impressions_by_rank": {"1": impressions},
        "clicks_by_rank": {"1": clicks},
        "clicks": clicks,
        "dwell_clicks": clicks,
        "pins": 0,
        "hides": 0,
        "votes_up": 0,
        "votes_down": 0,
        "reformulations": 0,
        "abandonments": 0,
        "updated_ms": 0,
    }


def test_sync_signals_assigns_each_documents_feedback_cells(
    vespa: tuple[FakeVespa, str], workspace: Workspace
) -> None:
    fake, url = vespa
    with workspace.engine.begin() as conn:
        conn.execute(
            search_signals.insert(),
            [
                _signal("reset password", "reset", impressions=10, clicks=9),
                _signal("password", "reset", impressions=40, clicks=0),
                _signal("password", "sso/1", impressions=10, clicks=8),
            ],
        )
    report = sync_signals(workspace, url)
    assert (report.sent, report.failed) == (2, 0)
    by_path = {r["path"]: r for r in fake.requests}
    assert set(by_path) == {
        "/document/v1/amelio/doc/docid/reset",
        "/document/v1/amelio/doc/docid/sso%2F1",
    }
    assert {r["method"] for r in fake.requests} == {"PUT"}
    assert {r["query"] for r in fake.requests} == {"create=false"}
    cells = by_path["/document/v1/amelio/doc/docid/reset"]["body"]["fields"]["feedback"]["assign"][
        "cells"
    ]
    assert [c["address"] for c in cells] == [{"q": "password"}, {"q": "reset password"}]
    shown_not_clicked, clicked = (c["value"] for c in cells)
    bound = FEEDBACK_BOUND
    assert -bound <= shown_not_clicked < 0 < clicked <= bound


# -- the search backend ------------------------------------------------------------------------


@pytest.fixture
def vespa_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vespa: tuple[FakeVespa, str]
) -> Iterator[Workspace]:
    monkeypatch.setenv("AMELIO_SEARCH_BACKEND", "vespa")
    monkeypatch.setenv("AMELIO_VESPA_URL", vespa[1])
    ws, _ = init_workspace(tmp_path / "ws")
    yield ws
    ws.dispose()


def _hit(doc_id: str, relevance: float, feedback: float) -> dict[str, Any]:
    return {
        "id": f"id:amelio:doc::{doc_id}",
        "relevance": relevance,
        "source": "content",
        "fields": {
            "id": doc_id,
            "title": f"Title of {doc_id}",
            "matchfeatures": {"lexical": 3.0, "semantic": 0.0, "feedback": feedback},
        },
    }


def test_api_searches_on_vespa_with_the_same_contract(
    vespa: tuple[FakeVespa, str], vespa_workspace: Workspace
) -> None:
    fake, _ = vespa
    fake.hits = [_hit("sso/1", 1.5, 0.5), _hit("reset", 1.2, 0.0)]
    _, key = keys.create_key(vespa_workspace.engine, name="bot", role="bot")
    with TestClient(create_app(vespa_workspace)) as client:
        r = client.post(
            "/v1/search",
            headers={"Authorization": f"Bearer {key}"},
            json={
                "query": "Reset the PASSWORD!",
                "limit": 2,
                "rankProfile": "hybrid_with_feedback",
            },
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(x["docId"], x["rank"], x["title"]) for x in body["results"]] == [
        ("sso/1", 1, "Title of sso/1"),
        ("reset", 2, "Title of reset"),
    ]
    assert body["results"][0]["score"] == 1.5
    assert body["results"][0]["feedbackScore"] == 0.5
    assert body["results"][0]["scoreVespa"] == 1.0  # relevance less beta · feedback
    assert body["feedbackToken"] and body["rankProfile"] == "hybrid_with_feedback"
    [sent] = fake.requests
    assert sent["path"] == "/search/"
    assert sent["body"] == {
        "yql": "select id, title from doc where userQuery()",
        "query": "reset the password",
        "type": "any",
        "hits": 2,
        "ranking.profile": "hybrid_with_feedback",
        "timeout": "2.0s",
        "input.query(alpha)": 0.0,
        "input.query(beta)": 1.0,
        "input.query(qkey)": '{{q:"reset the password"}:1.0}',
    }
    with vespa_workspace.engine.connect() as conn:
        impression = conn.execute(sa.select(search_impressions)).one()
    assert impression.query_id == body["queryId"]
    assert [row[0] for row in impression.results] == [x["docId"] for x in body["results"]]


def test_profiles_map_to_vespa_rank_profiles_and_inputs() -> None:
    assert query_body("q", "bm25", 0.0, 0.0, 10)["ranking.profile"] == "bm25"
    assert "input.query(alpha)" not in query_body("q", "bm25", 0.0, 0.0, 10)
    # beta 0 is the kill switch: plain hybrid, no feedback lookup at all.
    assert query_body("q", "hybrid_with_feedback", 0.3, 0.0, 10)["ranking.profile"] == "hybrid"
    semantic = query_body("q", "semantic", 1.0, 0.0, 10)
    assert semantic["ranking.profile"] == "hybrid"
    assert semantic["input.query(alpha)"] == 1.0
    assert semantic["input.query(q)"] == "embed(minilm, @query)"
    assert "nearestNeighbor(embedding, q)" in semantic["yql"]
    assert (
        query_body('say "hi"', "hybrid_with_feedback", 0.0, 1.0, 5)["input.query(qkey)"]
        == '{{q:"say \\"hi\\""}:1.0}'
    )


def test_vespa_errors_are_503_with_what_to_check(
    vespa: tuple[FakeVespa, str], vespa_workspace: Workspace
) -> None:
    fake, _ = vespa
    fake.search_status = 500
    _, key = keys.create_key(vespa_workspace.engine, name="bot", role="bot")
    with TestClient(create_app(vespa_workspace)) as client:
        r = client.post(
            "/v1/search",
            headers={"Authorization": f"Bearer {key}"},
            json={"query": "password", "rankProfile": "bm25"},
        )
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "vespa_unavailable"
    assert "HTTP 500" in r.json()["error"]["message"]


# -- a real Vespa ----------------------------------------------------------------------------


@pytest.mark.skipif(
    not LIVE_VESPA,
    reason="set AMELIO_VESPA_URL to a Vespa running the "
    "package from `amelio vespa package` (see docs/scaling.md) to run this",
)
def test_live_vespa_feeds_searches_and_takes_signals(sqlite_workspace: Workspace) -> None:
    doc_id = f"amelio-test-{uuid.uuid4().hex[:8]}"
    report = feed(LIVE_VESPA, [Document(doc_id, f"Zyxquo {doc_id}", "a rare test word")])
    assert report.failed == 0, report.errors
    settings = sqlite_workspace.settings.model_copy(
        update={"search_backend": "vespa", "vespa_url": LIVE_VESPA}
    )
    ranking = VespaBackend(settings).rank("zyxquo", "bm25", 0.0, 0.0, 10)
    try:
        assert doc_id in [d.doc_id for d in ranking]
    finally:
        feed(LIVE_VESPA, [Deletion(doc_id)])
