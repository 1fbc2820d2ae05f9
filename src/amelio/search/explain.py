"""Why is this result here: each part of a result's score, and the same in words.

``POST /v1/search`` with ``"explain": true`` gives every result an ``explain``
object, and the dashboard's search page says it in a sentence
(:func:`amelio.web.data.why`). The parts are the
ones the ranking was built from, read from the same places, so what is shown is
what happened, not a reconstruction:

* ``bm25`` — the lexical engine's raw score and its rank among the candidates;
* ``semantic`` — the cosine similarity, when the profile has a semantic side;
* ``firstPhase`` — the mixed score (:mod:`amelio.search.fusion`) and the rank
  it alone would give;
* ``feedback`` — the feedback score, its weight ``beta`` and the evidence behind
  it: impressions, the position-debiased examinations they amount to, the
  dwell-weighted clicks, and the satisfaction rate's posterior with a 95 %
  interval (normal approximation of the Beta posterior) beside the average rate
  γ0; ``held`` when fewer than ``search_min_actors`` people are behind it;
* ``exploration`` — whether Thompson sampling drew this response's feedback
  scores, and whether an adjacent swap moved this result;
* ``pins``, ``hides`` and votes, which the feedback score adds or subtracts;
* ``moved`` — ranks gained (positive) or lost against the first phase alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from amelio.search.clickmodel import utility

if TYPE_CHECKING:
    from amelio.search.counts import SignalRow
    from amelio.search.fusion import FirstPhase
    from amelio.search.scoring import FeedbackScorer, RankedDoc

__all__ = ["explain_ranking"]

_Z95 = 1.959964


def _ranks(scores: Mapping[str, float], order: Sequence[str]) -> dict[str, int]:
    """1-based ranks by score, ties kept in engine order (as rankings break them)."""
    position = {d: i for i, d in enumerate(order)}
    ranked = sorted(scores, key=lambda d: (-scores[d], position.get(d, len(position))))
    return {d: i for i, d in enumerate(ranked, start=1)}


def _evidence(row: SignalRow | None, scorer: FeedbackScorer) -> dict[str, Any]:
    row = row or _empty_row()
    p = scorer.p
    examined = sum(n * p.at(int(k)) for k, n in row.impressions_by_rank.items())
    satisfied = utility(row.clicks, row.dwell_clicks, row.bounces)
    successes = satisfied + scorer.prior * p.gamma0
    failures = max(examined - satisfied, 0.0) + scorer.prior * (1.0 - p.gamma0)
    mean = successes / (successes + failures)
    spread = _Z95 * math.sqrt(mean * (1 - mean) / (successes + failures + 1))
    return {
        "impressions": row.impressions,
        "examinations": round(examined, 2),
        "clicks": row.clicks,
        "dwellClicks": row.dwell_clicks,
        "bounces": row.bounces,
        "satisfiedClicks": round(satisfied, 2),
        "rate": round(mean, 4),
        "interval": [round(max(mean - spread, 0.0), 4), round(min(mean + spread, 1.0), 4)],
        "averageRate": round(p.gamma0, 4),
        "actors": row.actors,
        "held": scorer.held(row),
    }


def _empty_row() -> SignalRow:
    from amelio.search.counts import SignalRow

    return SignalRow()


def explain_ranking(
    shown: Sequence[RankedDoc],
    *,
    first: FirstPhase | None,
    rows: Mapping[str, SignalRow],
    scorer: FeedbackScorer | None,
    beta: float,
    sampled: bool,
    swapped_rank: int | None,
    lexical_only: bool = False,
) -> dict[str, dict[str, Any]]:
    """Each shown result's parts, by document id. ``first`` is the candidates'
    first phase (None: a ``bm25`` ranking, or an engine that ranks by itself),
    ``scorer`` the feedback scorer (None: no feedback in this profile);
    ``lexical_only`` says the first phase *is* BM25 (the ``bm25`` profile)."""
    if first is not None:
        first_rank = _ranks(first.scores, first.order)
        bm25_rank = _ranks(first.lexical, first.order) if first.lexical else {}
    else:  # bm25 (or a ranking engine): the first phase is the ranking itself
        by_first = {d.doc_id: d.first_phase for d in shown}
        first_rank = _ranks(by_first, [d.doc_id for d in shown])
        bm25_rank = {}
    out: dict[str, dict[str, Any]] = {}
    for rank, d in enumerate(shown, start=1):
        lexical = first.lexical.get(d.doc_id) if first is not None else None
        semantic = first.semantic.get(d.doc_id) if first is not None else None
        row = rows.get(d.doc_id)
        part: dict[str, Any] = {
            "bm25": {
                "score": None if lexical is None else round(lexical, 6),
                "rank": bm25_rank.get(d.doc_id),
            },
            "semantic": None if semantic is None else {"score": round(semantic, 6)},
            "firstPhase": {"score": round(d.first_phase, 6), "rank": first_rank.get(d.doc_id)},
            "feedback": None,
            "exploration": {
                "thompson": sampled,
                "swapped": swapped_rank is not None and rank in (swapped_rank, swapped_rank + 1),
            },
            "pins": row.pins if row else 0,
            "hides": row.hides if row else 0,
            "votesUp": row.votes_up if row else 0,
            "votesDown": row.votes_down if row else 0,
            "moved": (first_rank[d.doc_id] - rank) if d.doc_id in first_rank else None,
        }
        if lexical_only:
            part["bm25"] = {"score": round(d.first_phase, 6), "rank": first_rank.get(d.doc_id)}
        if scorer is not None and beta > 0:
            part["feedback"] = {
                "score": round(d.feedback, 6),
                "weight": beta,
                "contribution": round(beta * d.feedback, 6),
                **_evidence(row, scorer),
            }
        out[d.doc_id] = part
    return out
