"""Search engines: the contract, the registry and the built-in engines (tantivy, FTS5, Vespa).

The public face for plugin authors who add an engine through the
``register_search_engines`` hook: :class:`EngineType` (what to register),
:class:`SearchEngine` (what its ``open(settings)`` returns) and
:class:`RankingEngine` (an engine that ranks with the feedback next to its data),
the values they take and give (:class:`Document`, :class:`Deletion`,
:class:`ImportReport`, :class:`Hit`, :class:`RankedDoc`), and the registry itself
(:func:`search_engines`, :func:`open_engine`).

The names resolve lazily (PEP 562), and the built-in engines' modules are imported
when one is opened: the plugin manager imports the registry whenever it is built,
and must load no database layer for it.
"""

import typing as _typing

from amelio._lazy import lazy_namespace as _lazy_namespace

if _typing.TYPE_CHECKING:
    from amelio.search.documents import Deletion, Document, Hit, ImportReport
    from amelio.search.engines.registry import (
        EngineType,
        RankingEngine,
        SearchEngine,
        open_engine,
        search_engines,
    )
    from amelio.search.scoring import RankedDoc

__all__ = [
    "Deletion",
    "Document",
    "EngineType",
    "Hit",
    "ImportReport",
    "RankedDoc",
    "RankingEngine",
    "SearchEngine",
    "open_engine",
    "search_engines",
]

#: Where each public name lives; the module is imported on first use.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Deletion", "Document", "Hit", "ImportReport"), "amelio.search.documents"),
    **dict.fromkeys(
        ("EngineType", "RankingEngine", "SearchEngine", "open_engine", "search_engines"),
        "amelio.search.engines.registry",
    ),
    "RankedDoc": "amelio.search.scoring",
}

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag typos
    __getattr__, __dir__ = _lazy_namespace("amelio.search.engines", _LAZY, globals(), __all__)
