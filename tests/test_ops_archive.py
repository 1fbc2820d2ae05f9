"""The archive module that backups and exports share: each manifest layout reads
back what it writes, and a tampered digest, a wrong row count or a format this
code does not read is refused, naming the archive."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from amelio.errors import InvalidInput
from amelio.ops.archive import BACKUP, EXPORT, Archive, Format, Manifest, Member, member, row_counts

WHEN = datetime(2026, 5, 25, 8, 30, tzinfo=UTC)


def manifest(
    fmt: Format, files: tuple[Member, ...], key_source: str = "none", fingerprint: str | None = None
) -> Manifest:
    tables = {"projects": 1, "interactions": 12}
    return Manifest(fmt, "1.2.3", "0021_head", WHEN, files, tables, key_source, fingerprint)


@pytest.fixture
def tables(tmp_path: Path) -> tuple[Member, ...]:
    made = []
    for table, body in (("projects", b'{"name":"default"}\n'), ("interactions", b"x\n" * 12)):
        path = tmp_path / f"{table}.jsonl"
        path.write_bytes(body)
        made.append(member(path, f"tables/{table}.jsonl"))
    return tuple(made)


def test_each_layout_reads_back_what_it_writes(tables: tuple[Member, ...]) -> None:
    backup = manifest(BACKUP, tables, "file", "04bbcb73a1b1b48d")
    assert Archive(Path("b.zip"), BACKUP).manifest(backup.dumps().encode()) == backup
    export = manifest(EXPORT, tables, "file")
    assert Archive(Path("out"), EXPORT).manifest(export.dumps().encode()) == export
    # The layouts the archives on disk already have.
    assert set(backup.to_dict()) >= {"format", "formatVersion", "files", "tables", "secretKey"}
    assert backup.to_dict()["format"] == "amelio-backup"
    assert export.to_dict()["format"] == "amelio-export/1"
    assert export.to_dict()["tables"]["interactions"]["rows"] == 12


def test_an_export_from_before_sizes_were_recorded_still_reads(
    tables: tuple[Member, ...], tmp_path: Path
) -> None:
    data = manifest(EXPORT, tables).to_dict()
    for entry in data["tables"].values():
        del entry["bytes"]
    export = Archive(tmp_path, EXPORT)
    read = export.manifest(json.dumps(data).encode())
    assert {f.size for f in read.files} == {None}
    for entry in read.files:  # the digest alone decides
        export.check_file(entry, tmp_path / entry.path.removeprefix("tables/"))


def test_a_tampered_member_is_refused(tables: tuple[Member, ...], tmp_path: Path) -> None:
    export = Archive(tmp_path, EXPORT)
    entry = tables[1]
    export.check_member(entry, [b"x\n" * 6, b"x\n" * 6])  # whole, in any chunks
    copy = tmp_path / "copy"
    with copy.open("wb") as out:
        export.check_member(entry, [b"x\n" * 12], out)
    assert copy.read_bytes() == b"x\n" * 12
    for tampered in ([b"x\n" * 11 + b"y\n"], [b"x\n" * 11], []):
        with pytest.raises(InvalidInput, match=r"interactions\.jsonl does not match its SHA-256"):
            export.check_member(entry, tampered)
    wrong_size = Member(entry.path, entry.size + 1 if entry.size else 1, entry.sha256)
    with pytest.raises(InvalidInput, match="does not match") as refused:
        export.check_member(wrong_size, [b"x\n" * 12])
    assert refused.value.details == {"file": str(tmp_path)}
    assert f"{tmp_path} is not a usable Amelio export" in refused.value.message
    assert "Nothing was imported" in refused.value.message


def test_rows_must_be_what_the_manifest_says() -> None:
    backup = Archive(Path("b.zip"), BACKUP)
    backup.check_rows({"projects": 1, "interactions": 12}, {"projects": 1, "interactions": 12})
    with pytest.raises(InvalidInput, match="interactions has 11 rows where the manifest says 12"):
        backup.check_rows({"interactions": 12}, {"interactions": 11})
    with pytest.raises(InvalidInput, match=r"interactions has 0 rows where .* says 12"):
        backup.check_rows({"interactions": 12}, {})
    with pytest.raises(InvalidInput, match="Nothing was restored"):
        backup.check_rows({"projects": 1}, {"projects": 2})


@pytest.mark.parametrize(
    ("fmt", "raw", "why"),
    [
        (BACKUP, {"format": "amelio-backup", "formatVersion": 2}, "'amelio-backup/2' is not"),
        (EXPORT, {"format": "amelio-export/2"}, "'amelio-export/2' is not 'amelio-export/1'"),
        (BACKUP, {"format": "amelio-export/1"}, r"'amelio-export/1' is not 'amelio-backup/1'\."),
        (EXPORT, {}, r"format 'None' is not 'amelio-export/1'\."),
        (EXPORT, [], "manifest.json is not a manifest"),
        (EXPORT, {"format": "amelio-export/1"}, "manifest.json lacks 'tables'"),
        (BACKUP, {"format": "amelio-backup", "formatVersion": 1}, "lacks 'secretKey'"),
    ],
)
def test_a_manifest_this_code_does_not_read_is_refused_by_name(
    fmt: Format, raw: object, why: str
) -> None:
    with pytest.raises(InvalidInput, match=why):
        Archive(Path("archive"), fmt).manifest(json.dumps(raw).encode())
    with pytest.raises(InvalidInput, match="not JSON"):
        Archive(Path("archive"), fmt).manifest(b"{")


def test_a_newer_format_says_to_use_the_amelio_that_wrote_it() -> None:
    with pytest.raises(InvalidInput, match="restore it with the Amelio that wrote it"):
        Archive(Path("b.zip"), BACKUP).manifest(b'{"format":"amelio-backup","formatVersion":2}')
    with pytest.raises(InvalidInput, match="import it with the Amelio that wrote it"):
        Archive(Path("out"), EXPORT).manifest(b'{"format":"amelio-export/2"}')


def test_an_export_names_each_table_s_own_file(tables: tuple[Member, ...]) -> None:
    data = manifest(EXPORT, tables).to_dict()
    data["tables"]["projects"]["file"] = "../../etc/passwd"
    with pytest.raises(InvalidInput, match=r"projects.s file is .\.\./\.\./etc/passwd."):
        Archive(Path("out"), EXPORT).manifest(json.dumps(data).encode())


def test_row_counts_all_tables_or_some_and_stops_at_a_cap(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE a (x INTEGER)"))
            conn.execute(sa.text("CREATE TABLE b (x INTEGER)"))
            conn.execute(sa.text("INSERT INTO a VALUES (1), (2), (3), (4), (5)"))
        with engine.connect() as conn:
            assert row_counts(conn) == {"a": 5, "b": 0}
            assert row_counts(conn, ["a"]) == {"a": 5}
            assert row_counts(conn, cap={"a": 2}) == {"a": 3, "b": 0}
    finally:
        engine.dispose()
