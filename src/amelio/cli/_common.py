"""Plumbing shared by the command modules: the root group, errors, output."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

import amelio
from amelio.errors import AmelioError
from amelio.workspace import Workspace, open_workspace

F = TypeVar("F", bound=Callable[..., Any])


# -- plumbing ---------------------------------------------------------------------------


def handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AmelioError as exc:
            click.echo(f"Error: {exc.message}", err=True)
            sys.exit(1)
        except UnicodeDecodeError as exc:
            click.echo(f"Error: the input is not UTF-8 text ({exc.reason} at byte "
                       f"{exc.start}).", err=True)
            sys.exit(1)
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            click.echo(f"Error: cannot use{where}: {exc.strerror or exc}.", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def workspace(ctx: click.Context, *, migrate: bool = False) -> Workspace:
    """Open the workspace named by --workspace / AMELIO_WORKSPACE / an amelio.toml above."""
    ws: Workspace = open_workspace(ctx.obj.get("workspace"), migrate=migrate)
    ctx.call_on_close(ws.dispose)
    return ws


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            click.echo("  ".join("-" * w for w in widths))


def short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
project_option = click.option(
    "--project", "-p", default=None, help="Project (tenant); default: the global scope / default."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(amelio.__version__, prog_name="amelio")
@click.option(
    "--workspace", "-w", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Workspace folder (default: AMELIO_WORKSPACE, else the nearest amelio.toml above).",
)
@click.pass_context
def main(ctx: click.Context, workspace: Path | None) -> None:
    """Amelio: assistants and search that improve from their own use."""
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace


