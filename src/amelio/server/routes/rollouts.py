"""Canary rollouts of approved versions (``amelio.improve.rollouts``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio.improve import rollouts as ro
from amelio.server.auth import authorize_project, require
from amelio.server.params import Id, ProjectQuery
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]


class Why(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=2000, description="Kept on record.")


def _one(request: Request, rollout_id: int, key: ApiKey) -> ro.Rollout:
    ws = request.app.state.workspace
    found = ro.get_rollout(ws, rollout_id)
    authorize_project(ws.engine, key, found.project)
    return found


@router.get("", summary="A project's rollouts, newest first")
def list_rollouts(
    request: Request,
    key: Reader,
    project: ProjectQuery = DEFAULT_PROJECT,
    status: Annotated[
        str | None,
        Query(pattern="^(running|paused|aborted|done)$", description="Only this status."),
    ] = None,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    found = ro.list_rollouts(ws, project=project, status=status)
    return {"project": project, "rollouts": [r.to_dict() for r in found]}


@router.get("/{rollout_id}", summary="One rollout: stage, each arm's figures, history, curves")
def get_rollout(request: Request, rollout_id: Id, key: Reader) -> dict[str, Any]:
    found = _one(request, rollout_id, key)
    return found.to_dict() | {"curves": ro.rollout_curves(request.app.state.workspace, found.id)}


@router.post("/check", summary="Test every running rollout of a project now")
def check(request: Request, key: Admin, project: ProjectQuery = DEFAULT_PROJECT) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    return {"checked": [c.to_dict() for c in ro.check_rollouts(ws, project=project)]}


@router.post("/{rollout_id}/pause", summary="Everyone back on the old version")
def pause(request: Request, rollout_id: Id, key: Admin, body: Why | None = None) -> dict[str, Any]:
    _one(request, rollout_id, key)
    return ro.pause_rollout(
        request.app.state.workspace,
        rollout_id,
        actor=f"key:{key.name}",
        reason=body.reason if body else None,
    ).to_dict()


@router.post("/{rollout_id}/promote", summary="The next stage: its share → 50 % → 100 %")
def promote(request: Request, rollout_id: Id, key: Admin) -> dict[str, Any]:
    _one(request, rollout_id, key)
    return ro.promote_rollout(
        request.app.state.workspace, rollout_id, actor=f"key:{key.name}"
    ).to_dict()


@router.post("/{rollout_id}/abort", summary="End it and roll the skill back")
def abort(request: Request, rollout_id: Id, key: Admin, body: Why | None = None) -> dict[str, Any]:
    _one(request, rollout_id, key)
    return ro.abort_rollout(
        request.app.state.workspace,
        rollout_id,
        actor=f"key:{key.name}",
        reason=body.reason if body else None,
    ).to_dict()
