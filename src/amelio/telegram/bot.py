"""The Telegram bot: the assistant's chat front door, and the admins' approval desk.

People teach an assistant where they already talk to it. Every message of a linked
chat goes through the same respond pipeline as ``POST /v1/chat`` (router,
learnings, LLM, evals, the interaction logged); the answer carries its eval
footnotes and three buttons, 👍 / 👎 / 🛠️ Fix It, that call the same
:func:`amelio.assistant.quality.give_answer_feedback` as the API. An admin chat gets a card
per pending proposal whose buttons call the same library functions as
``/v1/proposals/{id}/approve`` and ``…/reject``.

The bot runs on python-telegram-bot's :class:`~telegram.ext.Application`, fed by
long polling (:func:`run_polling`) or by the service's webhook route
(:mod:`amelio.telegram.webhook`). Amelio's library is synchronous (SQLAlchemy, the
LLM SDKs), so each handler hands its work to a thread and the event loop stays free
for other chats; updates are handled concurrently.

Each update acts once: Telegram delivers one again when a delivery went
unconfirmed, and the bot claims its id in the database before any handler runs
(:mod:`amelio.telegram.updates`), whether it came by webhook or by polling.

Questions that need an answer (Fix It's "what should it have said?", Reject's
reason) are asked with a ForceReply message that names what it is about ("Fix
#12"); the person's reply quotes it, so the bot needs no conversation state and
any process that receives the reply can act on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    ApplicationBuilder,
    ApplicationHandlerStop,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from amelio.assistant import learnings
from amelio.assistant.quality import give_answer_feedback, quality_metrics
from amelio.assistant.respond import Reply, get_interaction, respond
from amelio.assistant.review import review_queue
from amelio.errors import AmelioError, ConfigError, LLMError, NotFound
from amelio.llm.base import Provider
from amelio.skills.store import list_skills
from amelio.telegram import cards, learning_cards, links, updates
from amelio.telegram.client import MAX_RETRY_AFTER, author, call, seconds, user_ref
from amelio.telegram.render import (
    MAX_MESSAGE_CHARS,
    escape,
    footnotes_block,
    render_parts,
    visible_length,
)
from amelio.workspace.folder import Workspace

__all__ = [
    "ALLOWED_UPDATES",
    "BotThread",
    "TelegramBot",
    "build_bot",
    "check_token",
    "run_polling",
]

log = logging.getLogger(__name__)

#: Only these updates are asked for: the rest (edits, reactions, member changes)
#: would cost a round trip each for nothing.
ALLOWED_UPDATES = ["message", "callback_query"]
#: "typing…" is sent only for an answer not ready within this many seconds: an
#: instant answer needs none, and each chat action counts against Telegram's flood
#: limits like a message. Telegram shows it for 5 s; it is renewed a little before.
TYPING_AFTER = 0.2
TYPING_EVERY = 4.5

#: Footnotes shown under an answer; more are counted (each is one line, under 200
#: characters, so the block always leaves room for the answer).
MAX_FOOTNOTES = 8

UNLINKED = (
    "This chat is not linked to Amelio yet. Ask an Amelio admin for an invite "
    "code (amelio telegram invite), then send: /start CODE"
)
NOT_ALLOWED = "This chat is not allowed to use this bot."
LLM_DOWN = "Sorry, the assistant cannot answer right now. Please try again in a minute."
HELP_USER = (
    "Send a message and the assistant answers. Under each answer:\n"
    "👍 / 👎 say whether it helped (press again to change your vote);\n"
    "🛠️ Fix It asks what it should have said, and it learns from your reply.\n\n"
    "/learnings: what it has learned, newest first\n"
    "/skills: the skills it can apply\n"
    "/quality: how each skill is doing\n"
    "/project: the project and role of this chat\n"
    "/help: this message"
)
HELP_ADMIN = (
    "\n\nThis is an admin chat: improvement reports and proposal cards arrive "
    "here. Diff and Run benchmark act on every card; Approve and Reject on the "
    "proposals for this project's own skills (a global admin decides those of the "
    "skills every project shares).\n"
    "/review: the learnings that wait for a person (candidates, supersede and retire "
    "proposals), one card each with Approve, Edit and Reject."
)

_FIX = re.compile(r"Fix #(\d+):")
_REJECT = re.compile(r"Reject #(\d+)")
_CALLBACK = re.compile(r"^(v|p|l):([a-z]+):(\d{1,18})$")


@dataclass
class TelegramBot:
    """The handlers, over one workspace. ``provider`` replaces the configured LLM
    (tests, the overhead benchmark)."""

    ws: Workspace
    provider: Provider | None = None
    #: ``telegram_allowed_chats``, parsed once: every update asks it.
    _allowed: frozenset[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._allowed = self.ws.settings.telegram_allowed_chat_ids

    # -- the application ------------------------------------------------------------

    def application(self, token: str, api_url: str) -> Application[Any, Any, Any, Any, Any, Any]:
        """A python-telegram-bot application with this bot's handlers, talking to
        ``api_url`` (``{api_url}/bot{token}/{method}``)."""
        base = api_url.rstrip("/")
        app = (
            ApplicationBuilder()
            .token(token)
            .base_url(f"{base}/bot")
            .base_file_url(f"{base}/file/bot")
            .concurrent_updates(True)
            .updater(None)
            .build()
        )
        commands: dict[
            str, Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]
        ] = {
            "start": self.on_start,
            "help": self.on_help,
            "learnings": self.on_learnings,
            "skills": self.on_skills,
            "quality": self.on_quality,
            "project": self.on_project,
            "skip": self.on_skip,
            "review": self.on_review,
        }
        app.add_handler(TypeHandler(Update, self.once), group=-1)  # before any other
        for name, handler in commands.items():
            app.add_handler(CommandHandler(name, handler))
        app.add_handler(CallbackQueryHandler(self.on_button))
        app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, self.on_message))
        app.add_handler(MessageHandler(filters.COMMAND, self.on_unknown_command))
        app.add_error_handler(self.on_error)
        return app

    # -- each update once ---------------------------------------------------------------

    async def once(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Let an update through to the handlers only the first time it arrives
        (:mod:`amelio.telegram.updates`)."""
        first = await asyncio.to_thread(
            updates.claim_update, self.ws, context.bot.id, update.update_id
        )
        if not first:
            log.info("telegram: update %s arrived again; handled once already", update.update_id)
            raise ApplicationHandlerStop

    # -- who may talk -----------------------------------------------------------------

    async def _link(self, update: Update) -> links.ChatLink | None:
        """The chat's link, or None after telling the chat what it needs (once per
        update, and nothing else)."""
        chat = update.effective_chat
        if chat is None or await self._refused(update, chat.id):
            return None
        link = await asyncio.to_thread(links.get_link, self.ws, chat.id)
        if link is None:
            await self._tell(update, UNLINKED)
        return link

    async def _refused(self, update: Update, chat_id: int) -> bool:
        """Whether ``telegram_allowed_chats`` keeps this chat out (it is then told so)."""
        if self._allowed and chat_id not in self._allowed:
            await self._tell(update, NOT_ALLOWED)
            return True
        return False

    async def _tell(self, update: Update, text: str) -> None:
        """A plain-text answer: to a button press as its toast, else as a message."""
        query = update.callback_query
        if query is not None:
            await call(lambda: query.answer(text[:200], show_alert=True))
        elif update.effective_chat is not None:
            chat_id = update.effective_chat.id
            await call(lambda: update.get_bot().send_message(chat_id, text))

    # -- commands ---------------------------------------------------------------------

    async def on_start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        chat = update.effective_chat
        if chat is None or await self._refused(update, chat.id):
            return
        code = context.args[0] if context.args else ""
        if not code:
            link = await asyncio.to_thread(links.get_link, self.ws, chat.id)
            await self._tell(update, UNLINKED if link is None else self._project_line(link))
            return
        title = chat.title or chat.full_name or None
        try:
            link = await asyncio.to_thread(
                links.redeem_invite,
                self.ws,
                code,
                chat_id=chat.id,
                title=title,
                user=user_ref(update),
            )
        except AmelioError as exc:
            await self._tell(update, exc.message)
            return
        await self._tell(update, f"Linked: {self._project_line(link)}\n\n" + self._help(link))

    async def on_help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        link = await self._link(update)
        if link is not None:
            await self._tell(update, self._help(link))

    @staticmethod
    def _help(link: links.ChatLink) -> str:
        return HELP_USER + (HELP_ADMIN if link.is_admin else "")

    @staticmethod
    def _project_line(link: links.ChatLink) -> str:
        return f"this chat is in project {link.project} as {link.role}."

    async def on_project(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        link = await self._link(update)
        if link is not None:
            await self._tell(update, self._project_line(link).capitalize())

    async def on_learnings(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        link = await self._link(update)
        if link is None:
            return
        found = await asyncio.to_thread(learnings.list_learnings, self.ws, project=link.project)
        if not found:
            await self._tell(update, "No learnings yet: 🛠️ Fix It under an answer teaches one.")
            return
        lines = [
            f"#{item.id} {'[' + item.skill + '] ' if item.skill else ''}{item.rule}"
            for item in found[:30]
        ]
        more = f"\n… and {len(found) - 30} more" if len(found) > 30 else ""
        await self._send_text(update, "Learnings, newest first:\n" + "\n".join(lines) + more)

    async def on_review(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """``/review`` in an admin chat: a card per learning that waits for a person."""
        link = await self._link(update)
        if link is None:
            return
        if not link.is_admin:
            await self._tell(update, "Only an admin chat can review learnings.")
            return
        waiting = await asyncio.to_thread(review_queue, self.ws, project=link.project)
        if not waiting:
            await self._tell(update, "No learning waits for review.")
            return
        await self._tell(update, f"{len(waiting)} learning(s) wait for review:")
        await learning_cards.send_cards(update.get_bot(), self.ws, link.chat_id, waiting)

    async def on_skills(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        link = await self._link(update)
        if link is None:
            return
        found = await asyncio.to_thread(list_skills, self.ws.engine, link.project)
        if not found:
            await self._tell(update, "No skills in this project yet.")
            return
        await self._send_text(
            update,
            "Skills:\n"
            + "\n".join(f"• {s.name} (v{s.version}): {s.spec.description}" for s in found),
        )

    async def on_quality(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        link = await self._link(update)
        if link is None:
            return
        metrics = await asyncio.to_thread(quality_metrics, self.ws, link.project)
        if not metrics:
            await self._tell(update, "No answers yet, so no quality figures.")
            return
        await self._send_text(
            update,
            "Quality per skill:\n"
            + "\n".join(
                f"• {m.skill}: {m.success_rate:.0%} passed ({m.success_count}/{m.applied_count}), "
                f"👍 {m.feedback_positive} 👎 {m.feedback_negative}"
                for m in metrics
            ),
        )

    async def on_skip(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """``/skip`` as the reply to a Reject prompt: reject without a reason."""
        link = await self._link(update)
        message = update.effective_message
        if link is None or message is None:
            return
        asked = self._question(update, message)
        match = _REJECT.search(asked) if asked else None
        if match is None:
            await self._tell(update, "/skip answers a Reject question: reply with it there.")
            return
        await self._reject(update, link, int(match.group(1)), None, message)

    async def on_unknown_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        link = await self._link(update)
        if link is not None:
            await self._tell(update, "Unknown command. /help lists what I understand.")

    # -- messages -----------------------------------------------------------------------

    @staticmethod
    def _question(update: Update, message: Message) -> str | None:
        """The text of the bot's question ``message`` answers, if it answers one."""
        replied = message.reply_to_message
        bot = update.get_bot()
        if replied is None or replied.from_user is None or replied.from_user.id != bot.id:
            return None
        return replied.text or ""

    async def on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        chat = update.effective_chat
        if message is None or not message.text or chat is None:
            return
        asked = self._question(update, message)
        if asked and (
            _FIX.search(asked) or _REJECT.search(asked) or learning_cards.EDIT.search(asked)
        ):
            link = await self._link(update)
            if link is None:
                return
            if fix := _FIX.search(asked):
                await self._fixit(update, link, int(fix.group(1)), message.text)
            elif reject := _REJECT.search(asked):
                await self._reject(update, link, int(reject.group(1)), message.text, message)
            elif edit := learning_cards.EDIT.search(asked):
                if not link.is_admin:
                    await self._tell(update, "Only an admin chat can review learnings.")
                    return
                await learning_cards.edit(
                    self.ws, update, link, int(edit.group(1)), message.text, author(message)
                )
            return
        if await self._refused(update, chat.id):
            return
        await self._answer(update, chat.id, message.text)

    def _respond_if_linked(self, chat_id: int, text: str, user: str | None) -> Reply | None:
        """The chat's link and the answer, in one trip to a worker thread (the common
        case, so its cost is the bot's per-message overhead); None when unlinked."""
        link = links.get_link(self.ws, chat_id)
        if link is None:
            return None
        return respond(
            self.ws,
            text,
            project=link.project,
            user=user,
            conversation=f"telegram:{chat_id}",
            provider=self.provider,
        )

    async def _answer(self, update: Update, chat_id: int, text: str) -> None:
        bot = update.get_bot()
        typing = asyncio.create_task(self._typing(bot, chat_id))
        try:
            reply = await asyncio.to_thread(
                self._respond_if_linked, chat_id, text, user_ref(update)
            )
        except LLMError as exc:
            log.warning("telegram: the LLM failed for chat %s: %s", chat_id, exc.message)
            await self._tell(update, LLM_DOWN)
            return
        except AmelioError as exc:  # a message Amelio refuses (too long, …): say why
            await self._tell(update, exc.message)
            return
        finally:
            typing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await typing
        if reply is None:
            await self._tell(update, UNLINKED)
            return
        await self._send_answer(bot, chat_id, reply)

    @staticmethod
    async def _typing(bot: Bot, chat_id: int) -> None:
        """ "typing…" until cancelled, once the answer is late: the LLM may take longer
        than one action lasts."""
        await asyncio.sleep(TYPING_AFTER)
        while True:
            try:
                await bot.send_chat_action(chat_id, ChatAction.TYPING)
            except TelegramError as exc:  # cosmetic: never let it cost the answer
                log.debug("telegram: chat action failed: %s", exc)
            await asyncio.sleep(TYPING_EVERY)

    @staticmethod
    def feedback_buttons(interaction_id: int) -> InlineKeyboardMarkup:
        return InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton("👍", callback_data=f"v:up:{interaction_id}"),
                    InlineKeyboardButton("👎", callback_data=f"v:down:{interaction_id}"),
                    InlineKeyboardButton("🛠️ Fix It", callback_data=f"v:fixit:{interaction_id}"),
                ]
            ]
        )

    async def _send_answer(self, bot: Bot, chat_id: int, reply: Reply) -> None:
        """The answer in as many messages as Telegram's limit needs, the footnotes and
        the buttons under the last one."""
        footnotes = list(reply.footnotes)
        if len(footnotes) > MAX_FOOTNOTES:  # many failed rules: the first, and a count
            footnotes = [
                *footnotes[:MAX_FOOTNOTES],
                f"… and {len(footnotes) - MAX_FOOTNOTES} more checks",
            ]
        notes = footnotes_block(footnotes)
        room = MAX_MESSAGE_CHARS - (visible_length(notes) + 2 if notes else 0)
        parts = render_parts(reply.answer, limit=max(room, 1000)) or [escape("(empty answer)")]
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            text = f"{part}\n\n{notes}" if last and notes else part
            markup = self.feedback_buttons(reply.interaction_id) if last else None
            await call(
                lambda text=text, markup=markup: bot.send_message(  # type: ignore[misc]
                    chat_id, text, parse_mode=ParseMode.MARKDOWN_V2, reply_markup=markup
                )
            )

    async def _send_text(self, update: Update, text: str) -> None:
        """Plain text of any length, in as many messages as it takes."""
        chat_id = update.effective_chat.id if update.effective_chat else 0
        bot = update.get_bot()
        for part in render_parts(text):
            await call(
                lambda part=part: bot.send_message(  # type: ignore[misc]
                    chat_id, part, parse_mode=ParseMode.MARKDOWN_V2
                )
            )

    # -- buttons ------------------------------------------------------------------------

    async def on_button(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None:
            return
        link = await self._link(update)
        if link is None:
            return
        match = _CALLBACK.match(query.data or "")
        if match is None:
            await call(lambda: query.answer("This button is not one of mine."))
            return
        family, action, ref = match.group(1), match.group(2), int(match.group(3))
        if family == "v":
            await self._vote(update, link, action, ref)
        elif not link.is_admin:
            await call(
                lambda: query.answer("Only an admin chat can decide proposals.", show_alert=True)
            )
        elif family == "l":
            await learning_cards.on_button(self.ws, update, link, action, ref)
        else:
            await cards.on_proposal_button(self, update, link, action, ref)

    async def _vote(
        self, update: Update, link: links.ChatLink, kind: str, interaction_id: int
    ) -> None:
        query = update.callback_query
        assert query is not None
        if kind not in ("up", "down", "fixit"):
            await call(lambda: query.answer("This button is not one of mine."))
            return
        try:
            found = await asyncio.to_thread(get_interaction, self.ws, interaction_id)
        except NotFound:
            found = None
        if found is None or found["project"] != link.project:
            await call(
                lambda: query.answer("That answer is not in this chat's project.", show_alert=True)
            )
            return
        if kind == "fixit":
            await call(lambda: query.answer())
            chat_id = query.message.chat.id if query.message else link.chat_id
            await call(
                lambda: update.get_bot().send_message(
                    chat_id,
                    f"🛠️ Fix #{interaction_id}: what should it have said? Reply to this message.",
                    reply_markup=ForceReply(
                        selective=True, input_field_placeholder="What it should have said"
                    ),
                )
            )
            return
        result = await asyncio.to_thread(
            give_answer_feedback, self.ws, interaction_id, kind, user=user_ref(update)
        )
        glyph = "👍" if kind == "up" else "👎"
        said = (
            f"Changed to {glyph}."
            if result.replaced and result.replaced != kind
            else f"Thanks: {glyph} recorded."
        )
        await call(lambda: query.answer(said))

    async def _fixit(
        self, update: Update, link: links.ChatLink, interaction_id: int, correction: str
    ) -> None:
        try:
            found = await asyncio.to_thread(get_interaction, self.ws, interaction_id)
        except NotFound:
            found = None
        if found is None or found["project"] != link.project:
            await self._tell(update, "That answer is not in this chat's project.")
            return
        try:
            result = await asyncio.to_thread(
                give_answer_feedback,
                self.ws,
                interaction_id,
                "fixit",
                comment=correction,
                user=user_ref(update),
            )
        except AmelioError as exc:
            await self._tell(update, exc.message)
            return
        learned = result.learning
        if learned is not None and learned.status == "candidate":
            await self._send_text(
                update, f"Thanks: your correction waits for an admin's review: {learned.rule}"
            )
            await learning_cards.tell_admins(update.get_bot(), self.ws, learned)
            return
        rule = learned.rule if learned else correction
        await self._send_text(update, f"Thanks, learned: {rule}")

    async def _reject(
        self,
        update: Update,
        link: links.ChatLink,
        proposal_id: int,
        reason: str | None,
        message: Message,
    ) -> None:
        if not link.is_admin:
            await self._tell(update, "Only an admin chat can decide proposals.")
            return
        await cards.reject(self, update, link, proposal_id, reason, author(message))

    # -- errors -------------------------------------------------------------------------

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A handler's unexpected failure is logged, and the chat told, never crashed."""
        log.error("telegram: handler failed", exc_info=context.error)
        if isinstance(update, Update) and update.effective_chat is not None:
            with contextlib.suppress(TelegramError):
                await self._tell(update, "Something went wrong on my side; it is logged.")


def build_bot(
    ws: Workspace, *, provider: Provider | None = None
) -> tuple[TelegramBot, Application[Any, Any, Any, Any, Any, Any]]:
    """The bot and its application, from the workspace's settings; a missing token or
    a malformed setting is a :class:`ConfigError` that says which."""
    settings = ws.settings
    token = settings.telegram_token.get_secret_value().strip()
    if not token:
        raise ConfigError(
            "Set AMELIO_TELEGRAM_TOKEN to the bot's token from BotFather (docs/telegram.md)."
        )
    if not settings.telegram_api_url.startswith(("http://", "https://")):
        raise ConfigError("AMELIO_TELEGRAM_API_URL must start with http:// or https://.")
    bot = TelegramBot(ws, provider)  # a malformed allowed-chats list fails here, at start
    return bot, bot.application(token, settings.telegram_api_url)


async def check_token(app: Application[Any, Any, Any, Any, Any, Any], api_url: str) -> None:
    """Initialize ``app`` (its getMe call checks the token), turning a refused token or
    an unreachable server into a :class:`ConfigError` that says which."""
    try:
        await app.initialize()
    except InvalidToken as exc:
        raise ConfigError(
            f"The Bot API at {api_url} refused AMELIO_TELEGRAM_TOKEN ({exc}): "
            "check the token BotFather gave."
        ) from None
    except NetworkError as exc:
        raise ConfigError(f"Cannot reach the Bot API at {api_url}: {exc}.") from None


async def run_polling(
    app: Application[Any, Any, Any, Any, Any, Any],
    api_url: str,
    stop: asyncio.Event,
    *,
    poll_timeout: int = 30,
    ready: Callable[[], None] | None = None,
) -> None:
    """Long-poll getUpdates and handle each update until ``stop`` is set.

    Written out rather than ``Application.run_polling`` so that a caller owns the
    loop (a test or a benchmark runs it in a thread; the CLI stops it on a
    signal), and so that a 429 or a network failure waits and goes on."""
    await check_token(app, api_url)
    bot = app.bot
    await call(lambda: bot.delete_webhook())
    await app.start()
    if ready is not None:
        ready()
    offset: int | None = None
    waiter = asyncio.create_task(stop.wait())
    try:
        while not stop.is_set():
            poll = asyncio.create_task(
                bot.get_updates(
                    offset=offset,
                    timeout=poll_timeout,
                    allowed_updates=ALLOWED_UPDATES,
                    read_timeout=poll_timeout + 10,
                )
            )
            done, _ = await asyncio.wait({poll, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if poll not in done:
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError, TelegramError):
                    await poll
                break
            try:
                updates = poll.result()
            except RetryAfter as exc:
                await asyncio.sleep(min(seconds(exc), MAX_RETRY_AFTER))
                continue
            except (NetworkError, TelegramError) as exc:
                log.warning("telegram: getUpdates failed (%s); retrying in 1 s", exc)
                await asyncio.sleep(1.0)
                continue
            for update in updates:
                offset = update.update_id + 1
                await app.update_queue.put(update)
    finally:
        waiter.cancel()
        await app.stop()  # handles what is queued first
        if offset is not None:  # confirm what was fetched, so a restart does not redo it
            with contextlib.suppress(TelegramError):
                await bot.get_updates(offset=offset, timeout=0, limit=1)
        await app.shutdown()


class BotThread:
    """The polling bot on its own event loop in a background thread: for an
    application that embeds the bot beside other work, for tests and for the
    overhead benchmark. ``start`` returns once the token is accepted and polling
    has begun (or raises what stopped it); ``stop`` returns once the bot has
    stopped."""

    def __init__(
        self, ws: Workspace, *, provider: Provider | None = None, poll_timeout: int = 1
    ) -> None:
        self.bot, self.application = build_bot(ws, provider=provider)
        self._api = ws.settings.telegram_api_url
        self._poll_timeout = poll_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="amelio-telegram", daemon=True)

    def _main(self) -> None:
        async def body() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run_polling(
                self.application,
                self._api,
                self._stop,
                poll_timeout=self._poll_timeout,
                ready=self._ready.set,
            )

        try:
            asyncio.run(body())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    def start(self, timeout: float = 30.0) -> BotThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the Telegram bot did not start in time")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> BotThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
