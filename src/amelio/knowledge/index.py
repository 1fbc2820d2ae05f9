"""Chunks and the notebook index: lexical (BM25) always, semantic when configured.

A source is cut into chunks of at most ``knowledge_chunk_chars``, on paragraph
boundaries when they fit, else on sentences, else on spaces; Markdown headings
start a new chunk, so a chunk tends to be one section. Each chunk keeps its
character span in the source, which is what a citation points at.

The lexical index is a postings table (term, chunk, term frequency) in the
database, over the same folded tokens the router uses
(:func:`amelio.text.tokens`), with plurals folded by Harman's S-stemmer
(``refunds`` finds ``refund``; it is light enough for French too): it survives
restarts, every process sharing the database sees it, and a query reads only
the postings of its own terms. Scoring is Okapi BM25 with the notebook's chunk
count and mean length.

Semantic retrieval is an add-on: when ``knowledge_embedding_model`` names a
model (``wordllama``, shipped with ``amelio[semantic]``, or a sentence-transformers
model with ``amelio[embeddings]``; see :mod:`amelio.embeddings`), each chunk
also stores its embedding and a query fuses the lexical and semantic rankings
by reciprocal rank. Any object with a ``model`` name and an ``embed`` method
(:class:`Embedder`) can stand in for it; tests use a small deterministic one.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.config import Settings
from amelio.db.schema import knowledge_chunks, knowledge_postings, knowledge_sources, utcnow
from amelio.embeddings import Embedder, load_embedder
from amelio.knowledge.model import Source, aware
from amelio.text import tokens

__all__ = [
    "Embedder",
    "IndexedSource",
    "Passage",
    "Span",
    "chunk_text",
    "embedder_for",
    "prepare_source",
    "search",
    "write_source",
]

MAX_TERM = 64
K1, B = 1.2, 0.75
RRF_K = 60  # reciprocal rank fusion's constant: rank 1 weighs 1/61, rank 10 1/70

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
            if current is not None and (p_end - current[0] > max_chars or (
                    heading and p_start == a and current[1] - current[0] >= max_chars // 4)):
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


def term(token: str) -> str:
    """A folded token as the index stores it: Harman's S-stemmer (``-ies`` becomes
    ``-y``, a final ``-s`` goes, but not in ``-us``/``-ss``), cut to :data:`MAX_TERM`."""
    if len(token) > 3 and token.endswith("s"):
        if token.endswith("ies") and not token.endswith(("eies", "aies")):
            token = token[:-3] + "y"
        elif not token.endswith(("us", "ss")):
            token = token[:-1]
    return token[:MAX_TERM]


def _terms(title: str, text: str) -> Counter[str]:
    # The title is indexed with every chunk: "VPN policy" should find its sections.
    return Counter(term(t) for t in (*tokens(title), *tokens(text)))


def prepare_source(source: Source, *, chunk_chars: int = 1200,
                   embedder: Embedder | None = None) -> IndexedSource:
    """Chunk, tokenize and (with an embedder) embed a source."""
    spans = tuple(chunk_text(source.text, chunk_chars))
    terms = tuple(_terms(source.title, s.text) for s in spans)
    if embedder is None or not spans:
        return IndexedSource(source, spans, terms)
    vectors = embedder.embed([f"{source.title}\n{s.text}" for s in spans])
    return IndexedSource(source, spans, terms, tuple(vectors), embedder.model)


def write_source(conn: sa.Connection, notebook_id: int, prepared: IndexedSource,
                 *, now: datetime | None = None) -> str:
    """Store a prepared source in the caller's transaction: ``indexed``, or
    ``unchanged`` when the stored version's updatedAt is the same or newer."""
    src, now = prepared.source, now or utcnow()
    row = conn.execute(sa.select(knowledge_sources.c.id, knowledge_sources.c.updated_at)
                       .where(knowledge_sources.c.notebook_id == notebook_id,
                              knowledge_sources.c.source_id == src.source_id)
                       .with_for_update()).first()
    if row is not None and aware(row.updated_at) >= src.updated_at:
        return "unchanged"
    values = {"kind": src.kind, "title": src.title, "url": src.url, "text": src.text,
              "content_hash": src.content_hash(), "updated_at": src.updated_at,
              "indexed_at": now, "chunk_count": len(prepared.spans)}
    if row is None:
        result = conn.execute(knowledge_sources.insert().values(
            notebook_id=notebook_id, source_id=src.source_id, **values))
        assert result.inserted_primary_key is not None
        source_row = int(result.inserted_primary_key[0])
    else:
        source_row = int(row.id)
        conn.execute(knowledge_chunks.delete().where(
            knowledge_chunks.c.source_row_id == source_row))  # postings cascade
        conn.execute(knowledge_sources.update().where(knowledge_sources.c.id == source_row)
                     .values(**values))
    if not prepared.spans:
        return "indexed"
    rows = [{"source_row_id": source_row, "notebook_id": notebook_id, "position": i,
             "text": s.text, "start_char": s.start, "end_char": s.end,
             "token_count": sum(prepared.terms[i].values()),
             "embedding_model": prepared.embedding_model,
             "embedding": prepared.embeddings[i] if prepared.embeddings else None}
            for i, s in enumerate(prepared.spans)]
    ids = conn.execute(knowledge_chunks.insert().returning(
        knowledge_chunks.c.id, sort_by_parameter_order=True), rows).scalars().all()
    postings = [{"chunk_id": cid, "term": term, "notebook_id": notebook_id, "tf": tf}
                for cid, counts in zip(ids, prepared.terms, strict=True)
                for term, tf in counts.items()]
    if postings:
        conn.execute(knowledge_postings.insert(), postings)
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
        return {"sourceId": self.source_id, "kind": self.kind, "title": self.title,
                "url": self.url, "updatedAt": self.updated_at.isoformat(),
                "chunk": self.position, "chunkId": self.chunk_id, "start": self.start,
                "end": self.end, "text": self.text, "score": round(self.score, 6),
                "lexicalScore": round(self.lexical, 6),
                "semanticScore": None if self.semantic is None else round(self.semantic, 6)}


def _bm25(conn: sa.Connection, notebook_id: int, terms: Sequence[str]
          ) -> dict[int, tuple[float, list[str]]]:
    ch, po = knowledge_chunks, knowledge_postings
    n, total = conn.execute(sa.select(sa.func.count(), sa.func.coalesce(
        sa.func.sum(ch.c.token_count), 0)).where(ch.c.notebook_id == notebook_id)).one()
    if not n or not terms:
        return {}
    avgdl = total / n
    rows = conn.execute(
        sa.select(po.c.chunk_id, po.c.term, po.c.tf, ch.c.token_count)
        .join(ch, ch.c.id == po.c.chunk_id)
        .where(po.c.notebook_id == notebook_id, po.c.term.in_(terms))).all()
    df = Counter(r.term for r in rows)
    found: dict[int, tuple[float, list[str]]] = {}
    for r in rows:
        idf = math.log(1 + (n - df[r.term] + 0.5) / (df[r.term] + 0.5))
        norm = K1 * (1 - B + B * r.token_count / avgdl) if avgdl else K1
        score, matched = found.get(r.chunk_id, (0.0, []))
        matched.append(r.term)
        found[r.chunk_id] = (score + idf * r.tf * (K1 + 1) / (r.tf + norm), matched)
    return found


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _semantic(conn: sa.Connection, notebook_id: int, question: str, embedder: Embedder,
              limit: int) -> dict[int, float]:
    """Brute-force cosine over the notebook's chunks embedded by the same model:
    exact, and fast enough for a laptop-sized notebook."""
    [query] = embedder.embed([question])
    rows = conn.execute(sa.select(knowledge_chunks.c.id, knowledge_chunks.c.embedding).where(
        knowledge_chunks.c.notebook_id == notebook_id,
        knowledge_chunks.c.embedding_model == embedder.model)).all()
    scored = sorted(((_cosine(query, r.embedding), r.id) for r in rows if r.embedding),
                    reverse=True)[:limit]
    return {cid: score for score, cid in scored if score > 0}


def search(bind: sa.Engine | sa.Connection, notebook_id: int, question: str, *,
           top_k: int = 5, embedder: Embedder | None = None) -> list[Passage]:
    """The ``top_k`` passages that best match ``question``, best first. Lexical
    only, or fused with semantic ranks when an embedder is given."""
    terms = list(dict.fromkeys(term(t) for t in tokens(question)))
    with db.reading(bind) as conn:
        lexical = _bm25(conn, notebook_id, terms)
        semantic = _semantic(conn, notebook_id, question, embedder, top_k * 4) \
            if embedder is not None else {}
        if semantic:
            fused: dict[int, float] = {}
            for ranking in (sorted(lexical, key=lambda c: (-lexical[c][0], c)),
                            sorted(semantic, key=lambda c: (-semantic[c], c))):
                for rank, cid in enumerate(ranking, start=1):
                    fused[cid] = fused.get(cid, 0.0) + 1 / (RRF_K + rank)
        else:
            fused = {cid: s for cid, (s, _) in lexical.items()}
        best = sorted(fused, key=lambda c: (-fused[c], c))[:top_k]
        if not best:
            return []
        ch, src = knowledge_chunks, knowledge_sources
        rows = {r.id: r for r in conn.execute(
            sa.select(ch.c.id, ch.c.position, ch.c.text, ch.c.start_char, ch.c.end_char,
                      src.c.source_id, src.c.kind, src.c.title, src.c.url, src.c.updated_at)
            .join(src, src.c.id == ch.c.source_row_id).where(ch.c.id.in_(best)))}
    return [Passage(chunk_id=cid, position=r.position, text=r.text, start=r.start_char,
                    end=r.end_char, source_id=r.source_id, kind=r.kind, title=r.title,
                    url=r.url, updated_at=aware(r.updated_at), score=fused[cid],
                    lexical=lexical.get(cid, (0.0, []))[0], semantic=semantic.get(cid),
                    matched=tuple(lexical.get(cid, (0.0, []))[1]))
            for cid in best if (r := rows.get(cid)) is not None]
