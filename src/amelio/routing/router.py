"""The context router: which skills fit a message.

The router is advisory. It ranks skills and renders the ``SKILLS_HINT`` block
(names and descriptions, never bodies) so the model focuses on a few; it never
hides a skill from the model.

Scorers are pluggable through the ``register_router_scorers`` hook. A scorer is
a factory that indexes a skill set once and returns a function from a message's
tokens to scored hits, so routing a message is a dictionary walk, not a pass
over every skill's text. Built-ins:

``keywords``
    The seed's rule: +2 per trigger found, +1 per keyword found, on whole words
    and phrases of normalized text.
``bm25``
    Okapi BM25 over name, description, triggers and keywords, on words split at
    apostrophes, without one-character words and English stopwords
    (:data:`amelio.text.ROUTER`).
``hybrid``
    ``keywords`` plus BM25 as a share of the best score the message could get,
    in [0, 1]: the seed's score decides, BM25 breaks its ties and finds skills
    no trigger names. It won over ``keywords`` on data (``benchmarks/router_accuracy.py``).
``learned`` (default)
    ``hybrid``'s parts plus what the skill was used for: SKILL.md ``examples:`` and
    the messages of kept answers, and embeddings of both when ``amelio[semantic]``
    is installed; its out-of-scope threshold is learned from the examples
    (:mod:`amelio.routing.learned`). With no example it routes on metadata alone.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from amelio.embeddings import WORDLLAMA
from amelio.errors import InvalidInput
from amelio.routing.learned import Calibration, LearnedIndex, TrainingData
from amelio.routing.lexical import (
    Bm25,
    ScoreFn,
    keyword_scorer,
    skill_terms,
)
from amelio.routing.scorer import Scorer
from amelio.skills.model import Skill, SkillSpec
from amelio.text import ROUTER, tokens
from amelio.workspace.projects import DEFAULT_PROJECT

# The database layer and the plugin manager are imported where they are used: a router
# built from a snapshot (amelio.routing.snapshot) needs neither, and `amelio route`
# starts without them.
if TYPE_CHECKING:
    import sqlalchemy as sa

    from amelio.embeddings import Embedder
    from amelio.workspace.config import Settings
    from amelio.workspace.folder import Workspace

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_SCORER",
    "Calibration",
    "LearnedScoreFn",
    "Route",
    "RouteHit",
    "Router",
    "TrainingData",
    "builtin_scorers",
    "hint_block",
    "project_router",
    "route_message",
    "router_embedder",
    "router_for",
    "scorers",
    "training_data",
]

#: ``learned`` beats ``hybrid`` on CLINC150 with no example (top-1 82 % vs 75 %) and
#: learns from examples; ``hybrid`` beat the seed's ``keywords`` (75 % vs 67 %). See
#: benchmarks/router_accuracy.py.
DEFAULT_SCORER = "learned"
DEFAULT_LIMIT = 5
HINT_HEADER = "SKILLS_HINT (skills most relevant to this message, best first):"


class LearnedScoreFn(Protocol):
    """What a learning scorer's ``build(skills, data)`` returns: it scores the message
    text too (to embed it), and learned its own out-of-scope threshold."""

    calibration: Calibration

    def score(
        self, message: str, toks: tuple[str, ...], limit: int
    ) -> dict[int, tuple[float, list[str]]]: ...


@dataclass(frozen=True)
class RouteHit:
    name: str
    description: str
    score: float
    matched: tuple[str, ...]
    project: str | None = None
    #: The routed skill itself, when the router was built from stored skills.
    skill: Skill | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "score": round(self.score, 4),
            "matched": list(self.matched),
            "scope": "global" if self.project is None else "project",
        }


@dataclass(frozen=True)
class Route:
    message: str
    scorer: str
    hits: tuple[RouteHit, ...]
    #: The out-of-scope threshold the hits passed.
    min_score: float = 0.0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hits)

    @property
    def top(self) -> RouteHit | None:
        return self.hits[0] if self.hits else None

    def hint_block(self) -> str:
        return hint_block(self.hits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "minScore": round(self.min_score, 4),
            "skills": [h.to_dict() for h in self.hits],
            "hint": self.hint_block(),
        }


def hint_block(hits: Iterable[RouteHit]) -> str:
    """The seed's ``SKILLS_HINT`` block; empty when nothing matched."""
    lines = [f"- {h.name}: {h.description}" if h.description else f"- {h.name}" for h in hits]
    return "\n".join([HINT_HEADER, *lines]) if lines else ""


# -- scorers ----------------------------------------------------------------------------


def _bm25(skills: Sequence[SkillSpec]) -> ScoreFn:
    index = Bm25([skill_terms(s) for s in skills])

    def score(message: tuple[str, ...]) -> dict[int, tuple[float, list[str]]]:
        return index.score(dict.fromkeys(ROUTER.terms(message)))

    return score


def _hybrid(skills: Sequence[SkillSpec], k1: float = 1.2) -> ScoreFn:
    """BM25 divided by the most any skill could score for this message (every BM25 term
    of it matched at its idf, unknown terms at the rarest idf), so the bonus is in
    [0, 1] and a match on a common word alone stays near 0."""
    index = Bm25([skill_terms(s) for s in skills], k1=k1)
    keyword_score = keyword_scorer(skills)

    def score(message: tuple[str, ...]) -> dict[int, tuple[float, list[str]]]:
        seed = keyword_score(message)
        terms = dict.fromkeys(ROUTER.terms(message))
        lexical = index.score(terms)
        ceiling = index.ceiling(terms)
        found: dict[int, tuple[float, list[str]]] = {}
        for i in seed.keys() | lexical.keys():
            s, matched = seed.get(i, (0.0, []))
            extra = lexical[i][0] / ceiling if i in lexical and ceiling > 0 else 0.0
            found[i] = (s + extra, matched or lexical[i][1])
        return found

    return score


_BUILTIN_SCORERS = (
    Scorer("keywords", keyword_scorer, "seed rule: +2 per trigger, +1 per keyword (whole words)"),
    Scorer("bm25", _bm25, "Okapi BM25 over name, description, triggers and keywords"),
    # 0.5: a BM25-only hit must carry half of what the message could score, which
    # rejects out-of-scope messages as well as the seed rule does (benchmarks/).
    Scorer(
        "hybrid",
        _hybrid,
        "keywords + BM25 as a share of the best possible score, in [0, 1]",
        min_score=0.5,
    ),
    Scorer(
        "learned",
        LearnedIndex,
        "hybrid + examples of real use + embeddings, with a "
        "learned out-of-scope threshold (amelio.routing.learned)",
        learns=True,
    ),
)


def builtin_scorers() -> dict[str, Scorer]:
    """Amelio's own scorers by name, without asking the plugins."""
    return {s.name: s for s in _BUILTIN_SCORERS}


def scorers() -> dict[str, Scorer]:
    """Every registered scorer by name, built-ins first (:func:`amelio.plugins.collect`)."""
    from amelio.plugins import collect

    return collect("register_router_scorers", Scorer)


# -- the router -------------------------------------------------------------------------


class Router:
    """A skill set indexed for one scorer. Build once per skill set, route many messages.

    ``data`` feeds a learning scorer (``learned``): the skills' examples, the
    embedder, a fixed threshold. Other scorers ignore it. ``scopes`` gives each
    skill's project (None: global) when ``skills`` are specs; ``registry`` is where
    ``scorer`` is looked up (default: every registered scorer, plugins included)."""

    def __init__(
        self,
        skills: Sequence[Skill | SkillSpec],
        scorer: str = DEFAULT_SCORER,
        *,
        data: TrainingData | None = None,
        scopes: Sequence[str | None] | None = None,
        registry: dict[str, Scorer] | None = None,
    ) -> None:
        available = scorers() if registry is None else registry
        if scorer not in available:
            raise InvalidInput(
                f"Unknown router scorer {scorer!r}; use one of: {', '.join(sorted(available))}.",
                field="scorer",
            )
        self.scorer = scorer
        self._skills = [s.spec if isinstance(s, Skill) else s for s in skills]
        self._stored = [s if isinstance(s, Skill) else None for s in skills]
        if scopes is not None and len(scopes) != len(skills):
            raise ValueError(f"{len(scopes)} scopes for {len(skills)} skills")
        self._projects = (
            list(scopes)
            if scopes is not None
            else [s.project if isinstance(s, Skill) else None for s in skills]
        )
        chosen = available[scorer]
        #: Whether the scorer learns from examples (a router to rebuild when they change).
        self.learns = chosen.learns
        #: What a learning scorer was built from (a snapshot saves it); None otherwise.
        self.data: TrainingData | None = None
        self._learned: LearnedScoreFn | None = None
        if chosen.learns:
            if data is None:  # the defaults: SKILL.md examples, the default embeddings
                data = TrainingData(
                    examples=[s.examples for s in self._skills],
                    embedder=load_router_embedder(WORDLLAMA),
                )
            self.data = data
            self._learned = chosen.build(self._skills, data)
            self.calibration = self._learned.calibration
        else:
            self._score: ScoreFn = chosen.build(self._skills)
            self.calibration = Calibration(chosen.min_score, "scorer")
        self.min_score = self.calibration.threshold

    def __len__(self) -> int:
        return len(self._skills)

    @property
    def specs(self) -> tuple[SkillSpec, ...]:
        """The skills routed, in index order."""
        return tuple(self._skills)

    @property
    def scopes(self) -> tuple[str | None, ...]:
        """Each skill's project (None: global), in index order."""
        return tuple(self._projects)

    def route(
        self, message: str, *, limit: int = DEFAULT_LIMIT, min_score: float | None = None
    ) -> Route:
        """The top ``limit`` skills scoring above ``min_score`` (default: the scorer's
        threshold, learned or fixed), ties broken by name."""
        if min_score is None:
            min_score = self.min_score
        toks = tokens(message, breaks=True)
        found = (
            self._learned.score(message, toks, limit)
            if self._learned is not None
            else self._score(toks)
        )
        ranked = sorted(
            ((s, i, m) for i, (s, m) in found.items() if s > min_score),
            key=lambda x: (-x[0], self._skills[x[1]].name),
        )[:limit]
        hits = tuple(
            RouteHit(
                self._skills[i].name,
                self._skills[i].description,
                s,
                tuple(m),
                self._projects[i],
                self._stored[i],
            )
            for s, i, m in ranked
        )
        return Route(message, self.scorer, hits, min_score)


_cache: dict[tuple[object, ...], Router] = {}
_cache_lock = threading.Lock()


def router_for(skills: Sequence[Skill], scorer: str = DEFAULT_SCORER) -> Router:
    """A router for this exact skill set (and its SKILL.md examples), reused while no
    skill changes. Logged examples need :func:`route_message`."""
    key = (scorer, *((s.id, s.version) for s in skills))
    with _cache_lock:
        router = _cache.get(key)
    if router is None:
        router = Router(skills, scorer)
        with _cache_lock:
            if len(_cache) > 64:
                _cache.clear()
            _cache[key] = router
    return router


# The router each engine last used per (project, scorer), with the skills and the
# examples stamp it indexes: reused while visible_skills returns that same tuple and
# the stamp holds, i.e. while no skill and no example changed. Per engine, unlike
# router_for: two databases can hold different skills under the same (id, version),
# and one process may open both (tests, benchmarks).
_routers: weakref.WeakKeyDictionary[
    sa.Engine, dict[tuple[str, str], tuple[tuple[Skill, ...], object, Router]]
] = weakref.WeakKeyDictionary()


def route_message(
    ws: Workspace,
    message: str,
    *,
    project: str = DEFAULT_PROJECT,
    scorer: str | None = None,
    limit: int | None = None,
    conn: sa.Connection | None = None,
) -> Route:
    """Route ``message`` over every skill ``project`` sees, with the workspace's settings.

    The skills come from :func:`visible_skills`, which rereads them only after a
    change (in any process); a learning scorer's examples are reread only when their
    stamp moves; the index is rebuilt only then."""
    return project_router(ws, project=project, scorer=scorer, conn=conn).route(
        message, limit=limit or ws.settings.router_limit
    )


def project_router(
    ws: Workspace,
    *,
    project: str = DEFAULT_PROJECT,
    scorer: str | None = None,
    conn: sa.Connection | None = None,
) -> Router:
    """The router :func:`route_message` uses for ``project``, built or reused."""
    import sqlalchemy as sa

    from amelio.routing import examples as routing_examples
    from amelio.skills.store import visible_skills

    bind = conn or ws.engine
    visible = visible_skills(bind, project)
    name = scorer or ws.settings.router_scorer
    engine = bind.engine if isinstance(bind, sa.Connection) else bind
    with _cache_lock:
        cached = _routers.get(engine, {}).get((project, name))
    # Whether the scorer learns is the cached router's to say: the plugin manager is
    # asked only before the first build.
    if cached is not None:
        learns = cached[2].learns
    else:
        available = scorers()
        learns = name in available and available[name].learns
    stamp = routing_examples.stamp(bind, project) if learns else None
    if cached is not None and cached[0] is visible and cached[1] == stamp:
        return cached[2]
    data = None
    if learns:
        previous = cached[2].calibration if cached is not None and cached[0] is visible else None
        data = training_data(ws, visible, project, conn=conn, previous=previous)
    router = Router(visible, name, data=data)
    with _cache_lock:
        per_engine = _routers.setdefault(engine, {})
        if len(per_engine) >= 1024:
            per_engine.clear()
        per_engine[(project, name)] = (visible, stamp, router)
    return router


def training_data(
    ws: Workspace,
    skills: Sequence[Skill],
    project: str = DEFAULT_PROJECT,
    *,
    conn: sa.Connection | None = None,
    previous: Calibration | None = None,
) -> TrainingData:
    """What the ``learned`` scorer learns from for ``project``: each skill's SKILL.md
    examples and kept answers (:mod:`amelio.routing.examples`), and the embedder the
    settings name (none when ``router_embedding_model`` is empty, or when the default
    model's extra is not installed)."""
    from amelio.routing import examples as routing_examples

    logged = routing_examples.examples_by_skill(
        conn or ws.engine, project, per_skill=ws.settings.router_max_examples
    )
    examples = [[*s.spec.examples, *logged.get(s.name, ())] for s in skills]
    # With no skill there is nothing to compare with: the model is not worth loading.
    embedder = router_embedder(ws.settings) if skills else None
    return TrainingData(
        examples=examples,
        embedder=embedder,
        min_score=ws.settings.router_min_score,
        previous=previous,
    )


_unavailable_logged = False


def router_embedder(settings: Settings) -> Embedder | None:
    """The embedder for semantic routing the settings name, or None for lexical routing."""
    return load_router_embedder(settings.router_embedding_model)


def load_router_embedder(name: str) -> Embedder | None:
    """The embedder ``name`` names, None for ``""`` or when the default model's extra
    (``amelio[semantic]``) is not installed: routing is lexical then, said once."""
    global _unavailable_logged
    from amelio.embeddings import EmbedderUnavailable, load_embedder

    if not name:
        return None
    try:
        return load_embedder(name, setting="router_embedding_model")
    except EmbedderUnavailable:
        if name != WORDLLAMA:
            raise
        if not _unavailable_logged:  # the default, without its extra: lexical, said once
            _unavailable_logged = True
            logger.info("Routing is lexical: install amelio[semantic] for embeddings.")
        return None
