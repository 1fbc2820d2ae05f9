"""Whether this server lends its vector work to browsers: the idle-compute policy.

One predicate decides two things that must agree: whether the contribution service
hands out tasks (:func:`unavailable` is None), and whether the search corpus leaves
its missing vectors to browsers (:func:`browsers_embed`). Were they to differ,
documents would wait for browsers that are never given them. The search loop knows
nothing of contributions: the front doors that open a workspace's search pass
:func:`browsers_embed`'s answer to it (``defer_missing_vectors``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from amelio.embeddings import WORDLLAMA, optional_embedder

if TYPE_CHECKING:
    from amelio.embeddings import Embedder
    from amelio.workspace.config import Settings

__all__ = [
    "COSTS",
    "DIMENSIONS",
    "TaskCost",
    "browsers_embed",
    "import_embedder",
    "task_cost_ms",
    "unavailable",
]

#: The dimensions of each model a browser can compute.
DIMENSIONS: dict[str, int] = {WORDLLAMA: 256}


class TaskCost(NamedTuple):
    """What embedding costs a browser with one model, in CPU milliseconds."""

    per_text_ms: float
    per_char_ms: float


#: The server's own estimate of each model's cost to a browser: what a leased task
#: is charged against its client's hourly budget, whatever the client reports (a
#: client reporting less would otherwise take unlimited work). WordLlama in
#: amelio.js counted 0.65 to 0.9 ms of CPU per Cranfield abstract (1,100 characters)
#: in benchmarks/client_compute.py, its model load included.
COSTS: dict[str, TaskCost] = {WORDLLAMA: TaskCost(per_text_ms=0.05, per_char_ms=0.0006)}


def task_cost_ms(model: str, texts: Sequence[str]) -> float:
    """The CPU milliseconds embedding ``texts`` with ``model`` costs a browser, by the
    server's estimate (:data:`COSTS`)."""
    cost = COSTS[model]
    return len(texts) * cost.per_text_ms + sum(map(len, texts)) * cost.per_char_ms


def unavailable(settings: Settings) -> str | None:
    """Why a server with ``settings`` hands out no tasks at all, or None when it does."""
    model = settings.search_embedding_model
    if not settings.contributions:
        return (
            "Contributions are off on this server: the operator turns them on "
            "with contributions = true (AMELIO_CONTRIBUTIONS)."
        )
    if model not in DIMENSIONS:
        return (
            f"search_embedding_model is {model!r}; browsers compute "
            f"{', '.join(DIMENSIONS)} embeddings only."
        )
    if importlib.util.find_spec(model) is None:
        return (
            f"The {model} model is not installed on the server (pip install "
            "'amelio[semantic]'): browsers could not load it, nor the server "
            "check their results."
        )
    return None


def browsers_embed(settings: Settings) -> bool:
    """Whether the corpus's missing vectors are left to browsers that lend idle
    compute: imports then store documents without embedding them, and semantic search
    ranks the documents that have a vector instead of embedding the rest itself."""
    return unavailable(settings) is None


def import_embedder(settings: Settings) -> Embedder | None:
    """What an import embeds its documents with: the search embedder when it can be
    had, or None when browsers embed them (or no model is installed: the import stays
    lexical, healed on the first semantic search)."""
    return None if browsers_embed(settings) else optional_embedder(settings)
