"""The values of the knowledge loop: a source to sync, a notebook's status.

A source is what a business event carries: ``{sourceId, kind, title, text,
url?, updatedAt}``. It is validated once, here, whether it comes from the API,
a JSON file or a watched folder, so every path refuses the same things with the
same messages.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from amelio.db.schema import aware
from amelio.errors import InputTooLarge, InvalidInput

__all__ = ["Notebook", "Source", "aware"]

_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_SOURCE_ID = 256
MAX_TITLE = 500
MAX_URL = 2000
#: Links end up in answers and on the dashboard: no ``javascript:`` or ``data:``.
_URL_SCHEMES = ("http://", "https://", "file://")


def _updated_at(value: Any) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise InvalidInput(
                f"updatedAt {value!r} is not an ISO-8601 date-time (e.g. 2026-05-01T12:00:00Z).",
                field="updatedAt",
            ) from exc
    else:
        raise InvalidInput("updatedAt is required: an ISO-8601 date-time.", field="updatedAt")
    return aware(moment).astimezone(UTC)


@dataclass(frozen=True)
class Source:
    """One document of a notebook. ``updated_at`` decides between two versions of
    the same ``source_id``: equal is a no-op, newer replaces, older is ignored."""

    source_id: str
    text: str
    updated_at: datetime
    kind: str = "doc"
    title: str = ""
    url: str | None = None

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", self.source_id)

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, max_chars: int) -> Source:
        """A source from its JSON shape (camelCase), or :class:`InvalidInput` naming
        the field that is wrong."""
        if not isinstance(data, Mapping):
            raise InvalidInput(
                "A source is a JSON object: {sourceId, kind, title, text, url?, updatedAt}.",
                field="source",
            )
        unknown = sorted(set(data) - {"sourceId", "kind", "title", "text", "url", "updatedAt"})
        if unknown:
            raise InvalidInput(f"Unknown source field(s): {', '.join(unknown)}.", field=unknown[0])
        source_id = data.get("sourceId")
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidInput("sourceId is required: a non-empty string.", field="sourceId")
        if len(source_id) > MAX_SOURCE_ID or _CONTROL.search(source_id):
            raise InvalidInput(
                f"sourceId must be at most {MAX_SOURCE_ID} printable characters.", field="sourceId"
            )
        kind = data.get("kind", "doc")
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise InvalidInput(
                f"kind {kind!r} must be 1-32 lowercase letters, digits, '-' or "
                "'_' (ticket, wiki, doc, …).",
                field="kind",
            )
        title = data.get("title") or source_id
        if not isinstance(title, str) or len(title) > MAX_TITLE or "\x00" in title:
            raise InvalidInput(
                f"title must be a string of at most {MAX_TITLE} characters.", field="title"
            )
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("text is required: the source's content.", field="text")
        if "\x00" in text:
            raise InvalidInput("text contains a NUL character.", field="text")
        if len(text) > max_chars:
            raise InputTooLarge(
                f"Source {source_id!r} has {len(text):,} characters, over the "
                f"limit of {max_chars:,} (max_text_chars).",
                field="text",
            )
        url = data.get("url")
        if url is not None and (
            not isinstance(url, str) or len(url) > MAX_URL or not url.startswith(_URL_SCHEMES)
        ):
            raise InvalidInput(
                f"url must be an http(s):// or file:// address of at most {MAX_URL} characters.",
                field="url",
            )
        return cls(
            source_id=source_id,
            text=text,
            updated_at=_updated_at(data.get("updatedAt")),
            kind=kind,
            title=" ".join(title.split()) or source_id,
            url=url or None,
        )

    def content_hash(self) -> str:
        blob = json.dumps([self.kind, self.title, self.url, self.text], ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def payload(self) -> dict[str, Any]:
        """What the queue stores (``source_id`` and ``updated_at`` have columns)."""
        return {"kind": self.kind, "title": self.title, "text": self.text, "url": self.url}

    def to_dict(self, *, with_text: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sourceId": self.source_id,
            "kind": self.kind,
            "title": self.title,
            "url": self.url,
            "updatedAt": self.updated_at.isoformat(),
        }
        if with_text:
            data["text"] = self.text
        return data


@dataclass(frozen=True)
class Notebook:
    """A notebook and its status, as ``GET /v1/knowledge/notebooks`` shows it."""

    id: int
    name: str
    project: str
    created_at: datetime
    sources: int = 0
    chunks: int = 0
    last_sync: datetime | None = None
    pending: int = 0
    failures: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "createdAt": self.created_at.isoformat(),
            "sources": self.sources,
            "chunks": self.chunks,
            "lastSync": self.last_sync.isoformat() if self.last_sync else None,
            "pending": self.pending,
            "failures": self.failures,
        }
