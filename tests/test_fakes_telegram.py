"""FakeTelegramServer against the real python-telegram-bot client.

The fake is only worth having if PTB, unmodified, sees it as Telegram: every test here
drives a real ``telegram.Bot`` over real HTTP (pytest-asyncio is not installed, so each
test runs its coroutine with ``asyncio.run``) and checks both what PTB made of the answer
and what the fake recorded.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from telegram import Bot, BotCommand, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, Conflict, InvalidToken, RetryAfter
from telegram.helpers import escape_markdown

from amelio.testing import ThreadedServer
from fakes.telegram_bot_api import CallbackAnswer, ChatAction, FakeTelegramServer

T = TypeVar("T")
CHAT = 42


@pytest.fixture(scope="module")
def server() -> Iterator[FakeTelegramServer]:
    with FakeTelegramServer() as fake:
        yield fake


@pytest.fixture
def tg(server: FakeTelegramServer) -> FakeTelegramServer:
    server.reset()
    server.add_chat(CHAT)
    return server


def run(
    tg: FakeTelegramServer, body: Callable[[Bot], Awaitable[T]], *, token: str | None = None
) -> T:
    """Run ``body`` with an initialized PTB Bot pointed at the fake (as Amelio will be)."""

    async def main() -> T:
        async with Bot(token or tg.token, base_url=tg.base_url) as bot:
            return await body(bot)

    return asyncio.run(main())


def keyboard(*data: str) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[InlineKeyboardButton(d.title(), callback_data=d) for d in data]])


def raw_client() -> httpx.Client:
    return httpx.Client(trust_env=False, timeout=10)


# -- the protocol ----------------------------------------------------------------------


def test_get_me_is_the_bot_behind_the_token(tg: FakeTelegramServer) -> None:
    me = run(tg, lambda bot: bot.get_me())
    assert (me.id, me.is_bot, me.username) == (123456, True, "amelio_test_bot")
    assert {r.method for r in tg.requests} == {"getMe"}  # Bot.initialize called it too


@pytest.mark.parametrize("token", ["654321:WRONG-token", "not-a-token"])
def test_a_wrong_token_is_refused_when_the_bot_starts(tg: FakeTelegramServer, token: str) -> None:
    with pytest.raises(InvalidToken, match="was rejected by the server"):
        run(tg, lambda bot: bot.get_me(), token=token)
    # Telegram: 401 for a well-formed token it does not know, 404 for a malformed one.
    expected = 401 if ":" in token else 404
    assert [(e.method, e.error_code) for e in tg.errors] == [("getMe", expected)]


def test_envelope_json_body_and_method_names_are_telegrams(tg: FakeTelegramServer) -> None:
    tg.fail("sendMessage", 429, retry_after=7)
    with raw_client() as client:
        limited = client.post(f"{tg.api_url}/sendMessage", json={"chat_id": CHAT, "text": "a"})
        sent = client.post(f"{tg.api_url}/SENDMESSAGE", json={"chat_id": CHAT, "text": "a"})
        unknown = client.get(f"{tg.api_url}/noSuchMethod")
    assert limited.status_code == 429
    assert limited.json() == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 7",
        "parameters": {"retry_after": 7},
    }
    assert sent.status_code == 200 and sent.json()["ok"] is True
    assert sent.json()["result"]["chat"] == {"id": CHAT, "type": "private", "first_name": "Ada"}
    assert unknown.status_code == 404
    assert unknown.json() == {"ok": False, "error_code": 404, "description": "Not Found"}


# -- sending ------------------------------------------------------------------------------


def test_send_message_with_an_inline_keyboard_round_trips(tg: FakeTelegramServer) -> None:
    markup = InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton("Yes", callback_data="yes"),
                InlineKeyboardButton("Docs", url="https://example.org/docs"),
            ]
        ]
    )

    async def body(bot: Bot) -> tuple[Any, Any]:
        first = await bot.send_message(CHAT, "  Pick one \n", reply_markup=markup)
        return first, await bot.send_message(CHAT, "And again", disable_notification=True)

    first, second = run(tg, body)
    assert (first.message_id, second.message_id) == (1, 2)
    assert first.chat.id == CHAT and first.from_user.id == 123456 and first.from_user.is_bot
    assert first.text == "Pick one"  # trimmed, as Telegram does
    assert first.reply_markup == markup and second.reply_markup is None
    assert [m.callback_data for m in tg.sent] == [["yes"], []]
    assert tg.sent[0].raw_text == "  Pick one \n" and tg.sent[1].disable_notification
    # What PTB puts on the wire: a url-encoded form whose object values are JSON strings.
    request = next(r for r in tg.requests if r.method == "sendMessage")
    assert request.content_type == "application/x-www-form-urlencoded"
    assert request.params["chat_id"] == CHAT
    assert request.params["reply_markup"] == markup.to_dict()


def test_an_unknown_chat_is_not_found(tg: FakeTelegramServer) -> None:
    with pytest.raises(BadRequest, match="Chat not found"):
        run(tg, lambda bot: bot.send_message(999, "hello?"))
    assert tg.sent == []


def test_markdown_v2_must_be_escaped_as_telegram_requires(tg: FakeTelegramServer) -> None:
    with pytest.raises(BadRequest) as caught:
        run(tg, lambda bot: bot.send_message(CHAT, "Version 1.0", parse_mode="MarkdownV2"))
    # PTB drops "Bad Request: " and capitalizes what is left.
    assert str(caught.value) == (
        "Can't parse entities: character '.' is reserved and must be escaped with the "
        "preceding '\\'"
    )
    with pytest.raises(BadRequest, match=r"(?i)can't find end of bold entity at byte offset 6"):
        run(tg, lambda bot: bot.send_message(CHAT, "Fine, *bold", parse_mode="MarkdownV2"))

    text = "Version 1.0 (beta) costs $5 - [really]! #1 {x} = y | z > w ~ _ * `"
    escaped = escape_markdown(text, version=2)
    formatted = f"*{escape_markdown('Bold.', version=2)}* `a.b(c)` {escaped}"

    async def body(bot: Bot) -> tuple[Any, Any]:
        plain = await bot.send_message(CHAT, escaped, parse_mode="MarkdownV2")
        return plain, await bot.send_message(CHAT, formatted, parse_mode="MarkdownV2")

    plain, rich = run(tg, body)
    assert plain.text == text and tg.sent[0].raw_text == escaped
    assert rich.text == f"Bold. a.b(c) {text}"  # inside `code` only ` and \ need escaping
    assert [(e.type, e.offset, e.length) for e in rich.entities] == [("bold", 0, 5), ("code", 6, 6)]


def test_html_must_be_balanced_and_escape_its_angle_brackets(tg: FakeTelegramServer) -> None:
    with pytest.raises(BadRequest, match=r'(?i)unsupported start tag "" at byte offset 2'):
        run(tg, lambda bot: bot.send_message(CHAT, "1 < 2", parse_mode="HTML"))
    with pytest.raises(BadRequest, match='corresponding to start tag "b"'):
        run(tg, lambda bot: bot.send_message(CHAT, "<b>open", parse_mode="HTML"))
    message = run(tg, lambda bot: bot.send_message(CHAT, "<b>1 &lt; 2</b> & 3", parse_mode="HTML"))
    assert message.text == "1 < 2 & 3" and message.entities[0].type == "bold"


def test_text_length_is_counted_after_parsing(tg: FakeTelegramServer) -> None:
    with pytest.raises(BadRequest, match="Message is too long"):
        run(tg, lambda bot: bot.send_message(CHAT, "x" * 4097))
    with pytest.raises(BadRequest, match="Message text is empty"):
        run(tg, lambda bot: bot.send_message(CHAT, " \n "))
    at_limit = "*" + "x" * 4096 + "*"  # 4098 characters to send, 4096 to read
    message = run(tg, lambda bot: bot.send_message(CHAT, at_limit, parse_mode="MarkdownV2"))
    assert len(message.text) == 4096 and len(tg.sent) == 1


def test_callback_data_is_limited_to_64_bytes(tg: FakeTelegramServer) -> None:
    with pytest.raises(BadRequest, match=r"(?i)button_data_invalid"):
        run(tg, lambda bot: bot.send_message(CHAT, "Pick", reply_markup=keyboard("é" * 33)))
    run(tg, lambda bot: bot.send_message(CHAT, "Pick", reply_markup=keyboard("é" * 32)))
    assert [len(m.callback_data[0].encode()) for m in tg.sent] == [64]


def test_rate_limit_raises_retry_after_with_telegrams_delay(
    tg: FakeTelegramServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # PTB 22 warns when retry_after is an int
    tg.fail("sendmessage", 429, retry_after=3)

    async def body(bot: Bot) -> Any:
        with pytest.raises(RetryAfter) as caught:
            await bot.send_message(CHAT, "first")
        assert caught.value.retry_after == dtm.timedelta(seconds=3)
        return await bot.send_message(CHAT, "second")  # times=1: only the first failed

    assert run(tg, body).text == "second"
    assert [m.text for m in tg.sent] == ["second"]


# -- receiving ------------------------------------------------------------------------------


def test_get_updates_long_polls_and_honours_offset(tg: FakeTelegramServer) -> None:
    async def body(bot: Bot) -> None:
        threading.Timer(0.3, tg.user_message, (CHAT, "/start")).start()
        started = time.monotonic()
        [update] = await bot.get_updates(timeout=5)
        assert 0.2 < time.monotonic() - started < 3  # waited for it, returned when it came
        assert update.message.text == "/start" and update.message.chat.id == CHAT
        assert update.message.entities[0].type == "bot_command"  # what CommandHandler needs
        again = await bot.get_updates(timeout=0)
        assert [u.update_id for u in again] == [update.update_id]  # not confirmed yet
        tg.user_message(CHAT, "second")
        tg.user_message(CHAT, "third")
        newer = await bot.get_updates(offset=update.update_id + 1, limit=1)
        assert [u.message.text for u in newer] == ["second"]
        assert [u["message"]["text"] for u in tg.pending_updates] == ["second", "third"]
        rest = await bot.get_updates(offset=newer[0].update_id + 1, timeout=0)
        assert [u.message.text for u in rest] == ["third"]
        started = time.monotonic()
        assert await bot.get_updates(offset=rest[0].update_id + 1, timeout=1) == ()
        assert time.monotonic() - started >= 0.9  # nothing came: it waited the full timeout
        assert tg.pending_updates == []

    run(tg, body)


def test_a_newer_get_updates_ends_the_older_with_a_conflict(tg: FakeTelegramServer) -> None:
    answers: list[httpx.Response] = []

    def poll() -> None:
        with raw_client() as client:
            answers.append(client.post(f"{tg.api_url}/getUpdates", data={"timeout": "5"}))

    first = threading.Thread(target=poll)
    first.start()
    with raw_client() as client:  # until the first call waits, a second one just returns
        while first.is_alive() and len(tg.requests) < 100:
            assert client.post(f"{tg.api_url}/getUpdates").json() == {"ok": True, "result": []}
            first.join(0.02)
    first.join(5)
    assert answers[0].status_code == 409
    assert "terminated by other getUpdates request" in answers[0].json()["description"]


def test_user_reply_carries_the_message_it_answers(tg: FakeTelegramServer) -> None:
    async def body(bot: Bot) -> None:
        question = await bot.send_message(CHAT, "Your name?")
        tg.user_message(CHAT, "Ada", reply_to_message_id=question.message_id)
        [update] = await bot.get_updates()
        replied = update.message.reply_to_message
        assert replied.message_id == question.message_id and replied.text == "Your name?"
        assert replied.from_user.is_bot
        answer = await bot.send_message(
            CHAT, "Hi Ada", reply_to_message_id=update.message.message_id
        )
        assert answer.reply_to_message.text == "Ada"
        with pytest.raises(BadRequest, match="Message to be replied not found"):
            await bot.send_message(CHAT, "?", reply_to_message_id=999)

    run(tg, body)
    assert tg.sent[-1].reply_to_message_id == 2


def test_pressing_a_button_and_answering_the_query(tg: FakeTelegramServer) -> None:
    message = run(tg, lambda bot: bot.send_message(CHAT, "Sure?", reply_markup=keyboard("yes")))
    with pytest.raises(ValueError, match="no button with callback_data 'no'"):
        tg.press_button(CHAT, message.message_id, "no")
    pressed = tg.press_button(CHAT, message.message_id, "yes")

    async def body(bot: Bot) -> None:
        [update] = await bot.get_updates(allowed_updates=["message", "callback_query"])
        query = update.callback_query
        assert query.data == "yes" and query.message.message_id == message.message_id
        assert query.message.reply_markup == keyboard("yes")
        await query.answer("Done", show_alert=True)
        with pytest.raises(BadRequest, match="Query is too old"):
            await query.answer()  # a query is answered once

    run(tg, body)
    query_id = pressed["callback_query"]["id"]
    assert tg.callback_answers == [CallbackAnswer(id=query_id, text="Done", show_alert=True)]


def test_edit_message_text_and_its_not_modified_rule(tg: FakeTelegramServer) -> None:
    async def body(bot: Bot) -> None:
        message = await bot.send_message(CHAT, "Thinking…", reply_markup=keyboard("stop"))
        edited = await bot.edit_message_text(
            "Answer: 42", chat_id=CHAT, message_id=message.message_id
        )
        assert isinstance(edited, type(message)) and edited.text == "Answer: 42"
        assert edited.reply_markup is None and edited.edit_date is not None  # keyboard gone
        with pytest.raises(BadRequest, match="Message is not modified"):
            await bot.edit_message_text("Answer: 42", chat_id=CHAT, message_id=message.message_id)
        with pytest.raises(BadRequest, match="Message to edit not found"):
            await bot.edit_message_text("Hm", chat_id=CHAT, message_id=999)
        await bot.send_chat_action(CHAT, "typing")

    run(tg, body)
    assert [(m.text, m.edited) for m in tg.sent] == [("Thinking…", False), ("Answer: 42", True)]
    assert tg.chat_actions == [ChatAction(CHAT, "typing")]


def test_commands_are_stored_per_scope(tg: FakeTelegramServer) -> None:
    async def body(bot: Bot) -> None:
        assert await bot.set_my_commands([BotCommand("ask", "Ask Amelio")])
        assert [c.command for c in await bot.get_my_commands()] == ["ask"]
        with pytest.raises(BadRequest, match=r"(?i)bot_command_invalid"):
            await bot.set_my_commands([BotCommand("Ask", "Upper case is refused")])
        assert await bot.delete_my_commands()
        assert await bot.get_my_commands() == ()

    run(tg, body)


# -- webhooks --------------------------------------------------------------------------


def test_get_updates_conflicts_with_a_webhook(tg: FakeTelegramServer) -> None:
    async def body(bot: Bot) -> None:
        assert await bot.set_webhook("http://127.0.0.1:9/hook", secret_token="s3cret")
        assert (await bot.get_webhook_info()).url == "http://127.0.0.1:9/hook"
        with pytest.raises(Conflict, match="can't use getUpdates method while webhook is active"):
            await bot.get_updates()
        assert await bot.delete_webhook()
        assert await bot.get_updates() == ()

    run(tg, body)


def test_deliver_webhook_posts_the_update_with_the_secret(tg: FakeTelegramServer) -> None:
    received: list[tuple[str | None, Any]] = []

    async def hook(request: Request) -> Response:
        received.append(
            (request.headers.get("x-telegram-bot-api-secret-token"), await request.json())
        )
        return Response(status_code=200 if request.url.path == "/hook" else 500)

    app = Starlette(routes=[Route("/{name}", hook, methods=["POST"])])
    with ThreadedServer(app) as live:
        run(tg, lambda bot: bot.set_webhook(f"{live.url}/hook", secret_token="s3cret-token_1"))
        update = tg.user_message(CHAT, "hello")
        assert tg.pending_updates == [update]
        assert tg.deliver_webhook(update).status_code == 200
        assert received == [("s3cret-token_1", update)]
        assert tg.pending_updates == []  # a 2xx confirms it

        second = tg.user_message(CHAT, "again")
        assert tg.deliver_webhook(second, url=f"{live.url}/broken").status_code == 500
        info = run(tg, lambda bot: bot.get_webhook_info())
    assert info.pending_update_count == 1
    assert info.last_error_message == "Wrong response from the webhook: 500 Internal Server Error"


# -- the harness itself -------------------------------------------------------------------


def test_wait_for_message_wakes_on_send_and_explains_a_timeout(tg: FakeTelegramServer) -> None:
    with pytest.raises(BadRequest):
        run(tg, lambda bot: bot.send_message(7, "lost"))
    report = r"(?s)after 0\.1 s waiting for 1 message.*sendMessage: 400 Bad Request: chat not found"
    with pytest.raises(AssertionError, match=report):
        tg.wait_for_message(CHAT, timeout=0.1)
    sender = threading.Timer(0.2, run, (tg, lambda bot: bot.send_message(CHAT, "late")))
    sender.start()
    started = time.monotonic()
    [message] = tg.wait_for_message(CHAT, timeout=5)
    assert message.text == "late" and time.monotonic() - started < 3
    sender.join()


def test_stop_ends_a_pending_long_poll_promptly() -> None:
    fake = FakeTelegramServer().start()
    answers: list[httpx.Response | Exception] = []

    def poll() -> None:
        try:
            with raw_client() as client:
                answers.append(client.post(f"{fake.api_url}/getUpdates", data={"timeout": "30"}))
        except httpx.HTTPError as err:
            answers.append(err)

    thread = threading.Thread(target=poll)
    thread.start()
    fake.wait_for(lambda: fake.requests)
    started = time.monotonic()
    fake.stop()
    thread.join(5)
    assert time.monotonic() - started < 1.5 and not thread.is_alive()
    assert answers and not isinstance(answers[0], Exception)
    assert answers[0].json() == {"ok": True, "result": []}
