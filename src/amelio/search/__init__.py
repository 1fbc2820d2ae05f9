"""Search that learns from its use (seed 004 §3.3–3.4).

:class:`~amelio.search.corpus.Corpus` is the embedded engine (SQLite FTS5 BM25,
plus document vectors for the semantic profiles);
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
