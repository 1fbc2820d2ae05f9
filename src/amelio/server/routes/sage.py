"""Sage analysis and proposal benchmarks."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from amelio.errors import AmelioError
from amelio.improve.bench import list_benchmarks, run_benchmark
from amelio.improve.proposals import get_proposal
from amelio.improve.sage import analyze
from amelio.server.auth import authorize_project, require
from amelio.server.params import MAX_ID, Id, ProjectField
from amelio.workspace.folder import Workspace
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT

router = APIRouter(tags=["sage"])
log = logging.getLogger("amelio.server")

Reader = Annotated[ApiKey, Depends(require("bot"))]
Admin = Annotated[ApiKey, Depends(require())]


class AnalyzeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: ProjectField = DEFAULT_PROJECT
    skills: list[Annotated[str, Field(max_length=100)]] | None = Field(
        default=None, max_length=1000, description="Only these skills."
    )
    benchmark: bool = Field(
        default=True, description="Benchmark each proposal (in the background)."
    )


class BenchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenarios: str | None = Field(
        default=None, max_length=100, description="N, generated:N, replay:N, both:N"
    )
    swap: bool | None = Field(default=None, description="Judge both A/B orders (default: on).")
    seed: int | None = Field(default=None, ge=0, le=MAX_ID)


def _bench_in_background(ws: Workspace, proposal_id: int, **options: Any) -> None:
    try:
        run_benchmark(ws, proposal_id, **options)
    except AmelioError as exc:  # stored on the run as its error; nothing to answer to
        log.warning("benchmark of proposal %s failed: %s", proposal_id, exc.message)


@router.post("/v1/sage/analyze", summary="Sage rewrites the weakest skills as proposals")
def sage_analyze(
    request: Request, body: AnalyzeRequest, tasks: BackgroundTasks, _: Admin
) -> dict[str, Any]:
    ws = request.app.state.workspace
    results = analyze(
        ws,
        project=body.project,
        skills=body.skills,
        on_proposal=(lambda pid: tasks.add_task(_bench_in_background, ws, pid))
        if body.benchmark
        else None,
        benchmark=body.benchmark,
    )
    return {
        "project": body.project,
        "results": [r.to_dict() for r in results],
        "benchmarks": "started" if body.benchmark else "off",
    }


@router.get("/v1/proposals/{proposal_id}/benchmarks", summary="A proposal's benchmark runs")
def benchmarks(request: Request, proposal_id: Id, key: Reader) -> dict[str, Any]:
    ws = request.app.state.workspace
    authorize_project(ws.engine, key, get_proposal(ws, proposal_id).project)
    return {"proposalId": proposal_id, "runs": list_benchmarks(ws, proposal_id)}


@router.post(
    "/v1/proposals/{proposal_id}/benchmarks",
    status_code=202,
    summary="Start a benchmark run of a proposal",
)
def start_benchmark(
    request: Request,
    proposal_id: Id,
    tasks: BackgroundTasks,
    _: Admin,
    body: BenchRequest | None = None,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    get_proposal(ws, proposal_id)  # 404 before accepting
    body = body or BenchRequest()
    tasks.add_task(
        _bench_in_background,
        ws,
        proposal_id,
        scenarios=body.scenarios,
        swap=body.swap,
        seed=body.seed,
    )
    return {"proposalId": proposal_id, "status": "started"}
