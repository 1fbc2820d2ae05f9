"""Text normalization shared by routing, learnings and (later) search.

One definition of "the same words" for the whole product: casefolded, accents
folded (``déployer`` == ``deployer``), split into word tokens on Unicode word
boundaries. Matching on token sequences is what makes ``review`` miss
``preview`` and lets multi-word triggers such as ``code review`` match as
phrases.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Iterator
from functools import lru_cache

__all__ = ["BREAK", "fold", "normalize", "tokens"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_WORD_OR_BREAK = re.compile(r"[^\W_]+(?:['’][^\W_]+)*|[.,;:!?()\[\]{}\"\n]+")
#: Stands between words that punctuation separates, so a phrase cannot span it.
BREAK = "|"
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'"})


def fold(text: str) -> str:
    """Casefold and strip accents: the comparison form of a text."""
    if text.isascii():  # nothing to decompose or strip: the common case, and 10× faster
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).translate(_APOSTROPHES)


def tokens(text: str, *, breaks: bool = False) -> tuple[str, ...]:
    """The folded word tokens of ``text`` (letters and digits; apostrophes inside words).

    With ``breaks``, punctuation between words becomes a :data:`BREAK` token, so
    ``code, review`` is not the phrase ``code review`` (``pull-request`` still is
    ``pull request``).
    """
    if not breaks:
        return tuple(_WORD.findall(fold(text)))
    return tuple(BREAK if not t[0].isalnum() else t for t in _WORD_OR_BREAK.findall(fold(text)))


@lru_cache(maxsize=4096)
def normalize(text: str) -> str:
    """Folded tokens joined by single spaces: equal for texts that differ only in
    case, accents, punctuation or spacing."""
    return " ".join(tokens(text))


def json_lines(lines: Iterable[str], name: str) -> Iterator[tuple[int, str, object]]:
    """Each non-blank line of a JSON-lines file parsed, with its number and where it
    is (``NAME line N``) for the caller's own errors; a line that is not JSON is an
    :class:`~amelio.errors.InvalidInput` naming its line."""
    from amelio.errors import InvalidInput

    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            yield number, where, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: not valid JSON ({exc.msg}).") from exc
