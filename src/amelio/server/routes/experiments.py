"""Interleaving experiments (``amelio.search.experiments``), admin only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from amelio.search import experiments as ex
from amelio.server.auth import authorize_project, require
from amelio.server.params import ProjectField
from amelio.server.routes.search import searcher
from amelio.workspace.keys import ApiKey

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])

Admin = Annotated[ApiKey, Depends(require())]
Name = Annotated[str, Path(max_length=100, description="The experiment's name.")]


class NewExperiment(BaseModel):
    """Two rankers to compare on a share of a project's sessions."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=100, description="lowercase letters, digits, '-' or '_'.")
    project: ProjectField = Field(default="default", description="Whose searches it serves.")
    a: str = Field(
        max_length=200,
        description="Ranker A: a rank profile with optional settings, "
        "hybrid_with_feedback:beta=1.5,exploration=0.",
    )
    b: str = Field(max_length=200, description="Ranker B, written as A is.")
    share: float = Field(default=0.2, description="The part of sessions served interleaved.")
    method: str = Field(default="team-draft", description="team-draft or balanced.")


def _one(request: Request, name: str, key: ApiKey) -> ex.Experiment:
    ws = request.app.state.workspace
    found = ex.get_experiment(ws, name)
    authorize_project(ws.engine, key, found.project)
    return found


@router.get("", summary="Experiments, newest first")
def list_experiments(
    request: Request,
    key: Admin,
    project: Annotated[str | None, Query(max_length=100)] = None,
    status: Annotated[
        str | None, Query(pattern="^(running|stopped)$", description="Only this status.")
    ] = None,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    if project is not None:
        authorize_project(ws.engine, key, project)
    found = ex.list_experiments(ws, project=project, status=status)
    return {"experiments": [e.to_dict() for e in found if key.allows(e.project)]}


@router.post("", status_code=201, summary="Start an interleaving experiment")
async def create(body: NewExperiment, request: Request, key: Admin) -> dict[str, Any]:
    ws = request.app.state.workspace
    await run_in_threadpool(authorize_project, ws.engine, key, body.project)
    engine = searcher(request)
    made = await run_in_threadpool(
        ex.create_experiment,
        ws,
        body.name,
        body.a,
        body.b,
        project=body.project,
        share=body.share,
        method=body.method,
        by=f"key:{key.name}",
        engine=engine.engine,
    )
    engine.forget_experiments()
    return made.to_dict()


@router.get("/{name}", summary="One experiment and its results: margin, interval, verdict")
def show(request: Request, name: Name, key: Admin) -> dict[str, Any]:
    _one(request, name, key)
    return ex.experiment_results(request.app.state.workspace, name).to_dict()


@router.post("/{name}/stop", summary="Stop serving it; its results stay")
def stop(request: Request, name: Name, key: Admin) -> dict[str, Any]:
    _one(request, name, key)
    ws = request.app.state.workspace
    ex.stop_experiment(ws, name)
    searcher(request).forget_experiments()
    return ex.experiment_results(ws, name).to_dict()
