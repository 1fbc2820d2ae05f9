"""Offline relevance evaluation: rank profiles measured against a judgment list.

For every query of the list that has at least one document graded ``relevant`` or
better, each profile ranks the corpus (:meth:`~amelio.search.service.Searcher.rank`:
no impression is logged, nothing explores) and its top 10 is scored:

* **NDCG@10** with exponential gains (2^grade − 1) and log2 discounts, against the
  ideal ordering of all the query's graded documents
  (:func:`~amelio.search.relevance.ndcg_at`, as ``amelio simulate`` scores);
* **MRR** — 1 / the rank of the first relevant document in the top 10, else 0;
* **P@5** — the share of the top 5 that is relevant.

*Relevant* means a grade of at least ``relevant`` (default 1), as Elasticsearch's
``_rank_eval`` ``relevant_rating_threshold``. A document the list did not grade
counts as grade 0: a ranking that surfaces unjudged documents is scored as if they
were irrelevant, so a list pooled from one profile favours that profile (judge the
pools of every profile you compare, or read the differences with that in mind).
Queries with no relevant document are left out (every ranking scores 0 on them,
which says nothing) and counted.

Each metric is the mean over queries with a seeded 95 % percentile-bootstrap
interval (the queries resampled). With two profiles or more, each is also compared
with the first, *paired*: the interval is the bootstrap of the per-query
differences, so it is narrower than the two intervals side by side suggest.

A feedback profile evaluated against a list built from the same clicks is partly
graded by its own evidence: compare it on an llm or human list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amelio.errors import InvalidInput
from amelio.search.judgment_lists import GRADES, graded_pairs
from amelio.search.profiles import ProfileSpec, parse_profile
from amelio.search.relevance import TOP, ndcg_at
from amelio.stats import RESAMPLES, Interval, bootstrap_mean

if TYPE_CHECKING:
    from amelio.search.service import Searcher
    from amelio.workspace.folder import Workspace

__all__ = [
    "METRICS",
    "Change",
    "Difference",
    "Evaluation",
    "ProfileScores",
    "evaluate",
    "query_metrics",
]

#: The metrics, in the order they are reported.
METRICS = ("ndcg@10", "mrr", "p@5")
#: How many of the queries that changed most an evaluation lists.
CHANGED = 10


@dataclass(frozen=True)
class ProfileScores:
    """One profile's metrics (mean and interval) and its per-query values."""

    profile: str
    metrics: dict[str, Interval]
    per_query: dict[str, dict[str, float]]

    def to_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, **{m: i.to_dict() for m, i in self.metrics.items()}}


@dataclass(frozen=True)
class Difference:
    """``profile`` minus ``baseline`` (the first profile), paired over queries."""

    profile: str
    baseline: str
    metrics: dict[str, Interval]

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "baseline": self.baseline,
            **{m: i.to_dict() for m, i in self.metrics.items()},
        }


@dataclass(frozen=True)
class Change:
    """A query's NDCG@10 under the first two profiles."""

    query: str
    a: float
    b: float

    @property
    def diff(self) -> float:
        return self.b - self.a

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "a": round(self.a, 4),
            "b": round(self.b, 4),
            "diff": round(self.diff, 4),
        }


@dataclass(frozen=True)
class Evaluation:
    judgments: str
    relevant: int
    seed: int
    queries: int
    left_out: int
    profiles: list[ProfileScores]
    differences: list[Difference]
    changed: list[Change]

    def to_dict(self) -> dict[str, Any]:
        return {
            "judgments": self.judgments,
            "relevant": self.relevant,
            "seed": self.seed,
            "resamples": RESAMPLES,
            "queries": self.queries,
            "leftOut": self.left_out,
            "profiles": [p.to_dict() for p in self.profiles],
            "differences": [d.to_dict() for d in self.differences],
            "changed": [c.to_dict() for c in self.changed],
        }


def query_metrics(
    ranking: Sequence[str], judged: dict[str, int], relevant: int
) -> dict[str, float]:
    """NDCG@10, MRR and P@5 of one ranking (unjudged documents are grade 0)."""
    top = list(ranking[:TOP])
    hits = [judged.get(d, 0) >= relevant for d in top]
    first = next((rank for rank, hit in enumerate(hits, start=1) if hit), None)
    return {
        "ndcg@10": ndcg_at(top, judged, TOP),
        "mrr": 0.0 if first is None else 1.0 / first,
        "p@5": sum(hits[:5]) / 5.0,
    }


def evaluate(
    ws: Workspace,
    judgments_name: str,
    specs: Sequence[str | ProfileSpec],
    *,
    seed: int = 0,
    relevant: int = 1,
    searcher: Searcher | None = None,
) -> Evaluation:
    """Score each profile of ``specs`` (``NAME[:key=value,...]``) on list
    ``judgments_name``; see the module's docstring for the metrics."""
    if not specs:
        raise InvalidInput("Name at least one rank profile to evaluate.", field="profile")
    profiles = [parse_profile(s) if isinstance(s, str) else s for s in specs]
    if relevant not in GRADES[1:]:
        raise InvalidInput(
            f"relevant is the lowest grade that counts as relevant, 1 to 3, not {relevant}.",
            field="relevant",
        )
    judged = graded_pairs(ws, judgments_name)
    queries = sorted(q for q, docs in judged.items() if max(docs.values()) >= relevant)
    if not queries:
        raise InvalidInput(
            f"No query of judgment list {judgments_name!r} has a document graded "
            f"{relevant} or more: there is nothing to find.",
            field="judgments",
        )
    if searcher is None:
        from amelio.search.service import Searcher

        searcher = Searcher(ws, background_aggregation=False)
    scored: list[ProfileScores] = []
    for spec in profiles:
        per_query = {
            q: query_metrics(
                [
                    d.doc_id
                    for d in searcher.rank(
                        q, profile=spec.profile, alpha=spec.alpha, beta=spec.beta, limit=TOP
                    )
                ],
                judged[q],
                relevant,
            )
            for q in queries
        }
        metrics = {
            m: bootstrap_mean([per_query[q][m] for q in queries], seed=seed) for m in METRICS
        }
        scored.append(ProfileScores(spec.label(), metrics, per_query))
    base = scored[0]
    differences = [
        Difference(
            other.profile,
            base.profile,
            {
                m: bootstrap_mean(
                    [other.per_query[q][m] - base.per_query[q][m] for q in queries], seed=seed
                )
                for m in METRICS
            },
        )
        for other in scored[1:]
    ]
    changed: list[Change] = []
    if len(scored) > 1:
        moved = [
            Change(q, base.per_query[q]["ndcg@10"], scored[1].per_query[q]["ndcg@10"])
            for q in queries
        ]
        changed = sorted((c for c in moved if c.diff != 0), key=lambda c: (-abs(c.diff), c.query))[
            :CHANGED
        ]
    return Evaluation(
        judgments_name,
        relevant,
        seed,
        len(queries),
        len(judged) - len(queries),
        scored,
        differences,
        changed,
    )
