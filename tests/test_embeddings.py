"""The shipped embedder reads WordLlama's files itself: same vectors, none of its imports."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amelio import embeddings
from amelio.embeddings import (
    WORDLLAMA_TOKENIZER,
    WORDLLAMA_WEIGHTS,
    EmbedderUnavailable,
    load_embedder,
    wordllama_dir,
)

TEXTS = [
    "how do I reset my password",
    "Rembourser la commande n°1234, s'il vous plaît",
    "SELECT * FROM users WHERE id = 1; -- is this safe?",
    "🙂 emoji, tabs\tand\nnew lines",
    "a",
    "x" * 3000,
    "Ünïcödé façade naïve café",
    "   leading and trailing spaces   ",
    *(f"message number {n} about invoices and refunds" for n in range(80)),  # two batches
]


@pytest.fixture(scope="module")
def reference() -> object:
    """WordLlama's own inference, loaded from the same installed package."""
    wordllama = pytest.importorskip("wordllama")
    return wordllama.WordLlama.load(
        cache_dir=Path(wordllama.__file__).parent, disable_download=True
    )


def test_vectors_equal_the_wordllama_package_bit_for_bit(reference: object) -> None:
    ours = embeddings._WordLlama().embed_array(TEXTS)
    theirs = reference.embed(TEXTS, norm=True)  # type: ignore[attr-defined]
    assert ours.dtype == np.float32 and ours.shape == (len(TEXTS), 256)
    assert np.array_equal(ours, theirs)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    # A batch and one text at a time give the same vector (padding adds exact zeros).
    assert np.array_equal(embeddings._WordLlama().embed_array(TEXTS[:1]), ours[:1])
    assert load_embedder("wordllama").embed([]) == []


def test_a_text_without_tokens_is_the_zero_vector_not_nans(reference: object) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value encountered in divide"
        ours = embeddings._WordLlama().embed_array(["", "hello", ""])
    assert not np.isnan(ours).any()
    assert not ours[0].any() and not ours[2].any()
    with np.errstate(invalid="ignore"):
        theirs = reference.embed(["", "hello"], norm=True)  # type: ignore[attr-defined]
    assert np.isnan(theirs[0]).all()  # what WordLlama itself does
    assert np.array_equal(ours[1], theirs[1])


def test_loading_the_model_imports_no_wordllama_package() -> None:
    code = (
        "import sys; from amelio.embeddings import load_embedder; "
        "v = load_embedder('wordllama').embed(['hello']); "
        "assert len(v[0]) == 256; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('wordllama', 'requests', 'safetensors')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _fake_package(folder: Path, weights: bytes) -> Path:
    pytest.importorskip("wordllama")  # its tokenizer file is copied
    folder.joinpath(*WORDLLAMA_TOKENIZER).parent.mkdir(parents=True)
    real = wordllama_dir().joinpath(*WORDLLAMA_TOKENIZER)
    folder.joinpath(*WORDLLAMA_TOKENIZER).write_bytes(real.read_bytes())
    folder.joinpath(*WORDLLAMA_WEIGHTS).parent.mkdir(parents=True)
    folder.joinpath(*WORDLLAMA_WEIGHTS).write_bytes(weights)
    return folder


def _safetensors(header: dict[str, object], data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize(
    ("weights", "reason"),
    [
        (b"", "cannot be read"),
        (
            _safetensors(
                {"other": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]}}, bytes(8)
            ),
            "holds no fp16 matrix",
        ),
        (
            _safetensors(
                {"embedding.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
                bytes(16),
            ),
            "holds no fp16 matrix",
        ),
        (
            _safetensors(
                {
                    "embedding.weight": {
                        "dtype": "F16",
                        "shape": [32000, 256],
                        "data_offsets": [0, 16],
                    }
                },
                bytes(16),
            ),
            "truncated",
        ),
    ],
)
def test_a_damaged_model_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weights: bytes, reason: str
) -> None:
    folder = _fake_package(tmp_path / "wordllama", weights)
    monkeypatch.setattr(embeddings, "wordllama_dir", lambda: folder)
    with pytest.raises(EmbedderUnavailable, match=reason) as info:
        embeddings._WordLlama()
    assert "amelio[semantic]" in info.value.message


def test_without_the_package_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)
    with pytest.raises(EmbedderUnavailable, match=r"pip install 'amelio\[semantic\]'"):
        wordllama_dir()
