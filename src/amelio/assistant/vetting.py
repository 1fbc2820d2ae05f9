"""What a learning must not carry: secrets, prompt injections, personal data.

A learning goes into every later prompt of its skill, so one poisoned correction
("ignore previous instructions…", a ``curl … | sh``, an API key pasted into a
Fix It) would be repeated to the model for good. :func:`vet` names what a text
holds; a learning with a secret or an injection is never active by itself,
however it arrives (feedback, the API, the CLI, MCP, Telegram, learnings.md): it
waits as a candidate for a person, and ``amelio learnings audit`` lists it.

The patterns are deliberately narrow, so that ordinary corrections ("use an API
key from the vault", "never pipe curl into sh") pass: a secret must look like one
(a known key prefix, a token of the right shape, or a password *with its value*),
and an instruction must address the model ("ignore … previous instructions") or
hide itself (HTML comments, invisible styling, zero-width or bidirectional control
characters, a Markdown image whose address carries data). Personal data reuses
the scrubbing patterns (:mod:`amelio.privacy.anonymize`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from amelio.privacy.anonymize import scrub

__all__ = ["Flag", "FlagKind", "blocking", "vet"]

FlagKind = Literal["secret", "injection", "pii"]


@dataclass(frozen=True)
class Flag:
    kind: FlagKind
    label: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "label": self.label}

    def __str__(self) -> str:
        return f"{self.kind}: {self.label}"


_SECRETS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(pattern))
    for label, pattern in (
        ("an OpenAI or Anthropic API key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
        ("a Stripe key", r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        ("an AWS access key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
        ("a JSON web token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        ("a private key", r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----"),
        ("a bearer token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*"),
        ("credentials in a URL", r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@"),
        (
            "a password with its value",
            r"(?i)\b(?:password|passwd|pwd|passphrase|mot de passe|secret|api[ _-]?key|"
            r"access[ _-]?token)\b(?:\s+(?:de|du|of|for)(?:\s+\w+){1,3})?"
            r"\s*(?:[:=]|\bis\b|\best\b)\s*[\"']?(?=[^\s\"']*\d)(?=[^\s\"']*[A-Za-z])[^\s\"']{6,}",
        ),
    )
)
_INJECTIONS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(pattern, re.IGNORECASE | re.DOTALL))
    for label, pattern in (
        (
            "an instruction to ignore earlier instructions",
            r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?"
            r"\b(?:previous|prior|above|earlier|all|your|any|the|system)\b[^.\n]{0,30}?"
            r"\b(?:instructions?|rules?|prompts?|guidelines|directives|restrictions)\b"
            r"|\b(?:ignore[rz]?|oublie[rz]?)\b[^.\n]{0,30}?\b(?:instructions?|consignes?|règles)\b",
        ),
        ("a new identity for the model", r"\byou are now\b|\bact as (?:an? )?(?:DAN|jailbroken)\b"),
        (
            "a request to reveal the system prompt",
            r"\b(?:reveal|print|show|repeat|leak)\b[^.\n]{0,30}\bsystem prompt\b",
        ),
        (
            "a piped shell download",
            r"\b(?:curl|wget|iwr|invoke-webrequest)\b[^|\n]{0,300}\|\s*(?:sudo\s+)?"
            r"(?:ba|z|da|k)?sh\b|\b(?:curl|wget)\b[^|\n]{0,300}\|\s*(?:python3?|iex|perl)\b|"
            r"\b(?:ba)?sh\s+<\(\s*(?:curl|wget)\b",
        ),
        ("an HTML comment", r"<!--.*?-->"),
        (
            "hidden HTML",
            r"<(?:script|iframe|object|embed|style)\b|style\s*=\s*[\"'][^\"']*"
            r"(?:display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0)|<\w+[^>]*\shidden\b",
        ),
        ("a Markdown comment", r"^\s*\[//\]\s*:\s*#"),
        (
            "a Markdown image whose address carries data",
            r"!\[[^\]]*\]\(\s*https?://[^)\s]*\?[^)]*=",
        ),
        (
            "invisible characters",
            "[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]|[\U000e0000-\U000e007f]",
        ),
    )
)
_PII_LABELS = {
    "[email]": "an e-mail address",
    "[phone]": "a phone number",
    "[card]": "a card number",
    "[iban]": "an IBAN",
    "[ip]": "an IP address",
}


def vet(text: str) -> list[Flag]:
    """Every kind of secret, injection and personal data ``text`` holds (one flag per
    pattern that matched, in a fixed order)."""
    flags = [Flag("secret", label) for label, rx in _SECRETS if rx.search(text)]
    flags += [Flag("injection", label) for label, rx in _INJECTIONS if rx.search(text)]
    scrubbed = scrub(text)
    if scrubbed != text:
        flags += [
            Flag("pii", label)
            for placeholder, label in _PII_LABELS.items()
            if scrubbed.count(placeholder) > text.count(placeholder)
        ]
    return flags


def blocking(flags: list[Flag]) -> list[Flag]:
    """The flags that keep a learning from becoming active by itself: secrets and
    injections (personal data is scrubbed or kept by ``pii_scrub``, and audited)."""
    return [f for f in flags if f.kind != "pii"]
