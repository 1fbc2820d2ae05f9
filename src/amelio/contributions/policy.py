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
from typing import TYPE_CHECKING

from amelio.embeddings import WORDLLAMA, optional_embedder

if TYPE_CHECKING:
    from amelio.embeddings import Embedder
    from amelio.workspace.config import Settings

__all__ = ["DIMENSIONS", "browsers_embed", "import_embedder", "unavailable"]

#: The dimensions of each model a browser can compute.
DIMENSIONS: dict[str, int] = {WORDLLAMA: 256}


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
