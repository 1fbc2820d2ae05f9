"""Export, import and `db copy`: a populated workspace goes out and comes back whole,
hashes included; a damaged or mismatched export changes nothing; SQLite moves to
PostgreSQL with every row, working sequences and a chain that verifies."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from amelio.cli import main
from amelio.db.schema import api_keys, interactions, metadata
from amelio.demo.app import prepare_demo
from amelio.errors import InvalidInput
from amelio.feedback.collector import verify_events
from amelio.ops.transfer import copy_database, export_workspace, import_workspace
from amelio.telegram import links
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace, open_workspace


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """The demo workspace (skills, interactions, feedback, searches, an improve run),
    plus a Telegram link and a routing example: every kind of row there is."""
    ws, _ = prepare_demo(tmp_path_factory.mktemp("demo") / "ws")
    links.redeem_invite(
        ws,
        links.create_invite(ws, project="default", role="admin")[1],
        chat_id=-1001234567890,
        title="Ops",
    )
    yield ws
    ws.dispose()


def _tables(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in (folder / "tables").iterdir()}


def test_export_then_import_gives_back_the_same_rows(demo: Workspace, tmp_path: Path) -> None:
    first = export_workspace(demo, tmp_path / "one")
    assert first.tables["interactions"] > 0 and first.tables["feedback_events"] > 0
    assert first.tables["telegram_chats"] == 1 and first.tables["search_impressions"] > 0
    assert set(first.tables) == {t.name for t in metadata.sorted_tables}
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["format"] == "amelio-export/1" and manifest["revision"] == first.revision

    target, _ = init_workspace(tmp_path / "target")
    try:
        (target.settings.data_dir / "secret_key").write_bytes(
            (demo.settings.data_dir / "secret_key").read_bytes()
        )
        from amelio.privacy.signing import forget_cached_key

        forget_cached_key()
        report = import_workspace(target, tmp_path / "one")
        assert report.tables == first.tables and report.chain == "ok"
        export_workspace(target, tmp_path / "two")
        # Byte for byte: ids, timestamps, JSON, the chain's hashes and signatures.
        assert _tables(tmp_path / "two") == _tables(tmp_path / "one")
        # The ids go on from the imported ones.
        key, _ = keys.create_key(target.engine, name="new", role="bot")
        assert key.id == first.tables["api_keys"] + 1
        with pytest.raises(InvalidInput, match="already holds data"):
            import_workspace(target, tmp_path / "one")
    finally:
        target.dispose()


def test_the_secret_key_can_travel_with_the_export(demo: Workspace, tmp_path: Path) -> None:
    export_workspace(demo, tmp_path / "out", with_secret_key=True)
    secret = tmp_path / "out" / "secret_key"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    target, _ = init_workspace(tmp_path / "target")
    try:
        report = import_workspace(target, tmp_path / "out")
        assert report.secret_key == "installed from the export" and report.chain == "ok"
        assert verify_events(target).ok
    finally:
        target.dispose()
    elsewhere, _ = init_workspace(tmp_path / "elsewhere")  # without the key: said
    try:
        export_workspace(demo, tmp_path / "bare")
        assert import_workspace(elsewhere, tmp_path / "bare").chain != "ok"
    finally:
        elsewhere.dispose()


def test_a_damaged_or_foreign_export_changes_nothing(demo: Workspace, tmp_path: Path) -> None:
    export_workspace(demo, tmp_path / "out")
    target, _ = init_workspace(tmp_path / "target")
    try:
        with target.engine.connect() as conn:
            before = conn.scalar(sa.select(sa.func.count()).select_from(api_keys))
        events = tmp_path / "out" / "tables" / "feedback_events.jsonl"
        original = events.read_text(encoding="utf-8")
        events.write_text(original.replace("1", "2", 1), encoding="utf-8")  # one digit
        with pytest.raises(InvalidInput, match="does not match its SHA-256"):
            import_workspace(target, tmp_path / "out")
        events.write_text(original, encoding="utf-8")
        manifest_path = tmp_path / "out" / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        revision = manifest["revision"]
        manifest["revision"] = "0009_search_bounces"
        manifest_path.write_text(json.dumps(manifest))
        with pytest.raises(InvalidInput, match="at migration '0009_search_bounces'"):
            import_workspace(target, tmp_path / "out")
        manifest["revision"] = revision
        manifest["tables"]["interactions"]["rows"] += 1  # the files are whole, the count is not
        manifest_path.write_text(json.dumps(manifest))
        with pytest.raises(InvalidInput, match=r"interactions has \d+ rows where the manifest"):
            import_workspace(target, tmp_path / "out")
        manifest["tables"]["interactions"]["rows"] -= 1
        manifest["format"] = "amelio-export/2"
        manifest_path.write_text(json.dumps(manifest))
        with pytest.raises(InvalidInput, match="import it with the Amelio that wrote it"):
            import_workspace(target, tmp_path / "out")
        manifest_path.write_text("{}")
        with pytest.raises(InvalidInput, match=r"is not 'amelio-export/1'"):
            import_workspace(target, tmp_path / "out")
        with pytest.raises(InvalidInput, match=r"no manifest\.json"):
            import_workspace(target, tmp_path)
        with target.engine.connect() as conn:
            assert conn.scalar(sa.select(sa.func.count()).select_from(api_keys)) == before
            assert not conn.scalar(sa.select(sa.func.count()).select_from(interactions))
    finally:
        target.dispose()
    with pytest.raises(InvalidInput, match="not empty"):
        export_workspace(demo, tmp_path / "out")


def test_cli_export_and_import(demo: Workspace, tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["-w", str(demo.root), "export", str(tmp_path / "x"), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["rows"] > 100
    assert runner.invoke(main, ["init", str(tmp_path / "t")]).exit_code == 0
    done = runner.invoke(main, ["-w", str(tmp_path / "t"), "import", str(tmp_path / "x")])
    assert done.exit_code == 0, done.output
    assert "Imported" in done.output and "Feedback chain:" in done.output
    again = runner.invoke(main, ["-w", str(tmp_path / "t"), "import", str(tmp_path / "x")])
    assert again.exit_code == 1 and "already holds data" in again.output


@pytest.mark.postgres
def test_db_copy_moves_a_sqlite_workspace_to_postgresql(demo: Workspace, postgres_url: str) -> None:
    url = postgres_url
    report = copy_database(demo, url)
    assert report.ok, report.to_dict()
    assert report.copied["interactions"] == report.source["interactions"] > 0
    with pytest.raises(InvalidInput, match="pass --force"):
        copy_database(demo, url)
    assert copy_database(demo, url, force=True).ok
    moved = open_workspace(
        demo.root, settings=demo.settings.model_copy(update={"database_url": url})
    )
    try:
        assert verify_events(moved).ok
        key, _ = keys.create_key(moved.engine, name="after", role="bot")
        assert key.id == report.source["api_keys"] + 1  # the sequence moved on
    finally:
        moved.dispose()
    done = CliRunner().invoke(main, ["-w", str(demo.root), "db", "copy", "--to", url, "--force"])
    assert done.exit_code == 0, done.output
    assert "Feedback chain on the target: ok." in done.output
    with pytest.raises(InvalidInput, match="own database"):
        copy_database(demo, demo.settings.effective_database_url)


def test_an_export_naming_a_path_outside_is_refused(demo: Workspace, tmp_path: Path) -> None:
    """A skill's name becomes a folder: an edited export (manifest digests made to
    match) must not bring in one that walks out of the skills folder."""
    export_workspace(demo, tmp_path / "out")
    rows = tmp_path / "out" / "tables" / "skills.jsonl"
    lines = rows.read_text(encoding="utf-8").splitlines(keepends=True)
    first = json.loads(lines[0])
    first["name"] = "../../../x"
    lines[0] = json.dumps(first, sort_keys=True, separators=(",", ":")) + "\n"
    rows.write_text("".join(lines), encoding="utf-8")
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["tables"]["skills"]
    data = rows.read_bytes()
    entry["bytes"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    target, _ = init_workspace(tmp_path / "target")
    try:
        with pytest.raises(InvalidInput, match=r"skills\.name holds '\.\./\.\./\.\./x'"):
            import_workspace(target, tmp_path / "out")
        with target.engine.connect() as conn:
            assert not conn.scalar(sa.select(sa.func.count()).select_from(interactions))
    finally:
        target.dispose()


def test_an_export_writes_through_no_planted_link(demo: Workspace, tmp_path: Path) -> None:
    """--force writes over a folder someone else could write to: links planted at the
    export's file names (the secret key's among them) are replaced, never followed."""
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "tables").mkdir(parents=True)
    for name in ("tables/interactions.jsonl", "secret_key", "manifest.json"):
        (out / name).symlink_to(victim)
    export_workspace(demo, out, force=True, with_secret_key=True)
    assert victim.read_text() == "precious"
    for name in ("tables/interactions.jsonl", "secret_key", "manifest.json"):
        assert not (out / name).is_symlink()
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    target, _ = init_workspace(tmp_path / "target")
    try:
        assert import_workspace(target, out).chain == "ok"
    finally:
        target.dispose()
