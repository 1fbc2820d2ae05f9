"""Backup and restore of a SQLite workspace: one zip file, checked before it is used.

A workspace's state on SQLite is more than its database, so a backup holds the
database (wherever ``database_url`` puts it), the search corpus (its own SQLite
file), the generated secret key (the feedback chain, feedbackTokens, sessions
and user pseudonyms are keyed by it: without it ``amelio feedback verify``
fails), ``amelio.toml``, the ``projects/*/learnings.md`` mirrors (a hand edit not
yet read back lives only there) and ``manifest.json``
(:mod:`amelio.ops.archive`): format, versions, migration, time, each member's
size and SHA-256, the database's rows per table and a fingerprint of the key.
``skills/`` is left out: the database holds every version and ``amelio skills
export`` writes the files back. docs/scaling.md has the table and the operator's
view.

**Consistent while the service writes.** Each database is copied with SQLite's
online backup API in one step, one read transaction: exactly what was committed
at one instant, WAL included, and in WAL mode that reader never blocks the
writer. The mirrors are copied *after* the database, so a mirror is as new as
the database's record of it or newer, and reading it back after a restore
replays a later change instead of undoing an earlier one.

**Restore checks before it writes.** The manifest is bounded before it is read
(its size, the archive's entry count) and every member is read no further than
the size its manifest gives; then every member's SHA-256, the migration, the
database's rows and the names in it that become paths are checked; a target
whose database another process holds open (``amelio serve``) is refused, since
it would go on writing through its old file handles; a target holding data needs
``force``. A refused restore writes nothing. Only then is each member written
beside its destination and renamed into place, the database last (a crash in
those few renames can leave a mix: restoring again with ``force`` completes it).
An older backup is upgraded after the restore; one from a migration this code
does not know is refused. PostgreSQL is ``pg_dump``'s job, and both say so.

**A restore writes the workspace's own files only.** The database lands in the
target's ``.amelio/amelio.db`` whatever the backup's settings say, and ``force``
replaces only the files a backup holds, there. A backup may come from someone
else: its ``amelio.toml`` loses its addresses and secrets unless asked
(:mod:`amelio.ops.backup_config`), and the report names what it left out.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from amelio import db
from amelio._version import __version__
from amelio.errors import AmelioError, ConfigError, Conflict, InvalidInput
from amelio.ops.archive import (
    BACKUP,
    MANIFEST,
    Archive,
    Manifest,
    Member,
    bad_name,
    check_zip_member,
    member,
    open_zip,
    zip_manifest,
)
from amelio.ops.backup_config import RestoredConfig, restored_config
from amelio.ops.sqlite_files import (
    check_not_in_use,
    corpus_holds_data,
    database_holds_data,
    known_migrations,
    migration_of,
    rows_per_table,
    with_engine,
)
from amelio.privacy.signing import Signer, equal, forget_cached_key
from amelio.workspace.config import Settings, load_settings
from amelio.workspace.discovery import CONFIG_FILE, DATA_DIR
from amelio.workspace.projects import validate_name

__all__ = [
    "BackupReport",
    "RestoreReport",
    "backup_workspace",
    "read_manifest",
    "restore_workspace",
]

DATABASE = f"{DATA_DIR}/amelio.db"
CORPUS = f"{DATA_DIR}/search/corpus.db"
SECRET_KEY = f"{DATA_DIR}/secret_key"
_SIDECARS = ("-wal", "-shm", "-journal")
#: Members a restore reads into memory, not through to a file.
_SMALL = {CONFIG_FILE: 1 << 20, SECRET_KEY: 4096}


@dataclass(frozen=True)
class BackupReport:
    path: Path
    size: int
    manifest: Manifest

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "bytes": self.size, "manifest": self.manifest.to_dict()}


@dataclass(frozen=True)
class RestoreReport:
    """``replaced``: the target held data (restored with ``force``); ``removed``: its
    files the backup does not have (a corpus, a key, mirrors of other projects)."""

    root: Path
    database: Path
    manifest: Manifest
    replaced: bool
    removed: tuple[str, ...]
    migration: str
    #: Settings of the backup's amelio.toml the restore left out (see backup_config).
    dropped: tuple[str, ...] = ()

    @property
    def upgraded(self) -> bool:
        return self.migration != self.manifest.migration

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace": str(self.root),
            "database": str(self.database),
            "replaced": self.replaced,
            "removed": list(self.removed),
            "droppedSettings": list(self.dropped),
            "migration": {"backup": self.manifest.migration, "now": self.migration},
            "manifest": self.manifest.to_dict(),
        }


# -- backup -----------------------------------------------------------------------------


def backup_workspace(
    settings: Settings, dest: Path, *, force: bool = False, now: datetime | None = None
) -> BackupReport:
    """Write a consistent copy of the workspace to the zip file ``dest`` (a folder:
    a file named after the time inside it); safe while ``amelio serve`` writes."""
    root = settings.workspace.resolve()
    database = _sqlite_database(settings, root, "backup")
    if not database.is_file():
        raise ConfigError(
            f"There is no database at {database} to back up: `amelio db upgrade` creates it."
        )
    if not (root / CONFIG_FILE).is_file():
        raise ConfigError(f"{root} is not an Amelio workspace: it has no {CONFIG_FILE}.")
    now = now or datetime.now(UTC)
    if dest.is_dir():
        dest = dest / f"amelio-backup-{now:%Y%m%dT%H%M%SZ}.zip"
    if dest.exists() and not force:
        raise Conflict(f"{dest} exists: pass --force to replace it, or name another file.")
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".amelio-backup-", dir=dest.parent) as scratch:
        staged: dict[str, Path] = {DATABASE: Path(scratch, "amelio.db")}
        _snapshot(database, staged[DATABASE])
        if (root / CORPUS).is_file():
            staged[CORPUS] = Path(scratch, "corpus.db")
            _snapshot(root / CORPUS, staged[CORPUS])
        # After the databases: see "consistent while the service writes" above.
        for rel in _plain_files(root):
            staged[rel] = Path(scratch, f"file-{len(staged)}")
            shutil.copyfile(root / rel, staged[rel])
        key_source, fingerprint = _key_of(settings, staged.get(SECRET_KEY))
        manifest = Manifest(
            format=BACKUP,
            amelio_version=__version__,
            migration=migration_of(staged[DATABASE]),
            created_at=now,
            files=tuple(member(path, rel) for rel, path in staged.items()),
            tables=rows_per_table(staged[DATABASE]),
            key_source=key_source,
            key_fingerprint=fingerprint,
        )
        archive = Path(scratch, "backup.zip")
        _write_zip(archive, manifest, staged)
        os.replace(archive, dest)
    return BackupReport(dest, dest.stat().st_size, manifest)


def _snapshot(source: Path, copy: Path) -> None:
    """Copy a live SQLite database as committed at one instant, as one file."""
    src = sqlite3.connect(f"{source.as_uri()}?mode=rw", uri=True, timeout=30)
    with closing(src), closing(sqlite3.connect(copy)) as dst:
        src.backup(dst)  # every page in one step: one read transaction on the source
        dst.execute("PRAGMA journal_mode=DELETE")  # self-contained: no -wal beside it


def _plain_files(root: Path) -> list[str]:
    found = [CONFIG_FILE]
    if (root / SECRET_KEY).is_file():
        found.append(SECRET_KEY)
    found += sorted(
        p.relative_to(root).as_posix() for p in root.glob("projects/*/learnings.md") if p.is_file()
    )
    return found


def _write_zip(path: Path, manifest: Manifest, staged: dict[str, Path]) -> None:
    # 0600: the archive holds the secret key and every stored interaction.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as raw:
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(MANIFEST, manifest.dumps())
            for rel, src in staged.items():
                archive.write(src, rel)
        raw.flush()
        os.fsync(raw.fileno())


# -- restore ----------------------------------------------------------------------------


def read_manifest(archive: Path) -> Manifest:
    """The manifest of the backup ``archive``, without checking its members."""
    backup = Archive(archive, BACKUP)
    with open_zip(backup) as zf:
        return zip_manifest(zf, backup)


def restore_workspace(
    archive: Path, target: Path, *, force: bool = False, with_config: bool = False
) -> RestoreReport:
    """Restore the backup ``archive`` into the folder ``target`` (made when missing).

    The target's database must not be open in another process, and a target that
    holds data is only replaced with ``force``. The backup's amelio.toml keeps its
    addresses and secrets only ``with_config``. In the calling process, settings
    and engines opened on ``target`` before the restore are stale afterwards.
    """
    root = target.resolve()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} exists and is not a folder.")
    backup = Archive(archive, BACKUP)
    with open_zip(backup) as zf:
        manifest = zip_manifest(zf, backup)
        _check_members(zf, manifest, backup)
        for entry in manifest.files:  # every byte, before anything is written
            _copy_member(zf, entry, backup, None)
        _check_migration(manifest.migration)
        config = restored_config(_small(zf, CONFIG_FILE), with_config=with_config)
        settings = _settings_after(config, root)
        database = _target_database(settings, root)
        _check_key(zf, manifest, settings, config)
        corpus = root / CORPUS
        for path in (database, corpus):
            check_not_in_use(path)
        mirrors = sorted(root.glob("projects/*/learnings.md"))
        holding = _holding_data(database, corpus, mirrors)
        if holding and not force:
            raise Conflict(
                f"{root} already holds a workspace with data ({', '.join(holding)})"
                ": restore into a new folder, or pass --force to replace it "
                "(`amelio backup` it first to keep it)."
            )
        destinations = {rel: root / rel for rel in manifest.paths}
        fresh = not root.exists()
        try:
            removed = _swap_in(zf, manifest, backup, root, destinations, mirrors, config)
        except BaseException:
            if fresh:  # a new folder that did not become a workspace: leave none behind
                shutil.rmtree(root, ignore_errors=True)
            raise
    forget_cached_key()  # the key file was just replaced; this process may hold the old one
    migration = manifest.migration
    if migration != db.head_revision():
        engine = db.create_engine(f"sqlite:///{database}")
        try:
            _, migration = db.upgrade(engine)
        finally:
            engine.dispose()
    return RestoreReport(
        root, database, manifest, bool(holding), removed, migration, config.dropped
    )


def _swap_in(
    zf: zipfile.ZipFile,
    manifest: Manifest,
    backup: Archive,
    root: Path,
    destinations: dict[str, Path],
    mirrors: list[Path],
    config: RestoredConfig,
) -> tuple[str, ...]:
    """Write every member beside its destination (amelio.toml as ``config`` has it),
    then rename each into place (the database last) and remove what the backup
    does not have."""
    (root / "skills").mkdir(parents=True, exist_ok=True)
    (root / DATA_DIR).mkdir(parents=True, exist_ok=True, mode=0o700)
    gitignore = root / DATA_DIR / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("*\n", encoding="utf-8")
    staged: dict[str, Path] = {}
    try:
        for entry in manifest.files:
            dest = destinations[entry.path]
            dest.parent.mkdir(parents=True, exist_ok=True)
            staged[entry.path] = dest.with_name(f".{dest.name}.restore-{secrets.token_hex(4)}")
            if entry.path == CONFIG_FILE:
                with _new_file(staged[entry.path], entry.path) as out:
                    assert out is not None
                    out.write(config.text)
            else:
                _copy_member(zf, entry, backup, staged[entry.path])
        if migration_of(staged[DATABASE]) != manifest.migration:
            raise backup.damaged("its database is not at the manifest's migration")
        backup.check_rows(manifest.tables, rows_per_table(staged[DATABASE]))
        wrong = with_engine(staged[DATABASE], bad_name)
        if wrong is not None:  # skills/../../x: a later export would write outside
            raise backup.damaged(wrong)
        gone = [m for m in mirrors if m.relative_to(root).as_posix() not in destinations]
        gone += [
            root / rel
            for rel in (CORPUS, SECRET_KEY)
            if rel not in destinations and (root / rel).exists()
        ]
        for path in gone:
            path.unlink()
        for db_file in (root / CORPUS, destinations[DATABASE]):
            # A stale -wal beside a swapped-in file would be replayed into it.
            for suffix in _SIDECARS:
                Path(f"{db_file}{suffix}").unlink(missing_ok=True)
        for rel in sorted(staged, key=lambda r: r == DATABASE):
            os.replace(staged.pop(rel), destinations[rel])
    finally:
        for leftover in staged.values():
            leftover.unlink(missing_ok=True)
    return tuple(p.relative_to(root).as_posix() for p in gone)


def _small(zf: zipfile.ZipFile, name: str) -> bytes:
    """A member read into memory (checked whole, and bounded, by _check_members)."""
    return zf.read(name)


def _check_members(zf: zipfile.ZipFile, manifest: Manifest, backup: Archive) -> None:
    """Only the members a backup can have, each listed once: a name can never
    point outside the workspace."""
    listed = manifest.paths
    for rel in listed:
        parts = rel.split("/")
        mirror = len(parts) == 3 and parts[0] == "projects" and parts[2] == "learnings.md"
        if rel not in (DATABASE, CORPUS, SECRET_KEY, CONFIG_FILE) and not mirror:
            raise backup.damaged(f"it lists an unexpected file {rel!r}")
        if mirror:
            try:
                validate_name(parts[1])
            except InvalidInput as exc:
                raise backup.damaged(f"it lists an unexpected file {rel!r}") from exc
    for required in (DATABASE, CONFIG_FILE):
        if required not in listed:
            raise backup.damaged(f"its manifest lacks {required}")
    names = [i.filename for i in zf.infolist()]
    if len(set(listed)) != len(listed) or sorted(names) != sorted([MANIFEST, *listed]):
        raise backup.damaged("its files are not the ones its manifest lists")
    for entry in manifest.files:
        if zf.getinfo(entry.path).file_size != entry.size:
            raise backup.damaged(
                f"{entry.path} does not match its size in the manifest (edited or damaged)"
            )
        if entry.size is not None and entry.size > _SMALL.get(entry.path, entry.size):
            raise backup.damaged(f"{entry.path} is over {_SMALL[entry.path]:,} bytes")


def _copy_member(zf: zipfile.ZipFile, entry: Member, backup: Archive, dest: Path | None) -> None:
    """Read one member whole, checking its size and SHA-256; write it to ``dest``
    (a new file) when given."""
    with _new_file(dest, entry.path) as out:
        check_zip_member(zf, backup, entry, out)
        if out is not None:
            out.flush()
            os.fsync(out.fileno())


@contextmanager
def _new_file(path: Path | None, rel: str) -> Iterator[IO[bytes] | None]:
    if path is None:
        yield None
        return
    # The data folder's files are private; the others less the umask, as any new file.
    mode = 0o600 if rel.startswith(f"{DATA_DIR}/") else 0o666
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
        yield f


def _check_migration(migration: str) -> None:
    known = known_migrations()
    if migration not in known:
        raise InvalidInput(
            f"The backup's database is at migration {migration}, which this Amelio "
            f"({__version__}, newest migration {known[0]}) does not know: restore it "
            "with the Amelio that made it, or a newer one.",
            migration=migration,
        )


def _settings_after(config: RestoredConfig, root: Path) -> Settings:
    """The target's settings as they will be: the restored amelio.toml under this
    process's AMELIO_* environment (``workspace`` still points at a scratch folder)."""
    with tempfile.TemporaryDirectory(prefix="amelio-restore-") as scratch:
        Path(scratch, CONFIG_FILE).write_bytes(config.text)
        try:
            return load_settings(scratch)
        except AmelioError as exc:
            raise ConfigError(
                f"The backup's {CONFIG_FILE} with this environment's AMELIO_* "
                f"settings does not load, so {root} would not open after a "
                f"restore: {exc.message}"
            ) from exc


def _check_key(
    zf: zipfile.ZipFile, manifest: Manifest, settings: Settings, config: RestoredConfig
) -> None:
    if manifest.key_fingerprint is None:
        return
    configured = settings.secret_key.get_secret_value()
    if configured:
        key: bytes | None = configured.encode("utf-8")
    elif SECRET_KEY in manifest.paths:
        key = _small(zf, SECRET_KEY).decode("utf-8").strip().encode("utf-8")
    else:
        key = None
    if key is not None and equal(manifest.key_fingerprint, _fingerprint(key)):
        return
    if manifest.key_source == "settings" and "secret_key" in config.dropped:
        fix = (
            f"the backup's {CONFIG_FILE} holds it, and a restore leaves secrets out: "
            "restore with --with-config to keep them, or set AMELIO_SECRET_KEY to it"
        )
    elif manifest.key_source == "settings":
        fix = (
            "the backed-up workspace took it from AMELIO_SECRET_KEY: set "
            "AMELIO_SECRET_KEY to that value here, then restore again"
        )
    else:
        fix = (
            "the backup holds it in .amelio/secret_key, and AMELIO_SECRET_KEY (or "
            f"secret_key in {CONFIG_FILE}) overrides it here: unset it, then restore again"
        )
    raise ConfigError(
        "After this restore the workspace would not have the secret key its "
        f"data was signed with; {fix}. Without it `amelio feedback verify` "
        "fails and issued feedback tokens and sessions stop working."
    )


def _holding_data(database: Path, corpus: Path, mirrors: list[Path]) -> list[str]:
    """What in the target holds data a restore would replace (empty for a new folder
    or a fresh `amelio init`)."""
    found = []
    if database_holds_data(database):
        found.append(f"database {database}")
    if corpus_holds_data(corpus):
        found.append(f"search corpus {corpus}")
    if mirrors:
        found.append("learnings.md files")
    return found


# -- shared -----------------------------------------------------------------------------


def _sqlite_database(settings: Settings, root: Path, action: str) -> Path:
    """The SQLite file of ``settings`` for a workspace at ``root``; PostgreSQL is
    pg_dump's job, and says so."""
    url_text = settings.database_url or f"sqlite:///{(root / DATA_DIR / 'amelio.db')}"
    url = sa.engine.make_url(url_text)
    backend = url.get_backend_name()
    if backend == "postgresql":
        shown = url.set(drivername="postgresql").render_as_string(hide_password=True)
        if action == "backup":
            raise ConfigError(
                f"This workspace's database is PostgreSQL ({shown}): `amelio backup` copies "
                f"SQLite workspaces only. Back it up with `pg_dump -Fc -f amelio.dump "
                f"'{shown}'` and restore it with `pg_restore`; keep .amelio/secret_key (or "
                "AMELIO_SECRET_KEY) and .amelio/search/corpus.db with the dump, as the "
                "feedback chain and tokens are signed with that key."
            )
        raise ConfigError(
            f"The target's database is PostgreSQL ({shown}, from AMELIO_DATABASE_URL or "
            f"{CONFIG_FILE}): `amelio restore` restores SQLite workspaces only. Restore a "
            "PostgreSQL dump with `pg_restore`, or unset AMELIO_DATABASE_URL to restore this "
            "backup into the workspace's SQLite file."
        )
    if backend != "sqlite" or url.database in (None, "", ":memory:"):
        raise ConfigError(
            f"`amelio {action}` works on a SQLite file, not "
            f"{url.render_as_string(hide_password=True)}."
        )
    return Path(url.database).resolve()


def _target_database(settings: Settings, root: Path) -> Path:
    """The workspace's own database file, where a restore always puts it; refused
    when this environment's AMELIO_DATABASE_URL would open another one after it."""
    own = root / DATABASE
    named = _sqlite_database(settings, root, "restore")
    if named != own.resolve():
        raise ConfigError(
            f"AMELIO_DATABASE_URL names {named}, but a restore puts the database in the "
            f"workspace, {own}: unset AMELIO_DATABASE_URL (or point it there), then "
            "restore again."
        )
    return own


def _key_of(settings: Settings, key_file: Path | None) -> tuple[str, str | None]:
    """Where the workspace's secret key comes from, and its fingerprint; read as
    :func:`amelio.privacy.signing.secret_key` reads it."""
    configured = settings.secret_key.get_secret_value()
    if configured:
        return "settings", _fingerprint(configured.encode("utf-8"))
    if key_file is not None:
        return "file", _fingerprint(key_file.read_text(encoding="utf-8").strip().encode("utf-8"))
    return "none", None


def _fingerprint(key: bytes) -> str:
    return Signer(key).hexdigest(b"", "key-check")[:16]
