"""The first phase: candidates from an engine, lexical and semantic scores mixed.

One fusion for the whole code base: search's rank profiles and the knowledge
notebooks' retrieval both call :func:`first_phase`.

``alpha = 0`` keeps the lexical engine's best ``size`` candidates, scores min-max
normalized; ``alpha = 1`` (``semantic``) keeps the nearest by raw cosine; in
between, each side's scores are min-max normalized over the union of both
candidate sets (a document one side did not return scores 0 there, the floor of
the normalized scale), mixed as ``alpha · semantic + (1 − alpha) · lexical``,
and the best ``size`` of the union go on. Why normalize: BM25 is unbounded and
cosine lives in [−1, 1]; on their own scales one would drown the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amelio.search.documents import Hit
from amelio.search.scoring import min_max_normalized

if TYPE_CHECKING:
    from amelio.embeddings import Embedder
    from amelio.search.engines.registry import SearchEngine

__all__ = ["FirstPhase", "first_phase"]


@dataclass(frozen=True)
class FirstPhase:
    """Each candidate's first-phase score, the candidates in engine order, and the
    raw scores they came from (BM25; cosine, when semantic)."""

    scores: dict[str, float]
    order: list[str]
    lexical: dict[str, float] = field(default_factory=dict)
    semantic: dict[str, float] = field(default_factory=dict)


def first_phase(
    engine: SearchEngine,
    query: str,
    size: int,
    *,
    alpha: float = 0.0,
    embedder: Embedder | None = None,
    semantic_query: str | None = None,
) -> FirstPhase:
    """The ``size`` best candidates for ``query`` mixed with weight ``alpha``.

    ``semantic_query`` is what is embedded when it differs from what the lexical
    index is asked (knowledge asks the index for stemmed terms, the model for
    the question as written)."""
    if embedder is None or alpha <= 0:
        hits = engine.lexical(query, size)
        return FirstPhase(
            min_max_normalized(hits),
            [h.doc_id for h in hits],
            lexical={h.doc_id: h.score for h in hits},
        )
    asked = semantic_query or query
    if alpha >= 1:
        nearest, _ = engine.nearest(asked, size, embedder)
        raw = {h.doc_id: h.score for h in nearest}
        return FirstPhase(dict(raw), list(raw), semantic=raw)
    hits = engine.lexical(query, size)
    nearest, similar = engine.nearest(asked, size, embedder, also=[h.doc_id for h in hits])
    similar |= {h.doc_id: h.score for h in nearest}
    order = list(dict.fromkeys([*(h.doc_id for h in hits), *(h.doc_id for h in nearest)]))
    # A document indexed after the vectors were loaded has none yet: the floor.
    floor = min((h.score for h in nearest), default=0.0)
    cosine = [Hit(d, similar.get(d, floor)) for d in order]
    lexical, semantic = min_max_normalized(hits), min_max_normalized(cosine)
    mixed = {d: alpha * semantic[d] + (1 - alpha) * lexical.get(d, 0.0) for d in order}
    # The best `size` of the union go on: feedback and exploration work on a
    # candidate set of one size whatever the profile (measured: the full union
    # spread Thompson sampling over twice the documents and learned slower).
    position = {d: i for i, d in enumerate(order)}
    kept = sorted(order, key=lambda d: (-mixed[d], position[d]))[:size]
    return FirstPhase(
        {d: mixed[d] for d in kept},
        kept,
        lexical={h.doc_id: h.score for h in hits},
        semantic={d: similar[d] for d in kept if d in similar},
    )
