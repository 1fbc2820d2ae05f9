"""Documents as they come in (BEIR JSONL or NDJSON) and the hits engines return.

Two input layouts are read, line by line:

* BEIR: ``{"_id", "title", "text", ...}``;
* NDJSON: ``{"docId", "title", "body", ...}``.

Other fields are kept as the document's ``extra``. A line with ``"deleted":
true`` (or ``"op": "delete"``) deletes its document; a known id is replaced.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from amelio.errors import InvalidInput
from amelio.text import json_lines

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Deletion",
    "Document",
    "Hit",
    "ImportReport",
    "LexicalHit",
    "best",
    "parse_line",
    "read_documents",
]


@dataclass(frozen=True)
class Document:
    """One searchable document; ``extra`` keeps the input's other fields."""

    doc_id: str
    title: str
    body: str
    extra: dict[str, Any] = field(default_factory=dict)


class Deletion(NamedTuple):
    doc_id: str


class Hit(NamedTuple):
    doc_id: str
    score: float


#: The lexical engine's hits (BM25, higher is better).
LexicalHit = Hit


@dataclass(frozen=True)
class ImportReport:
    upserted: int
    deleted: int
    total: int

    def to_dict(self) -> dict[str, int]:
        return {"upserted": self.upserted, "deleted": self.deleted, "total": self.total}


def parse_line(record: object, where: str) -> Document | Deletion:
    """A decoded JSON line as a document or a deletion; :class:`InvalidInput` naming
    ``where`` (file and line) otherwise."""
    if not isinstance(record, dict):
        raise InvalidInput(f"{where}: a document is a JSON object.")
    raw_id = record.get("_id", record.get("docId"))
    if not isinstance(raw_id, str | int) or isinstance(raw_id, bool) or str(raw_id) == "":
        raise InvalidInput(
            f'{where}: the document has no id: give "_id" (BEIR) or "docId" (NDJSON).', field="_id"
        )
    doc_id = str(raw_id)
    if len(doc_id) > 256:
        raise InvalidInput(f"{where}: the id is longer than 256 characters.", field="_id")
    if record.get("deleted") is True or record.get("op") == "delete":
        return Deletion(doc_id)
    title = record.get("title") or ""
    body = record.get("text", record.get("body")) or ""
    if not isinstance(title, str) or not isinstance(body, str):
        raise InvalidInput(f"{where}: title and text/body must be strings.")
    extra = {
        k: v
        for k, v in record.items()
        if k not in ("_id", "docId", "title", "text", "body", "op", "deleted")
    }
    return Document(doc_id, title, body, extra)


def read_documents(path: Path) -> Iterator[Document | Deletion]:
    """The documents and deletions of a JSONL file, in order (errors name the line)."""
    with path.open(encoding="utf-8") as f:
        for _number, where, record in json_lines(f, path.name):
            yield parse_line(record, where)


def best(scores: npt.NDArray[np.float32], doc_ids: Sequence[str], limit: int) -> list[Hit]:
    """The ``limit`` best of ``scores`` (one per ``doc_ids``), by score then position."""
    import numpy as np

    if not len(scores) or limit <= 0:
        return []
    k = min(limit, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.lexsort((top, -scores[top]))]
    return [Hit(doc_ids[i], float(scores[i])) for i in top]
