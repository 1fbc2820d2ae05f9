"""The demo workspace behind ``make demo``: example skills and an admin key.

Running it again reuses the workspace: skills re-import as no-ops (or as new
versions if the examples changed) and the saved admin key keeps working.
"""

from __future__ import annotations

import os
from pathlib import Path

import amelio
from amelio import keys, skills
from amelio.errors import ConfigError
from amelio.workspace import Workspace, init_workspace

__all__ = ["example_skills_path", "prepare_demo"]

_KEY_FILE = "demo-admin-key"


def example_skills_path() -> Path:
    """The example skills: shipped in the wheel, or in the source checkout."""
    package = Path(amelio.__file__).parent
    for candidate in (package / "_examples" / "skills",
                      package.parent.parent / "examples" / "skills"):
        if candidate.is_dir():
            return candidate
    raise ConfigError("The example skills are missing from this installation; "
                      "pass --skills PATH.")


def _admin_key(ws: Workspace) -> str:
    path = ws.settings.data_dir / _KEY_FILE
    if path.is_file():
        token = path.read_text(encoding="utf-8").strip()
        if keys.authenticate(ws.engine, token) is not None:
            return token
    _, token = keys.create_key(ws.engine, name="demo admin", role="admin")
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never world-readable
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


def prepare_demo(directory: Path, skills_path: Path | None = None) -> tuple[Workspace, str]:
    """Make the demo workspace ready to serve; returns it and an admin key."""
    ws, _ = init_workspace(directory)
    skills.import_skills(ws.engine, skills_path or example_skills_path(), author="demo")
    return ws, _admin_key(ws)
