"""Refuse oversized request bodies before anything reads them into memory, and NUL
characters before anything stores them."""

from __future__ import annotations

import json
import re

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodySizeLimit", "RefuseNul"]


class BodySizeLimit:
    """Pure ASGI middleware: 413 when Content-Length or the streamed body passes ``limit``.

    A declared length over the limit is refused before the app runs; a chunked
    body is counted as it streams and refused the moment it passes the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _message(self) -> str:
        return f"Request body is over the {self.limit:,}-byte limit (AMELIO_MAX_REQUEST_BYTES)."

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                # Amelio's error shape, with OpenAI's `type` and `param` too, so the
                # OpenAI-compatible routes' clients read it as well.
                body = json.dumps(
                    {
                        "error": {
                            "code": "input_too_large",
                            "message": self._message(),
                            "details": {"limit": self.limit},
                            "type": "invalid_request_error",
                            "param": None,
                        }
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, detail=self._message())
            return message

        await self.app(scope, counting_receive, send)


_JSON_NUL = re.compile(rb"(\\+)u0000")


def _has_json_nul(data: bytes) -> bool:
    """Whether JSON text holds an escaped NUL (``\\u0000``, not an escaped backslash
    followed by ``u0000``: the backslashes before it must be odd in number)."""
    if b"u0000" not in data:  # nearly every body: one C-speed scan, no regex
        return False
    return any(len(m.group(1)) % 2 for m in _JSON_NUL.finditer(data))


class RefuseNul:
    """Pure ASGI middleware: 422 for a NUL character anywhere in a request.

    No name, query or text Amelio stores may hold one, and PostgreSQL cannot
    store one at all: refusing it at the door gives one clear error instead of a
    database exception deep in a handler. It looks at the path, the query string
    and the body (raw NUL bytes, ``%00`` in forms, ``\\u0000`` in JSON) as it
    streams, keeping only a few bytes across chunk boundaries.
    """

    _CARRY = 64

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    @staticmethod
    def _refuse(where: str) -> HTTPException:
        return HTTPException(
            422,
            detail=f"The request's {where} holds a NUL character "
            "(\\u0000), which Amelio never accepts.",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            response = JSONResponse(
                {
                    "error": {
                        "code": "invalid_input",
                        "message": "The request's URL holds a NUL character (%00), which Amelio "
                        "never accepts.",
                        "details": {},
                    }
                },
                status_code=422,
            )
            await response(scope, receive, send)
            return
        content_type = dict(scope.get("headers", [])).get(b"content-type", b"")
        is_form = content_type.startswith(b"application/x-www-form-urlencoded")
        tail = b""

        async def checking_receive() -> Message:
            nonlocal tail
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                data = tail + chunk
                if b"\x00" in chunk or (b"%00" in data if is_form else _has_json_nul(data)):
                    raise self._refuse("body")
                tail = data[-self._CARRY :]
            return message

        await self.app(scope, checking_receive, send)
