"""A valid example of every event type, as a client would send it.

For documentation, tests, benchmarks and client authors: ``example_event(t)``
is the smallest realistic event of type ``t`` (sections the type requires, plus
the seed's common ones), and the token it needs is issued by ``signer``.
"""

from __future__ import annotations

import time
from typing import Any

from amelio.feedback.schema import new_event_id
from amelio.feedback.tokens import TokenSigner

__all__ = ["example_event"]

_QUERY_TYPES = {
    "result_pinned",
    "result_hidden",
    "result_clicked",
    "result_dwell_time",
    "query_reformulated",
    "query_abandoned",
}

_PAYLOADS: dict[str, dict[str, Any]] = {
    "vote_up": {"vote": {"score": 1}},
    "vote_down": {"vote": {"score": 1, "comment": "The date is wrong."}},
    "clarification_chosen": {"clarification": {"clarificationId": "c-1", "optionKey": "this_week"}},
    "result_pinned": {"result": {"docId": "calendar_event:558:42", "rankShown": 3}},
    "result_hidden": {
        "result": {"docId": "calendar_event:558:43"},
        "hide": {"reason": "not relevant"},
    },
    "report_problem": {
        "problem": {"category": "wrong_answer", "freeText": "The venue closed last year."}
    },
    "correction_inline": {
        "correction": {"slot": "place", "beforeValue": "Lyon", "afterValue": "Lille"}
    },
    "result_clicked": {
        "result": {
            "docId": "calendar_event:558:42",
            "tableId": 558,
            "rowId": 42,
            "rankShown": 3,
            "scoreVespa": 0.81,
            "scoreCrossEncoder": 0.62,
        }
    },
    "result_dwell_time": {
        "result": {"docId": "calendar_event:558:42", "rankShown": 3},
        "outcome": {"dwellMs": 12450},
    },
    "query_reformulated": {"outcome": {"reformulatedAfter": True}},
    "query_abandoned": {},
    "action_executed": {"outcome": {"actionExecuted": True}},
    "action_cancelled": {"outcome": {"actionExecuted": False}},
    "marty_response_replaced": {"outcome": {"ttftMs": 187, "ttfsMs": 220}},
}


def example_event(
    event_type: str,
    *,
    signer: TokenSigner | None = None,
    query_id: str = "q-1",
    request_id: str = "r-1",
    session_id: str = "s-1",
    user_id: str | None = "u-1",
    time_ms: int | None = None,
    consent: str = "granted",
    token: str | None = None,
) -> dict[str, Any]:
    """A valid ``event_type`` event (a fresh dict each call, with a new eventId).

    Events about a query carry ``token``, else one ``signer`` issues, else none
    (the collector will then reject them, as it should).
    """
    request: dict[str, Any] = {
        "requestId": request_id,
        "branch": "where_event",
        "intentKey": "where_event.lookup",
        "modelBundleVersion": "v3.2.1",
    }
    if event_type in _QUERY_TYPES:
        request |= {"queryId": query_id, "rankProfile": "hybrid_with_feedback", "alpha": 0.62}
        if token is None and signer is not None:
            token = signer.issue(query_id, request_id)
        if token is not None:
            request["feedbackToken"] = token
    session: dict[str, Any] = {"sessionId": session_id, "rolesHash": "ABCDEFGH", "locale": "fr"}
    if user_id is not None:
        session["userId"] = user_id
    event: dict[str, Any] = {
        "eventVersion": "v1",
        "eventId": new_event_id(),
        "eventTimeMs": int(time.time() * 1000) if time_ms is None else time_ms,
        "eventType": event_type,
        "session": session,
        "context": {
            "routeId": "/recherche",
            "view": "calendar",
            "embed": False,
            "filtersFingerprint": "ctx1a2b3c4d",
            "deviceTier": "MID",
        },
        "request": request,
        "consent": {"telemetry": consent},
    }
    for name, section in _PAYLOADS[event_type].items():
        event[name] = {**section}
    return event
