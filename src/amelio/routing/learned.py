"""The learning router: skill metadata, examples of real use and meaning in one score.

The metadata-only scorers read what a skill's author wrote. Every answer a user
kept (👍, evals passed, no correction) is also a labelled example of the skill that
served it, and an author can list ``examples:`` in SKILL.md; this scorer learns
from both (:mod:`amelio.routing.examples` collects them). A message's score for a
skill is the sum of

* the seed's points (+2 per trigger, +1 per keyword found), as ``keywords``;
* :data:`LEXICAL_WEIGHT` × BM25 over the skill's metadata *and examples*, as a
  share of the best the message could score (in [0, 1], as ``hybrid``);
* :data:`SEMANTIC_WEIGHT` × the cosine between the message and the skill's
  metadata, and :data:`EXAMPLES_WEIGHT` × the cosine between the message and the
  mean of the skill's examples, with the static embeddings ``amelio[semantic]``
  ships (an embedding is a token-vector average: ~0.1 ms a message on a CPU).
  Without the extra, or with ``router_embedding_model = ""``, the lexical parts alone;
* :data:`ODDS_WEIGHT` × the examples' log-odds (:class:`LogOdds`): which of the
  message's words tell this skill's examples from the others', once a project has
  :data:`MIN_CALIBRATION` examples (numpy, which ``amelio[semantic]`` brings).

The first weights were picked on CLINC150 (``benchmarks/router_accuracy.py``) from a
plateau: every setting within one unit of them routes within half a point of the
best, with 5, 10 or 20 examples a skill. :data:`ODDS_WEIGHT` was chosen on three
intent data sets at once (CLINC150 and the two that ``benchmarks/intent_data.py``
builds), never on one; docs/router.md has the figures.

Out-of-scope messages are rejected by a threshold learned from the examples: each
sampled example is routed as if it were new (its own contribution to its skill's
BM25 counts, mean vector and word counts taken out) and the threshold is the score under which
:data:`REJECT_RATE` of the correctly routed examples fall. So about that share of
in-scope messages is given up to reject what fits no skill. A project with fewer
than :data:`MIN_CALIBRATION` examples uses :data:`COLD_MIN_SCORE`; the setting
``router_min_score`` overrides both.

Building is a pass over token counts and cached vectors: an example's terms and
vector are computed once per process, so adding one example re-indexes in
milliseconds, and the threshold is re-learned only when the examples grew or
shrank by a tenth (:data:`RECALIBRATE_AT`).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amelio.embeddings import embed_matrix
from amelio.routing.lexical import Bm25, keyword_scorer, skill_terms, skill_text
from amelio.text import BREAK, ROUTER, tokens

if TYPE_CHECKING:
    import numpy as np

    from amelio.embeddings import Embedder
    from amelio.skills.model import SkillSpec

__all__ = [
    "COLD_MIN_SCORE",
    "EXAMPLES_WEIGHT",
    "LEXICAL_WEIGHT",
    "ODDS_ALPHA",
    "ODDS_WEIGHT",
    "REJECT_RATE",
    "SEMANTIC_WEIGHT",
    "Calibration",
    "LearnedIndex",
    "LogOdds",
    "TrainingData",
    "known_vectors",
    "remember_vectors",
]

LEXICAL_WEIGHT = 4.0
SEMANTIC_WEIGHT = 3.0
EXAMPLES_WEIGHT = 8.0
#: The weight of the examples' log-odds (:class:`LogOdds`), and its smoothing.
ODDS_WEIGHT = 2.0
ODDS_ALPHA = 0.5
#: The share of correctly routed examples the learned threshold gives up.
REJECT_RATE = 0.015
#: Examples routed to learn the threshold (a deterministic sample of them).
CALIBRATION_SAMPLE = 1000
#: The threshold is learned again once the examples grew or shrank by this share.
RECALIBRATE_AT = 0.1
#: Below this many correctly routed examples the threshold is not learned.
MIN_CALIBRATION = 20
#: The threshold without examples: with embeddings, and lexical only. Both reject
#: less than the learned one would (on CLINC150 they give up under 1 point of top-1).
COLD_MIN_SCORE = 1.5
COLD_MIN_SCORE_LEXICAL = 1.0
#: How many of the best-scoring skills a message's scores keep (the router shows 5).
_CANDIDATES = 50

try:  # numpy comes with amelio[semantic]; without it routing is lexical and needs none
    import numpy as _np
except ImportError:  # pragma: no cover - the dev install has it
    _np = None  # type: ignore[assignment]


@dataclass(frozen=True)
class TrainingData:
    """What a learning scorer learns from beside the skills themselves.

    ``examples[i]`` are messages that skill ``i`` served well (SKILL.md ``examples:``
    and kept answers); ``embedder`` is None for lexical routing."""

    examples: Sequence[Sequence[str]] = ()
    embedder: Embedder | None = None
    #: A fixed out-of-scope threshold (the ``router_min_score`` setting), else learned.
    min_score: float | None = None
    #: The threshold learned last time for the same skills: kept while the examples
    #: stay within a tenth of the count it was learned from (:data:`RECALIBRATE_AT`).
    previous: Calibration | None = None


@dataclass(frozen=True)
class Calibration:
    """Where a router's out-of-scope threshold came from, for `amelio route --json`."""

    threshold: float
    source: str  # "examples", "default" or "setting"
    examples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": round(self.threshold, 4),
            "source": self.source,
            "examples": self.examples,
        }


# -- per-text work, done once per process --------------------------------------------------

_cache_lock = threading.Lock()
_terms_cache: OrderedDict[str, tuple[tuple[str, ...], tuple[str, ...]]] = OrderedDict()
_vector_cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
#: Texts (examples, skills) whose terms and vector are kept: ~1 KB a vector.
_CACHE_SIZE = 20_000


def _analyzed(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A text's router tokens (with breaks) and its BM25 terms, cached."""
    with _cache_lock:
        found = _terms_cache.get(text)
    if found is None:
        toks = tokens(text, breaks=True)
        found = (toks, tuple(ROUTER.terms(toks)))
        with _cache_lock:
            _terms_cache[text] = found
            if len(_terms_cache) > _CACHE_SIZE:
                _terms_cache.popitem(last=False)
    return found


def known_vectors(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of ``texts``; only the ones this process has not seen are embedded
    (what the index uses, and what a routing snapshot saves)."""
    import numpy as np

    model = embedder.model
    with _cache_lock:
        missing = list(dict.fromkeys(t for t in texts if (model, t) not in _vector_cache))
    if missing:
        remember_vectors(model, missing, embed_matrix(embedder, missing))
    with _cache_lock:
        found = [_vector_cache.get((model, t)) for t in texts]
    present = [v for v in found if v is not None]
    if len(present) < len(found):  # evicted meanwhile by a huge batch: embed directly
        return embed_matrix(embedder, texts)  # type: ignore[no-any-return]
    return np.stack(present) if present else np.zeros((0, 0), dtype=np.float32)


def remember_vectors(model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
    """Take ``vectors`` (one row per text) as ``model``'s vectors of ``texts``, so an
    index built from a snapshot embeds only the message it routes."""
    with _cache_lock:
        for text, vector in zip(texts, vectors, strict=True):
            _vector_cache[model, text] = vector
        while len(_vector_cache) > _CACHE_SIZE:
            _vector_cache.popitem(last=False)


class LogOdds:
    """Which words tell one skill's examples from the others': multinomial naive Bayes'
    log-count ratio, averaged over the message's known words.

    BM25 and the examples' mean vector say what a skill's examples are like; neither
    says which words *separate* skills whose examples share most of theirs ("put milk
    on the shopping list" and "remove milk from the shopping list"). For a word ``t``
    and skill ``i`` the evidence is ``log p(t | i) - log p(t | not i)``, word counts
    smoothed by :data:`ODDS_ALPHA`; a message's is the mean over its words that some
    example used. Negative evidence is the point (a skill whose examples never say
    "remove" is pushed down), so it would be unfair to a skill with no example at
    all: such a skill is given the best evidence any skill has, never pushed down
    for what it was not shown. ``without`` takes one example out of the counts, for
    the threshold's leave-one-out (:meth:`LearnedIndex._left_out`).

    Added to the score with :data:`ODDS_WEIGHT` once a project has
    :data:`MIN_CALIBRATION` examples; it lifts warm top-1 on all three intent data
    sets of ``benchmarks/router_accuracy.py`` (docs/router.md).
    """

    def __init__(self, examples: Sequence[Sequence[tuple[str, ...]]]) -> None:
        import numpy as np

        n = len(examples)
        per_term: dict[str, dict[int, int]] = {}
        totals = np.zeros(n, dtype=np.float64)
        for i, own in enumerate(examples):
            for words in own:
                for word in words:
                    counts = per_term.setdefault(word, {})
                    counts[i] = counts.get(i, 0) + 1
                totals[i] += len(words)
        self._postings = {
            t: (
                np.fromiter(c, dtype=np.intp, count=len(c)),
                np.fromiter(c.values(), dtype=np.float64, count=len(c)),
            )
            for t, c in per_term.items()
        }
        self._term_totals = {t: float(c.sum()) for t, (_, c) in self._postings.items()}
        self._totals = totals
        self._all = float(totals.sum())
        self._smoothing = ODDS_ALPHA * len(per_term)
        self._has = totals > 0
        # What a message's evidence is made of, computed once: per word, its value for
        # the skills whose examples never use it, and the difference for those that do;
        # per skill, the size prior. Routing a message only adds them up.
        self._words = self._all_words()
        self._prior = self._size_prior(totals, self._all, self._smoothing)

    def _all_words(self) -> dict[str, tuple[float, np.ndarray]]:
        """:meth:`_word` for every word, in a few array operations (one per word would
        cost more than the rest of building the index)."""
        import numpy as np

        if not self._postings:
            return {}
        words = list(self._postings)
        counts = np.concatenate([self._postings[w][1] for w in words])
        sizes = np.fromiter(
            (len(self._postings[w][1]) for w in words), dtype=np.intp, count=len(words)
        )
        totals = np.fromiter(
            (self._term_totals[w] for w in words), dtype=np.float64, count=len(words)
        )
        absent = np.log(ODDS_ALPHA) - np.log(totals + ODDS_ALPHA)
        outside = np.repeat(totals, sizes) - counts
        delta = (
            np.log(counts + ODDS_ALPHA) - np.log(outside + ODDS_ALPHA) - np.repeat(absent, sizes)
        )
        return dict(
            zip(
                words,
                zip(absent.tolist(), np.split(delta, np.cumsum(sizes)[:-1]), strict=True),
                strict=True,
            )
        )

    @staticmethod
    def _word(word: str, counts: np.ndarray, total: float) -> tuple[float, np.ndarray]:
        import numpy as np

        absent = float(np.log(ODDS_ALPHA) - np.log(total + ODDS_ALPHA))
        return absent, np.log(counts + ODDS_ALPHA) - np.log(total - counts + ODDS_ALPHA) - absent

    @staticmethod
    def _size_prior(totals: np.ndarray, everything: float, smoothing: float) -> np.ndarray:
        import numpy as np

        return np.log(everything - totals + smoothing) - np.log(totals + smoothing)

    def scores(
        self, words: Sequence[str], without: tuple[int, Counter[str]] | None = None
    ) -> np.ndarray | None:
        """Each skill's evidence for a message of ``words`` (None when no example used
        any of them); ``without`` = (skill, an example's word counts) scores as if that
        example had never been given."""
        import numpy as np

        if without is None:
            known = [w for w in words if w in self._words]
            parts = [(self._postings[w][0], *self._words[w]) for w in known]
            prior, has = self._prior, self._has
        else:
            own, removed = without
            totals = self._totals.copy()
            totals[own] -= sum(removed.values())
            has = totals > 0
            # Words only that example used leave the vocabulary with it.
            smoothing = self._smoothing - ODDS_ALPHA * sum(
                1 for w, c in removed.items() if self._term_totals.get(w) == c
            )
            prior = self._size_prior(totals, self._all - sum(removed.values()), smoothing)
            known = [w for w in words if self._term_totals.get(w, 0) - removed[w] > 0]
            parts = []
            for word in known:
                skills, counts = self._postings[word]
                if removed[word]:
                    counts = counts.copy()
                    counts[skills == own] -= removed[word]
                parts.append(
                    (skills, *self._word(word, counts, self._term_totals[word] - removed[word]))
                )
        if not known or not has.any():
            return None
        out = np.full(len(prior), sum(absent for _, absent, _ in parts), dtype=np.float64)
        for skills, _, delta in parts:
            out[skills] += delta
        out /= len(known)
        out += prior
        if not has.all():
            out[~has] = out[has].max()
        return out


def _with_odds(
    found: dict[int, tuple[float, list[str]]], odds: np.ndarray | None
) -> dict[int, tuple[float, list[str]]]:
    """Lexical scores with the weighted log-odds added: every skill has evidence, so
    every skill gets a score (the matched terms stay the lexical ones)."""
    if odds is None:
        return found
    merged = {}
    for i, evidence in enumerate(odds.tolist()):
        score, matched = found.get(i, (0.0, []))
        merged[i] = (score + ODDS_WEIGHT * evidence, matched)
    return merged


def _words(toks: Sequence[str]) -> tuple[str, ...]:
    """A text's router tokens without the punctuation breaks: the log-odds' words
    (stopwords kept: "on" and "off" can be all that tells two skills apart)."""
    return tuple(t for t in toks if t != BREAK)


# -- the index ------------------------------------------------------------------------------


class LearnedIndex:
    """Skills, their examples and (optionally) vectors, indexed to score messages."""

    def __init__(self, skills: Sequence[SkillSpec], data: TrainingData) -> None:
        n = len(skills)
        examples = [
            list(dict.fromkeys(data.examples[i])) if i < len(data.examples) else []
            for i in range(n)
        ]
        self._keywords = keyword_scorer(skills)
        docs: list[list[str]] = []
        for spec, own in zip(skills, examples, strict=True):
            doc = skill_terms(spec)
            for text in own:
                doc.extend(_analyzed(text)[1])
            docs.append(doc)
        self._bm25 = Bm25(docs)
        self.examples = sum(len(e) for e in examples)
        self._odds = (
            LogOdds([[_words(_analyzed(t)[0]) for t in own] for own in examples])
            if _np is not None and self.examples >= MIN_CALIBRATION
            else None
        )
        self.semantic = data.embedder is not None
        self._embedder = data.embedder
        if data.embedder is not None:
            import numpy as np

            self._meta = (
                known_vectors(data.embedder, [skill_text(s) for s in skills])
                if n
                else np.zeros((0, 0), dtype=np.float32)
            )
            flat = [t for own in examples for t in own]
            vectors = known_vectors(data.embedder, flat) if flat else None
            dim = self._meta.shape[1] if n else 0
            self._sums = np.zeros((n, dim), dtype=np.float32)
            self._counts = np.zeros(n, dtype=np.float32)
            start = 0
            for i, own in enumerate(examples):
                if own and vectors is not None:
                    self._sums[i] = vectors[start : start + len(own)].sum(axis=0)
                    self._counts[i] = len(own)
                    start += len(own)
            norms = np.linalg.norm(self._sums, axis=1, keepdims=True)
            self._centroids = np.divide(
                self._sums, norms, out=np.zeros_like(self._sums), where=norms > 0
            )
            # The BM25 postings as arrays, to score every skill at once.
            self._arrays = {
                t: (
                    np.fromiter((i for i, _ in p), dtype=np.intp, count=len(p)),
                    np.fromiter((w for _, w in p), dtype=np.float32, count=len(p)),
                )
                for t, p in self._bm25.postings.items()
            }
            # One matrix, one product per message: metadata and examples side by side.
            self._matrix = np.concatenate([self._meta, self._centroids], axis=0)
        previous = data.previous
        if data.min_score is not None:
            self.calibration = Calibration(data.min_score, "setting", self.examples)
        elif (
            previous is not None
            and previous.source == "examples"
            and abs(self.examples - previous.examples) < RECALIBRATE_AT * previous.examples
        ):
            self.calibration = previous
        else:
            self.calibration = self._calibrate(examples)

    @property
    def min_score(self) -> float:
        return self.calibration.threshold

    def _dense(self, vector: np.ndarray) -> np.ndarray:
        n = len(self._bm25.lengths)
        both = self._matrix @ vector
        return SEMANTIC_WEIGHT * both[:n] + EXAMPLES_WEIGHT * both[n:]  # type: ignore[no-any-return]

    def _lexical(
        self,
        toks: tuple[str, ...],
        terms: Sequence[str],
        points: dict[int, tuple[float, list[str]]] | None = None,
    ) -> tuple[dict[int, tuple[float, list[str]]], float]:
        """The seed's points (``points``, when the caller has them) plus the weighted
        BM25 share per skill, and the ceiling."""
        found = dict(self._keywords(toks) if points is None else points)
        ceiling = self._bm25.ceiling(terms)
        if ceiling > 0:
            for i, (s, matched) in self._bm25.score(terms).items():
                seed, seen = found.get(i, (0.0, []))
                found[i] = (seed + LEXICAL_WEIGHT * s / ceiling, seen or matched)
        return found, ceiling

    def score(
        self, message: str, toks: tuple[str, ...], limit: int = _CANDIDATES
    ) -> dict[int, tuple[float, list[str]]]:
        """The ``limit`` best candidate skills' scores and the terms each matched."""
        terms = list(dict.fromkeys(ROUTER.terms(toks)))
        odds = self._odds.scores(_words(toks)) if self._odds is not None else None
        if self._embedder is None or not len(self._bm25.lengths):
            return _with_odds(self._lexical(toks, terms)[0], odds)
        # A message is embedded anew each time: only skills' and examples' vectors are
        # cached (a message cache would grow with traffic and flatter a benchmark).
        vector = embed_matrix(self._embedder, [message])[0]
        dense = self._dense(vector)
        ceiling = self._bm25.ceiling(terms)
        if ceiling > 0:
            share = LEXICAL_WEIGHT / ceiling
            for t in terms:
                found_t = self._arrays.get(t)
                if found_t is not None:
                    dense[found_t[0]] += share * found_t[1]
        points = self._keywords(toks)
        for i, (s, _) in points.items():
            dense[i] += s
        if odds is not None:
            dense += (ODDS_WEIGHT * odds).astype(_np.float32)
        keep = min(max(limit, 1), len(dense))
        top = (
            _np.argpartition(-dense, keep - 1)[:keep]
            if keep < len(dense)
            else _np.arange(len(dense))
        )
        counts = self._bm25.counts
        return {
            i: (s, points[i][1] if i in points else [t for t in terms if t in counts[i]])
            for i, s in zip(top.tolist(), dense[top].tolist(), strict=True)
        }

    # -- the out-of-scope threshold --------------------------------------------------

    def _calibrate(self, examples: Sequence[Sequence[str]]) -> Calibration:
        cold = COLD_MIN_SCORE if self.semantic else COLD_MIN_SCORE_LEXICAL
        flat = [(i, text) for i, own in enumerate(examples) for text in own]
        if len(flat) < MIN_CALIBRATION:
            return Calibration(cold, "default", len(flat))
        sample = flat[:: max(1, len(flat) // CALIBRATION_SAMPLE)]
        kept = [own for own, best_other in self._left_out(sample) if own > best_other]
        if len(kept) < MIN_CALIBRATION:
            return Calibration(cold, "default", len(flat))
        kept.sort()
        return Calibration(kept[int(REJECT_RATE * len(kept))], "examples", len(flat))

    def _left_out(self, sample: Sequence[tuple[int, str]]) -> list[tuple[float, float]]:
        """Each example ``(i, text)`` routed as a new message: its own skill's score
        with the example taken out of that skill, and the best other skill's score."""
        n = len(self._bm25.lengths)
        dense: Any = None
        if self._embedder is not None:
            import numpy as np

            vectors = known_vectors(self._embedder, [text for _, text in sample])
            both = vectors @ self._matrix.T  # (examples, 2n): metadata, then centroids
            dense = SEMANTIC_WEIGHT * both[:, :n] + EXAMPLES_WEIGHT * both[:, n:]
            sum_norms = np.linalg.norm(self._sums, axis=1)
        out: list[tuple[float, float]] = []
        for k, (i, text) in enumerate(sample):
            toks, all_terms = _analyzed(text)
            terms = list(dict.fromkeys(all_terms))
            points = self._keywords(toks)
            found, ceiling = self._lexical(toks, terms, points)
            own = points.get(i, (0.0, []))[0]
            if ceiling > 0:
                own += (
                    LEXICAL_WEIGHT
                    * self._bm25.score_without(i, terms, Counter(all_terms))
                    / ceiling
                )
            words = _words(toks)
            odds = (
                self._odds.scores(words, without=(i, Counter(words)))
                if self._odds is not None
                else None
            )
            if odds is not None:
                own += ODDS_WEIGHT * float(odds[i])
            if dense is None:
                out.append(
                    (
                        own,
                        max(
                            (s for j, (s, _) in _with_odds(found, odds).items() if j != i),
                            default=0.0,
                        ),
                    )
                )
                continue
            # The mean of the skill's other examples: |s - v|² = |s|² - 2 s·v + 1 for a
            # unit v, and s·v is the centroid's cosine times |s|.
            if self._counts[i] > 1:
                dot = float(both[k, n + i]) * float(sum_norms[i])
                rest = float(sum_norms[i]) ** 2 - 2 * dot + 1
                if rest > 1e-9:
                    own += EXAMPLES_WEIGHT * (dot - 1) / rest**0.5
            own += SEMANTIC_WEIGHT * float(both[k, i])
            row = dense[k].copy()
            for j, (s, _) in found.items():
                row[j] += s
            if odds is not None:
                row += ODDS_WEIGHT * odds
            row[i] = -np.inf
            out.append((own, float(row.max()) if n > 1 else 0.0))
        return out
