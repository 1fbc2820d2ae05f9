"""Feedback events: the schema (public), ingestion (client or better), stats."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool

from amelio.errors import AuthError, Forbidden, InputTooLarge, InvalidInput
from amelio.feedback import Collector, feedback_stats, json_schema
from amelio.server.auth import bearer, require
from amelio.workspace.keys import ApiKey, authenticate

router = APIRouter(tags=["feedback"])

Bot = Annotated[ApiKey, Depends(require("bot"))]
_client_or_bot = require("client", "bot")
_collector_lock = threading.Lock()

_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "A JSON array of MartyFeedbackEventV1 (GET /v1/feedback/schema), or "
        "NDJSON: one event per line, whatever the Content-Type (sendBeacon "
        "sends text/plain). At most feedback_max_events events and "
        "feedback_max_bytes bytes.",
        "content": {
            "application/json": {"schema": {"type": "array", "items": {}}},
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
    }
}


def _sender(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    key: Annotated[
        str | None,
        Query(
            max_length=200,
            description="A `client` key, for `navigator.sendBeacon`, which "
            "cannot set an Authorization header. Client keys only: a URL ends up in access "
            "logs, and a client key can do nothing but send events (it is in the page "
            "anyway).",
        ),
    ] = None,
) -> ApiKey:
    """The key in the Authorization header (client, bot or admin), or a client key in
    ``?key=`` (amelio.js sends its last events with sendBeacon as a page goes away)."""
    if key is None:
        return _client_or_bot(request, credentials)
    if credentials is not None:
        raise InvalidInput(
            "Send the API key once: in the Authorization header or as ?key=, not both.", field="key"
        )
    found = authenticate(request.app.state.workspace.engine, key)
    if found is None:
        raise AuthError("Invalid or revoked API key.")
    if found.role != "client":
        raise Forbidden(
            f"Only a 'client' key may be sent as ?key= (URLs end up in logs); "
            f"send a {found.role!r} key in `Authorization: Bearer`.",
            role=found.role,
        )
    return found


Client = Annotated[ApiKey, Depends(_sender)]


def _collector(request: Request) -> Collector:
    """The app's one collector (its rate-limit buckets must outlive a request)."""
    state = request.app.state
    collector: Collector | None = getattr(state, "feedback_collector", None)
    if collector is None:
        with _collector_lock:
            collector = getattr(state, "feedback_collector", None)
            if collector is None:
                collector = Collector(state.workspace)
                state.feedback_collector = collector
    return collector


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` (before it is all read)."""
    declared = request.headers.get("content-length", "")
    too_large = InputTooLarge(
        f"A feedback batch is at most {limit:,} bytes; split it (AMELIO_FEEDBACK_MAX_BYTES).",
        limit=limit,
    )
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


@router.get("/v1/feedback/schema", summary="JSON Schema of MartyFeedbackEventV1 (public)")
def schema() -> dict[str, Any]:
    return json_schema()


@router.post(
    "/v1/feedback/events",
    status_code=202,
    openapi_extra=_BODY_DOC,
    summary="Ingest feedback events; a status per event (202 once stored)",
)
async def ingest(request: Request, key: Client) -> dict[str, Any]:
    collector = _collector(request)
    body = await _read_body(request, collector.settings.feedback_max_bytes)
    result = await run_in_threadpool(collector.ingest_body, body, api_key=f"key:{key.id}")
    return result.to_dict()


@router.get("/v1/feedback/stats", summary="Stored feedback events per type, and the chain")
def stats(request: Request, _: Bot) -> dict[str, Any]:
    return feedback_stats(request.app.state.workspace)
