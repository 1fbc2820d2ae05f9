"""Search on Vespa: the application package, feeding, signal sync and the backend.

Why Vespa at scale: the embedded engines answer from one machine's disk, and
the feedback loop needs the *ranking* to move where the documents live. Vespa
keeps the corpus sharded, ranks in phases next to the data, and updates an
attribute in memory without re-indexing the document — so a signals pass can
push fresh feedback scores every few minutes at any corpus size.

The package (:func:`application_package`, generated with pyvespa, extra
``amelio[vespa]``) has one schema, ``doc``:

* ``id``, ``title``, ``text`` — the document, ``title`` and ``text`` indexed for
  BM25 (title counted double, as in the embedded engine);
* ``embedding`` — a 384-d tensor Vespa computes itself at feed and query time
  with its ``hugging-face-embedder`` (all-MiniLM-L6-v2), so Amelio never embeds;
* ``feedback`` — ``tensor<float>(q{})``, a fast-access attribute: one cell per
  normalized query with this document's feedback score (see
  :class:`~amelio.search.scoring.FeedbackScorer`), replaced in place by
  ``assign`` partial updates (:func:`sync_signals`).

Rank profiles mirror :mod:`amelio.search.service`: ``bm25``; ``hybrid`` =
``alpha · semantic + (1 − alpha) · lexical``, both min-max normalized over the
re-ranked candidates in the global phase; ``hybrid_with_feedback`` adds
``beta · feedback`` in that later phase, where ``feedback`` is the cell of the
request's query (``query(qkey)`` selects it), so ``beta = 0`` is exactly
``hybrid``.

:class:`VespaBackend` is what :class:`~amelio.search.service.Searcher` ranks
with when ``search_backend = "vespa"``: impressions, tokens and adjacent swaps
stay in Amelio, so the feedback loop is the same on either backend (Thompson
sampling needs the posteriors, which stay in Amelio's signals: on Vespa the
ranking uses the synced posterior means).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import sqlalchemy as sa

from amelio.db.schema import search_signals
from amelio.errors import ConfigError
from amelio.search.clickmodel import load_propensities
from amelio.search.counts import SignalRow
from amelio.search.documents import Deletion, Document, Hit, ImportReport
from amelio.search.scoring import FeedbackScorer, RankedDoc
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace

if TYPE_CHECKING:
    from amelio.embeddings import Embedder

__all__ = [
    "DOCUMENT_TYPE",
    "EMBEDDING_DIM",
    "NAMESPACE",
    "FeedReport",
    "VespaBackend",
    "VespaUnavailable",
    "application_package",
    "feed",
    "query_body",
    "sync_signals",
    "write_package",
]

NAMESPACE = "amelio"
DOCUMENT_TYPE = "doc"
EMBEDDING_DIM = 384
#: all-MiniLM-L6-v2 exported to ONNX, fetched by Vespa (never by Amelio) at deploy.
_MODEL = (
    "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/main/onnx/model.onnx"
)
_TOKENIZER = (
    "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/main/tokenizer.json"
)
_SIGNAL_FIELDS = [f.name for f in dataclasses.fields(SignalRow)]
_LEXICAL = "2 * bm25(title) + bm25(text)"
_INSTALL = (
    "Generating the Vespa application package needs pyvespa: install the optional "
    "extra with `pip install 'amelio[vespa]'`."
)


class VespaUnavailable(ConfigError):
    """Vespa is not configured, unreachable or answered with an error."""

    code = "vespa_unavailable"
    http_status = 503


# -- the application package -------------------------------------------------------------


def application_package(*, rerank: int = 100) -> Any:
    """The pyvespa ``ApplicationPackage``; ``rerank`` is how many first-phase hits
    per content node the global phase normalizes and re-ranks (the embedded
    engine's ``search_candidates``)."""
    try:
        from vespa import package as vp
    except ImportError as exc:
        raise ConfigError(_INSTALL) from exc
    fields = [
        vp.Field("id", "string", indexing=["summary", "attribute"], attribute=["fast-search"]),
        vp.Field("title", "string", indexing=["index", "summary"], index="enable-bm25"),
        vp.Field("text", "string", indexing=["index", "summary"], index="enable-bm25"),
        vp.Field(
            "feedback",
            "tensor<float>(q{})",
            indexing=["attribute", "summary"],
            attribute=["fast-access"],
        ),
    ]
    embedding = vp.Field(
        "embedding",
        f"tensor<float>(x[{EMBEDDING_DIM}])",
        is_document_field=False,
        indexing=['input title . " " . input text', "embed minilm", "attribute", "index"],
        ann=vp.HNSW(distance_metric="angular"),
    )
    alpha = ("query(alpha)", "double", "0.0")
    q_embedding = ("query(q)", f"tensor<float>(x[{EMBEDDING_DIM}])")
    # Guarded: without a query embedding (alpha 0) the semantic term is not computed.
    hybrid_expr = (
        "if(query(alpha) > 0, query(alpha) * normalize_linear(semantic), 0) + "
        "(1 - query(alpha)) * normalize_linear(lexical)"
    )
    lexical = vp.Function("lexical", _LEXICAL)
    semantic = vp.Function("semantic", "closeness(field, embedding)")
    profiles = [
        vp.RankProfile(
            "bm25", first_phase="lexical", functions=[lexical], match_features=["lexical"]
        ),
        vp.RankProfile(
            "hybrid",
            inputs=[alpha, q_embedding],
            functions=[lexical, semantic],
            first_phase="lexical",
            match_features=["lexical", "semantic"],
            global_phase=vp.GlobalPhaseRanking(hybrid_expr, rerank_count=rerank),
        ),
        vp.RankProfile(
            "hybrid_with_feedback",
            inputs=[
                alpha,
                q_embedding,
                ("query(beta)", "double", "1.0"),
                ("query(qkey)", "tensor<float>(q{})"),
            ],
            functions=[
                lexical,
                semantic,
                vp.Function("feedback", "sum(attribute(feedback) * query(qkey))"),
            ],
            first_phase="lexical",
            match_features=["lexical", "semantic", "feedback"],
            global_phase=vp.GlobalPhaseRanking(
                f"{hybrid_expr} + query(beta) * feedback", rerank_count=rerank
            ),
        ),
    ]
    schema = vp.Schema(
        DOCUMENT_TYPE,
        document=vp.Document(fields=fields),
        fieldsets=[vp.FieldSet("default", ["title", "text"])],
        rank_profiles=profiles,
    )
    schema.add_fields(embedding)
    embedder = vp.Component(
        id="minilm",
        type="hugging-face-embedder",
        parameters=[
            vp.Parameter("transformer-model", {"url": _MODEL}),
            vp.Parameter("tokenizer-model", {"url": _TOKENIZER}),
        ],
    )
    return vp.ApplicationPackage(name=NAMESPACE, schema=[schema], components=[embedder])


def write_package(out: Path, *, rerank: int = 100) -> list[Path]:
    """Write the package (``services.xml``, ``schemas/doc.sd``, …) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    application_package(rerank=rerank).to_files(str(out))
    return sorted(p for p in out.rglob("*") if p.is_file())


# -- feeding and signals ------------------------------------------------------------------


@dataclass
class FeedReport:
    """What a feed or sync sent; failures are data (the batch keeps going)."""

    sent: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def record(self, error: str | None) -> None:
        if error is None:
            self.sent += 1
            return
        self.failed += 1
        if len(self.errors) < 10:
            self.errors.append(error)

    def to_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "failed": self.failed, "errors": self.errors}


def document_path(doc_id: str) -> str:
    """The document/v1 path of one document (the id is URL-encoded: ids are free text)."""
    return f"/document/v1/{NAMESPACE}/{DOCUMENT_TYPE}/docid/{quote(doc_id, safe='')}"


def _client(url: str, timeout: float) -> httpx.Client:
    if not url:
        raise VespaUnavailable(
            "No Vespa endpoint: set AMELIO_VESPA_URL (e.g. http://localhost:8080) or pass --url."
        )
    return httpx.Client(base_url=url.rstrip("/"), timeout=timeout)


def _send(client: httpx.Client, method: str, path: str, body: dict[str, Any] | None) -> str | None:
    """One document/v1 operation; an error as text, or None when Vespa accepted it."""
    try:
        response = client.request(method, path, json=body)
    except httpx.HTTPError as exc:
        return f"{method} {path}: {exc}"
    if response.status_code >= 300 and not (method == "DELETE" and response.status_code == 404):
        return f"{method} {path}: HTTP {response.status_code} {response.text[:200]}"
    return None


def _run(
    url: str,
    operations: Iterable[tuple[str, str, dict[str, Any] | None]],
    concurrency: int,
    timeout: float,
) -> FeedReport:
    report = FeedReport()
    with _client(url, timeout) as client, ThreadPoolExecutor(max(1, concurrency)) as pool:
        for error in pool.map(lambda op: _send(client, *op), operations):
            report.record(error)
    return report


def feed(
    url: str, items: Iterable[Document | Deletion], *, concurrency: int = 8, timeout: float = 30.0
) -> FeedReport:
    """Put documents (``POST``, replacing a known id) and delete deletions on Vespa."""

    def operation(item: Document | Deletion) -> tuple[str, str, dict[str, Any] | None]:
        if isinstance(item, Deletion):
            return "DELETE", document_path(item.doc_id), None
        return (
            "POST",
            document_path(item.doc_id),
            {"fields": {"id": item.doc_id, "title": item.title, "text": item.body}},
        )

    return _run(url, (operation(i) for i in items), concurrency, timeout)


def feedback_cells(workspace: Workspace) -> dict[str, dict[str, float]]:
    """Per document, the feedback score of every query it has signals for — what
    the Searcher would add with ``beta = 1`` (same scorer, same prior)."""
    settings = workspace.settings
    cells: dict[str, dict[str, float]] = {}
    with workspace.engine.connect() as conn:
        scorer = FeedbackScorer(
            load_propensities(conn), settings.search_prior_weight, settings.search_min_actors
        )
        for r in conn.execute(sa.select(search_signals).order_by(search_signals.c.doc_id)):
            row = SignalRow(**{f: getattr(r, f) for f in _SIGNAL_FIELDS})
            if scorer.held(row):  # Vespa cannot hold it to two ranks: it waits
                continue
            score = scorer.score(row)
            if score != 0.0:
                cells.setdefault(r.doc_id, {})[r.query_norm] = round(score, 6)
    return cells


def sync_signals(
    workspace: Workspace, url: str, *, concurrency: int = 8, timeout: float = 30.0
) -> FeedReport:
    """Replace each document's ``feedback`` attribute with its current scores, one
    ``assign`` partial update per document (``create=false``: a document Vespa
    does not have is an error, never an empty new one)."""

    def operation(doc_id: str, scores: dict[str, float]) -> tuple[str, str, dict[str, Any]]:
        cells = [{"address": {"q": q}, "value": s} for q, s in sorted(scores.items())]
        return (
            "PUT",
            document_path(doc_id) + "?create=false",
            {"fields": {"feedback": {"assign": {"cells": cells}}}},
        )

    cells = feedback_cells(workspace)
    return _run(url, (operation(d, s) for d, s in cells.items()), concurrency, timeout)


# -- the search backend ---------------------------------------------------------------------


def _label(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def query_body(
    query_norm: str,
    profile: str,
    alpha: float,
    beta: float,
    hits: int,
    timeout_s: float = 2.0,
    *,
    key: str | None = None,
) -> dict[str, Any]:
    """The search/ request for one ranking: the rank profile Vespa should use and
    its inputs. ``semantic`` is ``hybrid`` at alpha 1; beta 0 is plain ``hybrid``
    (the kill switch needs no feedback lookup at all). ``key`` is the query's
    signals key (scrubbed of personal data, see ``query_key``) when it differs
    from ``query_norm``."""
    where = "userQuery()"
    if alpha > 0:
        where = f"userQuery() or ({{targetHits:{hits}}}nearestNeighbor(embedding, q))"
    rank_profile = "bm25" if profile == "bm25" else "hybrid"
    if profile == "hybrid_with_feedback" and beta > 0:
        rank_profile = "hybrid_with_feedback"
    body: dict[str, Any] = {
        # The person's words travel in "query" (userQuery()), never inside the YQL.
        "yql": f"select id, title from {DOCUMENT_TYPE} where {where}",  # noqa: S608
        "query": query_norm,
        "type": "any",
        "hits": hits,
        "ranking.profile": rank_profile,
        "timeout": f"{timeout_s}s",
    }
    if rank_profile != "bm25":
        body["input.query(alpha)"] = alpha
        if alpha > 0:
            body["input.query(q)"] = "embed(minilm, @query)"
    if rank_profile == "hybrid_with_feedback":
        body["input.query(beta)"] = beta
        body["input.query(qkey)"] = "{{q:%s}:1.0}" % _label(key or query_norm)  # noqa: UP031
    return body


class VespaBackend:
    """The ``vespa`` engine: a :class:`~amelio.search.engines.registry.RankingEngine`, so the
    :class:`~amelio.search.service.Searcher` hands it whole rankings (feedback
    included, from the synced attribute) and keeps impressions and tokens.
    Remembers the titles of the hits it returned, so a response needs no second
    request. Vespa keeps no generation: rankings from it are never cached."""

    name = "vespa"

    def __init__(self, settings: Settings, *, timeout: float = 5.0) -> None:
        self.url = settings.vespa_url
        self.client = _client(settings.vespa_url, timeout)
        self._titles: dict[str, str] = {}
        self._lock = threading.Lock()

    def apply(
        self, items: Iterable[Document | Deletion], *, embedder: Embedder | None = None
    ) -> ImportReport:
        """Feed documents and deletions (Vespa embeds them itself: ``embedder`` is
        not used); a failed operation is :class:`VespaUnavailable` naming it."""
        listed = list(items)
        report = feed(self.url, listed)
        if report.failed:
            raise VespaUnavailable(
                f"Vespa refused {report.failed} of {len(listed)} "
                f"operations: {'; '.join(report.errors[:3])}"
            )
        deleted = sum(isinstance(i, Deletion) for i in listed)
        return ImportReport(len(listed) - deleted, deleted, self.count())

    def lexical(self, query: str, limit: int) -> list[Hit]:
        return [Hit(d.doc_id, d.first_phase) for d in self.rank(query, "bm25", 0.0, 0.0, limit)]

    def nearest(
        self, query: str, limit: int, embedder: Embedder, *, also: Sequence[str] = ()
    ) -> tuple[list[Hit], dict[str, float]]:
        """Vespa's nearest neighbours by its own embedding of ``query`` (the
        ``semantic`` profile); it scores no extra documents, so ``also`` is {}."""
        ranked = self.rank(query, "semantic", 1.0, 0.0, limit)
        return [Hit(d.doc_id, d.first_phase) for d in ranked], {}

    def generation(self) -> int:
        return 0

    def count(self) -> int:
        body = {"yql": f"select id from {DOCUMENT_TYPE} where true", "hits": 0}  # noqa: S608
        return int(self._search(body).get("fields", {}).get("totalCount", 0))

    def _search(self, body: dict[str, Any]) -> dict[str, Any]:
        """The ``root`` of one search/ answer, or :class:`VespaUnavailable`."""
        try:
            response = self.client.post("/search/", json=body)
        except httpx.HTTPError as exc:
            raise VespaUnavailable(
                f"Vespa at {self.client.base_url} is unreachable ({exc}); check AMELIO_VESPA_URL."
            ) from exc
        if response.status_code != 200:
            raise VespaUnavailable(
                f"Vespa answered HTTP {response.status_code}: {response.text[:300]}"
            )
        root: dict[str, Any] = response.json().get("root", {})
        return root

    def rank(
        self,
        query: str,
        profile: str,
        alpha: float,
        beta: float,
        limit: int,
        *,
        key: str | None = None,
    ) -> tuple[RankedDoc, ...]:
        """The best ``limit`` hits for the normalized ``query``; a hit's first-phase
        score is its relevance less the feedback term, as the embedded engines
        report it."""
        root = self._search(query_body(query, profile, alpha, beta, limit, key=key))
        ranking: list[RankedDoc] = []
        titles: dict[str, str] = {}
        for hit in root.get("children", []):
            fields = hit.get("fields", {})
            if "id" not in fields:
                continue
            features = fields.get("matchfeatures", {})
            feedback = float(features.get("feedback", 0.0)) if beta > 0 else 0.0
            score = float(hit.get("relevance", 0.0))
            ranking.append(RankedDoc(str(fields["id"]), score, score - beta * feedback, feedback))
            titles[str(fields["id"])] = str(fields.get("title", ""))
        with self._lock:
            if len(self._titles) > 100_000:
                self._titles.clear()
            self._titles.update(titles)
        return tuple(ranking)

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        """The documents among ``doc_ids`` whose titles a ranking returned."""
        with self._lock:
            return {d: Document(d, self._titles[d], "") for d in doc_ids if d in self._titles}
