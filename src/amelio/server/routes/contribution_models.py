"""The embedding model's files, served to the browser worker of amelio.js.

Browsers that lend idle time embed search documents themselves
(``amelio/embed-worker.js``), and their vectors are only useful when they are the
server's own: the worker must run WordLlama's ``l2_supercat`` model on the very same
tokenizer and weights. Those ship inside the installed ``wordllama`` wheel
(``amelio[semantic]``), so the service hands out exactly the files it embeds with
itself, and nothing is fetched from a model hub by either side.

* ``GET /v1/contributions/models/{model}/`` lists the files with their size and
  SHA-256, which the worker checks what it downloaded against (a corrupted cache
  would otherwise produce wrong vectors and cost the browser its trust).
* ``GET /v1/contributions/models/{model}/{file}`` serves one of them.

Both are public: the files are the open WordLlama weights, and a browser worker has
no key to send. A file name is looked up in a fixed allow-list that maps it to a path
inside the package; no part of the URL ever becomes a path. The files never change
for an installed package, so they are cached for a day as ``immutable``, with the
SHA-256 as their ETag (``If-None-Match`` gets a 304); the worker adds the digest to
each file URL (``?v=``), so an upgraded package is a new URL, not a stale cache hit.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from amelio.contributions import DIMENSIONS as MODEL_DIMENSIONS
from amelio.embeddings import (
    WORDLLAMA,
    WORDLLAMA_TOKENIZER,
    WORDLLAMA_WEIGHTS,
    EmbedderUnavailable,
    wordllama_dir,
)
from amelio.errors import NotFound

__all__ = ["DIMENSIONS", "FILES", "router"]

router = APIRouter(tags=["contributions"])

#: The vectors' size: ``l2_supercat`` at the dimensions tasks name (256), as
#: :mod:`amelio.embeddings` loads it (the weights file below is that size's matrix).
DIMENSIONS = MODEL_DIMENSIONS[WORDLLAMA]


@dataclass(frozen=True)
class _File:
    """One served file: where it lies inside the ``wordllama`` package, and its type."""

    parts: tuple[str, ...]
    media_type: str


#: The served names and the package files behind them: the only files these routes
#: can ever read. The names are the worker's; the paths are wordllama's own.
FILES: dict[str, _File] = {
    "tokenizer.json": _File(WORDLLAMA_TOKENIZER, "application/json"),
    "weights.safetensors": _File(WORDLLAMA_WEIGHTS, "application/octet-stream"),
}

_FILE_CACHE = "public, max-age=86400, immutable"
#: The listing is small and names the digests, so it is revalidated every time (a 304
#: while the package is unchanged) and an upgrade is seen at once.
_LISTING_CACHE = "no-cache"


class ModelFile(BaseModel):
    """One file of the model, as the worker downloads and checks it."""

    bytes: int = Field(description="Size in bytes.")
    sha256: str = Field(description="SHA-256 of the content, lowercase hex.")


class ModelListing(BaseModel):
    """What ``GET /v1/contributions/models/{model}/`` answers."""

    model: str = Field(description="The embedding model's name, as tasks name it.")
    dimensions: int = Field(description="Size of the vectors the model produces.")
    files: dict[str, ModelFile] = Field(
        description="Each file under this URL, by name: its size and SHA-256."
    )


ModelName = Annotated[
    str, PathParam(description="The embedding model; only `wordllama`.", examples=[WORDLLAMA])
]
FileName = Annotated[
    str, PathParam(description=f"One of {', '.join(sorted(FILES))}.", examples=["tokenizer.json"])
]


@lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """The file's SHA-256, computed once per process and version of the file (size and
    modification time are in the key, so a reinstall is hashed again)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class _Found:
    path: Path
    bytes: int
    sha256: str
    media_type: str


def _check_model(model: str) -> None:
    if model != WORDLLAMA:
        raise NotFound(
            f"No model {model!r} to download: the browser embedder uses {WORDLLAMA!r} only.",
            model=model,
            models=[WORDLLAMA],
        )


def _found(name: str) -> _Found:
    """The allow-listed file ``name`` of the installed package, with its digest."""
    entry = FILES[name]
    path = wordllama_dir().joinpath(*entry.parts)
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise EmbedderUnavailable(
            f"The installed wordllama package has no {'/'.join(entry.parts)}: reinstall "
            "it (pip install --force-reinstall 'amelio[semantic]')."
        ) from exc
    return _Found(
        path, stat.st_size, _sha256(str(path), stat.st_size, stat.st_mtime_ns), entry.media_type
    )


def _etag(digest: str) -> str:
    return f'"{digest}"'


def _not_modified(request: Request, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weak or strong) or is ``*``."""
    header = request.headers.get("if-none-match")
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag in tags


def _headers(etag: str, cache: str) -> dict[str, str]:
    return {"Cache-Control": cache, "ETag": etag}


_HEADERS = {
    "ETag": {"description": "The content's SHA-256, quoted.", "schema": {"type": "string"}},
    "Cache-Control": {
        "description": "How long a browser may keep it.",
        "schema": {"type": "string"},
    },
}
_NOT_MODIFIED = {
    "description": "`If-None-Match` named the current ETag: keep your copy.",
    "headers": _HEADERS,
}


@router.get(
    "/v1/contributions/models/{model}/",
    summary="The browser embedder's model files: names, sizes, SHA-256 (public)",
    response_model=ModelListing,
    responses={
        200: {
            "description": "The model's files, each with its size and SHA-256.",
            "headers": _HEADERS,
        },
        304: _NOT_MODIFIED,
    },
)
def model_listing(request: Request, model: ModelName) -> Response:
    """The files the browser worker downloads for ``model``, so it can check them."""
    _check_model(model)
    files = {name: _found(name) for name in FILES}
    body = ModelListing(
        model=model,
        dimensions=DIMENSIONS,
        files={name: ModelFile(bytes=f.bytes, sha256=f.sha256) for name, f in files.items()},
    )
    etag = _etag(hashlib.sha256(body.model_dump_json().encode()).hexdigest())
    headers = _headers(etag, _LISTING_CACHE)
    if _not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    return JSONResponse(body.model_dump(), headers=headers)


@router.get(
    "/v1/contributions/models/{model}/{file}",
    summary="One file of the browser embedder's model (public)",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The file: `tokenizer.json` is JSON, the weights are "
            "a safetensors file.",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
            "headers": _HEADERS,
        },
        304: _NOT_MODIFIED,
    },
)
def model_file(request: Request, model: ModelName, file: FileName) -> Response:
    """One allow-listed file of ``model``, served from the installed package."""
    _check_model(model)
    if file not in FILES:
        raise NotFound(
            f"Model {model!r} has no file {file!r}: its files are {', '.join(sorted(FILES))}.",
            model=model,
            file=file,
            files=sorted(FILES),
        )
    found = _found(file)
    etag = _etag(found.sha256)
    headers = _headers(etag, _FILE_CACHE)
    if _not_modified(request, etag):
        return Response(status_code=304, headers=headers)
    return FileResponse(found.path, media_type=found.media_type, headers=headers)
