"""The knowledge loop (seed pillar 5, the NotebookLM bridge, built in-house).

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
:mod:`~amelio.knowledge.generator`, :mod:`~amelio.knowledge.watcher`.
"""

from __future__ import annotations

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
