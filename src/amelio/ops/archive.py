"""Archives: what a backup or an export holds, written and checked one way.

Both are a set of files (the *members*) and a ``manifest.json`` that names the
format and its version, the Amelio and the migration that wrote it, when, each
member's size and SHA-256, the rows of every table, and where the secret key
is. Whoever writes an archive describes it as a :class:`Manifest`; whoever
reads one checks it through an :class:`Archive`: the format first (one this
code does not read is refused by name), every member's digest before anything
is written, the rows once the data is in. Any difference is one error, naming
the archive: it is not usable, nothing was changed, use another copy.

The two kinds keep the manifest layouts their archives on disk were written
with: a backup's ``files`` list and ``tables`` row counts, an export's
``tables`` map of one JSONL file each (which an export from before sizes were
recorded lists without one).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from amelio.errors import InvalidInput
from amelio.skills.files import valid_skill_name
from amelio.workspace.projects import valid_name

__all__ = [
    "BACKUP",
    "EXPORT",
    "MANIFEST",
    "Archive",
    "Format",
    "Manifest",
    "Member",
    "bad_name",
    "check_zip_member",
    "member",
    "open_zip",
    "row_counts",
    "zip_manifest",
]

MANIFEST = "manifest.json"
CHUNK = 1 << 20
#: Bounds checked before a byte of a zip's manifest is decompressed: a few hundred
#: KB of zip must not make a restore read hundreds of MB. A manifest lists each
#: file in about 150 bytes, so these hold tens of thousands of projects' files.
MAX_MANIFEST_BYTES = 8 << 20
MAX_MEMBERS = 50_000


@dataclass(frozen=True)
class Format:
    """A kind of archive: its format's name and version, and what reading one does
    (for the errors)."""

    name: str
    noun: str
    action: str
    done: str


BACKUP = Format("amelio-backup/1", "backup", "restore", "restored")
EXPORT = Format("amelio-export/1", "export", "import", "imported")


@dataclass(frozen=True)
class Member:
    """One file of an archive, named by its path in the archive; ``size`` is None
    only in an export written before sizes were recorded."""

    path: str
    size: int | None
    sha256: str


def member(path: Path, name: str) -> Member:
    """The member ``name`` whose content is the file at ``path``."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return Member(name, size, digest.hexdigest())


#: Columns whose values become file and folder names (``skills/<name>/``,
#: ``projects/<name>/learnings.md``): an archive's are checked as their writers check
#: them, so a crafted one cannot name a path outside the workspace.
NAMED_COLUMNS: dict[tuple[str, str], str] = {
    ("skills", "name"): "skill",
    ("proposals", "skill_name"): "skill",
    ("projects", "name"): "project",
}


def bad_name(conn: sa.Connection) -> str | None:
    """What is wrong with the first value of a named column that is not a name its
    writer would accept (None: every one is)."""
    tables = set(sa.inspect(conn).get_table_names())
    for (table, column), what in NAMED_COLUMNS.items():
        if table not in tables:
            continue
        valid = valid_skill_name if what == "skill" else valid_name
        query: sa.Select[Any] = sa.select(sa.column(column)).select_from(sa.table(table))
        for value in conn.scalars(query.distinct()):
            if not valid(value):
                return f"{table}.{column} holds {value!r}, which is not a {what} name"
    return None


def table_file(table: str) -> str:
    """Where an export keeps a table's rows."""
    return f"tables/{table}.jsonl"


@dataclass(frozen=True)
class Manifest:
    """What an archive holds. ``tables`` are rows per table; ``key_source`` says
    where the secret key is: ``file`` (a member, ``.amelio/secret_key`` in a backup,
    ``secret_key`` in an export), ``settings`` (the workspace took it from its
    settings: give it again) or ``none``; ``key_fingerprint`` (backups) tells a
    restore whether it will have the same key."""

    format: Format
    amelio_version: str
    migration: str
    created_at: datetime
    files: tuple[Member, ...]
    tables: dict[str, int]
    key_source: str = "none"
    key_fingerprint: str | None = None

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    def to_dict(self) -> dict[str, Any]:
        if self.format == BACKUP:
            return _backup_layout(self)
        return _export_layout(self)

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _backup_layout(m: Manifest) -> dict[str, Any]:
    name, _, version = m.format.name.partition("/")
    return {
        "format": name,
        "formatVersion": int(version),
        "amelioVersion": m.amelio_version,
        "migration": m.migration,
        "createdAt": m.created_at.isoformat(),
        "secretKey": {"source": m.key_source, "fingerprint": m.key_fingerprint},
        "tables": m.tables,
        "files": [{"path": f.path, "bytes": f.size, "sha256": f.sha256} for f in m.files],
    }


def _export_layout(m: Manifest) -> dict[str, Any]:
    files = {f.path: f for f in m.files}
    return {
        "format": m.format.name,
        "amelio": m.amelio_version,
        "revision": m.migration,
        "createdAt": m.created_at.isoformat(),
        "secretKey": "secret_key" if m.key_source == "file" else None,
        "tables": {
            table: {
                "file": table_file(table),
                "rows": rows,
                "bytes": files[table_file(table)].size,
                "sha256": files[table_file(table)].sha256,
            }
            for table, rows in m.tables.items()
        },
    }


def _format_of(data: dict[str, Any]) -> str:
    """``name/version``: a backup writes them apart, an export as one."""
    if "formatVersion" in data:
        return f"{data.get('format')}/{data['formatVersion']}"
    return str(data.get("format"))


def _from_backup(data: dict[str, Any]) -> Manifest:
    key = data["secretKey"]
    return Manifest(
        format=BACKUP,
        amelio_version=str(data["amelioVersion"]),
        migration=str(data["migration"]),
        created_at=datetime.fromisoformat(data["createdAt"]),
        files=tuple(
            Member(str(f["path"]), int(f["bytes"]), str(f["sha256"])) for f in data["files"]
        ),
        tables={str(k): int(v) for k, v in data["tables"].items()},
        key_source=str(key["source"]),
        key_fingerprint=None if key["fingerprint"] is None else str(key["fingerprint"]),
    )


def _from_export(data: dict[str, Any]) -> Manifest:
    files, tables = [], {}
    for table, entry in data["tables"].items():
        if entry["file"] != table_file(table):
            raise ValueError(f"{table}'s file is {entry['file']!r}, not {table_file(table)!r}")
        size = entry.get("bytes")
        files.append(
            Member(entry["file"], None if size is None else int(size), str(entry["sha256"]))
        )
        tables[str(table)] = int(entry["rows"])
    return Manifest(
        format=EXPORT,
        amelio_version=str(data["amelio"]),
        migration=str(data["revision"]),
        created_at=datetime.fromisoformat(data["createdAt"]),
        files=tuple(files),
        tables=tables,
        key_source="file" if data.get("secretKey") else "none",
    )


@dataclass(frozen=True)
class Archive:
    """An archive being read: ``where`` it is and the ``format`` it must have. Every
    check raises :meth:`damaged`, so each failure reads the same way."""

    where: Path
    format: Format

    def damaged(self, why: str) -> InvalidInput:
        noun = self.format.noun
        return InvalidInput(
            f"{self.where} is not a usable Amelio {noun}: {why}. Nothing was "
            f"{self.format.done}; use another copy of the {noun}.",
            file=str(self.where),
        )

    def manifest(self, raw: bytes) -> Manifest:
        """The manifest in ``raw``, in this archive's format and version."""
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise self.damaged(f"its {MANIFEST} is not JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise self.damaged(f"its {MANIFEST} is not a manifest")
        found, expected = _format_of(data), self.format.name
        if found != expected:
            newer = found.partition("/")[0] == expected.partition("/")[0]
            how = f": {self.format.action} it with the Amelio that wrote it" if newer else ""
            raise self.damaged(f"its format {found!r} is not {expected!r}{how}")
        try:
            return _from_backup(data) if self.format == BACKUP else _from_export(data)
        except KeyError as exc:
            raise self.damaged(f"its {MANIFEST} lacks {exc}") from exc
        except (ValueError, TypeError, AttributeError) as exc:
            raise self.damaged(f"its {MANIFEST} cannot be read ({exc})") from exc

    def check_member(
        self, entry: Member, chunks: Iterable[bytes], out: IO[bytes] | None = None
    ) -> None:
        """Read ``entry``'s content whole from ``chunks`` (into ``out`` when given),
        checking its size and SHA-256."""
        digest, size = hashlib.sha256(), 0
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
        if digest.hexdigest() != entry.sha256 or entry.size not in (None, size):
            raise self.damaged(
                f"{entry.path} does not match its SHA-256 in the manifest (edited or damaged)"
            )

    def check_file(self, entry: Member, path: Path) -> None:
        """:meth:`check_member` for a member that is a file at ``path``."""
        with path.open("rb") as f:
            self.check_member(entry, iter(lambda: f.read(CHUNK), b""))

    def check_rows(self, expected: Mapping[str, int], found: Mapping[str, int]) -> None:
        """Every table has the rows the manifest says."""
        for table, rows in expected.items():
            if found.get(table) != rows:
                raise self.damaged(
                    f"{table} has {found.get(table, 0)} rows where the manifest says {rows}"
                )


# -- zip archives (backups) ---------------------------------------------------------------


@contextmanager
def open_zip(archive: Archive) -> Iterator[zipfile.ZipFile]:
    """The zip file ``archive.where``, read only through the bounded functions below."""
    try:
        zf = zipfile.ZipFile(archive.where)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise archive.damaged(f"it is not a whole zip file ({exc})") from exc
    with zf:
        yield zf


def zip_manifest(zf: zipfile.ZipFile, archive: Archive) -> Manifest:
    """The manifest, its size and the archive's entry count bounded before any of it
    is decompressed, and read no further than the size the zip gives it."""
    if len(zf.infolist()) > MAX_MEMBERS + 1:
        raise archive.damaged(f"it holds over {MAX_MEMBERS:,} files")
    if MANIFEST not in zf.namelist():
        raise archive.damaged(f"it has no {MANIFEST}")
    size = zf.getinfo(MANIFEST).file_size
    if size > MAX_MANIFEST_BYTES:
        raise archive.damaged(
            f"its {MANIFEST} is over {MAX_MANIFEST_BYTES >> 20} MB ({size:,} bytes)"
        )
    with _reading(archive, MANIFEST), zf.open(MANIFEST) as src:
        raw = src.read(size + 1)
    if len(raw) > size:
        raise archive.damaged(f"its {MANIFEST} is larger than it says")
    return archive.manifest(raw)


def check_zip_member(
    zf: zipfile.ZipFile, archive: Archive, entry: Member, out: IO[bytes] | None = None
) -> None:
    """:meth:`Archive.check_member` for a zip member, streamed: never more than one
    byte past the manifest's size is decompressed."""
    with _reading(archive, entry.path):
        src = zf.open(entry.path)

    def chunks() -> Iterator[bytes]:
        left = (entry.size or 0) + 1  # one byte past the size proves it too long
        while left > 0:
            with _reading(archive, entry.path):
                chunk = src.read(min(CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk

    with src:
        archive.check_member(entry, chunks(), out)


@contextmanager
def _reading(archive: Archive, what: str) -> Iterator[None]:
    """Turn a damaged zip's many failures (bad CRC, broken deflate stream, cut
    short) into one error that names the archive."""
    try:
        yield
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as exc:
        raise archive.damaged(f"{what} cannot be read ({exc})") from exc


def row_counts(
    conn: sa.Connection,
    tables: Iterable[str] | None = None,
    *,
    cap: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Rows per table (every table in the database when ``tables`` is None); with
    ``cap``, counting stops one past a table's cap, which is all a comparison needs
    and keeps it fast on big tables."""
    names = sa.inspect(conn).get_table_names() if tables is None else tables
    counts = {}
    for name in names:
        rows = sa.select(sa.literal(1)).select_from(sa.table(name))
        if cap is not None:
            rows = rows.limit(cap.get(name, 0) + 1)
        counts[name] = int(
            conn.execute(sa.select(sa.func.count()).select_from(rows.subquery())).scalar_one()
        )
    return counts
