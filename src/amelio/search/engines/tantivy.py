"""The ``tantivy`` engine (``embedded``, the default): BM25 on a tantivy index beside
the SQLite document store.

Why tantivy: a search for a few common words matches most of a corpus, and
FTS5 scores every match before it keeps the best, so its cold queries grow with
the corpus (100–200 ms at 100k documents). Tantivy answers top-k with block-max
WAND: each block of a posting list carries its best possible score, and blocks
that cannot enter the current top-k are skipped unread. It ships as a wheel
(``tantivy`` on PyPI, Rust inside), needs no server, and its index is a folder
(``.amelio/search/tantivy/``) that every process on the machine opens.

What is indexed, and how it scores: the folded word tokens
(:func:`amelio.text.tokens`, apostrophes split, as FTS5's ``unicode61`` splits
them) in one field, the title's written twice, so that a title match counts
double as FTS5's ``bm25(fts, 2.0, 1.0)`` counts it. The candidates and their
scores are tantivy's own BM25 (k1 = 1.2, b = 0.75, idf ``ln(1 + (N − n + ½) /
(n + ½))``), taken as tantivy returns them: nothing is read back or scored
again in Python. Its idf stays above zero for words most documents hold, where
FTS5's falls to nothing; the first phase min-max normalizes the candidates'
scores anyway, and ``search_beta`` (the feedback's weight against them) was
tuned on these scores (docs/search.md). Search asks for no match count: counting
every match would visit them all, where block-max WAND skips the blocks that
cannot enter the top-k. The documents, their vectors and the generation stay
in the store (:mod:`amelio.search.store`).

Consistency with the store: each write batch goes to the index and to the
store together. The index's *stamp* (a small file in its folder) names the
store generation it reflects; it reads ``dirty`` while a batch is committed to
the index and before the store commits it, so a crash in between leaves an
index that is rebuilt from the documents when next opened, never one that
silently disagrees. Writers are serialized by the store's write lock (SQLite's,
across processes), which they take before tantivy's own writer lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import tantivy

from amelio.search.documents import Document, Hit
from amelio.search.store import DocumentStore
from amelio.text import SEARCH

__all__ = ["TantivyEngine", "query_terms"]

log = logging.getLogger("amelio.search")

_STAMP = "amelio-generation"
_DIRTY = "dirty"
#: The writer's memory budget: tantivy flushes a segment when it is spent.
_WRITER_HEAP = 128_000_000


def _words(text: str) -> list[str]:
    """The search analyzer's terms of ``text`` (:data:`amelio.text.SEARCH`, which
    splits as FTS5's unicode61 does): what the index holds."""
    return SEARCH.analyze(text)


def query_terms(text: str) -> list[str]:
    """The words of a query as the index holds them, each once, in order."""
    return SEARCH.query_terms(text)


def _document(doc_id: str, title: list[str], body: list[str]) -> tantivy.Document:
    """A document as the index holds it: the title's words twice, then the body's."""
    words = " ".join(title)
    return tantivy.Document(doc_id=doc_id, text=f"{words} {words} {' '.join(body)}")


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("doc_id", stored=True, tokenizer_name="raw")
    # Frequencies, no positions: BM25 needs nothing more, and the index is smaller.
    builder.add_text_field("text", stored=False, tokenizer_name="whitespace", index_option="freq")
    return builder.build()


class TantivyEngine(DocumentStore):
    """The document store with a tantivy BM25 index in ``index_dir``."""

    name = "tantivy"

    def __init__(self, path: Path, index_dir: Path | None = None) -> None:
        self.index_dir = index_dir or path.parent / "tantivy"
        self.index_dir.mkdir(parents=True, exist_ok=True)
        self._schema = _schema()
        self._index = self._open_index()
        self._writer_obj: Any = None
        self._write_lock = threading.Lock()
        self._loaded: int | None = None  # the store generation the searcher was loaded at
        self._load_lock = threading.Lock()
        super().__init__(path)

    def _open_index(self) -> tantivy.Index:
        """The index in ``index_dir``; one written with another schema (an older
        Amelio's) is derived data: it is set aside and rebuilt from the store."""
        try:
            return tantivy.Index(self._schema, path=str(self.index_dir), reuse=True)
        except ValueError as exc:
            log.warning(
                "the search index in %s does not match this version (%s); it "
                "is rebuilt from the documents",
                self.index_dir,
                exc,
            )
            shutil.rmtree(self.index_dir)
            self.index_dir.mkdir(parents=True)
            return tantivy.Index(self._schema, path=str(self.index_dir), reuse=True)

    @classmethod
    def for_workspace(cls, data_dir: Path) -> TantivyEngine:
        return cls(data_dir / "search" / "corpus.db")

    # -- the stamp ------------------------------------------------------------------

    def _stamp_path(self) -> Path:
        return self.index_dir / _STAMP

    def _write_stamp(self, value: str) -> None:
        # Written whole or not at all: a reader never sees half a number.
        tmp = self.index_dir / f".{_STAMP}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(value, encoding="ascii")
        tmp.replace(self._stamp_path())

    def index_generation(self) -> int | None:
        try:
            text = self._stamp_path().read_text(encoding="ascii").strip()
        except FileNotFoundError:
            # A new index over a store nobody wrote yet is current; over one that
            # another engine filled (or a lost index) it is empty: rebuild.
            return (
                0
                if self._index.searcher().num_docs == 0
                and self.count() == 0
                and self.generation() == 0
                else None
            )
        return int(text) if text.isdigit() else None

    # -- the write hooks (called under the store's write lock) -------------------------

    def _tantivy_writer(self) -> Any:
        if self._writer_obj is None:
            self._write_lock.acquire()
            self._writer_obj = self._index.writer(_WRITER_HEAP, 1)
        return self._writer_obj

    def _release_writer(self) -> None:
        writer, self._writer_obj = self._writer_obj, None
        if writer is not None:
            try:
                writer.wait_merging_threads()  # releases tantivy's writer lock
            finally:
                self._write_lock.release()

    def _index_add(self, conn: sqlite3.Connection, rowid: int, doc: Document) -> None:
        self._tantivy_writer().add_document(
            _document(doc.doc_id, _words(doc.title), _words(doc.body))
        )

    def _index_remove(
        self, conn: sqlite3.Connection, rowid: int, doc_id: str, title: str, body: str
    ) -> None:
        self._tantivy_writer().delete_documents_by_term("doc_id", doc_id)

    def _index_commit(self, conn: sqlite3.Connection, generation: int) -> None:
        if self._writer_obj is None:  # a batch that changed no document
            if self.index_generation() == generation - 1:
                self._write_stamp(str(generation))
            return
        self._write_stamp(_DIRTY)
        try:
            self._writer_obj.commit()
        finally:
            self._release_writer()
        self._write_stamp(str(generation))

    def _index_abort(self) -> None:
        if self._writer_obj is not None:
            try:
                self._writer_obj.rollback()
            finally:
                self._release_writer()

    def _index_rebuild(self, conn: sqlite3.Connection, generation: int) -> None:
        writer = self._tantivy_writer()
        self._write_stamp(_DIRTY)
        writer.delete_all_documents()
        for doc_id, title, body in conn.execute(
            "SELECT doc_id, title, body FROM docs ORDER BY rowid"
        ):
            writer.add_document(_document(doc_id, _words(title), _words(body)))
        try:
            writer.commit()
        finally:
            self._release_writer()
        self._write_stamp(str(generation))

    # -- reads ------------------------------------------------------------------------

    def _searcher(self) -> tantivy.Searcher:
        """A searcher on the index as of the store's generation: reloaded when
        another process (or this one) wrote, rebuilt first if the index is behind."""
        generation = self.generation()
        if generation != self._loaded:
            with self._load_lock:
                if generation != self._loaded:
                    if self.index_generation() != generation:
                        self.ensure_index()
                    self._index.reload()
                    self._loaded = generation
        return self._index.searcher()

    def lexical(self, query: str, limit: int) -> list[Hit]:
        """The best ``limit`` documents by tantivy's BM25 (higher is better), in
        tantivy's order (equal scores: the earlier document in its segment)."""
        words = query_terms(query)
        if not words or limit <= 0:
            return []
        terms = [
            (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", w)) for w in words
        ]
        searcher = self._searcher()
        found = searcher.search(tantivy.Query.boolean_query(terms), limit, count=False)
        return [Hit(searcher.doc(address)["doc_id"][0], score) for score, address in found.hits]
