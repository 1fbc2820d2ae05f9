"""A workspace: ``amelio.toml``, ``skills/`` and the ``.amelio/`` data folder.

:class:`Workspace` bundles the frozen settings with the engine they point at,
so the CLI and the server open a workspace the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from amelio import db
from amelio.errors import ConfigError
from amelio.workspace.config import Settings, load_settings
from amelio.workspace.discovery import CONFIG_FILE, DATA_DIR

__all__ = ["Workspace", "init_workspace", "open_workspace"]

_TOML_TEMPLATE = """\
# Amelio workspace settings. Every key can be overridden by an AMELIO_<KEY>
# environment variable; `amelio config show` prints the effective values.

# database_url = "postgresql+psycopg://amelio@localhost/amelio"   # default: .amelio/amelio.db
# llm_provider = "openai"            # anthropic | openai | local | claude-cli | none
# llm_model = "gpt-4o-mini"
# llm_base_url = "http://localhost:11434/v1"
# search_backend = "embedded"        # embedded (tantivy) | tantivy | fts5 | vespa
# host = "127.0.0.1"
# port = 8000
"""


@dataclass(frozen=True)
class Workspace:
    settings: Settings
    engine: sa.Engine

    @property
    def root(self) -> Path:
        return self.settings.workspace

    @property
    def skills_dir(self) -> Path:
        return self.root / "skills"

    def dispose(self) -> None:
        self.engine.dispose()


def init_workspace(
    path: str | os.PathLike[str], *, settings: Settings | None = None
) -> tuple[Workspace, bool]:
    """Create (or complete) a workspace at ``path`` and migrate its database.

    Returns the workspace and whether ``amelio.toml`` was created now; an
    existing one is never overwritten. ``settings`` opens it with those instead of
    its amelio.toml and AMELIO_* (a study's scratch workspaces, which must not
    follow an AMELIO_DATABASE_URL to the user's database).
    """
    root = Path(path).resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} exists and is not a folder.")
    root.mkdir(parents=True, exist_ok=True)
    (root / "skills").mkdir(exist_ok=True)
    (root / DATA_DIR).mkdir(exist_ok=True, mode=0o700)  # the database, the secret key
    gitignore = root / DATA_DIR / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("*\n", encoding="utf-8")
    toml = root / CONFIG_FILE
    created = not toml.exists()
    if created:
        toml.write_text(_TOML_TEMPLATE, encoding="utf-8")
    return open_workspace(root, migrate=True, settings=settings), created


def open_workspace(
    path: str | os.PathLike[str] | None = None,
    *,
    migrate: bool = False,
    settings: Settings | None = None,
) -> Workspace:
    """Open the workspace found from ``path`` (see
    :func:`amelio.workspace.discovery.find_workspace`).

    Without ``migrate`` the database must already be at the head migration.
    """
    settings = settings or load_settings(path)
    engine = db.connect(settings.effective_database_url, migrate=migrate)
    return Workspace(settings, engine)
