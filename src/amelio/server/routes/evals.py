"""Eval rules of a skill, and checking a text against rules."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio import evals, skills
from amelio.errors import InvalidInput
from amelio.server.auth import authorize_project, require
from amelio.server.params import MAX_ID, PROJECT_PATTERN, ProjectField
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(tags=["evals"])

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]
#: Rules one check request may carry: every rule costs work, and a skill's file (up
#: to evals.MAX_RULES) is the place for long lists.
MAX_REQUEST_RULES = 50
ProjectParam = Annotated[
    str,
    Query(
        pattern=PROJECT_PATTERN,
        max_length=100,
        description="Project whose view of the skill to use.",
    ),
]


class RulesUpdate(BaseModel):
    """A seed-format evals document, or what ``GET`` returned, edited."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    rules: list[dict[str, Any]] = Field(description="Rules in the seed's format.")
    version: int | None = Field(
        default=None, ge=0, le=MAX_ID, description="Format version; only 1 exists."
    )
    skill: str | None = Field(
        default=None, max_length=100, description="Must match the path when given."
    )
    project: str | None = Field(
        default=None, max_length=100, description="As returned by GET; ignored."
    )
    reason: str = Field(default="eval rules edited", max_length=2000)
    skill_version: int | None = Field(
        default=None,
        alias="skillVersion",
        ge=1,
        le=MAX_ID,
        description="Skill version the edit is based on (as GET returned it); 409 if "
        "someone saved a newer one since.",
    )
    expected_version: int | None = Field(
        default=None, alias="expectedVersion", ge=1, le=MAX_ID, description="Same as skillVersion."
    )


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The answer to check.")
    skill: str | None = Field(default=None, max_length=100, description="Use this skill's rules …")
    project: ProjectField = Field(default=DEFAULT_PROJECT, description="… as this project sees it.")
    rules: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=MAX_REQUEST_RULES,
        description=f"… or these rules (at most {MAX_REQUEST_RULES}).",
    )


def _rules_body(skill: skills.Skill) -> dict[str, Any]:
    """The seed's evals file plus where it lives; PUT accepts it back as is."""
    return {
        "version": 1,
        "skill": skill.name,
        "project": skill.project,
        "skillVersion": skill.version,
        "rules": [dict(r) for r in skill.spec.evals or ()],
    }


@router.get("/v1/skills/{name}/evals", summary="A skill's eval rules")
def get_rules(
    request: Request, name: str, key: Reader, project: ProjectParam = DEFAULT_PROJECT
) -> dict[str, Any]:
    authorize_project(request.app.state.workspace.engine, key, project)
    return _rules_body(skills.get_skill(request.app.state.workspace.engine, name, project))


@router.put("/v1/skills/{name}/evals", summary="Replace a skill's eval rules (new version)")
def put_rules(
    request: Request,
    name: str,
    body: RulesUpdate,
    key: Admin,
    project: Annotated[
        str | None,
        Query(
            pattern=PROJECT_PATTERN,
            max_length=100,
            description="Change this project's fork, forking the global skill first if needed. "
            "Without it, the skill is changed where the default project sees it.",
        ),
    ] = None,
) -> dict[str, Any]:
    if body.version not in (None, 1):
        raise InvalidInput(
            f"Unsupported evals format version {body.version}; use 1.", field="version"
        )
    if body.skill not in (None, name):
        raise InvalidInput(f"Body is for skill {body.skill!r}, path is {name!r}.", field="skill")
    updated = skills.update_project_skill(
        request.app.state.workspace.engine,
        name,
        project,
        rules=body.rules,
        author=f"key:{key.name}",
        reason=body.reason,
        expected_version=body.expected_version or body.skill_version,
    )
    return _rules_body(updated)


@router.post("/v1/evals/check", summary="Check a text against a skill's rules or given rules")
def check(request: Request, body: CheckRequest, key: Reader) -> dict[str, Any]:
    if (body.skill is None) == (body.rules is None):
        raise InvalidInput("Give exactly one of `skill` or `rules`.", field="skill")
    if body.rules is not None:
        rules = evals.parse_rules(body.rules, source="request")
    else:
        assert body.skill is not None
        authorize_project(request.app.state.workspace.engine, key, body.project)
        skill = skills.get_skill(request.app.state.workspace.engine, body.skill, body.project)
        rules = evals.parse_rules(list(skill.spec.evals or ()))
    report = evals.evaluate(body.text, rules, max_chars=request.app.state.settings.max_text_chars)
    return report.to_dict() | {"footnotes": evals.render_footnotes(report)}
