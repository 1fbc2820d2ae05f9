"""The plugin manager: built-ins first, then entry points, loaded once per process.

Entry-point groups: ``amelio.plugins`` for any plugin, and ``amelio.evals`` for
packages that only add eval rule types (both are loaded as pluggy plugins, so the
object an entry point names must implement hooks from :mod:`amelio.hookspecs`).

A built-in module is imported the first time one of its hooks runs, not when the
manager is built: checking eval rules loads the rule types, not the router, the
LLM SDKs or the search engines. Each is registered, in its place, as a stand-in
that implements the hooks :data:`_BUILTIN_PLUGINS` lists for it and forwards
every call to the module (``tests/test_cli_startup.py`` checks that list).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

import pluggy

from amelio import hookspecs

__all__ = ["ENTRY_POINT_GROUPS", "get_plugin_manager", "is_builtin"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUPS = ("amelio.plugins", "amelio.evals")

#: Modules that hold Amelio's own hook implementations, in registration order, with
#: the hooks each implements (plain ``@hookimpl``s taking ``register``).
_BUILTIN_PLUGINS: dict[str, tuple[str, ...]] = {
    "amelio.evals.builtin": ("register_rule_types",),
    "amelio.routing.router": ("register_router_scorers",),
    "amelio.llm.anthropic": ("register_llm_providers",),
    "amelio.llm.openai": ("register_llm_providers",),
    "amelio.llm.claude_cli": ("register_llm_providers",),
    "amelio.improve.notifiers": ("register_notifiers",),
    "amelio.telegram.notifier": ("register_notifiers",),
    "amelio.search.engines.registry": ("register_search_engines",),
}


class _Builtin:
    """Stands in for a built-in plugin module: implements its hooks by importing the
    module on the first call and calling the module's own implementation."""

    def __init__(self, module: str, hooks: tuple[str, ...]) -> None:
        self.module = module
        for hook in hooks:
            setattr(self, hook, self._forward(hook))

    def _forward(self, hook: str) -> Callable[..., Any]:
        module = self.module

        @hookspecs.hookimpl
        def forward(register: Callable[..., Any]) -> Any:
            return getattr(importlib.import_module(module), hook)(register=register)

        forward.__name__ = forward.__qualname__ = hook
        return forward

    def __repr__(self) -> str:
        return f"<built-in plugin {self.module}>"


def is_builtin(plugin_name: str | None) -> bool:
    """Whether the plugin registered under ``plugin_name`` is one of Amelio's own."""
    return plugin_name in _BUILTIN_PLUGINS


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager; built-ins register before entry points."""
    import importlib.metadata

    pm = pluggy.PluginManager("amelio")
    pm.add_hookspecs(hookspecs)

    for name, hooks in _BUILTIN_PLUGINS.items():
        pm.register(_Builtin(name, hooks), name=name)
    installed = importlib.metadata.entry_points()  # every distribution read once, not per group
    for group in ENTRY_POINT_GROUPS:
        for entry_point in installed.select(group=group):
            if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
                continue
            try:
                pm.register(entry_point.load(), name=entry_point.name)
            except Exception:  # one broken plugin must not take Amelio, or the others, down
                log.exception("could not load plugin %s from %s", entry_point.name, group)
    return pm
