"""Settings: discovery, precedence, masking, errors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from amelio import db
from amelio.errors import ConfigError, InvalidInput, WorkspaceNotFound
from amelio.privacy.signing import signer
from amelio.workspace.config import Settings, load_settings
from amelio.workspace.discovery import find_workspace
from amelio.workspace.folder import init_workspace
from amelio.workspace.projects import ensure_project, valid_name, validate_name


def make_ws(path: Path, toml: str = "") -> Path:
    path.mkdir(parents=True)
    (path / "amelio.toml").write_text(toml, encoding="utf-8")
    return path


def test_workspace_found_from_nested_folder(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws")
    nested = ws / "a" / "b"
    nested.mkdir(parents=True)
    assert find_workspace(cwd=nested) == ws.resolve()


def test_workspace_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    near, env, explicit = (make_ws(tmp_path / n) for n in ("near", "env", "explicit"))
    monkeypatch.chdir(near)
    assert find_workspace() == near.resolve()
    monkeypatch.setenv("AMELIO_WORKSPACE", str(env))
    assert find_workspace() == env.resolve()
    assert find_workspace(explicit) == explicit.resolve()


def test_no_workspace_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceNotFound, match="amelio init"):
        find_workspace(cwd=tmp_path)


def test_env_wins_over_toml_wins_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_ws(tmp_path / "ws", 'llm_provider = "openai"\nport = 9001\nllm_model = "m1"\n')
    settings = load_settings(ws)
    assert (settings.llm_provider, settings.port, settings.llm_model) == ("openai", 9001, "m1")
    assert settings.search_backend == "embedded"
    monkeypatch.setenv("AMELIO_PORT", "9002")
    settings = load_settings(ws)
    assert settings.port == 9002
    assert settings.llm_model == "m1"
    sources = {r.name: r.source for r in settings.rows()}
    assert sources["port"] == "env"
    assert sources["llm_model"] == "amelio.toml"
    assert sources["vespa_url"] == "default"


def test_default_database_is_the_workspace_sqlite_file(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "ws")
    url = load_settings(ws).effective_database_url
    assert url == f"sqlite:///{(ws / '.amelio' / 'amelio.db').resolve()}"


def test_secrets_are_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_ws(tmp_path / "ws")
    monkeypatch.setenv("AMELIO_LLM_API_KEY", "sk-verysecretvalue123")
    monkeypatch.setenv("AMELIO_DATABASE_URL", "postgresql+psycopg://amelio:hunter2@db/amelio")
    rows = {r.name: r.value for r in load_settings(ws).rows()}
    assert "verysecret" not in rows["llm_api_key"]
    assert rows["llm_api_key"].startswith("sk-v")
    assert "hunter2" not in rows["database_url"]
    assert "***" in rows["database_url"]


def test_api_key_falls_back_to_provider_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_ws(tmp_path / "ws", 'llm_provider = "anthropic"\n')
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-anthropic")
    assert load_settings(ws).effective_llm_api_key == "from-anthropic"
    monkeypatch.setenv("AMELIO_LLM_API_KEY", "own")
    assert load_settings(ws).effective_llm_api_key == "own"


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("port = [", "invalid TOML"),
        ('port = "not a number"', "port"),
        ("no_such_setting = 1", "no_such_setting"),
    ],
)
def test_bad_settings_name_the_problem(tmp_path: Path, toml: str, needle: str) -> None:
    ws = make_ws(tmp_path / "ws", toml)
    with pytest.raises(ConfigError, match=needle):
        load_settings(ws)


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load_settings(make_ws(tmp_path / "ws"))
    with pytest.raises(Exception, match="frozen"):
        settings.port = 1  # type: ignore[misc]


def test_max_text_chars_defaults_to_what_the_eval_engine_takes() -> None:
    """The setting's default is written out in the settings table (which must not
    import the eval engine); the two limits are one number."""
    from amelio.evals import MAX_TEXT_CHARS

    assert Settings.model_fields["max_text_chars"].default == MAX_TEXT_CHARS


@pytest.mark.parametrize("name", ["default\n", "../acme", "acme/x", ".", ""])
def test_a_project_name_is_all_of_the_safe_alphabet(name: str) -> None:
    """A project's name names its learnings.md folder: ``$`` let a trailing newline in."""
    assert not valid_name(name)
    with pytest.raises(InvalidInput, match="Invalid project name"):
        validate_name(name)
    assert validate_name("acme-2_b") == "acme-2_b"


def test_the_database_and_the_secret_are_private(tmp_path: Path) -> None:
    """Every interaction and the key that signs tokens: readable by their owner only,
    whatever the umask lets other files be."""
    old = os.umask(0o022)
    try:
        ws, _ = init_workspace(tmp_path / "ws")
        try:
            with db.transaction(ws.engine) as conn:  # a write, while the pool holds
                ensure_project(conn, "acme")  # the file open: -wal and -shm exist
            signer(ws.settings)  # generates .amelio/secret_key
            data = ws.settings.data_dir
            modes = {
                p.name: stat.S_IMODE(p.stat().st_mode)
                for p in (data, *data.iterdir())
                if p.name.startswith(("amelio.db", "secret_key", ".amelio"))
            }
            assert modes == {
                ".amelio": 0o700,
                "amelio.db": 0o600,
                "amelio.db-wal": 0o600,
                "amelio.db-shm": 0o600,
                "secret_key": 0o600,
            }
        finally:
            ws.dispose()
        # A database named by URL gets the same, its new folder too.
        engine = db.create_engine(f"sqlite:///{tmp_path / 'elsewhere' / 'x.db'}")
        engine.dispose()
        assert stat.S_IMODE((tmp_path / "elsewhere").stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "elsewhere" / "x.db").stat().st_mode) == 0o600
    finally:
        os.umask(old)
