"""The embedded engines' document store: one SQLite file that keeps the documents,
their vectors and the generation, under a lexical index an engine adds.

Why SQLite: it ships with Python, one file under the workspace
(``.amelio/search/corpus.db``) is shared by ``amelio serve`` and every CLI
command whatever the relational database is, and WAL lets searches read while
an import writes. The lexical index is the engine's (FTS5 in the same file,
or a tantivy index beside it): :class:`DocumentStore` calls its hooks inside
each write batch, so the documents and their index change together, and keeps
the index's own generation (its *stamp*) so that an index left behind — by a
crash, or by another engine writing the same store — is rebuilt from the
documents before it answers (:meth:`DocumentStore.reindex`).

Semantic search keeps one unit vector per document (float32, in the
``vectors`` table, tagged with the model's name). Documents are embedded while
they are imported when an embedder is given, and any still missing the first
time a semantic search needs them, so the vectors heal themselves too. They are
held in memory as one matrix and scored by a brute-force dot product (numpy):
exact, about 10 ms at 100k documents; past that, Vespa's approximate
nearest-neighbour index is the scale-out path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from amelio.errors import InvalidInput
from amelio.search.documents import Deletion, Document, Hit, ImportReport, best, read_documents

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from amelio.embeddings import Embedder

__all__ = ["EMBED_CHARS", "DocumentStore"]

log = logging.getLogger("amelio.search")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    rowid INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    extra TEXT NOT NULL
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
INSERT OR IGNORE INTO meta (key, value) VALUES ('vectors', 0);
"""
#: What a document's embedding is computed from: its start says what it is about,
#: and a static-embedding average only blurs with more text.
EMBED_CHARS = 2000
_EMBED_BATCH = 256
#: The text a document is embedded from (bind EMBED_CHARS), in SQL: one definition, so
#: what the server embeds and what it hands to others to embed never drift apart.
_EMBED_TEXT = "substr(d.title || char(10) || d.body, 1, ?)"


class _Matrix(NamedTuple):
    """The store's vectors for one model, as of one generation and vectors stamp."""

    stamp: tuple[int, int]
    model: str
    doc_ids: list[str]
    rows: dict[str, int]
    vectors: npt.NDArray[np.float32]


def _generation(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])


def _stamp(conn: sqlite3.Connection) -> tuple[int, int]:
    rows = dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('generation', 'vectors')"
        ).fetchall()
    )
    return int(rows.get("generation", 0)), int(rows.get("vectors", 0))


def _stored_vectors(
    conn: sqlite3.Connection, model: str
) -> tuple[tuple[int, int], list[tuple[str, bytes]]]:
    """The stamp, then every ``(doc_id, vector)`` of ``model``: read in that order, the
    vectors are at least as new as the stamp, so a write between the two reads costs
    one more reload at worst, never a stale matrix kept."""
    stamp = _stamp(conn)
    rows: list[tuple[str, bytes]] = conn.execute(
        "SELECT d.doc_id, v.vec FROM vectors v JOIN docs d ON d.rowid = v.rowid "
        "WHERE v.model = ? ORDER BY d.rowid",
        (model,),
    ).fetchall()
    return stamp, rows


def _bump_vectors(conn: sqlite3.Connection) -> None:
    """Vectors that came from elsewhere (browsers, ``amelio corpus embed``) change
    semantic rankings without changing the documents: a counter of their own tells
    every process's matrix and ranking cache, and leaves the lexical index alone.
    (Opening the store creates the row.)"""
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'vectors'")


class DocumentStore(ABC):
    """Documents, vectors and generation in one SQLite file; subclasses add the
    lexical index through the ``_index_*`` hooks and :meth:`lexical`.

    Thread-safe: each thread gets its own read connection; writes are serialized
    by SQLite itself (WAL, busy timeout), across processes too."""

    #: The registry name (see :mod:`amelio.search.engines.registry`).
    name = "store"
    #: Leave documents without a vector to browsers (the ``contributions`` setting):
    #: a semantic search then ranks the documents that have one, instead of
    #: embedding the rest itself first, which would leave browsers nothing to do.
    #: :meth:`embed_missing` (``amelio corpus embed``) is the server's fallback.
    defer_missing_vectors = False

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._matrix: _Matrix | None = None
        self._matrix_lock = threading.Lock()
        with self._connect() as conn:
            conn.executescript(_SCHEMA + self._index_schema())

    @classmethod
    def for_workspace(cls, data_dir: Path) -> DocumentStore:
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
            self._index_abort()
            raise
        finally:
            conn.close()

    @property
    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    # -- the lexical index's hooks (the engine's) ---------------------------------------

    def _index_schema(self) -> str:
        """SQL run with the store's schema (an index kept in the same file)."""
        return ""

    @abstractmethod
    def _index_add(self, conn: sqlite3.Connection, rowid: int, doc: Document) -> None:
        """Index a document just stored (inside the write transaction)."""

    @abstractmethod
    def _index_remove(
        self, conn: sqlite3.Connection, rowid: int, doc_id: str, title: str, body: str
    ) -> None:
        """Forget a document about to be deleted (inside the write transaction)."""

    @abstractmethod
    def _index_commit(self, conn: sqlite3.Connection, generation: int) -> None:
        """Make the batch's index changes durable as ``generation``, before the store
        commits it; an index outside the file records that it is behind first."""

    def _index_abort(self) -> None:
        """Drop the batch's index changes (the store's transaction rolled back); an
        index in the store's own file rolls back with it."""
        return

    def index_generation(self) -> int | None:
        """The generation the lexical index reflects (None: unknown, rebuild it)."""
        return self.generation()

    @abstractmethod
    def _index_rebuild(self, conn: sqlite3.Connection, generation: int) -> None:
        """Index every stored document again, inside the write transaction."""

    # -- writes -----------------------------------------------------------------------

    def apply(
        self,
        items: Iterable[Document | Deletion],
        *,
        batch: int = 5000,
        embedder: Embedder | None = None,
    ) -> ImportReport:
        """Upsert documents and apply deletions, committing every ``batch`` items; with
        an ``embedder``, each upserted document's vector is written with it."""
        upserted = deleted = 0
        with self._writer() as conn:
            self._catch_up(conn)
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
        generation = _generation(conn)
        self._index_commit(conn, generation)
        conn.execute("COMMIT")

    def import_file(self, path: Path, *, embedder: Embedder | None = None) -> ImportReport:
        """Import a BEIR or NDJSON file; a bad line stops the import before anything of
        it is written (the file is checked first), so a typo never half-imports."""
        items = list(read_documents(path))
        return self.apply(items, embedder=embedder)

    def ensure_index(self) -> None:
        """Rebuild the lexical index if it is behind the documents: left behind by a
        crash, or by another engine writing this store. Readers call it when the
        generation moved, so a stale index is rebuilt before it answers."""
        if self.index_generation() != self.generation():
            with self._writer() as conn:
                self._catch_up(conn)
                conn.execute("COMMIT")

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        """Under the write lock: rebuild the index unless it reflects the store (a
        rebuild another process finished meanwhile is not repeated)."""
        generation = _generation(conn)
        if self.index_generation() != generation:
            self._rebuild(conn, generation)

    def _rebuild(self, conn: sqlite3.Connection, generation: int) -> None:
        started = time.perf_counter()
        self._index_rebuild(conn, generation)
        count = int(conn.execute("SELECT count(*) FROM docs").fetchone()[0])
        log.warning(
            "search index (%s) rebuilt from %d documents in %.1f s",
            self.name,
            count,
            time.perf_counter() - started,
        )

    def embed_missing(self, embedder: Embedder) -> int:
        """Embed, here, every document that has no vector for ``embedder``'s model and
        return how many: what browsers were left to do (``contributions``), when the
        operator would rather not wait for them."""
        with self._writer() as conn:
            count = self._embed_missing(conn, embedder)
            if count:
                _bump_vectors(conn)
            conn.execute("COMMIT")
        return count

    def reindex(self) -> int:
        """Index every stored document again, under the store's write lock, and
        return how many there are: ``amelio search reindex``, after the engine
        changed (``search_backend``) or to start an index afresh."""
        with self._writer() as conn:
            generation = _generation(conn)
            self._rebuild(conn, generation)
            conn.execute("COMMIT")
        return self.count()

    @staticmethod
    def _embed_missing(conn: sqlite3.Connection, embedder: Embedder) -> int:
        """Embed the documents that have no vector for ``embedder.model`` (in the
        caller's transaction); similar lengths are batched together, so little
        padding is computed."""
        from amelio.embeddings import embed_matrix

        missing = conn.execute(
            f"SELECT d.rowid, {_EMBED_TEXT} AS t FROM docs d "  # noqa: S608
            "LEFT JOIN vectors v ON v.rowid = d.rowid AND v.model = ? WHERE v.rowid IS NULL",
            (EMBED_CHARS, embedder.model),
        ).fetchall()
        missing.sort(key=lambda r: len(r[1]))
        for start in range(0, len(missing), _EMBED_BATCH):
            chunk = missing[start : start + _EMBED_BATCH]
            vectors = embed_matrix(embedder, [t for _, t in chunk])
            if vectors.shape[0] != len(chunk):
                raise InvalidInput(
                    f"The {embedder.model} embedder returned "
                    f"{vectors.shape[0]} vectors for {len(chunk)} texts."
                )
            conn.executemany(
                "INSERT OR REPLACE INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                [
                    (rowid, embedder.model, v.tobytes())
                    for (rowid, _), v in zip(chunk, vectors, strict=True)
                ],
            )
        return len(missing)

    def _delete(self, conn: sqlite3.Connection, doc_id: str) -> int:
        row = conn.execute(
            "SELECT rowid, title, body FROM docs WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        if row is None:
            return 0
        self._index_remove(conn, row[0], doc_id, row[1], row[2])
        conn.execute("DELETE FROM docs WHERE rowid = ?", row[:1])
        conn.execute("DELETE FROM vectors WHERE rowid = ?", row[:1])
        return 1

    def _upsert(self, conn: sqlite3.Connection, doc: Document) -> None:
        self._delete(conn, doc.doc_id)
        cursor = conn.execute(
            "INSERT INTO docs (doc_id, title, body, extra) VALUES (?, ?, ?, ?)",
            (doc.doc_id, doc.title, doc.body, json.dumps(doc.extra, ensure_ascii=False)),
        )
        assert cursor.lastrowid is not None
        self._index_add(conn, cursor.lastrowid, doc)

    def put_vectors(
        self,
        model: str,
        vectors: Mapping[str, Sequence[float] | npt.NDArray[np.float32]],
        *,
        texts: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Store vectors computed elsewhere (knowledge keeps its chunks' embeddings in
        the database; browsers lend theirs) for the stored documents among
        ``vectors``' keys; returns the ids it skipped. With ``texts`` (what each
        vector was computed from), a document whose embed text is no longer that is
        skipped too, compared inside this write transaction: however an update races
        the vectors, a document never keeps a vector of its old text. Derived data:
        the generation stays (the lexical index is untouched); :meth:`stamp` moves, so
        semantic rankings follow."""
        import numpy as np

        marks = ",".join("?" * len(vectors))  # placeholders only: values are bound
        text = _EMBED_TEXT if texts is not None else "NULL"
        with self._writer() as conn:
            found = (
                conn.execute(
                    f"SELECT d.doc_id, d.rowid, {text} FROM docs d "  # noqa: S608
                    f"WHERE d.doc_id IN ({marks})",
                    [EMBED_CHARS, *vectors] if texts is not None else list(vectors),
                ).fetchall()
                if vectors
                else []
            )
            rows = [
                (doc_id, rowid)
                for doc_id, rowid, now in found
                if texts is None or texts.get(doc_id) == now
            ]
            conn.executemany(
                "INSERT OR REPLACE INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                [
                    (rowid, model, np.asarray(vectors[doc_id], np.float32).tobytes())
                    for doc_id, rowid in rows
                ],
            )
            if rows:
                _bump_vectors(conn)
            conn.execute("COMMIT")
        written = {doc_id for doc_id, _ in rows}
        return [doc_id for doc_id in vectors if doc_id not in written]

    def get_meta(self, key: str) -> int | None:
        """A number kept with the store under ``key`` (what a collection reflects)."""
        row = self._reader.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def set_meta(self, key: str, value: int) -> None:
        with self._writer() as conn:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
            conn.execute("COMMIT")

    # -- reads ------------------------------------------------------------------------

    def doc_ids(self) -> set[str]:
        """Every stored document's id."""
        return {r[0] for r in self._reader.execute("SELECT doc_id FROM docs")}

    def count(self) -> int:
        row = self._reader.execute("SELECT count(*) FROM docs").fetchone()
        return int(row[0])

    def generation(self) -> int:
        """A number every write to the store bumps (in any process)."""
        row = self._reader.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def stamp(self) -> tuple[int, int]:
        """:meth:`generation`, and a number bumped whenever vectors computed elsewhere
        are stored (in any process): what semantic rankings depend on, in one read."""
        return _stamp(self._reader)

    @abstractmethod
    def lexical(self, query: str, limit: int) -> list[Hit]:
        """The best ``limit`` documents by BM25 (higher is better): the engine's."""

    def nearest(
        self, query: str, limit: int, embedder: Embedder, *, also: Sequence[str] = ()
    ) -> tuple[list[Hit], dict[str, float]]:
        """The ``limit`` documents nearest ``query`` by cosine, and the cosine of each
        document of ``also`` that has a vector."""
        import numpy as np

        [vector] = embedder.embed([query])
        matrix = self._vectors(embedder)
        if not matrix.doc_ids:  # nothing embedded yet (an empty store, or left to browsers)
            return [], {}
        query_vector = np.asarray(vector, dtype=np.float32)
        if query_vector.shape != (matrix.vectors.shape[1],):
            raise InvalidInput(
                f"The query vector has shape {query_vector.shape}; the "
                f"store's {matrix.model} vectors have "
                f"{matrix.vectors.shape[1]} dimensions."
            )
        scores = matrix.vectors @ query_vector
        return (
            best(scores, matrix.doc_ids, limit),
            {d: float(scores[matrix.rows[d]]) for d in also if d in matrix.rows},
        )

    def _vectors(self, embedder: Embedder) -> _Matrix:
        """The in-memory matrix for ``embedder``'s model, reloaded when the store
        changed; documents without a vector are embedded first (unless they are left
        to browsers: :attr:`defer_missing_vectors`)."""
        import numpy as np

        stamp = self.stamp()
        matrix = self._matrix
        if matrix is not None and matrix.stamp == stamp and matrix.model == embedder.model:
            return matrix
        with self._matrix_lock:
            matrix = self._matrix
            if matrix is not None and matrix.stamp == stamp and matrix.model == embedder.model:
                return matrix
            if self.defer_missing_vectors:
                # Nothing to write: read as any search does, not under the write lock
                # that browsers' vectors (put_vectors) wait for.
                stamp, rows = _stored_vectors(self._reader, embedder.model)
            else:
                # Vectors are derived data: filling them in keeps the generation, so
                # the cached rankings of other processes stay valid.
                with self._writer() as conn:
                    self._embed_missing(conn, embedder)
                    conn.execute("COMMIT")
                    stamp, rows = _stored_vectors(conn, embedder.model)
            doc_ids = [r[0] for r in rows]
            vectors = (
                np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                if rows
                else np.zeros((0, 1), np.float32)
            )
            matrix = _Matrix(
                stamp, embedder.model, doc_ids, {d: i for i, d in enumerate(doc_ids)}, vectors
            )
            self._matrix = matrix
            return matrix

    def missing_vectors(
        self, model: str, *, limit: int | None = None, doc_ids: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """``(doc_id, text)`` of the documents without a vector for ``model``, oldest
        first, each text exactly what :meth:`_embed_missing` would embed; at most
        ``limit``, and only among ``doc_ids`` when given. Browsers that lend compute
        embed these (:mod:`amelio.contributions`), and the same call tells whether a
        task's texts are still the documents' when its vectors come back."""
        sql = (
            f"SELECT d.doc_id, {_EMBED_TEXT} FROM docs d LEFT JOIN vectors v "  # noqa: S608
            "ON v.rowid = d.rowid AND v.model = ? WHERE v.rowid IS NULL"
        )
        params: list[object] = [EMBED_CHARS, model]
        if doc_ids is not None:
            if not doc_ids:
                return []
            sql += f" AND d.doc_id IN ({','.join('?' * len(doc_ids))})"  # placeholders only
            params += list(doc_ids)
        sql += " ORDER BY d.rowid"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(limit, 0))
        return [(r[0], r[1]) for r in self._reader.execute(sql, params)]

    def documents(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        """The stored documents among ``doc_ids``."""
        if not doc_ids:
            return {}
        marks = ",".join("?" * len(doc_ids))  # placeholders only: values are bound
        rows = self._reader.execute(
            f"SELECT doc_id, title, body, extra FROM docs WHERE doc_id IN ({marks})",  # noqa: S608
            list(doc_ids),
        ).fetchall()
        return {r[0]: Document(r[0], r[1], r[2], json.loads(r[3])) for r in rows}

    def all_documents(self) -> Iterator[Document]:
        conn = self._connect()
        try:
            for r in conn.execute("SELECT doc_id, title, body, extra FROM docs ORDER BY rowid"):
                yield Document(r[0], r[1], r[2], json.loads(r[3]))
        finally:
            conn.close()
