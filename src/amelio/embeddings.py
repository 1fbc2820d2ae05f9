"""Text embeddings: the one contract semantic search and knowledge notebooks share.

An :class:`Embedder` turns texts into unit vectors and names its ``model``, so
vectors of two models are never compared. :func:`load_embedder` resolves a name:

* ``wordllama`` — WordLlama's ``l2_supercat`` static embeddings (256 dimensions),
  whose weights and tokenizer ship inside the ``wordllama`` wheel
  (``pip install 'amelio[semantic]'``). They are loaded from the installed package
  and downloads are disabled: a server that cannot reach a model hub still has
  semantic search, and nothing is fetched at run time. Static embeddings are a
  token-vector average, so a query embeds in well under a millisecond on a CPU.
* any other name — a sentence-transformers model (``pip install
  'amelio[embeddings]'``), which must already be in the local model cache when the
  machine has no network.

One embedder is kept per name and process: loading is the slow part.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from amelio.errors import ConfigError

__all__ = ["WORDLLAMA", "Embedder", "EmbedderUnavailable", "load_embedder"]

WORDLLAMA = "wordllama"


class EmbedderUnavailable(ConfigError):
    """The embedding model a setting names cannot be loaded here."""

    code = "semantic_unavailable"
    http_status = 503


class Embedder(Protocol):
    """Turns texts into unit vectors; ``model`` names them."""

    model: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """Importing wordllama calls ``logging.basicConfig(level=INFO)``, after which every
    library's INFO lines (httpx, alembic…) flood the host process's output: keep
    the root logger's level and handlers as the application set them."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


class _WordLlama:
    """The shipped static-embedding model (``amelio[semantic]``)."""

    model = WORDLLAMA

    def __init__(self) -> None:
        try:
            with _root_logging_untouched():
                import wordllama  # type: ignore[import-untyped]
        except ImportError as exc:
            raise EmbedderUnavailable(
                "The wordllama embedding model is not installed: pip install "
                "'amelio[semantic]'.") from exc
        # The wheel carries weights/ and tokenizers/; pointing the cache at the package
        # finds both, and disable_download makes a missing file an error, not a fetch.
        package = Path(wordllama.__file__).parent
        self._model = wordllama.WordLlama.load(cache_dir=package, disable_download=True)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:  # the tokenizer pads in place: one caller at a time
            vectors: Any = self._model.embed(list(texts), norm=True)
        return vectors.tolist()  # type: ignore[no-any-return]


class _SentenceTransformer:
    """Any sentence-transformers model (``amelio[embeddings]``)."""

    def __init__(self, model: str, setting: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"{setting} is {model!r}, but sentence-transformers is not installed: pip "
                f"install 'amelio[embeddings]', or set {setting} to {WORDLLAMA!r} "
                "(amelio[semantic]) or to '' for lexical retrieval only.") from exc
        self.model = model
        self._model = SentenceTransformer(model)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._model.encode(list(texts), normalize_embeddings=True)
        return [[float(x) for x in v] for v in vectors]


_loaded: dict[str, Embedder] = {}
_lock = threading.Lock()


def load_embedder(name: str, *, setting: str = "the embedding model") -> Embedder:
    """The embedder ``name`` names (loaded once per process); ``setting`` is the
    setting that chose it, so an error says which one to change."""
    with _lock:
        if name not in _loaded:
            _loaded[name] = _WordLlama() if name == WORDLLAMA else _SentenceTransformer(
                name, setting)
        return _loaded[name]
