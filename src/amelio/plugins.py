"""The plugin manager: built-ins first, then entry points, loaded once per process.

Entry-point groups: ``amelio.plugins`` for any plugin, and ``amelio.evals`` for
packages that only add eval rule types (both are loaded as pluggy plugins, so the
object an entry point names must implement hooks from :mod:`amelio.hookspecs`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging

import pluggy

from amelio import hookspecs

__all__ = ["ENTRY_POINT_GROUPS", "get_plugin_manager"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUPS = ("amelio.plugins", "amelio.evals")

#: Modules that hold Amelio's own hook implementations.
_BUILTIN_PLUGINS: tuple[str, ...] = (
    "amelio.eval_types",
    "amelio.router",
    "amelio.llm.anthropic",
    "amelio.llm.openai",
    "amelio.llm.claude_cli",
    "amelio.improve.notifiers",
    "amelio.search.engine",
)


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager; built-ins register before entry points."""
    pm = pluggy.PluginManager("amelio")
    pm.add_hookspecs(hookspecs)

    for name in _BUILTIN_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    for group in ENTRY_POINT_GROUPS:
        for entry_point in importlib.metadata.entry_points(group=group):
            if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
                continue
            try:
                pm.register(entry_point.load(), name=entry_point.name)
            except Exception:  # one broken plugin must not take Amelio, or the others, down
                log.exception("could not load plugin %s from %s", entry_point.name, group)
    return pm
