"""The ingest watcher: a folder of .md, .txt and .html files kept in sync with a notebook."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import watchfiles
from click.testing import CliRunner

from amelio import knowledge
from amelio.cli import main
from amelio.knowledge.watcher import FolderReport, apply_changes, html_to_text
from amelio.workspace.folder import Workspace

PAGE = """<html><head><title>Expense  policy</title><style>p {color: red}</style></head>
<body><h1>Expenses</h1><p>Meals are reimbursed up to 25&nbsp;EUR.</p>
<script>alert("x")</script><ul><li>Keep every receipt.</li></ul></body></html>"""


def test_documents_are_read_as_sources(tmp_path: Path) -> None:
    title, text = html_to_text(PAGE)
    assert title == "Expense policy"
    assert text == "Expenses\n\nMeals are reimbursed up to 25 EUR.\n\nKeep every receipt."
    (tmp_path / "guides").mkdir()
    md = tmp_path / "guides" / "vpn.md"
    md.write_text("Intro line\n\n# VPN guide\n\nConnect first.\n")
    source = knowledge.read_document(md, tmp_path)
    assert (source.source_id, source.title, source.kind) == ("guides/vpn.md", "VPN guide", "file")
    assert source.url == md.resolve().as_uri()
    assert source.updated_at.timestamp() == pytest.approx(md.stat().st_mtime, abs=1e-5)
    txt = tmp_path / "notes.txt"
    txt.write_text("plain")
    assert knowledge.read_document(txt, tmp_path).title == "notes"


def touch(path: Path, text: str, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def ids(ws: Workspace) -> set[str]:
    return {s["sourceId"] for s in knowledge.list_sources(ws, "raw")}


def test_a_folder_pass_syncs_changes_and_removals(workspace: Workspace, tmp_path: Path) -> None:
    ws = workspace
    raw = tmp_path / "raw"
    t = time.time() - 1000
    touch(raw / "a.md", "# Alpha\n\nThe alpha runbook.", t)
    touch(raw / "sub" / "b.txt", "Bravo notes about the bravo system.", t)
    touch(raw / "c.html", PAGE, t)
    touch(raw / "d.pdf", "not a document we read", t)
    touch(raw / ".git" / "e.md", "hidden", t)
    touch(raw / "empty.md", "   \n", t)
    knowledge.ensure_notebook(ws, "raw")
    knowledge.enqueue(
        ws,
        "raw",
        [
            knowledge.Source(
                "T-1",
                "A ticket, not a file.",
                knowledge.read_document(raw / "a.md", raw).updated_at,
            )
        ],
    )
    report = knowledge.sync_folder(ws, raw, "raw")
    assert sorted(report.queued) == ["a.md", "c.html", "sub/b.txt"]
    assert len(report.errors) == 1 and "empty.md" in report.errors[0]
    knowledge.drain(ws)
    assert ids(ws) == {"T-1", "a.md", "c.html", "sub/b.txt"}
    assert knowledge.sync_folder(ws, raw, "raw").unchanged == ["a.md", "c.html", "sub/b.txt"]

    touch(raw / "a.md", "# Alpha\n\nThe alpha runbook, version two.", t + 10)
    changed = apply_changes(ws, raw, "raw", {(watchfiles.Change.modified, str(raw / "a.md"))})
    assert changed.queued == ["a.md"]
    knowledge.drain(ws)
    answer = knowledge.answer_question(ws, "raw", "alpha version two", project="default")
    assert answer.citations[0].source_id == "a.md" and "version two" in answer.citations[0].text

    (raw / "sub" / "b.txt").unlink()
    removed = apply_changes(
        ws, raw, "raw", {(watchfiles.Change.deleted, str(raw / "sub" / "b.txt"))}
    )
    assert removed.removed == ["sub/b.txt"] and ids(ws) == {"T-1", "a.md", "c.html"}
    # Deleted while nobody watched: the next full pass notices (and spares the ticket).
    (raw / "c.html").unlink()
    assert knowledge.sync_folder(ws, raw, "raw").removed == ["c.html"]
    assert ids(ws) == {"T-1", "a.md"}


def test_watch_follows_a_real_folder(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    ws = sqlite_workspace
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "start.txt").write_text("Present before the watcher started.")
    stop = threading.Event()
    reports: list[FolderReport] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            knowledge.watch_folder(
                ws,
                raw,
                "raw",
                stop_event=stop,
                on_report=reports.append,
                debounce_ms=50,
                step_ms=10,
            )
        except BaseException as exc:  # surfaced by the assertions below
            errors.append(exc)

    def wait_for(condition: str, check: object) -> None:
        deadline = time.monotonic() + 10
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"timed out waiting for {condition}"
            assert not errors, errors
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for("the first pass", lambda: reports)
        assert ids(ws) == {"start.txt"}
        time.sleep(0.2)  # let the watcher arm itself before the first event
        (raw / "new.md").write_text("# New\n\nWritten while watching.")
        wait_for("new.md", lambda: "new.md" in ids(ws))
        (raw / "start.txt").unlink()
        wait_for("the removal", lambda: ids(ws) == {"new.md"})
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive() and not errors


def test_watch_command_needs_a_folder(sqlite_workspace: Workspace, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["-w", str(sqlite_workspace.root), "watch", str(tmp_path / "missing"), "-n", "raw"]
    )
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_link_out_of_the_folder_is_reported_and_never_read(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    ws = sqlite_workspace
    raw, private = tmp_path / "raw", tmp_path / "private"
    touch(raw / "a.md", "# Alpha\n\nThe alpha runbook.", time.time() - 100)
    touch(private / "secret.md", "# Secret\n\nThe root password is hunter2.", time.time() - 100)
    (raw / "leak.md").symlink_to(private / "secret.md")
    (raw / "docs").symlink_to(private, target_is_directory=True)
    knowledge.ensure_notebook(ws, "raw")
    report = knowledge.sync_folder(ws, raw, "raw")
    assert report.queued == ["a.md"]
    assert len(report.errors) == 1 and "leak.md" in report.errors[0]
    assert "outside" in report.errors[0]
    changed = apply_changes(ws, raw, "raw", {(watchfiles.Change.added, str(raw / "leak.md"))})
    assert changed.queued == [] and "outside" in changed.errors[0]
    knowledge.drain(ws)
    assert ids(ws) == {"a.md"}
    assert not knowledge.answer_question(ws, "raw", "root password", project="default").citations
