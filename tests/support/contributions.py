"""What the contribution tests and benchmarks share: the body a browser posts back
for a leased task (``MartyContributionV1``), as ``amelio.js`` sends it, and a
workspace whose documents have no vectors yet, for browsers to embed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from amelio.contributions import encode_vectors
from amelio.search.engines.registry import workspace_corpus
from amelio.search.store import DocumentStore
from amelio.workspace.folder import Workspace, init_workspace

__all__ = ["contribution_body", "workspace_without_vectors"]


def workspace_without_vectors(
    folder: Path, docs: Sequence[Mapping[str, Any]]
) -> tuple[Workspace, DocumentStore]:
    """A new workspace in ``folder``/ws whose corpus holds ``docs`` (BEIR rows:
    ``_id``, ``title``, ``text``) imported with no embedder, so every document waits
    for a vector; and its document store."""
    ws, _ = init_workspace(folder / "ws")
    corpus_file = folder / "docs.jsonl"
    corpus_file.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    store = workspace_corpus(ws.settings)
    store.import_file(corpus_file)
    return ws, store


def contribution_body(
    task: Mapping[str, Any],
    vectors: Any,
    *,
    client_token: str | None,
    tier: str,
    compute_ms: float,
    client_version: str = "amelio.js/1",
    timings: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The result of ``task`` (one of a lease's ``tasks``): ``vectors`` (an n×d array or
    list of lists, encoded as the protocol wants), sent by the client of
    ``client_token`` on a ``tier`` device that spent ``compute_ms`` CPU milliseconds
    on it; ``timings`` adds the optional ones (``leasedMs``, ``startedMs``,
    ``finishedMs``)."""
    return {
        "contributionVersion": "v1",
        "taskId": task["taskId"],
        "leaseId": task["leaseId"],
        "clientToken": client_token,
        "taskType": task["taskType"],
        "inputDigest": task["inputDigest"],
        "result": {
            "model": task["model"],
            "dimensions": task["dimensions"],
            "vectors": encode_vectors(vectors),
        },
        "deviceTier": tier,
        "clientVersion": client_version,
        "timings": {**(timings or {}), "computeMs": compute_ms},
        "consent": {"compute": "granted", "purpose": "search_index"},
    }
