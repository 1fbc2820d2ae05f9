"""Keep an Agent Skills folder in step with the registry (``amelio skills sync DIR``).

An Agent Skills folder is the layout Claude Code and other agents read: one
folder per skill holding ``SKILL.md``. The database stays the source of truth;
the folder is a view of one project's skills that people may also edit::

    DIR/
      .amelio-sync.json            what this sync last wrote (hidden: agents skip it)
      <name>/SKILL.md              the approved version, rendered
      <name>/<name>.evals.json     the eval rules (agents load only SKILL.md and
                                   the files it links to, so they never read it)
      <name>/SKILL.v7.md …         earlier versions, named by registry version
                                   (the 3 newest), by the usual rotation
      <name>/SKILL.edited.md       the last hand edit the registry's version replaced

One pass (:func:`sync_skills`) looks at every skill of the registry, the folder
and the state file, and for each one:

* the registry has a version the folder does not → it is written with the
  crash-safe rotation of :mod:`amelio.improve.rotation` (``SKILL.md``, at v7,
  becomes ``SKILL.v7.md``);
* the folder's files differ from what the last pass wrote → a hand edit: its
  body becomes a pending proposal (``proposed_by="human"``) and the file stays
  as the person wrote it until the proposal is decided. Approved, the folder is
  adopted as is and the version it replaced rotates to its backup; rejected,
  the registry's version is written back and the edit survives as
  ``SKILL.edited.md``. An edit made on a version the registry has since moved
  past is refused (``stale``), as a stale proposal is: approving it would undo
  the newer versions;
* a folder the registry does not know → a proposal for a new skill, validated
  as ``amelio skills import`` would validate it;
* a skill whose folder was deleted → reported, never deleted from the registry.

To tell a hand edit from Amelio's own write, the state file remembers a hash of
each skill's files as written, with the registry content they came from. It lives
inside DIR so that it moves, and is backed up, with the folder, and a restart
reads it back. Without it (a first sync of an existing folder), a file that
equals the registry or an older version of it is Amelio's; anything else is a
hand edit.

One sync per folder at a time: run either ``--watch`` or one-off passes.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import watchfiles

from amelio.errors import AmelioError, InvalidInput
from amelio.improve import proposals, rotation
from amelio.skills import files, sync_files
from amelio.skills.model import Skill, SkillSpec
from amelio.skills.store import list_skills, list_versions, version_of_file
from amelio.skills.sync_files import (
    STATE_FILE,
    link_out,
    load_state,
    save_state,
    skill_folders,
    state_entry,
    watch_filter,
    write_version_files,
)
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["ACTIONS", "STATE_FILE", "SyncItem", "SyncReport", "sync_skills", "watch_skills"]

_META_FIELDS = ("description", "triggers", "keywords", "extra", "evals")

#: What a pass did (or, with ``dry_run``, would do) for one skill.
ACTIONS = {
    "unchanged": "folder and registry agree",
    "write": "the registry's version was written to the folder (rotated)",
    "adopt": "the folder already held the registry's version; remembered it (after "
    "an approved hand edit, the version it replaced rotates to SKILL.v<N>.md)",
    "propose": "a hand edit became a pending proposal; the file is kept as written",
    "pending": "a hand edit waits for its proposal's decision; the file is kept",
    "kept": "a hand edit that is not a proposal (front matter or evals only); kept",
    "stale": "a hand edit made on a version the registry has moved past: not "
    "proposed (approving it would undo the newer versions); the file is kept",
    "restore": "a hand edit's proposal was declined; the registry's version was "
    f"written back and the edit kept as {rotation.EDITED}",
    "new": "a folder the registry does not know became a new-skill proposal",
    "declined": "a new-skill proposal was declined; the folder is left alone",
    "missing": "the folder was deleted; the registry keeps the skill",
    "error": "a file could not be read or proposed; the other skills still synced",
}


@dataclass(frozen=True)
class SyncItem:
    """One skill's outcome; ``file`` and ``field`` say where an error is."""

    skill: str
    action: str
    detail: str = ""
    version: int | None = None
    proposal_id: int | None = None
    file: str | None = None
    field: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "action": self.action,
            "detail": self.detail,
            "version": self.version,
            "proposalId": self.proposal_id,
            "file": self.file,
            "field": self.field,
        }


@dataclass
class SyncReport:
    """A pass over one folder; with ``dry_run`` nothing was written or proposed."""

    folder: str
    project: str | None
    dry_run: bool
    items: list[SyncItem] = field(default_factory=list)

    @property
    def errors(self) -> list[SyncItem]:
        return [i for i in self.items if i.action == "error"]

    @property
    def failures(self) -> list[SyncItem]:
        """The skills this pass could not bring in step: errors and stale edits."""
        return [i for i in self.items if i.action in ("error", "stale")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "project": self.project,
            "dryRun": self.dry_run,
            "items": [i.to_dict() for i in self.items],
        }


def _changed_fields(a: SkillSpec, b: SkillSpec) -> list[str]:
    return [f for f in _META_FIELDS if getattr(a, f) != getattr(b, f)]


# -- one pass ------------------------------------------------------------------------------


@dataclass
class _Pass:
    """What one pass needs at hand; its methods decide one skill each."""

    ws: Workspace
    root: Path
    project: str | None
    author: str
    dry_run: bool
    state: dict[str, dict[str, Any]]
    report: SyncReport

    @property
    def view(self) -> str:
        return self.project or DEFAULT_PROJECT

    def add(self, skill: str, action: str, detail: str = "", **kw: Any) -> None:
        self.report.items.append(SyncItem(skill, action, detail, **kw))

    def error(self, skill: str, exc: AmelioError | OSError) -> None:
        self.report.items.append(_error_item(skill, exc))

    def withdraw(self, skill: str, entry: dict[str, Any] | None, why: str) -> None:
        """Reject this sync's own pending proposal for ``skill``: the edit it carried is gone."""
        if self.dry_run or entry is None or entry.get("proposal") is None:
            return
        old = proposals.get_proposal(self.ws, int(entry["proposal"]))
        if old.status == "pending":
            proposals.reject_proposal(self.ws, old.id, actor=self.author, reason=why)

    def write(
        self,
        skill: Skill,
        action: str,
        detail: str,
        current: int | None,
        replaced: SkillSpec | None = None,
        **kw: Any,
    ) -> None:
        """Bring the folder to ``skill``
        (see :func:`~amelio.skills.sync_files.write_version_files`)."""
        if not self.dry_run:
            written = write_version_files(self.root / skill.name, skill, current, replaced)
            self.state[skill.name] = state_entry(skill, written)
        self.add(skill.name, action, detail, version=skill.version, **kw)

    def adopt(self, skill: Skill, files_hash: str, detail: str) -> None:
        if not self.dry_run:
            self.state[skill.name] = state_entry(skill, files_hash)
        self.add(skill.name, "adopt", detail, version=skill.version)

    # -- a skill the registry holds --------------------------------------------------------

    def registered(self, skill: Skill) -> None:
        folder = self.root / skill.name
        entry = self.state.get(skill.name)
        if not (folder / files.SKILL_FILE).is_file():
            if entry is None:
                self.write(skill, "write", f"new in the folder at v{skill.version}", None)
            else:
                if not self.dry_run:
                    self.state[skill.name] = {**entry, "deleted": True}
                self.add(
                    skill.name,
                    "missing",
                    "deleted from the folder; the registry keeps "
                    f"it (v{skill.version}); remove its entry from {STATE_FILE} to have "
                    "it written again",
                    version=skill.version,
                )
            return
        if not self.dry_run:
            rotation.recover(folder, lambda version: skill.version >= version)
            rotation.rename_backups(
                folder, version_of_file(self.ws.engine, skill.name, self.view), skill.version
            )
        files_hash = sync_files.files_hash(folder, skill.name)
        if (
            entry is not None
            and entry.get("proposal") is not None
            and entry.get("proposedHash") == files_hash
        ):
            self.awaiting(skill, entry, files_hash)
        elif (
            entry is not None and not entry.get("deleted") and entry.get("filesHash") == files_hash
        ):
            undone = ""
            if entry.get("proposal") is not None:  # back as written: the edit was undone
                self.withdraw(skill.name, entry, "the edit was undone in the folder")
                undone = f"the edit was undone; proposal #{entry['proposal']} withdrawn"
                if not self.dry_run:
                    self.state[skill.name] = {
                        k: v for k, v in entry.items() if k not in ("proposal", "proposedHash")
                    }
            if entry.get("registryHash") == skill.spec.content_hash():
                self.add(skill.name, "unchanged", undone, version=skill.version)
            else:
                was = entry.get("version")
                held = was if isinstance(was, int) else None
                self.write(skill, "write", f"v{was} → v{skill.version}", held)
        else:
            self.edited(skill, entry, files_hash)

    def awaiting(self, skill: Skill, entry: dict[str, Any], files_hash: str) -> None:
        """The folder still holds the edit that proposal ``entry['proposal']`` carries."""
        proposal = proposals.get_proposal(self.ws, int(entry["proposal"]))
        if proposal.status == "pending":
            self.add(
                skill.name,
                "pending",
                f"proposal #{proposal.id} awaits a decision: `amelio proposals diff "
                f"{proposal.id}`, then `amelio proposals approve {proposal.id}` (or reject)",
                version=skill.version,
                proposal_id=proposal.id,
            )
            return
        if proposal.status == "approved":
            base = proposal.base_version
            replaced = self.version(skill.name, base)
            if self.parse(skill.name) == skill.spec and replaced is None:  # a new skill
                self.adopt(skill, files_hash, f"proposal #{proposal.id} approved as v1")
            elif self.parse(skill.name) == skill.spec:
                self.write(
                    skill,
                    "adopt",
                    f"proposal #{proposal.id} approved as v{skill.version}; v{base} "
                    f"kept as {rotation.backup_name(base)}",
                    base,
                    replaced,
                    proposal_id=proposal.id,
                )
            else:
                self.write(
                    skill,
                    "write",
                    f"proposal #{proposal.id} approved; v{skill.version} written, the "
                    f"rest of the edit kept as {rotation.EDITED}",
                    None,
                    proposal_id=proposal.id,
                )
            return
        self.write(
            skill,
            "restore",
            f"proposal #{proposal.id} was {proposal.status}; "
            f"v{skill.version} written back, the edit kept as {rotation.EDITED}",
            None,
            proposal_id=proposal.id,
        )

    def parse(self, name: str) -> SkillSpec:
        """The folder's skill, read and checked exactly as `amelio skills import` does."""
        (spec,) = files.read_skills(self.root / name)
        return spec

    def version(self, name: str, number: int) -> SkillSpec | None:
        """Version ``number`` of skill ``name`` as this view sees it (None: no such)."""
        for v in list_versions(self.ws.engine, name, self.view):
            if v.version == number:
                return v.spec
        return None

    def base(self, skill: Skill, entry: dict[str, Any] | None) -> tuple[int, SkillSpec]:
        """The registry version the folder was last written from (else the current one)."""
        if entry is None or entry.get("registryHash") == skill.spec.content_hash():
            return skill.version, skill.spec
        for version in list_versions(self.ws.engine, skill.name, self.view):
            if version.version == entry.get("version") and version.spec.content_hash() == entry.get(
                "registryHash"
            ):
                return version.version, version.spec
        return skill.version, skill.spec

    def edited(self, skill: Skill, entry: dict[str, Any] | None, files_hash: str) -> None:
        """The files differ from what this sync last wrote (or it never wrote them)."""
        try:
            spec = self.parse(skill.name)
        except (AmelioError, OSError) as exc:
            self.error(skill.name, exc)
            return
        if spec == skill.spec:
            self.withdraw(skill.name, entry, "the edit was undone in the folder")
            self.adopt(skill, files_hash, "the folder matches the registry")
            return
        if entry is None or entry.get("deleted"):
            # No record of a write: a file equal to an older version is simply behind.
            older = {
                v.spec.content_hash(): v.version
                for v in list_versions(self.ws.engine, skill.name, self.view)
            }
            if spec.content_hash() in older:
                held = older[spec.content_hash()]
                self.write(
                    skill, "write", f"the folder held v{held}; v{skill.version} written", held
                )
                return
        number, base = self.base(skill, entry)
        moved = base.content_hash() != skill.spec.content_hash()
        not_proposed = _changed_fields(spec, base)
        if spec.content == base.content or spec.content == skill.spec.content:
            self.withdraw(skill.name, entry, "the body edit was undone in the folder")
            if moved:
                lost = f"; the edit of {', '.join(not_proposed)} is kept as {rotation.EDITED}"
                self.write(
                    skill,
                    "write",
                    f"v{skill.version} written{lost if not_proposed else ''}",
                    None if not_proposed or spec != base else number,
                )
            else:
                self.kept(skill, not_proposed)
            return
        if base.content != skill.spec.content:
            self.stale(skill, number)
            return
        self.propose(skill, entry, spec, files_hash, not_proposed, moved)

    def kept(self, skill: Skill, edited: list[str]) -> None:
        """Front matter or evals edited: no proposal carries them, a command applies them."""
        folder = shlex.quote(str(self.root / skill.name))
        where = f" --project {self.project}" if self.project else ""
        self.add(
            skill.name,
            "kept",
            f"{', '.join(edited)} edited in the folder, which only a SKILL.md body "
            f"edit proposes: apply them with `amelio skills import {folder}{where}` "
            "(a new version at once), or undo them. The file is kept as written.",
            version=skill.version,
            file=str(self.root / skill.name),
        )

    def stale(self, skill: Skill, number: int) -> None:
        """A body edit made on version ``number``, which the registry has moved past:
        proposed, its approval would silently undo the versions since, so it is not."""
        path = self.root / skill.name / files.SKILL_FILE
        where = f" --project {self.project}" if self.project else ""
        self.add(
            skill.name,
            "stale",
            f"edited on v{number}, and the registry is at v{skill.version}: not proposed, "
            f"as approving it would undo v{number + 1}–v{skill.version}. Compare with "
            f"`amelio skills show {skill.name} --version {number}{where}` and "
            f"`amelio skills show {skill.name}{where}`, then redo the edit on "
            f"v{skill.version} (put the file back as it was to have v{skill.version} "
            "written, then edit it again).",
            version=skill.version,
            file=str(path),
        )

    def propose(
        self,
        skill: Skill,
        entry: dict[str, Any] | None,
        spec: SkillSpec,
        files_hash: str,
        not_proposed: list[str],
        moved: bool,
    ) -> None:
        path = str(self.root / skill.name / files.SKILL_FILE)
        notes = []
        if moved:  # in its front matter only: the body edit undoes nothing
            notes.append(f"written on an older version; its body is v{skill.version}'s")
        if not_proposed:
            notes.append(f"{', '.join(not_proposed)} edits are not part of it")
        note = f" ({'; '.join(notes)})" if notes else ""
        if self.dry_run:
            self.add(
                skill.name,
                "propose",
                f"the hand edit would become a proposal{note}",
                version=skill.version,
                file=path,
            )
            return
        try:  # a later save of the same file replaces this sync's own pending proposal
            self.withdraw(skill.name, entry, f"replaced by a later edit of {path}")
            made = proposals.create_proposal(
                self.ws,
                skill.name,
                proposed_content=spec.content,
                proposed_by="human",
                author=self.author,
                project=self.view,
                rationale=f"Edited by hand in {path}.{note}",
                evidence={
                    "source": "skills sync",
                    "file": path,
                    "folder": str(self.root),
                    "baseVersion": None if entry is None else entry.get("version"),
                    "notProposed": not_proposed,
                },
            )
        except AmelioError as exc:  # e.g. another pending proposal: retried on the next pass
            self.add(
                skill.name,
                "error",
                f"the hand edit is kept but not proposed: {exc.message}",
                version=skill.version,
                file=path,
            )
            return
        self.state[skill.name] = {
            **(entry or state_entry(skill, "")),
            "proposal": made.id,
            "proposedHash": files_hash,
            "deleted": False,
        }
        self.add(
            skill.name,
            "propose",
            f"proposal #{made.id} (`amelio proposals approve {made.id}` applies it); "
            f"the file is kept as written{note}",
            version=skill.version,
            proposal_id=made.id,
            file=path,
        )

    # -- a folder the registry does not hold -----------------------------------------------

    def unregistered(self, name: str) -> None:
        folder = self.root / name
        entry = self.state.get(name)
        path = str(folder / files.SKILL_FILE)
        try:
            files_hash = sync_files.files_hash(folder, name)
            if (
                entry is not None
                and entry.get("proposal") is not None
                and entry.get("proposedHash") == files_hash
            ):
                proposal = proposals.get_proposal(self.ws, int(entry["proposal"]))
                action = {"pending": "pending", "approved": "unchanged"}.get(
                    proposal.status, "declined"
                )
                self.add(
                    name,
                    action,
                    f"new-skill proposal #{proposal.id} is {proposal.status}",
                    proposal_id=proposal.id,
                    file=path,
                )
                return
            spec = self.parse(name)
            skill_md = (folder / files.SKILL_FILE).read_text(encoding="utf-8")
            if self.dry_run:
                proposals.check_new_skill(skill_md, path)  # the same checks, nothing stored
                self.add(name, "new", "would be proposed as a new skill", file=path)
                return
            made = proposals.create_skill_proposal(
                self.ws,
                skill_md,
                rationale=f"New skill folder {folder}.",
                proposed_by="human",
                author=self.author,
                project=self.view,
                scope="project" if self.project else "global",
                rules=None if spec.evals is None else [dict(r) for r in spec.evals],
                evidence={"source": "skills sync", "file": path},
                source=path,
            )
        except (AmelioError, OSError) as exc:
            self.error(name, exc)
            return
        self.state[name] = {"proposal": made.id, "proposedHash": files_hash}
        self.add(
            name, "new", f"proposal #{made.id} for a new skill", proposal_id=made.id, file=path
        )


def _error_item(skill: str, exc: AmelioError | OSError) -> SyncItem:
    if isinstance(exc, AmelioError):
        return SyncItem(
            skill,
            "error",
            exc.message,
            file=exc.details.get("file"),
            field=exc.details.get("field"),
        )
    return SyncItem(
        skill,
        "error",
        f"cannot use {exc.filename or skill}: {exc.strerror or exc}",
        file=None if exc.filename is None else str(exc.filename),
    )


def sync_skills(
    ws: Workspace,
    folder: str | Path,
    *,
    project: str | None = None,
    author: str | None = None,
    dry_run: bool = False,
) -> SyncReport:
    """One pass over ``folder`` (created if missing); see the module docstring.

    A malformed file, or an edit that cannot be proposed now, is an ``error``
    item naming the file and field; every other skill still syncs. With
    ``dry_run`` the report says what would happen and nothing is written.
    """
    root = Path(folder).resolve()
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"{root} is not a folder.", folder=str(root))
    state = load_state(root, project) if root.is_dir() else {}
    report = SyncReport(str(root), project, dry_run)
    run = _Pass(ws, root, project, (author or f"skills sync {root}")[:200], dry_run, state, report)
    registry = {s.name: s for s in list_skills(ws.engine, run.view)}
    if not dry_run:
        root.mkdir(parents=True, exist_ok=True)
    present = skill_folders(root) if root.is_dir() else []
    for name in sorted(set(registry) | set(present)):
        try:
            if not files.valid_skill_name(name):  # a database restored from elsewhere
                run.add(
                    name,
                    "error",
                    "not a valid skill name: 1-64 lowercase letters, "
                    "digits or '-', no path; skipped",
                )
                continue
            link = link_out(root, name)
            if link is not None:
                run.add(
                    name,
                    "error",
                    f"{link} is a link to {link.resolve()}, outside {root}: skipped, "
                    "nothing read or written through it",
                    file=str(link),
                )
                continue
            if name in registry:
                run.registered(registry[name])
            else:
                run.unregistered(name)
        except (AmelioError, OSError) as exc:  # one skill never stops the others
            run.error(name, exc)
    for name in set(state) - set(registry) - set(present):
        del state[name]  # a new-skill folder deleted before its proposal was decided
    if not dry_run:
        save_state(root, project, state)
    return report


# -- watching ------------------------------------------------------------------------------


def watch_skills(
    ws: Workspace,
    folder: str | Path,
    *,
    project: str | None = None,
    author: str | None = None,
    stop_event: threading.Event | None = None,
    on_report: Callable[[SyncReport], None] | None = None,
    poll_ms: int = 2000,
    debounce_ms: int = 400,
    step_ms: int = 50,
) -> None:
    """Sync now, then again on every file change and every ``poll_ms`` (approvals happen
    in the database, where no file event announces them) until ``stop_event`` is set
    or Ctrl-C. A pass that fails as a whole is reported as one error and the next one
    tries again."""
    root = Path(folder).resolve()
    root.mkdir(parents=True, exist_ok=True)

    def one_pass() -> None:
        try:
            report = sync_skills(ws, root, project=project, author=author)
        except (AmelioError, OSError) as exc:
            report = SyncReport(str(root), project, False, [_error_item("*", exc)])
        if on_report is not None:
            on_report(report)

    one_pass()
    for _changes in watchfiles.watch(
        os.fspath(root),
        watch_filter=watch_filter(root),
        stop_event=stop_event,
        debounce=debounce_ms,
        step=step_ms,
        rust_timeout=poll_ms,
        yield_on_timeout=True,
        raise_interrupt=False,
    ):
        one_pass()
