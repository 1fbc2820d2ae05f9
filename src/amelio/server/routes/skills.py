"""Skills: list, show with history; the learned router's examples and mined triggers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from amelio import skills
from amelio.errors import InvalidInput, SkillNotFound
from amelio.improve import triggers
from amelio.routing import examples as routing_examples
from amelio.server.auth import authorize_project, require
from amelio.server.params import MAX_ID, PROJECT_PATTERN, ProjectField, ProjectQuery
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(prefix="/v1/skills", tags=["skills"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]
ProjectParam = Annotated[
    str,
    Query(
        pattern=PROJECT_PATTERN,
        max_length=100,
        description="Project whose view of the skills to return (forks first).",
    ),
]


@router.get("", summary="Skills a project sees")
def list_skills(
    request: Request, key: Reader, project: ProjectParam = DEFAULT_PROJECT
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    found = skills.list_skills(request.app.state.workspace.engine, project)
    return {"project": project, "skills": [s.to_dict(with_content=False) for s in found]}


@router.get("/{name}", summary="One skill with its version history")
def get_skill(
    request: Request,
    name: str,
    key: Reader,
    project: ProjectParam = DEFAULT_PROJECT,
    version: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="An older version's content")
    ] = None,
) -> dict[str, Any]:
    engine = request.app.state.workspace.engine
    authorize_project(engine, key, project)
    skill = skills.get_skill(engine, name, project)
    history = skills.list_versions(engine, name, project)
    body = skill.to_dict()
    if version is not None:
        match = [v for v in history if v.version == version]
        if not match:
            raise SkillNotFound(
                f"Skill {name!r} has no version {version} (it has 1 to {skill.version}).",
                skill=name,
                version=version,
            )
        body |= {
            "version": version,
            "content": match[0].spec.content,
            "evals": None
            if match[0].spec.evals is None
            else [dict(r) for r in match[0].spec.evals],
        }
    body["currentVersion"] = skill.version
    body["versions"] = [v.to_dict() for v in history]
    return body


# -- the learned router's examples --------------------------------------------------------

ExampleRef = Annotated[
    str,
    Path(
        pattern=r"^(md)?[0-9]{1,10}$",
        max_length=12,
        description="An example as the listing names it: its id, or `md<N>` for the N-th "
        "SKILL.md example.",
    ),
]


class NewExample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(
        min_length=1,
        max_length=10_000,
        description="A message for the skill (at most 1,000 characters once "
        "its runs of white space are single spaces).",
    )
    project: ProjectField = DEFAULT_PROJECT


class SuggestTriggers(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    project: ProjectField = DEFAULT_PROJECT
    dry_run: bool = Field(
        default=False, alias="dryRun", description="Mine and report; file no proposal."
    )
    max_triggers: int = Field(default=3, ge=0, le=100, alias="maxTriggers")
    max_keywords: int = Field(default=10, ge=0, le=100, alias="maxKeywords")


@router.get("/{name}/examples", summary="The examples the learned router learns a skill from")
def list_examples(
    request: Request,
    name: str,
    key: Reader,
    project: ProjectQuery = DEFAULT_PROJECT,
    removed: Annotated[bool, Query(description="Also the removed ones.")] = False,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    found = routing_examples.list_examples(ws, name, project=project, removed=removed)
    return {"skill": name, "project": project, "examples": [e.to_dict() for e in found]}


@router.post("/{name}/examples", status_code=201, summary="Teach the router an example")
def add_example(request: Request, name: str, body: NewExample, key: Admin) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, body.project)
    return routing_examples.add_example(
        ws, name, body.text, project=body.project, author=f"key:{key.name}"
    ).to_dict()


@router.delete("/{name}/examples/{ref}", summary="Remove a wrong example")
def remove_example(
    request: Request,
    name: str,
    ref: ExampleRef,
    key: Admin,
    project: ProjectQuery = DEFAULT_PROJECT,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, project)
    if not ref.startswith("md") and int(ref) > MAX_ID:
        raise InvalidInput(f"An example id is at most {MAX_ID}.", field="ref", max=MAX_ID)
    return routing_examples.remove(
        ws, name, ref, project=project, author=f"key:{key.name}"
    ).to_dict()


@router.post(
    "/{name}/suggest-triggers",
    summary="Mine triggers and keywords from a skill's examples, as a proposal",
    responses={
        201: {
            "description": "A routing proposal was filed (`proposal`); "
            "200: nothing to add, or `dryRun`.",
            "content": {
                "application/json": {"schema": {"type": "object", "additionalProperties": True}}
            },
        }
    },
)
def suggest_triggers(
    request: Request, response: Response, name: str, key: Admin, body: SuggestTriggers | None = None
) -> dict[str, Any]:
    body = body or SuggestTriggers()
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, body.project)
    suggestion = triggers.suggest_triggers(
        ws,
        name,
        project=body.project,
        author=f"key:{key.name}",
        max_triggers=body.max_triggers,
        max_keywords=body.max_keywords,
        propose=not body.dry_run,
    )
    if suggestion.proposal is not None:
        response.status_code = 201
    return suggestion.to_dict()
