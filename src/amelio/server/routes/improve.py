"""Proposals, their decisions, the nightly run and skill evolution.

The router's lifespan runs the schedule (:mod:`amelio.ops.schedule`) with the app:
`amelio improve` every night without a cron entry, claimed by one replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio import skills
from amelio.improve import proposals as props
from amelio.improve.bench import latest_verdict
from amelio.improve.nightly import last_report, run_improve
from amelio.ops.schedule import Scheduler, job_status
from amelio.server.auth import authorize_project, require, visible
from amelio.server.params import Id, OptionalProjectQuery, ProjectField, ProjectQuery
from amelio.workspace.folder import Workspace
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    scheduler = Scheduler(app.state.workspace)  # a wrong cron or zone stops the start
    scheduler.start()
    try:
        yield
    finally:
        scheduler.stop()


router = APIRouter(tags=["improve"], lifespan=lifespan)

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=2000)


class Approval(Decision):
    canary: int | None = Field(
        default=None,
        ge=1,
        le=99,
        description="Make the new version live for this share of conversations first "
        "(a canary rollout: /v1/rollouts).",
    )


class NewProposal(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    skill: str = Field(max_length=100)
    project: ProjectField = DEFAULT_PROJECT
    proposed_content: str = Field(alias="proposedContent", min_length=1, max_length=200_000)
    rationale: str = Field(min_length=1, max_length=10_000)


class ImproveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    project: ProjectField | None = None
    dry_run: bool = Field(default=False, alias="dryRun")


@router.get("/v1/proposals", summary="Proposals, newest first")
def list_proposals(
    request: Request,
    key: Reader,
    status: Annotated[
        str | None, Query(max_length=20, description="pending, approved, rejected, superseded")
    ] = None,
    skill: Annotated[str | None, Query(max_length=100)] = None,
    project: OptionalProjectQuery = None,
    scope: Annotated[
        str | None, Query(max_length=20, description="global, project, or new (creates a skill)")
    ] = None,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    if project is not None:
        authorize_project(ws.engine, key, project)
    found = visible(
        key,
        props.list_proposals(ws, status=status, skill=skill, project=project, scope=scope),
        lambda p: p.project,
    )
    return {"proposals": [p.to_dict() | {"benchmark": latest_verdict(ws, p.id)} for p in found]}


@router.get("/v1/proposals/{proposal_id}", summary="A proposal with its unified diff")
def get_proposal(request: Request, proposal_id: Id, key: Reader) -> dict[str, Any]:
    ws = request.app.state.workspace
    proposal = props.get_proposal(ws, proposal_id)
    authorize_project(ws.engine, key, proposal.project)
    return proposal.to_dict(with_content=True) | {"benchmark": latest_verdict(ws, proposal_id)}


@router.post("/v1/proposals", status_code=201, summary="Propose a change, as a person")
def create_proposal(request: Request, body: NewProposal, key: Admin) -> dict[str, Any]:
    proposal = props.create_proposal(
        request.app.state.workspace,
        body.skill,
        project=body.project,
        proposed_content=body.proposed_content,
        rationale=body.rationale,
        proposed_by="human",
        author=f"key:{key.name}",
    )
    return proposal.to_dict(with_content=True)


def _decider(ws: Workspace, proposal_id: int, key: ApiKey) -> None:
    """404 for an unknown proposal, else the one decision rule every door applies."""
    proposal = props.get_proposal(ws, proposal_id)
    props.authorize_decision(proposal, role=key.role, projects=key.projects)


@router.post("/v1/proposals/{proposal_id}/approve", summary="Approve: a new skill version")
def approve(
    request: Request, proposal_id: Id, key: Admin, body: Approval | None = None
) -> dict[str, Any]:
    ws = request.app.state.workspace
    _decider(ws, proposal_id, key)
    return props.approve_proposal(
        ws,
        proposal_id,
        actor=f"key:{key.name}",
        reason=body.reason if body else None,
        canary=body.canary if body else None,
    ).to_dict()


@router.post("/v1/proposals/{proposal_id}/reject", summary="Reject a proposal")
def reject(
    request: Request, proposal_id: Id, key: Admin, body: Decision | None = None
) -> dict[str, Any]:
    ws = request.app.state.workspace
    _decider(ws, proposal_id, key)
    return props.reject_proposal(
        ws, proposal_id, actor=f"key:{key.name}", reason=body.reason if body else None
    ).to_dict()


@router.get("/v1/skills/{name}/evolution", summary="Every change and decision on a skill")
def evolution(
    request: Request, name: str, key: Reader, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    events = skills.skill_log(request.app.state.workspace.engine, name, project)
    return {"skill": name, "project": project, "events": [e.to_dict() for e in events]}


@router.post("/v1/improve", summary="Run the nightly improvement loop now")
def improve(request: Request, _: Admin, body: ImproveRequest | None = None) -> dict[str, Any]:
    body = body or ImproveRequest()
    report = run_improve(
        request.app.state.workspace,
        projects=[body.project] if body.project else None,
        dry_run=body.dry_run,
    )
    return report.to_dict()


@router.get("/v1/schedule", summary="The scheduled jobs: next runs and the last outcome")
def schedule(request: Request, _: Admin) -> dict[str, Any]:
    return {"jobs": [j.to_dict() for j in job_status(request.app.state.workspace)]}


@router.get("/v1/improve/last", summary="The last improve run's report")
def last(request: Request, key: Reader) -> dict[str, Any]:
    """A key bound to projects reads those projects' part of the report only."""
    return {"report": last_report(request.app.state.workspace, allows=key.allows)}
