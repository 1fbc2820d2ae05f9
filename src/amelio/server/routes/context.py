"""Routing, prompt assembly and learnings."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio.assistant import learnings
from amelio.assistant.prompt import build_prompt
from amelio.improve.rollouts import unit_of
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
    user: str | None = Field(
        default=None, max_length=200, description="Who asks: a canary rollout sticks to it."
    )
    conversation: str | None = Field(
        default=None,
        max_length=200,
        description="The thread's id: a canary rollout sticks to it when no user is named.",
    )


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
        request.app.state.workspace,
        body.message,
        project=body.project,
        scorer=body.scorer,
        unit=unit_of(body.user, body.conversation),
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
    status: Annotated[
        str | None,
        Query(pattern="^(candidate|active|superseded|retired)$", description="Only this state."),
    ] = None,
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    items = learnings.list_learnings(
        request.app.state.workspace,
        project=project,
        skill=skill,
        include_retired=include_retired,
        status=status,
    )
    return {"project": project, "learnings": [i.to_dict() for i in items]}


@router.post("/v1/learnings", status_code=201, summary="Add a learning")
def add_learning(request: Request, body: LearningRequest, key: Reader) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, body.project)
    # An admin's key is a person entitled to change prompts; a bot's is not, so under
    # learnings_review = "queue" what a bot adds waits as a candidate.
    item, outcome = learnings.add_learning(
        request.app.state.workspace,
        body.rule,
        source=body.source,
        project=body.project,
        skill=body.skill,
        origin=learnings.Origin(author=f"key:{key.name}", reviewed=key.role == "admin"),
    )
    return item.to_dict() | {"outcome": outcome}


@router.delete("/v1/learnings/{learning_id}", summary="Retire a learning")
def delete_learning(
    request: Request, learning_id: Id, _: Admin, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    return learnings.delete_learning(
        request.app.state.workspace, learning_id, project=project
    ).to_dict()


class ReviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str | None = Field(
        default=None,
        min_length=1,
        max_length=learnings.MAX_RULE_CHARS,
        description="Approve: this wording instead (an edit). Edit: the new wording.",
    )
    reason: str | None = Field(default=None, max_length=2000, description="Reject: why.")


@router.get("/v1/learnings/review", summary="What waits for a person: candidates and proposals")
def learnings_review(
    request: Request, _: Admin, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    from amelio.assistant.review import review_queue

    items = review_queue(request.app.state.workspace, project=project)
    return {"project": project, "learnings": [i.to_dict() for i in items]}


@router.get("/v1/learnings/audit", summary="Duplicates, conflicts, secrets, injections, stale")
def learnings_audit(
    request: Request, _: Admin, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    from amelio.assistant.audit import audit

    found = audit(request.app.state.workspace, project=project)
    return {"project": project, "findings": [f.to_dict() for f in found]}


@router.get("/v1/learnings/{learning_id}", summary="One learning, its sources and usage")
def show_learning(
    request: Request, learning_id: Id, key: Reader, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    from amelio.assistant.review import show

    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    item, figures = show(ws, learning_id, project=project)
    return item.to_dict() | {"usage": figures.to_dict()}


@router.post("/v1/learnings/{learning_id}/approve", summary="Approve a candidate or proposal")
def approve_learning(
    request: Request,
    learning_id: Id,
    key: Admin,
    body: ReviewRequest | None = None,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    from amelio.assistant.review import approve_learning

    return approve_learning(
        request.app.state.workspace,
        learning_id,
        actor=f"key:{key.name}",
        project=project,
        rule=body.rule if body else None,
    ).to_dict()


@router.post("/v1/learnings/{learning_id}/reject", summary="Reject a candidate or proposal")
def reject_learning(
    request: Request,
    learning_id: Id,
    key: Admin,
    body: ReviewRequest | None = None,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    from amelio.assistant.review import reject_learning

    return reject_learning(
        request.app.state.workspace,
        learning_id,
        actor=f"key:{key.name}",
        project=project,
        reason=body.reason if body else None,
    ).to_dict()


@router.patch("/v1/learnings/{learning_id}", summary="Reword a candidate or active learning")
def edit_learning(
    request: Request,
    learning_id: Id,
    key: Admin,
    body: ReviewRequest,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    from amelio.assistant.review import edit_learning
    from amelio.errors import InvalidInput

    if body.rule is None:
        raise InvalidInput("An edit needs the new rule.", field="rule")
    return edit_learning(
        request.app.state.workspace,
        learning_id,
        body.rule,
        actor=f"key:{key.name}",
        project=project,
    ).to_dict()
