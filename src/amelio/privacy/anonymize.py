"""Pseudonyms that rotate daily, and free text without contact or payment details.

**Hashes.** A raw session or user id becomes ``HMAC-SHA256(salt_of_day, id)``,
written as the seed's ``base32_8ch`` (the first 8 base32 characters: 40 bits,
plenty to tell sessions apart within a day, too few to be a stable global
identifier). The salt of a day is itself an HMAC of the workspace secret and the
UTC date of the event (both by :mod:`amelio.privacy.signing`), so every server
sharing the secret agrees on it without coordination, yet the same user on two
days gets two unrelated hashes: the store can count behaviour within a day but
cannot follow a person across days.
The day is the event's own (not the arrival's), so re-sending a file the next
day yields the same hashes and idempotent ingestion stays idempotent.

**Scrubbing.** People type their e-mail, phone number, IBAN or card number into
comment boxes, and paste IP addresses from error pages. Before free text is
stored each is replaced by a placeholder (``[email]``, ``[ip]``, ``[iban]``,
``[card]``, ``[phone]``). Card numbers must pass the Luhn check so that ordinary
long numbers survive; an IBAN is hidden when its mod-97 check passes or,
mistyped, when it still has an IBAN's shape (country, check digits, ten or more
digits); phone numbers have no checksum, so any run of 9 to 15 digits written
like one is removed: losing an order number is better than storing a phone
number. IP addresses are found by a loose pattern and confirmed by
:mod:`ipaddress`, so ``1.2.3`` (a version), ``14:30:15`` (a time), ``256.1.1.1``
or a MAC address survive; an IPv6 address must hold a digit (every global one
starts with 2 or 3), so identifiers such as ``Cafe::Add`` survive too. Four
dotted numbers up to 255 (``1.2.3.4``) are an address whatever they meant.

Nearly all text has neither a digit nor an ``@``: :func:`scrub` returns it
after one character scan, so scrubbing is a small part of ingestion's cost.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from datetime import date, timedelta
from functools import lru_cache

from amelio.privacy.signing import Signer

__all__ = ["SaltedHasher", "day_from_index", "scrub", "scrub_emails"]

_EPOCH = date(1970, 1, 1)
_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
#: Two base32 characters for each 10-bit value: 40 bits are four look-ups.
_BASE32_PAIRS = tuple(a + b for a in _BASE32 for b in _BASE32)


@lru_cache(maxsize=64)
def day_from_index(days_since_epoch: int) -> date:
    """The UTC date of an event: ``days_since_epoch`` is ``eventTimeMs // 86_400_000``
    (remembered: a batch's events fall on a day or two)."""
    return _EPOCH + timedelta(days=days_since_epoch)


class SaltedHasher:
    """Hashes identifiers under the daily salt derived from ``key``."""

    def __init__(self, key: bytes) -> None:
        self._signer = Signer(key)
        self._salted = lru_cache(maxsize=64)(self._derive)

    def _derive(self, day: date) -> Signer:
        return Signer(self._signer.digest(day.isoformat(), "feedback-salt"))

    def hash(self, value: str, day: date) -> str:
        """``value``'s pseudonym on ``day``: 8 base32 characters."""
        top = int.from_bytes(self._salted(day).digest(value, "pseudonym")[:5])
        # base32 of the first 40 bits, as base64.b32encode(digest[:5]) writes it, faster
        pairs = _BASE32_PAIRS
        return (
            pairs[top >> 30]
            + pairs[(top >> 20) & 1023]
            + pairs[(top >> 10) & 1023]
            + pairs[top & 1023]
        )


# -- scrubbing ---------------------------------------------------------------------

# The local part takes RFC 5322's characters but / = ?: in a URL path or query
# string (a routeId) they separate the address from what surrounds it.
_EMAIL = re.compile(r"[\w.!#$%&'*+^`{|}~-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){11,30}\b", re.IGNORECASE)
_CARD = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")
_PHONE = re.compile(r"(?<![\w+(])(?:\+|00)?\(?\d(?:[ .()/-]{0,2}\d){7,16}(?!\w)")
# Candidates only: ipaddress decides. Not inside a longer dotted or coloned run
# ("v1.2.3.4", "1.2.3.4.5", "a:b:c:d:e:f:1:2:3"); a sentence's full stop may follow.
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?!\.?\w)")
_IPV6 = re.compile(
    r"(?<![\w:.%])(?=[0-9a-f:]*\d)[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}"
    r"(?:\.\d{1,3}){0,3}(?:%[\w.-]{1,32})?(?![\w:])",
    re.IGNORECASE,
)
_QUICK = re.compile(r"[@\d]")


_SEP = re.compile(r"[ -]")


def _iban_ok(candidate: str) -> bool:
    text = _SEP.sub("", candidate).upper()
    if not 15 <= len(text) <= 34 or not text[2:4].isdigit():
        return False
    digits = "".join(str(int(c, 36)) for c in text[4:] + text[:4])
    return int(digits) % 97 == 1


def _iban_like(candidate: str) -> bool:
    """IBAN-shaped with a wrong checksum (a typo): still an account number to hide."""
    text = _SEP.sub("", candidate)
    return 15 <= len(text) <= 34 and text[-1].isdigit() and sum(c.isdigit() for c in text) >= 10


def _card_ok(candidate: str) -> bool:
    digits = [int(c) for c in candidate if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _phone_ok(candidate: str) -> bool:
    return 9 <= sum(c.isdigit() for c in candidate) <= 15


def _longest_valid(label: str, *checks: Callable[[str], bool]) -> Callable[[re.Match[str]], str]:
    """Replace the longest prefix of a match, cut at a separator, that passes a check
    (tried in order): a greedy pattern may have swallowed the next word
    ("FR76 … 189 MERCI")."""

    def replace(match: re.Match[str]) -> str:
        text = match.group()
        ends = [len(text), *(m.start() for m in reversed(list(_SEP.finditer(text))))]
        for check in checks:
            for end in ends:
                if check(text[:end]):
                    return label + text[end:]
        return text

    return replace


_IBAN_SUB = _longest_valid("[iban]", _iban_ok, _iban_like)
_CARD_SUB = _longest_valid("[card]", _card_ok)


def _ip_sub(match: re.Match[str]) -> str:
    """``[ip]`` for a real address; a colon that ends the candidate may be the
    sentence's ("unreachable from 2001:db8::1: timeout")."""
    text = match.group()
    ends = (
        (len(text), len(text) - 1)
        if text.endswith(":") and not text.endswith("::")
        else (len(text),)
    )
    for end in ends:
        try:
            ipaddress.ip_address(text[:end])
        except ValueError:
            continue
        return "[ip]" + text[end:]
    return text


def scrub_emails(text: str) -> str:
    """``text`` with only its e-mail addresses replaced: for identifiers (a document
    id) where a long number is more likely a key than a phone number."""
    return _EMAIL.sub("[email]", text) if "@" in text else text


def scrub(text: str) -> str:
    """``text`` with e-mail and IP addresses, IBANs, card and phone numbers replaced."""
    if not _QUICK.search(text):  # most comments have neither a digit nor an @
        return text
    if "@" in text:
        text = _EMAIL.sub("[email]", text)
    # Addresses before phone numbers: 192.168.100.200 is also 12 digits and dots.
    if ":" in text:
        text = _IPV6.sub(_ip_sub, text)
    if "." in text:
        text = _IPV4.sub(_ip_sub, text)
    text = _IBAN.sub(_IBAN_SUB, text)
    text = _CARD.sub(_CARD_SUB, text)
    return _PHONE.sub(lambda m: "[phone]" if _phone_ok(m.group()) else m.group(), text)
