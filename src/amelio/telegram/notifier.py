"""The ``telegram`` notifier: reports and proposal cards for the admin chats.

Registered through the same ``register_notifiers`` hook as the ``webhook``
notifier, so ``amelio improve``, Sage and the benchmark reach both by one path
(:func:`amelio.improve.notifiers.notify_all`). It is on when
``AMELIO_TELEGRAM_TOKEN`` is set. Each admin chat hears only of its own project:
the summary of that project's part of the run, then one card per proposal.

This module imports nothing of python-telegram-bot, nor asyncio, until it sends: the
plugin manager imports it whenever it is built, and listing the notifiers costs
nothing where the ``telegram`` extra is not installed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from amelio.errors import AmelioError, ConfigError
from amelio.hookspecs import hookimpl
from amelio.improve.notifiers import DeliveryResult, Notification, NotifierType

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = ["TelegramNotifier", "register_notifiers", "summary_for"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def summary_for(notification: Notification, project: str) -> str | None:
    """The plain-text summary one project's admins get, or None when the notification
    is not about ``project``."""
    payload = notification.payload
    if notification.kind == "improve.report":
        part = next((p for p in payload.get("projects", ()) if p.get("project") == project), None)
        if part is None:
            return None
        under, made = len(part.get("underperformers", ())), len(part.get("proposals", ()))
        skipped = len(part.get("skipped", ()))
        lines = [
            f"Amelio improve ({payload.get('mode', 'template')}) · project {project}: "
            f"{under} underperforming skill{'s' * (under != 1)}, {made} new "
            f"proposal{'s' * (made != 1)}, {skipped} skipped."
        ]
        lines += [
            f"• {f['skill']}: {'; '.join(f.get('reasons', ()))}"
            for f in part.get("underperformers", ())
        ]
        lines += [f"• skipped {s['skill']}: {s['reason']}" for s in part.get("skipped", ())]
        card = part.get("findings") or {}
        reopened = set(card.get("reopened", ()))
        for f in card.get("top", ()):
            again = " REOPENED: its problem came back" if f["id"] in reopened else ""
            traffic = "searches" if f.get("kind") == "search" else "answers"
            lines.append(
                f"• finding #{f['id']} ({f['status']}, {f['share']:.1%} of {traffic}){again}: "
                f"{f['title']}"
            )
            lines += [
                f"    “{text[:200]}”"
                for text in card.get("reopenedEvidence", {}).get(str(f["id"]), ())
            ]
        lines += [f"• proposal #{p} filed with a finding's fix" for p in card.get("proposals", ())]
        if part.get("learningsWaiting"):
            lines.append(f"• {part['learningsWaiting']} learning(s) wait for review: /review")
        return "\n".join(lines)
    if payload.get("project") not in (None, project):
        return None
    return (
        notification.text
        if notification.text.startswith(notification.title)
        else (f"{notification.title}\n\n{notification.text}".strip())
    )


def _run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine from synchronous code: in this thread, or in a fresh one when
    this thread already runs an event loop (a caller inside async code)."""
    import asyncio
    import concurrent.futures

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


@dataclass(frozen=True)
class TelegramNotifier:
    settings: Settings
    name: str = "telegram"

    def send(self, notification: Notification) -> DeliveryResult:
        try:
            return _run(lambda: self._send(notification))
        except AmelioError as exc:
            return DeliveryResult(self.name, False, 1, None, exc.message)

    async def _send(self, notification: Notification) -> DeliveryResult:
        import asyncio

        from telegram import Bot
        from telegram.error import TelegramError

        from amelio.improve.bench import latest_verdict
        from amelio.improve.proposals import get_proposal
        from amelio.telegram import cards, links
        from amelio.telegram.client import call
        from amelio.workspace.folder import open_workspace

        ws = open_workspace(settings=self.settings)
        errors: list[str] = []
        sent = 0
        try:
            chats = await asyncio.to_thread(links.admin_chats, ws)
            ids = list(
                dict.fromkeys(
                    a.proposal_id for a in notification.actions if a.proposal_id is not None
                )
            )
            found = []
            for pid in ids:
                try:
                    proposal = await asyncio.to_thread(get_proposal, ws, pid)
                except AmelioError as exc:
                    errors.append(f"#{pid}: {exc.message}")
                    continue
                found.append((proposal, await asyncio.to_thread(latest_verdict, ws, pid)))
            base = self.settings.telegram_api_url.rstrip("/")
            token = self.settings.telegram_token.get_secret_value()
            async with Bot(token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot") as bot:
                for chat in chats:
                    summary = summary_for(notification, chat.project)
                    if summary is None:
                        continue
                    chat_id, text = chat.chat_id, summary[:4000]
                    try:
                        await call(lambda: bot.send_message(chat_id, text))  # noqa: B023
                        sent += 1
                        for proposal, verdict in found:
                            if proposal.project == chat.project:
                                await cards.send_card(bot, chat_id, proposal, verdict)
                                sent += 1
                    except TelegramError as exc:
                        log.warning("telegram notifier: chat %s: %s", chat.chat_id, exc)
                        errors.append(f"chat {chat.chat_id}: {exc}")
        finally:
            ws.dispose()
        error = "; ".join(errors) or None
        return DeliveryResult(
            self.name,
            not errors,
            1,
            None,
            error if error is None else f"{error} ({sent} messages sent)",
        )


def _build(settings: Settings) -> TelegramNotifier | None:
    if not settings.telegram_token.get_secret_value().strip():
        return None
    try:
        import telegram  # noqa: F401
    except ImportError:
        raise ConfigError(
            "AMELIO_TELEGRAM_TOKEN is set, but python-telegram-bot is not "
            "installed: pip install 'amelio[telegram]'."
        ) from None
    return TelegramNotifier(settings)


@hookimpl
def register_notifiers(register: Callable[[NotifierType], None]) -> None:
    register(
        NotifierType(
            "telegram",
            _build,
            "send each report, and a card per proposal, to the admin chats "
            "linked with `amelio telegram invite --role admin`",
        )
    )
