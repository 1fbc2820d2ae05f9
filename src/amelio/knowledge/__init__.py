"""The knowledge loop: a semantic memory of business events, with citations, built in-house.

```
business events ──► enqueue (202) ──► knowledge_queue ──► SyncWorker / drain()
   (3 tries, backoff, dead letters)        ──► chunks + postings (+ embeddings)
        ──► answer_question: passages with numbered citations, generated or extractive
        ──► generate_skill: a new-skill proposal, applied only when a person approves
folder ──► watch_folder (watchfiles) ──► the same queue
```

Modules: :mod:`~amelio.knowledge.model` (Source, Notebook),
:mod:`~amelio.knowledge.notebooks`, :mod:`~amelio.knowledge.sync`,
:mod:`~amelio.knowledge.index`, :mod:`~amelio.knowledge.query`,
:mod:`~amelio.knowledge.generator`, :mod:`~amelio.knowledge.watcher`. The names below
resolve lazily (PEP 562): each module is imported the first time one of its names is used.
"""

import typing as _typing

from amelio._lazy import lazy_namespace as _lazy_namespace

if _typing.TYPE_CHECKING:
    from amelio.knowledge.generator import GeneratedSkill, generate_skill
    from amelio.knowledge.index import Embedder, Passage, chunk_text, search
    from amelio.knowledge.model import Notebook, Source
    from amelio.knowledge.notebooks import (
        create_notebook,
        delete_source,
        ensure_notebook,
        get_notebook,
        list_notebooks,
        list_sources,
    )
    from amelio.knowledge.query import Answer, answer_question
    from amelio.knowledge.sync import (
        DrainReport,
        Failure,
        SyncReceipt,
        SyncWorker,
        drain,
        enqueue,
        failures,
        queue_health,
        retry,
    )
    from amelio.knowledge.watcher import FolderReport, read_document, sync_folder, watch_folder

__all__ = [
    "Answer",
    "DrainReport",
    "Embedder",
    "Failure",
    "FolderReport",
    "GeneratedSkill",
    "Notebook",
    "Passage",
    "Source",
    "SyncReceipt",
    "SyncWorker",
    "answer_question",
    "chunk_text",
    "create_notebook",
    "delete_source",
    "drain",
    "enqueue",
    "ensure_notebook",
    "failures",
    "generate_skill",
    "get_notebook",
    "list_notebooks",
    "list_sources",
    "queue_health",
    "read_document",
    "retry",
    "search",
    "sync_folder",
    "watch_folder",
]

#: Where each public name lives; the module is imported on first use.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("GeneratedSkill", "generate_skill"), "amelio.knowledge.generator"),
    **dict.fromkeys(("Embedder", "Passage", "chunk_text", "search"), "amelio.knowledge.index"),
    **dict.fromkeys(("Notebook", "Source"), "amelio.knowledge.model"),
    **dict.fromkeys(
        (
            "create_notebook",
            "delete_source",
            "ensure_notebook",
            "get_notebook",
            "list_notebooks",
            "list_sources",
        ),
        "amelio.knowledge.notebooks",
    ),
    **dict.fromkeys(("Answer", "answer_question"), "amelio.knowledge.query"),
    **dict.fromkeys(
        (
            "DrainReport",
            "Failure",
            "SyncReceipt",
            "SyncWorker",
            "drain",
            "enqueue",
            "failures",
            "queue_health",
            "retry",
        ),
        "amelio.knowledge.sync",
    ),
    **dict.fromkeys(
        ("FolderReport", "read_document", "sync_folder", "watch_folder"), "amelio.knowledge.watcher"
    ),
}


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag typos
    __getattr__, __dir__ = _lazy_namespace("amelio.knowledge", _LAZY, globals(), __all__)
