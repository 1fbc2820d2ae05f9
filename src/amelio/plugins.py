"""The plugin manager, and :func:`collect`: the one way Amelio reads what plugins add.

Amelio's own built-ins are plain modules registered first, by name
(:data:`BUILTIN_PLUGINS`), through the same hooks as any plugin; then come the
entry points of the ``amelio.plugins`` group (any plugin) and of ``amelio.evals``
(packages that only add eval rule types). Both are loaded as pluggy plugins, so
the object an entry point names implements hooks from :mod:`amelio.hookspecs`.

Building the manager imports every built-in module, so each one is light: its hook
body imports what it registers, and a check of eval rules never loads the router,
the LLM SDKs or the search engines (``tests/test_cli_startup.py`` holds this).

Every hook is read through :func:`collect`, so one failure policy holds for rule
types, scorers, LLM providers, notifiers and search engines alike: a plugin that
fails to load or raises in its hook is logged and skipped whole; a registration of
the wrong type is logged, naming the plugin, and skipped; a name is kept by its
first registration, and built-ins register first, so no plugin can take over a
built-in's name. A broken third-party package thus never disables a feature.
"""

from __future__ import annotations

import functools
import logging
from typing import Protocol, TypeVar

import pluggy

from amelio import hookspecs

__all__ = ["BUILTIN_PLUGINS", "ENTRY_POINT_GROUPS", "Named", "collect", "get_plugin_manager"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUPS = ("amelio.plugins", "amelio.evals")

#: Modules that hold Amelio's own hook implementations, in registration order; each
#: is registered under its module name.
BUILTIN_PLUGINS = (
    "amelio.evals.builtin",
    "amelio.routing.plugin",
    "amelio.llm.anthropic",
    "amelio.llm.openai",
    "amelio.llm.local",
    "amelio.llm.claude_cli",
    "amelio.improve.notifiers",
    "amelio.telegram.notifier",
    "amelio.search.engines.registry",
)


class Named(Protocol):
    """What a hook registers: a value with the name it is selected by."""

    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager; built-ins register before entry points."""
    import importlib.metadata

    pm = pluggy.PluginManager("amelio")
    pm.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    installed = importlib.metadata.entry_points()  # every distribution read once, not per group
    for group in ENTRY_POINT_GROUPS:
        for entry_point in installed.select(group=group):
            if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
                continue
            try:
                pm.register(entry_point.load(), name=entry_point.name)
            except Exception:  # one broken plugin must not take Amelio, or the others, down
                log.exception("could not load plugin %s from %s; skipped", entry_point.name, group)
    return pm


def collect(hook: str, cls: type[T]) -> dict[str, T]:
    """What every plugin registers through ``hook`` (a hook of :mod:`amelio.hookspecs`),
    by name, built-ins first.

    Each implementation gets a ``register`` callable of its own and is called on its
    own, so one that raises is logged and loses all it registered without touching
    the others. Each value must be an instance of ``cls``; a name already taken,
    by a built-in or by an earlier plugin, keeps its first value."""
    pm = get_plugin_manager()
    order = {name: i for i, (name, _plugin) in enumerate(pm.list_name_plugin())}
    impls = [
        impl
        for impl in getattr(pm.hook, hook).get_hookimpls()
        if not (impl.hookwrapper or impl.wrapper)  # a wrapper wraps calls; it registers nothing
    ]
    # Registration order, built-ins first, whatever tryfirst or trylast would say about
    # the order of calls: here the first to register a name keeps it.
    impls.sort(key=lambda impl: (impl.plugin_name not in BUILTIN_PLUGINS, order[impl.plugin_name]))
    found: dict[str, T] = {}
    owner: dict[str, str] = {}
    for impl in impls:
        plugin = impl.plugin_name
        registered: list[object] = []
        try:
            impl.function(**dict.fromkeys(impl.argnames, registered.append))
        except Exception:
            log.exception("plugin %s failed in %s; skipped", plugin, hook)
            continue
        for value in registered:
            if not isinstance(value, cls):
                log.warning(
                    "plugin %s registered %r in %s, not a %s; skipped",
                    plugin,
                    value,
                    hook,
                    cls.__name__,
                )
            elif value.name in found:
                first = owner[value.name]
                log.warning(
                    "plugin %s registered %s %r, which %s %s registered first; skipped",
                    plugin,
                    cls.__name__,
                    value.name,
                    "the built-in" if first in BUILTIN_PLUGINS else "plugin",
                    first,
                )
            else:
                found[value.name] = value
                owner[value.name] = plugin
    return found
