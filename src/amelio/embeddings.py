"""Text embeddings: the one contract semantic search and knowledge notebooks share.

An :class:`Embedder` turns texts into unit vectors and names its ``model``, so
vectors of two models are never compared. :func:`load_embedder` resolves a name:

* ``wordllama`` — WordLlama's ``l2_supercat`` static embeddings (256 dimensions),
  whose weights and tokenizer ship inside the ``wordllama`` wheel
  (``pip install 'amelio[semantic]'``). They are read from the installed package's
  files: a server that cannot reach a model hub still has semantic search, and
  nothing is fetched at run time. Static embeddings are a
  token-vector average, so a query embeds in well under a millisecond on a CPU.
* any other name — a sentence-transformers model (``pip install
  'amelio[embeddings]'``), which must already be in the local model cache when the
  machine has no network.

One embedder is kept per name and process: loading is the slow part.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from amelio.errors import ConfigError

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = [
    "WORDLLAMA",
    "WORDLLAMA_TOKENIZER",
    "WORDLLAMA_WEIGHTS",
    "Embedder",
    "EmbedderUnavailable",
    "SemanticUnavailable",
    "embed_matrix",
    "load_embedder",
    "optional_embedder",
    "search_embedder",
    "wordllama_dir",
]

log = logging.getLogger(__name__)

WORDLLAMA = "wordllama"


class EmbedderUnavailable(ConfigError):
    """The embedding model a setting names cannot be loaded here."""

    code = "semantic_unavailable"
    http_status = 503


class Embedder(Protocol):
    """Turns texts into unit vectors; ``model`` names them."""

    model: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


#: The ``l2_supercat`` files inside the installed ``wordllama`` package, relative to
#: its folder: the tokenizer and the fp16 embedding matrix (256 dimensions).
WORDLLAMA_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
WORDLLAMA_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_NOT_INSTALLED = "The wordllama embedding model is not installed: pip install 'amelio[semantic]'."


def wordllama_dir() -> Path:
    """The installed ``wordllama`` package's folder, found without importing it:
    importing it loads ``requests`` and more (a quarter of a second) and calls
    ``logging.basicConfig``, and only its two data files are needed."""
    try:
        spec = importlib.util.find_spec(WORDLLAMA)
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        spec = None
    if spec is None or not spec.origin:
        raise EmbedderUnavailable(_NOT_INSTALLED)
    return Path(spec.origin).parent


def _safetensors_matrix(path: Path, key: str = "embedding.weight") -> Any:
    """The fp16 matrix ``key`` of a safetensors file, memory-mapped (not read): a
    text's rows are converted to float32 when it is embedded, so loading costs
    nothing and the 32,000 × 256 matrix is never held twice."""
    import numpy as np

    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    entry = header.get(key)
    if (
        not isinstance(entry, dict)
        or entry.get("dtype") != "F16"
        or len(entry.get("shape", ())) != 2
    ):
        raise EmbedderUnavailable(
            f"{path} holds no fp16 matrix {key!r}: reinstall 'amelio[semantic]'."
        )
    start, stop = entry["data_offsets"]
    rows, dim = entry["shape"]
    if stop - start != rows * dim * 2:
        raise EmbedderUnavailable(f"{path} is truncated: reinstall 'amelio[semantic]'.")
    return np.asarray(
        np.memmap(path, dtype="<f2", mode="r", offset=8 + size + start, shape=(rows, dim))
    )  # a plain array: memmap slicing is slower


class _WordLlama:
    """The shipped static-embedding model (``amelio[semantic]``), read from the
    ``wordllama`` wheel's files rather than through its package.

    The computation is WordLlama's ``embed(texts, norm=True)`` step for step: the
    Llama-2 tokenizer without special tokens or truncation, each token's row of the
    matrix (fp16, widened to float32), their mean, then the unit vector.
    ``tests/test_embeddings.py`` checks the result equals the package's own, bit for
    bit; a text with no token is the zero vector here (NaNs there). Doing it here
    keeps ``import wordllama`` (``requests``, logging set-up) out of every process
    that embeds, ``amelio route`` first."""

    model = WORDLLAMA
    #: Texts embedded per padded batch (WordLlama's own default).
    batch_size = 64

    def __init__(self) -> None:
        folder = wordllama_dir()
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(_NOT_INSTALLED) from exc
        try:
            self._tokenizer = Tokenizer.from_file(str(folder.joinpath(*WORDLLAMA_TOKENIZER)))
            self._matrix = _safetensors_matrix(folder.joinpath(*WORDLLAMA_WEIGHTS))
        except EmbedderUnavailable:
            raise
        except Exception as exc:  # the tokenizer's errors are its own types
            raise EmbedderUnavailable(
                f"The wordllama model files cannot be read ({exc}): reinstall 'amelio[semantic]'."
            ) from exc
        self._tokenizer.enable_padding()
        self._tokenizer.no_truncation()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: Sequence[str]) -> Any:
        """The unit vectors of ``texts`` as one float32 matrix (n × 256)."""
        import numpy as np

        rows, dim = self._matrix.shape
        out = np.empty((len(texts), dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            with self._lock:  # the tokenizer pads in place: one caller at a time
                encoded = self._tokenizer.encode_batch(chunk, add_special_tokens=False)
            ids = np.array([e.ids for e in encoded], dtype=np.int32)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
            np.clip(ids, 0, rows - 1, out=ids)
            vectors = np.asarray(self._matrix[ids], dtype=np.float32)
            counts = np.maximum(mask.sum(axis=1, keepdims=True), 1.0).astype(np.float32)
            pooled = np.sum(vectors * mask[..., np.newaxis], axis=1, dtype=np.float32) / counts
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            # A text with no token (""): a zero vector, where WordLlama divides 0 by 0
            # and returns NaNs that would poison every score they meet.
            np.divide(pooled, norms, out=out[start : start + len(chunk)], where=norms > 0)
            out[start : start + len(chunk)][norms[:, 0] == 0] = 0.0
        return out


class _SentenceTransformer:
    """Any sentence-transformers model (``amelio[embeddings]``)."""

    def __init__(self, model: str, setting: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise EmbedderUnavailable(
                f"{setting} is {model!r}, but sentence-transformers is not installed: pip "
                f"install 'amelio[embeddings]', or set {setting} to {WORDLLAMA!r} "
                "(amelio[semantic]) or to '' for lexical retrieval only."
            ) from exc
        self.model = model
        self._model = SentenceTransformer(model)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: Sequence[str]) -> Any:
        return self._model.encode(list(texts), normalize_embeddings=True)


def embed_matrix(embedder: Embedder, texts: Sequence[str]) -> Any:
    """The unit vectors of ``texts`` as one float32 numpy matrix (n × d): without a
    round trip through Python lists when the embedder can give an array
    (``embed_array``, as the shipped model does), else from :meth:`Embedder.embed`."""
    import numpy as np

    direct = getattr(embedder, "embed_array", None)
    if direct is not None:
        return np.asarray(direct(list(texts)), dtype=np.float32)
    return np.asarray(embedder.embed(list(texts)), dtype=np.float32)


_loaded: dict[str, Embedder] = {}
_lock = threading.Lock()


def load_embedder(name: str, *, setting: str = "the embedding model") -> Embedder:
    """The embedder ``name`` names (loaded once per process); ``setting`` is the
    setting that chose it, so an error says which one to change."""
    with _lock:
        if name not in _loaded:
            _loaded[name] = (
                _WordLlama() if name == WORDLLAMA else _SentenceTransformer(name, setting)
            )
        return _loaded[name]


#: What the semantic profiles' errors suggest instead.
_LEXICAL_ONLY = "use rankProfile bm25 (or alpha 0, which is lexical only)"


class SemanticUnavailable(EmbedderUnavailable):
    """The semantic and hybrid profiles need an embedding model this installation
    lacks or that is switched off."""


_LEXICAL_ONLY = "use rankProfile bm25 (or alpha 0, which is lexical only)"


def search_embedder(settings: Settings, what: str = "semantic search") -> Embedder:
    """The ``search_embedding_model``, or :class:`SemanticUnavailable` saying what to
    set or install; ``what`` names what needs it in that message."""
    name = settings.search_embedding_model
    if not name:
        raise SemanticUnavailable(
            f"The {what} needs an embedding model, and search_embedding_model is empty: "
            "set AMELIO_SEARCH_EMBEDDING_MODEL=wordllama (with `pip install "
            f"'amelio[semantic]'`), or {_LEXICAL_ONLY}."
        )
    try:
        return load_embedder(name, setting="AMELIO_SEARCH_EMBEDDING_MODEL")
    except EmbedderUnavailable as exc:
        raise SemanticUnavailable(
            f"The {what} needs an embedding model, which this "
            f"installation lacks. {exc.message} Or "
            f"{_LEXICAL_ONLY}."
        ) from exc


def optional_embedder(settings: Settings) -> Embedder | None:
    """:func:`search_embedder` when it can be had, else None: imports embed eagerly
    when they can, and stay lexical (healed on the first semantic search) when
    they cannot."""
    try:
        return search_embedder(settings)
    except SemanticUnavailable as exc:
        log.info("documents are not embedded: %s", exc.message)
        return None
