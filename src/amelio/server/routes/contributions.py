"""Idle compute lent by browsers (MartyContributionV1): leases, results, stats.

``GET /v1/contributions/tasks`` leases work to a browser, ``POST
/v1/contributions`` takes one result back, ``GET /v1/contributions/stats`` (admin)
says what browsers have given, and ``GET /v1/contributions/schema`` (public) is
the result's JSON Schema. The first two take the same keys as ``POST
/v1/feedback/events`` (a ``client`` key, also as ``?key=``, or a bot or admin
key): a page's client key can send events and run contributions, nothing else.
The work is :class:`amelio.contributions.Contributions`'; this module is HTTP only,
and hands it the request's remote address (behind a proxy, the address the server
is configured to trust: uvicorn's ``--forwarded-allow-ips``) and key, which decide
which identities may verify each other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from amelio.contributions import Contributions, json_schema
from amelio.contributions.leases import MAX_TASKS_PER_LEASE
from amelio.contributions.schema import MAX_VECTORS, TASK_TYPES
from amelio.contributions.tokens import CLIENT_TOKEN_PATTERN
from amelio.errors import RateLimited
from amelio.feedback.ratelimit import Bucket, RateLimiter
from amelio.feedback.schema import DeviceTier
from amelio.server.auth import require
from amelio.server.routes.feedback import Client
from amelio.workspace.keys import ApiKey

router = APIRouter(tags=["contributions"])

Admin = Annotated[ApiKey, Depends(require())]
T = TypeVar("T")
_lock = threading.Lock()

_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "One MartyContributionV1 (its JSON Schema: GET "
        "/v1/contributions/schema): the result of one task leased from GET "
        "/v1/contributions/tasks.",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


class Budget(BaseModel):
    cpuSecondsPerHour: int = Field(description="The tier's hourly CPU budget, in seconds.")
    usedLastHour: float = Field(
        description="CPU-seconds this client was charged in the last hour, this lease "
        "included: the server's estimate of the tasks leased to it, or the client's own "
        "count when that is larger."
    )


class TaskInput(BaseModel):
    texts: list[str] = Field(
        max_length=MAX_VECTORS, description="The texts to embed, exactly as the server would."
    )


class LeasedTask(BaseModel):
    taskId: str
    leaseId: str
    taskType: str = Field(description="embed_documents")
    purpose: str = Field(description="search_index")
    model: str
    dimensions: int
    inputDigest: str = Field(description="Echo it in the result.")
    input: TaskInput
    leaseExpiresMs: int = Field(description="Unix milliseconds; a result after it gets 409.")


class Lease(BaseModel):
    clientId: str | None = Field(
        description="This client's id (null only while "
        "contributions are off and no clientToken was sent)."
    )
    clientToken: str | None = Field(description="Send it with every later request.")
    trust: float | None = Field(description="0 to 1; under 0.2 the client gets no tasks.")
    budget: Budget
    leaseSeconds: int
    retryAfterMs: int = Field(description="When to ask again (0: as soon as these are done).")
    tasks: list[LeasedTask]
    reason: str | None = Field(description="Why tasks is empty (null when it is not).")


class Verdict(BaseModel):
    status: str = Field(description="pending, accepted, rejected or duplicate.")
    reason: str
    trust: float


def _app_once(request: Request, name: str, make: Callable[[Any], T]) -> T:
    """The app's one ``name`` (``make(app.state)`` on first use, under a lock)."""
    state = request.app.state
    found: T | None = getattr(state, name, None)
    if found is None:
        with _lock:
            found = getattr(state, name, None)
            if found is None:
                found = make(state)
                setattr(state, name, found)
    return found


def service(request: Request) -> Contributions:
    """The app's one contribution service (it keeps the store open)."""
    return _app_once(request, "contributions", lambda state: Contributions(state.workspace))


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _limiter(state: Any) -> RateLimiter:
    per_minute = state.settings.contributions_new_clients_per_minute
    bucket = Bucket(per_minute / 60, per_minute)  # rate 0: unlimited
    return RateLimiter(per_key=bucket, per_session=bucket)


def _new_clients(request: Request) -> RateLimiter:
    """The app's one limiter of new identities (its buckets must outlive a request):
    per client key and per remote address, ``contributions_new_clients_per_minute``."""
    return _app_once(request, "contribution_identities", _limiter)


def _charge_new_client(request: Request, key: ApiKey) -> None:
    """A request without a clientToken makes a new client (a row, and a fresh trust):
    refuse it with 429 past the per-minute allowance of its key and address."""
    address = request.client.host if request.client else "unknown"
    refusal = _new_clients(request).try_acquire(str(key.id), {address: 1}, key_cost=1)
    if refusal is not None:
        wait = RateLimiter.retry_after(refusal)
        by = "client key" if refusal.scope == "key" else "address"
        raise RateLimited(
            f"Too many new contributing clients for this {by}; retry in {wait} "
            "s, or send the clientToken an earlier response gave.",
            retry_after=wait,
            scope=by,
        )


@router.get("/v1/contributions/schema", summary="JSON Schema of MartyContributionV1 (public)")
def schema() -> dict[str, Any]:
    return json_schema()


@router.get(
    "/v1/contributions/tasks",
    response_model=Lease,
    summary="Lease tasks to a browser (empty, with a reason, when there is none)",
)
def tasks(
    request: Request,
    key: Client,
    tier: Annotated[
        DeviceTier,
        Query(
            description="The device's tier (amelio.js measures it); it sets the hourly CPU budget."
        ),
    ],
    purposes: Annotated[
        str,
        Query(
            max_length=200,
            description="Comma-separated purposes the person consented to, e.g. search_index.",
        ),
    ],
    types: Annotated[
        str, Query(max_length=200, description="Comma-separated task types the client runs.")
    ] = ",".join(TASK_TYPES),
    max_tasks: Annotated[
        int,
        Query(
            alias="max",
            ge=1,
            le=MAX_TASKS_PER_LEASE,
            description="The most tasks to lease (fewer as the client's trust falls).",
        ),
    ] = 1,
    client_token: Annotated[
        str | None,
        Query(
            alias="clientToken",
            max_length=512,
            description="The token an earlier response gave; without it a new client is "
            "issued one. A forged, altered or malformed token (one kept from an older "
            "Amelio too) is answered 422 invalid_client_token, so that the client drops "
            f"it and asks afresh. Shape: `{CLIENT_TOKEN_PATTERN}`.",
        ),
    ] = None,
    cpu_seconds: Annotated[
        float | None,
        Query(
            alias="cpuSecondsLastHour",
            ge=0,
            le=3600,
            allow_inf_nan=False,
            description="CPU-seconds the client counts for itself over the last hour; the "
            "larger of it and the server's estimate is held against the budget.",
        ),
    ] = None,
) -> dict[str, Any]:
    if client_token is None and request.app.state.settings.contributions:
        _charge_new_client(request, key)
    return service(request).lease(
        tier=tier,
        purposes=_split(purposes),
        types=_split(types),
        max_tasks=max_tasks,
        client_token=client_token,
        reported_cpu_s=cpu_seconds,
        address=request.client.host if request.client else None,
        key_id=key.id,
    )


@router.post(
    "/v1/contributions",
    response_model=Verdict,
    openapi_extra=_BODY_DOC,
    summary="Send one task's result: pending, accepted, rejected or duplicate",
)
async def contribute(request: Request, _: Client) -> dict[str, Any]:
    body = await request.body()
    return await run_in_threadpool(service(request).submit_json, body)


@router.get(
    "/v1/contributions/stats", summary="What browsers have given: clients, tasks, results, checks"
)
def stats(request: Request, _: Admin) -> dict[str, Any]:
    return service(request).stats()
