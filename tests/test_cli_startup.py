"""`amelio` starts fast: the commands a CI job or a newcomer runs first import no
database, service, template, numeric or LLM library.

The guard is the set of modules a fresh process imports (``python -X importtime``),
which does not depend on the machine; the milliseconds it took are only reported in
the failure messages (``benchmarks/cli_startup.py`` measures them against the
150 ms target). That holds with plugins installed: the plugin manager imports every
built-in plugin module, each light. The lazy machinery stays honest too: the root
group's table of commands and the lazy package namespaces are each checked against
what they stand for.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import click
import pluggy
import pytest
from click.testing import CliRunner

import amelio.cli
from amelio import hookspecs
from amelio.cli import main
from amelio.cli._common import COMMANDS
from amelio.plugins import BUILTIN_PLUGINS
from support.processes import IMPORT_PROBE, import_time

#: Libraries that none of the start-up commands below may import.
FORBIDDEN = (
    "sqlalchemy",
    "alembic",
    "pydantic_settings",
    "pydantic",
    "fastapi",
    "starlette",
    "uvicorn",
    "jinja2",
    "numpy",
    "openai",
    "anthropic",
    "httpx",
    "jsonschema",
    "yaml",
    "tantivy",
)
RULES = [
    {"id": "verdict", "type": "string_contains", "value": "Verdict"},
    {"id": "short", "type": "max_length", "value": 2000},
]
ANSWER = "## Verdict\n\nApprove.\n"


def _env() -> dict[str, str]:
    """The test's environment, without a workspace, at a known terminal width."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("AMELIO_WORKSPACE", "AMELIO_MAX_TEXT_CHARS")
    } | {"COLUMNS": "82"}  # click wraps help at 80, as CliRunner does


PROBE = IMPORT_PROBE


def imported(
    args: list[str], cwd: Path, code: str = PROBE, env: dict[str, str] | None = None
) -> tuple[float, set[str], subprocess.CompletedProcess[str]]:
    """Run ``amelio ARGS`` (or ``code``) under ``python -X importtime`` in a fresh process:
    the top-level cumulative import time in ms, the modules it imported, the process."""
    out = cwd / "modules.json"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        cwd=cwd,
        env=(env or _env()) | {"STARTUP_MODULES_OUT": str(out)},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    modules: set[str] = set(json.loads(out.read_text())) if out.exists() else set()
    ms, logged = import_time(done.stderr)
    return ms, modules | set(logged), done


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in FORBIDDEN)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "rules.json").write_text(json.dumps(RULES), encoding="utf-8")
    (tmp_path / "answer.md").write_text(ANSWER, encoding="utf-8")
    (tmp_path / "batch.jsonl").write_text(
        "".join(
            json.dumps({"id": f"o{i}", "text": ANSWER, "rules": RULES}) + "\n" for i in range(3)
        ),
        encoding="utf-8",
    )
    return tmp_path


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "Commands:"),
        (["route", "--help"], "Rank the skills that fit MESSAGE"),
        (["eval", "--rules", "rules.json", "answer.md"], "2 rules: 2 passed"),
        (["eval", "--batch", "batch.jsonl"], "3 of 3 outputs pass"),
    ],
)
def test_start_up_commands_import_nothing_heavy(
    files: Path, args: list[str], expected: str
) -> None:
    ms, modules, done = imported(args, files)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert expected in done.stdout
    where = f"`amelio {' '.join(args)}` imported in {ms:.0f} ms ({len(modules)} modules)"
    assert not _heavy(modules), f"{where}, including {_heavy(modules)}"
    commands = sorted(
        m for m in modules if m.startswith("amelio.cli.") and m != "amelio.cli._common"
    )
    if args == ["--help"]:
        assert not commands, f"{where}: --help imported command modules {commands}"
    else:
        assert len(commands) == 1, f"{where}: one command module, not {commands}"


def test_a_json_schema_rule_imports_jsonschema_when_it_is_used(tmp_path: Path) -> None:
    (tmp_path / "rules.json").write_text(
        json.dumps([{"id": "shape", "type": "json_schema", "schema": {"type": "object"}}]),
        encoding="utf-8",
    )
    (tmp_path / "answer.json").write_text('{"ok": true}', encoding="utf-8")
    _ms, modules, done = imported(["eval", "--rules", "rules.json", "answer.json"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "jsonschema" in modules
    assert not _heavy(modules - {m for m in modules if m.startswith("jsonschema")})


def test_route_on_a_workspace_opens_no_database_layer_once_it_has_a_snapshot(
    tmp_path: Path, examples: Path
) -> None:
    """The first `amelio route` goes through the database and saves a snapshot; the
    next one routes from it with the standard library's sqlite3 and numpy (for the
    message's embedding), and prints the same."""
    from amelio.skills import import_skills
    from amelio.workspace.folder import init_workspace

    ws, _ = init_workspace(tmp_path / "ws")
    import_skills(ws.engine, examples)
    ws.dispose()
    args = ["-w", str(tmp_path / "ws"), "route", "is this SQL injection safe?", "--json"]
    _ms, first_modules, first = imported(args, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "sqlalchemy" in first_modules  # no snapshot yet: the full path
    ms, modules, again = imported(args, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout and json.loads(again.stdout)["skills"]
    heavy = _heavy(modules - {m for m in modules if m.split(".")[0] == "numpy"})
    assert not heavy, f"`amelio route` from a snapshot imported {heavy} ({ms:.0f} ms)"


def test_library_entry_points_stay_cheap(tmp_path: Path) -> None:
    """``import amelio`` and the modules the commands above need load no database."""
    code = (
        "import amelio, amelio.skills, amelio.skills.model, amelio.knowledge, "
        "amelio.assistant.learnings, amelio.workspace.projects, amelio.evals.engine, "
        "amelio.cli.context\n"
        "import json, os, sys\n"
        "open(os.environ['STARTUP_MODULES_OUT'], 'w').write(json.dumps(list(sys.modules)))"
    )
    _ms, modules, done = imported([], tmp_path, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not _heavy(modules), _heavy(modules)


# -- the lazy root group ----------------------------------------------------------------


def _load_every_command_module() -> None:
    for info in pkgutil.iter_modules(amelio.cli.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"amelio.cli.{info.name}")


def test_the_command_table_matches_the_commands() -> None:
    """Each registered name is defined by the module the table names, and the listing's
    stand-in shows exactly the short help the command itself would, at any width."""
    ctx = click.Context(main)
    for name, (module, short_help) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None, f"amelio.cli.{module} defines no command {name!r}"
        assert command.callback is not None
        assert command.callback.__module__ == f"amelio.cli.{module}", name
        assert not command.hidden, f"{name}: the lazy listing does not hide commands"
        stand_in = click.Command(name, help=short_help)
        for limit in (20, 45, 60, 80, 1000):
            assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), (
                f"COMMANDS[{name!r}] in amelio/cli/_common.py: use "
                f"{command.get_short_help_str(10_000)!r}"
            )


def test_every_command_is_in_the_table() -> None:
    """A command added with ``@main.command`` must be in COMMANDS, or --help omits it."""
    _load_every_command_module()
    missing = sorted(set(main.commands) - set(COMMANDS))
    assert not missing, f"add {missing} to COMMANDS in amelio/cli/_common.py"


def test_the_lazy_help_is_the_help_of_the_loaded_commands(tmp_path: Path) -> None:
    """``amelio --help`` from a fresh process (nothing imported) is, byte for byte, the
    help click renders once every command is loaded."""
    _ms, modules, lazy = imported(["--help"], tmp_path)
    assert lazy.returncode == 0
    assert "amelio.cli.skills" not in modules
    _load_every_command_module()
    loaded = CliRunner().invoke(main, ["--help"], prog_name="python -m amelio")  # 80 wide
    assert loaded.exit_code == 0
    assert lazy.stdout == loaded.output


def test_a_mistyped_command_still_gets_suggestions() -> None:
    result = CliRunner().invoke(main, ["evl"])
    assert result.exit_code == 2
    assert "eval" in result.output


# -- lazy namespaces and plugins --------------------------------------------------------


@pytest.mark.parametrize(
    "package",
    [
        "amelio",
        "amelio.skills",
        "amelio.knowledge",
        "amelio.routing",
        "amelio.search",
        "amelio.search.engines",
    ],
)
def test_lazy_namespaces_resolve_every_public_name(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module._LAZY) == set(module.__all__) - {"__version__"}
    for name in module.__all__:
        value = getattr(module, name)
        assert value is getattr(importlib.import_module(module._LAZY.get(name, package)), name)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError):
        _ = module.no_such_name


SHOUT_PLUGIN = """
from amelio import hookimpl
from amelio.evals import RuleType, Verdict


def _shouts(params):
    return lambda text: Verdict(text.isupper(), "not all in capitals")


@hookimpl
def register_rule_types(register):
    register(RuleType("shouts", _shouts, description="the answer is in capitals"))
"""


def test_a_plugin_rule_type_loads_no_other_part_of_amelio(tmp_path: Path) -> None:
    """A rule type from an installed package (an entry point) makes `amelio eval` build
    the plugin manager, which imports every built-in plugin module: those must stay
    light. A second package that fails to import is logged and skipped."""
    site = tmp_path / "site"
    info = site / "amelio_shout-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: amelio-shout\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[amelio.evals]\nshout = amelio_shout\n\n[amelio.plugins]\nbroken = amelio_broken\n"
    )
    (site / "amelio_shout.py").write_text(SHOUT_PLUGIN)
    (site / "amelio_broken.py").write_text("raise ImportError('a dependency is missing')\n")
    (tmp_path / "rules.json").write_text(json.dumps([{"id": "loud", "type": "shouts"}]))
    (tmp_path / "answer.md").write_text("APPROVE.\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    args = ["eval", "--rules", "rules.json", "answer.md"]
    ms, modules, done = imported(args, tmp_path, env=_env() | {"PYTHONPATH": path})
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "1 rules: 1 passed" in done.stdout, done.stdout
    assert "could not load plugin broken" in done.stderr
    assert {"amelio_shout", "amelio.plugins", *BUILTIN_PLUGINS} <= modules
    where = f"`amelio eval` with a plugin imported in {ms:.0f} ms ({len(modules)} modules)"
    assert not _heavy(modules), f"{where}, including {_heavy(modules)}"
    assert "amelio.routing.router" not in modules, f"{where}, including the router"


def test_every_builtin_plugin_implements_plain_hooks() -> None:
    """Each built-in module implements at least one hook, and as a plain one: collect()
    calls no wrapper, and tryfirst or trylast would mean nothing to it."""
    default = {
        "wrapper": False,
        "hookwrapper": False,
        "optionalhook": False,
        "tryfirst": False,
        "trylast": False,
        "specname": None,
    }
    pm = pluggy.PluginManager("amelio")
    pm.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        module = importlib.import_module(name)
        found = {attr: pm.parse_hookimpl_opts(module, attr) for attr in dir(module)}
        found = {attr: opts for attr, opts in found.items() if opts is not None}
        assert found, f"{name} implements no hook"
        for attr, opts in found.items():
            assert dict(opts) == default, f"{name}.{attr}"
