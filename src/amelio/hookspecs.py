"""The extension contract: every hook a plugin may implement.

A plugin is any module or object with functions named after these specs and
decorated with :data:`hookimpl`. Amelio's own built-ins (eval rule types, LLM
providers, router scorers, notifiers, search engines) register through these same
hooks, so a third-party package has exactly the powers the core has.

Each hook receives a ``register`` callable and calls it once per thing it adds,
with a value of the type its annotation names, imported from a public subpackage
(:mod:`amelio.evals`, :mod:`amelio.routing`, :mod:`amelio.llm`,
:mod:`amelio.improve.notifiers`, :mod:`amelio.search.engines`). Hooks take only the
arguments they declare, so new arguments can be added without breaking plugins.
How Amelio reads them (a broken plugin is skipped, built-in names are kept) is
:func:`amelio.plugins.collect`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

# The value types are imported for type checkers only: this module is imported by
# every built-in plugin, and must stay as light as they are.
if TYPE_CHECKING:
    from amelio.evals import RuleType
    from amelio.improve.notifiers import NotifierType
    from amelio.llm import ProviderType
    from amelio.routing import Scorer
    from amelio.search.engines import EngineType

__all__ = [
    "hookimpl",
    "hookspec",
    "register_llm_providers",
    "register_notifiers",
    "register_router_scorers",
    "register_rule_types",
    "register_search_engines",
]

hookspec = pluggy.HookspecMarker("amelio")
hookimpl = pluggy.HookimplMarker("amelio")


@hookspec
def register_rule_types(register: Callable[[RuleType], None]) -> None:
    """Add eval rule types; a rule's ``type`` names one."""


@hookspec
def register_router_scorers(register: Callable[[Scorer], None]) -> None:
    """Add context-router scorers; ``router_scorer`` names one."""


@hookspec
def register_llm_providers(register: Callable[[ProviderType], None]) -> None:
    """Add LLM providers; ``llm_provider`` names one."""


@hookspec
def register_notifiers(register: Callable[[NotifierType], None]) -> None:
    """Add notifiers; every one whose settings are set gets each report."""


@hookspec
def register_search_engines(register: Callable[[EngineType], None]) -> None:
    """Add search engines; ``search_backend`` names one."""
