"""Backup and restore: a copy of a live workspace restores to one that verifies.

Real SQLite files throughout; the writer is the real Collector on its own thread.
"""

from __future__ import annotations

import gc
import json
import re
import sqlite3
import stat
import threading
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from click.testing import CliRunner, Result

from amelio import db
from amelio.assistant.learnings import add_learning, list_learnings
from amelio.cli import main
from amelio.db import engine as db_engine
from amelio.db.schema import feedback_events
from amelio.db.schema import skills as skills_table
from amelio.errors import ConfigError, Conflict, InvalidInput
from amelio.feedback import Collector, verify_events
from amelio.feedback.examples import example_event
from amelio.ops.backup import backup_workspace, read_manifest, restore_workspace
from amelio.search.documents import Document
from amelio.search.engines.fts5 import Fts5Engine
from amelio.skills import SkillSpec, save_skills
from amelio.workspace.config import load_settings
from amelio.workspace.folder import Workspace, init_workspace, open_workspace
from amelio.workspace.projects import list_projects


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def ingest(collector: Collector, n: int, tag: str) -> None:
    events = [example_event("vote_up", session_id=f"{tag}-{i}") for i in range(n)]
    assert collector.ingest(events, rate_limit=False).count("accepted") == n


def event_count(ws: Workspace) -> int:
    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(feedback_events)) or 0)


def put_documents(ws: Workspace, *docs: Document) -> None:
    Fts5Engine.for_workspace(ws.settings.data_dir).apply(docs)
    # An Fts5Engine has no close(): its reader connection goes with the object, which a
    # reference cycle keeps until a collection; until then the file is "in use".
    gc.collect()


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Workspace]:
    """A workspace with something in every part a backup holds."""
    ws, _ = init_workspace(tmp_path / "source")
    ingest(Collector(ws), 30, "seed")
    add_learning(ws, "Quote the ticket number in every answer")
    add_learning(ws, "Answer in French", project="acme")
    put_documents(ws, Document("vpn", "Reset the VPN", "Open the portal, then reset."))
    yield ws
    ws.dispose()


def test_a_backup_taken_while_events_are_written_restores_and_verifies(
    source: Workspace, tmp_path: Path
) -> None:
    collector = Collector(source)
    before = event_count(source)
    wrote_once, stop = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            n = 0
            while not stop.is_set():
                ingest(collector, 25, f"live-{n}")
                n += 1
                wrote_once.set()
        except BaseException as exc:
            failures.append(exc)
            wrote_once.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert wrote_once.wait(60)
        report = backup_workspace(source.settings, tmp_path / "live.zip")
    finally:
        stop.set()
        thread.join()
    assert not failures
    after = event_count(source)
    backed_up = report.manifest.tables["feedback_events"]
    assert before + 25 <= backed_up <= after  # what was committed when it was taken

    restored = restore_workspace(tmp_path / "live.zip", tmp_path / "restored")
    assert not restored.replaced and not restored.upgraded
    ws = open_workspace(restored.root)
    try:
        check = verify_events(ws)
        assert check.ok and check.checked == backed_up == event_count(ws)
        assert [x.rule for x in list_learnings(ws)] == ["Quote the ticket number in every answer"]
        assert [x.rule for x in list_learnings(ws, project="acme")] == ["Answer in French"]
        assert Fts5Engine.for_workspace(ws.settings.data_dir).count() == 1
        # tokens signed before the backup still verify after it: the key came along
        token = collector.signer.issue("q-1", "r-1")
        ingest_after = example_event("result_clicked", token=token, session_id="after")
        assert Collector(ws).ingest([ingest_after], rate_limit=False).count("accepted") == 1
    finally:
        ws.dispose()
    assert (restored.root / ".amelio" / "secret_key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "live.zip").stat().st_mode & 0o077 == 0


def _rewrite(
    archive: Path,
    out: Path,
    *,
    member: str = "",
    data: bytes | None = None,
    manifest_path: str | None = None,
    edit: Callable[[dict[str, Any]], object] | None = None,
) -> None:
    """A copy of ``archive`` with one member's bytes changed, or listed under
    another name in the manifest, or the manifest edited."""
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(out, "w") as dst:
        manifest = json.loads(src.read("manifest.json"))
        for item in manifest["files"]:
            if item["path"] == member and manifest_path:
                item["path"] = manifest_path
        if edit is not None:
            edit(manifest)
        dst.writestr("manifest.json", json.dumps(manifest))
        for name in src.namelist():
            if name == "manifest.json":
                continue
            body = data if name == member and data is not None else src.read(name)
            dst.writestr(manifest_path if name == member and manifest_path else name, body)


def _damage(archive: Path, how: str) -> Path:
    out = archive.with_name(f"{how}.zip")
    raw = archive.read_bytes()
    if how == "truncated":
        out.write_bytes(raw[: len(raw) * 2 // 3])
    elif how == "flipped":
        with zipfile.ZipFile(archive) as zf:
            info = zf.getinfo(".amelio/amelio.db")
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        middle = start + info.compress_size // 2
        out.write_bytes(raw[:middle] + bytes([raw[middle] ^ 0xFF]) + raw[middle + 1 :])
    elif how == "forged":
        _rewrite(archive, out, member="amelio.toml", data=b"port = 9999\n")
    elif how == "miscounted":  # the manifest's rows are not the database's
        _rewrite(archive, out, edit=lambda m: m["tables"].update(feedback_events=29))
    elif how == "newer":  # a format this Amelio does not read
        _rewrite(archive, out, edit=lambda m: m.update(formatVersion=2))
    else:  # a member that would land outside the workspace
        _rewrite(
            archive,
            out,
            member="projects/acme/learnings.md",
            manifest_path="projects/../../escaped.md",
        )
    return out


WHY = {
    "truncated": "not a whole zip file",
    "flipped": "cannot be read|does not match its SHA-256",
    "forged": "amelio.toml does not match its (SHA-256|size)",
    "miscounted": "feedback_events has 30 rows where the manifest says 29",
    "newer": "format 'amelio-backup/2' is not 'amelio-backup/1': restore it with the Amelio",
    "escaping": "unexpected file 'projects/../../escaped.md'",
}


@pytest.mark.parametrize("how", sorted(WHY))
def test_a_damaged_backup_is_refused_and_leaves_the_target_alone(
    source: Workspace, tmp_path: Path, how: str
) -> None:
    good = backup_workspace(source.settings, tmp_path / "good.zip").path
    damaged = _damage(good, how)
    target, _ = init_workspace(tmp_path / "target")
    add_learning(target, "Keep me")
    target.dispose()
    before = files(target.root)
    with pytest.raises(InvalidInput, match="not a usable Amelio backup") as refused:
        restore_workspace(damaged, target.root, force=True)
    assert re.search(WHY[how], refused.value.message), refused.value.message
    assert files(target.root) == before
    with pytest.raises(InvalidInput, match="Nothing was restored"):
        restore_workspace(damaged, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    assert not (tmp_path / "escaped.md").exists()


def test_restore_replaces_a_workspace_with_data_only_when_forced(
    source: Workspace, tmp_path: Path
) -> None:
    archive = backup_workspace(source.settings, tmp_path / "b.zip").path
    fresh, _ = init_workspace(tmp_path / "fresh")  # `amelio init` alone is not data
    fresh.dispose()
    assert not restore_workspace(archive, fresh.root).replaced

    target, _ = init_workspace(tmp_path / "target")
    add_learning(target, "Only in the target", project="other")
    put_documents(target, Document("x", "X", "x"))
    target.dispose()
    before = files(target.root)
    with pytest.raises(Conflict, match="--force"):
        restore_workspace(archive, target.root)
    assert files(target.root) == before

    report = restore_workspace(archive, target.root, force=True)
    assert report.replaced
    assert set(report.removed) >= {"projects/other/learnings.md"}
    assert not (target.root / "projects" / "other" / "learnings.md").exists()
    ws = open_workspace(target.root)
    try:
        assert verify_events(ws).checked == 30
        assert [p.name for p in list_projects(ws.engine)] == ["acme", "default"]
        assert [
            d.doc_id for d in Fts5Engine.for_workspace(ws.settings.data_dir).all_documents()
        ] == ["vpn"]
    finally:
        ws.dispose()


def test_restore_refuses_a_database_another_process_has_open(
    source: Workspace, tmp_path: Path
) -> None:
    archive = backup_workspace(source.settings, tmp_path / "b.zip").path
    target, _ = init_workspace(tmp_path / "target")  # its pool keeps a connection, as serve's
    with pytest.raises(Conflict, match="amelio serve"):
        restore_workspace(archive, target.root, force=True)
    target.dispose()
    assert restore_workspace(archive, target.root, force=True).replaced is False


def test_a_secret_key_from_the_environment_must_be_given_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_SECRET_KEY", "kept-outside-the-workspace-0123456789")
    ws, _ = init_workspace(tmp_path / "source")
    ingest(Collector(ws), 5, "k")
    archive = backup_workspace(ws.settings, tmp_path / "b.zip").path
    ws.dispose()
    assert read_manifest(archive).key_source == "settings"

    monkeypatch.delenv("AMELIO_SECRET_KEY")
    with pytest.raises(ConfigError, match="set AMELIO_SECRET_KEY"):
        restore_workspace(archive, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()

    monkeypatch.setenv("AMELIO_SECRET_KEY", "kept-outside-the-workspace-0123456789")
    restored = open_workspace(restore_workspace(archive, tmp_path / "restored").root)
    assert verify_events(restored).checked == 5
    restored.dispose()


def test_an_older_backup_is_upgraded_and_a_newer_one_refused(tmp_path: Path) -> None:
    script = ScriptDirectory(str(Path(db_engine.__file__).with_name("migrations")))
    previous = script.get_revision(db.head_revision()).down_revision
    assert isinstance(previous, str)
    old = tmp_path / "old"
    (old / ".amelio").mkdir(parents=True)
    (old / "amelio.toml").write_text("")
    engine = db.create_engine(f"sqlite:///{old / '.amelio' / 'amelio.db'}")
    db.upgrade(engine, previous)
    engine.dispose()

    report = restore_workspace(
        backup_workspace(load_settings(old), tmp_path / "old.zip").path, tmp_path / "upgraded"
    )
    assert report.manifest.migration == previous
    assert report.upgraded and report.migration == db.head_revision()
    open_workspace(report.root).dispose()  # at head: it opens

    with sqlite3.connect(old / ".amelio" / "amelio.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    future = backup_workspace(load_settings(old), tmp_path / "future.zip").path
    with pytest.raises(InvalidInput, match="does not know"):
        restore_workspace(future, tmp_path / "future")
    assert not (tmp_path / "future").exists()


def test_postgresql_is_left_to_pg_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, _ = init_workspace(tmp_path / "ws")
    ws.dispose()
    archive = backup_workspace(ws.settings, tmp_path / "b.zip").path
    monkeypatch.setenv("AMELIO_DATABASE_URL", "postgresql+psycopg://amelio:s3cret@db/amelio")
    refused = run("-w", str(ws.root), "backup", str(tmp_path / "pg.zip"))
    assert refused.exit_code == 1
    assert "pg_dump" in refused.output and "s3cret" not in refused.output
    assert not (tmp_path / "pg.zip").exists()
    refused = run("-w", str(tmp_path / "new"), "restore", str(archive))
    assert refused.exit_code == 1 and "pg_restore" in refused.output
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("migrated_database_url", ["postgresql"], indirect=True)
def test_a_postgresql_workspace_says_pg_dump(workspace: Workspace, tmp_path: Path) -> None:
    refused = run("-w", str(workspace.root), "backup", str(tmp_path / "pg.zip"))
    assert refused.exit_code == 1 and "Error: " in refused.output
    assert "pg_dump" in refused.output


def test_the_commands_end_to_end(tmp_path: Path) -> None:
    src, new = tmp_path / "src", tmp_path / "new"
    assert run("init", str(src)).exit_code == 0
    events = tmp_path / "events.ndjson"
    events.write_text(
        "".join(json.dumps(example_event("vote_up", session_id=f"s{i}")) + "\n" for i in range(5))
    )
    assert run("-w", str(src), "feedback", "ingest", str(events)).exit_code == 0

    (tmp_path / "backups").mkdir()
    made = run("-w", str(src), "backup", str(tmp_path / "backups"), "--json")
    assert made.exit_code == 0
    archive = Path(json.loads(made.output)["path"])
    assert archive.parent == tmp_path / "backups" and archive.name.startswith("amelio-backup-")
    again = run("-w", str(src), "backup", str(archive))
    assert again.exit_code == 1 and "--force" in again.output
    assert run("-w", str(src), "backup", str(archive), "--force").exit_code == 0

    restored = run("-w", str(new), "restore", str(archive))
    assert restored.exit_code == 0, restored.output
    assert "feedback verify" in restored.output
    verified = run("-w", str(new), "feedback", "verify")
    assert verified.exit_code == 0 and "5 events verified" in verified.output

    refused = run("-w", str(new), "restore", str(archive))
    assert refused.exit_code == 1 and "--force" in refused.output
    forced = run("-w", str(new), "restore", str(archive), "--force", "--json")
    assert forced.exit_code == 0 and json.loads(forced.output)["replaced"] is True

    nowhere = run("restore", str(archive))  # cwd (tmp_path) is no workspace
    assert nowhere.exit_code == 1 and "amelio -w DIR restore" in nowhere.output


def test_a_backup_naming_a_path_outside_is_refused(source: Workspace, tmp_path: Path) -> None:
    """A database whose skill is named ``../../../x`` would have a later `amelio skills
    export` write outside its folder: such a backup is refused, whole."""
    save_skills(source.engine, [SkillSpec(name="triage", content="Body.\n")])
    with source.engine.begin() as conn:
        conn.execute(sa.update(skills_table).values(name="../../../x"))
    archive = backup_workspace(source.settings, tmp_path / "b.zip").path
    with pytest.raises(InvalidInput, match=r"skills\.name holds '\.\./\.\./\.\./x'"):
        restore_workspace(archive, tmp_path / "new")
    assert not (tmp_path / "new").exists()


THEIR_SETTINGS = """\
llm_provider = "openai"
llm_base_url = "https://llm.attacker.example/v1"
llm_api_key = "sk-their-key"
telegram_token = "123:their-bot"
notify_webhook_url = "https://hooks.attacker.example/improve"
cors_origins = "https://attacker.example"
claude_cli_path = "/tmp/their-claude"
port = 9999
"""
DROPPED = [
    "claude_cli_path",
    "cors_origins",
    "database_url",
    "llm_api_key",
    "llm_base_url",
    "notify_webhook_url",
    "telegram_token",
]


def test_the_backup_s_settings_neither_place_the_database_nor_come_along(
    tmp_path: Path,
) -> None:
    """A backup from someone else: its database_url named a file of the restoring
    user's, and its amelio.toml would have sent this workspace's prompts, reports and
    bot to its author. The database lands in the workspace; those settings stay out."""
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"precious, not a database")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "amelio.toml").write_text(
        f'database_url = "sqlite:///{victim}"\n' + THEIR_SETTINGS
    )
    victim.rename(tmp_path / "kept-aside")  # their machine had a database there
    theirs, _ = init_workspace(tmp_path / "theirs")
    ingest(Collector(theirs), 3, "t")
    archive = backup_workspace(theirs.settings, tmp_path / "theirs.zip").path
    theirs.dispose()
    victim.unlink()
    (tmp_path / "kept-aside").rename(victim)

    target, _ = init_workspace(tmp_path / "target")  # ours, with data: --force
    ingest(Collector(target), 2, "ours")
    target.dispose()
    report = restore_workspace(archive, target.root, force=True)
    assert victim.read_bytes() == b"precious, not a database"
    assert report.database == target.root / ".amelio" / "amelio.db"
    assert list(report.dropped) == DROPPED
    restored = load_settings(target.root)
    assert restored.port == 9999 and restored.llm_provider == "openai"
    assert restored.llm_base_url == "" and restored.telegram_token.get_secret_value() == ""
    assert restored.notify_webhook_url == "" and restored.cors_origins == ""
    assert restored.claude_cli_path == "claude" and restored.database_url == ""
    ws = open_workspace(target.root)
    try:
        assert verify_events(ws).checked == 3
    finally:
        ws.dispose()
    data = target.root / ".amelio"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "amelio.db").stat().st_mode) == 0o600

    shown = run("-w", str(tmp_path / "cli"), "restore", str(archive))
    assert shown.exit_code == 0, shown.output
    assert "left out of amelio.toml: claude_cli_path, cors_origins" in shown.output
    kept = run("-w", str(tmp_path / "mine"), "restore", str(archive), "--with-config", "--json")
    assert json.loads(kept.output)["droppedSettings"] == ["database_url"]
    mine = load_settings(tmp_path / "mine")
    assert mine.llm_base_url == "https://llm.attacker.example/v1" and mine.database_url == ""


def test_a_database_url_elsewhere_in_this_environment_is_refused(
    source: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = backup_workspace(source.settings, tmp_path / "b.zip").path
    monkeypatch.setenv("AMELIO_DATABASE_URL", f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(ConfigError, match="unset AMELIO_DATABASE_URL"):
        restore_workspace(archive, tmp_path / "new")
    assert not (tmp_path / "new").exists() and not (tmp_path / "other.db").exists()


def test_a_refused_restore_writes_nothing_not_even_a_database(
    source: Workspace, tmp_path: Path
) -> None:
    """Checking that nobody holds the database open used to lock it, which turns an
    empty file into a database even when the restore is then refused."""
    archive = backup_workspace(source.settings, tmp_path / "b.zip").path
    target = tmp_path / "target"
    (target / ".amelio").mkdir(parents=True)
    (target / ".amelio" / "amelio.db").touch()
    (target / "projects" / "acme").mkdir(parents=True)
    (target / "projects" / "acme" / "learnings.md").write_text("- [2024-01-01] [manual] Hi\n")
    before = files(target)
    with pytest.raises(Conflict, match="--force"):
        restore_workspace(archive, target)
    assert files(target) == before and (target / ".amelio" / "amelio.db").stat().st_size == 0


def test_a_manifest_is_bounded_before_it_is_read(source: Workspace, tmp_path: Path) -> None:
    """A few KB of zip that inflates to megabytes of manifest is refused before any
    of it is decompressed."""
    good = backup_workspace(source.settings, tmp_path / "good.zip").path
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        padded = src.read("manifest.json") + b" " * (9 << 20)  # still valid JSON
        dst.writestr("manifest.json", padded)
        for name in src.namelist():
            if name != "manifest.json":
                dst.writestr(name, src.read(name))
    assert bomb.stat().st_size < good.stat().st_size + 100_000
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match=r"manifest\.json is over 8 MB"):
            read_manifest(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    with pytest.raises(InvalidInput, match=r"manifest\.json is over 8 MB"):
        restore_workspace(bomb, tmp_path / "new")
    assert not (tmp_path / "new").exists()
