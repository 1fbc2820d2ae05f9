"""How many sessions interleaving and an A/B test each need: ``amelio simulate
--interleave A,B``.

On a BEIR-layout data set, the two rankers rank every judged query (after
``train_sessions`` sessions per query of the product's feedback learning, when a
ranker uses feedback). Then simulated people, the same click model as
:mod:`amelio.search.simulate` (examination ``1/rank``, attraction by grade, dwell
longer on relevant results), search random judged queries:

* **interleaving** — each session is shown A and B interleaved
  (:func:`~amelio.search.interleave.interleave`), its clicks credited by their
  utility (a dwell of 8 s or more 1, a bounce 0), and the session is a win for
  the side with more credit;
* **A/B** — each session is shown A's list or B's, and measured by the same
  utility summed over its clicks (satisfied clicks per session), the metric an
  A/B test of rankers compares.

Sessions needed, for a two-sided test at 5 % with 80 % power: for interleaving,
the fewest sessions at which the production statistic
(:func:`~amelio.search.interleave.preference`, over the sessions with a
credited click) names the better side in at least 80 % of resampled
experiments, searched over a doubling grid then refined; for A/B, the normal
formula ``4 · ((z₀.₉₇₅ + z₀.₈) · σ / δ)²`` on each ranker's mean and variance of
satisfied clicks per session, computed exactly from the click model (no
sampling noise: a difference of a few percent would need hundreds of thousands
of simulated sessions to measure by sampling). Both count all sessions, clicked
or not.
"""

from __future__ import annotations

import math
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist, fmean
from typing import Any, cast

from amelio.embeddings import search_embedder
from amelio.errors import InvalidInput
from amelio.feedback import Collector
from amelio.search.aggregation import DWELL_POSITIVE_MS
from amelio.search.interleave import METHODS, credit, interleave, preference
from amelio.search.profiles import ProfileSpec
from amelio.search.relevance import TOP, load_dataset, ndcg_at
from amelio.search.service import Searcher
from amelio.search.simulate import (
    ARMS,
    USER_MODELS,
    UserModel,
    _rng,
    _scratch_engine,
    _scratch_workspace,
    _train,
    _User,
)
from amelio.workspace.config import Settings

__all__ = ["InterleavingSimulation", "simulate_interleaving"]

#: Resampled experiments per candidate size when power is measured.
REPLICATES = 400
#: The power the sample sizes are for.
POWER = 0.8


@dataclass(frozen=True)
class _Session:
    """One simulated interleaved session: whether a click was credited, and its
    outcome (+1 A, −1 B, 0)."""

    credited: bool
    outcome: int


@dataclass
class InterleavingSimulation:
    """The comparison's figures; ``to_dict`` is what ``--json`` prints."""

    settings: dict[str, Any] = field(default_factory=dict)
    ndcg: dict[str, float] = field(default_factory=dict)
    interleaving: dict[str, Any] = field(default_factory=dict)
    ab: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """Interleaving's sessions as a share of the A/B test's (infinite when
        either could not be measured)."""
        ab, il = self.ab.get("sessionsNeeded"), self.interleaving.get("sessionsNeeded")
        return il / ab if ab and il else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "ndcg10": self.ndcg,
            "interleaving": self.interleaving,
            "ab": self.ab,
            "interleavingShareOfAb": None if math.isinf(self.ratio) else round(self.ratio, 4),
        }


def _power(
    sessions: Sequence[_Session], n: int, expected: int, rng: random.Random, replicates: int
) -> float:
    """The share of ``replicates`` experiments of ``n`` resampled sessions whose
    verdict names the ``expected`` side (+1 A, −1 B)."""
    want = "A" if expected > 0 else "B"
    hits = 0
    for _ in range(replicates):
        drawn = (sessions[rng.randrange(len(sessions))] for _ in range(n))
        outcomes = [s.outcome for s in drawn if s.credited]
        hits += preference(outcomes).verdict == want
    return hits / replicates


def _interleaving_sessions_needed(
    sessions: Sequence[_Session], expected: int, rng: random.Random, replicates: int
) -> tuple[int | None, float]:
    """The fewest sessions with :data:`POWER` (a doubling search, then bisection),
    and the power measured there; (None, power at the largest size tried) when
    even 8 times the simulated sessions fall short (the estimate would rest on
    resampling far past what was simulated)."""
    n, measured = 30, 0.0
    limit = 8 * len(sessions)
    while n <= limit:
        measured = _power(sessions, n, expected, rng, replicates)
        if measured >= POWER:
            break
        n *= 2
    else:
        return None, measured
    low, high = n // 2, n
    while high - low > max(high // 20, 1):
        middle = (low + high) // 2
        power = _power(sessions, middle, expected, rng, replicates)
        if power >= POWER:
            high, measured = middle, power
        else:
            low = middle
    return high, measured


def _satisfaction(
    ranking: Sequence[str], judged: dict[str, int], user: _User
) -> tuple[float, float]:
    """The mean and variance of one session's satisfied clicks on ``ranking``, exact
    under the simulated person's click model: a click needs examination and
    attraction, and is satisfied when the dwell (normal, mean 4 + 5·grade s, sd 2)
    reaches 8 s. Under ``pbm`` ranks are independent; under ``cascade`` the first
    click ends the session, so it holds one click at most."""
    threshold_s = DWELL_POSITIVE_MS / 1000
    p_dwell = [
        1 - NormalDist(4.0 + 5.0 * judged.get(d, 0), 2.0).cdf(threshold_s) for d in ranking[:TOP]
    ]
    attraction = [user.attraction(judged.get(d, 0)) for d in ranking[:TOP]]
    if user.model == "pbm":
        chances = [
            a / rank * q for rank, (a, q) in enumerate(zip(attraction, p_dwell, strict=True), 1)
        ]
        return sum(chances), sum(c * (1 - c) for c in chances)
    mean, unclicked = 0.0, 1.0
    for a, q in zip(attraction, p_dwell, strict=True):
        mean += unclicked * a * q
        unclicked *= 1 - a
    return mean, mean * (1 - mean)


def _ab_sessions_needed(
    per_query_a: Sequence[tuple[float, float]], per_query_b: Sequence[tuple[float, float]]
) -> tuple[float, float, float]:
    """Each arm's mean satisfied clicks per session over a uniformly drawn query, and
    the sessions in all (split evenly) a two-sided z-test at 5 % needs for 80 %
    power: ``4 · ((z₀.₉₇₅ + z₀.₈) · σ / δ)²``, σ² the arms' mean variance (within
    a query plus across queries). Infinite when δ = 0."""

    def moments(per_query: Sequence[tuple[float, float]]) -> tuple[float, float]:
        mean = fmean(m for m, _ in per_query)
        spread = fmean(v for _, v in per_query) + fmean((m - mean) ** 2 for m, _ in per_query)
        return mean, spread

    (mean_a, var_a), (mean_b, var_b) = moments(per_query_a), moments(per_query_b)
    delta = mean_a - mean_b
    if delta == 0:
        return mean_a, mean_b, math.inf
    z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(POWER)
    return mean_a, mean_b, 4 * z**2 * ((var_a + var_b) / 2) / delta**2


def simulate_interleaving(
    dataset: Path,
    a: ProfileSpec,
    b: ProfileSpec,
    *,
    sessions_per_query: int = 20,
    method: str = "team-draft",
    user_model: str = "pbm",
    seed: int = 0,
    train_sessions: int = 0,
    engine: str | None = None,
    workdir: Path | None = None,
    replicates: int = REPLICATES,
    progress: Callable[[str], None] | None = None,
) -> InterleavingSimulation:
    """Compare ``a`` and ``b`` on ``dataset`` by interleaving and by A/B, and say how
    many sessions each needs to detect the difference (module docstring)."""
    if method not in METHODS:
        raise InvalidInput(
            f"Unknown interleaving method {method!r}; use {' or '.join(METHODS)}.",
            field="method",
        )
    if user_model not in USER_MODELS:
        raise InvalidInput(
            f"Unknown click model {user_model!r}; use pbm or cascade.", field="click_model"
        )
    if sessions_per_query < 1 or train_sessions < 0 or replicates < 10:
        raise InvalidInput(
            "sessions per query are at least 1, training sessions at least 0, "
            "replicates at least 10."
        )
    data = load_dataset(dataset)
    say = progress or (lambda _: None)
    scratch = tempfile.TemporaryDirectory(prefix="amelio-interleave-") if workdir is None else None
    root = Path(scratch.name) if scratch is not None else Path(workdir)  # type: ignore[arg-type]
    alpha = max(a.alpha or 0.0, b.alpha or 0.0)
    result = InterleavingSimulation(
        settings={
            "dataset": str(dataset),
            "queries": len(data.queries),
            "a": a.label(),
            "b": b.label(),
            "method": method,
            "sessionsPerQuery": sessions_per_query,
            "trainSessionsPerQuery": train_sessions,
            "clickModel": user_model,
            "seed": seed,
            "power": POWER,
            "replicates": replicates,
        }
    )
    try:
        corpus = _scratch_engine(root, engine)
        embedder = (
            search_embedder(Settings(), f"simulation with alpha {alpha}") if alpha > 0 else None
        )
        if corpus.count() == 0:
            corpus.import_file(data.corpus_path, embedder=embedder)
        ws = _scratch_workspace(root / "interleave")
        searcher = Searcher(
            ws, engine=corpus, rng=_rng(seed), background_aggregation=False, embedder=embedder
        )
        resolved_a, resolved_b = a.resolved(ws.settings), b.resolved(ws.settings)
        if resolved_a == resolved_b:
            raise InvalidInput(
                f"A ({a.label()}) and B ({b.label()}) rank alike: nothing to compare.",
                field="interleave",
            )
        if train_sessions:
            say(f"Training feedback: {train_sessions} sessions per query…")
            learner_alpha = next(
                (s.alpha or 0.0 for s in (resolved_a, resolved_b) if (s.beta or 0) > 0), 0.0
            )
            _train(
                searcher,
                Collector(ws),
                ARMS[0],
                data,
                train_sessions,
                user_model,
                _rng(f"{seed}:train"),
                "train",
                learner_alpha,
            )

        def ranking(spec: ProfileSpec, text: str) -> list[str]:
            found = searcher.rank(
                text, profile=spec.profile, alpha=spec.alpha, beta=spec.beta, limit=TOP
            )
            return [d.doc_id for d in found]

        lists = {
            qid: (ranking(resolved_a, text), ranking(resolved_b, text))
            for qid, text in data.queries.items()
        }
        for side, i in (("a", 0), ("b", 1)):
            result.ndcg[side] = round(
                fmean(ndcg_at(lists[q][i], data.qrels[q]) for q in data.queries), 4
            )
        base = result.ndcg["b"]
        result.ndcg["relativeDifference"] = (
            round((result.ndcg["a"] - base) / base, 4) if base else 0.0
        )
        say(
            f"NDCG@10: A {result.ndcg['a']:.4f}, B {result.ndcg['b']:.4f} "
            f"({result.ndcg['relativeDifference']:+.1%} for A)."
        )
        rng = _rng(f"{seed}:sessions")
        user = _User(cast(UserModel, user_model), data.max_grade, rng)
        queries = list(data.queries)
        total = sessions_per_query * len(queries)
        interleaved: list[_Session] = []

        def satisfied(
            ranks: list[int], docs: Sequence[str], judged: dict[str, int]
        ) -> dict[int, float]:
            return {
                r: float(user.dwell_ms(judged.get(docs[r - 1], 0)) >= DWELL_POSITIVE_MS)
                for r in ranks
            }

        for _ in range(total):
            qid = queries[rng.randrange(len(queries))]
            judged = data.qrels[qid]
            list_a, list_b = lists[qid]
            shown = interleave(list_a, list_b, TOP, rng, method)
            clicks = satisfied(user.clicks(list(shown.docs), judged), shown.docs, judged)
            got_a, got_b = credit(shown, clicks)
            interleaved.append(_Session(got_a > 0 or got_b > 0, (got_a > got_b) - (got_a < got_b)))
        check = _rng(f"{seed}:power")
        mean_outcome = fmean(s.outcome for s in interleaved)
        expected = 1 if mean_outcome > 0 else -1
        whole = preference([s.outcome for s in interleaved if s.credited])
        needed, power = _interleaving_sessions_needed(interleaved, expected, check, replicates)
        result.interleaving = {
            "simulatedSessions": total,
            "creditedShare": round(sum(s.credited for s in interleaved) / total, 4),
            "preference": whole.to_dict(),
            "prefers": "A" if expected > 0 else "B",
            "agreesWithNdcg": (expected > 0) == (result.ndcg["a"] > result.ndcg["b"]),
            "sessionsNeeded": needed,
            "powerThere": round(power, 3),
        }
        mean_a, mean_b, ab_needed = _ab_sessions_needed(
            [_satisfaction(lists[q][0], data.qrels[q], user) for q in queries],
            [_satisfaction(lists[q][1], data.qrels[q], user) for q in queries],
        )
        result.ab = {
            "satisfiedClicksPerSession": {"a": round(mean_a, 4), "b": round(mean_b, 4)},
            "sessionsNeeded": math.ceil(ab_needed) if math.isfinite(ab_needed) else None,
        }
        say(
            f"Interleaving needs {result.interleaving['sessionsNeeded']} sessions, "
            f"A/B {result.ab['sessionsNeeded']}."
        )
        ws.dispose()
    finally:
        if scratch is not None:
            scratch.cleanup()
    return result
