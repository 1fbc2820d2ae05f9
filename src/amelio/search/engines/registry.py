"""The search engine contract, and the registry ``search_backend`` names an engine in.

An engine keeps the documents and answers for them: it indexes and deletes
(:meth:`SearchEngine.apply`), gives lexical candidates (BM25) and vector
candidates (cosine to the query's embedding) with their scores, returns stored
documents, and bumps a *generation* on every write so that caches in any
process know when to let go. Everything that makes search learn — the rank
profiles, the feedback score, exploration, impressions and tokens — stays in
:class:`~amelio.search.service.Searcher` and works the same on every engine.

An engine that ranks with the feedback itself, next to its data (Vespa),
implements :class:`RankingEngine` as well; the searcher then hands it the whole
ranking and keeps the impression log.

Engines are registered through the ``register_search_engines`` plugin hook,
like rule types and LLM providers: ``register(EngineType(name, open, about))``
where ``open(settings)`` returns the engine. The built-ins:

* ``embedded`` — the default: ``tantivy``;
* ``tantivy`` — a tantivy index (BM25 with block-max pruning for top-k) beside
  the SQLite document store (:mod:`~amelio.search.engines.tantivy`);
* ``fts5`` — SQLite FTS5 in the same file as the documents
  (:mod:`~amelio.search.engines.fts5`), no native wheel needed;
* ``vespa`` — Vespa at ``vespa_url`` (:mod:`~amelio.search.engines.vespa`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from amelio.errors import InvalidInput
from amelio.hookspecs import hookimpl
from amelio.plugins import collect

if TYPE_CHECKING:
    from amelio.embeddings import Embedder
    from amelio.search.documents import Deletion, Document, Hit, ImportReport
    from amelio.search.scoring import RankedDoc
    from amelio.search.store import DocumentStore
    from amelio.workspace.config import Settings

__all__ = [
    "DEFAULT_ENGINE",
    "EngineType",
    "RankingEngine",
    "SearchEngine",
    "open_collection",
    "open_engine",
    "search_engines",
    "workspace_corpus",
]

#: What ``search_backend = "embedded"`` (the default) opens.
DEFAULT_ENGINE = "tantivy"


@runtime_checkable
class SearchEngine(Protocol):
    """Where documents are indexed and candidates come from."""

    #: The registry name this engine was opened under.
    name: str

    def apply(
        self, items: Iterable[Document | Deletion], *, embedder: Embedder | None = None
    ) -> ImportReport:
        """Upsert documents (a known id is replaced) and apply deletions; with an
        ``embedder``, each upserted document is embedded as it is indexed."""
        ...

    def lexical(self, query: str, limit: int) -> list[Hit]:
        """The best ``limit`` documents for the normalized ``query`` by BM25, best first
        (higher is better; ties to the earlier document)."""
        ...

    def nearest(
        self, query: str, limit: int, embedder: Embedder, *, also: Sequence[str] = ()
    ) -> tuple[list[Hit], dict[str, float]]:
        """The ``limit`` documents nearest to ``query``'s embedding by cosine, best
        first, and the cosine of each document of ``also`` that has a vector (the
        hybrid profile scores the lexical candidates the nearest ones left out)."""
        ...

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        """The stored documents among ``doc_ids``."""
        ...

    def generation(self) -> int:
        """A number every write bumps, in any process sharing the engine."""
        ...

    def count(self) -> int:
        """How many documents the engine holds."""
        ...


@runtime_checkable
class RankingEngine(SearchEngine, Protocol):
    """An engine that computes whole rankings, feedback included, where its data is."""

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
        """The best ``limit`` documents for a rank profile; ``key`` selects the
        query's feedback scores."""
        ...


@dataclass(frozen=True)
class EngineType:
    """A registered engine: ``open(settings)`` returns a :class:`SearchEngine`."""

    name: str
    open: Callable[[Settings], SearchEngine]
    description: str


def _open_tantivy(settings: Settings) -> SearchEngine:
    from amelio.search.engines.tantivy import TantivyEngine

    return TantivyEngine.for_workspace(settings.data_dir)


def _open_fts5(settings: Settings) -> SearchEngine:
    from amelio.search.engines.fts5 import Fts5Engine

    return Fts5Engine.for_workspace(settings.data_dir)


def _open_vespa(settings: Settings) -> SearchEngine:
    from amelio.search.engines.vespa import VespaBackend

    return VespaBackend(settings)


@hookimpl
def register_search_engines(register: Callable[[EngineType], None]) -> None:
    register(
        EngineType("embedded", _open_tantivy, f"the default embedded engine ({DEFAULT_ENGINE})")
    )
    register(
        EngineType(
            "tantivy",
            _open_tantivy,
            "tantivy BM25 (block-max top-k) beside the SQLite document store",
        )
    )
    register(EngineType("fts5", _open_fts5, "SQLite FTS5 BM25, in the document store's file"))
    register(EngineType("vespa", _open_vespa, "Vespa at vespa_url: ranks next to the data"))


def search_engines() -> dict[str, EngineType]:
    """Every registered engine by name, built-ins first (:func:`amelio.plugins.collect`)."""
    return collect("register_search_engines", EngineType)


def open_engine(
    settings: Settings, name: str | None = None, *, defer_missing_vectors: bool = False
) -> SearchEngine:
    """The engine ``name`` (default: the ``search_backend`` setting) for ``settings``.

    With ``defer_missing_vectors``, a document store (any engine built on one, a
    plugin's too) leaves the vectors it lacks to someone else (browsers lending idle
    compute: the caller asks :func:`amelio.contributions.browsers_embed`) instead of
    embedding them at the first semantic search."""
    from amelio.search.store import DocumentStore

    name = name or settings.search_backend
    engines = search_engines()
    if name not in engines:
        raise InvalidInput(
            f"Unknown search engine {name!r} (search_backend); use one of: "
            f"{', '.join(sorted(engines))}.",
            field="search_backend",
        )
    engine = engines[name].open(settings)
    if isinstance(engine, DocumentStore):
        engine.defer_missing_vectors = defer_missing_vectors
    return engine


def workspace_corpus(settings: Settings, *, defer_missing_vectors: bool = False) -> DocumentStore:
    """The workspace's own document store, under its configured engine: what
    ``amelio corpus`` imports into and reindexes. On an engine that ranks
    elsewhere (Vespa) it is the default embedded one, which ``amelio vespa feed``
    sends from."""
    from amelio.search.store import DocumentStore

    engine = open_engine(settings, defer_missing_vectors=defer_missing_vectors)
    if isinstance(engine, DocumentStore):
        return engine
    embedded = open_engine(settings, "embedded", defer_missing_vectors=defer_missing_vectors)
    assert isinstance(embedded, DocumentStore)
    return embedded


_collections: dict[tuple[Path, str, str], DocumentStore] = {}
_collections_lock = threading.Lock()
_COLLECTION = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")


def open_collection(settings: Settings, name: str) -> DocumentStore:
    """An embedded engine of its own for a collection of documents that are not the
    search corpus (a knowledge notebook's chunks): its own store and index under
    ``.amelio/search/collections/NAME/``, so its BM25 statistics are its own.
    The kind follows ``search_backend`` when that is ``tantivy`` or ``fts5``, and
    is the default embedded engine otherwise. One object per process and
    collection: the index stays open between queries."""
    from amelio.search.engines.fts5 import Fts5Engine
    from amelio.search.engines.tantivy import TantivyEngine

    if not _COLLECTION.match(name):
        raise InvalidInput(
            f"A collection name is lowercase letters, digits, - and _, not {name!r}.",
            field="collection",
        )
    kind = "fts5" if settings.search_backend == "fts5" else DEFAULT_ENGINE
    key = (settings.data_dir.resolve(), name, kind)
    with _collections_lock:
        store = _collections.get(key)
        if store is None:
            path = settings.data_dir / "search" / "collections" / name / "corpus.db"
            store = Fts5Engine(path) if kind == "fts5" else TantivyEngine(path)
            if len(_collections) >= 256:  # bounded however many notebooks come and go
                _collections.clear()
            _collections[key] = store
    return store
