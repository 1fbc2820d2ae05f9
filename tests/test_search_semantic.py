"""The semantic and hybrid profiles: document vectors, the shipped model, clear errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from amelio import embeddings
from amelio.embeddings import SemanticUnavailable, load_embedder
from amelio.knowledge.index import embedder_for
from amelio.search import Fts5Engine, Searcher
from amelio.search.documents import Document
from amelio.workspace.folder import Workspace
from test_search import DOCS, write_jsonl


class ConceptEmbedder:
    """Deterministic vectors: each dimension is one concept, words vote for them.
    Counts how many texts it embedded, so tests can see what was (re)computed."""

    model = "concepts-v1"
    CONCEPTS: Sequence[set[str]] = (
        {"password", "login", "credentials", "sign"},
        {"invoice", "invoices", "bill", "billing"},
        {"refund", "refunds", "money", "card"},
    )

    def __init__(self) -> None:
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded += len(texts)
        out = []
        for text in texts:
            words = text.lower().replace(".", " ").replace(";", " ").split()
            v = [float(sum(w in c for w in words)) for c in self.CONCEPTS] + [0.1]
            norm = sum(x * x for x in v) ** 0.5
            out.append([x / norm for x in v])
        return out


@pytest.fixture
def concepts() -> ConceptEmbedder:
    return ConceptEmbedder()


@pytest.fixture
def corpus(sqlite_workspace: Workspace, tmp_path: Path, concepts: ConceptEmbedder) -> Fts5Engine:
    c = Fts5Engine.for_workspace(sqlite_workspace.settings.data_dir)
    c.import_file(write_jsonl(tmp_path / "docs.jsonl", DOCS), embedder=concepts)
    return c


def test_semantic_finds_what_shares_no_word(
    sqlite_workspace: Workspace, corpus: Fts5Engine, concepts: ConceptEmbedder
) -> None:
    searcher = Searcher(
        sqlite_workspace, engine=corpus, embedder=concepts, background_aggregation=False
    )
    assert searcher.rank("my bill", profile="bm25") == ()  # no shared word
    [top, *rest] = searcher.rank("my bill", profile="semantic")
    assert top.doc_id == "invoice" and top.score == pytest.approx(top.first_phase)
    assert all(top.score > d.score for d in rest)
    response = searcher.search("my bill", profile="semantic")
    assert response.alpha == 1.0 and response.results[0].doc_id == "invoice"


def test_hybrid_mixes_normalized_scores_and_alpha_zero_is_lexical(
    sqlite_workspace: Workspace, corpus: Fts5Engine, concepts: ConceptEmbedder
) -> None:
    searcher = Searcher(
        sqlite_workspace, engine=corpus, embedder=concepts, background_aggregation=False
    )
    lexical = searcher.rank("refund card", profile="hybrid", alpha=0.0)
    assert [d.doc_id for d in lexical] == ["refund"]  # the only lexical match
    mixed = searcher.rank("refund card", profile="hybrid", alpha=0.5)
    assert mixed[0].doc_id == "refund" and mixed[0].first_phase == pytest.approx(1.0)
    # semantic candidates join with a lexical score of 0: at most alpha
    assert {d.doc_id for d in mixed} == {d["_id"] for d in DOCS}
    assert all(0.0 <= d.first_phase <= 0.5 + 1e-9 for d in mixed[1:])
    assert concepts.embedded == len(DOCS) + 1  # the documents once, then the one query


def test_vectors_follow_updates_and_deletes_and_heal_missing_ones(
    sqlite_workspace: Workspace, tmp_path: Path, concepts: ConceptEmbedder
) -> None:
    corpus = Fts5Engine.for_workspace(sqlite_workspace.settings.data_dir)
    corpus.import_file(write_jsonl(tmp_path / "docs.jsonl", DOCS))  # no embedder: lexical only
    searcher = Searcher(
        sqlite_workspace, engine=corpus, embedder=concepts, background_aggregation=False
    )
    assert searcher.rank("my bill", profile="semantic")[0].doc_id == "invoice"
    assert concepts.embedded == len(DOCS) + 1  # healed on first use
    # an update re-embeds only what changed, a deletion drops its vector, and the
    # cached ranking of the old corpus is not served
    corpus.apply(
        [
            Document("invoice", "Shipping times", "Parcels arrive in two days."),
            Document("bill", "Your bill", "Each bill is sent monthly."),
        ],
        embedder=concepts,
    )
    assert concepts.embedded == len(DOCS) + 3
    ranked = searcher.rank("my bill", profile="semantic")
    assert ranked[0].doc_id == "bill"
    corpus.import_file(write_jsonl(tmp_path / "del.jsonl", [{"_id": "bill", "deleted": True}]))
    assert "bill" not in {d.doc_id for d in searcher.rank("my bill", profile="semantic")}
    conn = corpus._reader
    assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == len(DOCS)


def test_a_corpus_written_by_another_process_is_seen(
    sqlite_workspace: Workspace, corpus: Fts5Engine, concepts: ConceptEmbedder
) -> None:
    searcher = Searcher(
        sqlite_workspace, engine=corpus, embedder=concepts, background_aggregation=False
    )
    assert searcher.rank("my bill", profile="semantic")[0].doc_id == "invoice"
    # another Fts5Engine on the same file, as `amelio corpus import` next to `amelio serve`
    other = Fts5Engine.for_workspace(sqlite_workspace.settings.data_dir)
    other.apply(
        [
            Document("invoice", "Download an invoice", "Refunds are under money."),
            Document("statement", "Monthly statement", "Your bill for each month."),
        ],
        embedder=concepts,
    )
    assert searcher.rank("my bill", profile="semantic")[0].doc_id == "statement"


def test_the_shipped_model_loads_offline_and_ranks_by_meaning(
    sqlite_workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any attempt to reach a model hub would fail loudly here.
    monkeypatch.setattr("socket.socket.connect", _no_network)
    corpus = Fts5Engine.for_workspace(sqlite_workspace.settings.data_dir)
    searcher = Searcher(sqlite_workspace, engine=corpus, background_aggregation=False)
    assert searcher.settings.search_embedding_model == "wordllama"
    corpus.import_file(
        write_jsonl(tmp_path / "docs.jsonl", DOCS), embedder=load_embedder("wordllama")
    )
    assert searcher.rank("get my bill", profile="bm25") == ()
    assert searcher.rank("get my bill", profile="semantic")[0].doc_id == "invoice"
    assert searcher.rank("money back", profile="semantic")[0].doc_id == "refund"
    assert embedder_for(
        sqlite_workspace.settings.model_copy(update={"knowledge_embedding_model": "wordllama"})
    ) is load_embedder("wordllama")


def _no_network(*_: object) -> None:
    raise AssertionError("a network connection was attempted")


def test_without_the_extra_semantic_says_how_to_install(
    sqlite_workspace: Workspace, corpus: Fts5Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # `import wordllama` fails
    monkeypatch.setattr(embeddings, "_loaded", {})
    searcher = Searcher(sqlite_workspace, engine=corpus, background_aggregation=False)
    for profile, alpha in (("semantic", None), ("hybrid", 0.5)):
        with pytest.raises(SemanticUnavailable, match=r"pip install 'amelio\[semantic\]'") as info:
            searcher.search("password", profile=profile, alpha=alpha)
        assert info.value.http_status == 503 and profile in info.value.message
    assert searcher.search("password", profile="hybrid", alpha=0.0).results  # lexical works


def test_semantic_switched_off_names_the_setting(
    sqlite_workspace: Workspace, corpus: Fts5Engine
) -> None:
    searcher = Searcher(sqlite_workspace, engine=corpus, background_aggregation=False)
    searcher.settings = searcher.settings.model_copy(update={"search_embedding_model": ""})
    with pytest.raises(SemanticUnavailable, match="AMELIO_SEARCH_EMBEDDING_MODEL=wordllama"):
        searcher.search("password", profile="semantic")


def test_with_contributions_on_documents_wait_for_browsers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``contributions`` on, neither the import nor a semantic search embeds the
    documents on the server (that is the browsers' work); hybrid still finds them
    lexically, and ``amelio corpus embed`` is the server's own fallback. The search
    loop is told so by the front door (``defer_missing_vectors``), as the service's
    search route, MCP, the dashboard and the CLI do."""
    from click.testing import CliRunner

    from amelio.cli import main
    from amelio.contributions import browsers_embed
    from amelio.search.engines.registry import workspace_corpus
    from amelio.workspace.folder import init_workspace

    monkeypatch.setenv("AMELIO_CONTRIBUTIONS", "true")
    monkeypatch.setenv("AMELIO_SEARCH_EMBEDDING_MODEL", "wordllama")
    ws, _ = init_workspace(tmp_path / "ws")
    try:
        runner = CliRunner()
        w = ["-w", str(ws.root)]
        docs = write_jsonl(tmp_path / "docs.jsonl", DOCS)
        imported = runner.invoke(main, [*w, "corpus", "import", str(docs)])
        assert imported.exit_code == 0, imported.output
        assert "browsers running amelio.js embed them" in imported.stdout
        assert browsers_embed(ws.settings)
        store = workspace_corpus(ws.settings)
        assert len(store.missing_vectors("wordllama")) == len(DOCS)
        searcher = Searcher(ws, background_aggregation=False, defer_missing_vectors=True)
        assert searcher.rank("forgot my login", profile="semantic") == ()
        hybrid = searcher.rank("reset password", profile="hybrid")
        assert hybrid and hybrid[0].doc_id == "reset"
        assert len(store.missing_vectors("wordllama")) == len(DOCS)  # still not embedded

        embedded = runner.invoke(main, [*w, "corpus", "embed", "--json"])
        assert embedded.exit_code == 0, embedded.output
        assert json.loads(embedded.stdout)["embedded"] == len(DOCS)
        assert store.missing_vectors("wordllama") == []
        assert searcher.rank("forgot my login", profile="semantic")[0].doc_id in {
            "reset",
            "sso",
            "expire",
        }
    finally:
        ws.dispose()


def test_put_vectors_skips_documents_whose_text_moved_on(
    corpus: Fts5Engine, concepts: ConceptEmbedder
) -> None:
    """With the texts the vectors were computed from, the store writes only the documents
    whose embed text is still that (checked in its own write transaction) and says which
    it skipped: unknown ids too."""
    corpus.apply(
        [Document("a", "Reset", "your password.", {}), Document("b", "Pay", "an invoice.", {})]
    )  # no embedder: no vectors
    [va, vb] = concepts.embed(["x", "y"])
    skipped = corpus.put_vectors(
        concepts.model,
        {"a": va, "b": vb, "nope": va},
        texts={"a": "Reset\nyour password.", "b": "Pay\nold text.", "nope": "?"},
    )
    assert skipped == ["b", "nope"]
    assert [d for d, _ in corpus.missing_vectors(concepts.model) if d in {"a", "b"}] == ["b"]
    assert corpus.put_vectors(concepts.model, {"b": vb}) == []  # no texts: not compared


def test_deferred_vectors_are_read_without_the_write_lock(
    corpus: Fts5Engine, concepts: ConceptEmbedder
) -> None:
    """With missing vectors left to browsers, loading the matrix writes nothing, so it must
    not wait for the write lock (browsers' vectors being stored hold it)."""
    import sqlite3

    corpus.defer_missing_vectors = True
    writer = sqlite3.connect(corpus.path, timeout=0)
    writer.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        hits, _ = corpus.nearest("my bill", 3, concepts)
        assert hits and hits[0].doc_id in {d["_id"] for d in DOCS}
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_the_search_route_leaves_vectors_to_browsers_when_contributions_are_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's search route is a front door that must pass the idle-compute
    policy on: a semantic search through it embeds nothing on the server."""
    from fastapi.testclient import TestClient

    from amelio.search.engines.registry import workspace_corpus
    from amelio.server import create_app
    from amelio.workspace import keys
    from amelio.workspace.folder import init_workspace

    monkeypatch.setenv("AMELIO_CONTRIBUTIONS", "true")
    monkeypatch.setenv("AMELIO_SEARCH_EMBEDDING_MODEL", "wordllama")
    ws, _ = init_workspace(tmp_path / "ws")
    try:
        store = workspace_corpus(ws.settings)
        store.import_file(write_jsonl(tmp_path / "docs.jsonl", DOCS), embedder=None)
        _, key = keys.create_key(ws.engine, name="bot", role="bot")
        with TestClient(create_app(ws)) as client:
            r = client.post(
                "/v1/search",
                headers={"Authorization": f"Bearer {key}"},
                json={"query": "forgot my login", "rankProfile": "semantic"},
            )
        assert r.status_code == 200, r.text
        assert r.json()["results"] == []
        assert len(store.missing_vectors("wordllama")) == len(DOCS)
    finally:
        ws.dispose()
