"""What a router scorer is, and the registration of the built-in ones.

Apart from :mod:`amelio.routing.router`, which loads numpy for the ``learned``
scorer's embeddings: the plugin manager imports this module whenever it is built,
and a plugin imports :class:`Scorer` just to declare one, so neither may load
anything heavy. The built-in scorers themselves are read when the hook runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amelio.hookspecs import hookimpl

__all__ = ["Scorer", "register_router_scorers"]


@dataclass(frozen=True)
class Scorer:
    """A routing strategy: ``build`` indexes skills once and returns the scoring function.

    ``build(skills)`` receives the :class:`~amelio.skills.model.SkillSpec` list and
    returns a :data:`~amelio.routing.ScoreFn`. A scorer with ``learns`` set is built
    as ``build(skills, data)`` with the skills' examples
    (:class:`~amelio.routing.router.TrainingData`) and returns a
    :class:`~amelio.routing.router.LearnedScoreFn`."""

    name: str
    build: Callable[..., Any]
    description: str = ""
    #: Scores at or under this are not a match (the out-of-scope threshold).
    min_score: float = 0.0
    learns: bool = False


@hookimpl
def register_router_scorers(register: Callable[[Scorer], None]) -> None:
    from amelio.routing.router import builtin_scorers

    for scorer in builtin_scorers().values():
        register(scorer)
