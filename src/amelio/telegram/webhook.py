"""The bot behind a webhook: Telegram POSTs each update to the service.

``amelio telegram run --webhook URL`` serves the API with this route mounted at
URL's path and registers URL with Telegram (setWebhook, with a secret token).
Telegram sends the secret back in ``X-Telegram-Bot-Api-Secret-Token`` on every
delivery; a request without it, or with another, is refused with 403 before its
body is read as an update, so only Telegram can speak for a chat. The secret is
the workspace signer's digest of the bot token (purpose ``telegram-webhook``):
every process of the workspace agrees on it without another setting, and it
cannot be guessed without the workspace's secret key.

The route queues the update and answers at once: Telegram waits for the answer
before it sends the chat's next update, and the LLM may take seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from telegram import Update

from amelio.assistant.respond import warm_up
from amelio.errors import ConfigError
from amelio.llm.base import Provider
from amelio.privacy.signing import equal, signer
from amelio.telegram.bot import ALLOWED_UPDATES, build_bot, check_token
from amelio.telegram.client import call
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace

__all__ = ["DEFAULT_PATH", "SECRET_HEADER", "webhook_path", "webhook_router", "webhook_secret"]

log = logging.getLogger(__name__)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 -- a header name
DEFAULT_PATH = "/telegram/webhook"
_PURPOSE = "telegram-webhook"


def webhook_secret(settings: Settings) -> str:
    """The secret Telegram sends back in X-Telegram-Bot-Api-Secret-Token."""
    token = settings.telegram_token.get_secret_value().strip()
    return signer(settings).hexdigest(token, _PURPOSE)


def webhook_path(url: str) -> str:
    """The path the route answers at: ``url``'s, or :data:`DEFAULT_PATH` when it has
    none; a URL Telegram would refuse is a clear error."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(
            f"--webhook {url!r} is not an http(s) URL (Telegram wants https "
            "on port 443, 80, 88 or 8443)."
        )
    return parsed.path if parsed.path not in ("", "/") else DEFAULT_PATH


def webhook_router(
    ws: Workspace, url: str, *, provider: Provider | None = None, register: bool = True
) -> APIRouter:
    """A router with the update route at ``url``'s path, whose lifespan starts the bot
    with the service and (``register``) tells Telegram to deliver to ``url``; a
    refused token stops the start, with the reason."""
    path = webhook_path(url)
    _, application = build_bot(ws, provider=provider)
    secret = webhook_secret(ws.settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await check_token(application, ws.settings.telegram_api_url)
        if ws.settings.warm_up:  # as the service's own lifespan does for /v1/chat
            await asyncio.to_thread(warm_up, ws)
        if register:
            await call(
                lambda: application.bot.set_webhook(
                    url, secret_token=secret, allowed_updates=ALLOWED_UPDATES
                )
            )
        await application.start()
        try:
            yield
        finally:
            await application.stop()
            await application.shutdown()

    router = APIRouter(lifespan=lifespan, include_in_schema=False)

    @router.post(path)
    async def receive(request: Request) -> JSONResponse:
        if not equal(request.headers.get(SECRET_HEADER), secret):
            log.warning("telegram webhook: refused a request without the secret token")
            return JSONResponse({"detail": "Wrong or missing secret token."}, status_code=403)
        try:
            data: Any = json.loads(await request.body())
            update = Update.de_json(data, application.bot)
        except (ValueError, TypeError, KeyError) as exc:
            return JSONResponse({"detail": f"Not a Telegram update: {exc}"}, status_code=400)
        if update is None:
            return JSONResponse({"detail": "Not a Telegram update: empty body."}, status_code=400)
        await application.update_queue.put(update)
        return JSONResponse({})

    return router
