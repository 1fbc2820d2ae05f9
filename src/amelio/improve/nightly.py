"""`amelio improve`: each night, weak skills found and changes proposed for a person to approve.

For every project: supersede proposals whose skill moved on, find the
underperforming skills, skip those that already have a pending proposal, and
propose a change (by template, or by a pluggable proposer such as Sage). A draft
whose added text breaks the skill's own forbidding rules is not filed, and the
report says which rule (:func:`amelio.improve.proposals.own_rule_breaks`). The
run leaves a versioned report (Markdown and JSON in ``<workspace>/reports/``
and a row in ``improve_runs``) and sends it through the configured notifiers.
A failure on one skill is recorded in the report and the run goes on.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from amelio import db
from amelio.assistant.quality import Finding, find_underperformers
from amelio.db.schema import improve_runs, projects, proposals, utcnow
from amelio.errors import AmelioError, ConfigError
from amelio.improve.budget import describe_spending
from amelio.improve.drafts import WRITTEN_FROM, Drafted, Proposer
from amelio.improve.notifiers import Notification, NotificationAction, notify_all
from amelio.improve.proposals import (
    ResemblesRejected,
    create_proposal,
    describe_breaks,
    own_rule_breaks,
    pending_for,
    supersede_stale,
)
from amelio.improve.templates import template_proposal
from amelio.skills.store import get_skill
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import list_projects

__all__ = [
    "REPORT_VERSION",
    "WRITTEN_FROM",
    "ImproveReport",
    "Proposer",
    "last_report",
    "run_improve",
]

log = logging.getLogger(__name__)
REPORT_VERSION = 1


def template_proposer(ws: Workspace, finding: Finding) -> Drafted | None:
    skill = get_skill(ws.engine, finding.skill, finding.project)
    draft = template_proposal(skill.spec, finding)
    if draft is None:
        return None
    return Drafted(
        draft.content, draft.rationale, dict(draft.evidence) | {WRITTEN_FROM: list(finding.sources)}
    )


@dataclass
class ImproveReport:
    started_at: str
    mode: str
    dry_run: bool
    projects: list[dict[str, Any]] = field(default_factory=list)
    superseded: list[int] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    finished_at: str = ""
    run_id: int | None = None
    files: list[str] = field(default_factory=list)
    #: What the run spent on LLM calls and left undone (``amelio improve --sage``).
    budget: dict[str, Any] | None = None

    @property
    def proposals(self) -> list[dict[str, Any]]:
        return [p for project in self.projects for p in project["proposals"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "reportVersion": REPORT_VERSION,
            "runId": self.run_id,
            "mode": self.mode,
            "dryRun": self.dry_run,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "projects": self.projects,
            "superseded": self.superseded,
            "deliveries": self.deliveries,
            **({"budget": self.budget} if self.budget is not None else {}),
        }

    def markdown(self) -> str:
        lines = [
            f"# Amelio improve report — {self.started_at}",
            "",
            f"Mode: {self.mode}{' (dry run: nothing written)' if self.dry_run else ''}.",
        ]
        if self.superseded:
            lines.append(f"Superseded stale proposals: {', '.join(map(str, self.superseded))}.")
        for project in self.projects:
            lines += ["", f"## Project {project['project']}", ""]
            if not project["underperformers"]:
                lines.append("No underperforming skill.")
            for finding in project["underperformers"]:
                lines.append(f"- **{finding['skill']}**: {'; '.join(finding['reasons'])}.")
            for p in project["proposals"]:
                lines.append(
                    f"  - proposal #{p['id']} for {p['skill']} ({p['proposedBy']}): "
                    f"{p['rationale']}"
                )
            for s in project["skipped"]:
                lines.append(f"  - skipped {s['skill']}: {s['reason']}")
            for r in project.get("learningRetirements", ()):
                lines.append(f"- learning #{r['id']} proposed for retirement ({r['reason']})")
            card = project.get("findings") or {}
            for f in card.get("top", ()):
                traffic = "searches" if f.get("kind") == "search" else "answers"
                lines.append(
                    f"- finding #{f['id']} ({f['status']}, {f['share']:.1%} of {traffic}, "
                    f"{', '.join(f['skills']) or f.get('kind', 'no skill')}): {f['title']}"
                )
            for pid in card.get("proposals", ()):
                lines.append(f"- proposal #{pid} filed with a finding's fix")
            for fid in card.get("reopened", ()):
                lines.append(f"- finding #{fid} reopened: its problem came back")
                lines += [f"  - {text}" for text in card["reopenedEvidence"].get(str(fid), ())]
            if project.get("learningsWaiting"):
                lines.append(
                    f"- {project['learningsWaiting']} learning(s) wait for review: "
                    "amelio learnings review"
                )
        if self.budget is not None:
            lines += ["", describe_spending(self.budget)]
        return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _improve_project(
    ws: Workspace, project: str, proposer: Proposer, mode: str, dry_run: bool
) -> dict[str, Any]:
    findings = find_underperformers(ws, project)
    out: dict[str, Any] = {
        "project": project,
        "underperformers": [f.to_dict() for f in findings],
        "proposals": [],
        "skipped": [],
    }
    for finding in findings:
        with ws.engine.connect() as conn:
            skill = get_skill(conn, finding.skill, project)
            pending = pending_for(conn, skill.id)
        if pending is not None:
            out["skipped"].append(
                {"skill": finding.skill, "reason": f"proposal #{pending} is pending"}
            )
            continue
        try:
            draft = proposer(ws, finding)
            if draft is None:
                out["skipped"].append(
                    {
                        "skill": finding.skill,
                        "reason": "nothing concrete to propose from the evidence",
                    }
                )
                continue
            breaks = own_rule_breaks(skill.spec, draft.content)
            if breaks:
                out["skipped"].append(
                    {
                        "skill": finding.skill,
                        "reason": describe_breaks(breaks),
                        "rules": [r.rule_id for r in breaks],
                    }
                )
                continue
            if dry_run:
                out["proposals"].append(
                    {
                        "id": None,
                        "skill": finding.skill,
                        "proposedBy": mode,
                        "rationale": draft.rationale,
                    }
                )
                continue
            proposal = create_proposal(
                ws,
                finding.skill,
                project=project,
                proposed_content=draft.content,
                rationale=draft.rationale,
                evidence=draft.evidence,
                proposed_by=mode,
                author=f"amelio improve ({mode})",
            )
            out["proposals"].append(proposal.to_dict())
        except ResemblesRejected as exc:  # a person already said no to this change
            out["skipped"].append(
                {
                    "skill": finding.skill,
                    "reason": exc.message,
                    "resembles": exc.details["proposal_id"],
                    "similarity": exc.details["similarity"],
                }
            )
        except AmelioError as exc:  # one skill's failure is data, not the run's end
            log.warning("improve: %s/%s failed: %s", project, finding.skill, exc.message)
            out["skipped"].append({"skill": finding.skill, "reason": f"error: {exc.message}"})
    # Learnings: stale ones, and those whose answers do worse, become retire proposals
    # (amelio learnings review); the waiting candidates are counted for the reviewer.
    from amelio.assistant.review import propose_retirements, review_queue

    if not dry_run:
        retire = propose_retirements(ws, project=project)
        out["learningRetirements"] = [
            {"id": i.id, "rule": i.rule, "reason": (i.retire_proposal or {}).get("reason")}
            for i in retire
        ]
    out["learningsWaiting"] = len(review_queue(ws, project=project))
    if not dry_run:
        # Template mode files findings' fixes by their own template (a line naming the
        # problem, the mined rule); Sage's mode asks Sage for those too.
        out["findings"] = _findings_card(ws, project, proposer if mode == "sage" else None)
    return out


def _findings_card(ws: Workspace, project: str, proposer: Proposer | None) -> dict[str, Any]:
    """Group the project's recent failures into findings (amelio.improve.findings) and
    sum them up for the report: the largest open ones, and those that reopened. A
    workspace without an embedder or scikit-learn gets the reason instead."""
    from amelio.improve.findings import get_finding, list_findings, update_findings

    try:
        update = update_findings(ws, project=project, proposer=proposer)
    except ConfigError as exc:  # no embedding model, or amelio[findings] not installed
        return {"skipped": exc.message}
    # Reopened first (a problem that came back is news), then the largest.
    active = sorted(
        (f for f in list_findings(ws, project=project) if f.status != "closed"),
        key=lambda f: f.id not in update.reopened,
    )
    return {
        **update.to_dict(),
        "reopenedEvidence": {
            str(fid): [e.text for e in get_finding(ws, fid, project=project).evidence[:3]]
            for fid in update.reopened
        },
        "top": [
            {
                "id": f.id,
                "kind": f.kind,
                "title": f.title,
                "status": f.status,
                "share": round(f.share, 4),
                "evidenceCount": f.evidence_count,
                "skills": list(f.skills),
            }
            for f in active[:5]
        ],
    }


def run_improve(
    ws: Workspace,
    *,
    projects: Sequence[str] | None = None,
    dry_run: bool = False,
    proposer: Proposer | None = None,
    mode: str = "template",
    notify: bool = True,
) -> ImproveReport:
    """One pass of the nightly loop over ``projects`` (default: all of them)."""
    proposer = proposer or template_proposer
    report = ImproveReport(
        started_at=utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), mode=mode, dry_run=dry_run
    )
    if not dry_run:
        report.superseded = supersede_stale(ws)
    names = list(projects) if projects else [p.name for p in list_projects(ws.engine)]
    for name in names:
        report.projects.append(_improve_project(ws, name, proposer, mode, dry_run))
    report.finished_at = utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    if dry_run:
        return report
    with db.transaction(ws.engine) as conn:
        result = conn.execute(
            improve_runs.insert().values(
                started_at=utcnow(), finished_at=utcnow(), mode=mode, report=report.to_dict()
            )
        )
        assert result.inserted_primary_key is not None
        report.run_id = int(result.inserted_primary_key[0])
    if notify:
        report.deliveries = [
            d.to_dict() for d in notify_all(ws.settings, improve_notification(ws, report))
        ]
    stem = ws.root / "reports" / f"improve-{report.started_at.replace(':', '')}"
    _atomic_write(
        stem.with_suffix(".json"), json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
    )
    _atomic_write(stem.with_suffix(".md"), report.markdown())
    report.files = [str(stem.with_suffix(".json")), str(stem.with_suffix(".md"))]
    with db.transaction(ws.engine) as conn:
        conn.execute(
            improve_runs.update()
            .where(improve_runs.c.id == report.run_id)
            .values(report=report.to_dict())
        )
    return report


def proposal_actions(
    ws: Workspace, proposals: Sequence[Mapping[str, Any]]
) -> tuple[NotificationAction, ...]:
    """One "review" action per proposal. Its link opens the proposal on the dashboard,
    where a signed-in admin decides: the API's approve and reject routes need an
    admin key in a POST, which no chat client can send from a link."""
    base = ws.settings.public_url.rstrip("/")
    return tuple(
        NotificationAction(
            label=f"Review #{p['id']} {p['skill']}",
            url=f"{base}/proposals/{p['id']}" if base else None,
            proposal_id=p["id"],
            action="review",
        )
        for p in proposals
        if p.get("id") is not None
    )


def improve_notification(ws: Workspace, report: ImproveReport) -> Notification:
    """What the notifiers receive after an improve run (``improve.report``)."""
    count = len(report.proposals)
    return Notification(
        kind="improve.report",
        title=f"Amelio improve: {count} new proposal{'s' * (count != 1)}",
        text=report.markdown(),
        payload=report.to_dict(),
        actions=proposal_actions(ws, report.proposals),
    )


def last_report(
    ws: Workspace, *, allows: Callable[[str], bool] | None = None
) -> dict[str, Any] | None:
    """The newest run's report, or None before the first run.

    ``allows`` (an API key's :meth:`~amelio.workspace.keys.ApiKey.allows`) keeps only
    what a reader bound to some projects may see: those projects' findings, proposals
    and skipped skills, and their superseded proposals. The deliveries go too: they
    are the whole run's, and a failed one names other projects' chats."""
    with ws.engine.connect() as conn:
        row = conn.execute(
            sa.select(improve_runs.c.report).order_by(improve_runs.c.id.desc()).limit(1)
        ).first()
        if row is None:
            return None
        report = dict(row.report)
        if allows is None:
            return report
        superseded = [int(pid) for pid in report.get("superseded", ())]
        owners = dict(
            conn.execute(
                sa.select(proposals.c.id, projects.c.name)
                .join(projects, projects.c.id == proposals.c.project_id)
                .where(proposals.c.id.in_(superseded))
            ).all()
        )
    kept = [p for p in report.get("projects", ()) if allows(str(p.get("project")))]
    if len(kept) == len(report.get("projects", ())) and all(
        pid in owners and allows(owners[pid]) for pid in superseded
    ):
        return report  # a global reader, or a run of this reader's projects only
    return report | {
        "projects": kept,
        "superseded": [pid for pid in superseded if pid in owners and allows(owners[pid])],
        "deliveries": [],
    }
