"""The ``fts5`` engine: the document store's SQLite file indexed by FTS5.

Why keep FTS5 beside tantivy: it ships inside Python's ``sqlite3`` (no native
wheel at all), its ``bm25()`` is a real inverted-index BM25 that answers from
disk, and the index lives in the same file and the same transactions as the
documents. Its cost is the cold path: a new OR query over 100k synthetic
documents that matches most of them costs 100–200 ms, since FTS5 scores every
match before it keeps the best (``benchmarks/search_latency.py``); tantivy's
block-max pruning skips most of them, which is why ``embedded`` is tantivy.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from amelio.search.documents import Document, Hit
from amelio.search.store import DocumentStore
from amelio.text import SEARCH

__all__ = ["Fts5Engine", "match_expression"]

_FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    title, body, content='docs', content_rowid='rowid',
    tokenize='unicode61 remove_diacritics 2'
);
"""
#: BM25 with title matches counted double (a title is what an article is about),
#: negated (FTS5's bm25() is lower-is-better). The order, the ``LIMIT`` cut and the
#: reported score are that one number: ordering by FTS5's default ``rank``
#: (unweighted) while reporting the weighted score once showed results out of
#: order and cut title matches from the candidates. Sorting on it in SQL rather
#: than giving the weights to ``rank`` (``rank MATCH 'bm25(2.0, 1.0)' ORDER BY
#: rank``, FTS5's sorted path): same results, and about 10 % less CPU at 100k
#: documents, since SQLite keeps only the best ``LIMIT`` rows while FTS5 sorts
#: every match. Ties go to the earlier document, so a ranking replays exactly.
_LEXICAL = (
    "SELECT d.doc_id, -bm25(fts, 2.0, 1.0) AS s FROM fts JOIN docs d "
    "ON d.rowid = fts.rowid WHERE fts MATCH ? ORDER BY s DESC, d.rowid LIMIT ?"
)


def match_expression(query: str) -> str:
    """An FTS5 query that ORs the search analyzer's terms of ``query``
    (:data:`amelio.text.SEARCH`, which splits words as FTS5's unicode61 does), or an
    empty string when it has none. Every word is quoted, so FTS5 operators a person
    typed (``NOT``, ``*``, ``:``) are plain words."""
    return " OR ".join(f'"{w}"' for w in SEARCH.query_terms(query))


def _has_fts_table(path: Path) -> bool:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'fts'").fetchone() is not None


class Fts5Engine(DocumentStore):
    """The document store with its FTS5 index, in one SQLite file (``fts5``).

    The index is external-content FTS5 over the ``docs`` table, written in the
    same transaction as each document; its stamp (``fts5_generation`` in
    ``meta``) falls behind only when another engine wrote the store, and then
    FTS5's own ``rebuild`` brings it back."""

    name = "fts5"

    def __init__(self, path: Path) -> None:
        # A store written before the stamp existed was kept by FTS5 all along: its
        # index is current. One another engine filled has no index yet: stamp 0.
        had_index = path.exists() and _has_fts_table(path)
        super().__init__(path)
        with contextlib.closing(self._connect()) as conn, conn:
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) SELECT 'fts5_generation', "
                "CASE WHEN ? THEN value ELSE 0 END FROM meta WHERE key = 'generation'",
                (had_index,),
            )

    @classmethod
    def for_workspace(cls, data_dir: Path) -> Fts5Engine:
        return cls(data_dir / "search" / "corpus.db")

    def _index_schema(self) -> str:
        return _FTS_SCHEMA

    def _index_add(self, conn: sqlite3.Connection, rowid: int, doc: Document) -> None:
        conn.execute(
            "INSERT INTO fts (rowid, title, body) VALUES (?, ?, ?)", (rowid, doc.title, doc.body)
        )

    def _index_remove(
        self, conn: sqlite3.Connection, rowid: int, doc_id: str, title: str, body: str
    ) -> None:
        # An external-content index forgets a row only when told its old text.
        conn.execute(
            "INSERT INTO fts (fts, rowid, title, body) VALUES ('delete', ?, ?, ?)",
            (rowid, title, body),
        )

    def _index_commit(self, conn: sqlite3.Connection, generation: int) -> None:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'fts5_generation'", (generation,))

    def _index_rebuild(self, conn: sqlite3.Connection, generation: int) -> None:
        conn.execute("INSERT INTO fts (fts) VALUES ('rebuild')")
        self._index_commit(conn, generation)

    def index_generation(self) -> int | None:
        row = self._reader.execute(
            "SELECT value FROM meta WHERE key = 'fts5_generation'"
        ).fetchone()
        return int(row[0]) if row else None

    def lexical(self, query: str, limit: int) -> list[Hit]:
        """The best ``limit`` documents by BM25 (higher is better)."""
        expression = match_expression(query)
        if not expression:
            return []
        stamps = dict(
            self._reader.execute(
                "SELECT key, value FROM meta WHERE key IN ('generation', 'fts5_generation')"
            )
        )
        if stamps.get("generation") != stamps.get("fts5_generation"):
            self.ensure_index()
        rows = self._reader.execute(_LEXICAL, (expression, limit)).fetchall()
        return [Hit(doc_id, float(score)) for doc_id, score in rows]
