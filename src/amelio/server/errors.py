"""Every error leaves the service as ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from amelio.errors import AmelioError, RateLimited

__all__ = ["error_response", "install_error_handlers"]

log = logging.getLogger("amelio.server")

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "input_too_large"}


def error_response(status: int, code: str, message: str, details: Any = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, "details": details or {}}},
        status_code=status,
        headers=headers,
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
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        bad_json = [e for e in exc.errors() if e.get("type") == "json_invalid"]
        if bad_json:
            where = bad_json[0]["loc"][-1]
            reason = bad_json[0].get("ctx", {}).get("error", "invalid JSON")
            return error_response(422, "invalid_json", f"The request body is not valid JSON: "
                                  f"{reason} at character {where}.", {"position": where})
        problems = [
            {"field": ".".join(str(p) for p in err["loc"] if p != "body"), "message": err["msg"]}
            for err in exc.errors()
        ]
        summary = "; ".join(f"{p['field'] or 'body'}: {p['message']}" for p in problems)
        return error_response(422, "invalid_input", f"Invalid request: {summary}",
                              {"errors": problems})

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "Internal error; see the server log.")
