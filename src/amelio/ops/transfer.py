"""Moving a workspace's data: export to JSONL, import, and copy to another database.

The three share one idea: every table of :data:`amelio.db.schema.metadata`, parents
before children, row by row, with the same values. So they cover every entity
(skills and their versions, evals, learnings, proposals, benchmarks, interactions
and their feedback, feedback events and their chain, search impressions and
signals, knowledge, API key hashes, Telegram links, the schedule) without a list
to keep up to date: a new table is exported the day its migration lands.

* :func:`export_workspace` writes ``tables/<name>.jsonl`` and a ``manifest.json``
  (:mod:`amelio.ops.archive`: format, Amelio version, migration revision, each
  file's rows, size and SHA-256), read in one snapshot, so that the export is one
  moment of the database.
* :func:`import_workspace` loads an export into an empty workspace at the same
  revision, after checking every file against the manifest, in one transaction
  that is rolled back unless every table got the rows the manifest says.
* :func:`copy_database` copies the workspace's database into another one (SQLite to
  PostgreSQL, the path out of one machine), in one transaction on the target, then
  compares the row counts and verifies the feedback chain there.

Values cross JSON by their column's type: timestamps as ISO 8601 with their zone
(SQLite keeps none; Amelio writes UTC), JSON columns as JSON, bytes (a learning's
embedding) as base64, the rest as they are.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from amelio import db
from amelio._version import __version__
from amelio.db.schema import aware, metadata, utcnow
from amelio.errors import ConfigError, InvalidInput
from amelio.ops.archive import (
    EXPORT,
    MANIFEST,
    Archive,
    Manifest,
    bad_name,
    member,
    row_counts,
    table_file,
)
from amelio.workspace.folder import Workspace

__all__ = [
    "CopyReport",
    "ExportReport",
    "ImportReport",
    "copy_database",
    "export_workspace",
    "import_workspace",
]

BATCH = 1000
#: What ``amelio init`` puts in a new database: a workspace holding only these rows
#: is empty, and an import or a copy replaces them with the source's.
SEEDED = frozenset({"projects", "search_state", "feedback_chain", "routing_state"})
SECRET_FILE = "secret_key"  # noqa: S105 -- a file name


def _tables() -> list[sa.Table]:
    return list(metadata.sorted_tables)


def _order(table: sa.Table) -> list[sa.ColumnElement[Any]]:
    return list(table.primary_key.columns) or list(table.columns)


# -- values ---------------------------------------------------------------------------


def _encode(column: sa.Column[Any], value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, datetime):
        return aware(value).isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _decode(column: sa.Column[Any], value: Any) -> Any:
    kind = column.type.impl if isinstance(column.type, sa.TypeDecorator) else column.type
    if value is not None and isinstance(kind, sa.DateTime):
        return datetime.fromisoformat(value)
    if value is not None and isinstance(kind, sa.LargeBinary):
        try:
            return base64.b64decode(value, validate=True)
        except (ValueError, TypeError) as exc:
            raise InvalidInput(
                f"{column.table.name}.{column.name} is not base64 in this export."
            ) from exc
    return value


def _line(table: sa.Table, row: sa.Row[Any]) -> str:
    m = row._mapping
    return (
        json.dumps(
            {c.name: _encode(c, m[c.name]) for c in table.columns},
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        )
        + "\n"
    )


# -- reading one snapshot ---------------------------------------------------------------


@contextmanager
def _snapshot(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection whose reads all see one moment of the database: a repeatable-read
    transaction on PostgreSQL, one read transaction on SQLite (WAL keeps its view)."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def _rows(conn: sa.Connection, table: sa.Table) -> Iterator[sa.Row[Any]]:
    result = conn.execution_options(yield_per=BATCH).execute(
        sa.select(table).order_by(*_order(table))
    )
    yield from result


def _counts(conn: sa.Connection) -> dict[str, int]:
    return row_counts(conn, [t.name for t in _tables()])


def _holds_data(conn: sa.Connection) -> list[str]:
    """The tables holding more than a new workspace has (its seeds: the default
    project, the search state, the chain's head and the routing generation)."""
    busy = [name for name, n in _counts(conn).items() if n and name not in SEEDED]
    projects = metadata.tables["projects"]
    if conn.scalar(
        sa.select(sa.func.count()).select_from(projects).where(projects.c.name != "default")
    ):
        busy.append("projects")
    return busy


# -- writing into a database -----------------------------------------------------------


def _empty(conn: sa.Connection) -> None:
    """Delete every row, children before parents (the target's own seeds included)."""
    for table in reversed(_tables()):
        conn.execute(table.delete())


def _insert(conn: sa.Connection, table: sa.Table, rows: Iterable[dict[str, Any]]) -> int:
    count, batch = 0, []
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            conn.execute(table.insert(), batch)
            count, batch = count + len(batch), []
    if batch:
        conn.execute(table.insert(), batch)
        count += len(batch)
    return count


def _reset_sequences(conn: sa.Connection) -> None:
    """PostgreSQL hands out ids from sequences that an explicit insert does not move:
    set each to its table's largest id, so the next row gets the next one."""
    if conn.dialect.name != "postgresql":
        return
    for table in _tables():
        for column in table.primary_key.columns:
            if not (isinstance(column.type, sa.Integer) and column.autoincrement is not False):
                continue
            sequence = conn.scalar(
                sa.text("SELECT pg_get_serial_sequence(:t, :c)"),
                {"t": table.name, "c": column.name},
            )
            if sequence:
                # Names from Amelio's own schema, not from input.
                conn.execute(
                    sa.text(
                        f'SELECT setval(:s, COALESCE((SELECT max("{column.name}") FROM '  # noqa: S608
                        f'"{table.name}"), 1), (SELECT max("{column.name}") FROM '
                        f'"{table.name}") IS NOT NULL)'
                    ),
                    {"s": sequence},
                )


def _verify_chain(ws: Workspace, engine: sa.Engine) -> str:
    """The feedback chain on ``engine``, verified with ``ws``'s secret key (as
    ``amelio feedback verify`` does): "ok", or what is wrong (a different secret key,
    most often)."""
    from amelio.feedback.collector import verify_events

    report = verify_events(Workspace(ws.settings, engine))
    return "ok" if report.ok else (report.problem or "does not verify")


# -- export -------------------------------------------------------------------------------


@dataclass
class ExportReport:
    path: str
    revision: str
    tables: dict[str, int] = field(default_factory=dict)
    with_secret_key: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": EXPORT.name,
            "revision": self.revision,
            "rows": sum(self.tables.values()),
            "tables": self.tables,
            "withSecretKey": self.with_secret_key,
        }


def export_workspace(
    ws: Workspace, dest: Path, *, force: bool = False, with_secret_key: bool = False
) -> ExportReport:
    """Write every table of ``ws`` to ``dest`` as JSONL, with a manifest."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise InvalidInput(f"{dest} exists and is not a folder.")
    if dest.exists() and any(dest.iterdir()) and not force:
        raise InvalidInput(
            f"{dest} is not empty: choose a new folder, or pass --force to write over it."
        )
    if (dest / "tables").is_symlink():  # a link planted to be written through
        (dest / "tables").unlink()
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    (dest / "tables").mkdir(exist_ok=True, mode=0o700)
    revision = db.current_revision(ws.engine) or ""
    report = ExportReport(str(dest), revision, with_secret_key=with_secret_key)
    with _snapshot(ws.engine) as conn:
        for table in _tables():
            path = dest / table_file(table.name)
            count = 0
            with _private(path) as out:
                for row in _rows(conn, table):
                    out.write(_line(table, row))
                    count += 1
            report.tables[table.name] = count
    if with_secret_key:
        from amelio.privacy.signing import secret_key

        with _private(dest / SECRET_FILE) as out:
            out.write(secret_key(ws.settings).decode("utf-8"))
    manifest = Manifest(
        format=EXPORT,
        amelio_version=__version__,
        migration=revision,
        created_at=utcnow(),
        files=tuple(member(dest / table_file(t), table_file(t)) for t in report.tables),
        tables=report.tables,
        key_source="file" if with_secret_key else "none",
    )
    with _private(dest / MANIFEST) as out:
        out.write(manifest.dumps())
    return report


def _private(path: Path) -> IO[str]:
    """A new file at ``path`` readable by its owner only (an export holds every
    interaction): what was there, an earlier export's file or a link planted to be
    written through, is replaced, never followed."""
    path.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o600), "w", encoding="utf-8", newline="\n")


# -- import -------------------------------------------------------------------------------


@dataclass
class ImportReport:
    path: str
    revision: str
    tables: dict[str, int] = field(default_factory=dict)
    chain: str = ""
    secret_key: str = "the workspace's own"  # noqa: S105 -- which key, not a key

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "revision": self.revision,
            "rows": sum(self.tables.values()),
            "tables": self.tables,
            "feedbackChain": self.chain,
            "secretKey": self.secret_key,
        }


def _read_manifest(export: Archive) -> Manifest:
    try:
        raw = (export.where / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise export.damaged(f"it has no {MANIFEST}") from None
    except OSError as exc:
        raise export.damaged(f"its {MANIFEST} cannot be read ({exc})") from None
    return export.manifest(raw)


def _check_files(export: Archive, manifest: Manifest) -> None:
    """Every file the manifest names is there, whole: checked before anything is
    written, so a damaged export changes nothing."""
    known = {t.name for t in _tables()}
    unknown = sorted(set(manifest.tables) - known)
    if unknown:
        raise InvalidInput(
            f"The export has tables this Amelio does not know: {', '.join(unknown)}."
        )
    missing = sorted(known - set(manifest.tables))
    if missing:
        raise InvalidInput(f"The export lacks tables: {', '.join(missing)}.")
    for entry in manifest.files:
        path = export.where / entry.path
        if not path.is_file():
            raise export.damaged(f"its {entry.path} is missing")
        export.check_file(entry, path)


def _lines(path: Path, table: sa.Table) -> Iterator[dict[str, Any]]:
    columns = {c.name: c for c in table.columns}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise InvalidInput(f"{path} line {number}: {exc}") from None
            if not isinstance(data, dict) or set(data) - set(columns):
                raise InvalidInput(f"{path} line {number}: not a row of {table.name}.")
            yield {name: _decode(columns[name], value) for name, value in data.items()}


def import_workspace(ws: Workspace, src: Path) -> ImportReport:
    """Load the export in ``src`` into ``ws``, whose database must be empty."""
    src = Path(src)
    export = Archive(src, EXPORT)
    manifest = _read_manifest(export)
    revision = db.current_revision(ws.engine) or ""
    if manifest.migration != revision:
        raise InvalidInput(
            f"The export is at migration {manifest.migration!r} and this "
            f"workspace at {revision!r}: upgrade the older one first "
            "(amelio db upgrade), then export again."
        )
    _check_files(export, manifest)
    brought = _secret(src, manifest)
    report = ImportReport(str(src), revision)
    with db.transaction(ws.engine) as conn:
        busy = _holds_data(conn)
        if busy:
            raise InvalidInput(
                f"This workspace already holds data (in {', '.join(busy)}): "
                "import into a new one (amelio init DIR)."
            )
        _empty(conn)
        for table in _tables():
            rows = _lines(src / table_file(table.name), table)
            report.tables[table.name] = _insert(conn, table, rows)
        export.check_rows(manifest.tables, report.tables)
        wrong = bad_name(conn)
        if wrong is not None:  # skills/../../x: a later export would write outside
            raise InvalidInput(f"The export cannot be imported: {wrong}.")
        _reset_sequences(conn)
    if brought is not None:
        report.secret_key = _adopt_secret(ws, brought)
    report.chain = _verify_chain(ws, ws.engine)
    return report


def _secret(src: Path, manifest: Manifest) -> bytes | None:
    """The secret key an export carries (``--with-secret-key``), or None."""
    if manifest.key_source != "file":
        return None
    try:
        key = (src / SECRET_FILE).read_bytes().strip()
    except OSError as exc:
        raise InvalidInput(
            f"The manifest names a secret key, but {src / SECRET_FILE} cannot be read: {exc}"
        ) from None
    if not key:
        raise InvalidInput(f"{src / SECRET_FILE} is empty.")
    return key


def _adopt_secret(ws: Workspace, key: bytes) -> str:
    """Use the export's secret key, unless the settings name one explicitly."""
    from amelio.privacy.signing import install_secret_key

    configured = ws.settings.secret_key.get_secret_value()
    if configured:
        return (
            "kept AMELIO_SECRET_KEY"
            if configured.encode() == key
            else "kept AMELIO_SECRET_KEY, which differs from the export's"
        )
    install_secret_key(ws.settings, key)
    return "installed from the export"


# -- copy to another database -------------------------------------------------------------


@dataclass
class CopyReport:
    target: str
    source: dict[str, int] = field(default_factory=dict)
    copied: dict[str, int] = field(default_factory=dict)
    chain: str = ""

    @property
    def ok(self) -> bool:
        return self.source == self.copied and self.chain == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "feedbackChain": self.chain,
            "tables": {
                name: {"source": self.source[name], "target": self.copied.get(name)}
                for name in self.source
            },
        }


def copy_database(ws: Workspace, url: str, *, force: bool = False) -> CopyReport:
    """Copy ``ws``'s database into the one at ``url`` (migrated first), then check it."""
    from amelio.workspace.config import mask_url

    if url == ws.settings.effective_database_url:
        raise InvalidInput("The target is the workspace's own database.")
    try:
        target = db.connect(url, migrate=True)
    except ConfigError:  # already says what is wrong
        raise
    except Exception as exc:
        raise ConfigError(f"Cannot open the target database {mask_url(url)}: {exc}") from None
    report = CopyReport(mask_url(url))
    try:
        with _snapshot(ws.engine) as source, db.transaction(target) as conn:
            busy = _holds_data(conn)
            if busy and not force:
                raise InvalidInput(
                    f"The target already holds data (in {', '.join(busy)}): "
                    "pass --force to replace it."
                )
            _empty(conn)
            for table in _tables():
                columns = [c.name for c in table.columns]
                rows = ({c: row._mapping[c] for c in columns} for row in _rows(source, table))
                report.source[table.name] = _insert(conn, table, rows)
            _reset_sequences(conn)
        with target.connect() as check:
            report.copied = _counts(check)
        report.chain = _verify_chain(ws, target)
    finally:
        target.dispose()
    return report
