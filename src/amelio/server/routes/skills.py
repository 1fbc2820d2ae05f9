"""Skills: list, show with history."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from amelio import skills
from amelio.errors import SkillNotFound
from amelio.keys import ApiKey
from amelio.projects import DEFAULT_PROJECT
from amelio.server.auth import authorize_project, require
from amelio.server.params import MAX_ID, PROJECT_PATTERN

router = APIRouter(prefix="/v1/skills", tags=["skills"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
ProjectParam = Annotated[
    str, Query(pattern=PROJECT_PATTERN, max_length=100,
               description="Project whose view of the skills to return (forks first).")
]


@router.get("", summary="Skills a project sees")
def list_skills(request: Request, key: Reader, project: ProjectParam = DEFAULT_PROJECT
                ) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    found = skills.list_skills(request.app.state.workspace.engine, project)
    return {"project": project, "skills": [s.to_dict(with_content=False) for s in found]}


@router.get("/{name}", summary="One skill with its version history")
def get_skill(
    request: Request, name: str, key: Reader, project: ProjectParam = DEFAULT_PROJECT,
    version: Annotated[int | None, Query(ge=1, le=MAX_ID,
                                         description="An older version's content")] = None,
) -> dict[str, Any]:
    engine = request.app.state.workspace.engine
    authorize_project(engine, key, project)
    skill = skills.get_skill(engine, name, project)
    history = skills.list_versions(engine, name, project)
    body = skill.to_dict()
    if version is not None:
        match = [v for v in history if v.version == version]
        if not match:
            raise SkillNotFound(f"Skill {name!r} has no version {version} "
                                f"(it has 1 to {skill.version}).", skill=name, version=version)
        body |= {"version": version, "content": match[0].spec.content,
                 "evals": None if match[0].spec.evals is None
                 else [dict(r) for r in match[0].spec.evals]}
    body["currentVersion"] = skill.version
    body["versions"] = [v.to_dict() for v in history]
    return body
