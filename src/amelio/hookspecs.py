"""The extension contract: every hook a plugin may implement.

A plugin is any module or object with functions named after these specs and
decorated with :data:`hookimpl`. Amelio's own built-ins (eval rule types, LLM
providers, router scorers, notifiers, search engines) register through these same hooks, so a
third-party package has exactly the powers the core has.

Each hook receives a ``register`` callable and calls it once per thing it adds;
what ``register`` accepts is documented on the hook. Hooks take only the
arguments they declare, so new arguments can be added without breaking plugins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("amelio")
hookimpl = pluggy.HookimplMarker("amelio")


@hookspec
def register_rule_types(register: Callable[..., Any]) -> None:
    """Add eval rule types: ``register(rule_type)`` with an
    :class:`amelio.evals.RuleType`."""


@hookspec
def register_router_scorers(register: Callable[..., Any]) -> None:
    """Add context-router scorers: ``register(scorer)`` with an
    :class:`amelio.routing.router.Scorer`."""


@hookspec
def register_llm_providers(register: Callable[..., Any]) -> None:
    """Add LLM providers: ``register(provider_type)`` with an :class:`amelio.llm.ProviderType`."""


@hookspec
def register_notifiers(register: Callable[..., Any]) -> None:
    """Add notifiers: ``register(notifier_type)`` with an
    :class:`amelio.improve.notifiers.NotifierType`."""


@hookspec
def register_search_engines(register: Callable[..., Any]) -> None:
    """Add search engines: ``register(engine_type)`` with an
    :class:`amelio.search.engines.registry.EngineType`; ``search_backend`` names one."""
