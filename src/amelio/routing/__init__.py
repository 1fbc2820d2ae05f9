"""The context router: lexical parts, the learned index, the router and the routing examples.

The public face for plugin authors who add a scorer through the
``register_router_scorers`` hook: :class:`Scorer` and ``ScoreFn``, the function a
scorer's ``build(skills)`` returns (a message's normalized tokens, from
:func:`amelio.text.tokens`, to ``{skill index: (score, matched terms)}``). Routing
itself (:class:`~amelio.routing.router.Router`, ``route_message``) is in
:mod:`amelio.routing.router`, which this package does not import: it loads numpy.
"""

from amelio.routing.lexical import ScoreFn
from amelio.routing.scorer import Scorer

__all__ = ["ScoreFn", "Scorer"]
