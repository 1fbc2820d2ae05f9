"""Chunks and the notebook index: lexical (BM25) always, semantic when configured.

A source is cut into chunks of at most ``knowledge_chunk_chars``, on paragraph
boundaries when they fit, else on sentences, else on spaces; Markdown headings
start a new chunk, so a chunk tends to be one section. Each chunk keeps its
character span in the source, which is what a citation points at.

The index is a search engine collection of its own per notebook
(:func:`amelio.search.engines.registry.open_collection`: tantivy by default, FTS5 when
``search_backend = "fts5"``), so knowledge and search share one lexical engine
and one hybrid fusion (:func:`amelio.search.fusion.first_phase`). The chunks
stay in the database, which is the truth every process and machine shares; a
collection is derived from them and catches up before it answers: it records a
fingerprint of its notebook's chunk ids, and a query that finds it different
indexes the chunks added since and forgets those removed. Terms are the
``knowledge`` analyzer's (:data:`amelio.text.KNOWLEDGE`: the folded tokens with
plurals folded, ``refunds`` finds ``refund``; its docstring says why), and the
chunk's source title is indexed with it.

Semantic retrieval is an add-on: when ``knowledge_embedding_model`` names a
model (``wordllama``, shipped with ``amelio[semantic]``, or a sentence-transformers
model with ``amelio[embeddings]``; see :mod:`amelio.embeddings`), each chunk
also stores its embedding, the collection holds the same vectors, and a query
mixes lexical and semantic scores with weight :data:`ALPHA`. Any object with a
``model`` name and an ``embed`` method (:class:`Embedder`) can stand in for it;
tests use a small deterministic one.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.db.schema import knowledge_chunks, knowledge_sources, utcnow
from amelio.embeddings import Embedder, load_embedder
from amelio.knowledge.model import Source, aware
from amelio.search.documents import Deletion, Document
from amelio.search.engines.registry import open_collection
from amelio.search.fusion import first_phase
from amelio.search.store import DocumentStore
from amelio.text import KNOWLEDGE
from amelio.workspace.config import Settings

__all__ = [
    "Embedder",
    "IndexedSource",
    "Passage",
    "Span",
    "chunk_text",
    "collection_name",
    "embedder_for",
    "prepare_source",
    "search",
    "write_source",
]

#: The semantic weight when a notebook has embeddings: lexical and semantic count
#: alike (search's hybrid measured best at 0.5 on Cranfield, docs/search.md).
ALPHA = 0.5
#: Candidates each side offers the fusion for every passage asked for.
CANDIDATES_PER_PASSAGE = 4
_SYNC_BATCH = 500

_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_HEADING = re.compile(r"^#{1,6}\s")


def embedder_for(settings: Settings) -> Embedder | None:
    """The configured embedder (one per model and process), or None for lexical only."""
    name = settings.knowledge_embedding_model
    if not name:
        return None
    return load_embedder(name, setting="AMELIO_KNOWLEDGE_EMBEDDING_MODEL")


# -- chunking -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """A chunk: ``text == source_text[start:end]``."""

    start: int
    end: int
    text: str


def _pieces(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Split text[start:end] into spans of at most ``limit`` characters: sentences
    when they fit, else cut at the last space before the limit."""
    if end - start <= limit:
        return [(start, end)]
    cuts = [start, *(m.end() for m in _SENTENCE_END.finditer(text, start, end)), end]
    spans: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(cuts):
        while b - a > limit:
            cut = text.rfind(" ", a + 1, a + limit)
            cut = cut if cut > a else a + limit
            spans.append((a, cut))
            a = cut
        if b > a:
            spans.append((a, b))
    return spans


def chunk_text(text: str, max_chars: int = 1200) -> list[Span]:
    """Cut a text into chunks of at most ``max_chars`` characters (see the module doc)."""
    blocks: list[tuple[int, int]] = []
    pos = 0
    for m in [*_PARAGRAPH.finditer(text), None]:
        end = m.start() if m else len(text)
        if text[pos:end].strip():
            blocks.append((pos, end))
        pos = m.end() if m else pos
    spans: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for a, b in blocks:
        heading = bool(_HEADING.match(text[a:b].lstrip()))
        for p_start, p_end in _pieces(text, a, b, max_chars):
            if current is not None and (
                p_end - current[0] > max_chars
                or (heading and p_start == a and current[1] - current[0] >= max_chars // 4)
            ):
                spans.append(current)
                current = None
            current = (p_start, p_end) if current is None else (current[0], p_end)
    if current is not None:
        spans.append(current)
    chunks = []
    for a, b in spans:
        raw = text[a:b]
        lead = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if body:
            chunks.append(Span(a + lead, a + lead + len(body), body))
    return chunks


# -- indexing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexedSource:
    """A source cut and tokenized, ready to write (embedding happens here too, so
    the slow part runs outside any database transaction)."""

    source: Source
    spans: tuple[Span, ...]
    terms: tuple[Counter[str], ...]
    embeddings: tuple[list[float], ...] | None = None
    embedding_model: str | None = None


def _terms(title: str, text: str) -> Counter[str]:
    # The title is indexed with every chunk: "VPN policy" should find its sections.
    return Counter(KNOWLEDGE.analyze(title) + KNOWLEDGE.analyze(text))


def prepare_source(
    source: Source, *, chunk_chars: int = 1200, embedder: Embedder | None = None
) -> IndexedSource:
    """Chunk, tokenize and (with an embedder) embed a source."""
    spans = tuple(chunk_text(source.text, chunk_chars))
    terms = tuple(_terms(source.title, s.text) for s in spans)
    if embedder is None or not spans:
        return IndexedSource(source, spans, terms)
    vectors = embedder.embed([f"{source.title}\n{s.text}" for s in spans])
    return IndexedSource(source, spans, terms, tuple(vectors), embedder.model)


def write_source(
    conn: sa.Connection, notebook_id: int, prepared: IndexedSource, *, now: datetime | None = None
) -> str:
    """Store a prepared source in the caller's transaction: ``indexed``, or
    ``unchanged`` when the stored version's updatedAt is the same or newer."""
    src, now = prepared.source, now or utcnow()
    row = conn.execute(
        sa.select(knowledge_sources.c.id, knowledge_sources.c.updated_at)
        .where(
            knowledge_sources.c.notebook_id == notebook_id,
            knowledge_sources.c.source_id == src.source_id,
        )
        .with_for_update()
    ).first()
    if row is not None and aware(row.updated_at) >= src.updated_at:
        return "unchanged"
    values = {
        "kind": src.kind,
        "title": src.title,
        "url": src.url,
        "text": src.text,
        "content_hash": src.content_hash(),
        "updated_at": src.updated_at,
        "indexed_at": now,
        "chunk_count": len(prepared.spans),
    }
    if row is None:
        result = conn.execute(
            knowledge_sources.insert().values(
                notebook_id=notebook_id, source_id=src.source_id, **values
            )
        )
        assert result.inserted_primary_key is not None
        source_row = int(result.inserted_primary_key[0])
    else:
        source_row = int(row.id)
        conn.execute(
            knowledge_chunks.delete().where(knowledge_chunks.c.source_row_id == source_row)
        )
        conn.execute(
            knowledge_sources.update().where(knowledge_sources.c.id == source_row).values(**values)
        )
    if not prepared.spans:
        return "indexed"
    rows = [
        {
            "source_row_id": source_row,
            "notebook_id": notebook_id,
            "position": i,
            "text": s.text,
            "start_char": s.start,
            "end_char": s.end,
            "token_count": sum(prepared.terms[i].values()),
            "embedding_model": prepared.embedding_model,
            "embedding": prepared.embeddings[i] if prepared.embeddings else None,
        }
        for i, s in enumerate(prepared.spans)
    ]
    conn.execute(knowledge_chunks.insert(), rows)
    return "indexed"


# -- search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Passage:
    """A retrieved chunk with where it came from: what a citation shows."""

    chunk_id: int
    position: int
    text: str
    start: int
    end: int
    source_id: str
    kind: str
    title: str
    url: str | None
    updated_at: datetime
    score: float
    lexical: float = 0.0
    semantic: float | None = None
    matched: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "sourceId": self.source_id,
            "kind": self.kind,
            "title": self.title,
            "url": self.url,
            "updatedAt": self.updated_at.isoformat(),
            "chunk": self.position,
            "chunkId": self.chunk_id,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "score": round(self.score, 6),
            "lexicalScore": round(self.lexical, 6),
            "semanticScore": None if self.semantic is None else round(self.semantic, 6),
        }


def collection_name(notebook_id: int) -> str:
    return f"knowledge-{notebook_id}"


def analyzed(text: str) -> str:
    """``text`` as the collection indexes it: folded, plurals folded, space-joined."""
    return " ".join(KNOWLEDGE.analyze(text))


def _fingerprint(conn: sa.Connection, notebook_id: int) -> int:
    """A number that changes whenever a chunk of the notebook is added or removed
    (chunk ids only grow; a rewritten source gets new ones)."""
    ch = knowledge_chunks.c
    count, top, total = conn.execute(
        sa.select(sa.func.count(ch.id), sa.func.max(ch.id), sa.func.sum(ch.id)).where(
            ch.notebook_id == notebook_id
        )
    ).one()
    digest = hashlib.sha256(f"{count}:{top}:{total}".encode()).hexdigest()
    return int(digest[:15], 16)


def _catch_up(conn: sa.Connection, store: DocumentStore, notebook_id: int) -> None:
    """Bring the collection to the notebook's chunks: index those added since it
    last caught up (their embeddings too), forget those removed."""
    stamp = _fingerprint(conn, notebook_id)
    if store.get_meta("chunks") == stamp:
        return
    ch, src = knowledge_chunks, knowledge_sources
    stored = {
        str(i)
        for i in conn.execute(sa.select(ch.c.id).where(ch.c.notebook_id == notebook_id)).scalars()
    }
    held = store.doc_ids()
    store.apply([Deletion(d) for d in sorted(held - stored)])
    added = sorted(int(d) for d in stored - held)
    for start in range(0, len(added), _SYNC_BATCH):
        batch = added[start : start + _SYNC_BATCH]
        rows = conn.execute(
            sa.select(ch.c.id, ch.c.text, ch.c.embedding_model, ch.c.embedding, src.c.title)
            .join(src, src.c.id == ch.c.source_row_id)
            .where(ch.c.id.in_(batch))
        ).all()
        store.apply([Document(str(r.id), analyzed(r.title), analyzed(r.text)) for r in rows])
        by_model: dict[str, dict[str, list[float]]] = {}
        for r in rows:
            if r.embedding_model and r.embedding:
                by_model.setdefault(r.embedding_model, {})[str(r.id)] = r.embedding
        for model, vectors in by_model.items():
            store.put_vectors(model, vectors)
    store.set_meta("chunks", stamp)


def search(
    settings: Settings,
    bind: sa.Engine | sa.Connection,
    notebook_id: int,
    question: str,
    *,
    top_k: int = 5,
    embedder: Embedder | None = None,
) -> list[Passage]:
    """The ``top_k`` passages that best match ``question``, best first: BM25 over
    the notebook's collection, mixed with the semantic score when an embedder is
    given."""
    store = open_collection(settings, collection_name(notebook_id))
    terms = KNOWLEDGE.query_terms(question)
    with db.reading(bind) as conn:
        _catch_up(conn, store, notebook_id)
        found = first_phase(
            store,
            " ".join(terms),
            top_k * CANDIDATES_PER_PASSAGE,
            alpha=ALPHA if embedder is not None else 0.0,
            embedder=embedder,
            semantic_query=question,
        )
        best = [int(d) for d in found.order[:top_k]]  # best first
        if not best:
            return []
        ch, src = knowledge_chunks, knowledge_sources
        rows = {
            r.id: r
            for r in conn.execute(
                sa.select(
                    ch.c.id,
                    ch.c.position,
                    ch.c.text,
                    ch.c.start_char,
                    ch.c.end_char,
                    src.c.source_id,
                    src.c.kind,
                    src.c.title,
                    src.c.url,
                    src.c.updated_at,
                )
                .join(src, src.c.id == ch.c.source_row_id)
                .where(ch.c.id.in_(best))
            )
        }
    passages = []
    for cid in best:
        r = rows.get(cid)
        if r is None:  # removed since the collection caught up
            continue
        words = set(analyzed(f"{r.title} {r.text}").split())
        passages.append(
            Passage(
                chunk_id=cid,
                position=r.position,
                text=r.text,
                start=r.start_char,
                end=r.end_char,
                source_id=r.source_id,
                kind=r.kind,
                title=r.title,
                url=r.url,
                updated_at=aware(r.updated_at),
                score=found.scores[str(cid)],
                lexical=found.lexical.get(str(cid), 0.0),
                semantic=found.semantic.get(str(cid)),
                matched=tuple(t for t in terms if t in words),
            )
        )
    return passages
