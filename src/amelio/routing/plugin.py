"""The built-in router scorers, registered through the same hook as any plugin's.

The plugin manager imports this module whenever it is built, so it imports nothing
heavy: the scorers themselves (:mod:`amelio.routing.router`, which loads numpy for
the ``learned`` scorer) are read when the hook runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from amelio.hookspecs import hookimpl

if TYPE_CHECKING:
    from amelio.routing.scorer import Scorer

__all__ = ["register_router_scorers"]


@hookimpl
def register_router_scorers(register: Callable[[Scorer], None]) -> None:
    from amelio.routing.router import builtin_scorers

    for scorer in builtin_scorers().values():
        register(scorer)
