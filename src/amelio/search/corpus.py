"""The corpus: documents read from BEIR JSONL or NDJSON, kept in an SQLite FTS5 index.

Why FTS5: it ships inside Python's ``sqlite3`` (no extra dependency, no native
wheel), its ``bm25()`` is a real inverted-index BM25 that answers from disk,
and one file under the workspace (``.amelio/search/corpus.db``) is shared by
``amelio serve`` and every CLI command, whatever the relational database is.
Measured on this machine (``benchmarks/search_latency.py``): a new OR query over
100k synthetic documents, matching most of them, costs about 120–150 ms of CPU
(the cost grows with the matches); a repeated query is a hit in the searcher's
cache, not a search.

Two input layouts are read, line by line:

* BEIR: ``{"_id", "title", "text", ...}``;
* NDJSON: ``{"docId", "title", "body", ...}``.

Other fields are kept as the document's ``extra``. A line with ``"deleted":
true`` (or ``"op": "delete"``) deletes its document; a known id is replaced.

Semantic search keeps one unit vector per document (float32, in the ``vectors``
table, tagged with the model's name) next to the text. Documents are embedded
while they are imported when an embedder is given, and any still missing (a
corpus imported before the extra was installed, or for another model) the first
time a semantic search needs them, so the index heals itself. The vectors are
held in memory as one matrix and scored by a brute-force dot product (numpy):
exact, and fast enough for a one-machine corpus (about 10 ms at 100k documents);
past that, Vespa's approximate nearest-neighbour index is the scale-out path.
Every write bumps the corpus *generation*, which invalidates that matrix and
the searcher's cached rankings in every process sharing the file.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from amelio.errors import InvalidInput
from amelio.text import tokens

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from amelio.embeddings import Embedder

__all__ = ["Corpus", "Document", "Hit", "ImportReport", "LexicalHit", "parse_line",
           "read_documents"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    rowid INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    extra TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    title, body, content='docs', content_rowid='rowid',
    tokenize='unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS vectors (
    rowid INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    vec BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', 0);
"""
#: What a document's embedding is computed from: its start says what it is about,
#: and a static-embedding average only blurs with more text.
EMBED_CHARS = 2000
_EMBED_BATCH = 256
#: BM25 with title matches counted double (a title is what an article is about),
#: negated (FTS5's bm25() is lower-is-better). The order, the ``LIMIT`` cut and the
#: reported score are that one number: ordering by FTS5's default ``rank``
#: (unweighted) while reporting the weighted score once showed results out of
#: order and cut title matches from the candidates. Sorting on it in SQL rather
#: than giving the weights to ``rank`` (``rank MATCH 'bm25(2.0, 1.0)' ORDER BY
#: rank``, FTS5's sorted path): same results, and about 10 % less CPU at 100k
#: documents, since SQLite keeps only the best ``LIMIT`` rows while FTS5 sorts
#: every match. Ties go to the earlier document, so a ranking replays exactly.
_LEXICAL = ("SELECT d.doc_id, -bm25(fts, 2.0, 1.0) AS s FROM fts JOIN docs d "
            "ON d.rowid = fts.rowid WHERE fts MATCH ? ORDER BY s DESC, d.rowid LIMIT ?")


@dataclass(frozen=True)
class Document:
    """One searchable document; ``extra`` keeps the input's other fields."""

    doc_id: str
    title: str
    body: str
    extra: dict[str, Any] = field(default_factory=dict)


class Deletion(NamedTuple):
    doc_id: str


class Hit(NamedTuple):
    doc_id: str
    score: float


#: The lexical engine's hits (BM25, higher is better).
LexicalHit = Hit


class _Matrix(NamedTuple):
    """The corpus's vectors for one model, as of one generation."""

    generation: int
    model: str
    doc_ids: list[str]
    rows: dict[str, int]
    vectors: npt.NDArray[np.float32]


@dataclass(frozen=True)
class ImportReport:
    upserted: int
    deleted: int
    total: int

    def to_dict(self) -> dict[str, int]:
        return {"upserted": self.upserted, "deleted": self.deleted, "total": self.total}


def parse_line(record: object, where: str) -> Document | Deletion:
    """A decoded JSON line as a document or a deletion; :class:`InvalidInput` naming
    ``where`` (file and line) otherwise."""
    if not isinstance(record, dict):
        raise InvalidInput(f"{where}: a document is a JSON object.")
    raw_id = record.get("_id", record.get("docId"))
    if not isinstance(raw_id, str | int) or isinstance(raw_id, bool) or str(raw_id) == "":
        raise InvalidInput(f"{where}: the document has no id: give \"_id\" (BEIR) or "
                           "\"docId\" (NDJSON).", field="_id")
    doc_id = str(raw_id)
    if len(doc_id) > 256:
        raise InvalidInput(f"{where}: the id is longer than 256 characters.", field="_id")
    if record.get("deleted") is True or record.get("op") == "delete":
        return Deletion(doc_id)
    title = record.get("title") or ""
    body = record.get("text", record.get("body")) or ""
    if not isinstance(title, str) or not isinstance(body, str):
        raise InvalidInput(f"{where}: title and text/body must be strings.")
    extra = {k: v for k, v in record.items()
             if k not in ("_id", "docId", "title", "text", "body", "op", "deleted")}
    return Document(doc_id, title, body, extra)


def read_documents(path: Path) -> Iterator[Document | Deletion]:
    """The documents and deletions of a JSONL file, in order (errors name the line)."""
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{where}: not valid JSON ({exc.msg}).") from exc
            yield parse_line(record, where)


def match_expression(query: str) -> str:
    """An FTS5 query that ORs the folded words of ``query`` (BM25 ranks them), or
    an empty string when it has none. Every word is quoted, so FTS5 operators a
    person typed (``NOT``, ``*``, ``:``) are plain words."""
    words: dict[str, None] = {}
    for token in tokens(query):
        for part in token.replace("'", " ").split():
            words[part] = None
    return " OR ".join(f'"{w}"' for w in words)


def best(scores: npt.NDArray[np.float32], doc_ids: Sequence[str], limit: int) -> list[Hit]:
    """The ``limit`` best of ``scores`` (one per ``doc_ids``), by score then position."""
    import numpy as np

    if not len(scores) or limit <= 0:
        return []
    k = min(limit, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.lexsort((top, -scores[top]))]
    return [Hit(doc_ids[i], float(scores[i])) for i in top]


class Corpus:
    """The document store and its FTS5 index, in one SQLite file.

    Thread-safe: each thread gets its own read connection; writes are serialized
    by SQLite itself (WAL, busy timeout)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._matrix: _Matrix | None = None
        self._matrix_lock = threading.Lock()
        with self._connect() as conn:
            conn.executescript(_SCHEMA)

    @classmethod
    def for_workspace(cls, data_dir: Path) -> Corpus:
        return cls(data_dir / "search" / "corpus.db")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    @contextlib.contextmanager
    def _writer(self) -> Iterator[sqlite3.Connection]:
        """A write connection inside BEGIN IMMEDIATE: rolled back on any error (an
        import is all or nothing per batch), always closed."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    @property
    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    # -- writes -----------------------------------------------------------------------

    def apply(self, items: Iterable[Document | Deletion], *, batch: int = 5000,
              embedder: Embedder | None = None) -> ImportReport:
        """Upsert documents and apply deletions, committing every ``batch`` items; with
        an ``embedder``, each upserted document's vector is written with it."""
        upserted = deleted = 0
        with self._writer() as conn:
            pending = 0
            for item in items:
                if isinstance(item, Deletion):
                    deleted += self._delete(conn, item.doc_id)
                else:
                    self._upsert(conn, item)
                    upserted += 1
                pending += 1
                if pending >= batch:
                    self._commit(conn, embedder)
                    conn.execute("BEGIN IMMEDIATE")
                    pending = 0
            self._commit(conn, embedder)
        return ImportReport(upserted, deleted, self.count())

    def _commit(self, conn: sqlite3.Connection, embedder: Embedder | None) -> None:
        if embedder is not None:
            self._embed_missing(conn, embedder)
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
        conn.execute("COMMIT")

    def import_file(self, path: Path, *, embedder: Embedder | None = None) -> ImportReport:
        """Import a BEIR or NDJSON file; a bad line stops the import before anything of
        it is written (the file is checked first), so a typo never half-imports."""
        items = list(read_documents(path))
        return self.apply(items, embedder=embedder)

    @staticmethod
    def _embed_missing(conn: sqlite3.Connection, embedder: Embedder) -> int:
        """Embed the documents that have no vector for ``embedder.model`` (in the
        caller's transaction); similar lengths are batched together, so little
        padding is computed."""
        import numpy as np

        missing = conn.execute(
            "SELECT d.rowid, substr(d.title || char(10) || d.body, 1, ?) AS t FROM docs d "
            "LEFT JOIN vectors v ON v.rowid = d.rowid AND v.model = ? WHERE v.rowid IS NULL",
            (EMBED_CHARS, embedder.model)).fetchall()
        missing.sort(key=lambda r: len(r[1]))
        for start in range(0, len(missing), _EMBED_BATCH):
            chunk = missing[start:start + _EMBED_BATCH]
            vectors = np.asarray(embedder.embed([t for _, t in chunk]), dtype=np.float32)
            if vectors.shape[0] != len(chunk):
                raise InvalidInput(f"The {embedder.model} embedder returned "
                                   f"{vectors.shape[0]} vectors for {len(chunk)} texts.")
            conn.executemany("INSERT OR REPLACE INTO vectors (rowid, model, vec) "
                             "VALUES (?, ?, ?)",
                             [(rowid, embedder.model, v.tobytes())
                              for (rowid, _), v in zip(chunk, vectors, strict=True)])
        return len(missing)

    @staticmethod
    def _delete(conn: sqlite3.Connection, doc_id: str) -> int:
        row = conn.execute("SELECT rowid, title, body FROM docs WHERE doc_id = ?",
                           (doc_id,)).fetchone()
        if row is None:
            return 0
        # An external-content index forgets a row only when told its old text.
        conn.execute("INSERT INTO fts (fts, rowid, title, body) VALUES ('delete', ?, ?, ?)", row)
        conn.execute("DELETE FROM docs WHERE rowid = ?", row[:1])
        conn.execute("DELETE FROM vectors WHERE rowid = ?", row[:1])
        return 1

    def _upsert(self, conn: sqlite3.Connection, doc: Document) -> None:
        self._delete(conn, doc.doc_id)
        cursor = conn.execute(
            "INSERT INTO docs (doc_id, title, body, extra) VALUES (?, ?, ?, ?)",
            (doc.doc_id, doc.title, doc.body, json.dumps(doc.extra, ensure_ascii=False)))
        conn.execute("INSERT INTO fts (rowid, title, body) VALUES (?, ?, ?)",
                     (cursor.lastrowid, doc.title, doc.body))

    # -- reads ------------------------------------------------------------------------

    def count(self) -> int:
        row = self._reader.execute("SELECT count(*) FROM docs").fetchone()
        return int(row[0])

    def generation(self) -> int:
        """A number every write to the corpus bumps (in any process)."""
        row = self._reader.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def lexical(self, query: str, limit: int) -> list[Hit]:
        """The best ``limit`` documents by BM25 (higher is better)."""
        expression = match_expression(query)
        if not expression:
            return []
        rows = self._reader.execute(_LEXICAL, (expression, limit)).fetchall()
        return [Hit(doc_id, float(score)) for doc_id, score in rows]

    def similarities(self, query_vector: Sequence[float], embedder: Embedder
                     ) -> tuple[npt.NDArray[np.float32], _Matrix]:
        """Cosine similarity of every document to ``query_vector`` (both unit
        vectors), and the matrix whose rows they follow."""
        import numpy as np

        matrix = self._vectors(embedder)
        query = np.asarray(query_vector, dtype=np.float32)
        if query.shape != (matrix.vectors.shape[1],):
            raise InvalidInput(f"The query vector has shape {query.shape}; the corpus's "
                               f"{matrix.model} vectors have {matrix.vectors.shape[1]} "
                               "dimensions.")
        return matrix.vectors @ query, matrix

    def _vectors(self, embedder: Embedder) -> _Matrix:
        """The in-memory matrix for ``embedder``'s model, reloaded when the corpus
        changed; documents without a vector are embedded first."""
        import numpy as np

        generation = self.generation()
        matrix = self._matrix
        if matrix is not None and matrix.generation == generation \
                and matrix.model == embedder.model:
            return matrix
        with self._matrix_lock:
            matrix = self._matrix
            if matrix is not None and matrix.generation == generation \
                    and matrix.model == embedder.model:
                return matrix
            # Vectors are derived data: filling them in keeps the generation, so the
            # cached rankings of other processes stay valid.
            with self._writer() as conn:
                self._embed_missing(conn, embedder)
                conn.execute("COMMIT")
                generation = int(conn.execute(
                    "SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
                rows = conn.execute(
                    "SELECT d.doc_id, v.vec FROM vectors v JOIN docs d ON d.rowid = v.rowid "
                    "WHERE v.model = ? ORDER BY d.rowid", (embedder.model,)).fetchall()
            doc_ids = [r[0] for r in rows]
            vectors = (np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
                       .reshape(len(rows), -1) if rows else np.zeros((0, 1), np.float32))
            matrix = _Matrix(generation, embedder.model, doc_ids,
                             {d: i for i, d in enumerate(doc_ids)}, vectors)
            self._matrix = matrix
            return matrix

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        """The stored documents among ``doc_ids``."""
        if not doc_ids:
            return {}
        marks = ",".join("?" * len(doc_ids))  # placeholders only: values are bound
        rows = self._reader.execute(
            f"SELECT doc_id, title, body, extra FROM docs WHERE doc_id IN ({marks})",  # noqa: S608
            list(doc_ids)).fetchall()
        return {r[0]: Document(r[0], r[1], r[2], json.loads(r[3])) for r in rows}

    def all_documents(self) -> Iterator[Document]:
        conn = self._connect()
        try:
            for r in conn.execute("SELECT doc_id, title, body, extra FROM docs ORDER BY rowid"):
                yield Document(r[0], r[1], r[2], json.loads(r[3]))
        finally:
            conn.close()
