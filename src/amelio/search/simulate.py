"""Simulated users on public relevance judgments: does feedback make search better?

Over a BEIR-layout data set (``corpus.jsonl``, ``queries.jsonl``,
``qrels/test.tsv``), each simulated session searches a judged query, sees the
top 10, and clicks by a click model:

* ``pbm`` — rank k is examined with probability ``1/k``; an examined result is
  clicked with probability ``0.1 + 0.9 · (2^grade − 1)/(2^max − 1)``;
* ``cascade`` — results are examined top-down; each is clicked with that same
  probability, and the first click ends the session.

A clicked result is read longer when it is relevant (mean ``4 + 5·grade``
seconds), so dwell time carries the signal that clicks alone blur. Every click
and dwell becomes a real ``MartyFeedbackEventV1`` with the response's real
``feedbackToken``, sent through the real :class:`~amelio.feedback.Collector`;
the signals are aggregated after every two sessions of each query, as the
service's background aggregation would.

Each learning arm runs in its own workspace (its clicks must not teach the
other), and both are the product's ``hybrid_with_feedback`` profile: the same
first phase and ``search_candidates`` candidates, the same feedback score with
the same prior (``search_prior_weight`` pseudo-examinations at the average
rate γ0), the same bound, ``beta``, Thompson sampling and adjacent swaps. Only
the evidence they learn from differs (:data:`ARMS`):

* ``hybrid_with_feedback`` — clicks weighted by dwell (a bounce counts nothing)
  over *examinations*: impressions times the fitted propensity of their rank;
* ``naive_ctr`` — smoothed click counting: every click counts the same (its
  client reports no dwell) over raw *impressions* (every rank shown counts as
  examined, θ = 1), so its score is log((clicks + m·c0)/(impressions + m) / c0)
  with c0 the average clicks per impression.

So the gap between them is what position debiasing and dwell add, not what a
prior adds: an unsmoothed click-through rate, which one lucky click puts on top,
would be a strawman. After each round every arm is measured on *fresh* sessions
that send nothing: NDCG@10 against the judgments and CTR@3, the share of
sessions with a click in the top 3; ``bm25`` and the ``ideal`` ranking (the
judgments sorted) are the floor and the ceiling.
"""

from __future__ import annotations

import csv
import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import sqlalchemy as sa

from amelio.db.engine import transaction
from amelio.db.schema import search_signals, search_state
from amelio.embeddings import search_embedder
from amelio.errors import InvalidInput
from amelio.feedback import Collector, new_event_id
from amelio.search.aggregation import aggregate
from amelio.search.clickmodel import utility
from amelio.search.engines.registry import open_engine
from amelio.search.relevance import TOP, Dataset, load_dataset, ndcg_at
from amelio.search.service import Searcher, SearchResponse
from amelio.search.store import DocumentStore
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace, open_workspace

__all__ = [
    "ARMS",
    "ONE_ACTOR_ARM",
    "Arm",
    "Dataset",
    "SimulationResult",
    "click_events",
    "load_dataset",
    "ndcg_at",
    "simulate",
]

UserModel = Literal["pbm", "cascade"]
USER_MODELS: tuple[str, ...] = ("pbm", "cascade")
#: Sessions of each query between two aggregations of the signals.
SYNC_SESSIONS = 2


@dataclass(frozen=True)
class Arm:
    """A learning arm: the ``hybrid_with_feedback`` profile fed one kind of evidence.

    ``debiased``: clicks are divided by examinations (impressions times the fitted
    propensity of their rank); without it every rank shown counts as examined.
    ``dwell``: the arm's client reports dwell time, so a satisfied click counts 1
    and a bounce 0; without it every click counts the same (½, a click of unknown
    dwell). ``min_actors`` overrides ``search_min_actors`` (None: the setting), so
    one run can say what waiting for several people costs the learning."""

    name: str
    debiased: bool
    dwell: bool
    description: str
    min_actors: int | None = None


#: The arms every simulation trains, each in its own workspace.
ARMS: tuple[Arm, ...] = (
    Arm(
        "hybrid_with_feedback",
        debiased=True,
        dwell=True,
        description="dwell-weighted clicks over position-debiased examinations",
    ),
    Arm(
        "naive_ctr",
        debiased=False,
        dwell=False,
        description="every click the same, over raw impressions (smoothed click counting)",
    ),
)
_LEARNERS = tuple(a.name for a in ARMS)
#: The product's arm with every interaction counted from the first person on: the
#: learning speed ``search_min_actors`` is measured against.
ONE_ACTOR_ARM = Arm(
    "one_actor_enough",
    debiased=True,
    dwell=True,
    description="as hybrid_with_feedback, with search_min_actors = 1",
    min_actors=1,
)


def _rng(seed: int | str) -> random.Random:
    """A seeded generator: simulations must replay exactly, not be unpredictable."""
    return random.Random(seed)  # noqa: S311


class _User:
    """A simulated person: clicks and dwells by a click model and the judgments."""

    def __init__(self, model: UserModel, max_grade: int, rng: random.Random) -> None:
        self.model = model
        self.max_grade = max_grade
        self.rng = rng

    def attraction(self, grade: int) -> float:
        return 0.1 + 0.9 * (2.0**grade - 1) / (2.0**self.max_grade - 1)

    def clicks(self, ranking: Sequence[str], judged: dict[str, int]) -> list[int]:
        """The 1-based ranks clicked, in order."""
        clicked: list[int] = []
        for rank, doc_id in enumerate(ranking[:TOP], start=1):
            if self.model == "pbm" and self.rng.random() >= 1.0 / rank:
                continue
            if self.rng.random() < self.attraction(judged.get(doc_id, 0)):
                clicked.append(rank)
                if self.model == "cascade":
                    break
        return clicked

    def dwell_ms(self, grade: int) -> int:
        return int(max(0.5, self.rng.gauss(4.0 + 5.0 * grade, 2.0)) * 1000)


@dataclass
class SimulationResult:
    """Per round (0 = before any feedback) and profile: NDCG@10 and CTR@3."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    def final(self, profile: str, metric: str) -> float:
        last = max(r["round"] for r in self.rows)
        return float(
            next(r[metric] for r in self.rows if r["round"] == last and r["profile"] == profile)
        )

    def training_ctr(self, profile: str) -> float:
        """CTR@3 of what the training sessions were shown (exploration included),
        averaged over all rounds: what learning cost the people who searched."""
        values = [
            r["train_ctr3"]
            for r in self.rows
            if r["profile"] == profile and r.get("train_ctr3") is not None
        ]
        return sum(values) / len(values) if values else 0.0

    def gap_closed(self, profile: str, metric: str = "ndcg10") -> float:
        """Share of the bm25 → ideal gap ``profile`` closed by the last round."""
        return self.curve(profile, metric)[-1][1]

    def curve(self, profile: str, metric: str = "ndcg10") -> list[tuple[int, float]]:
        """(sessions per query, share of the bm25 → ideal gap closed) at each round:
        how fast ``profile`` learned."""
        at = {(r["round"], r["profile"]): r for r in self.rows}
        points = []
        for round_no in sorted({r["round"] for r in self.rows}):
            base, ideal = at[(round_no, "bm25")][metric], at[(round_no, "ideal")][metric]
            value = at[(round_no, profile)][metric]
            share = (value - base) / (ideal - base) if ideal > base else 0.0
            points.append((int(at[(round_no, profile)]["sessions"]), share))
        return points

    def to_dict(self) -> dict[str, Any]:
        profiles = sorted({r["profile"] for r in self.rows})
        learners = [p for p in self.settings.get("arms", _LEARNERS) if p in profiles]
        return {
            "settings": self.settings,
            "rows": self.rows,
            "final": {
                p: {"ndcg10": self.final(p, "ndcg10"), "ctr3": self.final(p, "ctr3")}
                for p in profiles
            },
            "gapClosed": {
                p: {"ndcg10": self.gap_closed(p, "ndcg10"), "ctr3": self.gap_closed(p, "ctr3")}
                for p in learners
            },
            "trainingCtr3": {p: self.training_ctr(p) for p in learners},
        }

    def write(self, out: Path) -> list[Path]:
        """The CSV, the JSON record and, when matplotlib is installed, the PNG."""
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "simulation.csv", out / "simulation.json"]
        with written[0].open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(
                f, fieldnames=["round", "sessions", "profile", "ndcg10", "ctr3", "train_ctr3"]
            )
            writer.writeheader()
            writer.writerows(self.rows)
        written[1].write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        png = self._plot(out / "simulation.png")
        if png is not None:
            written.append(png)
        return written

    def _plot(self, path: Path) -> Path | None:
        try:
            import matplotlib  # type: ignore[import-not-found,unused-ignore]

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return None
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
        for ax, metric, label in ((axes[0], "ndcg10", "NDCG@10"), (axes[1], "ctr3", "CTR@3")):
            for profile in ("ideal", "hybrid_with_feedback", "naive_ctr", "bm25"):
                points = [(r["sessions"], r[metric]) for r in self.rows if r["profile"] == profile]
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=profile)
            if metric == "ndcg10":
                half = (self.final("bm25", metric) + self.final("ideal", metric)) / 2
                ax.axhline(half, linestyle=":", color="grey", label="half the gap")
            else:
                shown = [
                    (r["sessions"], r["train_ctr3"])
                    for r in self.rows
                    if r["profile"] == "hybrid_with_feedback" and r["train_ctr3"]
                ]
                ax.plot(
                    [p[0] for p in shown],
                    [p[1] for p in shown],
                    linestyle="--",
                    label="hybrid_with_feedback, while learning",
                )
            ax.set_xlabel("sessions per query")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        handles, labels = [], []
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                if label not in labels:
                    handles.append(handle)
                    labels.append(label)
        fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
        fig.tight_layout(rect=(0, 0.14, 1, 1))
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path


def _evaluate(
    rank: Callable[[str], list[str]], data: Dataset, user: _User, sessions: int
) -> tuple[float, float]:
    ndcg = ctr = 0.0
    for qid, text in data.queries.items():
        ranking = rank(text)
        judged = data.qrels[qid]
        ndcg += ndcg_at(ranking, judged)
        ctr += (
            sum(1 for _ in range(sessions) if any(k <= 3 for k in user.clicks(ranking, judged)))
            / sessions
        )
    return ndcg / len(data.queries), ctr / len(data.queries)


def result_event(
    response: SearchResponse, doc_id: str, kind: str, session: str, now_ms: int, **extra: Any
) -> dict[str, Any]:
    """One event a client sends about result ``doc_id`` of ``response`` (a click, a
    pin, a hide with ``hide={"reason": ...}``), at the rank it was shown."""
    rank = next(i for i, d in enumerate(response.results, start=1) if d.doc_id == doc_id)
    return {
        "eventVersion": "v1",
        "eventId": new_event_id(),
        "eventTimeMs": now_ms,
        "eventType": kind,
        "session": {"sessionId": session},
        "consent": {"telemetry": "granted"},
        "request": {
            "queryId": response.query_id,
            "requestId": response.request_id,
            "feedbackToken": response.token,
            "rankProfile": response.profile,
            "alpha": response.alpha,
        },
        "result": {"docId": doc_id, "rankShown": rank},
        **extra,
    }


def click_events(
    response: SearchResponse, rank: int, session: str, dwell_ms: int | None, now_ms: int
) -> list[dict[str, Any]]:
    """The events a client sends when a person clicks the result at ``rank`` (1-based)
    of ``response`` and reads it ``dwell_ms`` (None: the client reports no dwell)."""
    doc_id = response.results[rank - 1].doc_id
    events = [result_event(response, doc_id, "result_clicked", session, now_ms)]
    if dwell_ms is not None:
        events.append(
            result_event(
                response,
                doc_id,
                "result_dwell_time",
                session,
                now_ms,
                outcome={"dwellMs": dwell_ms},
            )
        )
    return events


def _events(
    response: SearchResponse,
    clicks: list[int],
    judged: dict[str, int],
    user: _User,
    session: str,
    now_ms: int,
    dwell: bool,
) -> list[dict[str, Any]]:
    return [
        e
        for rank in clicks
        for e in click_events(
            response,
            rank,
            session,
            user.dwell_ms(judged.get(response.results[rank - 1].doc_id, 0)) if dwell else None,
            now_ms,
        )
    ]


def _scratch_engine(root: Path, name: str | None) -> DocumentStore:
    """An embedded engine whose store lives in the simulation's folder."""
    engine = open_engine(Settings().model_copy(update={"workspace": root}), name)
    if not isinstance(engine, DocumentStore):
        raise InvalidInput(
            f"The simulation indexes the data set itself: use an embedded "
            f"engine (embedded, tantivy, fts5), not {engine.name!r}.",
            field="engine",
        )
    return engine


def simulate(
    dataset: Path,
    *,
    sessions_per_query: int = 100,
    user_model: str = "pbm",
    seed: int = 0,
    rounds: int = 10,
    eval_sessions: int = 20,
    alpha: float = 0.0,
    thompson: float | None = None,
    workdir: Path | None = None,
    engine: str | None = None,
    progress: Callable[[str], None] | None = None,
    beta: float | None = None,
    arms: Sequence[Arm] = ARMS,
) -> SimulationResult:
    """Run the simulation; ``rounds`` checkpoints split the sessions evenly.

    ``alpha`` is the semantic weight of the learning profile's first phase (above
    0 needs ``amelio[semantic]``); ``thompson`` overrides ``search_thompson``, the
    share of training responses that explore. ``engine`` is the embedded engine
    that indexes the data set (default: ``search_backend``'s, else ``embedded``).
    ``beta`` overrides ``search_beta`` and ``arms`` picks the learning arms (the
    first is the one the summary reads), for tuning runs that need one arm only."""
    if user_model not in USER_MODELS:
        raise InvalidInput(
            f"Unknown click model {user_model!r}; use pbm or cascade.", field="click_model"
        )
    if sessions_per_query < 1 or rounds < 1 or eval_sessions < 1:
        raise InvalidInput("sessions per query, rounds and evaluation sessions are at least 1.")
    if not 0.0 <= alpha <= 1.0:
        raise InvalidInput(
            f"alpha is the semantic weight, between 0 and 1, not {alpha}.", field="alpha"
        )
    if not arms:
        raise InvalidInput("At least one learning arm is needed.", field="arms")
    if beta is not None and not 0.0 <= beta <= 10.0:
        raise InvalidInput(f"beta is between 0 and 10, not {beta}.", field="beta")
    if thompson is not None and not 0.0 <= thompson <= 1.0:
        raise InvalidInput(
            f"The exploration share is between 0 and 1, not {thompson}.", field="thompson"
        )
    rounds = min(rounds, sessions_per_query)
    model = cast(UserModel, user_model)
    data = load_dataset(dataset)
    say = progress or (lambda _: None)
    scratch = tempfile.TemporaryDirectory(prefix="amelio-sim-") if workdir is None else None
    root = Path(scratch.name) if scratch is not None else Path(workdir)  # type: ignore[arg-type]
    result = SimulationResult(
        settings={
            "dataset": str(dataset),
            "queries": len(data.queries),
            "sessionsPerQuery": sessions_per_query,
            "clickModel": user_model,
            "seed": seed,
            "rounds": rounds,
            "evalSessions": eval_sessions,
            "alpha": alpha,
            "arms": {a.name: a.description for a in arms},
        }
    )
    try:
        corpus = _scratch_engine(root, engine)
        result.settings["engine"] = corpus.name
        embedder = (
            search_embedder(Settings(), f"simulation with alpha {alpha}") if alpha > 0 else None
        )
        if corpus.count() == 0:
            corpus.import_file(data.corpus_path, embedder=embedder)
        judged_lists = {
            qid: [d for d, _ in sorted(j.items(), key=lambda x: -x[1])]
            for qid, j in data.qrels.items()
        }
        text_to_qid = {t: q for q, t in data.queries.items()}
        static: dict[str, tuple[float, float]] = {}
        learners: dict[str, Searcher] = {}
        collectors: dict[str, Collector] = {}
        for arm in arms:
            ws = _scratch_workspace(root / arm.name, thompson, beta, arm.min_actors)
            learners[arm.name] = Searcher(
                ws, engine=corpus, rng=_rng(seed), background_aggregation=False, embedder=embedder
            )
            collectors[arm.name] = Collector(ws)
        base = learners[arms[0].name]
        result.settings["beta"] = base.settings.search_beta
        result.settings["thompson"] = base.settings.search_thompson
        result.settings["priorWeight"] = base.settings.search_prior_weight
        result.settings["minActors"] = {
            name: searcher.settings.search_min_actors for name, searcher in learners.items()
        }
        result.settings["candidates"] = base.settings.search_candidates
        say(
            f"{len(data.queries)} queries, {sessions_per_query} sessions each. Floor: bm25; "
            "ceiling: ideal (the judgments sorted)."
        )
        say(
            "Both learning arms are the hybrid_with_feedback profile (alpha "
            f"{alpha:g}, {base.settings.search_candidates} candidates, prior weight "
            f"{base.settings.search_prior_weight:g}, Thompson sampling in "
            f"{base.settings.search_thompson:.0%} of responses); they learn from:"
        )
        for arm in arms:
            say(f"  {arm.name}: {arm.description}")
        eval_user = _User(model, data.max_grade, _rng(seed + 1))
        static["bm25"] = _evaluate(
            lambda t: [d.doc_id for d in base.rank(t, profile="bm25")],
            data,
            eval_user,
            eval_sessions,
        )
        static["ideal"] = _evaluate(
            lambda t: judged_lists[text_to_qid[t]][:TOP], data, eval_user, eval_sessions
        )
        done = 0
        for round_no in range(rounds + 1):
            shown_ctr: dict[str, float | None] = dict.fromkeys(learners)
            if round_no:
                batch = sessions_per_query * round_no // rounds - done
                for arm in arms:
                    shown_ctr[arm.name] = _train(
                        learners[arm.name],
                        collectors[arm.name],
                        arm,
                        data,
                        batch,
                        user_model,
                        _rng(f"{seed}:{arm.name}:{round_no}"),
                        f"{arm.name}-{round_no}",
                        alpha,
                    )
                done += batch
            for profile, value in static.items():
                result.rows.append(
                    {
                        "round": round_no,
                        "sessions": done,
                        "profile": profile,
                        "ndcg10": round(value[0], 4),
                        "ctr3": round(value[1], 4),
                        "train_ctr3": None,
                    }
                )
            for name, searcher in learners.items():
                user = _User(model, data.max_grade, _rng(f"{seed}:eval:{round_no}"))
                ndcg, ctr = _evaluate(_feedback_ranker(searcher, alpha), data, user, eval_sessions)
                trained = shown_ctr[name]
                result.rows.append(
                    {
                        "round": round_no,
                        "sessions": done,
                        "profile": name,
                        "ndcg10": round(ndcg, 4),
                        "ctr3": round(ctr, 4),
                        "train_ctr3": None if trained is None else round(trained, 4),
                    }
                )
            say(
                f"round {round_no}/{rounds}: {done} sessions per query; "
                + ", ".join(
                    f"{r['profile']} {r['ndcg10']:.3f}"
                    for r in result.rows
                    if r["round"] == round_no
                )
            )
        for searcher in learners.values():
            searcher.workspace.dispose()
    finally:
        if scratch is not None:
            scratch.cleanup()
    return result


def _feedback_ranker(searcher: Searcher, alpha: float) -> Callable[[str], list[str]]:
    def rank(text: str) -> list[str]:
        return [d.doc_id for d in searcher.rank(text, profile="hybrid_with_feedback", alpha=alpha)]

    return rank


def _scratch_workspace(
    path: Path,
    thompson: float | None = None,
    beta: float | None = None,
    min_actors: int | None = None,
) -> Workspace:
    """A private SQLite workspace, whatever AMELIO_DATABASE_URL says: two learners
    sharing a database would learn from each other's clicks."""
    (path / ".amelio").mkdir(parents=True, exist_ok=True)
    overrides: dict[str, Any] = {} if thompson is None else {"search_thompson": thompson}
    if beta is not None:
        overrides["search_beta"] = beta
    if min_actors is not None:
        overrides["search_min_actors"] = min_actors
    settings = Settings(
        workspace=path,
        database_url=f"sqlite:///{(path / '.amelio' / 'amelio.db').resolve()}",
        **overrides,
    )
    return open_workspace(path, migrate=True, settings=settings)


def _train(
    searcher: Searcher,
    collector: Collector,
    arm: Arm,
    data: Dataset,
    sessions: int,
    user_model: str,
    rng: random.Random,
    tag: str,
    alpha: float,
) -> float:
    """``sessions`` logged sessions per query, their events collected and the
    signals aggregated every :data:`SYNC_SESSIONS` sessions of each query, as the
    service's background aggregation does every few seconds (a round-sized batch
    would show ten people the same ranking before learning from the first);
    returns the share of those sessions with a click in the top 3."""
    user = _User(cast(UserModel, user_model), data.max_grade, rng)
    now_ms = int(time.time() * 1000)
    size = searcher.settings.feedback_max_events
    top3 = 0
    for tick in range(0, sessions, SYNC_SESSIONS):
        events: list[dict[str, Any]] = []
        for i in range(tick, min(tick + SYNC_SESSIONS, sessions)):
            for qid, text in data.queries.items():
                judged = data.qrels[qid]
                session = f"{tag}-{qid}-{i}"  # named at search too, as clients should
                response = searcher.search(
                    text, profile="hybrid_with_feedback", alpha=alpha, session=session
                )
                ranking = [d.doc_id for d in response.results]
                clicks = user.clicks(ranking, judged)
                top3 += any(k <= 3 for k in clicks)
                events += _events(response, clicks, judged, user, session, now_ms, arm.dwell)
        for start in range(0, len(events), size):
            collector.ingest(events[start : start + size], rate_limit=False)
        aggregate(searcher.workspace)
        if not arm.debiased:
            _examined_as_shown(searcher.workspace)
    return top3 / (sessions * len(data.queries))


def _examined_as_shown(workspace: Workspace) -> None:
    """Switch position debiasing off in an arm's workspace, right after an
    aggregation: every rank shown counts as examined (θ = 1), so the feedback score
    divides by raw impressions, and γ0, the prior's mean, becomes the average
    satisfaction per impression. The swap experiment's counts are kept.

    The product has no such switch; overwriting the fitted propensities in this
    scratch workspace makes the naive arm the product's own scorer, prior and
    exploration, with only the debiasing taken out."""
    with transaction(workspace.engine) as conn:
        fitted = dict(
            conn.execute(
                sa.select(search_state.c.propensities).where(search_state.c.id == 1)
            ).scalar_one()
            or {}
        )
        rows = conn.execute(
            sa.select(
                search_signals.c.impressions,
                search_signals.c.clicks,
                search_signals.c.dwell_clicks,
                search_signals.c.bounces,
            )
        ).all()
        shown = sum(r.impressions for r in rows)
        satisfied = sum(utility(r.clicks, r.dwell_clicks, r.bounces) for r in rows)
        gamma0 = satisfied / shown if shown and satisfied else 0.2  # fit_pbm's default
        fitted.update(theta=[1.0] * TOP, gamma0=round(min(max(gamma0, 0.01), 0.99), 6))
        conn.execute(
            search_state.update().where(search_state.c.id == 1).values(propensities=fitted)
        )
