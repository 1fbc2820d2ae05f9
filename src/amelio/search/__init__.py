"""Search that learns from its use (seed 004 §3.3–3.4).

:mod:`~amelio.search.engine` is the engine contract and its registry
(``search_backend``): :class:`~amelio.search.tantivy_engine.TantivyEngine` (the
default) and :class:`~amelio.search.corpus.Corpus` (FTS5) index a SQLite
document store that keeps the documents and their vectors
(:mod:`~amelio.search.store`); :mod:`~amelio.search.fusion` mixes lexical and
semantic candidates;
:class:`~amelio.search.service.Searcher` ranks with the rank profiles, logs each
response as an impression and signs its ``feedbackToken``;
:mod:`~amelio.search.signals` turns impressions and feedback events into
per-(query, document) signals, which :mod:`~amelio.search.clickmodel` debiases
(the position-bias model) and :mod:`~amelio.search.scoring` turns into feedback
scores; :mod:`~amelio.search.vespa` ranks on Vespa instead of the embedded
index; :mod:`~amelio.search.simulate` proves the loop on public relevance
judgments with simulated users.
"""

from amelio.search.corpus import Corpus, Document, ImportReport
from amelio.search.scoring import FeedbackScorer
from amelio.search.service import (
    PROFILES,
    Searcher,
    SearchResponse,
    SemanticUnavailable,
    optional_embedder,
    search_embedder,
)
from amelio.search.signals import AggregateReport, aggregate, rebuild

__all__ = [
    "PROFILES",
    "AggregateReport",
    "Corpus",
    "Document",
    "FeedbackScorer",
    "ImportReport",
    "SearchResponse",
    "Searcher",
    "SemanticUnavailable",
    "aggregate",
    "optional_embedder",
    "rebuild",
    "search_embedder",
]
