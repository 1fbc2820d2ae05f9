"""Whether two learnings say the same thing, contradict each other, or neither.

Learnings are where self-improving assistants rot: near-duplicates fill the
prompt budget, and a later correction that silently overwrites an earlier one
is often wrong (docs/learnings.md cites the audits). So a new learning is
compared with the active ones of its skill before it is stored:

* **same**: a paraphrase. The search embedding model's cosine is at least
  ``same_cosine`` *and* the content words overlap at least ``same_lexical``
  (Jaccard), or the words alone overlap at least ``lexical_only``. Static
  embeddings put "always use X" and "never use X" close together, which is why
  the lexical check and the contradiction test come with it. Without an
  embedder, words alone decide.
* **contradicts**: on the same topic (cosine at least ``topic_cosine``, or word
  overlap at least ``topic_lexical``) and, by the heuristic below, saying the
  opposite. With an LLM configured the caller asks it instead
  (:func:`llm_relation`), and falls back to the heuristic when it cannot answer.
* **other**: anything else.

The contradiction heuristic, documented because it decides what waits for a
person when no LLM is configured:

1. *Polarity*: each rule's content words are split into what it prescribes and
   what it forbids. A word is forbidden when it follows a negation ("never",
   "don't", "avoid", "instead of", "rather than", "without", "not"…) up to the
   next punctuation mark. Two rules contradict when one prescribes a word the
   other forbids.
2. *Order*: two rules that order the same things ("X before Y", "after Y, X",
   "X, then Y") the other way round.
3. *Values*: numbers (number words read as digits) and literal values such as
   ``YYYY-MM-DD``: two rules contradict when each holds one the other lacks
   (port 8069 against port 8080), not when one merely adds an example.
4. *Opposites*: a small list of antonym pairs (start/end, tabs/spaces,
   singular/plural, utc/local…), one word of a pair in each rule and not both.

The thresholds' defaults were measured on ``benchmarks/learnings.py``'s fixture
(20 facts, paraphrases and contradictions written by hand): its table shows the
sweep, and docs/learnings.md the figures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from amelio.text import ENGLISH_STOPWORDS, fold, tokens

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = [
    "FAR",
    "Relation",
    "Thresholds",
    "content_words",
    "contradicts",
    "lexical",
    "llm_relation",
    "relate",
]

Relation = Literal["same", "contradicts", "other"]
#: A cosine under which two rules are taken to be about different things without
#: looking at their words (the store compares a new rule with thousands).
FAR = 0.25


@dataclass(frozen=True)
class Thresholds:
    """Where "same" and "on the same topic" start (see the module's docstring)."""

    same_cosine: float = 0.55
    same_lexical: float = 0.1
    lexical_only: float = 0.5
    topic_cosine: float = 0.5
    topic_lexical: float = 0.25


#: Words that say nothing about what a rule is about: function words, and the verbs
#: and adverbs every rule uses ("always use …").
_GENERIC = ENGLISH_STOPWORDS | {
    "always", "never", "use", "using", "used", "should", "must", "please", "do", "does",
    "don't", "dont", "doesn't", "not", "no", "avoid", "instead", "rather", "than",
    "without", "prefer", "make", "sure", "keep", "every", "each", "all", "our", "we",
    "you", "your", "when", "whenever", "only", "them", "it", "its", "they", "their",
    "this", "that", "these", "those", "can", "may", "de", "la", "le", "les",
    "des", "un", "une", "et", "pas", "ne", "jamais", "toujours", "utiliser",
}  # fmt: skip
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11",
    "twelve": "12", "fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "sixty": "60", "hundred": "100",
}  # fmt: skip
_OPPOSITES = (
    ("start", "end"), ("start", "finish"), ("start", "close"), ("start", "conclude"),
    ("begin", "end"), ("first", "last"), ("tabs", "spaces"), ("snake", "camelcase"),
    ("singular", "plural"), ("utc", "local"), ("formal", "informal"),
    ("imperative", "past"), ("enable", "disable"), ("allow", "forbid"),
    ("true", "false"), ("ascending", "descending"), ("sync", "async"),
    ("uppercase", "lowercase"), ("tu", "vous"), ("metric", "imperial"),
    ("public", "private"), ("minimum", "maximum"),
    ("increase", "decrease"), ("more", "fewer"), ("longer", "shorter"),
)  # fmt: skip
_NEGATION = re.compile(
    r"\b(?:never|not|no|don't|dont|do not|doesn't|does not|avoid|avoiding|stop|"
    r"instead of|rather than|without|over|n'?est pas|ne pas|jamais|évite[rz]?|sans|"
    r"au lieu de|plutôt que)\b",
    re.IGNORECASE,
)
#: Phrasings read as a plain negation first: "prefer X to Y" forbids Y, "keep X out
#: of Y" forbids X in Y, and "no X longer than N" is a limit, not a ban on X.
_REWRITES = tuple(
    (re.compile(pattern, re.IGNORECASE), replacement)
    for pattern, replacement in (
        (r"\b(prefer\w*\b[^.;:,!?]*?)\bto\b", r"\1 instead of"),
        (r"\bkeep\s+([^.;:,!?]+?)\s+out of\b", r"avoid \1 in"),
        (r"\bno\s+(\w+)\s+(?:longer|more|larger|bigger)\s+than\b", r"\1 at most"),
    )
)
_SCOPE_END = re.compile(r"[.;:!?,()\n]|\b(?:but|then|in|for|on|at|inside|when)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+")
_ZONES = frozenset({"utc", "gmt", "cet", "cest", "est", "pst"})
#: A literal value such as a format: letters joined by / : . _, or three or more parts
#: joined by hyphens (``yyyy-mm-dd``); "one-line" is a word, not a value.
_LITERAL = re.compile(r"[^\W\d_]+(?:(?:[/:._][^\W\d_]+)+|(?:-[^\W\d_]+){2,})")


def _stem(word: str) -> str:
    """A crude suffix strip so that "formatting", "formatted" and "format" meet."""
    for _ in range(2):  # "strings" → "string" → "str", as "string" → "str"
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):  # "rebase" meets "rebasing"
        word = word[:-1]
    return word


#: What scrubbing leaves of personal data (amelio.privacy.anonymize): not a topic.
_PLACEHOLDER = re.compile(r"\[(?:email|phone|card|iban|ip)\]")


def content_words(text: str) -> set[str]:
    """The words that say what a rule is about: no function words and no scrubbing
    placeholders, number words as digits."""
    text = _PLACEHOLDER.sub(" ", text)
    return {_NUMBER_WORDS.get(t, t) for t in tokens(text) if t not in _GENERIC}


def lexical(a: str, b: str) -> float:
    """Jaccard overlap of the two rules' stemmed content words (1.0 for two empty
    rules)."""
    wa, wb = {_stem(w) for w in content_words(a)}, {_stem(w) for w in content_words(b)}
    return len(wa & wb) / len(wa | wb) if wa or wb else 1.0


def _polarity(text: str) -> tuple[set[str], set[str]]:
    """(prescribed, forbidden) stemmed content words: forbidden from a negation to
    the next punctuation mark or preposition, prescribed everywhere else."""
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    forbidden: set[str] = set()
    prescribed: set[str] = set()
    position = 0
    for match in _NEGATION.finditer(text):
        if match.start() < position:
            continue
        prescribed |= content_words(text[position : match.start()])
        end = _SCOPE_END.search(text, match.end())
        stop = end.start() if end else len(text)
        forbidden |= content_words(text[match.end() : stop])
        position = stop
    prescribed |= content_words(text[position:])
    stem = {w: _stem(w) for w in prescribed | forbidden}
    told, banned = {stem[w] for w in prescribed}, {stem[w] for w in forbidden}
    # A word on both sides ("inherit views … rather than replacing the view") is
    # the rule's context, not what it prescribes or forbids.
    both = told & banned
    return told - both, banned - both


def _values(text: str) -> tuple[set[str], set[str]]:
    """(numbers, literals): numbers with number words read as digits ("9:00-18:00"
    is 9, 00 and 18), literals such as ``yyyy-mm-dd``."""
    folded = fold(text)
    numbers = set(_NUMBER.findall(folded))
    numbers |= {_NUMBER_WORDS[t] for t in tokens(text) if t in _NUMBER_WORDS}
    # "e.g." and "i.e." are not values; a time zone is one, named or by region.
    literals = {v for v in _LITERAL.findall(folded) if len(v) >= 5}
    literals |= {t for t in tokens(text) if t in _ZONES}
    return numbers, literals


_ORDER = re.compile(r"\b(before|after|prior to|then)\b", re.IGNORECASE)


def _order(text: str) -> tuple[set[str], set[str]] | None:
    """(what comes first, what comes next) for a rule that orders two things ("run
    X before Y", "after Y, X", "X, then Y"), or None."""
    found = _ORDER.search(text)
    if found is None:
        return None
    word = found.group(1).lower()
    head, tail = text[: found.start()], text[found.end() :]
    if not content_words(head) and "," in tail:  # "Before X, do Y" is "do Y before X"
        head, tail = tail.split(",", 1)[1], tail.split(",", 1)[0]
    left = {_stem(w) for w in content_words(head)}
    right = {_stem(w) for w in content_words(tail)}
    return (right, left) if word == "after" else (left, right)


def contradicts(a: str, b: str) -> bool:
    """The heuristic test (module docstring): polarity, order, values, opposites."""
    pa, fa = _polarity(a)
    pb, fb = _polarity(b)
    if ((pa & fb) or (pb & fa)) and not (fa & fb):
        return True
    oa, ob = _order(a), _order(b)
    if oa is not None and ob is not None:
        flipped = (oa[0] & ob[1]) - ob[0], (oa[1] & ob[0]) - ob[1]
        if all(flipped):
            return True
    for va, vb in zip(_values(a), _values(b), strict=True):
        if va - vb and vb - va:
            return True
    wa, wb = {_stem(w) for w in content_words(a)}, {_stem(w) for w in content_words(b)}
    return any(
        (x in wa and y in wb and y not in wa and x not in wb)
        or (y in wa and x in wb and x not in wa and y not in wb)
        for x, y in _STEMMED_OPPOSITES
    )


_STEMMED_OPPOSITES = tuple((_stem(x), _stem(y)) for x, y in _OPPOSITES)


def relate(
    new: str, old: str, cosine: float | None, thresholds: Thresholds = Thresholds()
) -> Relation:
    """How ``new`` relates to ``old``; ``cosine`` is their embeddings' similarity, or
    None when either has no embedding (words alone decide)."""
    words = lexical(new, old)
    topical = words >= thresholds.topic_lexical or (
        cosine is not None and cosine >= thresholds.topic_cosine
    )
    if not topical:
        return "other"
    if contradicts(new, old):
        return "contradicts"
    if words >= thresholds.lexical_only or (
        cosine is not None and cosine >= thresholds.same_cosine and words >= thresholds.same_lexical
    ):
        return "same"
    return "other"


_LLM_SYSTEM = (
    "You compare two rules an assistant was taught. Answer with one word: SAME if "
    "they say the same thing, CONTRADICTS if following one breaks the other, OTHER "
    "if they are about different things or can both be followed."
)


def llm_relation(ws: Workspace, new: str, old: str) -> Relation | None:
    """The configured LLM's reading of the pair, or None when it cannot say (no
    provider, an error, or an answer that is none of the three words)."""
    from amelio.errors import AmelioError
    from amelio.llm import LLMRequest, get_provider

    try:
        provider = get_provider(ws.settings, purpose="Comparing learnings")
        reply = provider.complete(
            LLMRequest.single(_LLM_SYSTEM, f"Rule A: {old}\nRule B: {new}", max_tokens=5)
        ).text
    except AmelioError:
        return None
    word = (reply.strip().split() or [""])[0].strip(".:!\"'").upper()
    return {"SAME": "same", "CONTRADICTS": "contradicts", "OTHER": "other"}.get(word)  # type: ignore[return-value]


def best_match(
    new: str,
    others: Sequence[str],
    cosines: Sequence[float | None],
    thresholds: Thresholds = Thresholds(),
) -> tuple[Relation, int | None]:
    """The strongest relation of ``new`` to one of ``others``: a contradiction of a
    topical neighbour first (it must reach a person), then the closest paraphrase."""
    same: tuple[float, int] | None = None
    for i, (old, cos) in enumerate(zip(others, cosines, strict=True)):
        relation = relate(new, old, cos, thresholds)
        if relation == "contradicts":
            return "contradicts", i
        if relation == "same":
            score = cos if cos is not None else lexical(new, old)
            if same is None or score > same[0]:
                same = (score, i)
    return ("same", same[1]) if same else ("other", None)
