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
from amelio.search.counts import SignalRow

if TYPE_CHECKING:
    from amelio.search.scoring import FeedbackScorer, RankedDoc

__all__ = ["explain_ranking"]

_Z95 = 1.959964


def _evidence(row: SignalRow | None, scorer: FeedbackScorer) -> dict[str, Any]:
    row = row or SignalRow()
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


def explain_ranking(
    shown: Sequence[RankedDoc],
    ranks: Sequence[int],
    *,
    rows: Mapping[str, SignalRow],
    scorer: FeedbackScorer | None,
    beta: float,
    sampled: bool,
    swapped_rank: int | None,
) -> dict[str, dict[str, Any]]:
    """Each shown result's parts, by document id, from the provenance the ranking
    carries (:class:`~amelio.search.scoring.RankedDoc`) and the query's signal rows.
    ``ranks`` are the results' ranks in the ranking they came from (what ``moved``
    and a swap are measured at); ``scorer`` is the feedback scorer (None: no
    feedback in this profile)."""
    out: dict[str, dict[str, Any]] = {}
    for rank, d in zip(ranks, shown, strict=True):
        row = rows.get(d.doc_id)
        part: dict[str, Any] = {
            "bm25": {
                "score": None if d.lexical is None else round(d.lexical, 6),
                "rank": d.lexical_rank,
            },
            "semantic": None if d.semantic is None else {"score": round(d.semantic, 6)},
            "firstPhase": {"score": round(d.first_phase, 6), "rank": d.first_rank},
            "feedback": None,
            "exploration": {
                "thompson": sampled,
                "swapped": swapped_rank is not None and rank in (swapped_rank, swapped_rank + 1),
            },
            "pins": row.pins if row else 0,
            "hides": row.hides if row else 0,
            "votesUp": row.votes_up if row else 0,
            "votesDown": row.votes_down if row else 0,
            "moved": None if d.first_rank is None else d.first_rank - rank,
        }
        if scorer is not None and beta > 0:
            part["feedback"] = {
                "score": round(d.feedback, 6),
                "weight": beta,
                "contribution": round(beta * d.feedback, 6),
                **_evidence(row, scorer),
            }
        out[d.doc_id] = part
    return out
