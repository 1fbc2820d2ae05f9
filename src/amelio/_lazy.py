"""Lazy package namespaces (PEP 562), so ``import amelio`` costs milliseconds.

A package lists which module each public name lives in; a name is imported the
first time it is read, then cached in the package's globals, so later reads cost
nothing. Type checkers read the package's ``if TYPE_CHECKING:`` imports instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = ["lazy_namespace"]


def lazy_namespace(
    package: str,
    names: Mapping[str, str],
    namespace: MutableMapping[str, Any],
    public: Sequence[str],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``names`` map each
    public name to the module it comes from; ``namespace`` is its ``globals()``."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
