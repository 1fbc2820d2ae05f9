"""The files of a synced Agent Skills folder (:mod:`amelio.skills.sync`): the state
file, a skill's files and their hash, writing a version with the rotation, and the
links that would lead the sync out of its folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import watchfiles

from amelio.errors import InvalidInput, SkillFileError
from amelio.improve import rotation
from amelio.skills import files
from amelio.skills.model import Skill, SkillSpec

__all__ = [
    "STATE_FILE",
    "evals_json",
    "files_hash",
    "link_out",
    "load_state",
    "save_state",
    "skill_folders",
    "state_entry",
    "watch_filter",
    "write_version_files",
]

STATE_FILE = ".amelio-sync.json"
_STATE_FORMAT = 1


# -- the state file -----------------------------------------------------------------------


def load_state(root: Path, project: str | None) -> dict[str, dict[str, Any]]:
    """The per-skill entries of ``DIR/.amelio-sync.json`` (empty when there is none)."""
    path = root / STATE_FILE
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != _STATE_FORMAT or not isinstance(doc.get("skills"), dict):
            raise ValueError("unknown format")
    except (ValueError, AttributeError, UnicodeDecodeError) as exc:
        raise SkillFileError(
            f"unreadable sync state ({exc}); delete it and sync again: "
            "files that match the registry are recognised, others proposed",
            file=str(path),
        ) from exc
    if doc.get("project") != project:
        was = doc.get("project")
        raise InvalidInput(
            f"{root} is synced for {'project ' + repr(was) if was else 'the global view'}; "
            f"sync it with {'--project ' + str(was) if was else 'no --project'}, or use "
            "another folder.",
            folder=str(root),
        )
    return {str(k): dict(v) for k, v in doc["skills"].items() if isinstance(v, dict)}


def save_state(root: Path, project: str | None, entries: dict[str, dict[str, Any]]) -> None:
    """Replace the state file atomically, so a crash leaves the old one or the new one."""
    doc = {
        "format": _STATE_FORMAT,
        "project": project,
        "skills": {k: entries[k] for k in sorted(entries)},
    }
    temp = root / f".{STATE_FILE}{rotation.TEMP_SUFFIX}"
    temp.unlink(missing_ok=True)  # a leftover, or a link planted to be written through
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(doc, indent=1) + "\n")
    os.replace(temp, root / STATE_FILE)


# -- reading and writing one skill folder --------------------------------------------------


def files_hash(folder: Path, name: str) -> str:
    """SKILL.md and the evals side file, as one hash: either changing is an edit."""
    digest = hashlib.sha256((folder / files.SKILL_FILE).read_bytes())
    evals_path = folder / f"{name}.evals.json"
    digest.update(b"\0" + (evals_path.read_bytes() if evals_path.is_file() else b"-"))
    return digest.hexdigest()


def evals_json(spec: SkillSpec) -> str | None:
    """The evals side file of ``spec`` as written (None: it has none)."""
    if spec.evals is None:
        return None
    return (
        json.dumps(
            {"version": 1, "skill": spec.name, "rules": [dict(r) for r in spec.evals]},
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )


def write_version_files(
    folder: Path, skill: Skill, current: int | None, replaced: SkillSpec | None
) -> str:
    """Write the registry's version with the rotation; returns the new files' hash.

    ``current`` is the registry version the folder's SKILL.md holds (None: a hand
    edit, kept as SKILL.edited.md). With ``replaced``, SKILL.md already holds the
    registry's version (an approved hand edit): it stays as written, and
    ``replaced``, version ``current``, becomes the backup.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rotation.recover(folder, lambda version: skill.version >= version)
    skill_md, rules = files.render_skill_md(skill.spec), evals_json(skill.spec)
    evals_path = folder / f"{skill.name}.evals.json"
    if replaced is not None:  # bytes, not text: no newline is translated
        skill_md = (folder / files.SKILL_FILE).read_bytes().decode("utf-8")
        rules = evals_path.read_bytes().decode("utf-8") if evals_path.is_file() else None
    staged = rotation.stage_rotation(
        folder,
        skill_md=skill_md,
        evals_json=rules,
        evals_name=evals_path.name,
        target_version=skill.version,
        current_version=current,
        current_md=None if replaced is None else files.render_skill_md(replaced),
    )
    staged.apply()  # the version is committed already: there is nothing to wait for
    return files_hash(folder, skill.name)


def state_entry(skill: Skill, files_hash: str) -> dict[str, Any]:
    """What the state file remembers of a skill's files as this sync wrote them."""
    return {
        "version": skill.version,
        "scope": skill.scope,
        "registryHash": skill.spec.content_hash(),
        "filesHash": files_hash,
    }


def link_out(root: Path, name: str) -> Path | None:
    """The first path of skill ``name``'s folder (the folder itself, or a file in it)
    that is a symlink leading out of ``root``: the sync never reads or writes there."""
    folder = root / name
    found = [folder]
    if folder.is_dir() and folder.resolve().is_relative_to(root):
        found += sorted(folder.iterdir())
    for path in found:
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            return path
    return None


def skill_folders(root: Path) -> list[str]:
    """The folders of ``root`` that hold a SKILL.md (hidden ones left out)."""
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / files.SKILL_FILE).is_file()
    )


def watch_filter(root: Path) -> Callable[[watchfiles.Change, str], bool]:
    """Files a person edits: no dot-files (state, journals, copies), no backups."""

    def keep(change: watchfiles.Change, path: str) -> bool:
        try:
            parts = Path(path).resolve().relative_to(root).parts
        except ValueError:
            return False
        return not any(p.startswith(".") for p in parts) and not rotation.is_backup(parts[-1])

    return keep
