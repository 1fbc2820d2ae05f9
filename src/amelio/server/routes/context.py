"""Routing, prompt assembly and learnings."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio import learnings
from amelio.keys import ApiKey
from amelio.projects import DEFAULT_PROJECT
from amelio.prompt import build_prompt
from amelio.router import route_message
from amelio.server.auth import require

router = APIRouter(tags=["context"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]
ProjectParam = Annotated[str, Query(description="Project (tenant).")]


class RouteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    project: str = DEFAULT_PROJECT
    scorer: str | None = Field(default=None, description="Default: setting router_scorer.")
    limit: int | None = Field(default=None, ge=1, le=50)


class PromptRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=100_000)
    project: str = DEFAULT_PROJECT
    scorer: str | None = None


class LearningRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str = Field(min_length=1, max_length=learnings.MAX_RULE_CHARS)
    project: str = DEFAULT_PROJECT
    skill: str | None = Field(default=None, description="Only when this skill is hinted.")
    source: str = Field(default="manual", description="fixit, negative, manual or sage.")


@router.post("/v1/route", summary="Rank the skills that fit a message")
def route(request: Request, body: RouteRequest, _: Reader) -> dict[str, Any]:
    result = route_message(request.app.state.workspace, body.message, project=body.project,
                           scorer=body.scorer, limit=body.limit)
    return result.to_dict()


@router.post("/v1/prompt", summary="The full prompt Amelio would send for a message")
def prompt(request: Request, body: PromptRequest, _: Reader) -> dict[str, Any]:
    return build_prompt(request.app.state.workspace, body.message, project=body.project,
                        scorer=body.scorer).to_dict()


@router.get("/v1/learnings", summary="A project's learnings, newest first")
def list_learnings(
    request: Request, _: Reader, project: ProjectParam = DEFAULT_PROJECT,
    skill: Annotated[str | None, Query(description="This skill's and global ones.")] = None,
    include_retired: Annotated[bool, Query(alias="includeRetired")] = False,
) -> dict[str, Any]:
    items = learnings.list_learnings(request.app.state.workspace, project=project, skill=skill,
                                     include_retired=include_retired)
    return {"project": project, "learnings": [i.to_dict() for i in items]}


@router.post("/v1/learnings", status_code=201, summary="Add a learning")
def add_learning(request: Request, body: LearningRequest, _: Reader) -> dict[str, Any]:
    item, outcome = learnings.add_learning(
        request.app.state.workspace, body.rule, source=body.source, project=body.project,
        skill=body.skill,
    )
    return item.to_dict() | {"outcome": outcome}


@router.delete("/v1/learnings/{learning_id}", summary="Retire a learning")
def delete_learning(request: Request, learning_id: int, _: Admin,
                    project: ProjectParam = DEFAULT_PROJECT) -> dict[str, Any]:
    return learnings.delete_learning(request.app.state.workspace, learning_id,
                                     project=project).to_dict()
