"""The search engine contract: the registry, the tantivy and FTS5 engines over one
document store, staleness and rebuilds, and an engine a plugin adds."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from amelio.cli import main
from amelio.embeddings import Embedder
from amelio.errors import InvalidInput
from amelio.hookspecs import hookimpl
from amelio.plugins import get_plugin_manager
from amelio.search import Fts5Engine, Searcher
from amelio.search.documents import Deletion, Document, Hit, ImportReport
from amelio.search.engines.fts5 import match_expression
from amelio.search.engines.registry import (
    EngineType,
    RankingEngine,
    SearchEngine,
    open_engine,
    search_engines,
    workspace_corpus,
)
from amelio.search.engines.tantivy import TantivyEngine
from amelio.text import ANALYZERS, SEARCH
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace

DOCS = [
    Document("reset", "Reset your password", "Open settings, then reset the password."),
    Document("sso", "Single sign-on", "Sign in with your company account."),
    Document("expire", "Password expiry", "Passwords expire after 90 days."),
    Document("invoice", "Download an invoice", "Invoices are under billing."),
    Document("refund", "Ask for a refund", "Refunds go back to the card; ask billing."),
]


def test_the_built_in_engines_are_registered_and_an_unknown_one_is_named(tmp_path: Path) -> None:
    engines = search_engines()
    assert {"embedded", "tantivy", "fts5", "vespa"} <= engines.keys()
    settings = Settings(workspace=tmp_path)
    assert isinstance(open_engine(settings), TantivyEngine)  # embedded is tantivy
    assert isinstance(open_engine(settings, "fts5"), Fts5Engine)
    with pytest.raises(InvalidInput, match=r"Unknown search engine 'solr'.*fts5.*tantivy"):
        open_engine(settings, "solr")
    for engine in (open_engine(settings), open_engine(settings, "fts5")):
        assert isinstance(engine, SearchEngine) and not isinstance(engine, RankingEngine)


ANALYZED = [
    # apostrophes split as unicode61 splits them; every word kept, one letter too
    (
        "What's l’API? Déployer, c'est l'été!",
        ["what", "s", "l", "api", "deployer", "c", "est", "l", "ete"],
    ),
    (
        "Is it the pull-request, or a code review?",
        ["is", "it", "the", "pull", "request", "or", "a", "code", "review"],
    ),
    ("ÉCOLE naïve: 3.14 * foo_bar", ["ecole", "naive", "3", "14", "foo", "bar"]),
]


@pytest.mark.parametrize(("text", "terms"), ANALYZED)
def test_the_search_analyzer_pins_its_terms_and_splits_as_fts5_does(
    text: str, terms: list[str]
) -> None:
    """Tantivy indexes what the search analyzer makes, FTS5 what its unicode61
    tokenizer makes: the two must be the same words, or the engines disagree."""
    assert ANALYZERS["search"] is SEARCH
    analyzed = SEARCH.analyze(text)
    assert analyzed == terms
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(
            "CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 2')"
        )
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        conn.execute("INSERT INTO t (rowid, x) VALUES (1, ?)", (text,))
        assert [row[0] for row in conn.execute("SELECT term FROM v ORDER BY offset")] == analyzed
    assert match_expression(text) == " OR ".join(f'"{t}"' for t in dict.fromkeys(analyzed))


@pytest.mark.parametrize("kind", [Fts5Engine, TantivyEngine], ids=["fts5", "tantivy"])
def test_both_engines_find_words_past_accents_case_and_apostrophes(
    kind: type[Fts5Engine | TantivyEngine], tmp_path: Path
) -> None:
    engine = kind(tmp_path / "corpus.db")
    engine.apply([Document("ete", "L’été à Montréal", "Qu'est-ce qu'on y fait ?"), *DOCS])
    for query in ("ETE", "montreal", "l'été", "qu'est"):
        assert [h.doc_id for h in engine.lexical(query, 5)] == ["ete"], query


@pytest.mark.parametrize("kind", [Fts5Engine, TantivyEngine], ids=["fts5", "tantivy"])
def test_both_engines_rank_the_same_documents_the_same_way(
    kind: type[Fts5Engine | TantivyEngine], tmp_path: Path
) -> None:
    engine = kind(tmp_path / "corpus.db")
    engine.apply(DOCS)
    assert {h.doc_id for h in engine.lexical("password", 5)} == {"expire", "reset"}
    assert engine.lexical("refund billing", 5)[0].doc_id == "refund"
    assert engine.lexical("nothing matches this", 5) == []
    assert engine.lexical("", 5) == []
    engine.apply([Deletion("refund"), Document("invoice", "Invoices", "Billing, refund.")])
    assert [h.doc_id for h in engine.lexical("refund", 5)] == ["invoice"]
    assert engine.count() == 4


def test_tantivy_matches_what_fts5_matches_and_ranks_by_its_own_bm25(tmp_path: Path) -> None:
    """The same tokens in both: asked for every match, the two engines return the
    same set (every document holding a query word, folded). Tantivy's scores are
    its own BM25, best first; a document whose title is the query comes first in
    both."""
    import random

    rng = random.Random(5)
    words = [f"w{i}" for i in range(60)]
    docs = [
        Document(
            f"d{i}",
            " ".join(rng.choices(words, k=rng.randint(2, 6))),
            " ".join(rng.choices(words, k=rng.randint(10, 40))),
        )
        for i in range(300)
    ]
    docs.append(Document("target", "Wèird Wörds", "nothing else here"))
    fts5, tantivy = Fts5Engine(tmp_path / "a" / "corpus.db"), TantivyEngine(tmp_path / "b" / "c.db")
    fts5.apply(docs)
    tantivy.apply(docs)
    for query in ("w1 w7", "w3", "w12 w30 w2", "weird words w5"):
        asked = set(query.split())
        holding = {
            d.doc_id
            for d in docs
            if asked
            & set(f"{d.title} {d.body}".lower().replace("è", "e").replace("ö", "o").split())
        }
        assert {h.doc_id for h in fts5.lexical(query, 400)} == holding
        everything = tantivy.lexical(query, 400)
        assert {h.doc_id for h in everything} == holding
        scores = [h.score for h in everything]
        assert scores == sorted(scores, reverse=True) and scores[-1] > 0
        best = tantivy.lexical(query, 10)
        assert [h.doc_id for h in best] == [h.doc_id for h in everything[:10]]
    assert fts5.lexical("weird words", 1)[0].doc_id == "target"
    assert tantivy.lexical("WEIRD words", 1)[0].doc_id == "target"


@pytest.mark.parametrize("kind", [Fts5Engine, TantivyEngine], ids=["fts5", "tantivy"])
def test_a_title_match_counts_double(
    kind: type[Fts5Engine | TantivyEngine], tmp_path: Path
) -> None:
    """Two documents of the same length, the query word once in each: the one that
    holds it in its title ranks first, and as one that holds it twice in its body."""
    engine = kind(tmp_path / "corpus.db")
    engine.apply(
        [
            Document("body", "alpha beta", "gamma delta zeta epsilon"),
            Document("title", "zeta beta", "gamma delta alpha epsilon"),
            Document("twice", "alpha beta", "zeta delta zeta epsilon"),
            *(Document(f"filler{i}", "alpha beta", "gamma delta epsilon eta") for i in range(20)),
        ]
    )
    hits = engine.lexical("zeta", 5)
    assert [h.doc_id for h in hits][-1] == "body"
    score = {h.doc_id: h.score for h in hits}
    assert score["title"] > score["body"]
    assert score["title"] == pytest.approx(score["twice"], rel=1e-6)


def test_an_index_left_behind_is_rebuilt_before_it_answers(tmp_path: Path) -> None:
    """Another engine writing the store, or a crash between the index's commit and
    the store's, leaves the index behind; the next read rebuilds it."""
    path = tmp_path / "corpus.db"
    tantivy = TantivyEngine(path)
    tantivy.apply(DOCS[:3])
    fts5 = Fts5Engine(path)  # the store was filled by tantivy: FTS5 has nothing yet
    assert [h.doc_id for h in fts5.lexical("invoice password", 5)] != []
    fts5.apply(DOCS[3:])  # now tantivy is behind
    assert [h.doc_id for h in tantivy.lexical("invoice", 5)] == ["invoice"]
    # a crash after the index committed a batch and before the store did
    (tantivy.index_dir / "amelio-generation").write_text("dirty")
    reopened = TantivyEngine(path)
    assert reopened.index_generation() is None
    assert [h.doc_id for h in reopened.lexical("refund", 5)] == ["refund"]
    assert reopened.index_generation() == reopened.generation()


def test_a_write_by_another_process_is_seen_by_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "corpus.db"
    reader, writer = TantivyEngine(path), TantivyEngine(path)  # two processes' views
    writer.apply(DOCS[:2])
    assert [h.doc_id for h in reader.lexical("password", 5)] == ["reset"]
    writer.apply([Document("new", "Password manager", "Keep every password safe.")])
    assert {h.doc_id for h in reader.lexical("password", 5)} == {"reset", "new"}


def test_concurrent_imports_into_tantivy_all_land(tmp_path: Path) -> None:
    engine = TantivyEngine(tmp_path / "corpus.db")
    errors: list[BaseException] = []

    def load(start: int) -> None:
        try:
            TantivyEngine(tmp_path / "corpus.db").apply(
                [Document(f"d{start + i}", "concurrent import", f"body {i}") for i in range(50)],
                batch=10,
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(k * 100,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert engine.count() == 150 and len(engine.lexical("concurrent", 200)) == 150


def test_corpus_reindex_command(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"_id": d.doc_id, "title": d.title, "text": d.body}) + "\n" for d in DOCS
        ),
        encoding="utf-8",
    )
    runner = CliRunner()
    root = ["--workspace", str(sqlite_workspace.root)]
    assert runner.invoke(main, [*root, "corpus", "import", str(docs)]).exit_code == 0
    result = runner.invoke(main, [*root, "corpus", "reindex", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) | {"seconds": 0} == {
        "engine": "tantivy",
        "documents": 5,
        "seconds": 0,
    }
    result = runner.invoke(
        main, [*root, "corpus", "reindex"], env={"AMELIO_SEARCH_BACKEND": "fts5"}
    )
    assert result.exit_code == 0 and "5 document(s) indexed by fts5" in result.output


class _ListEngine:
    """A plugin's engine: every document matches every query, in insertion order."""

    name = "listed"

    def __init__(self) -> None:
        self.docs: dict[str, Document] = {}
        self.writes = 0

    def apply(
        self, items: Iterable[Document | Deletion], *, embedder: Embedder | None = None
    ) -> ImportReport:
        for item in items:
            if isinstance(item, Deletion):
                self.docs.pop(item.doc_id, None)
            else:
                self.docs[item.doc_id] = item
        self.writes += 1
        return ImportReport(len(self.docs), 0, len(self.docs))

    def lexical(self, query: str, limit: int) -> list[Hit]:
        return [Hit(d, 1.0 / (i + 1)) for i, d in enumerate(self.docs)][:limit]

    def nearest(
        self, query: str, limit: int, embedder: Embedder, *, also: Sequence[str] = ()
    ) -> tuple[list[Hit], dict[str, float]]:
        return [], {}

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        return {d: self.docs[d] for d in doc_ids if d in self.docs}

    def generation(self) -> int:
        return self.writes

    def count(self) -> int:
        return len(self.docs)


@pytest.fixture
def listed_engine() -> Iterator[_ListEngine]:
    engine = _ListEngine()

    class Plugin:
        @staticmethod
        @hookimpl
        def register_search_engines(register: object) -> None:
            assert callable(register)
            register(EngineType("listed", lambda settings: engine, "a test engine"))

    pm = get_plugin_manager()
    pm.register(Plugin, name="test-listed-engine")
    try:
        yield engine
    finally:
        pm.unregister(name="test-listed-engine")


def test_a_plugin_engine_serves_search_by_its_name(
    sqlite_workspace: Workspace, listed_engine: _ListEngine
) -> None:
    settings = sqlite_workspace.settings.model_copy(update={"search_backend": "listed"})
    assert open_engine(settings) is listed_engine
    listed_engine.apply(DOCS)
    searcher = Searcher(
        sqlite_workspace, engine=open_engine(settings), background_aggregation=False
    )
    response = searcher.search("anything at all", profile="bm25", limit=3)
    assert [d.doc_id for d in response.results] == ["reset", "sso", "expire"]
    assert response.titles["sso"] == "Single sign-on"
    assert isinstance(workspace_corpus(sqlite_workspace.settings), TantivyEngine)
