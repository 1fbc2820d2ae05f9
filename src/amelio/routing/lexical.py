"""The lexical parts the router's scorers and the learned index share: the seed's
trigger and keyword matching, and BM25 over skill metadata.

Skills and messages go through the same steps: :func:`amelio.text.tokens` for the
seed's whole words and phrases, then the ``router`` analyzer
(:data:`amelio.text.ROUTER`, which says why it drops what it drops) for BM25.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence

from amelio.skills.model import SkillSpec
from amelio.text import ROUTER, tokens

__all__ = [
    "KEYWORD_WEIGHT",
    "TRIGGER_WEIGHT",
    "Bm25",
    "ScoreFn",
    "keyword_scorer",
    "skill_terms",
    "skill_text",
]

TRIGGER_WEIGHT = 2.0
KEYWORD_WEIGHT = 1.0

#: A scorer's index: message tokens (with ``amelio.text.BREAK`` where punctuation
#: separates words) -> {skill index: (score, matched terms)}.
ScoreFn = Callable[[tuple[str, ...]], dict[int, tuple[float, list[str]]]]


def _terms(spec: SkillSpec) -> Iterable[tuple[tuple[str, ...], float, str]]:
    for term in spec.triggers:
        yield tokens(term), TRIGGER_WEIGHT, term
    for term in spec.keywords:
        yield tokens(term), KEYWORD_WEIGHT, term


def keyword_scorer(skills: Sequence[SkillSpec]) -> ScoreFn:
    """Index every trigger and keyword by its first token; a message is scored by
    looking up each of its tokens and comparing the phrase that starts there."""
    by_first: dict[str, list[tuple[tuple[str, ...], int, float, str]]] = defaultdict(list)
    for i, spec in enumerate(skills):
        seen: set[tuple[tuple[str, ...], float]] = set()
        for toks, weight, term in _terms(spec):
            if toks and (toks, weight) not in seen:
                seen.add((toks, weight))
                by_first[toks[0]].append((toks, i, weight, term))
    index = dict(by_first)

    def score(message: tuple[str, ...]) -> dict[int, tuple[float, list[str]]]:
        found: dict[int, tuple[float, list[str]]] = {}
        counted: set[tuple[int, tuple[str, ...], float]] = set()
        for pos, tok in enumerate(message):
            for toks, i, weight, term in index.get(tok, ()):
                if (len(toks) == 1 or message[pos : pos + len(toks)] == toks) and (
                    i,
                    toks,
                    weight,
                ) not in counted:
                    counted.add((i, toks, weight))
                    total, matched = found.get(i, (0.0, []))
                    matched.append(term)
                    found[i] = (total + weight, matched)
        return found

    return score


def skill_text(spec: SkillSpec) -> str:
    """A skill's routing metadata as one text: name (hyphens as spaces), description,
    triggers and keywords. What its metadata vector is made of, and what an outside
    baseline indexes for it."""
    return " ".join([spec.name.replace("-", " "), spec.description, *spec.triggers, *spec.keywords])


def skill_terms(spec: SkillSpec) -> list[str]:
    """The BM25 terms of a skill's metadata (the router analyzer's, field by field)."""
    return ROUTER.terms(
        [
            *tokens(spec.name.replace("-", " ")),
            *tokens(spec.description),
            *(t for term in spec.triggers for t in tokens(term)),
            *(t for term in spec.keywords for t in tokens(term)),
        ]
    )


class Bm25:
    """Okapi BM25 (Lucene's idf) over one document per skill, each term's weight per
    skill precomputed, so a message costs one dictionary lookup per distinct term.

    Each document's term counts are kept, so that :meth:`score_without` can score a
    document without one of its parts (the learned router's left-out examples)."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.counts = [Counter(d) for d in docs]
        self.lengths = [len(d) for d in docs]
        n = len(docs)
        self.avgdl = (sum(self.lengths) / n) if n else 0.0
        df: Counter[str] = Counter()
        for c in self.counts:
            df.update(c.keys())
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        #: The idf of a term no skill has: the rarest possible.
        self.unknown = math.log(1 + (n + 0.5) / 0.5)
        postings: dict[str, list[tuple[int, float]]] = {}
        for i, c in enumerate(self.counts):
            norm = self._norm(self.lengths[i])
            for t, f in c.items():
                postings.setdefault(t, []).append((i, self.idf[t] * f * (k1 + 1) / (f + norm)))
        self.postings = postings

    def _norm(self, length: int) -> float:
        return self.k1 * (1 - self.b + self.b * length / self.avgdl) if self.avgdl else self.k1

    def ceiling(self, terms: Iterable[str]) -> float:
        """The most any skill could score: every term matched at its idf (a term no
        skill has at the rarest idf)."""
        return sum(self.idf.get(t, self.unknown) for t in terms) * (self.k1 + 1)

    def score(self, terms: Iterable[str]) -> dict[int, tuple[float, list[str]]]:
        """Each matching skill's score for the distinct ``terms``, and the terms matched."""
        found: dict[int, tuple[float, list[str]]] = {}
        for t in terms:
            for i, w in self.postings.get(t, ()):
                total, matched = found.get(i, (0.0, []))
                matched.append(t)
                found[i] = (total + w, matched)
        return found

    def score_without(self, i: int, terms: Iterable[str], removed: Counter[str]) -> float:
        """Document ``i``'s score for ``terms`` with ``removed``'s counts taken out."""
        counts = self.counts[i]
        norm = self._norm(self.lengths[i] - sum(removed.values()))
        total = 0.0
        for t in terms:
            f = counts.get(t, 0) - removed.get(t, 0)
            if f > 0:
                total += self.idf[t] * f * (self.k1 + 1) / (f + norm)
        return total
