"""Refuse oversized request bodies before anything reads them into memory."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodySizeLimit"]


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
                body = json.dumps({"error": {"code": "input_too_large",
                                             "message": self._message(),
                                             "details": {"limit": self.limit}}}).encode()
                await send({"type": "http.response.start", "status": 413,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
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
