"""Tokens, and the named analyzers: how each index turns text into terms.

One definition of "the same words" for the whole product (:func:`tokens`):
casefolded, accents folded (``déployer`` == ``deployer``), split into word tokens
on Unicode word boundaries, an apostrophe inside a word kept (``what's``,
``l'api``; the typographic ``’`` read as ``'``). Matching on token sequences is
what makes ``review`` miss ``preview`` and lets multi-word triggers such as
``code review`` match as phrases: the router's seed scoring reads these tokens
as they are (with :data:`BREAK` where punctuation separates words), and so do
the learned router's log-odds, which keep every word ("on" and "off" can be all
that tells two skills apart).

Each index then takes a few steps more, its :class:`Analyzer`, named in
:data:`ANALYZERS`:

=============  ===================================  ==========  ===============  ==========
analyzer       index                                apostrophe  dropped          plurals
=============  ===================================  ==========  ===============  ==========
``router``     BM25 over skill metadata, examples   splits      1-letter words,  kept
                                                                Lucene's 33
                                                                English
                                                                stopwords
``search``     tantivy's index and queries; FTS5's  splits      nothing          kept
               queries
``knowledge``  notebook collections (then read by   keeps       nothing          folded
               the search engine, which splits)
=============  ===================================  ==========  ===============  ==========

Why they differ:

* **router**: BM25 takes a word's rarity from the skills alone, one short
  document each. A function word that one skill's name happens to hold
  (``what-can-i-ask-you``) then looks as telling as the rarest keyword and pulls
  every message that uses it to that skill; so does the ``s`` of ``what's`` once
  split off. Splitting at apostrophes (``what's`` finds ``what``, ``l'API``
  finds ``api``), leaving out one-letter words and Lucene's English stopwords
  took BM25's top-1 on CLINC150 from 66.1 % to 72.8 %, bm25s's own figure
  (``benchmarks/router_accuracy.py --ablation``, docs/router.md).
* **search**: the two embedded engines must hold the same terms. FTS5 indexes
  with SQLite's own ``unicode61`` tokenizer (``remove_diacritics 2``), which
  Python's ``sqlite3`` cannot replace; this analyzer splits words as it does (at
  apostrophes, every word kept, no stemming), tantivy indexes its output as it
  is (a ``whitespace`` field), and both engines are queried with its terms, so
  they match the same documents (docs/search.md). They part only where
  casefolding or NFKD changes more than an accent: FTS5 keeps ``straße``, ``ﬁ``
  and ``½`` as written, and a query for them, folded here, misses them there.
  Nothing is dropped: over a corpus of thousands of documents, a word most of
  them hold gets an idf near zero, so BM25 learns the function words by itself.
* **knowledge**: questions and the sources they are about often differ only in
  number (``refunds``, ``refund``), so plurals fold (Harman's S-stemmer,
  :func:`s_stem`, which folds nothing else and is light enough for French too).
  The fold happens here, before the text reaches a notebook's collection,
  because neither search engine stems; the engine then reads these terms with
  the ``search`` analyzer, which is where their apostrophes are split.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

__all__ = [
    "ANALYZERS",
    "BREAK",
    "ENGLISH_STOPWORDS",
    "KNOWLEDGE",
    "ROUTER",
    "SEARCH",
    "Analyzer",
    "fold",
    "normalize",
    "s_stem",
    "tokens",
]

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


#: Lucene's English stopwords: the list Lucene's EnglishAnalyzer and bm25s drop.
ENGLISH_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    }
)


def s_stem(word: str) -> str:
    """Harman's S-stemmer: ``-ies`` becomes ``-y`` (not in ``-eies``/``-aies``), a
    final ``-s`` goes (not in ``-us``/``-ss``); words of 3 letters or fewer stay.
    Light on purpose: it folds regular plurals, English or French, and touches no
    other ending, so few words collide (``news`` does become ``new``)."""
    if len(word) > 3 and word.endswith("s"):
        if word.endswith("ies") and not word.endswith(("eies", "aies")):
            return word[:-3] + "y"
        if not word.endswith(("us", "ss")):
            return word[:-1]
    return word


@dataclass(frozen=True)
class Analyzer:
    """The steps one index takes after :func:`tokens`, in this order: split at
    apostrophes, leave out words shorter than ``min_length`` and ``stopwords``,
    ``stem``, cut to ``max_length``. The same analyzer reads the documents and the
    queries of its index, so that they meet on the same terms."""

    name: str
    #: ``what's`` -> ``what``, ``s``; ``l'api`` -> ``l``, ``api``.
    split_apostrophes: bool = False
    #: Shorter words are left out (:data:`BREAK`, one character, goes at 2).
    min_length: int = 1
    stopwords: frozenset[str] = frozenset()
    stem: Callable[[str], str] | None = None
    #: A longer term is cut to this many characters.
    max_length: int | None = None

    def terms(self, toks: Iterable[str]) -> list[str]:
        """The terms of tokens already made by :func:`tokens` (for a caller that
        also reads the tokens, as the router does), in order, repeats kept."""
        split, shortest, stopwords = self.split_apostrophes, self.min_length, self.stopwords
        kept: list[str] = []
        for tok in toks:
            if split and "'" in tok:
                kept.extend(t for t in tok.split("'") if len(t) >= shortest and t not in stopwords)
            elif len(tok) >= shortest and tok not in stopwords:
                kept.append(tok)
        if self.stem is not None:
            kept = [self.stem(t) for t in kept]
        if self.max_length is not None:
            kept = [t[: self.max_length] for t in kept]
        return kept

    def analyze(self, text: str) -> list[str]:
        """The terms of ``text``, in order, repeats kept: what a document is indexed as."""
        return self.terms(tokens(text))

    def query_terms(self, text: str) -> list[str]:
        """The distinct terms of ``text``, in order: what a query looks up."""
        return list(dict.fromkeys(self.analyze(text)))


#: The router's BM25 (over skill metadata and examples).
ROUTER = Analyzer("router", split_apostrophes=True, min_length=2, stopwords=ENGLISH_STOPWORDS)
#: The embedded search engines' index (tantivy) and queries (tantivy and FTS5).
SEARCH = Analyzer("search", split_apostrophes=True)
#: Knowledge notebooks' collections; 64 characters was the width of the column their
#: terms were first stored in, and index and questions are cut alike.
KNOWLEDGE = Analyzer("knowledge", stem=s_stem, max_length=64)
#: Every named analyzer, by name.
ANALYZERS: Mapping[str, Analyzer] = MappingProxyType(
    {a.name: a for a in (ROUTER, SEARCH, KNOWLEDGE)}
)


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
