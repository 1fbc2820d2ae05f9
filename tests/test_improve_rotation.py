"""Skill folder rotation: the visible files are always exactly the old or the new state,
and a backup is named by the registry version it holds.

Crashes are simulated by letting the k-th filesystem change (a file write, an
``os.replace`` or an ``os.unlink``) raise instead of happening, for every k, and
then running :func:`recover` as a restarted process would. The database commit
sits between staging and applying, so a crash while staging means "not committed"
and a crash while applying means "committed"; right after staging both happen.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amelio.errors import Conflict, SkillFileError
from amelio.improve import rotation
from amelio.improve.rotation import (
    EDITED,
    JOURNAL,
    Rotation,
    recover,
    rename_backups,
    stage_rotation,
)

EVALS = "triage.evals.json"
NEW_MD = "---\nname: triage\n---\n\nNew body. ünïcode\n"
NEW_EVALS = '{"version": 1, "skill": "triage", "rules": []}\n'
BACKUP = re.compile(r"^SKILL\.v([1-9][0-9]*)\.md$")
CURRENT = 6  # the registry version the old SKILL.md holds; 7 is being written

Files = dict[str, bytes]
T = TypeVar("T")


class Crash(BaseException):
    """The process died here; a BaseException so no ``except OSError`` cleans up."""


def snapshot(folder: Path) -> Files:
    """Every entry of the folder, hidden ones included, with its bytes."""
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def make_folder(root: Path, files: Files) -> Path:
    folder = root / "triage"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def expected_new(
    old: Files,
    skill_md: str,
    evals_json: str | None,
    backups: int = 3,
    current: int | None = CURRENT,
    current_md: bytes | None = None,
) -> Files:
    """The rotation written the simple way, as the reference: the outgoing SKILL.md
    becomes SKILL.v<current>.md (SKILL.edited.md when it is no version), and the
    ``backups`` newest versions stay."""
    versions = {int(m.group(1)): n for n in old if (m := BACKUP.match(n))}
    new = {n: b for n, b in old.items() if n not in ("SKILL.md", EVALS, *versions.values())}
    outgoing = current_md if current_md is not None else old.get("SKILL.md")
    keep = set(sorted(versions, reverse=True)[:backups])
    if outgoing is not None and backups > 0:
        if current is None:
            new[EDITED] = outgoing
        else:
            keep = set(sorted({*versions, current}, reverse=True)[:backups])
            if current in keep:
                new[f"SKILL.v{current}.md"] = outgoing
    for version in keep & set(versions):
        new.setdefault(versions[version], old[versions[version]])
    if backups == 0:
        new.pop(EDITED, None)
    new["SKILL.md"] = skill_md.encode("utf-8")
    if evals_json is not None:
        new[EVALS] = evals_json.encode("utf-8")
    return new


def old_state(n_backups: int, *, evals: bool = True) -> Files:
    files = {"SKILL.md": b"current\n", "notes.txt": b"not ours\n"}
    files.update({f"SKILL.v{i}.md": f"backup {i}\n".encode() for i in range(1, n_backups + 1)})
    if evals:
        files[EVALS] = b'{"old": true}\n'
    return files


@contextmanager
def crash_after(k: int | None, calls: list[str] | None = None) -> Iterator[None]:
    """Let ``k`` filesystem changes happen, then die on the next one (never if None).

    A dying write leaves half its bytes behind, as a killed process would.
    """
    real_replace, real_unlink, real_write = os.replace, os.unlink, rotation._write_synced
    done = 0

    def gate(kind: str) -> bool:
        nonlocal done
        if calls is not None:
            calls.append(kind)
        if k is not None and done >= k:
            return False
        done += 1
        return True

    def replace(src: Any, dst: Any) -> None:
        if not gate("replace"):
            raise Crash
        real_replace(src, dst)

    def unlink(path: Any) -> None:
        if not gate("unlink"):
            raise Crash
        real_unlink(path)

    def write(path: Path, data: bytes) -> None:
        if not gate("write"):
            path.write_bytes(data[: len(data) // 2])
            raise Crash
        real_write(path, data)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", replace)
        mp.setattr(os, "unlink", unlink)
        mp.setattr(rotation, "_write_synced", write)
        yield


def stage(
    folder: Path,
    evals_json: str | None = NEW_EVALS,
    backups: int = 3,
    current: int | None = CURRENT,
    current_md: str | None = None,
) -> Rotation:
    return stage_rotation(
        folder,
        skill_md=NEW_MD,
        evals_json=evals_json,
        evals_name=EVALS,
        target_version=7,
        current_version=current,
        current_md=current_md,
        backups=backups,
    )


def committed_is(flag: bool) -> Callable[[int], bool]:
    def committed(version: int) -> bool:
        assert version == 7
        return flag

    return committed


def never_asked(version: int) -> bool:
    raise AssertionError("no journal, so the database must not be consulted")


def count_calls(action: Callable[[], T]) -> tuple[T, int]:
    """Run ``action`` without crashing; return its result and how many changes it made."""
    calls: list[str] = []
    with crash_after(None, calls):
        result = action()
    return result, len(calls)


# Normal rotations


@pytest.mark.parametrize("n_backups", [0, 1, 2, 3, 4])
@pytest.mark.parametrize(
    ("had_evals", "evals_json"),
    [(True, NEW_EVALS), (True, None), (False, NEW_EVALS), (False, None)],
)
def test_rotation_keeps_three_backups(
    tmp_path: Path, n_backups: int, had_evals: bool, evals_json: str | None
) -> None:
    old = old_state(n_backups, evals=had_evals)  # versions 1..n_backups, SKILL.md v6
    folder = make_folder(tmp_path, old)
    stage(folder, evals_json).apply()
    after = snapshot(folder)
    assert after == expected_new(old, NEW_MD, evals_json)
    assert after["SKILL.md"] == NEW_MD.encode()
    assert after["SKILL.v6.md"] == b"current\n"  # version 6, not "one back"
    kept = sorted((n for n in after if BACKUP.match(n)), key=lambda n: int(n[7:-3]))
    newest = [*range(1, n_backups + 1), CURRENT][-3:]
    assert kept == [f"SKILL.v{i}.md" for i in newest]
    for i in newest[:-1]:
        assert after[f"SKILL.v{i}.md"] == f"backup {i}\n".encode()
    assert after.get(EVALS) == (None if evals_json is None else NEW_EVALS.encode())
    assert after["notes.txt"] == b"not ours\n"


def test_a_hand_edit_is_kept_apart_and_an_approved_one_stays(tmp_path: Path) -> None:
    """A SKILL.md that is no registry version is no SKILL.vN.md; an approved hand edit
    is the new version already, and the version it replaced becomes the backup."""
    old = {**old_state(1), EDITED: b"an older edit\n"}
    folder = make_folder(tmp_path / "edit", old)
    stage(folder, current=None).apply()
    assert snapshot(folder) == expected_new(old, NEW_MD, NEW_EVALS, current=None)
    assert snapshot(folder)[EDITED] == b"current\n"
    assert "SKILL.v6.md" not in snapshot(folder)

    folder = make_folder(tmp_path / "approved", old_state(0))
    stage(folder, current_md="version 6 as written\n").apply()
    after = snapshot(folder)
    assert after["SKILL.v6.md"] == b"version 6 as written\n"
    assert after == expected_new(old_state(0), NEW_MD, NEW_EVALS, current_md=after["SKILL.v6.md"])


def test_staging_changes_nothing_visible(tmp_path: Path) -> None:
    old = old_state(4)
    folder = make_folder(tmp_path, old)
    staged = stage(folder, None)
    visible = {n: b for n, b in snapshot(folder).items() if not n.startswith(".")}
    assert visible == old
    assert json.loads((folder / JOURNAL).read_text())["target_version"] == 7
    assert staged.deletes == ("SKILL.v1.md", "SKILL.v2.md", EVALS)
    assert staged.writes == ("SKILL.v6.md", "SKILL.md")
    assert f".SKILL.v6.md{rotation.TEMP_SUFFIX}" in snapshot(folder)


def test_first_version_and_no_backups(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, {"SKILL.v2.md": b"orphan\n"})
    stage(folder).apply()
    assert snapshot(folder) == {
        "SKILL.md": NEW_MD.encode(),
        "SKILL.v2.md": b"orphan\n",  # its name is its version: it stays as it is
        EVALS: NEW_EVALS.encode(),
    }
    folder = make_folder(tmp_path / "zero", old_state(2))
    stage(folder, backups=0).apply()
    assert snapshot(folder) == {
        "SKILL.md": NEW_MD.encode(),
        "notes.txt": b"not ours\n",
        EVALS: NEW_EVALS.encode(),
    }


# Idempotence and misuse


def test_recover_on_clean_or_missing_folder_is_a_noop(tmp_path: Path) -> None:
    old = old_state(2)
    folder = make_folder(tmp_path, old)
    assert recover(folder, never_asked) is None
    assert snapshot(folder) == old
    assert recover(tmp_path / "missing", never_asked) is None


def test_second_apply_and_recover_are_noops(tmp_path: Path) -> None:
    old = old_state(3)
    folder = make_folder(tmp_path, old)
    staged = stage(folder, None)
    staged.apply()
    new = snapshot(folder)
    (folder / EVALS).write_bytes(b"written later\n")  # a second apply must not delete it
    staged.apply()
    assert recover(folder, never_asked) is None
    assert snapshot(folder) == {**new, EVALS: b"written later\n"}
    with pytest.raises(RuntimeError, match="applied"):
        staged.abort()


def test_abort_restores_old_state_and_is_idempotent(tmp_path: Path) -> None:
    old = old_state(3)
    folder = make_folder(tmp_path, old)
    staged = stage(folder)
    staged.abort()
    staged.abort()
    assert snapshot(folder) == old
    with pytest.raises(RuntimeError, match="aborted"):
        staged.apply()


def test_recover_twice_after_journal(tmp_path: Path) -> None:
    old = old_state(1)
    folder = make_folder(tmp_path, old)
    stage(folder)
    assert recover(folder, committed_is(True)) == "forward"
    assert recover(folder, never_asked) is None
    assert snapshot(folder) == expected_new(old, NEW_MD, NEW_EVALS)


def test_pending_rotation_blocks_a_new_one(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, old_state(1))
    stage(folder)
    with pytest.raises(Conflict, match="recover"):
        stage(folder)


def test_stray_copies_without_journal_are_cleaned(tmp_path: Path) -> None:
    old = old_state(1)
    folder = make_folder(tmp_path, {**old, ".SKILL.md.amelio-new": b"half"})
    assert recover(folder, never_asked) == "cleaned"
    assert snapshot(folder) == old


@pytest.mark.parametrize(
    ("owner", "name", "nth"),
    [
        (rotation, "_write_synced", 1),
        (rotation, "_write_synced", 4),  # the journal's
        (os, "replace", 1),
        (rotation, "_fsync_dir", 1),
        (rotation, "_fsync_dir", 2),
    ],
)
def test_failed_stage_leaves_old_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, nth: int
) -> None:
    """An OSError while staging (disk full, even after the journal landed) cleans up."""
    old = old_state(3)
    folder = make_folder(tmp_path, old)
    real = getattr(owner, name)
    calls = 0

    def disk_full(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == nth:
            raise OSError(28, "No space left on device")
        real(*args)

    monkeypatch.setattr(owner, name, disk_full)
    with pytest.raises(OSError, match="No space"):
        stage(folder)
    monkeypatch.undo()
    assert snapshot(folder) == old
    assert recover(folder, never_asked) is None


def test_tampered_journal_is_refused(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, old_state(0))
    journal = {"format": 1, "target_version": 7, "writes": [], "deletes": ["../outside"]}
    (folder / JOURNAL).write_text(json.dumps(journal))
    with pytest.raises(SkillFileError, match="unreadable rotation journal"):
        recover(folder, committed_is(True))
    (folder / JOURNAL).write_text("{")
    with pytest.raises(SkillFileError, match="delete it"):
        recover(folder, committed_is(True))


@pytest.mark.parametrize(
    "name", ["", ".hidden", "../x", "a/b", "SKILL.md", "SKILL.v2.md", "SKILL.edited.md"]
)
def test_bad_evals_name_is_refused(tmp_path: Path, name: str) -> None:
    folder = make_folder(tmp_path, old_state(0))
    with pytest.raises(ValueError, match=r"file name|cannot be named"):
        stage_rotation(
            folder,
            skill_md="x",
            evals_json=None,
            evals_name=name,
            target_version=1,
            current_version=None,
        )


# Crash at every point

CASES = [
    (n, had, ev)
    for n in (0, 3, 4)
    for had, ev in ((True, NEW_EVALS), (True, None), (False, NEW_EVALS))
]


@pytest.mark.parametrize(("n_backups", "had_evals", "evals_json"), CASES)
def test_crash_at_every_point_of_stage_commit_apply(
    tmp_path: Path, n_backups: int, had_evals: bool, evals_json: str | None
) -> None:
    old = old_state(n_backups, evals=had_evals)
    new = expected_new(old, NEW_MD, evals_json)
    probe = make_folder(tmp_path / "probe", old)
    staged, n_stage = count_calls(lambda: stage(probe, evals_json))
    _, n_apply = count_calls(staged.apply)
    assert snapshot(probe) == new
    total = n_stage + n_apply
    assert n_stage > 3 and n_apply > 3

    runs = 0
    for k in range(total + 1):
        flags = [False, True] if k == n_stage else [k > n_stage]
        for flag in flags:
            folder = make_folder(tmp_path / f"k{k}-{flag}", old)
            with crash_after(k), suppress(Crash):
                staged = stage(folder, evals_json)
                if flag:  # the database commit succeeded
                    staged.apply()
            if k < n_stage:
                assert recover(folder, never_asked) in (None, "cleaned")
            elif k == total:
                assert recover(folder, never_asked) is None
            else:
                assert recover(folder, committed_is(flag)) == ("forward" if flag else "back")
            assert snapshot(folder) == (new if flag else old), (k, flag)
            runs += 1
    assert runs == total + 2


@pytest.mark.parametrize("direction", ["abort", "recover-back", "recover-forward"])
def test_crash_while_undoing_or_finishing_then_recover(tmp_path: Path, direction: str) -> None:
    old = old_state(3)
    new = expected_new(old, NEW_MD, None)
    forward = direction == "recover-forward"

    def finish(folder: Path, staged: Rotation) -> object:
        if direction == "abort":
            staged.abort()
            return None
        return recover(folder, committed_is(forward))

    probe = make_folder(tmp_path / "probe", old)
    staged = stage(probe, None)
    _, n = count_calls(lambda: finish(probe, staged))
    for k in range(n + 1):
        folder = make_folder(tmp_path / f"k{k}", old)
        staged = stage(folder, None)
        with crash_after(k), suppress(Crash):
            finish(folder, staged)
        outcome = recover(folder, committed_is(forward))
        assert outcome == (None if k == n else "forward" if forward else "back")
        assert snapshot(folder) == (new if forward else old), k


def test_crash_in_apply_then_crash_in_recovery(tmp_path: Path) -> None:
    old = old_state(4)
    new = expected_new(old, NEW_MD, NEW_EVALS)
    probe = make_folder(tmp_path / "probe", old)
    staged = stage(probe)
    _, n_apply = count_calls(staged.apply)
    for j in range(n_apply):
        for i in range(n_apply + 2):
            folder = make_folder(tmp_path / f"j{j}-i{i}", old)
            staged = stage(folder)
            for k, action in (
                (j, staged.apply),
                (i, lambda f=folder: recover(f, committed_is(True))),
            ):
                with crash_after(k), suppress(Crash):
                    action()
            recover(folder, committed_is(True))
            assert snapshot(folder) == new, (j, i)


# Random folders


_extra_names = st.sampled_from(
    [
        "notes.txt",
        "SKILL.v0.md",
        "SKILL.v01.md",
        "SKILL.v9.md",
        "SKILL.v4.md",
        "SKILL.v5.md",
        "other.evals.json",
    ]
)
_slot_names = st.sampled_from(
    ["SKILL.md", "SKILL.v1.md", "SKILL.v2.md", "SKILL.v3.md", "SKILL.v6.md", EDITED, EVALS]
)


@settings(max_examples=150, deadline=None, database=None)
@given(
    old=st.dictionaries(st.one_of(_slot_names, _extra_names), st.binary(max_size=40), max_size=10),
    skill_md=st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
    evals_json=st.none() | st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    backups=st.integers(0, 4),
    current=st.none() | st.integers(1, 6),
    crash_at=st.integers(0, 60),
    commit_succeeds=st.booleans(),
)
def test_random_folders_end_old_or_new(
    old: Files,
    skill_md: str,
    evals_json: str | None,
    backups: int,
    current: int | None,
    crash_at: int,
    commit_succeeds: bool,
) -> None:
    """Any folder, any crash point: recover() lands on the state the database holds."""
    expected = expected_new(old, skill_md, evals_json, backups, current)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_folder(Path(tmp), old)
        committed = False
        with crash_after(crash_at), suppress(Crash):
            staged = stage_rotation(
                folder,
                skill_md=skill_md,
                evals_json=evals_json,
                evals_name=EVALS,
                target_version=7,
                current_version=current,
                backups=backups,
            )
            committed = commit_succeeds  # the database commit sits here
            if committed:
                staged.apply()
        assert recover(folder, committed_is(committed)) in (None, "cleaned", "forward", "back")
        assert snapshot(folder) == (expected if committed else old)
        assert recover(folder, never_asked) is None


# Backups an older Amelio named by position

POSITIONAL = {  # at v4, SKILL.v1.md was "one back": version 3, and SKILL.v3.md version 1
    "SKILL.md": b"version 4\n",
    "SKILL.v1.md": b"version 3\n",
    "SKILL.v2.md": b"a declined hand edit\n",
    "SKILL.v3.md": b"version 1\n",
    "notes.txt": b"not ours\n",
}
BY_VERSION = {
    "SKILL.md": b"version 4\n",
    "SKILL.v3.md": b"version 3\n",
    EDITED: b"a declined hand edit\n",
    "SKILL.v1.md": b"version 1\n",
    "notes.txt": b"not ours\n",
}


def version_of(data: bytes) -> int | None:
    return {b"version 3\n": 3, b"version 2\n": 2, b"version 1\n": 1}.get(data)


def test_backups_named_by_position_get_their_version_s_name(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, POSITIONAL)
    assert rename_backups(folder, version_of, 4)
    assert snapshot(folder) == BY_VERSION
    assert not rename_backups(folder, version_of, 4)  # named right: nothing to do
    stage(folder, current=4).apply()  # and the next rotation keeps the newest three
    after = snapshot(folder)
    assert sorted(n for n in after if BACKUP.match(n)) == [
        "SKILL.v1.md",
        "SKILL.v3.md",
        "SKILL.v4.md",
    ]
    assert after["SKILL.v4.md"] == b"version 4\n" and after["SKILL.md"] == NEW_MD.encode()


def test_a_backup_whose_name_is_taken_keeps_its_own(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, {**POSITIONAL, EDITED: b"a newer edit\n"})
    assert rename_backups(folder, version_of, 4)
    kept = {"SKILL.v2.md": b"a declined hand edit\n", EDITED: b"a newer edit\n"}
    assert snapshot(folder) == {**BY_VERSION, **kept}


def test_a_crash_while_renaming_backups_is_finished(tmp_path: Path) -> None:
    probe = make_folder(tmp_path / "probe", POSITIONAL)
    _, n = count_calls(lambda: rename_backups(probe, version_of, 4))
    for k in range(n + 1):
        folder = make_folder(tmp_path / f"k{k}", POSITIONAL)
        with crash_after(k), suppress(Crash):
            rename_backups(folder, version_of, 4)
        recover(folder, lambda version: version <= 4)
        rename_backups(folder, version_of, 4)
        assert snapshot(folder) == BY_VERSION, k
