"""What every part of the Telegram front door shares about talking to the Bot API:
429 handling, and who an update's author is."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from telegram import CallbackQuery, Message, Update
from telegram.error import RetryAfter
from telegram.warnings import PTBDeprecationWarning

__all__ = ["MAX_RETRY_AFTER", "RETRIES", "author", "call", "seconds", "user_ref"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How many times a call is retried after Telegram's 429 (waiting its retry_after).
RETRIES = 3
#: The longest 429 wait honoured; a longer one gives up on that call.
MAX_RETRY_AFTER = 60.0


def seconds(exc: RetryAfter) -> float:
    """How long Telegram asked to wait. python-telegram-bot 22 gives an int with a
    deprecation warning, or a timedelta when PTB_TIMEDELTA is set; either is read
    without the warning, which is about its API, not about this use."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        delay = exc.retry_after
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


async def call(make: Callable[[], Awaitable[T]]) -> T:
    """``make()``, again after Telegram's 429 as many as :data:`RETRIES` times, each
    after the ``retry_after`` Telegram asked for: a flood wait is a schedule, not
    an error."""
    for attempt in range(RETRIES + 1):
        try:
            return await make()
        except RetryAfter as exc:
            wait = seconds(exc)
            if attempt == RETRIES or wait > MAX_RETRY_AFTER:
                raise
            log.info("telegram: 429, retrying after %.1f s", wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")


def user_ref(update: Update) -> str | None:
    """The user, as the respond pipeline and feedback record them (then hashed)."""
    user = update.effective_user
    return f"telegram:{user.id}" if user else None


def author(source: CallbackQuery | Message) -> str:
    """Who decided, for a proposal's record: the Telegram user, by id and handle."""
    user = source.from_user
    if user is None:
        return "telegram:unknown"
    handle = f" (@{user.username})" if user.username else f" ({user.full_name})"
    return f"telegram:{user.id}{handle}"[:200]
