"""Pseudonyms that rotate daily, and free text without contact or payment details.

**Hashes.** A raw session or user id becomes ``HMAC-SHA256(salt_of_day, id)``,
written as the seed's ``base32_8ch`` (the first 8 base32 characters: 40 bits,
plenty to tell sessions apart within a day, too few to be a stable global
identifier). The salt of a day is itself an HMAC of the workspace secret and the
UTC date of the event, so every server sharing the secret agrees on it without
coordination, yet the same user on two days gets two unrelated hashes: the
store can count behaviour within a day but cannot follow a person across days.
The day is the event's own (not the arrival's), so re-sending a file the next
day yields the same hashes and idempotent ingestion stays idempotent.

**Scrubbing.** People type their e-mail, phone number, IBAN or card number into
comment boxes. Before free text is stored each is replaced by a placeholder
(``[email]``, ``[phone]``, ``[iban]``, ``[card]``). Card numbers must pass the
Luhn check so that ordinary long numbers survive; an IBAN is hidden when its
mod-97 check passes or, mistyped, when it still has an IBAN's shape (country,
check digits, ten or more digits); phone numbers have no checksum, so any run
of 9 to 15 digits written like one is removed: losing an order number is
better than storing a phone number.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from datetime import date, timedelta
from functools import lru_cache

__all__ = ["SaltedHasher", "day_from_index", "scrub"]

_PURPOSE = b"amelio.feedback.salt.v1:"
_EPOCH = date(1970, 1, 1)
_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def day_from_index(days_since_epoch: int) -> date:
    """The UTC date of an event: ``days_since_epoch`` is ``eventTimeMs // 86_400_000``."""
    return _EPOCH + timedelta(days=days_since_epoch)


class SaltedHasher:
    """Hashes identifiers under the daily salt derived from ``key``."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._salt = lru_cache(maxsize=64)(self._derive)

    def _derive(self, day: date) -> bytes:
        return hmac.digest(self._key, _PURPOSE + day.isoformat().encode("ascii"), "sha256")

    def hash(self, value: str, day: date) -> str:
        """``value``'s pseudonym on ``day``: 8 base32 characters."""
        top = int.from_bytes(hmac.digest(self._salt(day), value.encode("utf-8"), "sha256")[:5])
        # base32 of the first 40 bits, as base64.b32encode(digest[:5]) writes it, faster
        return "".join(_BASE32[(top >> shift) & 31] for shift in range(35, -1, -5))


# -- scrubbing ---------------------------------------------------------------------

_EMAIL = re.compile(r"[\w.!#$%&'*+/=?^`{|}~-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){11,30}\b", re.IGNORECASE)
_CARD = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")
_PHONE = re.compile(r"(?<![\w+(])(?:\+|00)?\(?\d(?:[ .()/-]{0,2}\d){7,16}(?!\w)")
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
    return (15 <= len(text) <= 34 and text[-1].isdigit()
            and sum(c.isdigit() for c in text) >= 10)


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


def _longest_valid(label: str, *checks: Callable[[str], bool]
                   ) -> Callable[[re.Match[str]], str]:
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


def scrub(text: str) -> str:
    """``text`` with e-mail addresses, IBANs, card and phone numbers replaced."""
    if not _QUICK.search(text):  # most comments have neither a digit nor an @
        return text
    if "@" in text:
        text = _EMAIL.sub("[email]", text)
    text = _IBAN.sub(_IBAN_SUB, text)
    text = _CARD.sub(_CARD_SUB, text)
    return _PHONE.sub(lambda m: "[phone]" if _phone_ok(m.group()) else m.group(), text)
