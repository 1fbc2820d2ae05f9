"""The reference tables of docs/configuration.md and docs/cli.md, built from the code.

cog runs these functions from markers inside the Markdown: ``make docs`` rewrites
the tables, and ``cog --check`` in ``make test`` fails when a table no longer
matches :class:`~amelio.workspace.config.Settings` or the click commands. A setting
or a command therefore cannot change without its documentation changing with it,
while the prose around each table stays hand-written.

It lives in the package rather than beside the docs so that ruff, mypy and the
import contracts hold it to the same standard as the code it describes, and the
tests import it without path tricks. Nothing imports it at run time.
"""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import click
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from amelio.cli._common import main
from amelio.workspace.config import Settings
from amelio.workspace.discovery import ENV_PREFIX

__all__ = [
    "cell",
    "command_rows",
    "command_table",
    "help_line",
    "leaf_commands",
    "root_usage",
    "settings_table",
    "synopsis",
]

# -- Markdown ----------------------------------------------------------------------------


def cell(text: str) -> str:
    """Text made safe for one cell of a Markdown table.

    A ``|`` would end the cell even inside a code span, so it is escaped everywhere;
    outside code spans ``<`` is escaped too, or ``<workspace>`` would render as an
    unknown HTML tag and vanish.
    """
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;")
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    return cell(f"`{text}`")


# -- settings ----------------------------------------------------------------------------


def settings_table(model: type[BaseModel] = Settings) -> str:
    """Every setting, in the order :class:`Settings` (or MODEL) declares them."""
    lines = [
        "| setting | environment variable | default | values | what it does |",
        "|---|---|---|---|---|",
    ]
    for name, field in model.model_fields.items():
        env = ENV_PREFIX + name.upper()
        lines.append(
            f"| `{name}` | `{env}` | {_default(name, field)} | {_values(field)} "
            f"| {cell(field.description or '')} |"
        )
    return "\n".join(lines) + "\n"


def _default(name: str, field: FieldInfo) -> str:
    if name == "workspace":  # the field's "." is replaced by discovery before any use
        return "discovered"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return _code(str(value).lower())
    if value == "":
        return "empty"
    return _code(str(value))


def _values(field: FieldInfo) -> str:
    """What a value may be, from the field's type and constraints."""
    annotation = field.annotation
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        annotation = args[0] if len(args) == 1 else annotation
    if get_origin(annotation) is Literal:
        text = ", ".join(f"`{v}`" for v in get_args(annotation))
    elif annotation is bool:
        text = "`true`, `false`"
    elif annotation is SecretStr:
        text = "text, masked"
    elif annotation is Path:
        text = "folder"
    elif annotation in (int, float):
        text = "integer" if annotation is int else "number"
        bounds = _bounds(field.metadata)
        text += f", {bounds}" if bounds else ""
    else:
        text = "text"
    return cell(text + (", or unset" if optional else ""))


def _bounds(metadata: list[Any]) -> str:
    low = high = ""
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low = f"≥ {m.ge}"
        elif isinstance(m, annotated_types.Gt):
            low = f"> {m.gt}"
        elif isinstance(m, annotated_types.Le):
            high = f"≤ {m.le}"
        elif isinstance(m, annotated_types.Lt):
            high = f"< {m.lt}"
    if low.startswith("≥") and high.startswith("≤"):
        return f"{low[2:]} to {high[2:]}"
    return " and ".join(b for b in (low, high) if b)


# -- commands ----------------------------------------------------------------------------


def command_table(*names: str) -> str:
    """A table of the commands NAMES name, a group standing for all its subcommands.

    ``command_table("init", "db", "feedback give")`` lists ``amelio init``, every
    ``amelio db …`` command and ``amelio feedback give``.
    """
    lines = ["| command | what |", "|---|---|"]
    lines += [f"| `{cell(usage)}` | {cell(what)} |" for usage, what in command_rows(*names)]
    return "\n".join(lines) + "\n"


def command_rows(*names: str) -> list[tuple[str, str]]:
    """(synopsis, help) for each command NAMES name, subcommands in alphabetical order."""
    rows: list[tuple[str, str]] = []
    for name in names:
        path = name.split()
        for leaf_path, leaf in _leaves(_command(path), path):
            rows.append((synopsis(leaf, ["amelio", *leaf_path]), help_line(leaf)))
    return rows


def root_usage() -> str:
    """The root command's options, as ``amelio [OPTIONS] COMMAND …`` spells them."""
    return f"`{synopsis(main, ['amelio'])} COMMAND …`\n"


def synopsis(command: click.Command, path: list[str]) -> str:
    """``amelio db copy --to URL [--force] [--json]``: arguments, then required
    options, then the others, each in the order the command declares them."""
    args = [p for p in command.params if isinstance(p, click.Argument)]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    pieces = [*path, *map(_argument, args)]
    pieces += [_option(o) for o in options if o.required]
    pieces += [_option(o) for o in options if not o.required]
    return " ".join(pieces)


def _command(path: list[str]) -> click.Command:
    command: click.Command = main
    for i, name in enumerate(path):
        found = None
        if isinstance(command, click.Group):
            found = command.get_command(click.Context(command), name)
        if found is None:
            raise ValueError(f"no command `amelio {' '.join(path[: i + 1])}`")
        command = found
    return command


def _leaves(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    if not isinstance(command, click.Group):
        return [(path, command)]
    ctx = click.Context(command)
    return [
        leaf
        for name in command.list_commands(ctx)
        for leaf in _leaves(_command([*path, name]), [*path, name])
    ]


def help_line(command: click.Command) -> str:
    """The whole help text, as one line: click's ``\\b`` markers dropped, and
    nothing after ``\\f`` (click hides that part from ``--help`` too)."""
    text = inspect.cleandoc(command.help or "").split("\f")[0]
    return " ".join(w for line in text.splitlines() if line.strip() != "\b" for w in line.split())


def _metavar(param: click.Parameter) -> str:
    """The parameter's own metavar, else its choices, else (for an option) a short
    name for its type: ``N`` for an integer, ``X`` for a number, ``DIR``, ``FILE``.
    An argument keeps its name, which its command's help text refers to."""
    kind = param.type
    if param.metavar:
        return param.metavar
    if isinstance(kind, click.Choice):
        return "|".join(str(c) for c in kind.choices)
    if isinstance(param, click.Argument):
        return (param.name or "value").upper()
    if isinstance(kind, click.types.IntParamType):
        return "N"
    if isinstance(kind, click.types.FloatParamType):
        return "X"
    if isinstance(kind, click.Path) and not (kind.file_okay and kind.dir_okay):
        return "DIR" if kind.dir_okay else "FILE"
    return (param.name or "value").upper()


def _argument(arg: click.Argument) -> str:
    text = _metavar(arg)
    if not arg.required:
        text = f"[{text}]"
    return text + ("…" if arg.nargs == -1 else "")


def _option(option: click.Option) -> str:
    longs = [o for o in option.opts if o.startswith("--")]
    text = (longs or option.opts)[0]
    if option.secondary_opts:
        text += "/" + option.secondary_opts[0]
    elif not option.is_flag and not option.count:
        text += " " + _metavar(option)
    if not option.required:
        text = f"[{text}]"
    return text + ("…" if option.multiple or option.count else "")


def leaf_commands() -> list[tuple[list[str], click.Command]]:
    """Every command that runs something (groups stand for their subcommands)."""
    return _leaves(main, [])
