"""Findings: failures grouped into named problems (``amelio.improve.findings``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio.improve import findings
from amelio.server.auth import authorize_project, require
from amelio.server.params import Id, ProjectQuery
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(prefix="/v1/findings", tags=["findings"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]


class CloseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=2000, description="Why (kept on record).")


@router.get("", summary="A project's findings, the largest share of answers first")
def list_findings(
    request: Request,
    key: Reader,
    project: ProjectQuery = DEFAULT_PROJECT,
    status: Annotated[
        str | None,
        Query(pattern="^(open|fixing|closed|reopened)$", description="Only this status."),
    ] = None,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    found = findings.list_findings(ws, project=project, status=status)
    return {"project": project, "findings": [f.to_dict() for f in found]}


@router.get("/{finding_id}", summary="One finding and its evidence, newest first")
def get_finding(
    request: Request, finding_id: Id, key: Reader, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    return findings.get_finding(ws, finding_id, project=project).to_dict()


@router.post("/{finding_id}/close", summary="Close a finding (it reopens if it comes back)")
def close_finding(
    request: Request,
    finding_id: Id,
    key: Admin,
    body: CloseRequest | None = None,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    return findings.close_finding(
        ws,
        finding_id,
        actor=f"key:{key.name}",
        project=project,
        reason=body.reason if body else None,
    ).to_dict()
