"""Pinned cases: the answers a skill must keep passing when a proposal changes it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from amelio.assistant import cases
from amelio.assistant.respond import get_interaction
from amelio.server.auth import authorize_project, require
from amelio.server.params import MAX_ID, Id, ProjectQuery
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(prefix="/v1/cases", tags=["cases"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]


class NewCase(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    interaction_id: int = Field(
        alias="interactionId",
        ge=1,
        le=MAX_ID,
        description="The interaction to pin, for the skill that answered it.",
    )
    note: str | None = Field(
        default=None,
        max_length=cases.MAX_NOTE_CHARS * 2,
        description=f"Why this case matters (at most {cases.MAX_NOTE_CHARS:,} characters "
        "once its runs of white space are single spaces).",
    )


@router.get("", summary="A project's pinned cases, newest first")
def list_cases(
    request: Request,
    key: Reader,
    project: ProjectQuery = DEFAULT_PROJECT,
    skill: Annotated[str | None, Query(max_length=100, description="One skill's cases.")] = None,
    unpinned: Annotated[bool, Query(description="Also the cases unpinned since.")] = False,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    found = cases.list_cases(ws, project=project, skill=skill, unpinned=unpinned)
    return {"project": project, "skill": skill, "cases": [c.to_dict() for c in found]}


@router.post(
    "",
    status_code=201,
    summary="Pin an interaction as a case its skill must keep passing",
    responses={200: {"description": "It was already pinned (a `note` given replaces the old)."}},
)
def pin_case(request: Request, body: NewCase, key: Admin, response: Response) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, get_interaction(ws, body.interaction_id)["project"])
    case, pinned = cases.pin_case(ws, body.interaction_id, note=body.note, author=f"key:{key.name}")
    if not pinned:
        response.status_code = 200
    return case.to_dict() | {"created": pinned}


@router.delete("/{case_id}", summary="Unpin a case (it stays listed with `unpinned`)")
def unpin_case(
    request: Request, case_id: Id, key: Admin, project: ProjectQuery = DEFAULT_PROJECT
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    return cases.unpin_case(ws, case_id, project=project, author=f"key:{key.name}").to_dict()
