"""Every error leaves the service as ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from amelio.errors import AmelioError, RateLimited

__all__ = [
    "ErrorBody",
    "document_json_bodies",
    "error_response",
    "error_responses",
    "install_error_handlers",
]

log = logging.getLogger("amelio.server")

_HTTP_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "input_too_large",
    422: "invalid_input",
}


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine name, e.g. `invalid_input`, `forbidden`.")
    message: str = Field(description="What is wrong and what to do next, for a person.")
    details: dict[str, Any] = Field(
        description="Machine-readable context (camelCase names): the field, the limit, the id."
    )


class ErrorBody(BaseModel):
    """Every error response: one shape for every status, documented in OpenAPI."""

    error: ErrorDetail


_STATUS_HELP = {
    401: "No API key, or an invalid or revoked one.",
    403: "The key's role or project scope does not allow this.",
    404: "The project, skill or other named thing does not exist.",
    409: "A concurrent change won: reload and retry.",
    413: "The body or a field is over a configured limit.",
    415: "The body is not labelled `Content-Type: application/json`.",
    422: "Invalid input; `details` names the field.",
    429: "Rate limited: retry after the `Retry-After` header's seconds.",
    502: "The LLM failed to answer.",
    503: "A needed part is not configured or unavailable (LLM, semantic search, database).",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for ``statuses``, each with the :class:`ErrorBody` shape."""
    return {
        status: {"model": ErrorBody, "description": _STATUS_HELP[status]} for status in statuses
    }


def error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, "details": details or {}}},
        status_code=status,
        headers=headers,
    )


def document_json_bodies(app: FastAPI, routers: Iterable[APIRouter]) -> None:
    """List 415 in the OpenAPI document for every route of ``routers`` whose body
    FastAPI reads as JSON: those answer it when the body comes without
    ``Content-Type: application/json`` (:func:`_unlabelled_body`). Routes that read
    their body themselves (feedback events, the OpenAI-compatible ones) take any type
    and are left as they are."""
    parsed = {
        (method.lower(), route.path)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and route.body_field is not None
        for method in route.methods or ()
    }
    generate = app.openapi
    unlabelled = {
        "description": _STATUS_HELP[415],
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()  # FastAPI's, which it also keeps as app.openapi_schema
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                if (method, path) in parsed:
                    operation.setdefault("responses", {})["415"] = unlabelled
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _unlabelled_body(request: Request, exc: RequestValidationError) -> JSONResponse | None:
    """415 for a body FastAPI did not read as JSON because of its Content-Type.

    FastAPI parses a body as JSON only under a JSON media type, and hands any other
    body over as bytes, which fails validation as "Input should be a valid
    dictionary": true, and no help to someone whose ``curl -d`` sent
    ``application/x-www-form-urlencoded``. Reading such a body as JSON anyway would
    hide the mistake, and would let a page on another site post JSON through a plain
    form or a ``text/plain`` fetch, which browsers send without asking the service
    first (no CORS preflight)."""
    if not isinstance(exc.body, bytes | bytearray) or not exc.body:
        return None
    received = request.headers.get("content-type")
    return error_response(
        415,
        "unsupported_media_type",
        "Send the body as JSON with the header `Content-Type: application/json` "
        f"(this request's Content-Type: {received or 'none'}; `curl -d` sends "
        "application/x-www-form-urlencoded unless you add "
        "-H 'Content-Type: application/json').",
        {"header": "Content-Type", "expected": "application/json", "received": received},
    )


def _camel(name: str) -> str:
    """API responses use camelCase names (rule_id -> ruleId), error details included."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AmelioError)
    async def amelio_error(_: Request, exc: AmelioError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
        if isinstance(exc, RateLimited):
            headers = {"Retry-After": str(exc.retry_after)}
        details = {_camel(k): v for k, v in exc.details.items()}
        return error_response(exc.http_status, exc.code, exc.message, details, headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not decode the body at all
            return error_response(
                422, "invalid_json", "The request body is not valid JSON (or not UTF-8 text)."
            )
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        unlabelled = _unlabelled_body(request, exc)
        if unlabelled is not None:
            return unlabelled
        bad_json = [e for e in exc.errors() if e.get("type") == "json_invalid"]
        if bad_json:
            where = bad_json[0]["loc"][-1]
            reason = bad_json[0].get("ctx", {}).get("error", "invalid JSON")
            return error_response(
                422,
                "invalid_json",
                f"The request body is not valid JSON: {reason} at character {where}.",
                {"position": where},
            )
        problems = [
            {"field": ".".join(str(p) for p in err["loc"] if p != "body"), "message": err["msg"]}
            for err in exc.errors()
        ]
        summary = "; ".join(f"{p['field'] or 'body'}: {p['message']}" for p in problems)
        return error_response(
            422, "invalid_input", f"Invalid request: {summary}", {"errors": problems}
        )

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "Internal error; see the server log.")
