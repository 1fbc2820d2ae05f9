"""Notifiers over real loopback HTTP: signing, retries, failures recorded as data, plugins."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from amelio import __version__
from amelio.hookspecs import hookimpl
from amelio.improve.notifiers import (
    DeliveryResult,
    Notification,
    NotificationAction,
    NotifierType,
    WebhookNotifier,
    configured_notifiers,
    notifier_types,
    notify_all,
    verify_signature,
)
from amelio.plugins import get_plugin_manager
from amelio.testing import ThreadedServer
from amelio.workspace.config import Settings

SECRET = "s3cret"
NOTE = Notification(
    kind="improve.report",
    title="2 skills need work",
    text="**code-review** passes 40% of its evals.",
    payload={"run": 7, "day": date(2025, 1, 2), "skills": ["code-review", "weather"]},
    actions=(
        NotificationAction("Approve #12", proposal_id=12, action="approve"),
        NotificationAction("Reject #12", proposal_id=12, action="reject"),
        NotificationAction("Open report", url="https://amelio.example/runs/7"),
    ),
)


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]


@dataclass
class Receiver:
    """A webhook receiver that records each request and answers from a script."""

    requests: list[Received] = field(default_factory=list)
    script: deque[tuple[int, str | None]] = field(default_factory=deque)
    hang: float = 0.0

    def fail(self, status: int, times: int = 1, retry_after: str | None = None) -> None:
        self.script.extend([(status, retry_after)] * times)

    async def hook(self, request: Request) -> Response:
        self.requests.append(Received(await request.body(), dict(request.headers)))
        if self.hang:
            import asyncio

            await asyncio.sleep(self.hang)
        if self.script:
            status, retry_after = self.script.popleft()
            headers = {"retry-after": retry_after} if retry_after else {}
            return PlainTextResponse(f"scripted {status}", status_code=status, headers=headers)
        return JSONResponse({"received": True})


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    app = Starlette(routes=[Route("/hook", receiver.hook, methods=["POST"])])
    with ThreadedServer(app) as server:  # one server per module: stopping one costs ~0.15 s
        yield receiver, f"{server.url}/hook"


@pytest.fixture
def receiver(server: tuple[Receiver, str]) -> Receiver:
    receiver = server[0]
    receiver.requests.clear()
    receiver.script.clear()
    receiver.hang = 0.0
    return receiver


@pytest.fixture
def url(server: tuple[Receiver, str]) -> str:
    return server[1]


def webhook(url: str, **kwargs: Any) -> WebhookNotifier:
    return WebhookNotifier(url, SECRET, **{"backoff": 0.01, **kwargs})


def test_delivery_is_signed_and_verifiable(receiver: Receiver, url: str) -> None:
    settings = Settings(notify_webhook_url=url, notify_webhook_secret=SecretStr(SECRET))
    assert notify_all(settings, NOTE) == [DeliveryResult("webhook", True, 1, 200, None)]

    [got] = receiver.requests
    sent = json.loads(got.body)
    assert sent["kind"] == "improve.report" and sent["title"] == NOTE.title
    assert sent["text"] == NOTE.text
    assert sent["payload"] == {"run": 7, "day": "2025-01-02", "skills": ["code-review", "weather"]}
    assert sent["actions"][0] == {
        "label": "Approve #12",
        "url": None,
        "proposalId": 12,
        "action": "approve",
    }
    assert sent["actions"][2]["url"] == "https://amelio.example/runs/7"
    assert sent["sentAt"].endswith("Z")
    assert got.headers["content-type"] == "application/json"
    assert got.headers["user-agent"] == f"amelio/{__version__}"
    assert got.headers["x-amelio-delivery"]

    timestamp, signature = got.headers["x-amelio-timestamp"], got.headers["x-amelio-signature"]
    assert abs(int(timestamp) - time.time()) < 5
    assert verify_signature(got.body, timestamp, signature, SECRET)
    # The recipe in the docs, done by hand: HMAC-SHA256 of "<timestamp>.<raw body>".
    by_hand = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + got.body, hashlib.sha256)
    assert signature == f"sha256={by_hand.hexdigest()}"


def test_forged_or_stale_deliveries_are_rejected(receiver: Receiver, url: str) -> None:
    assert webhook(url).send(NOTE).ok
    [got] = receiver.requests
    body, timestamp = got.body, got.headers["x-amelio-timestamp"]
    signature = got.headers["x-amelio-signature"]
    sent = int(timestamp)

    assert verify_signature(body, timestamp, signature, SECRET, now=sent + 300)
    assert not verify_signature(body.replace(b"40%", b"90%"), timestamp, signature, SECRET)
    assert not verify_signature(body, timestamp, signature, "wrong secret")
    assert not verify_signature(body, str(sent + 1), signature, SECRET, now=sent)
    assert not verify_signature(body, timestamp, signature, SECRET, now=sent + 301)  # replay
    assert not verify_signature(body, timestamp, signature, SECRET, now=sent - 301)
    assert not verify_signature(body, timestamp, signature, SECRET, max_age_s=10, now=sent + 11)
    assert not verify_signature(body, "yesterday", signature, SECRET)
    assert not verify_signature(body, timestamp, "sha256=é" + signature[8:], SECRET)
    assert not verify_signature(body, timestamp, signature, "")


def test_no_secret_means_no_signature(receiver: Receiver, url: str) -> None:
    assert WebhookNotifier(url).send(NOTE).ok
    [got] = receiver.requests
    assert "x-amelio-signature" not in got.headers
    assert got.headers["x-amelio-timestamp"]


def test_5xx_is_retried_with_backoff_then_delivered(receiver: Receiver, url: str) -> None:
    receiver.fail(503, times=2)
    result = webhook(url).send(NOTE)
    assert result == DeliveryResult("webhook", True, 3, 200, None)
    assert len(receiver.requests) == 3
    # One delivery: the same body and id on every try, each try signed afresh.
    assert len({r.body for r in receiver.requests}) == 1
    assert len({r.headers["x-amelio-delivery"] for r in receiver.requests}) == 1
    for r in receiver.requests:
        assert verify_signature(
            r.body, r.headers["x-amelio-timestamp"], r.headers["x-amelio-signature"], SECRET
        )


def test_gives_up_after_the_last_attempt(receiver: Receiver, url: str) -> None:
    receiver.fail(500, times=5)
    result = webhook(url).send(NOTE)
    assert (result.ok, result.attempts, result.status) == (False, 3, 500)
    assert result.error == "HTTP 500: scripted 500"
    assert len(receiver.requests) == 3


def test_429_waits_for_retry_after_capped(receiver: Receiver, url: str) -> None:
    receiver.fail(429, retry_after="0.3")
    started = time.monotonic()
    result = webhook(url, backoff=0.001).send(NOTE)
    assert (result.ok, result.attempts) == (True, 2)
    assert time.monotonic() - started >= 0.3

    receiver.fail(429, retry_after="3600")
    started = time.monotonic()
    assert webhook(url, max_retry_after=0.05).send(NOTE).attempts == 2
    assert time.monotonic() - started < 1.0


def test_other_4xx_is_not_retried(receiver: Receiver, url: str) -> None:
    receiver.fail(400, times=3)
    result = webhook(url).send(NOTE)
    assert result == DeliveryResult("webhook", False, 1, 400, "HTTP 400: scripted 400")
    assert len(receiver.requests) == 1


def test_timeout_is_retried_and_reported(receiver: Receiver, url: str) -> None:
    receiver.hang = 0.3
    result = webhook(url, timeout=0.05, max_attempts=2).send(NOTE)
    assert (result.ok, result.attempts, result.status) == (False, 2, None)
    assert result.error == "timed out after 0.05 s"


def test_connection_refused_is_a_failed_result() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = webhook(f"http://127.0.0.1:{port}/hook").send(NOTE)
    assert (result.ok, result.attempts, result.status) == (False, 3, None)
    assert result.error is not None and result.error.startswith("could not connect")


def test_unconfigured_or_misconfigured_webhook() -> None:
    assert "webhook" in notifier_types()
    assert configured_notifiers(Settings()) == []
    assert notify_all(Settings(), NOTE) == []

    bad = Settings(notify_webhook_url="ftp://example.com/hook")
    assert configured_notifiers(bad) == []
    [result] = notify_all(bad, NOTE)
    assert (result.notifier, result.ok, result.attempts) == ("webhook", False, 0)
    assert "AMELIO_NOTIFY_WEBHOOK_URL" in (result.error or "")


@dataclass(frozen=True)
class Inbox:
    """A plugin's notifier: a frozen dataclass, which the protocol accepts."""

    name: str
    sent: list[Notification]

    def send(self, notification: Notification) -> DeliveryResult:
        if self.name == "broken":
            raise RuntimeError("chat API is down")
        self.sent.append(notification)
        return DeliveryResult(self.name, True, 1)


def test_plugin_notifiers_run_and_their_failures_are_recorded(receiver: Receiver, url: str) -> None:
    sent: list[Notification] = []

    class ChatPlugin:
        @hookimpl
        def register_notifiers(self, register: Any) -> None:
            register(NotifierType("inbox", lambda s: Inbox("inbox", sent), "test"))
            register(NotifierType("broken", lambda s: Inbox("broken", sent)))
            register(NotifierType("unset", lambda s: None))
            register("not a notifier type")

    class BrokenPlugin:
        @hookimpl
        def register_notifiers(self, register: Any) -> None:
            raise ImportError("missing dependency")

    pm = get_plugin_manager()
    plugins = [ChatPlugin(), BrokenPlugin()]
    for plugin in plugins:
        pm.register(plugin)
    try:
        settings = Settings(notify_webhook_url=url)
        assert [n.name for n in configured_notifiers(settings)] == ["webhook", "inbox", "broken"]
        results = notify_all(settings, NOTE)
    finally:
        for plugin in plugins:
            pm.unregister(plugin)

    assert results == [
        DeliveryResult("webhook", True, 1, 200, None),
        DeliveryResult("inbox", True, 1),
        DeliveryResult("broken", False, 1, None, "RuntimeError: chat API is down"),
    ]
    assert sent == [NOTE]
    assert len(receiver.requests) == 1
    assert set(notifier_types()) == {"webhook", "telegram"}
