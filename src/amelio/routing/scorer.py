"""What a router scorer is.

Apart from :mod:`amelio.routing.router`, which loads numpy for the ``learned``
scorer's embeddings: a plugin imports :class:`Scorer` just to declare one, so this
module may load nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Scorer"]


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
