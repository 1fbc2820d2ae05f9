"""The context router: lexical parts, the learned index, the router and the routing examples.

The public face for plugin authors who add a scorer through the
``register_router_scorers`` hook: :class:`Scorer` and ``ScoreFn``, the function a
scorer's ``build(skills)`` returns (a message's normalized tokens, from
:func:`amelio.text.tokens`, to ``{skill index: (score, matched terms)}``). Routing
itself (:class:`~amelio.routing.router.Router`, ``route_message``) is in
:mod:`amelio.routing.router`.

The names resolve lazily (PEP 562): the plugin manager imports
:mod:`amelio.routing.plugin` whenever it is built, and pays for nothing else here.
"""

import typing as _typing

from amelio._lazy import lazy_namespace as _lazy_namespace

if _typing.TYPE_CHECKING:
    from amelio.routing.lexical import ScoreFn
    from amelio.routing.scorer import Scorer

__all__ = ["ScoreFn", "Scorer"]

#: Where each public name lives; the module is imported on first use.
_LAZY: dict[str, str] = {"ScoreFn": "amelio.routing.lexical", "Scorer": "amelio.routing.scorer"}

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag typos
    __getattr__, __dir__ = _lazy_namespace("amelio.routing", _LAZY, globals(), __all__)
