"""Routing, prompt assembly and learnings."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio.assistant import learnings
from amelio.assistant.prompt import build_prompt
from amelio.routing.router import route_message
from amelio.server.auth import authorize_project, require
from amelio.server.params import Id, ProjectField, ProjectQuery
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(tags=["context"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]


class RouteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    project: ProjectField = DEFAULT_PROJECT
    scorer: str | None = Field(
        default=None, max_length=100, description="Default: setting router_scorer."
    )
    limit: int | None = Field(default=None, ge=1, le=50)


class PromptRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    project: ProjectField = DEFAULT_PROJECT
    scorer: str | None = Field(default=None, max_length=100)


class LearningRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str = Field(min_length=1, max_length=learnings.MAX_RULE_CHARS)
    project: ProjectField = DEFAULT_PROJECT
    skill: str | None = Field(
        default=None, max_length=100, description="Only when this skill is hinted."
    )
    source: str = Field(
        default="manual", max_length=20, description="fixit, negative, manual or sage."
    )


@router.post("/v1/route", summary="Rank the skills that fit a message")
def route(request: Request, body: RouteRequest, key: Reader) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    result = route_message(
        request.app.state.workspace,
        body.message,
        project=body.project,
        scorer=body.scorer,
        limit=body.limit,
    )
    return result.to_dict()


@router.post("/v1/prompt", summary="The full prompt Amelio would send for a message")
def prompt(request: Request, body: PromptRequest, key: Reader) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    return build_prompt(
        request.app.state.workspace, body.message, project=body.project, scorer=body.scorer
    ).to_dict()


@router.get("/v1/learnings", summary="A project's learnings, newest first")
def list_learnings(
    request: Request,
    key: Reader,
    project: ProjectQuery = DEFAULT_PROJECT,
    skill: Annotated[
        str | None, Query(max_length=100, description="This skill's and global ones.")
    ] = None,
    include_retired: Annotated[bool, Query(alias="includeRetired")] = False,
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    items = learnings.list_learnings(
        request.app.state.workspace, project=project, skill=skill, include_retired=include_retired
    )
    return {"project": project, "learnings": [i.to_dict() for i in items]}


@router.post("/v1/learnings", status_code=201, summary="Add a learning")
def add_learning(request: Request, body: LearningRequest, key: Reader) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    item, outcome = learnings.add_learning(
        request.app.state.workspace,
        body.rule,
        source=body.source,
        project=body.project,
        skill=body.skill,
    )
    return item.to_dict() | {"outcome": outcome}


@router.delete("/v1/learnings/{learning_id}", summary="Retire a learning")
def delete_learning(
    request: Request, learning_id: Id, _: Admin, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    return learnings.delete_learning(
        request.app.state.workspace, learning_id, project=project
    ).to_dict()
