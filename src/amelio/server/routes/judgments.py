"""Judgment lists (``amelio.search.judgments``): the API reads them and grades one
pair (admin); the dashboard's ``/judgments`` pages let a person grade them.

Lists have no project: like the search signals they are built from, they are the
workspace's, so the API asks for an admin key, and the pages for a session whose key
is bound to no project (a bot's may look, only an admin's may grade). Building one
(clicks, an LLM, a pool for people) is ``amelio judgments build``: an LLM list can
take minutes, longer than a request should.

The pages reuse the dashboard's plumbing (:mod:`amelio.server.routes.web`: the
session, CSRF, rendering, flash messages) on a router of their own.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from amelio.errors import AmelioError, Forbidden
from amelio.search import judgment_lists as store
from amelio.server.auth import require
from amelio.server.params import MAX_ID, PROJECT_PATTERN
from amelio.server.routes.search import searcher
from amelio.server.routes.web import _back, _failed, _key, _project, _render, _require, _ws
from amelio.workspace.keys import ApiKey

router = APIRouter(prefix="/v1/judgments", tags=["judgments"])
#: The dashboard's pages (HTML, a browser session; not in the OpenAPI document).
pages = APIRouter(include_in_schema=False)
#: How much of a document the grading page shows.
EXCERPT_CHARS = 1200

Admin = Annotated[ApiKey, Depends(require())]
ListName = Annotated[
    str,
    Path(
        pattern=PROJECT_PATTERN,
        max_length=100,
        description="The list's name: 1-100 lowercase letters, digits, '-' or '_'.",
    ),
]


class GradeBody(BaseModel):
    """One pair's grade. The query is the list's (as ``GET /v1/judgments/{name}``
    shows it) or the text as searched: it is normalized the way searches store it."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000, description="The pair's query.")
    docId: str = Field(min_length=1, max_length=256, description="The pair's document.")
    grade: int = Field(ge=0, le=3, description="0 irrelevant, 1 related, 2 relevant, 3 perfect.")


@router.get("", summary="Every judgment list, newest first, with its counts")
def list_judgments(request: Request, _: Admin) -> dict[str, Any]:
    found = store.list_lists(request.app.state.workspace)
    return {"lists": [item.to_dict() for item in found]}


@router.get("/{name}", summary="One judgment list: how it was built, its counts, its pairs")
def get_judgments(
    request: Request,
    name: ListName,
    _: Admin,
    ungraded: Annotated[bool, Query(description="Only the pairs not graded yet.")] = False,
    limit: Annotated[int, Query(ge=0, le=10_000, description="At most this many pairs.")] = 100,
) -> dict[str, Any]:
    ws = request.app.state.workspace
    item = store.get_list(ws, name)
    pairs = store.pairs_of(ws, name, ungraded=ungraded, limit=limit) if limit else []
    return item.to_dict() | {"judgments": [p.to_dict() for p in pairs]}


@router.post("/{name}/grades", summary="Grade one (query, document) pair of a list")
async def grade_pair(
    request: Request, name: ListName, body: GradeBody, key: Admin
) -> dict[str, Any]:
    graded = await run_in_threadpool(
        store.grade,
        request.app.state.workspace,
        name,
        body.query,
        body.docId,
        body.grade,
        by=f"key:{key.name}",
    )
    return graded.to_dict()


# -- the dashboard -----------------------------------------------------------------------


def _global_only(request: Request) -> None:
    if not _key(request).is_global:
        raise Forbidden(
            "Judgment lists are the whole workspace's: log in with a key bound to no project."
        )


@pages.get("/judgments")
def lists_page(request: Request, project: str = "") -> HTMLResponse:
    """Every list with its progress; a key bound to projects sees none."""
    session = _require(request)
    project = _project(request, project)
    scoped = not _key(request).is_global
    items = [] if scoped else store.list_lists(_ws(request))
    return _render(request, "judgments.html", session, items=items, scoped=scoped, project=project)


@pages.get("/judgments/{name}")
def grading_page(
    request: Request,
    name: ListName,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    project: str = "",
) -> HTMLResponse:
    """One ungraded pair at a time: the query, the document's title and a body
    excerpt, and the grade buttons (keys 0-3; s skips to the next pair)."""
    session = _require(request)
    project = _project(request, project)
    _global_only(request)
    ws = _ws(request)
    item = store.get_list(ws, name)
    pair = store.next_ungraded(ws, name, after=after)
    document = None
    if pair is not None:
        document = searcher(request).engine.documents([pair.doc_id]).get(pair.doc_id)
    body = document.body if document else ""
    return _render(
        request,
        "judgment.html",
        session,
        item=item,
        pair=pair,
        title=document.title if document else "",
        excerpt=body[:EXCERPT_CHARS] + ("…" if len(body) > EXCERPT_CHARS else ""),
        missing=pair is not None and document is None,
        grades=store.GRADES,
        project=project,
    )


@pages.post("/judgments/{name}/grade")
def grade_form(
    request: Request,
    name: ListName,
    pair: Annotated[int, Form(ge=1, le=MAX_ID)],
    grade: Annotated[int, Form(ge=0, le=3)],
    csrf: Annotated[str, Form()] = "",
) -> Response:
    """Grade the pair the page showed, then on to the next one."""
    session = _require(request, admin=True, csrf=csrf, check_csrf=True)
    _global_only(request)
    ws = _ws(request)
    path = f"/judgments/{quote(name)}"
    try:
        shown = store.get_pair(ws, name, pair)
        store.grade(ws, name, shown.query, shown.doc_id, grade, by=f"key:{session.name}")
    except AmelioError as exc:
        return _back(path, _failed(exc))
    return RedirectResponse(f"{path}?after={pair}", status_code=303)
