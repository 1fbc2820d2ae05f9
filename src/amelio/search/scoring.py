"""Scoring: what a ranked result is, the feedback score, and score normalization.

The pieces every ranking backend shares: :class:`RankedDoc` (one result with its
first-phase and feedback scores), :class:`FeedbackScorer` (a document's feedback
score for a query, from its signals and the fitted click model) and
:func:`min_max_normalized` (how ``hybrid`` puts a lexical and a semantic scale on
one footing). The embedded :class:`~amelio.search.service.Searcher` and the
Vespa backend (:mod:`amelio.search.engines.vespa`, which pushes the same feedback scores
to Vespa) both import them from here, so neither has to import the other.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import NamedTuple

from amelio.search.clickmodel import Propensities, utility
from amelio.search.counts import SignalRow
from amelio.search.documents import Hit

__all__ = [
    "FEEDBACK_BOUND",
    "FEW_ACTORS_RANKS",
    "FeedbackScorer",
    "RankedDoc",
    "hold_back",
    "min_max_normalized",
]

#: The feedback score's range. Wide enough that a document always satisfying
#: (rate 10× the average: log 10 ≈ 2.3) outranks one satisfying 3× as often
#: (≈ 1.1): a bound of 1 made them tie, which cost about 3.5 points of NDCG@10 in
#: an offline replica of the Cranfield simulation. One session still moves it a
#: bounded amount: the prior and the per-session cap limit what a few clicks can do.
FEEDBACK_BOUND = 3.0
#: How many ranks feedback may move a document that fewer than
#: ``search_min_actors`` people interacted with: enough for a few honest clicks to
#: start lifting a good deep result (and so get it seen and judged by more people),
#: too few for one person to put it on top.
FEW_ACTORS_RANKS = 2


class RankedDoc(NamedTuple):
    """One ranked result: ``score`` is ``first_phase + beta · feedback``, the three
    kept apart so a response can show what the engine and the feedback each gave.

    The provenance fields say where the result came from, for ``explain``: its raw
    BM25 score and rank among the candidates, its cosine, and the rank the first
    phase alone gave it. They ride along in the ranking cache, so explaining a
    cached ranking reads no candidates again (None: unknown, as for a ranking
    engine that keeps its candidates to itself)."""

    doc_id: str
    score: float
    first_phase: float
    feedback: float
    lexical: float | None = None
    lexical_rank: int | None = None
    semantic: float | None = None
    first_rank: int | None = None


class FeedbackScorer:
    """A document's feedback score for a query, in ±:data:`FEEDBACK_BOUND`; 0 without
    evidence.

    ``pbm`` (the default) divides the satisfied clicks by the *examinations* the
    document had — impressions at each rank times that rank's fitted propensity
    — and shrinks the ratio towards the average with ``prior`` pseudo-examinations,
    so three lucky clicks cannot swing a document; the score is the log ratio to
    the average. A document shown often without clicks sinks, which lets unseen
    candidates come up and be judged. Pins and up-votes add, hides and down-votes
    subtract.

    The ratio is a Beta posterior's mean; :meth:`score` with an ``rng`` draws from
    that posterior instead (Thompson sampling), so exploration follows the
    uncertainty: wide for a document nobody examined, narrow once it was.

    A document whose clicks, dwells, bounces, pins, hides or votes come from fewer
    than ``min_actors`` distinct people (``row.actors``) is :meth:`held` : the
    ranking lets its feedback move it :data:`FEW_ACTORS_RANKS` ranks at most
    (:func:`hold_back`) from where the evidence of enough people puts it, so that
    one person, even capped to one click a day, cannot lift a deep result where the
    first-phase scores lie close together; its pins, hides and votes count nothing
    yet, so none can sink it either. Measuring from the first phase instead cost
    13.3 points of the CTR@3 gap on Cranfield (``benchmarks/search_min_actors.py``):
    documents many people passed over kept every held one down.
    """

    def __init__(self, propensities: Propensities, prior: float, min_actors: int = 1) -> None:
        self.p = propensities
        self.prior = prior
        self.min_actors = min_actors

    def held(self, row: SignalRow | None) -> bool:
        """Whether ``row``'s interactions come from too few people to move it far."""
        return row is not None and 0 < row.actors < self.min_actors

    def settled(self, row: SignalRow | None) -> bool:
        """Whether enough people are behind ``row`` for its score to place the
        documents a held one is measured against (:func:`hold_back`): the people
        who interacted with it or, when nobody did, who were shown it and passed it
        over (``row.viewers``: impressions without a session or user count no one,
        or forty searches of one client that sends no session id would be forty
        people walking past the documents above the one it clicks)."""
        if row is None:
            return False
        return (row.actors or row.viewers) >= self.min_actors

    def score(self, row: SignalRow | None, rng: random.Random | None = None) -> float:
        gamma0 = self.p.gamma0
        if row is None:
            if rng is None:
                return 0.0
            row = SignalRow()
        examined = sum(n * self.p.at(int(k)) for k, n in row.impressions_by_rank.items())
        satisfied = utility(row.clicks, row.dwell_clicks, row.bounces)
        successes = satisfied + self.prior * gamma0
        failures = max(examined - satisfied, 0.0) + self.prior * (1.0 - gamma0)
        rate = (
            rng.betavariate(successes, failures)
            if rng is not None
            else successes / (successes + failures)
        )
        attraction = math.log(max(rate, 1e-9) / gamma0)
        plus, minus = (
            (0, 0) if self.held(row) else (row.pins + row.votes_up, row.hides + row.votes_down)
        )
        explicit = (plus - minus) / (plus + minus + 1.0)
        return max(-FEEDBACK_BOUND, min(FEEDBACK_BOUND, attraction + explicit))


def hold_back(
    ranked: Sequence[RankedDoc], held: set[str], first_order: Sequence[str], limit: int
) -> list[RankedDoc]:
    """The first ``limit`` of ``ranked`` (best first), with each document of ``held``
    kept at most :data:`FEW_ACTORS_RANKS` ranks above its place in ``first_order``
    (the ranking on settled evidence only, :meth:`FeedbackScorer.settled`, in which
    held documents have no feedback): each position takes the best remaining
    document allowed there. One always is: of the documents ranked up to two places
    below it in ``first_order``, at most the positions above were taken."""
    if not held:
        return list(ranked[:limit])
    floor = {doc_id: i - FEW_ACTORS_RANKS for i, doc_id in enumerate(first_order) if doc_id in held}
    remaining = list(ranked)
    out: list[RankedDoc] = []
    while remaining and len(out) < limit:
        here = len(out)
        pick = next((i for i, d in enumerate(remaining) if floor.get(d.doc_id, 0) <= here), 0)
        out.append(remaining.pop(pick))
    return out


def min_max_normalized(hits: Sequence[Hit]) -> dict[str, float]:
    """Scores min-max scaled to [0, 1] over ``hits`` (all 1 when they are equal), so
    a lexical and a semantic scale can be mixed."""
    if not hits:
        return {}
    top, bottom = max(h.score for h in hits), min(h.score for h in hits)
    spread = top - bottom
    return {h.doc_id: (h.score - bottom) / spread if spread > 0 else 1.0 for h in hits}
