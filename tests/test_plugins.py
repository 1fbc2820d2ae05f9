"""One plugin registry: :func:`amelio.plugins.collect` and its one failure policy, the
typed hooks, and the public subpackages plugin authors import from."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from amelio import hookspecs
from amelio.hookspecs import hookimpl
from amelio.improve.notifiers import NotifierType
from amelio.plugins import BUILTIN_PLUGINS, collect, get_plugin_manager
from amelio.routing import ScoreFn, Scorer
from amelio.search.engines import EngineType

DOCS = Path(__file__).resolve().parent.parent / "docs"

#: Where plugin authors import from; docs/plugins.md sends them nowhere else.
PUBLIC = (
    "amelio.evals",
    "amelio.improve.notifiers",
    "amelio.llm",
    "amelio.routing",
    "amelio.search.engines",
    "amelio.text",
)


def _scorer(name: str, description: str = "a test scorer") -> Scorer:
    def build(skills: object) -> ScoreFn:
        return lambda message: {}

    return Scorer(name, build, description)


class First:
    @hookimpl
    def register_router_scorers(self, register: Callable[[object], None]) -> None:
        register(_scorer("plugin-a", "first"))
        register(_scorer("keywords", "a plugin's"))  # a built-in's name
        register("not a scorer")
        register(NotifierType("listed", lambda settings: None, "another hook's type"))


class Second:
    """Registered after First; trylast puts it before the built-ins in pluggy's own
    order, which must change nothing here."""

    @hookimpl(trylast=True)
    def register_router_scorers(self, register: Callable[[Scorer], None]) -> None:
        register(_scorer("plugin-a", "second"))
        register(_scorer("learned", "a plugin's"))
        register(_scorer("plugin-b", "second"))


class Broken:
    @hookimpl
    def register_router_scorers(self, register: Callable[[Scorer], None]) -> None:
        register(_scorer("half-done"))
        raise RuntimeError("plugin bug")


@pytest.fixture
def plugins() -> Iterator[None]:
    pm = get_plugin_manager()
    added = {"first": First(), "second": Second(), "broken": Broken()}
    for name, plugin in added.items():
        pm.register(plugin, name=name)
    try:
        yield
    finally:
        for plugin in added.values():
            pm.unregister(plugin)


@pytest.mark.usefixtures("plugins")
def test_collect_keeps_builtins_and_first_registrations(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="amelio.plugins")
    found = collect("register_router_scorers", Scorer)
    assert list(found) == ["keywords", "bm25", "hybrid", "learned", "plugin-a", "plugin-b"]
    assert found["keywords"].description != "a plugin's"
    assert found["learned"].description != "a plugin's"
    assert (found["plugin-a"].description, found["plugin-b"].description) == ("first", "second")
    assert "half-done" not in found  # a plugin that raised loses what it registered

    logged = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("plugin first registered 'not a scorer' in register_router_scorers, ")
        and m.endswith("not a Scorer; skipped")
        for m in logged
    ), logged
    assert any("plugin first registered NotifierType(name='listed'" in m for m in logged), logged
    assert (
        "plugin first registered Scorer 'keywords', which the built-in "
        "amelio.routing.plugin registered first; skipped"
    ) in logged
    assert (
        "plugin second registered Scorer 'plugin-a', which plugin first registered first; skipped"
    ) in logged
    assert "plugin broken failed in register_router_scorers; skipped" in logged
    broken = next(r for r in caplog.records if r.getMessage().startswith("plugin broken"))
    assert broken.exc_info is not None  # the traceback is in the log, for the plugin's author


@pytest.mark.usefixtures("plugins")
def test_a_broken_plugin_only_costs_its_own_registrations() -> None:
    """The other hooks, and the routing that uses this one, carry on."""
    from amelio.routing.router import Router
    from amelio.skills.model import SkillSpec

    skills = [SkillSpec(name="git-help", description="", triggers=("git",), keywords=())]
    assert Router(skills, "plugin-b").route("git push").names == ()
    assert Router(skills, "keywords").route("git push").names == ("git-help",)
    assert set(collect("register_search_engines", EngineType)) == {
        "embedded",
        "tantivy",
        "fts5",
        "vespa",
    }


def _public_types() -> dict[str, object]:
    found: dict[str, object] = {}
    for package in PUBLIC:
        module = importlib.import_module(package)
        found |= {name: getattr(module, name) for name in module.__all__}
    return found


@pytest.mark.parametrize("hook", [n for n in dir(hookspecs) if n.startswith("register_")])
def test_each_hook_registers_the_public_type_it_declares(hook: str) -> None:
    """The type in ``register``'s annotation is exported by a public subpackage, every
    built-in registers values of it, and collect() keeps them all under that type."""
    annotation = inspect.signature(getattr(hookspecs, hook)).parameters["register"].annotation
    match = re.fullmatch(r"Callable\[\[(\w+)\], None\]", str(annotation))
    assert match, f"{hook}: register is not typed as Callable[[T], None]: {annotation}"
    cls = _public_types().get(match[1])
    assert isinstance(cls, type), f"{hook}: {match[1]} is not exported by any of {PUBLIC}"
    registered: list[object] = []
    for impl in getattr(get_plugin_manager().hook, hook).get_hookimpls():
        if impl.plugin_name in BUILTIN_PLUGINS:
            impl.function(register=registered.append)
    assert registered and all(isinstance(value, cls) for value in registered), hook
    assert list(collect(hook, cls)) == [value.name for value in registered]  # type: ignore[attr-defined]


def _documented(module: ModuleType, name: str, value: object) -> bool:
    """Documented where a reader looks: a docstring of its own (not the one a
    dataclass or namedtuple makes up), the package's docstring naming it, or a ``#:``
    comment where it is assigned (constants and type aliases)."""
    if inspect.isclass(value) or inspect.isroutine(value):
        doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
        if doc and doc.strip() and not doc.startswith(f"{value.__name__}("):
            return True
    if re.search(rf"``{name}``|:(?:class|func|data):`~?[\w.]*\b{name}`", module.__doc__ or ""):
        return True
    path = Path(module.__file__ or "")
    files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
    assigned = re.compile(rf"^{name}\b\s*[:=]")
    for file in files:
        lines = file.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if assigned.match(line) and i and lines[i - 1].startswith("#:"):
                return True
    return False


@pytest.mark.parametrize("package", PUBLIC)
def test_public_subpackages_export_documented_names(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__doc__, f"{package} has no docstring"
    exported = module.__all__
    assert len(set(exported)) == len(exported), f"{package}.__all__ repeats a name"
    submodules = {m.name for m in pkgutil.iter_modules(getattr(module, "__path__", []))}
    for name in exported:
        assert not name.startswith("_"), f"{package}.__all__ lists the private {name}"
        assert name not in submodules, f"{package}.{name} would shadow the submodule"
        namespace: dict[str, object] = {}
        exec(f"from {package} import {name}", namespace)  # as a plugin author writes it
        value = namespace[name]
        if inspect.isclass(value) or inspect.isroutine(value):
            assert not value.__name__.startswith("_"), f"{package}.{name} is {value.__name__}"
            assert value.__module__.startswith("amelio."), f"{package}.{name} is not Amelio's"
        assert _documented(module, name, value), f"{package}.{name} is not documented"


def test_plugin_docs_send_authors_to_public_subpackages_only() -> None:
    """Every ``amelio.…`` the plugin guide names is a public subpackage, a name it
    exports, the entry-point groups or the test kit: never an internal module."""
    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    modules = ("amelio", "amelio.testing", *PUBLIC)
    allowed = {*modules, "amelio.plugins", "amelio.evals"}  # the entry-point groups
    allowed |= {f"{m}.{n}" for m in modules for n in importlib.import_module(m).__all__}
    named = set(re.findall(r"\bamelio(?:\.\w+)+", text))
    assert named >= set(PUBLIC), f"not in the guide: {set(PUBLIC) - named}"
    assert named <= allowed, f"internal: {named - allowed}"
