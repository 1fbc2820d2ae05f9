"""A fake Telegram Bot API server, for testing Amelio's Telegram bot without Telegram.

Why a fake server and not a mock: ``api.telegram.org`` is at the edge of what a test
machine can (or should) reach, and a mock of ``telegram.Bot`` proves only that the code
called the method the test expected. :class:`FakeTelegramServer` speaks the Bot API's
real HTTP protocol on 127.0.0.1 — ``/bot{token}/{method}``, parameters as a form or JSON,
answers in Telegram's ``{"ok": ..., "result": ...}`` envelope — so the *real*
python-telegram-bot client runs unmodified against it: its URL building, form encoding,
error mapping (``BadRequest``, ``RetryAfter``, ``Conflict``, ``InvalidToken``), long
polling and update dispatch included. It also enforces the Telegram rules that break bots
in production and that no mock would notice: MarkdownV2 and HTML parsing (ported from
TDLib, with Telegram's own error descriptions), the 4096-character limit, "message is not
modified", 64-byte callback data, answering a callback query twice, and ``getUpdates``
while a webhook is set.

Example::

    with FakeTelegramServer() as tg:
        tg.user_message(42, "/start")
        bot = telegram.Bot(tg.token, base_url=tg.base_url)  # the bot under test polls it
        ...
        [reply] = tg.wait_for_message(42)
        assert reply.text == "Hello!"
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from amelio.testing import ThreadedServer

__all__ = [
    "DEFAULT_TOKEN",
    "DEFAULT_USER_ID",
    "MAX_CALLBACK_DATA_BYTES",
    "MAX_MESSAGE_LENGTH",
    "CallbackAnswer",
    "ChatAction",
    "FakeTelegramServer",
    "ReturnedError",
    "SentMessage",
    "TelegramParseError",
    "TelegramRequest",
    "parse_formatted_text",
]

#: A token shaped like BotFather's (``{bot id}:{secret}``), so that code which splits it
#: to find the bot's id works; the bot's id is the part before the colon.
DEFAULT_TOKEN: Final = "123456:TEST-token"
#: The sender of :meth:`FakeTelegramServer.user_message` in a group when no user is given
#: (in a private chat the sender is the chat's own id, as in Telegram).
DEFAULT_USER_ID: Final = 1001
MAX_MESSAGE_LENGTH: Final = 4096
MAX_CALLBACK_DATA_BYTES: Final = 64

JSONDict = dict[str, Any]
T = TypeVar("T")

_TOKEN_SHAPE = re.compile(r"\d+:[A-Za-z0-9_-]+")
_WHITESPACE = " \t\n\r\x0b\x0c"
_BOT_COMMAND = re.compile(r"(?<![\w/@<>])/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?![\w/@<>])")
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# How form values (always strings) become typed values, as Telegram reads them: object
# parameters arrive JSON-encoded, numbers and booleans as their text, other strings as is.
_JSON_PARAMS = _words(
    "reply_markup reply_parameters link_preview_options entities caption_entities "
    "allowed_updates commands scope media reaction results permissions"
)
_CHAT_PARAMS = frozenset({"chat_id", "from_chat_id"})
_INT_PARAMS = _words(
    "message_id offset limit timeout reply_to_message_id max_connections "
    "message_thread_id cache_time user_id until_date"
)
_BOOL_PARAMS = _words(
    "disable_notification protect_content show_alert drop_pending_updates "
    "disable_web_page_preview allow_sending_without_reply allow_paid_broadcast"
)
_CHAT_ACTIONS = _words(
    "typing upload_photo record_video upload_video record_voice upload_voice "
    "upload_document choose_sticker find_location record_video_note upload_video_note"
)
_BUTTON_KINDS = _words(
    "url callback_data web_app login_url switch_inline_query switch_inline_query_current_chat "
    "switch_inline_query_chosen_chat copy_text callback_game pay"
)
# Update types Telegram does not send unless a bot asks for them in allowed_updates.
_NOT_SENT_BY_DEFAULT = frozenset({"chat_member", "message_reaction", "message_reaction_count"})

_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running",
    500: "Internal Server Error",
    502: "Bad Gateway",
}
_WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
_POLL_CONFLICT = _DEFAULT_DESCRIPTIONS[409]
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
_QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"


# -- records ------------------------------------------------------------------------


@dataclass(frozen=True)
class TelegramRequest:
    """One call of the Bot API as the fake received it, before it was judged.

    ``method`` is the canonical name (``sendMessage`` even if sent as ``SENDMESSAGE``);
    ``params`` are the decoded, typed parameters (``reply_markup`` a dict, ``chat_id`` an
    int), whichever of query string, form, multipart or JSON carried them.
    """

    method: str
    params: JSONDict
    http_method: str
    content_type: str
    token: str


@dataclass(frozen=True)
class SentMessage:
    """A message the bot sent (or a new state of one it edited), as a user would see it.

    ``text`` is the visible text — markup parsed away, surrounding whitespace trimmed, as
    Telegram shows it — and ``raw_text`` what the bot passed, so a test can assert either
    on what the user reads or on the bot's escaping.
    """

    chat_id: int
    message_id: int
    text: str
    raw_text: str
    parse_mode: str | None
    reply_markup: JSONDict | None
    edited: bool = False
    method: str = "sendMessage"
    reply_to_message_id: int | None = None
    disable_notification: bool = False
    entities: tuple[JSONDict, ...] = ()

    @property
    def buttons(self) -> list[JSONDict]:
        """The inline keyboard's buttons, row by row, as one list (empty without one)."""
        rows = (self.reply_markup or {}).get("inline_keyboard") or []
        return [button for row in rows for button in row]

    @property
    def callback_data(self) -> list[str]:
        """What pressing each button would send: the argument :meth:`press_button` wants."""
        return [b["callback_data"] for b in self.buttons if "callback_data" in b]


@dataclass(frozen=True)
class ChatAction:
    """A ``sendChatAction`` call ("typing…"), which leaves no message to assert on."""

    chat_id: int
    action: str


@dataclass(frozen=True)
class CallbackAnswer:
    """An ``answerCallbackQuery`` call: what the user saw after pressing a button."""

    id: str
    text: str | None
    show_alert: bool
    url: str | None = None
    cache_time: int | None = None


@dataclass(frozen=True)
class ReturnedError:
    """An error the fake answered with: a timed-out wait lists them, since a bot that
    swallows a ``BadRequest`` otherwise just looks silent."""

    method: str
    error_code: int
    description: str


class TelegramParseError(ValueError):
    """Text that Telegram would refuse to parse; the message is Telegram's own wording."""


class _ApiError(Exception):
    """A Bot API error, answered in Telegram's envelope so that PTB raises its typed error."""

    def __init__(self, status: int, description: str, parameters: JSONDict | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    def body(self) -> JSONDict:
        body: JSONDict = {"ok": False, "error_code": self.status, "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return body


@dataclass(frozen=True)
class _Failure:
    status: int
    description: str | None
    retry_after: int | None


@dataclass(frozen=True)
class _Described:
    """A result that Telegram sends with a ``description`` beside it (setWebhook's)."""

    result: Any
    description: str


@dataclass(eq=False)
class _Poller:
    """A getUpdates call waiting for an update; woken from any thread through its loop."""

    loop: asyncio.AbstractEventLoop
    event: asyncio.Event = field(default_factory=asyncio.Event)
    superseded: bool = False

    def wake(self) -> None:
        # A closed loop means the server stopped, and nobody waits any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.event.set)


# -- the server ------------------------------------------------------------------------


class FakeTelegramServer(ThreadedServer):
    """A real HTTP server on 127.0.0.1 that answers the Telegram Bot API for one bot.

    Point python-telegram-bot at it with ``Bot(server.token, base_url=server.base_url)``
    (requests then go to ``{server.url}/bot{token}/{method}``); another token is refused
    with 401, as Telegram refuses it. Drive the conversation from the test with
    :meth:`user_message` and :meth:`press_button`, script trouble with :meth:`fail` and
    :meth:`delay`, and assert on :attr:`sent`, :attr:`chat_actions`,
    :attr:`callback_answers` and :attr:`requests`, or block with :meth:`wait_for_message`.
    Every method is thread-safe. Use it as a context manager, or :meth:`start`/:meth:`stop`.

    Chats are known once an update came from them or :meth:`add_chat` registered them;
    sending to any other is "chat not found", which catches a bot answering the wrong chat.
    """

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_username: str = "amelio_test_bot",
        bot_name: str = "Amelio",
        chats: Iterable[int] = (),
    ) -> None:
        if not _TOKEN_SHAPE.fullmatch(token):
            raise ValueError(f"token {token!r} is not shaped like BotFather's '123456:ABC-def'")
        super().__init__()
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.bot_username = bot_username
        self.bot_name = bot_name
        # One re-entrant lock for all state, so a wait_for predicate may read properties.
        self._cond = threading.Condition(threading.RLock())
        self._handlers: dict[str, Callable[[JSONDict], Any]] = {
            "getMe": self._get_me,
            "sendMessage": self._send_message,
            "editMessageText": self._edit_message_text,
            "editMessageReplyMarkup": self._edit_message_reply_markup,
            "deleteMessage": self._delete_message,
            "answerCallbackQuery": self._answer_callback_query,
            "sendChatAction": self._send_chat_action,
            "setWebhook": self._set_webhook,
            "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._get_webhook_info,
            "setMyCommands": self._set_my_commands,
            "getMyCommands": self._get_my_commands,
            "deleteMyCommands": self._delete_my_commands,
            "close": self._close,
            "logOut": self._log_out,
        }
        self._methods = {name.lower(): name for name in [*self._handlers, "getUpdates"]}
        self._pollers: list[_Poller] = []  # kept across reset(): they belong to live calls
        self._reset_state()
        for chat_id in chats:
            self.add_chat(chat_id)
        self.app = Starlette(
            routes=[
                Route("/bot{token}/{method}", self._api, methods=["GET", "POST"]),
                Route("/file/bot{token}/{path:path}", self._not_found, methods=["GET"]),
                Route("/{path:path}", self._not_found, methods=["GET", "POST"]),
            ]
        )

    def _reset_state(self) -> None:
        with self._cond:
            self._update_ids = itertools.count(100_000_001)
            self._query_ids = itertools.count(4_000_000_000_000_000_001)
            self._updates: list[JSONDict] = []
            self._allowed_updates: list[str] = []
            self._chats: dict[int, JSONDict] = {}
            self._users: dict[int, JSONDict] = {}
            self._messages: dict[tuple[int, int], JSONDict] = {}
            self._raw: dict[tuple[int, int], tuple[str, str | None]] = {}
            self._next_ids: dict[int, int] = {}
            self._open_queries: set[str] = set()
            self._failures: dict[str, deque[_Failure]] = {}
            self._delays: dict[str, float] = {}
            self._webhook_url = ""
            self._webhook_secret: str | None = None
            self._webhook_max_connections = 40
            self._webhook_error: tuple[int, str] | None = None
            self._commands: dict[str, list[JSONDict]] = {}
            self._requests: list[TelegramRequest] = []
            self._sent: list[SentMessage] = []
            self._chat_actions: list[ChatAction] = []
            self._callback_answers: list[CallbackAnswer] = []
            self._deleted: list[tuple[int, int]] = []
            self._errors: list[ReturnedError] = []
            self._cond.notify_all()

    # -- scripting: what users do --------------------------------------------------------

    def add_chat(
        self,
        chat_id: int,
        *,
        chat_type: str = "private",
        first_name: str = "Ada",
        username: str | None = None,
        title: str | None = None,
    ) -> JSONDict:
        """Make a chat known without an update from it, as one the bot was added to
        earlier would be; returns its Chat object (an existing chat is left as it is)."""
        with self._cond:
            if chat_id not in self._chats:
                chat: JSONDict = {"id": chat_id, "type": chat_type}
                if chat_type == "private":
                    chat["first_name"] = first_name
                    if username:
                        chat["username"] = username
                else:
                    chat["title"] = title or f"Test {chat_type} {chat_id}"
                self._chats[chat_id] = chat
            return copy.deepcopy(self._chats[chat_id])

    def user_message(
        self,
        chat_id: int,
        text: str,
        *,
        user_id: int | None = None,
        first_name: str = "Ada",
        username: str | None = None,
        reply_to_message_id: int | None = None,
        chat_type: str = "private",
    ) -> JSONDict:
        """Queue the Update of a user writing ``text`` in ``chat_id``, and return it.

        Commands (``/start``, ``/help@bot``) get their ``bot_command`` entities, which
        PTB's ``CommandHandler`` requires. ``reply_to_message_id`` makes it a reply,
        carrying the full replied-to message as Telegram does; the message must exist.
        """
        if user_id is None:
            user_id = chat_id if chat_type == "private" else DEFAULT_USER_ID
        user: JSONDict = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        with self._cond:
            self._users[user_id] = user
            chat = self.add_chat(
                chat_id, chat_type=chat_type, first_name=first_name, username=username
            )
            message: JSONDict = {
                "message_id": 0,
                "from": user,
                "chat": chat,
                "date": int(time.time()),
                "text": text,
            }
            if reply_to_message_id is not None:
                replied = self._messages.get((chat_id, reply_to_message_id))
                if replied is None:
                    raise ValueError(
                        f"chat {chat_id} has no message {reply_to_message_id} to reply to; "
                        f"it has {sorted(m for c, m in self._messages if c == chat_id)}"
                    )
                message["reply_to_message"] = _without_reply(replied)
            if entities := _bot_command_entities(text):
                message["entities"] = entities
            message["message_id"] = self._next_message_id(chat_id)
            self._messages[(chat_id, message["message_id"])] = message
            return self.queue_update({"message": message})

    def press_button(
        self,
        chat_id: int,
        message_id: int,
        data: str,
        *,
        user_id: int | None = None,
        strict: bool = True,
    ) -> JSONDict:
        """Queue the Update of a user pressing a button of a message the bot sent.

        The ``callback_query`` carries the message as it is now (after edits) and a fresh
        id that ``answerCallbackQuery`` must answer once. With ``strict``, ``data``
        must be one of the message's buttons, since a user can press only those.
        """
        with self._cond:
            message = self._messages.get((chat_id, message_id))
            if message is None or not message["from"].get("is_bot"):
                raise ValueError(f"the bot sent no message {message_id} to chat {chat_id}")
            rows = (message.get("reply_markup") or {}).get("inline_keyboard") or []
            offered = [b["callback_data"] for row in rows for b in row if "callback_data" in b]
            if strict and data not in offered:
                raise ValueError(
                    f"message {message_id} in chat {chat_id} has no button with "
                    f"callback_data {data!r}; its buttons send {offered}"
                )
            if user_id is None:
                user_id = chat_id if self._chats[chat_id]["type"] == "private" else DEFAULT_USER_ID
            user = self._users.get(user_id) or {"id": user_id, "is_bot": False, "first_name": "Ada"}
            query_id = str(next(self._query_ids))
            self._open_queries.add(query_id)
            query: JSONDict = {
                "id": query_id,
                "from": user,
                "message": copy.deepcopy(message),
                "chat_instance": str((chat_id * 2_654_435_761) % 2**63),
                "data": data,
            }
            return self.queue_update({"callback_query": query})

    def queue_update(self, payload: Mapping[str, Any]) -> JSONDict:
        """Queue any Update (``{"my_chat_member": {...}}``, say): it gets the next
        ``update_id`` and is returned as queued; long polls waiting for one wake up."""
        with self._cond:
            update: JSONDict = {"update_id": next(self._update_ids), **copy.deepcopy(payload)}
            for kind in ("message", "edited_message", "callback_query"):
                body = update.get(kind)
                chat = (body or {}).get("chat") or ((body or {}).get("message") or {}).get("chat")
                if isinstance(chat, dict) and isinstance(chat.get("id"), int):
                    self._chats.setdefault(chat["id"], copy.deepcopy(chat))
            self._updates.append(update)
            self._cond.notify_all()
            for poller in self._pollers:
                poller.wake()
            return copy.deepcopy(update)

    # -- scripting: how Telegram misbehaves ----------------------------------------------

    def redeliver(self, update: Mapping[str, Any]) -> JSONDict:
        """Queue ``update`` (one :meth:`queue_update` returned) again, with its own
        ``update_id``: Telegram delivers an update again when its delivery went
        unconfirmed, say a poller stopped before its next getUpdates confirmed it."""
        with self._cond:
            again: JSONDict = copy.deepcopy(dict(update))
            self._updates.append(again)
            self._cond.notify_all()
            for poller in self._pollers:
                poller.wake()
            return copy.deepcopy(again)

    def fail(
        self,
        method: str,
        status: int = 429,
        *,
        times: int = 1,
        retry_after: int | None = None,
        description: str | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``method`` (any case; ``"*"`` for any method)
        fail with ``status``. A 429 says "Too Many Requests: retry after N" and carries
        ``parameters.retry_after`` (1 s unless given), which PTB raises as ``RetryAfter``."""
        if status == 429 and retry_after is None:
            retry_after = 1
        with self._cond:
            queue = self._failures.setdefault(_key(method), deque())
            queue.extend(_Failure(status, description, retry_after) for _ in range(times))

    def delay(self, method: str, seconds: float) -> None:
        """Answer every later call of ``method`` (``"*"``: all) ``seconds`` late, to test
        timeouts and measure overhead under latency; 0 removes the delay."""
        with self._cond:
            if seconds > 0:
                self._delays[_key(method)] = seconds
            else:
                self._delays.pop(_key(method), None)

    def reset(self) -> None:
        """Forget chats, messages, updates, scripted trouble, webhook and records, so a
        module-scoped server can serve many tests (stopping one costs uvicorn ~0.15 s)."""
        self._reset_state()

    # -- webhooks ------------------------------------------------------------------------

    def deliver_webhook(
        self, update: Mapping[str, Any], *, url: str | None = None, timeout: float = 10.0
    ) -> httpx.Response:
        """POST ``update`` to the webhook the bot registered (or ``url``) as Telegram does:
        JSON body, ``X-Telegram-Bot-Api-Secret-Token`` set to the registered secret. A 2xx
        answer confirms the update (it leaves the pending queue); any other is recorded as
        ``last_error_message`` in getWebhookInfo, as Telegram records it."""
        target, headers = self._webhook_target(url)
        with httpx.Client(trust_env=False, timeout=timeout) as client:
            response = client.post(target, json=dict(update), headers=headers)
        self._webhook_delivered(update, response)
        return response

    async def adeliver_webhook(
        self, update: Mapping[str, Any], *, url: str | None = None, timeout: float = 10.0
    ) -> httpx.Response:
        """:meth:`deliver_webhook` for a caller inside an event loop (where a blocking
        POST to a receiver served by that same loop would never be answered)."""
        target, headers = self._webhook_target(url)
        async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
            response = await client.post(target, json=dict(update), headers=headers)
        self._webhook_delivered(update, response)
        return response

    def _webhook_target(self, url: str | None) -> tuple[str, dict[str, str]]:
        with self._cond:
            target, secret = url or self._webhook_url, self._webhook_secret
        if not target:
            raise RuntimeError(
                "No webhook is set: the bot has not called setWebhook (or pass url=)."
            )
        return target, ({"X-Telegram-Bot-Api-Secret-Token": secret} if secret else {})

    def _webhook_delivered(self, update: Mapping[str, Any], response: httpx.Response) -> None:
        with self._cond:
            if response.is_success:
                self._updates = [
                    u for u in self._updates if u["update_id"] != update.get("update_id")
                ]
                self._webhook_error = None
            else:
                message = f"Wrong response from the webhook: {response.status_code} "
                self._webhook_error = (int(time.time()), message + response.reason_phrase)
            self._cond.notify_all()

    # -- records -------------------------------------------------------------------------

    @property
    def requests(self) -> list[TelegramRequest]:
        """Every Bot API call received so far (a copy), refused ones included."""
        with self._cond:
            return list(self._requests)

    @property
    def sent(self) -> list[SentMessage]:
        """Every message the bot sent, and every new state of one it edited, in order."""
        with self._cond:
            return list(self._sent)

    @property
    def chat_actions(self) -> list[ChatAction]:
        with self._cond:
            return list(self._chat_actions)

    @property
    def callback_answers(self) -> list[CallbackAnswer]:
        with self._cond:
            return list(self._callback_answers)

    @property
    def deleted(self) -> list[tuple[int, int]]:
        """``(chat_id, message_id)`` of each message the bot deleted."""
        with self._cond:
            return list(self._deleted)

    @property
    def errors(self) -> list[ReturnedError]:
        """Every error answer the fake gave (scripted ones included), in order."""
        with self._cond:
            return list(self._errors)

    @property
    def pending_updates(self) -> list[JSONDict]:
        """Updates not yet confirmed by a getUpdates offset (or a webhook's 2xx)."""
        with self._cond:
            return copy.deepcopy(self._updates)

    @property
    def webhook_url(self) -> str:
        with self._cond:
            return self._webhook_url

    @property
    def webhook_secret(self) -> str | None:
        with self._cond:
            return self._webhook_secret

    def messages_to(self, chat_id: int) -> list[SentMessage]:
        """What the bot sent (and edited) in ``chat_id``, in order."""
        with self._cond:
            return [m for m in self._sent if m.chat_id == chat_id]

    def my_commands(
        self, scope: Mapping[str, Any] | None = None, language_code: str = ""
    ) -> list[JSONDict]:
        """The commands set with setMyCommands for ``scope`` (default scope) and language."""
        with self._cond:
            return copy.deepcopy(self._commands.get(_commands_key(scope, language_code), []))

    def wait_for(
        self, predicate: Callable[[], T | None], timeout: float = 5.0, *, what: str | None = None
    ) -> T:
        """Block until ``predicate()`` is truthy and return its value; it is re-checked
        whenever the fake's state changes, so the wait ends as soon as the bot acts.
        On timeout, an AssertionError lists what the bot sent and the errors it got.
        It blocks: inside an event loop, call it through ``asyncio.to_thread``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    wanted = what or str(getattr(predicate, "__name__", "the predicate"))
                    raise AssertionError(self._timeout_report(wanted, timeout))
                self._cond.wait(left)

    def wait_for_message(
        self, chat_id: int, *, count: int = 1, timeout: float = 5.0
    ) -> list[SentMessage]:
        """Block until the bot has sent (or edited) at least ``count`` messages in
        ``chat_id`` since the start (or :meth:`reset`); return all of them, in order."""
        if count < 1:
            raise ValueError("count must be at least 1")

        def enough() -> list[SentMessage] | None:
            messages = self.messages_to(chat_id)
            return messages if len(messages) >= count else None

        what = f"{count} message(s) from the bot to chat {chat_id}"
        return self.wait_for(enough, timeout, what=what)

    def _timeout_report(self, wanted: str, timeout: float) -> str:
        lines = [f"Timed out after {timeout:g} s waiting for {wanted}."]
        lines.append(f"The bot sent {len(self._sent)} message(s):")
        for m in self._sent[-20:]:
            flag = " (edited)" if m.edited else ""
            lines.append(f"  chat {m.chat_id} #{m.message_id}{flag}: {m.text[:200]!r}")
        if self._errors:
            lines.append("Errors the fake answered with:")
            lines.extend(
                f"  {e.method}: {e.error_code} {e.description}" for e in self._errors[-10:]
            )
        calls = [r.method for r in self._requests[-15:]]
        lines.append(f"Last calls: {', '.join(calls) or '(none)'}")
        return "\n".join(lines)

    # -- addresses -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``base_url`` for PTB's ``Bot``, which appends the token: ``{url}/bot``."""
        return f"{self.url}/bot"

    @property
    def base_file_url(self) -> str:
        """``base_file_url`` for PTB's ``Bot`` (files are not served: 404)."""
        return f"{self.url}/file/bot"

    @property
    def api_url(self) -> str:
        """The bot's method prefix, ``{url}/bot{token}``: ``f"{api_url}/getMe"``."""
        return f"{self.url}/bot{self.token}"

    # -- lifecycle -----------------------------------------------------------------------

    def _wake(self) -> None:
        """Pending long polls and delays return at once."""
        with self._cond:
            for poller in self._pollers:
                poller.wake()

    # -- HTTP ----------------------------------------------------------------------------

    async def _not_found(self, request: Request) -> Response:
        return JSONResponse(_ApiError(404, "Not Found").body(), status_code=404)

    async def _api(self, request: Request) -> Response:
        token = request.path_params["token"]
        method = self._methods.get(
            request.path_params["method"].lower(), request.path_params["method"]
        )
        content_type = request.headers.get("content-type", "")
        params, params_error = await _read_params(request)
        with self._cond:
            self._requests.append(
                TelegramRequest(method, params, request.method, content_type, token)
            )
            self._cond.notify_all()
        try:
            if token != self.token:  # Telegram: 404 for a malformed token, 401 for a wrong one
                malformed = not _TOKEN_SHAPE.fullmatch(token)
                raise _ApiError(404, "Not Found") if malformed else _ApiError(401, "Unauthorized")
            if method != "getUpdates" and method not in self._handlers:
                raise _ApiError(404, "Not Found")
            await self._scripted_delay(method)
            self._scripted_failure(method)
            if params_error is not None:
                raise params_error
            if method == "getUpdates":
                result: Any = await self._get_updates(params, request)
            else:
                result = self._handlers[method](params)
        except _ApiError as err:
            return self._error_response(method, err)
        except Exception as err:  # a bug in the fake: say so in Telegram's envelope
            failure = _ApiError(500, f"Internal Server Error: FakeTelegramServer: {err!r}")
            return self._error_response(method, failure)
        body: JSONDict = {"ok": True, "result": result}
        if isinstance(result, _Described):
            body = {"ok": True, "result": result.result, "description": result.description}
        return JSONResponse(body)

    def _error_response(self, method: str, err: _ApiError) -> JSONResponse:
        with self._cond:
            self._errors.append(ReturnedError(method, err.status, err.description))
            self._cond.notify_all()
        return JSONResponse(err.body(), status_code=err.status)

    async def _scripted_delay(self, method: str) -> None:
        with self._cond:
            seconds = self._delays.get(_key(method), self._delays.get("*", 0.0))
        end = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.05))

    def _scripted_failure(self, method: str) -> None:
        with self._cond:
            queue = self._failures.get(_key(method)) or self._failures.get("*")
            failure = queue.popleft() if queue else None
        if failure is None:
            return
        parameters = None
        description = failure.description
        if failure.retry_after is not None:
            parameters = {"retry_after": failure.retry_after}
        if description is None and failure.status == 429:
            description = f"Too Many Requests: retry after {failure.retry_after}"
        if description is None:
            description = _DEFAULT_DESCRIPTIONS.get(failure.status) or _phrase(failure.status)
        raise _ApiError(failure.status, description, parameters)

    # -- Bot API methods -------------------------------------------------------------------

    def _bot_user(self, *, full: bool = False) -> JSONDict:
        user: JSONDict = {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_name,
            "username": self.bot_username,
        }
        if full:
            user.update(
                can_join_groups=True,
                can_read_all_group_messages=False,
                supports_inline_queries=False,
                can_connect_to_business=False,
                has_main_web_app=False,
            )
        return user

    def _get_me(self, params: JSONDict) -> JSONDict:
        return self._bot_user(full=True)

    async def _get_updates(self, params: JSONDict, request: Request) -> list[JSONDict]:
        """Long polling as Telegram does it: ``offset`` confirms (drops) every update
        below it, a negative one keeps only the last ``-offset``; with nothing to return,
        wait up to ``timeout`` seconds and answer as soon as an update arrives. A newer
        getUpdates ends an older one with 409, which is how Telegram reveals two bot
        instances polling one token (unless the older caller has hung up, as PTB does
        when it stops polling: nobody would hear that answer). Updates of types outside
        ``allowed_updates`` (which persists between calls) are skipped when delivered —
        stricter than Telegram, which filters when the update is created, so a bot that
        forgets to ask for ``callback_query`` never sees a button press, whenever it was
        queued."""
        offset = _as_int(params.get("offset"), 0)
        limit = min(max(_as_int(params.get("limit"), 100), 1), 100)
        timeout = max(_as_float(params.get("timeout"), 0.0), 0.0)
        allowed = params.get("allowed_updates")
        poller = _Poller(asyncio.get_running_loop())
        with self._cond:
            if self._webhook_url:
                raise _ApiError(409, _WEBHOOK_CONFLICT)
            if isinstance(allowed, list):
                self._allowed_updates = [str(kind) for kind in allowed]
            for other in self._pollers:
                other.superseded = True
                other.wake()
            self._pollers.append(poller)
            self._confirm(offset)
            batch = self._deliverable(limit)
        try:
            deadline = time.monotonic() + timeout
            while not batch and not self._stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(poller.event.wait(), left)
                poller.event.clear()
                if poller.superseded:
                    if await request.is_disconnected():
                        return []
                    raise _ApiError(409, _POLL_CONFLICT)
                with self._cond:
                    if self._webhook_url:
                        raise _ApiError(409, _WEBHOOK_CONFLICT)
                    batch = self._deliverable(limit)
        finally:
            with self._cond:
                if poller in self._pollers:
                    self._pollers.remove(poller)
        return batch

    def _confirm(self, offset: int) -> None:
        before = len(self._updates)
        if offset > 0:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]
        if len(self._updates) != before:
            self._cond.notify_all()

    def _deliverable(self, limit: int) -> list[JSONDict]:
        allowed = set(self._allowed_updates)

        def wanted(update: JSONDict) -> bool:
            kind = next((k for k in update if k != "update_id"), "")
            return kind in allowed if allowed else kind not in _NOT_SENT_BY_DEFAULT

        return [copy.deepcopy(u) for u in self._updates if wanted(u)][:limit]

    def _send_message(self, params: JSONDict) -> JSONDict:
        raw, parse_mode = _text_param(params.get("text")), _parse_mode(params.get("parse_mode"))
        text, entities = _visible(raw, parse_mode, params.get("entities"))
        with self._cond:
            chat = self._chat(params.get("chat_id"))
            markup = _check_markup(params.get("reply_markup"))
            replied = self._replied(chat["id"], params)
            message: JSONDict = {
                "message_id": self._next_message_id(chat["id"]),
                "from": self._bot_user(),
                "chat": copy.deepcopy(chat),
                "date": int(time.time()),
                "text": text,
            }
            if entities:
                message["entities"] = entities
            if markup is not None and "inline_keyboard" in markup:
                message["reply_markup"] = markup  # Telegram echoes only inline keyboards
            if replied is not None:
                message["reply_to_message"] = replied
            key = (chat["id"], message["message_id"])
            self._messages[key] = message
            self._raw[key] = (raw, parse_mode)
            self._sent.append(
                SentMessage(
                    chat_id=chat["id"],
                    message_id=message["message_id"],
                    text=text,
                    raw_text=raw,
                    parse_mode=parse_mode,
                    reply_markup=copy.deepcopy(markup),
                    reply_to_message_id=replied["message_id"] if replied else None,
                    disable_notification=bool(params.get("disable_notification")),
                    entities=tuple(entities),
                )
            )
            self._cond.notify_all()
            return copy.deepcopy(message)

    def _edit_message_text(self, params: JSONDict) -> JSONDict:
        raw, parse_mode = _text_param(params.get("text")), _parse_mode(params.get("parse_mode"))
        text, entities = _visible(raw, parse_mode, params.get("entities"))
        with self._cond:
            message = self._message_to_edit(params)
            markup = _check_markup(params.get("reply_markup"))
            inline = markup if markup is not None and "inline_keyboard" in markup else None
            unchanged = (
                message.get("text") == text
                and message.get("entities", []) == entities
                and message.get("reply_markup") == inline
            )
            if unchanged:
                raise _ApiError(400, _NOT_MODIFIED)
            message["text"] = text
            _set_or_drop(message, "entities", entities or None)
            _set_or_drop(message, "reply_markup", inline)  # no markup: the keyboard goes
            key = (message["chat"]["id"], message["message_id"])
            self._raw[key] = (raw, parse_mode)
            return self._record_edit(message, "editMessageText")

    def _edit_message_reply_markup(self, params: JSONDict) -> JSONDict:
        with self._cond:
            message = self._message_to_edit(params)
            markup = _check_markup(params.get("reply_markup"))
            inline = markup if markup is not None and "inline_keyboard" in markup else None
            if message.get("reply_markup") == inline:
                raise _ApiError(400, _NOT_MODIFIED)
            _set_or_drop(message, "reply_markup", inline)
            return self._record_edit(message, "editMessageReplyMarkup")

    def _message_to_edit(self, params: JSONDict) -> JSONDict:
        if params.get("inline_message_id"):
            raise _ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
        chat = self._chat(params.get("chat_id"))
        message_id = _as_int(params.get("message_id"), 0)
        if not message_id:
            raise _ApiError(400, "Bad Request: message identifier is not specified")
        message = self._messages.get((chat["id"], message_id))
        if message is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        if not message["from"].get("is_bot"):
            raise _ApiError(400, "Bad Request: message can't be edited")
        return message

    def _record_edit(self, message: JSONDict, method: str) -> JSONDict:
        message["edit_date"] = int(time.time())
        key = (message["chat"]["id"], message["message_id"])
        raw, parse_mode = self._raw.get(key, (message.get("text", ""), None))
        replied = message.get("reply_to_message")
        self._sent.append(
            SentMessage(
                chat_id=key[0],
                message_id=key[1],
                text=message.get("text", ""),
                raw_text=raw,
                parse_mode=parse_mode,
                reply_markup=copy.deepcopy(message.get("reply_markup")),
                edited=True,
                method=method,
                reply_to_message_id=replied["message_id"] if replied else None,
                entities=tuple(copy.deepcopy(message.get("entities", []))),
            )
        )
        self._cond.notify_all()
        return copy.deepcopy(message)

    def _delete_message(self, params: JSONDict) -> bool:
        with self._cond:
            chat = self._chat(params.get("chat_id"))
            key = (chat["id"], _as_int(params.get("message_id"), 0))
            if self._messages.pop(key, None) is None:
                raise _ApiError(400, "Bad Request: message to delete not found")
            self._deleted.append(key)
            self._cond.notify_all()
            return True

    def _answer_callback_query(self, params: JSONDict) -> bool:
        query_id = str(params.get("callback_query_id") or "")
        with self._cond:
            if query_id not in self._open_queries:
                raise _ApiError(400, _QUERY_INVALID)
            self._open_queries.discard(query_id)
            cache_time = params.get("cache_time")
            self._callback_answers.append(
                CallbackAnswer(
                    id=query_id,
                    text=params.get("text"),
                    show_alert=bool(params.get("show_alert")),
                    url=params.get("url"),
                    cache_time=cache_time if isinstance(cache_time, int) else None,
                )
            )
            self._cond.notify_all()
        return True

    def _send_chat_action(self, params: JSONDict) -> bool:
        action = str(params.get("action") or "")
        with self._cond:
            chat = self._chat(params.get("chat_id"))
            if action not in _CHAT_ACTIONS:
                raise _ApiError(400, "Bad Request: wrong parameter action in request")
            self._chat_actions.append(ChatAction(chat["id"], action))
            self._cond.notify_all()
        return True

    def _set_webhook(self, params: JSONDict) -> _Described:
        """Any http(s) URL is accepted — Telegram wants HTTPS on ports 443, 80, 88 or
        8443, but a test's receiver is plain HTTP on a free port."""
        url = str(params.get("url") or "")
        if not url:
            return self._delete_webhook(params)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _ApiError(400, "Bad Request: invalid webhook URL specified")
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_TOKEN.fullmatch(str(secret)):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        with self._cond:
            self._webhook_url, self._webhook_secret = url, (str(secret) if secret else None)
            self._webhook_max_connections = _as_int(params.get("max_connections"), 40)
            if isinstance(params.get("allowed_updates"), list):
                self._allowed_updates = [str(kind) for kind in params["allowed_updates"]]
            if params.get("drop_pending_updates"):
                self._updates.clear()
            for poller in self._pollers:
                poller.wake()
            self._cond.notify_all()
        return _Described(True, "Webhook was set")

    def _delete_webhook(self, params: JSONDict) -> _Described:
        with self._cond:
            was_set = bool(self._webhook_url)
            self._webhook_url, self._webhook_secret, self._webhook_error = "", None, None
            if params.get("drop_pending_updates"):
                self._updates.clear()
            self._cond.notify_all()
        return _Described(True, "Webhook was deleted" if was_set else "Webhook is already deleted")

    def _get_webhook_info(self, params: JSONDict) -> JSONDict:
        with self._cond:
            info: JSONDict = {
                "url": self._webhook_url,
                "has_custom_certificate": False,
                "pending_update_count": len(self._updates),
            }
            if self._webhook_url:
                info["max_connections"] = self._webhook_max_connections
                info["ip_address"] = "127.0.0.1"
                if self._allowed_updates:
                    info["allowed_updates"] = list(self._allowed_updates)
                if self._webhook_error:
                    info["last_error_date"], info["last_error_message"] = self._webhook_error
            return info

    def _set_my_commands(self, params: JSONDict) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _ApiError(400, "Bad Request: can't parse commands JSON object")
        cleaned = []
        for command in commands:
            if not isinstance(command, dict):
                raise _ApiError(400, "Bad Request: can't parse commands JSON object")
            name, description = command.get("command"), command.get("description")
            if not isinstance(name, str) or not _COMMAND_NAME.fullmatch(name):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(description, str) or not 1 <= len(description.strip()) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
            cleaned.append({"command": name, "description": description})
        with self._cond:
            key = _commands_key(params.get("scope"), params.get("language_code"))
            self._commands[key] = cleaned
        return True

    def _get_my_commands(self, params: JSONDict) -> list[JSONDict]:
        return self.my_commands(params.get("scope"), str(params.get("language_code") or ""))

    def _delete_my_commands(self, params: JSONDict) -> bool:
        with self._cond:
            self._commands.pop(
                _commands_key(params.get("scope"), params.get("language_code")), None
            )
        return True

    def _close(self, params: JSONDict) -> bool:
        return True

    def _log_out(self, params: JSONDict) -> bool:
        return True

    # -- state helpers (call with the lock held) -----------------------------------------------

    def _chat(self, value: Any) -> JSONDict:
        if value is None or value == "":
            raise _ApiError(400, "Bad Request: chat_id is empty")
        if isinstance(value, str) and value.startswith("@"):
            for chat in self._chats.values():
                if str(chat.get("username", "")).lower() == value[1:].lower():
                    return chat
            raise _ApiError(400, "Bad Request: chat not found")
        chat_id = _as_int(value, None)
        if chat_id is None or chat_id not in self._chats:
            raise _ApiError(400, "Bad Request: chat not found")
        return self._chats[chat_id]

    def _next_message_id(self, chat_id: int) -> int:
        self._next_ids[chat_id] = self._next_ids.get(chat_id, 0) + 1
        return self._next_ids[chat_id]

    def _replied(self, chat_id: int, params: JSONDict) -> JSONDict | None:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            message_id = _as_int(reply.get("message_id"), None)
            allow_missing = bool(reply.get("allow_sending_without_reply"))
            if reply.get("chat_id") not in (None, ""):
                chat_id = self._chat(reply.get("chat_id"))["id"]
        else:
            message_id = _as_int(params.get("reply_to_message_id"), None)
            allow_missing = bool(params.get("allow_sending_without_reply"))
        if message_id is None:
            return None
        replied = self._messages.get((chat_id, message_id))
        if replied is None:
            if allow_missing:
                return None
            raise _ApiError(400, "Bad Request: message to be replied not found")
        return _without_reply(replied)


# -- parameters -------------------------------------------------------------------------


def _key(method: str) -> str:
    return method.lower()


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"Error {status}"


async def _read_params(request: Request) -> tuple[JSONDict, _ApiError | None]:
    """The call's parameters from the query string and the body (JSON, url-encoded form
    or multipart), typed as Telegram reads them; a body it cannot read is the error."""
    raw: JSONDict = dict(request.query_params)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST" and kind == "application/json":
        body = await request.body()
        if body.strip():
            try:
                data = json.loads(body)
            except ValueError:
                return raw, _ApiError(400, "Bad Request: can't parse JSON object")
            if not isinstance(data, dict):
                return raw, _ApiError(400, "Bad Request: JSON object expected")
            raw.update(data)
    elif request.method == "POST" and kind in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        async with request.form() as form:
            for name, value in form.multi_items():
                raw[name] = f"<file {value.filename}>" if isinstance(value, UploadFile) else value
    params: JSONDict = {}
    error: _ApiError | None = None
    for name, value in raw.items():
        try:
            params[name] = _coerce(name, value)
        except ValueError:
            params[name] = value
            what = "reply keyboard markup" if name == "reply_markup" else name
            error = error or _ApiError(400, f"Bad Request: can't parse {what} JSON object")
    return params, error


def _coerce(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if name in _JSON_PARAMS:
        return json.loads(value) if value.strip() else None
    if name in _CHAT_PARAMS or name in _INT_PARAMS:
        return int(value) if re.fullmatch(r"\s*-?\d+\s*", value) else value
    if name in _BOOL_PARAMS:
        lowered = value.strip().lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0", ""):
            return False
    return value


def _as_int(value: Any, default: T) -> int | T:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return default


def _as_float(value: Any, default: float) -> float:
    try:
        return float(value) if value is not None and value != "" else default
    except (TypeError, ValueError):
        return default


def _text_param(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _ApiError(400, "Bad Request: message text is empty")
    return value


def _parse_mode(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value.lower() not in ("markdownv2", "markdown", "html"):
        raise _ApiError(400, "Bad Request: unsupported parse_mode")
    return value


def _visible(raw: str, parse_mode: str | None, entities: Any) -> tuple[str, list[JSONDict]]:
    """The text a user sees and its entities, or Telegram's error for it."""
    try:
        text, parsed = parse_formatted_text(raw, parse_mode)
    except TelegramParseError as err:
        raise _ApiError(400, f"Bad Request: can't parse entities: {err}") from None
    if parse_mode is None and isinstance(entities, list):
        parsed = [e for e in entities if isinstance(e, dict)]
    text, parsed = _trim(text, parsed)
    if not text:
        raise _ApiError(400, "Bad Request: message text is empty")
    if len(text) > MAX_MESSAGE_LENGTH:
        raise _ApiError(400, "Bad Request: message is too long")
    return text, parsed


def _check_markup(value: Any) -> JSONDict | None:
    """Validate reply_markup as Telegram does; the markup itself, or None without one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    if "inline_keyboard" not in value:
        if not {"keyboard", "remove_keyboard", "force_reply"} & value.keys():
            raise _ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
        return value
    rows = value["inline_keyboard"]
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise _ApiError(
            400,
            'Bad Request: field "inline_keyboard" of the InlineKeyboardMarkup should be '
            "an Array of Arrays",
        )
    prefix = "Bad Request: can't parse inline keyboard button: "
    for button in (b for row in rows for b in row):
        if not isinstance(button, dict):
            raise _ApiError(400, prefix + "InlineKeyboardButton must be an Object")
        if not isinstance(button.get("text"), str):
            raise _ApiError(400, prefix + 'Field "text" must be of type String')
        if not any(kind in button for kind in _BUTTON_KINDS):
            raise _ApiError(400, prefix + "Text buttons are unallowed in the inline keyboard")
        if "callback_data" in button:
            data = button["callback_data"]
            size = len(data.encode()) if isinstance(data, str) else 0
            if not 1 <= size <= MAX_CALLBACK_DATA_BYTES:
                raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        if "url" in button:
            parts = urlsplit(str(button["url"]))
            if parts.scheme not in ("http", "https", "tg") or not (parts.netloc or parts.path):
                raise _ApiError(400, "Bad Request: BUTTON_URL_INVALID")
    return value


def _set_or_drop(target: JSONDict, name: str, value: Any) -> None:
    if value is None:
        target.pop(name, None)
    else:
        target[name] = copy.deepcopy(value)


def _without_reply(message: JSONDict) -> JSONDict:
    """A message as Telegram nests it in reply_to_message: without its own reply."""
    nested = copy.deepcopy(message)
    nested.pop("reply_to_message", None)
    return nested


def _commands_key(scope: Any, language_code: Any) -> str:
    scope = scope if isinstance(scope, dict) else {"type": "default"}
    return json.dumps([scope, str(language_code or "")], sort_keys=True)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _bot_command_entities(text: str) -> list[JSONDict]:
    return [
        {
            "type": "bot_command",
            "offset": _utf16_len(text[: m.start()]),
            "length": _utf16_len(m.group()),
        }
        for m in _BOT_COMMAND.finditer(text)
    ]


def _trim(text: str, entities: list[JSONDict]) -> tuple[str, list[JSONDict]]:
    """Strip surrounding whitespace as Telegram does, moving entities with the text."""
    stripped = text.strip(_WHITESPACE)
    shift = _utf16_len(text[: len(text) - len(text.lstrip(_WHITESPACE))])
    total = _utf16_len(stripped)
    kept = []
    for entity in entities:
        start = max(int(entity.get("offset", 0)) - shift, 0)
        end = min(int(entity.get("offset", 0)) + int(entity.get("length", 0)) - shift, total)
        if end > start:
            kept.append({**entity, "offset": start, "length": end - start})
    return stripped, kept


# -- Telegram's text parsers, ported from TDLib (td/telegram/MessageEntity.cpp) -----------


def parse_formatted_text(text: str, parse_mode: str | None) -> tuple[str, list[JSONDict]]:
    """The visible text and Bot API entities Telegram makes of ``text`` in ``parse_mode``
    ("MarkdownV2", "Markdown", "HTML", any case; None for plain text).

    Ported from TDLib's parsers, byte offsets and error wording included, so a test (or
    a property test of a bot's escaping) gets the verdict Telegram would give; raises
    :class:`TelegramParseError` with the message Telegram puts after "can't parse
    entities: ". Telegram's auto-detected entities (URLs, mentions) are not produced.
    """
    if not parse_mode:
        return text, []
    mode = parse_mode.lower()
    if mode == "markdownv2":
        return _MarkdownV2(text).parse()
    if mode == "markdown":
        return _parse_markdown_v1(text)
    if mode == "html":
        return _HtmlParser(text).parse()
    raise ValueError(f"unsupported parse_mode {parse_mode!r}")


_API_TYPES = {
    "Bold": "bold",
    "Italic": "italic",
    "Underline": "underline",
    "Strikethrough": "strikethrough",
    "Spoiler": "spoiler",
    "Code": "code",
    "Pre": "pre",
    "PreCode": "pre",
    "TextUrl": "text_link",
    "MentionName": "text_mention",
    "CustomEmoji": "custom_emoji",
    "BlockQuote": "blockquote",
    "ExpandableBlockQuote": "expandable_blockquote",
}
_SPACES = frozenset(b" \t\r\n\x00\x0b")


def _entity(kind: str, offset: int, length: int, argument: str = "") -> JSONDict:
    entity: JSONDict = {"type": _API_TYPES[kind], "offset": offset, "length": length}
    if kind == "PreCode":
        entity["language"] = argument
    elif kind == "TextUrl":
        entity["url"] = argument
    elif kind == "MentionName":
        entity["user"] = {"id": int(argument), "is_bot": False, "first_name": ""}
    elif kind == "CustomEmoji":
        entity["custom_emoji_id"] = argument
    return entity


def _sorted(entities: list[JSONDict]) -> list[JSONDict]:
    """In TDLib's order: by offset, longer first, a blockquote outside what it quotes."""
    quotes = ("blockquote", "expandable_blockquote")
    return sorted(entities, key=lambda e: (e["offset"], -e["length"], e["type"] not in quotes))


def _link_user_id(url: str) -> int | None:
    """The user of a ``tg://user?id=N`` link, which makes a text_mention."""
    parts = urlsplit(url)
    host = (parts.netloc or parts.path).strip("/").lower()
    if parts.scheme.lower() != "tg" or host != "user":
        return None
    ids = parse_qs(parts.query).get("id") or [""]
    return int(ids[0]) if ids[0].isdigit() and int(ids[0]) > 0 else None


def _checked_link(url: str) -> str | None:
    """A simplified LinkManager::get_checked_link: a normalized URL, or None (the
    entity is dropped, not an error) for what Telegram would not link."""
    url = url.strip()
    if not url:
        return None
    if "://" not in url and not url.lower().startswith(("tg:", "ton:", "mailto:")):
        url = "http://" + url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("tg", "ton", "mailto"):
        return url
    host = parts.hostname or ""
    if (
        scheme not in ("http", "https")
        or "." not in host.strip(".")
        or not re.fullmatch(r"[A-Za-z0-9.-]+", host)
    ):
        return None
    query = f"?{parts.query}" if parts.query or url.endswith("?") else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{scheme}://{parts.netloc}{parts.path or '/'}{query}{fragment}"


def _custom_emoji_id(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme.lower() != "tg":
        raise TelegramParseError("Custom emoji URL must have scheme tg")
    if (parts.netloc or parts.path).strip("/").lower() != "emoji":
        raise TelegramParseError('Custom emoji URL must have host "emoji"')
    ids = parse_qs(parts.query).get("id")
    if not ids:
        raise TelegramParseError("Custom emoji URL must have an emoji identifier")
    if not ids[0].isdigit() or ids[0].startswith("0"):
        raise TelegramParseError("Invalid custom emoji identifier specified")
    return ids[0]


def _reserved(char: int) -> TelegramParseError:
    return TelegramParseError(
        f"Character '{chr(char)}' is reserved and must be escaped with the preceding '\\'"
    )


@dataclass
class _Open:
    kind: str
    argument: str
    offset: int  # UTF-16 offset in the visible text
    byte_offset: int  # in the source, for error messages
    begin: int  # byte position in the visible text


class _MarkdownV2:
    """TDLib's parse_markdown_v2, statement for statement, over UTF-8 bytes; ``at``
    reads past the end as 0, as the C++ reads the string's terminating NUL."""

    RESERVED = frozenset(b"_*[]()~`>#+-=|{}.!\n")

    def __init__(self, text: str) -> None:
        self.data = text.encode()
        self.out = bytearray()
        self.utf16 = 0

    def at(self, i: int) -> int:
        return self.data[i] if i < len(self.data) else 0

    def parse(self) -> tuple[str, list[JSONDict]]:  # a port: kept in one piece
        data, out, at = self.data, self.out, self.at
        entities: list[JSONDict] = []
        nested: list[_Open] = []
        have_blockquote, can_start_blockquote = False, True
        i = -1
        while True:
            i += 1
            if i >= len(data):
                break
            c = data[i]
            if c == 0x5C and 0 < at(i + 1) <= 126:  # backslash: the next character is text
                i += 1
                self.utf16 += 1
                out.append(data[i])
                if data[i] != 0x0D:
                    can_start_blockquote = data[i] == 0x0A
                continue
            in_code = bool(nested) and nested[-1].kind in ("Code", "Pre", "PreCode")
            if (c != 0x60) if in_code else (c not in self.RESERVED):
                if c & 0xC0 != 0x80:  # the first byte of a character
                    self.utf16 += 2 if c >= 0xF0 else 1
                    if c != 0x0D:
                        can_start_blockquote = False
                out.append(c)
                continue
            if not nested:
                is_end = False
            elif have_blockquote and c == 0x0A and (i + 1 == len(data) or at(i + 1) != 0x3E):
                is_end = True
            else:
                is_end = self._ends(nested[-1].kind, c, i)
            if not is_end:
                kind, argument, byte_offset = "", "", i
                if c == 0x5F:  # _
                    if at(i + 1) == 0x5F:
                        kind = "Underline"
                        i += 1
                    else:
                        kind = "Italic"
                elif c == 0x2A:
                    kind = "Bold"
                elif c == 0x7E:
                    kind = "Strikethrough"
                elif c == 0x7C:  # |
                    if at(i + 1) != 0x7C:
                        raise _reserved(c)
                    i += 1
                    kind = "Spoiler"
                elif c == 0x5B:
                    kind = "TextUrl"
                elif c == 0x60:  # `
                    if at(i + 1) == 0x60 and at(i + 2) == 0x60:
                        i += 3
                        kind = "Pre"
                        end = i
                        while at(end) not in _SPACES and at(end) != 0x60:
                            end += 1
                        if i != end and end < len(data) and at(end) != 0x60:
                            kind = "PreCode"
                            argument = data[i:end].decode(errors="replace")
                            i = end
                        if at(i) in (0x0A, 0x0D):  # one new line after ``` is skipped
                            if at(i + 1) in (0x0A, 0x0D) and at(i) != at(i + 1):
                                i += 2
                            else:
                                i += 1
                        i -= 1
                    else:
                        kind = "Code"
                elif c == 0x21:  # !
                    if at(i + 1) != 0x5B:
                        raise _reserved(c)
                    i += 1
                    kind = "CustomEmoji"
                elif c == 0x0A:
                    self.utf16 += 1
                    out.append(0x0A)
                    can_start_blockquote = True
                    continue
                elif c == 0x3E:  # >
                    if not can_start_blockquote:
                        raise _reserved(c)
                    if have_blockquote:
                        continue
                    kind = "BlockQuote"
                    have_blockquote = True
                else:
                    raise _reserved(c)
                nested.append(_Open(kind, argument, self.utf16, byte_offset, len(out)))
                continue
            # the end of an entity
            top = nested[-1]
            kind = top.kind
            if c == 0x0A and kind != "BlockQuote":
                spoiler_ends_quote = kind == "Spoiler" and (
                    top.byte_offset == i - 2
                    or (top.byte_offset == i - 3 and out and out[-1] == 0x0D)
                )
                if not spoiler_ends_quote:
                    raise _unfinished(top)
                nested.pop()
                top = nested[-1]
                if top.kind != "BlockQuote":
                    raise _unfinished(top)
                kind = "ExpandableBlockQuote"
            argument = top.argument
            skip = self.utf16 == top.offset
            user_id: int | None = None
            if kind in ("Underline", "Spoiler"):
                i += 1
            elif kind in ("Pre", "PreCode"):
                i += 2
            elif kind == "TextUrl":
                if at(i + 1) != 0x28:  # no (url): the text is the URL
                    url = out[top.begin :].decode(errors="replace")
                else:
                    i, url = self._url(i + 2, "a URL")
                user_id = _link_user_id(url)
                if user_id is None:
                    checked = _checked_link(url)
                    skip = skip or checked is None
                    argument = checked or ""
            elif kind == "CustomEmoji":
                if at(i + 1) != 0x28:
                    raise TelegramParseError("Custom emoji entity must contain a tg://emoji URL")
                i, url = self._url(i + 2, "a custom emoji URL")
                argument = _custom_emoji_id(url)
            elif kind in ("BlockQuote", "ExpandableBlockQuote"):
                have_blockquote = False
                out.append(data[i])
                can_start_blockquote = True
                self.utf16 += 1
                skip = False
            if not skip:
                length = self.utf16 - top.offset
                if user_id is not None:
                    entities.append(_entity("MentionName", top.offset, length, str(user_id)))
                else:
                    entities.append(_entity(kind, top.offset, length, argument))
            nested.pop()
        if have_blockquote:
            kind = "BlockQuote"
            if nested[-1].kind == "Spoiler" and nested[-1].byte_offset == len(data) - 2:
                nested.pop()
                kind = "ExpandableBlockQuote"
            if nested[-1].kind == "BlockQuote":
                top = nested.pop()
                if self.utf16 != top.offset:
                    entities.append(_entity(kind, top.offset, self.utf16 - top.offset))
        if nested:
            raise _unfinished(nested[-1])
        return out.decode(errors="replace"), _sorted(entities)

    def _ends(self, kind: str, c: int, i: int) -> bool:
        at = self.at
        if kind == "Bold":
            return c == 0x2A
        if kind == "Italic":
            return c == 0x5F and at(i + 1) != 0x5F
        if kind == "Code":
            return c == 0x60
        if kind in ("Pre", "PreCode"):
            return c == 0x60 and at(i + 1) == 0x60 and at(i + 2) == 0x60
        if kind in ("TextUrl", "CustomEmoji"):
            return c == 0x5D
        if kind == "Underline":
            return c == 0x5F and at(i + 1) == 0x5F
        if kind == "Strikethrough":
            return c == 0x7E
        if kind == "Spoiler":
            return c == 0x7C and at(i + 1) == 0x7C
        return False  # BlockQuote ends only at a line that does not start with '>'

    def _url(self, i: int, what: str) -> tuple[int, str]:
        """Read ``(...)`` from after its '(' to its ')', unescaping; the index of ')'."""
        data, begin, url = self.data, i, bytearray()
        while i < len(data) and data[i] != 0x29:
            if data[i] == 0x5C and 0 < self.at(i + 1) <= 126:
                url.append(data[i + 1])
                i += 2
                continue
            url.append(data[i])
            i += 1
        if self.at(i) != 0x29:
            raise TelegramParseError(f"Can't find end of {what} at byte offset {begin}")
        return i, url.decode(errors="replace")


def _unfinished(entity: _Open) -> TelegramParseError:
    return TelegramParseError(
        f"Can't find end of {entity.kind} entity at byte offset {entity.byte_offset}"
    )


def _parse_markdown_v1(text: str) -> tuple[str, list[JSONDict]]:
    """TDLib's parse_markdown (the legacy "Markdown" mode): _ * ` ``` [](), no nesting."""
    data, out, entities = text.encode(), bytearray(), []
    size, utf16, i = len(data), 0, 0

    def at(j: int) -> int:
        return data[j] if j < size else 0

    while i < size:
        c = data[i]
        if c == 0x5C and at(i + 1) in b"_*`[":
            out.append(data[i + 1])
            utf16 += 1
            i += 2
            continue
        if c not in b"_*`[":
            if c & 0xC0 != 0x80:
                utf16 += 2 if c >= 0xF0 else 1
            out.append(c)
            i += 1
            continue
        begin, end_char, is_pre, language = i, (0x5D if c == 0x5B else c), False, ""
        i += 1
        if c == 0x60 and at(i) == 0x60 and at(i + 1) == 0x60:
            i += 2
            is_pre = True
            end = i
            while at(end) not in _SPACES and at(end) != 0x60:
                end += 1
            if i != end and end < size and at(end) != 0x60:
                language = data[i:end].decode(errors="replace")
                i = end
            if at(i) in (0x0A, 0x0D):
                i += 2 if at(i + 1) in (0x0A, 0x0D) and at(i) != at(i + 1) else 1
        offset = utf16
        while i < size and (
            data[i] != end_char or (is_pre and not (at(i + 1) == 0x60 and at(i + 2) == 0x60))
        ):
            if data[i] & 0xC0 != 0x80:
                utf16 += 2 if data[i] >= 0xF0 else 1
            out.append(data[i])
            i += 1
        if i == size:
            raise TelegramParseError(
                f"Can't find end of the entity starting at byte offset {begin}"
            )
        if offset != utf16:
            length = utf16 - offset
            if c == 0x5F:
                entities.append(_entity("Italic", offset, length))
            elif c == 0x2A:
                entities.append(_entity("Bold", offset, length))
            elif c == 0x5B:
                url = data[begin + 1 : i].decode(errors="replace")
                if at(i + 1) == 0x28:
                    i += 2
                    start = i
                    while i < size and data[i] != 0x29:
                        i += 1
                    url = data[start:i].decode(errors="replace")
                user_id = _link_user_id(url)
                checked = None if user_id is not None else _checked_link(url)
                if user_id is not None:
                    entities.append(_entity("MentionName", offset, length, str(user_id)))
                elif checked is not None:
                    entities.append(_entity("TextUrl", offset, length, checked))
            elif is_pre:
                kind = "PreCode" if language else "Pre"
                entities.append(_entity(kind, offset, length, language))
            else:
                entities.append(_entity("Code", offset, length))
        if is_pre:
            i += 2
        i += 1
    return out.decode(errors="replace"), _sorted(entities)


_HTML_TAGS = _words(
    "a b strong i em s strike del u ins tg-spoiler tg-emoji span pre code blockquote"
)
_HTML_KINDS = {
    "b": "Bold",
    "strong": "Bold",
    "i": "Italic",
    "em": "Italic",
    "s": "Strikethrough",
    "strike": "Strikethrough",
    "del": "Strikethrough",
    "u": "Underline",
    "ins": "Underline",
    "tg-spoiler": "Spoiler",
    "span": "Spoiler",
}


class _HtmlParser:
    """TDLib's parse_html over UTF-8 bytes. As in Telegram, only ``<`` must be escaped:
    a bare ``>`` or an ``&`` that starts no entity (&lt; &gt; &amp; &quot; &#N; &#xN;)
    is text."""

    def __init__(self, text: str) -> None:
        self.data = text.encode()

    def at(self, i: int) -> int:
        return self.data[i] if i < len(self.data) else 0

    def entity_at(self, pos: int) -> tuple[int, int]:
        """decode_html_entity: the code point of the entity at ``pos`` (0 if none) and
        the position after it."""
        at, end, code = self.at, pos + 1, 0
        if at(pos + 1) == 0x23:  # &#
            end += 1
            if at(pos + 2) == 0x78:  # &#x
                end += 1
                while chr(at(end)) in "0123456789abcdefABCDEF":
                    code = code * 16 + int(chr(at(end)), 16)
                    end += 1
            else:
                while 0x30 <= at(end) <= 0x39:
                    code = code * 10 + at(end) - 0x30
                    end += 1
            if code == 0 or code >= 0x10FFFF or end - pos >= 10:
                return 0, pos
        else:
            while chr(at(end)).isascii() and chr(at(end)).isalpha():
                end += 1
            name = self.data[pos + 1 : end]
            named = {b"lt": 0x3C, b"gt": 0x3E, b"amp": 0x26, b"quot": 0x22}
            if name not in named:
                return 0, pos
            code = named[name]
        return code, (end + 1 if at(end) == 0x3B else end)

    def parse(self) -> tuple[str, list[JSONDict]]:  # a port: kept in one piece
        data, at = self.data, self.at
        out = bytearray()
        utf16, size, i = 0, len(data), -1
        entities: list[JSONDict] = []
        nested: list[_Open] = []
        surrogates = False
        while True:
            i += 1
            if i >= size:
                break
            c = data[i]
            if c == 0x26:  # &
                code, after = self.entity_at(i)
                if code:
                    i = after - 1
                    utf16 += 2 if code > 0xFFFF else 1
                    surrogates = surrogates or 0xD800 <= code <= 0xDFFF
                    out += chr(code).encode("utf-8", "surrogatepass")
                    continue
            if c != 0x3C:  # <
                if c & 0xC0 != 0x80:
                    utf16 += 2 if c >= 0xF0 else 1
                out.append(c)
                continue
            begin = i
            i += 1
            if at(i) != 0x2F:  # a start tag
                while at(i) not in _SPACES and at(i) != 0x3E:
                    i += 1
                if at(i) == 0:
                    raise TelegramParseError(f"Unclosed start tag at byte offset {begin}")
                tag = data[begin + 1 : i].decode(errors="replace").lower()
                if tag not in _HTML_TAGS:
                    raise TelegramParseError(
                        f'Unsupported start tag "{tag}" at byte offset {begin}'
                    )
                i, argument = self._attributes(i, tag, begin)
                if tag == "span" and argument != "spoiler":
                    raise TelegramParseError(
                        f'Tag "span" must have class "tg-spoiler" at byte offset {begin}'
                    )
                nested.append(_Open(tag, argument, utf16, begin, len(out)))
                continue
            # an end tag
            if not nested:
                raise TelegramParseError(f"Unexpected end tag at byte offset {begin}")
            while at(i) not in _SPACES and at(i) != 0x3E:
                i += 1
            end_tag = data[begin + 2 : i].decode(errors="replace").lower()
            while at(i) in _SPACES and at(i) != 0:
                i += 1
            if at(i) != 0x3E:
                raise TelegramParseError(f"Unclosed end tag at byte offset {begin}")
            top = nested.pop()
            if end_tag and end_tag != top.kind:
                raise TelegramParseError(
                    f'Unmatched end tag at byte offset {begin}, expected "</{top.kind}>", '
                    f'found "</{end_tag}>"'
                )
            if utf16 > top.offset:
                self._close(top, utf16 - top.offset, out, entities)
        if nested:
            raise TelegramParseError(
                f'Can\'t find end tag corresponding to start tag "{nested[-1].kind}"'
            )
        if surrogates:
            raise TelegramParseError(
                "Text contains invalid Unicode characters after decoding HTML entities, "
                "check for unmatched surrogate code units"
            )
        for entity in entities:
            if entity["type"] == "code":
                entity.pop("language", None)
        return out.decode(errors="replace"), _sorted(entities)

    def _attributes(self, i: int, tag: str, begin: int) -> tuple[int, str]:
        """Read a start tag's attributes up to its '>'; the tag's argument (href, code
        language, span class, emoji id, "1" for an expandable blockquote)."""
        data, at, argument = self.data, self.at, ""
        while at(i) != 0x3E:
            while at(i) != 0 and at(i) in _SPACES:
                i += 1
            if at(i) == 0x3E:
                break
            name_begin = i
            while at(i) not in _SPACES and at(i) not in b"=>/\"'":
                i += 1
            name = data[name_begin:i].decode(errors="replace")
            if not name:
                raise TelegramParseError(
                    f'Empty attribute name in the tag "{tag}" at byte offset {begin}'
                )
            while at(i) != 0 and at(i) in _SPACES:
                i += 1
            if at(i) != 0x3D:  # an attribute without a value
                if at(i) == 0:
                    raise TelegramParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                if tag == "blockquote" and name == "expandable":
                    argument = "1"
                continue
            i += 1
            while at(i) != 0 and at(i) in _SPACES:
                i += 1
            if at(i) == 0:
                raise TelegramParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
            if at(i) not in (0x27, 0x22):  # a name token
                token_begin = i
                while chr(at(i)).isascii() and (chr(at(i)).isalnum() or at(i) in b".-"):
                    i += 1
                value = data[token_begin:i].decode(errors="replace").lower()
                if at(i) not in _SPACES and at(i) != 0x3E:
                    raise TelegramParseError(
                        f"Unexpected end of name token at byte offset {token_begin}"
                    )
            else:  # a quoted string, with entities
                quote = at(i)
                i += 1
                raw = bytearray()
                while at(i) != quote and at(i) != 0:
                    if at(i) == 0x26:
                        code, after = self.entity_at(i)
                        if code:
                            raw += chr(code).encode("utf-8", "surrogatepass")
                            i = after
                            continue
                    raw.append(at(i))
                    i += 1
                if at(i) == quote:
                    i += 1
                value = raw.decode(errors="replace")
            if at(i) == 0:
                raise TelegramParseError(f"Unclosed start tag at byte offset {begin}")
            if tag == "a" and name == "href":
                argument = value
            elif tag == "code" and name == "class" and value.startswith("language-"):
                argument = value[9:]
            elif tag == "span" and name == "class" and value.startswith("tg-"):
                argument = value[3:]
            elif tag == "tg-emoji" and name == "emoji-id":
                argument = value
            elif tag == "blockquote" and name == "expandable":
                argument = "1"
        return i, argument

    def _close(self, top: _Open, length: int, out: bytearray, entities: list[JSONDict]) -> None:
        tag, offset = top.kind, top.offset
        last = entities[-1] if entities else None
        same_span = last is not None and last["offset"] == offset and last["length"] == length
        if tag in _HTML_KINDS:
            entities.append(_entity(_HTML_KINDS[tag], offset, length))
        elif tag == "tg-emoji":
            if not top.argument.isdigit() or int(top.argument) == 0:
                raise TelegramParseError("Invalid custom emoji identifier specified")
            entities.append(_entity("CustomEmoji", offset, length, str(int(top.argument))))
        elif tag == "a":
            url = top.argument or out[top.begin :].decode(errors="replace")
            user_id = _link_user_id(url)
            if user_id is not None:
                entities.append(_entity("MentionName", offset, length, str(user_id)))
            elif (checked := _checked_link(url)) is not None:
                entities.append(_entity("TextUrl", offset, length, checked))
        elif tag == "pre":
            if same_span and last is not None and last["type"] == "code" and last.get("language"):
                last["type"] = "pre"  # <pre><code class="language-x">: a pre with a language
            else:
                entities.append(_entity("Pre", offset, length))
        elif tag == "code":
            if same_span and last is not None and last["type"] == "pre" and top.argument:
                last["language"] = top.argument
            else:
                entity = _entity("Code", offset, length)
                if top.argument:
                    entity["language"] = top.argument  # kept until its <pre> closes
                entities.append(entity)
        elif tag == "blockquote":
            kind = "ExpandableBlockQuote" if top.argument else "BlockQuote"
            entities.append(_entity(kind, offset, length))
