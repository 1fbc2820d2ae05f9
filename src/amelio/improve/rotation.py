"""Write an approved skill version to its folder so that a crash never leaves a mix.

When a person approves a change to a file-backed skill, its folder moves from the
old state to the new one (here from version 7 to 8)::

    SKILL.md (v7)  -> SKILL.v7.md        a backup is named by the registry version it holds
    SKILL.v4.md    -> dropped            at most 3 backups: the newest versions
    new text       -> SKILL.md
    <name>.evals.json                    replaced, or removed when the new version has none

A ``SKILL.md`` that holds no registry version (a hand edit being replaced) is
kept as ``SKILL.edited.md`` instead, the last such edit only. The database keeps
every version; the backups are there to read and diff beside the file.
Backups an older Amelio wrote, when ``SKILL.v1.md`` meant "one back", are given
their version's name by :func:`rename_backups`.

The database is the source of truth, so the move happens in three steps around
its commit:

1. :func:`stage_rotation` writes every file whose bytes change as a hidden copy,
   ``.<final name>.amelio-new``, holding the file's complete new bytes (the old
   ``SKILL.md`` is *copied* into ``.SKILL.v7.md.amelio-new``, not renamed), fsyncs
   them and the folder, and then atomically writes the journal
   ``.amelio-rotation.json`` naming the files to move into place, the files to
   delete and the version being written. Nothing a reader sees has changed.
2. The caller commits its transaction; if that fails it calls :meth:`Rotation.abort`.
3. :meth:`Rotation.apply` renames each copy over its final name, deletes what the
   new state lacks, fsyncs the folder and removes the journal last.

Why a crash at any point leaves exactly the old or the new state:

* Before the journal exists, only hidden copies were written; the visible files
  are the old state, and :func:`recover` removes the copies ("cleaned").
* Once the journal exists, every copy is durable and complete. Each rename is
  atomic and moves one whole file, and copies are independent of one another
  (that is why old bytes are copied rather than chained renames), so finishing
  the renames whose copy still exists, then the deletes, reaches the new state
  from any partial apply, however often it is repeated ("forward").
* Which way to go is the database's answer: the journal records
  ``target_version`` and :func:`recover` asks ``committed(target_version)``. The
  commit happens after staging and before applying, so an uncommitted version has
  never had a file renamed, and removing the copies restores the old state
  ("back"). A commit that is lost after staging rolls back the same way.
* The journal goes last, after a folder fsync, so while any step of either
  direction may still be missing on disk the journal is still there to redo it.

Run :func:`recover` at startup and before reading or writing a skill folder.
One writer per folder at a time is the caller's job (it serialises on the
skill's database row); the journal only makes each single writer crash-safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from amelio.errors import Conflict, SkillFileError

__all__ = [
    "EDITED",
    "JOURNAL",
    "SKILL_FILE",
    "TEMP_SUFFIX",
    "Recovery",
    "Rotation",
    "backup_name",
    "is_backup",
    "recover",
    "rename_backups",
    "stage_rotation",
]

SKILL_FILE = "SKILL.md"
#: Where the last hand edit a rotation replaced is kept (it is no registry version).
EDITED = "SKILL.edited.md"
JOURNAL = ".amelio-rotation.json"
TEMP_SUFFIX = ".amelio-new"
_JOURNAL_FORMAT = 1
_BACKUP = re.compile(r"SKILL\.v([1-9][0-9]*)\.md")

Recovery = Literal["forward", "back", "cleaned"]
"""What :func:`recover` did: finished a committed rotation, undid an uncommitted one,
or removed copies left by a crash before the journal was written."""


def backup_name(version: int) -> str:
    """The backup of registry version ``version``."""
    return f"SKILL.v{version}.md"


def is_backup(name: str) -> bool:
    """Whether ``name`` is a file a rotation keeps beside ``SKILL.md``."""
    return name == EDITED or _BACKUP.fullmatch(name) is not None


def _backups(root: Path) -> dict[int, str]:
    """The version backups in ``root``, by version."""
    found = {}
    for entry in os.listdir(root):
        match = _BACKUP.fullmatch(entry)
        if match:
            found[int(match.group(1))] = entry
    return found


def _temp(name: str) -> str:
    return f".{name}{TEMP_SUFFIX}"


def _check_name(name: str) -> str:
    """Refuse anything but a plain visible file name, so no journal can reach outside."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
    return name


@dataclass(eq=False)
class Rotation:
    """A staged rotation: every new file is on disk under a hidden name, the journal too.

    ``writes`` are the final names whose ``.<name>.amelio-new`` copy will be moved
    into place, ``deletes`` the names the new state lacks. Call :meth:`apply` once
    the database commit of ``target_version`` succeeded, :meth:`abort` if it failed.
    """

    folder: Path
    target_version: int
    writes: tuple[str, ...]
    deletes: tuple[str, ...]
    _outcome: Literal["applied", "aborted"] | None = field(default=None, init=False, repr=False)

    def apply(self) -> None:
        """Move the new state into place; repeating it is a no-op.

        If this raises, the journal stays and :func:`recover` finishes the job.
        """
        if self._outcome == "aborted":
            raise RuntimeError("this rotation was aborted; stage a new one")
        if self._outcome is None:
            _finish(self.folder, self.writes, self.deletes, forward=True)
            self._outcome = "applied"

    def abort(self) -> None:
        """Drop the staged copies and the journal, leaving the old state; idempotent.

        Only valid before :meth:`apply`: once a file was renamed, the version is
        committed and the only way is forward.
        """
        if self._outcome == "applied":
            raise RuntimeError("this rotation was applied; it cannot be aborted")
        if self._outcome is None:
            _finish(self.folder, self.writes, self.deletes, forward=False)
            self._outcome = "aborted"


def stage_rotation(
    folder: str | Path,
    *,
    skill_md: str,
    evals_json: str | None,
    evals_name: str,
    target_version: int,
    current_version: int | None,
    current_md: str | None = None,
    backups: int = 3,
) -> Rotation:
    """Write the new state of ``folder`` under hidden names and journal it.

    ``current_version`` is the registry version the folder's ``SKILL.md`` holds: it
    is kept as ``SKILL.v<current_version>.md``, or, when None (a hand edit), as
    :data:`EDITED`. ``current_md`` is that version's text when ``SKILL.md`` no
    longer holds it (an approved hand edit is the new version, and stays).
    Keeps the ``backups`` newest version backups and drops older ones.
    ``evals_json`` replaces ``evals_name``, or ``None`` removes it. Refuses
    (:class:`~amelio.errors.Conflict`) while an earlier rotation awaits
    :func:`recover`. On an ``OSError`` the copies are removed again.
    """
    root = Path(folder)
    _check_name(evals_name)
    if evals_name == SKILL_FILE or is_backup(evals_name):
        raise ValueError(f"the evals file cannot be named {evals_name!r}")
    if backups < 0:
        raise ValueError("backups must be 0 or more")
    if (root / JOURNAL).exists():
        raise Conflict(
            f"a rotation of {root} is pending: run recover() on it first", folder=str(root)
        )
    _remove_strays(root)

    # The backup first, SKILL.md after: a reader during apply never loses a version.
    new: dict[str, bytes] = {}
    existing = _backups(root)
    outgoing = current_md.encode("utf-8") if current_md is not None else None
    if outgoing is None and (root / SKILL_FILE).is_file():
        outgoing = (root / SKILL_FILE).read_bytes()
    kept = set(sorted(existing, reverse=True)[:backups])
    if outgoing is not None and backups > 0:
        if current_version is None:
            new[EDITED] = outgoing
        else:
            kept = set(sorted({*existing, current_version}, reverse=True)[:backups])
            if current_version in kept:
                new[backup_name(current_version)] = outgoing
    deletes = [existing[v] for v in sorted(existing) if v not in kept]
    if backups == 0 and (root / EDITED).exists():
        deletes.append(EDITED)
    new[SKILL_FILE] = skill_md.encode("utf-8")
    if evals_json is not None:
        new[evals_name] = evals_json.encode("utf-8")
    elif (root / evals_name).exists():
        deletes.append(evals_name)
    return _stage(root, new, deletes, target_version)


def rename_backups(
    folder: str | Path, version_of: Callable[[bytes], int | None], current_version: int
) -> bool:
    """Give backups that an older Amelio named by position (``SKILL.v1.md`` was "one
    back") the name of the registry version they hold; True if any was renamed.

    ``version_of`` says which version a backup's bytes are (None: none, such as a
    declined hand edit, which becomes :data:`EDITED` when that name is free).
    ``current_version`` is committed (the rename is journaled under it, so
    :func:`recover` finishes it). A backup that cannot have its name (taken by
    another file) keeps its own.
    """
    root = Path(folder)
    if not root.is_dir() or (root / JOURNAL).exists():
        return False
    _remove_strays(root)
    existing = _backups(root)
    # Newest first under the old naming: the newest declined edit gets EDITED.
    moves: dict[str, str] = {}
    copies: dict[str, str] = {}  # a second file holding the same version: one is enough
    for n in sorted(existing):
        version = version_of((root / existing[n]).read_bytes())
        if version == n:
            continue
        target = EDITED if version is None else backup_name(version)
        if target in moves.values() and version is not None:
            copies[existing[n]] = target
        elif target not in moves.values():
            moves[existing[n]] = target
    while True:  # a move onto a file that stays where it is cannot happen
        leaving = {*moves, *(c for c, t in copies.items() if t in moves.values())}
        blocked = [s for s, t in moves.items() if (root / t).exists() and t not in leaving]
        if not blocked:
            break
        for source in blocked:
            del moves[source]
    new = {target: (root / source).read_bytes() for source, target in moves.items()}
    gone = [*moves, *(copy for copy, target in copies.items() if target in new)]
    deletes = [name for name in gone if name not in new]
    if not new and not deletes:
        return False
    _stage(root, new, deletes, current_version).apply()
    return True


def _stage(root: Path, new: dict[str, bytes], deletes: list[str], target_version: int) -> Rotation:
    """Write ``new`` as hidden copies, then the journal naming them and ``deletes``."""
    writes = tuple(new)
    try:
        for name in writes:
            _write_synced(root / _temp(name), new[name])
        _fsync_dir(root)
        journal = {
            "format": _JOURNAL_FORMAT,
            "target_version": target_version,
            "writes": list(writes),
            "deletes": deletes,
        }
        _write_synced(root / _temp(JOURNAL), json.dumps(journal, indent=1).encode("utf-8"))
        os.replace(root / _temp(JOURNAL), root / JOURNAL)
        _fsync_dir(root)
    except OSError:
        _discard(root, [JOURNAL, _temp(JOURNAL), *map(_temp, writes)])
        raise
    return Rotation(root, target_version, writes, tuple(deletes))


def recover(folder: str | Path, committed: Callable[[int], bool]) -> Recovery | None:
    """Bring ``folder`` back to a whole state after a crash; ``None`` if it already was.

    ``committed(version)`` says whether the database holds ``version``: if so an
    interrupted rotation is finished, otherwise it is undone. Safe to repeat, and
    safe to crash in: the journal is removed only when the folder is whole.
    """
    root = Path(folder)
    journal_path = root / JOURNAL
    if not journal_path.is_file():
        return "cleaned" if _remove_strays(root) else None
    target, writes, deletes = _read_journal(journal_path)
    forward = committed(target)
    _finish(root, writes, deletes, forward=forward)
    _remove_strays(root)
    return "forward" if forward else "back"


def _finish(root: Path, writes: Sequence[str], deletes: Sequence[str], *, forward: bool) -> None:
    """Roll a journaled rotation forward or back, then drop the journal; idempotent."""
    if forward:
        for name in writes:
            if (root / _temp(name)).exists():
                os.replace(root / _temp(name), root / name)
        for name in deletes:
            if (root / name).exists():
                os.unlink(root / name)
    else:
        for name in writes:
            if (root / _temp(name)).exists():
                os.unlink(root / _temp(name))
    _fsync_dir(root)
    if (root / JOURNAL).exists():
        os.unlink(root / JOURNAL)
        _fsync_dir(root)


def _read_journal(path: Path) -> tuple[int, list[str], list[str]]:
    """Parse and check the journal; it is written atomically, so a bad one was edited."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        target, writes, deletes = doc["target_version"], doc["writes"], doc["deletes"]
        if doc.get("format") != _JOURNAL_FORMAT or type(target) is not int:
            raise ValueError("unknown format")
        return target, [_check_name(n) for n in writes], [_check_name(n) for n in deletes]
    except (ValueError, KeyError, TypeError) as exc:
        raise SkillFileError(
            f"unreadable rotation journal ({exc}); delete it and the hidden "
            f"*{TEMP_SUFFIX} files beside it to keep the visible files as they are",
            file=str(path),
        ) from exc


def _remove_strays(root: Path) -> bool:
    """Remove hidden copies with no journal (a crash while staging); True if any."""
    if not root.is_dir():
        return False
    strays = [e for e in os.listdir(root) if e.startswith(".") and e.endswith(TEMP_SUFFIX)]
    for entry in strays:
        os.unlink(root / entry)
    if strays:
        _fsync_dir(root)
    return bool(strays)


def _discard(root: Path, names: Sequence[str]) -> None:
    """Best-effort removal of a failed stage's files; recover() is the backstop."""
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(root / name)


def _write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it, so a rename later publishes whole bytes.

    ``path`` is a hidden copy's name, removed before staging: it is made afresh
    (O_EXCL, O_NOFOLLOW), so a link planted there is never written through."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(path, flags, 0o644), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(root: Path) -> None:
    """Make renames and unlinks in ``root`` durable; Windows cannot open a directory."""
    if os.name == "nt":
        return
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
