"""The public API, settings, hooks and commands are all documented."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import click

import amelio
from amelio import hookspecs
from amelio.cli import main
from amelio.workspace.config import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_public_api_is_curated() -> None:
    assert sorted(amelio.__all__) == amelio.__all__, "keep __all__ sorted"
    for name in amelio.__all__:
        assert hasattr(amelio, name), name
    public = {n for n in dir(amelio) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(amelio, n)).__name__ == "module"}
    assert public - modules == set(amelio.__all__) - {"__version__"}


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    for name in Settings.model_fields:
        assert f"`{name}`" in text, name
        assert f"`AMELIO_{name.upper()}`" in text, name


def _signature(hook: Callable[..., object]) -> str:
    """The hook as its spec declares it, annotations as written."""

    def written(annotation: object) -> str:
        return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)

    signature = inspect.signature(hook)
    params = ", ".join(f"{p.name}: {written(p.annotation)}" for p in signature.parameters.values())
    return f"{hook.__name__}({params}) -> {written(signature.return_annotation)}"


def test_every_hook_is_documented_with_its_signature() -> None:
    """Plugin authors write their hooks from the docs, so each heading is the spec's
    whole signature: what ``register`` takes included."""
    text = (DOCS / "plugins.md").read_text()
    hooks = [getattr(hookspecs, n) for n in dir(hookspecs) if n.startswith("register_")]
    assert hooks
    for hook in hooks:
        assert f"### `{_signature(hook)}`" in text, _signature(hook)


def test_every_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()

    def walk(cmd: click.Command | None, path: list[str]) -> list[str]:
        assert cmd is not None, path
        if isinstance(cmd, click.Group):  # the root group imports its commands on demand
            ctx = click.Context(cmd)
            return [
                p
                for name in cmd.list_commands(ctx)
                for p in walk(cmd.get_command(ctx, name), [*path, name])
            ]
        return [" ".join(path)]

    for command in walk(main, []):
        assert f"amelio {command}" in text, command


def test_readme_shows_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text
    assert "make test" in text
