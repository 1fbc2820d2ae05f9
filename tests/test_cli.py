"""The `amelio` command as a new user would run it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from amelio.cli import main
from amelio.workspace import keys
from amelio.workspace.folder import open_workspace


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def ws(tmp_path: Path, examples: Path) -> Path:
    path = tmp_path / "ws"
    assert run("init", str(path)).exit_code == 0
    assert run("-w", str(path), "skills", "import", str(examples)).exit_code == 0
    return path


def test_init_creates_a_migrated_workspace_and_keeps_an_existing_one(tmp_path: Path) -> None:
    path = tmp_path / "new"
    result = run("init", str(path))
    assert result.exit_code == 0
    assert "Created workspace" in result.output
    assert (path / "amelio.toml").is_file()
    assert (path / "skills").is_dir()
    (path / "amelio.toml").write_text("port = 9100\n")
    again = run("init", str(path))
    assert "Updated existing" in again.output
    assert (path / "amelio.toml").read_text() == "port = 9100\n"
    status = json.loads(run("-w", str(path), "db", "status", "--json").output)
    assert status["upToDate"] is True


def test_skills_list_show_export(ws: Path, tmp_path: Path) -> None:
    listed = run("-w", str(ws), "skills", "list")
    assert listed.exit_code == 0
    assert "code-review" in listed.output
    data = json.loads(run("-w", str(ws), "skills", "list", "--json").output)
    assert {"code-review", "git-help"} <= {s["name"] for s in data}
    shown = run("-w", str(ws), "skills", "show", "git-help")
    assert shown.exit_code == 0
    assert "triggers:" in shown.output
    assert "history:" in shown.output
    detail = json.loads(run("-w", str(ws), "skills", "show", "git-help", "--json").output)
    assert detail["version"] == 1
    assert detail["versions"][0]["author"] == "import"
    out = tmp_path / "out"
    exported = run("-w", str(ws), "skills", "export", str(out))
    assert exported.exit_code == 0
    assert (out / "git-help" / "SKILL.md").is_file()
    reimport = run("-w", str(ws), "skills", "import", str(out), "--json")
    assert json.loads(reimport.output)["created"] == []
    assert json.loads(reimport.output)["updated"] == []


def test_workspace_found_from_cwd_and_env(
    ws: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(ws / "skills")
    assert "code-review" in run("skills", "list").output
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AMELIO_WORKSPACE", str(ws))
    assert "code-review" in run("skills", "list").output


def test_project_fork_import_and_show(ws: Path, examples: Path, tmp_path: Path) -> None:
    result = run("-w", str(ws), "skills", "import", str(examples / "git-help"), "--project", "acme")
    assert result.exit_code == 0
    assert "project acme" in result.output
    data = json.loads(run("-w", str(ws), "skills", "list", "--project", "acme", "--json").output)
    scopes = {s["name"]: s["scope"] for s in data}
    assert scopes["git-help"] == "project"
    assert scopes["code-review"] == "global"
    assert "acme" in run("-w", str(ws), "projects", "list").output


def test_errors_exit_1_with_a_clear_message(ws: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "broken"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text("---\nname: broken\ntriggers: [unclosed\n---\n")
    result = CliRunner().invoke(main, ["-w", str(ws), "skills", "import", str(bad.parent)])
    assert result.exit_code == 1
    assert "Error:" in result.output
    assert "SKILL.md" in result.output
    assert "front matter" in result.output
    missing = CliRunner().invoke(main, ["-w", str(ws), "skills", "show", "nope"])
    assert missing.exit_code == 1
    assert "No skill named 'nope'" in missing.output
    nows = CliRunner().invoke(main, ["skills", "list"])
    assert nows.exit_code == 1
    assert "amelio init" in nows.output


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["skills", "import"],
        ["skills", "show", "x", "--version", "0"],
        ["keys", "create", "--role", "root", "--name", "n"],
        ["keys", "create", "--role", "admin"],
        ["serve", "--port", "70000"],
    ],
)
def test_usage_errors_exit_2(ws: Path, args: list[str]) -> None:
    result = CliRunner().invoke(main, ["-w", str(ws), *args])
    assert result.exit_code == 2, result.output


def test_every_command_has_help() -> None:
    def walk(group: object, path: list[str]) -> list[list[str]]:
        import click

        found = [path]
        if isinstance(group, click.Group):  # the root group imports its commands on demand
            ctx = click.Context(group)
            for name in group.list_commands(ctx):
                found += walk(group.get_command(ctx, name), [*path, name])
        return found

    for path in walk(main, []):
        result = run(*path, "--help")
        assert result.exit_code == 0, path
        assert "Usage:" in result.output, path


def test_keys_create_prints_once_and_stores_hash(ws: Path) -> None:
    result = CliRunner().invoke(
        main, ["-w", str(ws), "keys", "create", "--role", "bot", "--name", "telegram"]
    )
    assert result.exit_code == 0
    token = result.stdout.strip()
    assert token.startswith("amk_")
    workspace = open_workspace(ws)
    try:
        assert keys.authenticate(workspace.engine, token) is not None
        db_dump = "\n".join(
            str(row)
            for row in workspace.engine.connect().exec_driver_sql("SELECT * FROM api_keys").all()
        )
        assert token not in db_dump
    finally:
        workspace.dispose()
    listed = run("-w", str(ws), "keys", "list")
    assert "telegram" in listed.output
    assert token not in listed.output


def test_config_show_masks_secrets(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMELIO_LLM_API_KEY", "sk-supersecretvalue")
    result = run("-w", str(ws), "config", "show")
    assert result.exit_code == 0
    assert "supersecret" not in result.output
    assert "llm_provider" in result.output
    data = json.loads(run("-w", str(ws), "config", "show", "--json").output)
    assert data["llm_api_key"]["source"] == "env"


def test_demo_prepares_a_workspace_and_reuses_its_key(tmp_path: Path) -> None:
    first = run("demo", "--dir", str(tmp_path / "d"), "--no-serve")
    assert first.exit_code == 0
    assert "Admin API key:" in first.output
    # Nothing is served: no URL of a server that is not there, but how to start it.
    assert "http://" not in first.output
    assert f"amelio demo --dir {tmp_path / 'd'}" in first.output
    second = run("demo", "--dir", str(tmp_path / "d"), "--no-serve")
    key = [ln for ln in first.output.splitlines() if ln.startswith("Admin API key:")]
    assert key
    assert key[0] in second.output
    assert "code-review" in run("-w", str(tmp_path / "d"), "skills", "list").output


def test_demo_llm_puts_the_local_provider_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`amelio demo --llm FILE` writes the local provider on FILE into the demo's
    amelio.toml, replacing an LLM chosen before, then loads it or says why it cannot
    (here: llama-cpp-python is not importable); a file that is not GGUF is refused
    and the settings stay as they were."""
    folder = tmp_path / "d"
    assert run("demo", "--dir", str(folder), "--no-serve").exit_code == 0
    toml = folder / "amelio.toml"
    toml.write_text(toml.read_text() + 'llm_provider = "openai"\n', encoding="utf-8")
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    result = run("demo", "--dir", str(folder), "--no-serve", "--llm", str(model))
    assert result.exit_code == 1 and "pip install 'amelio[local]'" in result.output
    settings = tomllib.loads(toml.read_text(encoding="utf-8"))
    assert settings["llm_provider"] == "local"
    assert settings["llm_model_path"] == str(model.resolve())
    notes = tmp_path / "notes.txt"
    notes.write_text("hello", encoding="utf-8")
    before = toml.read_text(encoding="utf-8")
    result = run("demo", "--dir", str(folder), "--no-serve", "--llm", str(notes))
    assert result.exit_code == 1 and "is not a GGUF file" in result.output
    assert toml.read_text(encoding="utf-8") == before


def test_mistyped_workspace_is_not_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "typo"), "skills", "list"])
    assert result.exit_code == 1 and "is not an Amelio workspace" in result.output
    assert not (tmp_path / "typo").exists()
    monkeypatch.setenv("AMELIO_WORKSPACE", str(tmp_path / "typo"))
    result = CliRunner().invoke(main, ["db", "upgrade"])
    assert result.exit_code == 1 and "AMELIO_WORKSPACE" in result.output
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ("garbage", "is not a database URL"),
        ("mysql://u@h/db", "SQLite or PostgreSQL"),
    ],
)
def test_bad_database_url_is_a_clear_error(
    ws: Path, monkeypatch: pytest.MonkeyPatch, env: str, needle: str
) -> None:
    monkeypatch.setenv("AMELIO_DATABASE_URL", env)
    result = CliRunner().invoke(main, ["-w", str(ws), "skills", "list"])
    assert result.exit_code == 1 and needle in result.output
    assert "Traceback" not in result.output


def test_unreadable_inputs_are_errors_not_tracebacks(ws: Path, tmp_path: Path) -> None:
    latin1 = tmp_path / "promptfoo.yaml"
    latin1.write_bytes("assert: caf\xe9".encode("latin-1"))
    result = CliRunner().invoke(
        main, ["-w", str(ws), "evals", "import-promptfoo", str(latin1), "--skill", "git-help"]
    )
    assert result.exit_code == 1 and "not UTF-8" in result.output
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(main, ["-w", str(ws), "skills", "export", str(blocker / "sub")])
    assert result.exit_code == 1 and result.output.startswith("Error: cannot use")


def test_feedback_help_keeps_answer_feedback_and_feedback_events_apart() -> None:
    result = run("feedback", "--help")
    assert result.exit_code == 0, result.output
    answer = result.output.index("Answer feedback (")
    events = result.output.index("Feedback events (")
    assert answer < result.output.index("  give ") < events
    assert all(
        result.output.index(f"  {name} ") > events
        for name in ("ingest", "verify", "purge", "stats", "schema")
    )


@pytest.mark.parametrize("args", [("skills", "list"), ("skills", "list", "--json"), ("--help",)])
def test_a_reader_that_stops_early_ends_the_command_quietly(
    ws: Path, args: tuple[str, ...]
) -> None:
    """`amelio … | head`: once the reader has gone, the command stops without a word,
    with the status a shell shows for any Unix tool ended that way (128 + SIGPIPE)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes: a real, closed pipe
    try:
        done = subprocess.run(
            [sys.executable, "-m", "amelio", "-w", str(ws), *args],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert done.stderr.decode() == ""
    assert done.returncode == 141


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_other_output_errors_are_still_reported(ws: Path) -> None:
    """Only a closed pipe is quiet: a full disk, say, is an error to report."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "amelio", "-w", str(ws), "skills", "list"],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert "No space left on device" in done.stderr.decode()


def test_the_command_tables_explain_keys_project_and_demo_host_port() -> None:
    """docs/cli.md's rows are these help texts: each option a newcomer needs is in one."""
    from amelio.cli._docs import command_rows

    rows = dict(command_rows("keys create", "demo"))
    keys_help = next(what for usage, what in rows.items() if "keys create" in usage)
    demo_help = next(what for usage, what in rows.items() if usage.startswith("amelio demo"))
    assert "--project" in keys_help
    assert "--host" in demo_help and "--port" in demo_help and "make demo" in demo_help
    assert "--no-serve" in demo_help


def test_the_readme_says_where_a_pip_install_keeps_the_examples() -> None:
    """A pip user has no examples/ folder: the README's command finds the copy in the
    package, where the wheel's build puts it."""
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^\$ (python -c \"from amelio\.demo\.app import [^\n]*\")$", readme, re.M)
    assert found, "the README shows no command that prints where the examples are"
    done = subprocess.run(
        [sys.executable, *shlex.split(found.group(1))[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert (Path(done.stdout.strip()) / "git-help" / "SKILL.md").is_file()
    wheel = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    included = wheel["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert included["examples/skills"] == "amelio/_examples/skills"
    assert "`amelio/_examples/`" in readme
