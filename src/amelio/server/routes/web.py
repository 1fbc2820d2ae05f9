"""The dashboard: server-rendered pages over the same library calls as the API.

Pages need a session (log in with a ``bot`` or ``admin`` API key: a ``client``
key only sends feedback events, so it gets no session); every form POST carries
a CSRF token; only an ``admin`` session sees, and may use, the approve, reject,
benchmark, rollback, Sage, routing-example, learning-editing and dead-letter retry
controls. A key bound to projects sees those projects only, in every page and project menu
(the last nightly report included); what has no project (the search signals' busiest
queries) only a global key sees. Approve and reject ask the same
:func:`~amelio.improve.proposals.authorize_decision` as the API and Telegram.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, BackgroundTasks, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt

from amelio import knowledge, skills
from amelio.assistant import cases as pinned_cases
from amelio.assistant import learnings
from amelio.assistant.quality import (
    DailyMetrics,
    daily_metrics,
    find_underperformers,
    quality_metrics,
    rule_stats,
)
from amelio.errors import AmelioError, Conflict, Forbidden, InvalidInput, LLMError, NotFound
from amelio.improve import proposals as props
from amelio.improve import triggers
from amelio.improve.bench import latest_verdict, list_benchmarks, run_benchmark
from amelio.improve.nightly import last_report
from amelio.improve.sage import analyze
from amelio.knowledge.sync import SyncWorker
from amelio.routing import examples as routing_examples
from amelio.search import PROFILES
from amelio.server.params import MAX_ID, Id
from amelio.server.routes.search import searcher
from amelio.web import data
from amelio.web.charts import line_chart
from amelio.web.i18n import flash_text, pick_language, strings
from amelio.web.session import COOKIE, Session, csrf_token, dump_session, load_session, valid_csrf
from amelio.workspace import keys
from amelio.workspace.folder import Workspace
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT, list_projects, validate_name

router = APIRouter(include_in_schema=False)
log = logging.getLogger("amelio.server")

_WEB = Path(__file__).resolve().parent.parent.parent / "web"
templates = Jinja2Templates(directory=str(_WEB / "templates"))
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
templates.env.filters["markdown"] = _markdown.render
templates.env.globals["line_chart"] = line_chart
templates.env.globals["review_flags"] = props.review_flags
STATIC_DIR = _WEB / "static"
TABS = ("content", "evals", "evolution", "routing", "cases", "prs")
#: Roles that may log in: the dashboard shows interactions, learnings and search.
DASHBOARD_ROLES = ("admin", "bot")


class LoginRequired(Exception):
    """Raised by pages without a session; the app turns it into a redirect to /login."""


def _ws(request: Request) -> Workspace:
    ws: Workspace = request.app.state.workspace
    return ws


def _session(request: Request) -> Session | None:
    ws = _ws(request)
    session = load_session(ws.settings, request.cookies.get(COOKIE))
    if session is None:
        return None
    key = keys.get_key(ws.engine, session.key_id)
    if key is None or key.role not in DASHBOARD_ROLES:
        return None  # revoking a key ends its sessions at once
    request.state.key = key  # its project scope, read fresh on every request
    return session


def _key(request: Request) -> ApiKey:
    key: ApiKey = request.state.key
    return key


def _require(
    request: Request,
    *,
    admin: bool = False,
    csrf: str | None = None,
    check_csrf: bool = False,
    project: str | None = None,
) -> Session:
    """The session, or LoginRequired; 403 for a bad CSRF token, a non-admin doing an
    admin's action, or a project outside the key's scope."""
    session = _session(request)
    if session is None:
        raise LoginRequired
    if check_csrf and not valid_csrf(_ws(request).settings, session, csrf):
        raise Forbidden("The form's CSRF token is missing or wrong: reload the page.")
    if admin and session.role != "admin":
        raise Forbidden("Only an admin can do this.")
    if project is not None:
        _project(request, project)
    return session


def _project(request: Request, project: str) -> str:
    """The page's project, checked against the session's key (call after
    :func:`_require`): the one asked for, else ``default``, else, for a key bound to
    other projects, the key's first project."""
    key = _key(request)
    if not project:
        return DEFAULT_PROJECT if key.allows(DEFAULT_PROJECT) else key.projects[0]
    validate_name(project)
    if not key.allows(project):
        raise Forbidden(f"This key cannot see project {project!r}.", project=project)
    return project


def _render(
    request: Request, template: str, session: Session | None, **context: Any
) -> HTMLResponse:
    ws = _ws(request)
    lang = pick_language(ws.settings.ui_language, request.headers.get("accept-language"))
    project = context.pop("project", None) or DEFAULT_PROJECT
    key: ApiKey | None = getattr(request.state, "key", None) if session else None
    t = strings(lang)
    base = {
        "request": request,
        "t": t,
        "lang": lang,
        "session": session,
        "is_admin": session is not None and session.role == "admin",
        "csrf": csrf_token(ws.settings, session) if session else "",
        "projects": [p.name for p in list_projects(ws.engine) if key and key.allows(p.name)],
        "project": project,
        "message": flash_text(t, request.query_params),
    }
    response = templates.TemplateResponse(request, template, base | context)
    response.headers["Cache-Control"] = "no-store"
    return response


def _back(path: str, code: str, anchor: str = "", **params: str | int) -> RedirectResponse:
    """Back to ``path`` with a flash message: its code and parameters travel in the
    query, and the page shows only a known code's string (:func:`flash_text`)."""
    sep = "&" if "?" in path else "?"
    query = urlencode({"msg": code, **{f"m_{k}": v for k, v in params.items()}})
    return RedirectResponse(
        f"{path}{sep}{query}" + (f"#{anchor}" if anchor else ""), status_code=303
    )


def _failed(exc: AmelioError) -> str:
    """An error's flash code: its family's, as the error's own text is not carried."""
    for family in (Forbidden, NotFound, Conflict, InvalidInput, LLMError):
        if isinstance(exc, family):
            return f"failed_{family.code}"
    return "failed"


# -- login --------------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request) -> HTMLResponse:
    return _render(
        request, "login.html", None, next=request.query_params.get("next", "/"), error=None
    )


@router.post("/login")
def login(
    request: Request, api_key: Annotated[str, Form()], next: Annotated[str, Form()] = "/"
) -> Response:
    ws = _ws(request)
    key = keys.authenticate(ws.engine, api_key.strip())
    if key is None or key.role not in DASHBOARD_ROLES:
        page = _render(
            request, "login.html", None, next=next, error="bad_key" if key is None else "client_key"
        )
        page.status_code = 401 if key is None else 403
        return page
    target = next if next.startswith("/") and not next.startswith("//") else "/"
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        dump_session(ws.settings, key_id=key.id, role=key.role, name=key.name),
        httponly=True,
        samesite="lax",
        max_age=12 * 3600,
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    _require(request, csrf=csrf, check_csrf=True)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


# -- skills -------------------------------------------------------------------------------


def _explorer(ws: Workspace, project: str, query: str) -> list[dict[str, Any]]:
    under = {f.skill for f in find_underperformers(ws, project)}
    pending = {p.skill for p in props.list_proposals(ws, status="pending", project=project)}
    return [
        {
            "name": s.name,
            "description": s.spec.description,
            "version": s.version,
            "scope": s.scope,
            "underperforming": s.name in under,
            "pending": s.name in pending,
        }
        for s in skills.list_skills(ws.engine, project)
        if query.lower() in s.name.lower() or query.lower() in s.spec.description.lower()
    ]


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/skills", status_code=303)


@router.get("/skills")
def skills_page(request: Request, project: str = "", q: str = "") -> HTMLResponse:
    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    proposed = [
        (p, None)
        for p in props.list_proposals(ws, status="pending", project=project)
        if p.scope == "new"
    ]
    return _render(
        request,
        "skills.html",
        session,
        explorer=_explorer(ws, project, q),
        q=q,
        skill=None,
        proposals=proposed,
        tab="prs",
        project=project,
    )


@router.get("/skills/{name}")
def skill_page(
    request: Request,
    name: str,
    project: str = "",
    q: str = "",
    tab: str = "content",
    version: int | None = None,
) -> HTMLResponse:
    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    skill = skills.get_skill(ws.engine, name, project)
    tab = tab if tab in TABS else "content"
    context: dict[str, Any] = {
        "explorer": _explorer(ws, project, q),
        "q": q,
        "skill": skill,
        "tab": tab,
        "project": project,
    }
    if tab == "content":
        history = skills.list_versions(ws.engine, name, project)
        shown = next((v for v in history if v.version == version), None)
        context |= {
            "versions": [v.version for v in history],
            "shown_version": shown.version if shown else skill.version,
            "body": shown.spec.content if shown else skill.spec.content,
        }
    elif tab == "evals":
        context |= {"rules": skill.spec.evals or (), "stats": rule_stats(ws, project, name)}
    elif tab == "evolution":
        context |= {
            "history": data.version_history(ws, name, project),
            "events": skills.skill_log(ws.engine, name, project),
        }
    elif tab == "routing":
        context |= data.routing_view(ws, name, project)
    elif tab == "cases":
        context |= {"cases": pinned_cases.list_cases(ws, project=project, skill=name)}
    else:
        found = props.list_proposals(ws, skill=name, project=project)
        context |= {"proposals": [(p, latest_verdict(ws, p.id)) for p in found]}
    return _render(request, "skills.html", session, **context)


@router.get("/proposals/{proposal_id}/report")
def proposal_report(request: Request, proposal_id: Id) -> HTMLResponse:
    """The BenchmarkReport of a proposal, loaded when its row is expanded."""
    ws = _ws(request)
    proposal = props.get_proposal(ws, proposal_id)
    session = _require(request, project=proposal.project)
    runs = list_benchmarks(ws, proposal_id)
    return _render(
        request,
        "report.html",
        session,
        proposal=proposal,
        run=runs[0] if runs else None,
        project=proposal.project,
    )


def _proposal_path(ws: Workspace, proposal_id: int) -> str:
    p = props.get_proposal(ws, proposal_id)
    if p.scope == "new" and p.status != "approved":  # no skill page until it is created
        return f"/skills?project={quote(p.project)}"
    return f"/skills/{quote(p.skill)}?project={quote(p.project)}&tab=prs"


@router.get("/proposals/{proposal_id}")
def proposal_page(request: Request, proposal_id: Id) -> Response:
    """Where a notification's link lands: the page that shows the proposal, with its
    Approve and Reject buttons (after signing in, for a visitor who is not)."""
    _require(request)  # signed in before anything about the proposal is said
    ws = _ws(request)
    proposal = props.get_proposal(ws, proposal_id)
    _require(request, project=proposal.project)
    return RedirectResponse(
        f"{_proposal_path(ws, proposal_id)}#proposal-{proposal_id}", status_code=303
    )


@router.post("/proposals/{proposal_id}/{action}")
def proposal_action(
    request: Request,
    proposal_id: Id,
    action: str,
    tasks: BackgroundTasks,
    csrf: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    session = _require(request, admin=True, csrf=csrf, check_csrf=True)
    ws = _ws(request)
    back = _proposal_path(ws, proposal_id)
    actor = f"key:{session.name}"
    if action in ("approve", "reject"):  # 403 as on the API: the rule every door applies
        key = _key(request)
        props.authorize_decision(
            props.get_proposal(ws, proposal_id), role=key.role, projects=key.projects
        )
    try:
        if action == "approve":
            p = props.approve_proposal(ws, proposal_id, actor=actor, reason=reason or None)
            return _back(
                _proposal_path(ws, proposal_id),
                "proposal_approved",
                id=p.id,
                version=p.result_version or 0,
            )
        if action == "reject":
            props.reject_proposal(ws, proposal_id, actor=actor, reason=reason or None)
            return _back(back, "proposal_rejected", id=proposal_id)
        if action == "benchmark":
            tasks.add_task(_quietly, run_benchmark, ws, proposal_id)
            return _back(back, "benchmark_started")
    except AmelioError as exc:
        return _back(back, _failed(exc))
    return _back(back, "unknown_action")


def _quietly(func: Any, *args: Any) -> None:
    try:
        func(*args)
    except AmelioError as exc:  # recorded on the run; the page shows it
        log.warning("dashboard background task failed: %s", exc.message)


@router.post("/skills/{name}/rollback")
def rollback(
    request: Request,
    name: str,
    version: Annotated[int, Form(ge=1, le=MAX_ID)],
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    skill = skills.rollback_skill(
        _ws(request).engine, name, version, project=project, author=f"key:{session.name}"
    )
    return _back(
        f"/skills/{quote(name)}?project={quote(project)}&tab=evolution",
        "rolled_back",
        version=version,
        new=skill.version,
    )


def _skill_tab(name: str, project: str, tab: str) -> str:
    return f"/skills/{quote(name)}?project={quote(project)}&tab={tab}"


#: An example as the Routing tab names it: its id, or md<N> for a SKILL.md one.
_EXAMPLE_REF = re.compile(r"(md)?[0-9]{1,10}")


@router.post("/skills/{name}/examples")
def add_routing_example(
    request: Request,
    name: str,
    text: Annotated[str, Form()],
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    try:
        example = routing_examples.add_example(
            _ws(request), name, text, project=project, author=f"key:{session.name}"
        )
    except AmelioError as exc:
        return _back(_skill_tab(name, project, "routing"), _failed(exc))
    return _back(_skill_tab(name, project, "routing"), "example_added", ref=example.ref)


@router.post("/skills/{name}/examples/{ref}/remove")
def remove_routing_example(
    request: Request,
    name: str,
    ref: str,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    ws = _ws(request)
    back = _skill_tab(name, project, "routing")
    if not _EXAMPLE_REF.fullmatch(ref) or (ref.isdigit() and int(ref) > MAX_ID):
        return _back(back, "failed_not_found")
    try:
        example = routing_examples.remove(
            ws, name, ref, project=project, author=f"key:{session.name}"
        )
    except AmelioError as exc:
        return _back(back, _failed(exc))
    if example.source == "skill":
        version = skills.get_skill(ws.engine, name, project).version
        return _back(back, "skill_example_removed", ref=ref, version=version)
    return _back(back, "example_removed", ref=ref)


@router.post("/skills/{name}/cases/{case_id}/unpin")
def unpin_case(
    request: Request,
    name: str,
    case_id: Id,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    """Stop checking a pinned case in the skill's benchmarks (its row stays)."""
    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    back = _skill_tab(name, project, "cases")
    try:
        pinned_cases.unpin_case(
            _ws(request), case_id, project=project, author=f"key:{session.name}"
        )
    except AmelioError as exc:
        return _back(back, _failed(exc))
    return _back(back, "case_unpinned", case=case_id)


@router.post("/skills/{name}/suggest-triggers")
def suggest_triggers(
    request: Request,
    name: str,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    """Mine the skill's examples into a routing proposal, shown on its PRs tab."""
    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    back = _skill_tab(name, project, "routing")
    try:
        suggestion = triggers.suggest_triggers(
            _ws(request), name, project=project, author=f"key:{session.name}"
        )
    except AmelioError as exc:
        return _back(back, _failed(exc))
    if suggestion.proposal is None:
        return _back(back, "nothing_to_add")
    return _back(
        _skill_tab(name, project, "prs"),
        "triggers_proposed",
        anchor=f"proposal-{suggestion.proposal.id}",
        id=suggestion.proposal.id,
    )


@router.post("/sage/analyze")
def sage_analyze(
    request: Request,
    tasks: BackgroundTasks,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    tasks.add_task(_quietly, lambda: analyze(_ws(request), project=project))
    return _back(f"/skills?project={quote(project)}", "sage_started")


# -- quality, learnings, interactions ----------------------------------------------------


@router.get("/quality")
def quality_page(request: Request, project: str = "") -> HTMLResponse:
    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    t = strings(pick_language(ws.settings.ui_language, request.headers.get("accept-language")))
    per_skill: dict[str, list[DailyMetrics]] = {}
    for point in daily_metrics(ws, project):
        per_skill.setdefault(point.skill, []).append(point)
    charts = {}
    for skill, points in per_skill.items():
        rate = [(p.day.isoformat(), p.success_rate) for p in points if p.success_rate is not None]
        net, votes = 0.0, []
        for p in points:  # cumulative 👍 − 👎: the trend a person reads at a glance
            net += p.feedback_positive - p.feedback_negative
            votes.append((p.day.isoformat(), net))
        top = max([1.0, *(abs(v) for _, v in votes)])
        charts[skill] = line_chart(rate, label=f"{skill}: {t['success_rate']}") + line_chart(
            votes,
            max_value=top,
            min_value=-top,
            percent=False,
            label=f"{skill}: {t['feedback']} (👍 − 👎)",
        )
    return _render(
        request,
        "quality.html",
        session,
        metrics=quality_metrics(ws, project),
        underperforming={f.skill for f in find_underperformers(ws, project)},
        charts=charts,
        report=last_report(ws, allows=_key(request).allows),
        project=project,
    )


def _review_rows(ws: Workspace, project: str) -> list[dict[str, Any]]:
    """Each learning that waits for a person, with the one it would supersede and the
    answer whose correction taught it, so the reviewer sees why it exists."""
    from amelio.assistant.review import context, review_queue

    rows = []
    for item in review_queue(ws, project=project):
        old, interaction = context(ws, item)
        rows.append({"item": item, "old": old, "interaction": interaction})
    return rows


@router.get("/learnings")
def learnings_page(request: Request, project: str = "", skill: str = "") -> HTMLResponse:
    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    items = learnings.list_learnings(ws, project=project, skill=skill or None)
    return _render(
        request,
        "learnings.html",
        session,
        items=items,
        skill=skill,
        project=project,
        review=_review_rows(ws, project),
    )


@router.post("/learnings/{learning_id}/{action}")
def review_learning(
    request: Request,
    learning_id: Id,
    action: str,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
    rule: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    """Approve (as worded, or with the edited ``rule``), reject or retire a learning."""
    from amelio.assistant import review

    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    ws = _ws(request)
    back = f"/learnings?project={quote(project)}"
    actor = f"key:{session.name}"
    try:
        if action == "approve":
            review.approve_learning(
                ws, learning_id, actor=actor, project=project, rule=rule.strip() or None
            )
            return _back(back, "learning_approved", id=learning_id)
        if action == "reject":
            review.reject_learning(
                ws, learning_id, actor=actor, project=project, reason=reason.strip() or None
            )
            return _back(back, "learning_rejected", id=learning_id)
        if action == "retire":
            learnings.delete_learning(ws, learning_id, project=project)
            return _back(back, "learning_retired", id=learning_id)
    except AmelioError as exc:
        return _back(back, _failed(exc))
    return _back(back, "unknown_action")


@router.post("/learnings")
def add_learning(
    request: Request,
    rule: Annotated[str, Form()],
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
    skill: Annotated[str, Form()] = "",
) -> Response:
    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    try:
        item, outcome = learnings.add_learning(
            _ws(request),
            rule,
            project=project,
            skill=skill or None,
            origin=learnings.Origin(author=f"key:{session.name}", reviewed=True),
        )
    except AmelioError as exc:
        return _back(f"/learnings?project={quote(project)}", _failed(exc))
    return _back(f"/learnings?project={quote(project)}", f"learning_{outcome}", id=item.id)


@router.get("/findings")
def findings_page(request: Request, project: str = "") -> HTMLResponse:
    from amelio.improve import findings

    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    items = [
        findings.get_finding(ws, f.id, project=project)
        for f in findings.list_findings(ws, project=project)
    ]
    return _render(
        request,
        "findings.html",
        session,
        items=items,
        project=project,
        describe_fix=findings.describe_fix,
    )


@router.post("/findings/{finding_id}/close")
def close_finding(
    request: Request,
    finding_id: Id,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
    reason: Annotated[str, Form()] = "",
) -> Response:
    from amelio.improve import findings

    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    back = f"/findings?project={quote(project)}"
    try:
        findings.close_finding(
            _ws(request),
            finding_id,
            actor=f"key:{session.name}",
            project=project,
            reason=reason.strip() or None,
        )
    except AmelioError as exc:
        return _back(back, _failed(exc))
    return _back(back, "finding_closed", id=finding_id)


def _chart(curves: dict[str, list[list[float]]]) -> dict[str, Any] | None:
    """Both arms' cumulative 👎 rates as SVG polyline points on one scale."""
    if not curves["control"] and not curves["canary"]:
        return None
    width, height = 320, 120
    most = max((n for arm in curves.values() for n, _ in arm), default=1)
    top = max((rate for arm in curves.values() for _, rate in arm), default=0.0) or 0.01

    def points(arm: list[list[float]]) -> str:
        return " ".join(
            f"{n / most * width:.1f},{height - rate / top * (height - 4):.1f}" for n, rate in arm
        )

    return {
        "width": width,
        "height": height,
        "top": round(top * 100, 1),
        "control": points(curves["control"]),
        "canary": points(curves["canary"]),
    }


@router.get("/rollouts")
def rollouts_page(request: Request, project: str = "") -> HTMLResponse:
    from amelio.improve import rollouts

    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    items = [
        (r, _chart(rollouts.rollout_curves(ws, r.id)))
        for r in rollouts.list_rollouts(ws, project=project)
    ]
    return _render(request, "rollouts.html", session, items=items, project=project)


@router.post("/rollouts/{rollout_id}")
def decide_rollout(
    request: Request,
    rollout_id: Id,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
    action: Annotated[str, Form()] = "",
) -> Response:
    from amelio.improve import rollouts

    session = _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    back = f"/rollouts?project={quote(project)}"
    actor = f"key:{session.name}"
    ws = _ws(request)
    try:
        if rollouts.get_rollout(ws, rollout_id).project != project:
            raise NotFound(f"No rollout {rollout_id} in project {project!r}.")
        if action == "pause":
            rollouts.pause_rollout(ws, rollout_id, actor=actor)
        elif action == "promote":
            rollouts.promote_rollout(ws, rollout_id, actor=actor)
        elif action == "abort":
            rollouts.abort_rollout(ws, rollout_id, actor=actor)
        else:
            raise InvalidInput(f"Unknown rollout action {action!r}.", field="action")
    except AmelioError as exc:
        return _back(back, _failed(exc))
    done = {"pause": "rollout_paused", "promote": "rollout_promoted", "abort": "rollout_aborted"}
    return _back(back, done[action], id=rollout_id)


@router.get("/interactions")
def interactions_page(request: Request, project: str = "") -> HTMLResponse:
    session = _require(request)
    project = _project(request, project)
    return _render(
        request,
        "interactions.html",
        session,
        items=data.recent_interactions(_ws(request), project),
        project=project,
    )


# -- search ---------------------------------------------------------------------------


@router.get("/search")
def search_page(
    request: Request, q: str = "", profile: str = "", alpha: str = "", project: str = ""
) -> HTMLResponse:
    """Try a query with any profile and see, per result, the first-phase and
    feedback scores and (for admins) the signals behind them."""
    session = _require(request)
    project = _project(request, project)
    engine = searcher(request)
    chosen = profile or engine.settings.search_profile
    error = None
    try:
        weight = float(alpha) if alpha.strip() else None
    except ValueError:
        weight, error = None, f"alpha is a number between 0 and 1, not {alpha!r}."
    view: dict[str, Any] = {}
    try:
        view = data.search_view(engine, q if error is None else "", chosen, weight)
    except AmelioError as exc:
        error = exc.message
        view = data.search_view(engine, "", chosen, None)
    if not _key(request).is_global:  # signals have no project: the queries are everyone's
        view["busiest"] = []
    settings = _ws(request).settings
    words = strings(pick_language(settings.ui_language, request.headers.get("accept-language")))
    for result in view.get("results", []):
        result["why"] = data.why(result["explain"], words)
    return _render(
        request,
        "search.html",
        session,
        q=q,
        profiles=PROFILES,
        profile=chosen,
        alpha=alpha,
        error=error,
        project=project,
        **view,
    )


# -- contributions --------------------------------------------------------------------


@router.get("/contributions")
def contributions_page(request: Request, project: str = "") -> HTMLResponse:
    """What browsers lent (``GET /v1/contributions/stats``, admin): clients by tier,
    tasks, results, disagreements and CPU-seconds given."""
    session = _require(request, admin=True)
    project = _project(request, project)
    return _render(
        request,
        "contributions.html",
        session,
        project=project,
        **data.contributions_view(_ws(request)),
    )


# -- knowledge ------------------------------------------------------------------------


def _knowledge_worker(request: Request) -> SyncWorker | None:
    """The app's sync worker (the knowledge routes' lifespan starts it), if any."""
    worker: SyncWorker | None = getattr(request.app.state, "knowledge_worker", None)
    return worker


def _notebook_path(name: str, project: str) -> str:
    return f"/knowledge/{quote(name, safe='')}?project={quote(project)}"


@router.get("/knowledge")
def knowledge_page(request: Request, project: str = "") -> HTMLResponse:
    """The project's notebooks with their health (``GET /v1/knowledge/notebooks``)."""
    session = _require(request)
    project = _project(request, project)
    worker = _knowledge_worker(request)
    return _render(
        request,
        "knowledge.html",
        session,
        notebook=None,
        notebooks=knowledge.list_notebooks(_ws(request), project=project),
        worker="off" if worker is None else "running" if worker.running else "stopped",
        worker_error=worker.last_error if worker else None,
        project=project,
    )


@router.get("/knowledge/{name}")
def notebook_page(request: Request, name: str, project: str = "", q: str = "") -> Response:
    """A notebook: its sources, its dead letters (Retry for admins) and a query box
    that asks it as ``POST /v1/knowledge/query`` does."""
    session = _require(request)
    project = _project(request, project)
    ws = _ws(request)
    try:
        view = data.knowledge_view(ws, name, project)
    except NotFound as exc:  # e.g. the project menu, from a notebook another project lacks
        return _back(f"/knowledge?project={quote(project)}", _failed(exc))
    asked: dict[str, Any] = {"answer": None, "citations": []}
    error = None
    if q:
        try:
            asked = data.knowledge_answer(ws, name, project, q)
        except AmelioError as exc:
            error = exc.message
    return _render(
        request, "knowledge.html", session, q=q, error=error, project=project, **view, **asked
    )


@router.post("/knowledge/{name}/failures/{failure_id}/retry")
def retry_dead_letter(
    request: Request,
    name: str,
    failure_id: Id,
    csrf: Annotated[str, Form()] = "",
    project: Annotated[str, Form()] = DEFAULT_PROJECT,
) -> Response:
    """Put one of the notebook's dead letters back in the queue with fresh tries
    (:func:`amelio.knowledge.retry`, as ``POST /v1/knowledge/failures/retry``)."""
    _require(request, admin=True, csrf=csrf, check_csrf=True, project=project)
    back = _notebook_path(name, project)
    try:
        retried = knowledge.retry(_ws(request), [failure_id], notebook=name, project=project)
    except AmelioError as exc:
        return _back(back, _failed(exc))
    if not retried:
        return _back(back, "not_dead_letter", anchor="dead-letters", id=failure_id)
    worker = _knowledge_worker(request)
    if worker is not None:
        worker.wake()
    return _back(back, "retried", anchor="dead-letters", id=failure_id)
