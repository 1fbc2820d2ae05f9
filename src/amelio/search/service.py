"""Search: rank profiles, the feedback score, the warm cache, impressions and tokens.

A search runs in four steps:

1. **candidates** — the lexical engine's best ``search_candidates`` by BM25
   (plus the semantic model's, when ``alpha > 0``);
2. **first phase** — ``bm25`` keeps raw BM25; ``hybrid`` is ``alpha · semantic +
   (1 − alpha) · lexical`` on scores min-max normalized over the candidates, so
   the two scales are comparable;
3. **feedback** — ``hybrid_with_feedback`` adds ``beta · feedback`` (in [−3, 3],
   see :class:`~amelio.search.scoring.FeedbackScorer`); ``beta = 0`` skips it,
   giving exactly ``hybrid``; a share of responses explores by Thompson sampling
   (``search_thompson``);
4. **log** — the response is stored as one impression and carries a
   ``feedbackToken`` from the collector's signer, so only served queries can
   receive clicks. The impression keeps the query scrubbed of personal data
   (``pii_scrub``) and, when the client names them, the session and user as the
   daily-salted hashes feedback events use: the aggregator caps what one of
   them adds to a query's signals.

The warm-path cache keeps step 1–3's ranking per (normalized query, profile,
alpha, beta, limit, signals version): a new aggregation bumps the version, so a
cached ranking never outlives the signals it was computed from.

Two forms of the query: the *normalized* one is what the engines search for, the
*key* (:func:`query_key`) is what impressions store and signals are kept under.
They differ only when the query holds something ``pii_scrub`` removes.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import sqlalchemy as sa
from ulid import ULID

from amelio.db.engine import transaction
from amelio.db.schema import search_impressions
from amelio.embeddings import Embedder, search_embedder
from amelio.errors import InvalidInput
from amelio.feedback.tokens import token_signer
from amelio.ops.metrics import record_search_cache
from amelio.privacy.anonymize import SaltedHasher, day_from_index
from amelio.privacy.pii import scrub_for_storage
from amelio.privacy.signing import secret_key
from amelio.search.aggregation import aggregate
from amelio.search.cache import LRUCache
from amelio.search.clickmodel import Propensities, load_propensities
from amelio.search.counts import signals_for
from amelio.search.engines.registry import RankingEngine, SearchEngine, open_engine
from amelio.search.experiments import Experiment, running_experiment
from amelio.search.explain import explain_ranking
from amelio.search.fusion import FirstPhase, first_phase
from amelio.search.interleave import Interleaving, interleave
from amelio.search.profiles import PROFILE_NAMES
from amelio.search.scoring import FeedbackScorer, RankedDoc, hold_back
from amelio.search.store import DocumentStore
from amelio.text import normalize
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import validate_name

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = [
    "MAX_ID_CHARS",
    "PROFILES",
    "SearchResponse",
    "Searcher",
    "query_key",
]

log = logging.getLogger("amelio.search")

PROFILES: tuple[str, ...] = PROFILE_NAMES
MAX_LIMIT = 100
V = TypeVar("V")
#: How long a searcher trusts what it read of a project's running experiment: a new
#: or stopped experiment takes effect within this many seconds in every process.
EXPERIMENT_REFRESH_S = 1.0
#: How often a searcher folds new events into the signals in the background.
AGGREGATE_EVERY_S = 5.0
#: The longest session or user id a search accepts: the bound feedback events have.
MAX_ID_CHARS = 200
_DAY_MS = 86_400_000


class _Ranking(NamedTuple):
    """A ranking and the request it answers, resolved (defaults and profile rules)."""

    docs: tuple[RankedDoc, ...]
    profile: str
    alpha: float
    beta: float
    query_norm: str
    key: str
    cached: bool = False
    sampled: bool = False
    #: The fitted click model the feedback scores used (None without feedback).
    propensities: Propensities | None = None


@dataclass(frozen=True)
class SearchResponse:
    """The DESIGN.md "Search result" contract, plus each result's title."""

    query_id: str
    request_id: str
    profile: str
    alpha: float
    results: tuple[RankedDoc, ...]
    titles: dict[str, str]
    token: str
    cached: bool
    explored: bool
    #: The interleaving experiment that served this response (None: none did).
    experiment: str | None = None
    #: Each result's score parts, by document id, when the request asked.
    explanations: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "queryId": self.query_id,
            "requestId": self.request_id,
            "rankProfile": self.profile,
            "alpha": self.alpha,
            "results": [
                {
                    "docId": d.doc_id,
                    "rank": rank,
                    "score": round(d.score, 6),
                    "scoreVespa": round(d.first_phase, 6),
                    "feedbackScore": round(d.feedback, 6),
                    "title": self.titles.get(d.doc_id, ""),
                }
                for rank, d in enumerate(self.results, start=1)
            ],
            "feedbackToken": self.token,
        }
        if self.experiment is not None:
            body["experiment"] = self.experiment
        if self.explanations is not None:
            for result in body["results"]:
                result["explain"] = self.explanations.get(result["docId"])
        return body


def check_request(query: str, profile: str, alpha: float, limit: int) -> str:
    """The normalized query, or :class:`InvalidInput` naming the bad field."""
    if profile not in PROFILES:
        raise InvalidInput(
            f"Unknown rankProfile {profile!r}; use one of: {', '.join(PROFILES)}.",
            field="rankProfile",
        )
    if not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0) or math.isnan(alpha):
        raise InvalidInput(
            f"alpha is the semantic weight, between 0 and 1, not {alpha}.", field="alpha"
        )
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit is between 1 and {MAX_LIMIT}, not {limit}.", field="limit")
    query_norm = normalize(query)
    if not query_norm:
        raise InvalidInput("The query is empty: send some words to search for.", field="query")
    return query_norm


def query_key(settings: Settings, query: str) -> str:
    """The normalized query that impressions store and signals are kept under.

    It is scrubbed (``pii_scrub``) *before* it is normalized: normalizing first
    would cut an e-mail address into words no pattern recognizes. Ranking uses the
    unscrubbed query, so a search for an order number still finds it; only what is
    stored, and learned, is scrubbed."""
    return normalize(scrub_for_storage(settings, query, "impressions"))


def _check_id(value: str | None, field: str) -> None:
    """``value`` is None or a raw id of a sensible length; the message gives only its
    length, so a raw id cannot leak through an error or a log."""
    if value is not None and not 1 <= len(value) <= MAX_ID_CHARS:
        raise InvalidInput(
            f"{field} is 1 to {MAX_ID_CHARS} characters (the id your "
            f"feedback events send), not {len(value)}; or leave it out.",
            field=field,
        )


class Searcher:
    """Searches one workspace's engine; keep one per process (it holds the cache).

    ``engine`` is the :class:`~amelio.search.engines.registry.SearchEngine` to search
    (default: the one ``search_backend`` names).
    ``rng`` decides exploration (seeded in simulations).
    ``embedder`` replaces the ``search_embedding_model`` setting's model (tests,
    or a model object built in code).
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        engine: SearchEngine | None = None,
        rng: random.Random | None = None,
        background_aggregation: bool = True,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        defer_missing_vectors: bool = False,
    ) -> None:
        self.workspace = workspace
        self.settings = workspace.settings
        self.engine: SearchEngine = engine or open_engine(
            self.settings, defer_missing_vectors=defer_missing_vectors
        )
        self.embedder = embedder
        self.signer = token_signer(self.settings)
        #: The feedback collector's hasher: an impression's session hash must equal
        #: the one the same session's events are stored under.
        self.hasher = SaltedHasher(secret_key(self.settings))
        self.cache: LRUCache[tuple[RankedDoc, ...]] = LRUCache(self.settings.search_cache_size)
        #: First-phase candidates outlive a signals version: a new aggregation (every
        #: few seconds under traffic) re-scores feedback, it does not search again,
        #: and exploring responses sample from them without touching the index.
        self.candidates: LRUCache[FirstPhase] = LRUCache(
            max(self.settings.search_cache_size // 4, 1) if self.settings.search_cache_size else 0
        )
        self._rng = rng or random.Random()  # noqa: S311 (exploration, not secrets)
        self._clock = clock
        self._background = background_aggregation
        self._aggregating = threading.Lock()
        self._last_aggregate = 0.0
        #: project → (until when it is trusted, the running experiment or None)
        self._experiments: dict[str, tuple[float, Experiment | None]] = {}

    # -- the one entry point -----------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        project: str = "default",
        profile: str | None = None,
        alpha: float | None = None,
        limit: int = 10,
        beta: float | None = None,
        session: str | None = None,
        user: str | None = None,
        explain: bool = False,
    ) -> SearchResponse:
        """Rank the corpus for ``query``, log the impression, sign the token.

        ``session`` and ``user`` are the raw ids the client's feedback events send as
        ``session.sessionId`` (or ``sessionIdHash``) and ``session.userId``: only their
        daily-salted hashes are stored, and they let the aggregator cap what one
        session or user adds to this query's signals, repeated searches included.
        Without a session the response counts as a session of its own.

        When an interleaving experiment runs on ``project`` and the session falls in
        its share (:mod:`amelio.search.experiments`), the response interleaves its two
        rankers instead, never swapped (a swap would move results between teams).
        ``explain`` adds each result's parts (:mod:`amelio.search.explain`)."""
        validate_name(project)
        _check_id(session, "sessionId")
        _check_id(user, "userId")
        query_id, request_id = str(ULID()), str(ULID())
        experiment = self._experiment(project)
        shown: Interleaving | None = None
        parts: tuple[_Ranking, ...]
        if experiment is not None and experiment.assigned(query_id if session is None else session):
            r = self._resolved(query, profile, alpha, limit, beta)  # the request is checked
            ranking, shown, parts = self._interleaved(query, experiment, limit)
            swapped, explored = None, any(p.sampled for p in parts)
        else:
            r = self._ranking(query, profile, alpha, limit, beta, explore=True)
            ranking, swapped = self._swap(r.docs)
            explored = r.sampled or swapped is not None
            parts = (r,)
        created_ms = int(self._clock() * 1000)
        day = day_from_index(created_ms // _DAY_MS)  # the salt of the collector's day
        who = (
            None if session is None else self.hasher.hash(session, day),
            None if user is None else self.hasher.hash(user, day),
        )
        self._log(
            query_id,
            request_id,
            project,
            r,
            ranking,
            explored,
            swapped,
            who,
            created_ms,
            (experiment.name, shown) if shown is not None and experiment is not None else None,
        )
        documents = self.engine.documents([d.doc_id for d in ranking])
        titles = {doc_id: doc.title for doc_id, doc in documents.items()}
        explanations = self._explain(ranking, parts, shown, swapped) if explain else None
        self._maybe_aggregate()
        return SearchResponse(
            query_id,
            request_id,
            r.profile,
            r.alpha,
            ranking,
            titles,
            self.signer.issue(query_id, request_id),
            r.cached,
            explored,
            experiment=experiment.name if shown is not None and experiment is not None else None,
            explanations=explanations,
        )

    def forget_experiments(self) -> None:
        """Read the running experiments again at the next search (after creating or
        stopping one in this process; other processes see it within
        :data:`EXPERIMENT_REFRESH_S`)."""
        self._experiments.clear()

    def _experiment(self, project: str) -> Experiment | None:
        now = time.monotonic()
        known = self._experiments.get(project)
        if known is not None and known[0] > now:
            return known[1]
        with self.workspace.engine.connect() as conn:
            found = running_experiment(conn, project)
        self._experiments[project] = (now + EXPERIMENT_REFRESH_S, found)
        return found

    def _interleaved(
        self, query: str, experiment: Experiment, limit: int
    ) -> tuple[tuple[RankedDoc, ...], Interleaving, tuple[_Ranking, _Ranking]]:
        """The experiment's two rankings interleaved; each shown result keeps the
        scores of the ranker that contributed it."""
        a, b = experiment.a, experiment.b
        ra = self._ranking(
            query, a.profile, a.alpha, limit, a.beta, explore=True, thompson=a.exploration
        )
        rb = self._ranking(
            query, b.profile, b.alpha, limit, b.beta, explore=True, thompson=b.exploration
        )
        shown = interleave(
            [d.doc_id for d in ra.docs],
            [d.doc_id for d in rb.docs],
            limit,
            self._rng,
            experiment.method,
        )
        of = {"a": {d.doc_id: d for d in ra.docs}, "b": {d.doc_id: d for d in rb.docs}}
        ranking = tuple(of[t][doc] for doc, t in zip(shown.docs, shown.teams, strict=True))
        return ranking, shown, (ra, rb)

    def _explain(
        self,
        ranking: Sequence[RankedDoc],
        parts: Sequence[_Ranking],
        shown: Interleaving | None,
        swapped: int | None,
    ) -> dict[str, dict[str, Any]]:
        """Each shown result's parts, from the provenance its ranking carries and
        the query's signal rows (:func:`~amelio.search.explain.explain_ranking`); in
        an interleaved response, from the ranker that contributed it, ``moved``
        measured at its rank in that ranker's own list."""
        out: dict[str, dict[str, Any]] = {}
        rows = signals_for(self.workspace.engine, parts[0].key, [d.doc_id for d in ranking])
        for i, part in enumerate(parts):
            if shown is None:
                docs, ranks = list(ranking), list(range(1, len(ranking) + 1))
            else:
                team, own = "ab"[i], (shown.a, shown.b)[i]
                mine = [j for j, t in enumerate(shown.teams) if t == team]
                docs, ranks = [ranking[j] for j in mine], [own[j] or j + 1 for j in mine]
            # A ranking engine (Vespa) scored feedback by itself: read the model once.
            propensities = part.propensities or (
                load_propensities(self.workspace.engine) if part.beta > 0 else None
            )
            scorer = (
                FeedbackScorer(
                    propensities,
                    self.settings.search_prior_weight,
                    self.settings.search_min_actors,
                )
                if propensities is not None
                else None
            )
            found = explain_ranking(
                docs,
                ranks,
                rows=rows,
                scorer=scorer,
                beta=part.beta,
                sampled=part.sampled,
                swapped_rank=swapped,
            )
            if shown is not None:
                for j, doc_id in enumerate(shown.docs):
                    if doc_id in found:
                        found[doc_id]["interleaving"] = {
                            "team": shown.teams[j],
                            "rankA": shown.a[j],
                            "rankB": shown.b[j],
                        }
            out.update(found)
        return out

    def rank(
        self,
        query: str,
        *,
        profile: str | None = None,
        alpha: float | None = None,
        limit: int = 10,
        beta: float | None = None,
    ) -> tuple[RankedDoc, ...]:
        """The ranking a search would show, without logging an impression and never
        explored (for evaluation: a ranking nobody saw must not count as shown)."""
        return self._ranking(query, profile, alpha, limit, beta, explore=False).docs

    def _resolved(
        self,
        query: str,
        profile: str | None,
        alpha: float | None,
        limit: int,
        beta: float | None,
    ) -> _Ranking:
        """The request checked and resolved (defaults, the profile's rules), with no
        documents: what an impression records of the request."""
        profile = profile or self.settings.search_profile
        alpha = self.settings.search_alpha if alpha is None else alpha
        beta = self.settings.search_beta if beta is None else beta
        query_norm = check_request(query, profile, alpha, limit)
        key = query_key(self.settings, query)
        if not 0.0 <= beta <= 10.0:
            raise InvalidInput(f"beta is between 0 and 10, not {beta}.", field="beta")
        if profile == "bm25":
            alpha, beta = 0.0, 0.0
        elif profile == "semantic":
            alpha, beta = 1.0, 0.0
        elif profile == "hybrid":
            beta = 0.0
        return _Ranking((), profile, alpha, beta, query_norm, key)

    def explained(
        self,
        query: str,
        *,
        profile: str | None = None,
        alpha: float | None = None,
        limit: int = 10,
        beta: float | None = None,
    ) -> tuple[tuple[RankedDoc, ...], dict[str, dict[str, Any]]]:
        """:meth:`rank` with each result's parts (the dashboard's search page: looking
        logs nothing)."""
        r = self._ranking(query, profile, alpha, limit, beta, explore=False)
        return r.docs, self._explain(r.docs, (r,), None, None)

    def _ranking(
        self,
        query: str,
        profile: str | None,
        alpha: float | None,
        limit: int,
        beta: float | None,
        *,
        explore: bool,
        thompson: float | None = None,
    ) -> _Ranking:
        """The best ``limit`` documents and the request's resolved profile, alpha,
        beta and normalized query; cached unless this response explores.

        Exploration is Thompson sampling (``search_thompson``, or ``thompson`` for
        an experiment's ranker): in a share of ``hybrid_with_feedback`` responses
        each candidate's feedback score is drawn from its posterior instead of
        taken at its mean, so documents with little evidence — the unseen ones
        from deep in the candidates above all — get shown now and then, while
        those known to be good or bad barely move."""
        r = self._resolved(query, profile, alpha, limit, beta)
        profile, alpha, beta, query_norm, key = r.profile, r.alpha, r.beta, r.query_norm, r.key
        if isinstance(self.engine, RankingEngine):  # Vespa: it ranks, and keeps no cache
            return r._replace(
                docs=self.engine.rank(query_norm, profile, alpha, beta, limit, key=key)
            )
        embedder = self._embedder(profile, alpha) if alpha > 0 else None
        share = self.settings.search_thompson if thompson is None else thompson
        sample = explore and beta > 0 and share > 0 and self._rng.random() < share
        # What the first phase depends on: also the candidate cache's key.
        source = (
            query_norm,
            profile,
            alpha,
            self._corpus_stamp(embedder),
            embedder.model if embedder else None,
        )
        with self.workspace.engine.connect() as conn:
            propensities = load_propensities(conn) if beta > 0 else None
            if sample:
                return r._replace(
                    docs=self._rank(
                        conn, source, key, beta, limit, propensities, embedder, rng=self._rng
                    ),
                    sampled=True,
                    propensities=propensities,
                )
            version = propensities.version if propensities else 0
            cache_key = (*source, key, beta, limit, version)
            ranking = self.cache.get(cache_key)
            cached = ranking is not None
            record_search_cache(cached)
            if ranking is None:
                ranking = self._rank(conn, source, key, beta, limit, propensities, embedder)
                self.cache.put(cache_key, ranking)
        return r._replace(docs=ranking, cached=cached, propensities=propensities)

    def _corpus_stamp(self, embedder: Embedder | None) -> int | tuple[int, int]:
        """The corpus generation; with an embedder on a document store, also the
        vectors stamp (vectors stored from elsewhere, browsers' contributions, change
        semantic rankings without a document changing), read at once."""
        if embedder is not None and isinstance(self.engine, DocumentStore):
            return self.engine.stamp()
        return self.engine.generation()

    # -- ranking -----------------------------------------------------------------------

    def _embedder(self, profile: str, alpha: float) -> Embedder:
        """The embedder given to this searcher, else :func:`search_embedder`."""
        if self.embedder is not None:
            return self.embedder
        what = f"{profile} profile" + (f" with alpha {alpha}" if profile != "semantic" else "")
        return search_embedder(self.settings, what)

    def _first_phase(
        self, query_norm: str, profile: str, alpha: float, embedder: Embedder | None
    ) -> FirstPhase:
        """Each candidate's first-phase score, the candidates in engine order and the
        raw scores behind them (:func:`~amelio.search.fusion.first_phase`):
        ``semantic`` keeps the raw cosine, ``hybrid`` mixes both sides normalized
        with ``alpha``."""
        return first_phase(
            self.engine,
            query_norm,
            self.settings.search_candidates,
            alpha=1.0 if profile == "semantic" else alpha,
            embedder=embedder,
        )

    def _rank(
        self,
        conn: sa.Connection,
        source: tuple[Any, ...],
        key: str,
        beta: float,
        limit: int,
        propensities: Propensities | None,
        embedder: Embedder | None,
        rng: random.Random | None = None,
    ) -> tuple[RankedDoc, ...]:
        """The best ``limit`` candidates; with ``rng``, feedback scores are posterior
        samples (Thompson sampling) rather than posterior means. ``source`` is
        (normalized query, profile, alpha, corpus stamp, model); ``key`` is
        the query's :func:`query_key`, which its signals are kept under."""
        query_norm, profile, alpha = source[:3]
        if profile == "bm25":
            hits = self.engine.lexical(query_norm, limit)
            return tuple(
                RankedDoc(h.doc_id, h.score, h.score, 0.0, h.score, i, None, i)
                for i, h in enumerate(hits, start=1)
            )
        found = self.candidates.get(source)
        if found is None:
            found = self._first_phase(query_norm, profile, alpha, embedder)
            self.candidates.put(source, found)
        first, candidates = found.scores, found.order
        if not first:
            return ()
        order = {doc_id: i for i, doc_id in enumerate(candidates)}
        feedback: dict[str, float] = {}
        held: set[str] = set()
        if beta > 0 and propensities is not None:
            scorer = FeedbackScorer(
                propensities, self.settings.search_prior_weight, self.settings.search_min_actors
            )
            rows = signals_for(conn, key)
            feedback = {doc_id: scorer.score(rows.get(doc_id), rng) for doc_id in first}
            if rng is None:  # a Thompson draw explores: what few people liked gets seen
                held = {doc_id for doc_id in first if scorer.held(rows.get(doc_id))}
        ranked = sorted(
            (
                RankedDoc(
                    doc_id, s + beta * feedback.get(doc_id, 0.0), s, feedback.get(doc_id, 0.0)
                )
                for doc_id, s in first.items()
            ),
            key=lambda d: (-d.score, order[d.doc_id]),
        )
        if held:
            # Where each document would be on what enough people told us: a held
            # one is measured against that ranking, not the first phase's, so
            # documents many people passed over do not keep it down.
            settled = {d: beta * feedback[d] for d in first if scorer.settled(rows.get(d))}
            unmoved = sorted(
                first,
                key=lambda doc_id: (-(first[doc_id] + settled.get(doc_id, 0.0)), order[doc_id]),
            )
            return _provenance(hold_back(ranked, held, unmoved, limit), found)
        return _provenance(ranked[:limit], found)

    def _swap(self, ranking: tuple[RankedDoc, ...]) -> tuple[tuple[RankedDoc, ...], int | None]:
        """Swap two adjacent results in a share of responses (``search_exploration``)
        and return the upper rank of the pair: whether a pair is swapped does not
        depend on what it holds, so comparing clicks with and without the swap
        measures how much less the lower rank is examined (see
        :func:`~amelio.search.clickmodel.fit_pbm`)."""
        if (
            len(ranking) < 2
            or self.settings.search_exploration <= 0
            or self._rng.random() >= self.settings.search_exploration
        ):
            return ranking, None
        shown = list(ranking)
        i = self._rng.randrange(len(shown) - 1)
        shown[i], shown[i + 1] = shown[i + 1], shown[i]
        return tuple(shown), i + 1

    # -- the impression log and signals -----------------------------------------------

    def _log(
        self,
        query_id: str,
        request_id: str,
        project: str,
        r: _Ranking,
        ranking: Sequence[RankedDoc],
        explored: bool,
        swapped_rank: int | None,
        who: tuple[str | None, str | None],
        created_ms: int,
        interleaved: tuple[str, Interleaving] | None = None,
    ) -> None:
        """Store the impression: the ranking as shown, under the query's key, with
        the hashed session and user (``who``) when the client named them, and the
        experiment and its interleaving when one served it."""
        with transaction(self.workspace.engine) as conn:
            conn.execute(
                search_impressions.insert(),
                {
                    "query_id": query_id,
                    "request_id": request_id,
                    "project": project,
                    "query_norm": r.key,
                    "profile": r.profile,
                    "alpha": r.alpha,
                    "beta": r.beta,
                    "results": [
                        [d.doc_id, rank, round(d.score, 6)]
                        for rank, d in enumerate(ranking, start=1)
                    ],
                    "explored": explored,
                    "swapped_rank": swapped_rank,
                    "session_hash": who[0],
                    "user_hash": who[1],
                    "created_ms": created_ms,
                    "experiment": None if interleaved is None else interleaved[0],
                    "interleaving": None if interleaved is None else interleaved[1].to_dict(),
                },
            )

    def _maybe_aggregate(self) -> None:
        if not self._background:
            return
        now = time.monotonic()
        if now - self._last_aggregate < AGGREGATE_EVERY_S:
            return
        if not self._aggregating.acquire(blocking=False):
            return
        self._last_aggregate = now

        def run() -> None:
            try:
                aggregate(self.workspace)
            except Exception:  # a failed pass is retried by the next one
                log.exception("signals aggregation failed")
            finally:
                self._aggregating.release()

        threading.Thread(target=run, name="amelio-signals", daemon=True).start()


def _provenance(shown: Sequence[RankedDoc], found: FirstPhase) -> tuple[RankedDoc, ...]:
    """``shown`` with where each result came from (:class:`RankedDoc`'s provenance
    fields): its raw BM25 and cosine, its BM25 rank among the candidates and the rank
    the first phase alone gave it. Computed once per ranking, on a cache miss."""
    position = {d: i for i, d in enumerate(found.order)}

    def ranks(scores: dict[str, float]) -> dict[str, int]:
        ordered = sorted(scores, key=lambda d: (-scores[d], position.get(d, len(position))))
        return {d: i for i, d in enumerate(ordered, start=1)}

    first, lexical = ranks(found.scores), ranks(found.lexical)
    return tuple(
        d._replace(
            lexical=found.lexical.get(d.doc_id),
            lexical_rank=lexical.get(d.doc_id),
            semantic=found.semantic.get(d.doc_id),
            first_rank=first.get(d.doc_id),
        )
        for d in shown
    )
