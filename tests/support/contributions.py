"""The body a browser posts back for a leased task (``MartyContributionV1``), as
``amelio.js`` sends it: built the same way by the contribution tests and by
``benchmarks/compute_attack.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amelio.contributions import encode_vectors

__all__ = ["contribution_body"]


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
