"""Notifiers: how a report of the nightly ``amelio improve`` job reaches people.

A :class:`Notification` is one value (title, Markdown text, the JSON report and the
actions a person may take, such as approving a proposal); every configured
:class:`Notifier` gets the same value and renders it its own way: the built-in
``webhook`` POSTs it as signed JSON, a chat notifier could show the actions as
buttons. Notifiers register through the ``register_notifiers`` hook, as a plugin's
would, and ``build(settings)`` returns None when its settings are absent, so only
what the user configured runs.

:func:`notify_all` never raises: the job that calls it has already done its work,
so a notifier that is down, misconfigured or buggy becomes a failed
:class:`DeliveryResult` that the job records, and the other notifiers still run.

Verifying a webhook delivery (receiver side): read the raw body bytes before parsing
them, then call :func:`verify_signature` with the body and the
``X-Amelio-Timestamp`` and ``X-Amelio-Signature`` headers, or compute
``"sha256=" + hex(HMAC-SHA256(secret, timestamp + "." + body))`` yourself and compare
it in constant time. Reject timestamps more than a few minutes from your clock: the
signature covers the timestamp, so an old delivery cannot be replayed with a new
one. Retries of one delivery share ``X-Amelio-Delivery``; de-duplicate on it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from amelio._version import __version__
from amelio.errors import ConfigError
from amelio.hookspecs import hookimpl
from amelio.plugins import collect

# httpx is imported when a webhook is sent, and the settings model for type checkers
# only: the plugin manager imports this module whenever it is built.
if TYPE_CHECKING:
    import httpx

    from amelio.workspace.config import Settings

__all__ = [
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "DeliveryResult",
    "Notification",
    "NotificationAction",
    "Notifier",
    "NotifierType",
    "WebhookNotifier",
    "configured_notifiers",
    "notifier_types",
    "notify_all",
    "verify_signature",
]

log = logging.getLogger(__name__)

#: When a webhook delivery was signed, in Unix seconds; the signature covers it.
TIMESTAMP_HEADER = "X-Amelio-Timestamp"
#: ``sha256=<hex>``: the HMAC of the timestamp and the body (:func:`verify_signature`).
SIGNATURE_HEADER = "X-Amelio-Signature"
#: One id per delivery, the same on its retries: receivers de-duplicate on it.
DELIVERY_HEADER = "X-Amelio-Delivery"


@dataclass(frozen=True)
class NotificationAction:
    """Something the reader can do: open ``url``, or send ``action`` (``approve``,
    ``reject``) about ``proposal_id``. A chat notifier renders these as buttons; the
    webhook lists them, so the receiver decides how to offer them."""

    label: str
    url: str | None = None
    proposal_id: int | None = None
    action: str = "open"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "url": self.url,
            "proposalId": self.proposal_id,
            "action": self.action,
        }


@dataclass(frozen=True)
class Notification:
    """One message for every notifier. ``kind`` (say ``improve.report``) lets a
    receiver route it; ``text`` is Markdown for people, ``payload`` JSON for programs."""

    kind: str
    title: str
    text: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    actions: tuple[NotificationAction, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "text": self.text,
            "payload": dict(self.payload),
            "actions": [a.to_dict() for a in self.actions],
        }


@dataclass(frozen=True)
class DeliveryResult:
    """How one notifier fared: ``attempts`` tries, the last HTTP ``status`` (None
    without a response, or for notifiers that are not HTTP) and what went wrong."""

    notifier: str
    ok: bool
    attempts: int
    status: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "notifier": self.notifier,
            "ok": self.ok,
            "attempts": self.attempts,
            "status": self.status,
            "error": self.error,
        }


class Notifier(Protocol):
    """What every notifier offers. ``send`` should report failures in its result;
    :func:`notify_all` records any exception it raises anyway."""

    @property
    def name(self) -> str: ...  # read-only, so a frozen dataclass satisfies it too

    def send(self, notification: Notification) -> DeliveryResult: ...


@dataclass(frozen=True)
class NotifierType:
    """A registered notifier: ``build`` makes one from the settings, returns None when
    its settings are not set, and raises :class:`ConfigError` when they are wrong."""

    name: str
    build: Callable[[Settings], Notifier | None]
    description: str = ""


# -- the registry -------------------------------------------------------------------


def notifier_types() -> dict[str, NotifierType]:
    """Every registered notifier type by name, built-ins first: a plugin that raises is
    skipped (:func:`amelio.plugins.collect`), so it cannot silence the others."""
    return collect("register_notifiers", NotifierType)


def _build_all(settings: Settings) -> list[Notifier | DeliveryResult]:
    """The configured notifiers, with a failed result standing in for each that
    could not be built (so the report says which one is misconfigured)."""
    built: list[Notifier | DeliveryResult] = []
    for name, notifier_type in notifier_types().items():
        try:
            notifier = notifier_type.build(settings)
        except Exception as err:
            log.warning("notifier %s is misconfigured: %s", name, err)
            built.append(DeliveryResult(name, False, 0, None, f"not configured: {err}"))
        else:
            if notifier is not None:
                built.append(notifier)
    return built


def configured_notifiers(settings: Settings) -> list[Notifier]:
    """The notifiers whose settings are set; misconfigured ones are logged and left out."""
    return [n for n in _build_all(settings) if not isinstance(n, DeliveryResult)]


def notify_all(settings: Settings, notification: Notification) -> list[DeliveryResult]:
    """Send ``notification`` through every configured notifier; never raises."""
    results: list[DeliveryResult] = []
    for notifier in _build_all(settings):
        if isinstance(notifier, DeliveryResult):
            results.append(notifier)
            continue
        name = str(getattr(notifier, "name", type(notifier).__name__))
        try:
            result = notifier.send(notification)
        except Exception as err:
            log.exception("notifier %s failed", name)
            result = DeliveryResult(name, False, 1, None, f"{type(err).__name__}: {err}")
        results.append(result)
    return results


# -- signatures ---------------------------------------------------------------------


def _signature(body: bytes, timestamp: str, secret: str) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={digest.hexdigest()}"


def verify_signature(
    body: bytes,
    timestamp: str,
    signature: str,
    secret: str,
    *,
    max_age_s: int = 300,
    now: float | None = None,
) -> bool:
    """Whether a delivery is authentic and fresh: ``signature`` (``sha256=<hex>``)
    matches ``body`` and ``timestamp`` under ``secret``, and the timestamp is within
    ``max_age_s`` of ``now`` either way, so a captured delivery cannot be replayed
    later. Compares in constant time; an empty secret verifies nothing."""
    if not secret:
        return False
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent) > max_age_s:
        return False
    expected = _signature(body, timestamp, secret).encode()
    return hmac.compare_digest(expected, signature.strip().encode("utf-8", "replace"))


# -- the webhook --------------------------------------------------------------------


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds, or None when absent or an HTTP date (rare for webhooks)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


class WebhookNotifier:
    """POSTs the notification as JSON to ``url``, signed when ``secret`` is set.

    Tries up to ``max_attempts`` times, waiting ``backoff * 2**n`` seconds (or the
    server's Retry-After, capped at ``max_retry_after``) after connection errors,
    timeouts, 429 and 5xx; other answers are final, since repeating a request the
    receiver rejected would only be rejected again. Each try is signed afresh, so a
    late retry still passes the receiver's timestamp check.
    """

    name = "webhook"

    def __init__(
        self,
        url: str,
        secret: str = "",
        *,
        timeout: float = 10.0,
        max_attempts: int = 3,
        backoff: float = 1.0,
        max_retry_after: float = 60.0,
    ) -> None:
        self.url, self.secret, self.timeout = url, secret, timeout
        self.max_attempts, self.backoff = max(1, max_attempts), backoff
        self.max_retry_after = max_retry_after

    def body(self, notification: Notification) -> bytes:
        """The JSON sent; values JSON cannot hold (dates, paths) are sent as strings."""
        sent_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        document = {**notification.to_dict(), "sentAt": sent_at}
        return json.dumps(document, ensure_ascii=False, default=str).encode()

    def send(self, notification: Notification) -> DeliveryResult:
        import uuid

        import httpx

        body = self.body(notification)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"amelio/{__version__}",
            DELIVERY_HEADER: uuid.uuid4().hex,
        }
        status: int | None = None
        error = "not sent"
        attempt = 0
        with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
            for attempt in range(1, self.max_attempts + 1):
                timestamp = str(int(time.time()))
                headers[TIMESTAMP_HEADER] = timestamp
                if self.secret:
                    headers[SIGNATURE_HEADER] = _signature(body, timestamp, self.secret)
                delay = self.backoff * 2 ** (attempt - 1)
                try:
                    response = client.post(self.url, content=body, headers=headers)
                except httpx.TimeoutException:
                    status, error = None, f"timed out after {self.timeout:g} s"
                except (httpx.UnsupportedProtocol, httpx.InvalidURL) as err:
                    return DeliveryResult(self.name, False, attempt, None, f"bad URL: {err}")
                except httpx.TransportError as err:
                    status, error = None, f"could not connect: {err}"
                else:
                    status = response.status_code
                    if response.is_success:
                        return DeliveryResult(self.name, True, attempt, status)
                    error = f"HTTP {status}: {response.text[:200]}".rstrip(": ")
                    if status != 429 and status < 500:
                        break
                    if (wait := _retry_after(response)) is not None:
                        delay = min(wait, self.max_retry_after)
                if attempt < self.max_attempts:
                    time.sleep(delay)
        log.warning("webhook delivery failed after %d attempt(s): %s", attempt, error)
        return DeliveryResult(self.name, False, attempt, status, error)


def _secret_text(value: Any) -> str:
    """A setting's text, whether a plain str or a pydantic SecretStr."""
    reveal = getattr(value, "get_secret_value", None)
    return str(reveal() if callable(reveal) else value or "")


def _build_webhook(settings: Settings) -> WebhookNotifier | None:
    url = str(getattr(settings, "notify_webhook_url", "") or "").strip()
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError("AMELIO_NOTIFY_WEBHOOK_URL must start with http:// or https://.")
    return WebhookNotifier(url, _secret_text(getattr(settings, "notify_webhook_secret", "")))


@hookimpl
def register_notifiers(register: Callable[[NotifierType], None]) -> None:
    register(
        NotifierType(
            "webhook",
            _build_webhook,
            "POST each report as signed JSON to AMELIO_NOTIFY_WEBHOOK_URL",
        )
    )
