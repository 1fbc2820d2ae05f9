"""Where the workspace is: the folder names Amelio uses and :func:`find_workspace`.

Kept apart from :mod:`amelio.workspace.config` so that a command can ask whether there is a
workspace without loading the settings machinery (pydantic-settings): ``amelio
eval --rules`` outside a workspace needs no more. Import its names from here.
"""

from __future__ import annotations

import os
from pathlib import Path

from amelio.errors import WorkspaceNotFound

__all__ = ["CONFIG_FILE", "DATA_DIR", "ENV_PREFIX", "find_workspace"]

CONFIG_FILE = "amelio.toml"
DATA_DIR = ".amelio"
ENV_PREFIX = "AMELIO_"


def find_workspace(
    explicit: str | os.PathLike[str] | None = None, *, cwd: Path | None = None
) -> Path:
    """The workspace: ``explicit``, else ``AMELIO_WORKSPACE``, else the nearest
    ``amelio.toml`` at or above ``cwd`` (as git finds ``.git``)."""
    chosen = explicit if explicit is not None else os.environ.get(ENV_PREFIX + "WORKSPACE")
    if chosen:
        path = Path(chosen).resolve()
        if not (path / CONFIG_FILE).is_file():
            via = "--workspace" if explicit is not None else "AMELIO_WORKSPACE"
            raise WorkspaceNotFound(
                f"{path} (from {via}) is not an Amelio workspace: it has no {CONFIG_FILE}. "
                f"Create one with `amelio init {chosen}`, or fix the path."
            )
        return path
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    raise WorkspaceNotFound(
        f"No Amelio workspace here: no {CONFIG_FILE} in {here} or above. "
        "Create one with `amelio init DIR`, or pass --workspace DIR / set AMELIO_WORKSPACE."
    )
