"""Plumbing shared by the command modules: the root group, errors, output.

The root group is lazy: it knows every command's name, module and one-line help
(:data:`COMMANDS`), so ``amelio --help`` lists them all without importing any, and
a command's module (with what it imports: the database, search, the service) is
imported only when that command runs. ``tests/test_cli_startup.py`` checks the
table against the commands themselves.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import wraps
from gettext import gettext as _
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from amelio._version import __version__
from amelio.errors import AmelioError

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

F = TypeVar("F", bound=Callable[..., Any])

#: Every top-level command: the module under ``amelio.cli`` that defines it, and the
#: one-line help ``amelio --help`` shows for it (its docstring's first sentence).
COMMANDS: dict[str, tuple[str, str]] = {
    "backup": (
        "ops",
        "Write a consistent copy of the workspace to FILE (a zip): database, "
        "search corpus, secret key, amelio.toml and learnings.md files.",
    ),
    "bench": (
        "sage",
        "A/B benchmark of a proposal: old vs new skill, eval rules and an LLM judge.",
    ),
    "cases": (
        "cases",
        "Pinned cases: answers a skill must keep passing when a proposal changes it.",
    ),
    "chat": ("assistant", "Ask the assistant; the answer streams, then its eval footnotes."),
    "config": ("admin", "Inspect settings."),
    "corpus": (
        "search",
        "The search corpus: the workspace's documents and their index (search_backend).",
    ),
    "db": ("admin", "Database migrations, and the move to another database."),
    "demo": ("admin", "Create (or reuse) a demo workspace with the example skills and serve it."),
    "eval": ("evals", "Check the text in FILE (default: stdin) against eval rules."),
    "evals": ("evals", "Manage eval rules."),
    "experiments": (
        "experiments",
        "Interleaving experiments: two rankers compared on a share of live sessions.",
    ),
    "export": ("ops", "Write every table to DIRECTORY as versioned JSONL, with a manifest."),
    "findings": (
        "findings",
        "Failures grouped into named problems that keep their id (amelio[findings]).",
    ),
    "feedback": ("feedback", "Answer feedback and feedback events: two different things."),
    "import": (
        "ops",
        "Load the export in DIRECTORY into this workspace, whose database must be empty.",
    ),
    "improve": (
        "improve",
        "Find underperforming skills and propose improvements (run it nightly).",
    ),
    "init": ("admin", "Create a workspace in DIRECTORY (amelio.toml, skills/, migrated database)."),
    "judgments": (
        "judgments",
        "Judgment lists: graded (query, document) pairs from clicks, an LLM or people.",
    ),
    "keys": ("admin", "API keys for the service."),
    "knowledge": ("knowledge", "Notebooks: sync sources, ask with citations, dead letters."),
    "learnings": ("context", "Rules learned from corrections, injected into prompts."),
    "log": (
        "assistant",
        "Record an exchange answered elsewhere; its evals run and it counts in quality.",
    ),
    "mcp": (
        "mcp",
        "Serve Amelio's MCP server on stdin/stdout (an MCP client starts this command).",
    ),
    "projects": ("admin", "Projects (tenants) of the workspace."),
    "prompt": ("context", "Print the full prompt Amelio would send for MESSAGE."),
    "proposals": ("improve", "Review proposed skill changes: list, show, diff, approve, reject."),
    "quality": (
        "assistant",
        "Quality metrics per skill: use, success rate, feedback, failing rules.",
    ),
    "relevance": (
        "judgments",
        "Measure rank profiles offline against a judgment list (NDCG@10, MRR, P@5).",
    ),
    "restore": (
        "ops",
        "Restore the backup FILE into the workspace; `-w DIR` may name a new folder.",
    ),
    "rollouts": (
        "rollouts",
        "Canary rollouts of approved versions (amelio proposals approve ID --canary PCT).",
    ),
    "route": ("route", "Rank the skills that fit MESSAGE, with scores and the terms that matched."),
    "sage": ("sage", "Sage: LLM-written skill updates from the evidence."),
    "schedule": ("ops", "The jobs `amelio serve` runs on its own: next runs and the last outcome."),
    "search": ("search", "Search the corpus, as POST /v1/search does (the impression is logged)."),
    "serve": ("admin", "Run the API service on the workspace (its database must be migrated)."),
    "signals": (
        "search",
        "Per (query, document) signals learned from impressions and feedback events.",
    ),
    "simulate": (
        "search",
        "Simulated users click on search results; report NDCG@10 and CTR@3 per profile.",
    ),
    "skills": ("skills", "Import, list, show, export and sync skills."),
    "study": (
        "study",
        "Measure whether the skill loop makes the assistant better, on SUITE's held-out tasks.",
    ),
    "telegram": (
        "telegram",
        "The Telegram bot: chat with the assistant, vote, fix, approve proposals.",
    ),
    "vespa": ("vespa", "Search at scale on Vespa (see docs/scaling.md#search-at-scale-on-vespa)."),
    "watch": (
        "knowledge",
        "Keep a notebook in sync with DIRECTORY's .md, .txt and .html files (Ctrl-C stops).",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands are imported when first asked for (click's lazy-loading
    recipe: ``list_commands`` names them all, ``get_command`` imports one).

    ``lazy_commands`` maps a name to ``(module under amelio.cli, short help)``;
    importing the module registers the command on this group as usual
    (``@main.command``). The help listing uses the short help for commands not
    imported yet; an unknown name loads them all, so click can suggest the closest.
    """

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            importlib.import_module(f"amelio.cli.{self.lazy_commands[cmd_name][0]}")
        return self.commands.get(cmd_name)

    def load_all(self, ctx: click.Context) -> None:
        """Import every command (shell completion and "did you mean" need them all)."""
        for name in self.list_commands(ctx):
            self.get_command(ctx, name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and self.get_command(ctx, args[0]) is None:
            self.load_all(ctx)  # an unknown name: let click suggest the closest ones
        return super().resolve_command(ctx, args)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:  # parsing prints --help, and may find the pipe closed
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _reader_gone()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # from any command, or a subcommand's --help
            _reader_gone()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, with a stand-in for each command not imported yet."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            if cmd is None:
                cmd = click.Command(name, help=self.lazy_commands[name][1])
            if not cmd.hidden:
                rows.append((name, cmd))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _cmd in rows)
            with formatter.section(_("Commands")):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])


# -- plumbing ---------------------------------------------------------------------------

#: The status of a command whose reader went away (``amelio … | head``): what a shell
#: shows for a Unix tool ended by SIGPIPE (128 + 13), as ``seq 100000 | head -1`` does.
CLOSED_PIPE_EXIT = 141


def _reader_gone() -> NoReturn:
    """Stop quietly: whoever read standard output closed it (``| head``, ``| grep -q``),
    so there is no one to tell anything. Standard output is pointed at the null device
    first, or Python would complain about the closed pipe as it flushes at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file (a test runner's capture): nothing to do
        pass
    sys.exit(CLOSED_PIPE_EXIT)


def handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BrokenPipeError:
            raise  # not an error to report: the root group ends the command quietly
        except AmelioError as exc:
            click.echo(f"Error: {exc.message}", err=True)
            sys.exit(1)
        except UnicodeDecodeError as exc:
            click.echo(
                f"Error: the input is not UTF-8 text ({exc.reason} at byte {exc.start}).", err=True
            )
            sys.exit(1)
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            click.echo(f"Error: cannot use{where}: {exc.strerror or exc}.", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def workspace(ctx: click.Context, *, migrate: bool = False) -> Workspace:
    """Open the workspace named by --workspace / AMELIO_WORKSPACE / an amelio.toml above."""
    from amelio.workspace.folder import open_workspace

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


#: Who a command acts as when no login name can be found.
NO_USER = "cli"


def cli_user() -> str:
    """Who runs this command: the name that goes into what it writes (a proposal's
    author, an approval's decider, a version's author). The login name as
    :func:`getpass.getuser` finds it (``LOGNAME``, ``USER``, ``LNAME``,
    ``USERNAME``, then the account database), else :data:`NO_USER`. Every command
    asks here, so the person who proposes and the one who approves are named the
    same way even where ``$USER`` is unset (cron, containers)."""
    import getpass  # here: a command that writes nothing does not pay for it

    try:
        return getpass.getuser() or NO_USER
    except (OSError, KeyError):  # a uid with no account and no name in the environment
        return NO_USER


def short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
project_option = click.option(
    "--project", "-p", default=None, help="Project (tenant); default: the global scope / default."
)
#: For commands about one project's data, where no project means ``default``.
default_project_option = click.option(
    "--project", "-p", default="default", show_default=True, help="Project (tenant)."
)


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="amelio")
@click.option(
    "--workspace",
    "-w",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Workspace folder (default: AMELIO_WORKSPACE, else the nearest amelio.toml above).",
)
@click.option(
    "--verbose",
    "-v",
    count=True,
    help="Log INFO (-v) or DEBUG (-vv) on stderr; default: warnings only.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    envvar="AMELIO_LOG_FORMAT",
    show_default=True,
    help="Log records as text, or as one JSON object per line (AMELIO_LOG_FORMAT).",
)
@click.pass_context
def main(ctx: click.Context, workspace: Path | None, verbose: int, log_format: str) -> None:
    """Amelio: assistants and search that improve from their own use."""
    from amelio.ops.logs import configure_logging

    configure_logging(verbose, log_format)
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace
    ctx.obj["log_format"] = log_format
