"""Search that learns from its use: every response logged, every reaction a signal.

:mod:`~amelio.search.engines.registry` is the engine contract and its registry
(``search_backend``): :class:`~amelio.search.engines.tantivy.TantivyEngine` (the
default) and :class:`~amelio.search.engines.fts5.Fts5Engine` (FTS5) index a SQLite
document store that keeps the documents and their vectors
(:mod:`~amelio.search.store`); :mod:`~amelio.search.fusion` mixes lexical and
semantic candidates;
:class:`~amelio.search.service.Searcher` ranks with the rank profiles, logs each
response as an impression and signs its ``feedbackToken``;
:mod:`~amelio.search.aggregation` turns impressions and feedback events into
per-(query, document) signals, which :mod:`~amelio.search.clickmodel` debiases
(the position-bias model) and :mod:`~amelio.search.scoring` turns into feedback
scores; :mod:`~amelio.search.engines.vespa` ranks on Vespa instead of the embedded
index; :mod:`~amelio.search.simulate` proves the loop on public relevance
judgments with simulated users.

The names below resolve lazily (PEP 562): the engine contract
(:mod:`amelio.search.engines`) and the document values stay cheap to import, so
the plugin manager, which imports the built-in engines' registration, loads no
database layer; the searcher and the aggregation load the first time they are used.
"""

import typing as _typing

from amelio._lazy import lazy_namespace as _lazy_namespace

if _typing.TYPE_CHECKING:
    from amelio.search.aggregation import aggregate, rebuild
    from amelio.search.counts import AggregateReport
    from amelio.search.documents import Document, ImportReport
    from amelio.search.engines.fts5 import Fts5Engine
    from amelio.search.scoring import FeedbackScorer
    from amelio.search.service import (
        PROFILES,
        Searcher,
        SearchResponse,
    )

__all__ = [
    "PROFILES",
    "AggregateReport",
    "Document",
    "FeedbackScorer",
    "Fts5Engine",
    "ImportReport",
    "SearchResponse",
    "Searcher",
    "aggregate",
    "rebuild",
]

#: Where each public name lives; the module is imported on first use.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("aggregate", "rebuild"), "amelio.search.aggregation"),
    "AggregateReport": "amelio.search.counts",
    **dict.fromkeys(("Document", "ImportReport"), "amelio.search.documents"),
    "Fts5Engine": "amelio.search.engines.fts5",
    "FeedbackScorer": "amelio.search.scoring",
    **dict.fromkeys(
        (
            "PROFILES",
            "Searcher",
            "SearchResponse",
        ),
        "amelio.search.service",
    ),
}

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag typos
    __getattr__, __dir__ = _lazy_namespace("amelio.search", _LAZY, globals(), __all__)
