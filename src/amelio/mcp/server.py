"""The MCP server: Amelio's loop as tools, resources and a prompt for any MCP client.

An agent that answers with its own model (Claude Code, Claude Desktop, Cursor, an
in-house agent) plugs into the loop here without being rewritten against the API:
it asks which skills fit, reads them, checks its answer against their rules, logs
the exchange, passes on feedback and learnings, searches, and asks notebooks.

One server, two ways in:

- ``amelio mcp`` speaks MCP over stdio to a local agent, in one project
  (``--project``) and with the rights of whoever owns the workspace, as the CLI.
- :func:`mount_mcp` serves the same server at ``/mcp`` on the service (streamable
  HTTP). Every request carries a bot key as ``Authorization: Bearer``, checked as
  every route checks it (:mod:`amelio.server.auth`), and works in the project of its
  ``X-Amelio-Project`` header, else the key's first project, else ``default``: a
  key bound to projects stays inside them, and no key makes a project by naming
  it: an unknown one is the API's 404. The transport is stateless with JSON
  responses, so any worker of ``amelio serve --workers N`` answers any request.

Each tool calls the library function its HTTP route calls, so answers and errors
are the API's. An :class:`~amelio.errors.AmelioError` comes back as a tool result
with ``isError`` set, its message as the text (what the model reads and can act
on) and ``{"error": {code, message, details}}`` as structured content; resources
and the prompt, which have no such result, fail with an MCP protocol error that
carries the same message and body.

The SDK is the ``mcp`` extra (``pip install 'amelio[mcp]'``). Without it this module
still imports, so the service runs and ``/mcp`` answers 503 with that hint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import wraps
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from amelio import evals, knowledge, skills
from amelio._version import __version__
from amelio.assistant import learnings, quality
from amelio.assistant import respond as assistant
from amelio.assistant.prompt import build_prompt
from amelio.contributions.policy import browsers_embed
from amelio.errors import AmelioError, AuthError, ConfigError, InvalidInput
from amelio.routing.router import route_message
from amelio.search import Searcher
from amelio.server.auth import authorize_project, require
from amelio.server.errors import error_response
from amelio.server.params import MAX_ID
from amelio.server.routes import search as search_routes
from amelio.workspace.folder import Workspace
from amelio.workspace.keys import ApiKey
from amelio.workspace.projects import DEFAULT_PROJECT, require_project, validate_name

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp.shared.exceptions import MCPError
    from mcp.types import (
        INTERNAL_ERROR,
        INVALID_PARAMS,
        INVALID_REQUEST,
        CallToolResult,
        ListResourcesResult,
        PaginatedRequestParams,
        Resource,
        TextContent,
    )
except ImportError as exc:  # the `mcp` extra is not installed
    _SDK_MISSING: ImportError | None = exc
else:
    _SDK_MISSING = None

__all__ = ["SERVER_NAME", "build_server", "mount_mcp", "run_stdio"]

SERVER_NAME = "amelio"
#: The header that picks the project of an HTTP request (as on the OpenAI-compatible routes).
PROJECT_HEADER = "x-amelio-project"
_INSTALL_HINT = "The MCP server needs the MCP SDK: pip install 'amelio[mcp]'."
#: Where the HTTP endpoint leaves the checked caller for the tools (ASGI scope key).
_CALLER = "amelio.mcp.server.caller"
_SKILL_URI = "amelio://projects/{project}/skills/{name}/SKILL.md"
_LEARNINGS_URI = "amelio://projects/{project}/learnings.md"
_INSTRUCTIONS = (
    "Amelio holds this team's skills (Markdown rulebooks), their eval rules and the "
    "learnings from past corrections. Before answering: route_skills(message), then "
    "get_skill on the best hit (or read its SKILL.md resource) and follow it. After "
    "answering: check_answer(text, skill) and fix what fails, then "
    "log_interaction(message, answer, skills) so the answer counts in quality metrics. "
    "Pass a person's 👍/👎/correction on with give_feedback, and lasting rules with "
    "add_learning."
)
_bearer = HTTPBearer(auto_error=False)
F = TypeVar("F", bound=Callable[..., Any])

# Argument types: the API's bounds, so an agent meets the same limits as a client.
Message = Annotated[str, Field(min_length=1, max_length=100_000, description="The user's message.")]
SkillName = Annotated[str, Field(min_length=1, max_length=100, description="A skill's name.")]
OptionalSkill = Annotated[str | None, Field(max_length=100)]
Rules = Annotated[
    list[dict[str, Any]] | None,
    Field(max_length=50, description="Eval rules in the skills' evals.json format (at most 50)."),
]


def _require_sdk() -> None:
    """A missing optional package is a configuration error, as for the embedders."""
    if _SDK_MISSING is not None:
        raise ConfigError(_INSTALL_HINT) from _SDK_MISSING


# -- who is asking ------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: the bot key of an HTTP request (``None`` over stdio,
    where the workspace owner runs the server) and the project it works in."""

    key: ApiKey | None
    project: str

    def authorize(self, ws: Workspace, project: str) -> str:
        """``project`` if this caller may use it, as a route checks it, and if it
        exists, whoever asks: MCP makes no project (``amelio projects create`` does),
        so a tool that writes refuses a project nobody made, as one that reads does,
        rather than making it from a typo."""
        if self.key is not None:
            authorize_project(ws.engine, self.key, project)
        require_project(ws.engine, validate_name(project))  # ProjectNotFound names the fix
        return project


@dataclass(frozen=True)
class _Call:
    """What one tool, resource or prompt call works with."""

    ws: Workspace
    caller: Caller
    request: Request | None

    @property
    def project(self) -> str:
        return self.caller.project


def _call(ctx: Context[Any, Any]) -> _Call:
    server = ctx.mcp_server
    assert isinstance(server, _AmelioServer)
    request = ctx.request_context.request
    if request is None:  # stdio: the process is the workspace owner's
        owner = Caller(None, server.project)
        owner.authorize(server.workspace, server.project)
        return _Call(server.workspace, owner, None)
    caller = request.scope.get(_CALLER)
    if not isinstance(caller, Caller):  # only the endpoint below sets it
        raise AuthError("Missing API key: send `Authorization: Bearer <key>`.")
    return _Call(server.workspace, caller, request)


def _http_caller(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The bot key's caller for ``request``, or the API's 401, 403 or 404."""
    key = require("bot")(request, credentials)
    ws: Workspace = request.app.state.workspace
    project = request.headers.get(PROJECT_HEADER) or (
        key.projects[0] if key.projects else DEFAULT_PROJECT
    )
    caller = Caller(key, project)
    caller.authorize(ws, project)
    return caller


# -- errors -------------------------------------------------------------------------------


def _error_result(exc: AmelioError) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=exc.message)],
        structured_content={"error": exc.to_dict()},
        is_error=True,
    )


def _protocol_error(exc: AmelioError) -> MCPError:
    """An MCP error for a resource or prompt: bad input and missing things are the
    caller's (invalid params), the rest the server's."""
    code = INTERNAL_ERROR if exc.http_status >= 500 else INVALID_PARAMS
    if exc.http_status in (401, 403):
        code = INVALID_REQUEST
    return MCPError(code=code, message=exc.message, data=exc.to_dict())


def _tool(fn: F) -> F:
    """A tool whose Amelio errors come back as results the model can read."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AmelioError as exc:
            return _error_result(exc)

    return wrapper  # type: ignore[return-value]


def _protocol(fn: F) -> F:
    """A resource or prompt whose Amelio errors become MCP protocol errors."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AmelioError as exc:
            raise _protocol_error(exc) from exc

    return wrapper  # type: ignore[return-value]


# -- tools ----------------------------------------------------------------------------------


@_tool
def route_skills(
    message: Message,
    ctx: Context[Any, Any],
    limit: Annotated[int | None, Field(ge=1, le=50, description="How many skills at most.")] = None,
) -> dict[str, Any]:
    """Rank the skills that fit a message, with scores and the terms that matched."""
    call = _call(ctx)
    return route_message(call.ws, message, project=call.project, limit=limit).to_dict()


@_tool
def get_skill(name: SkillName, ctx: Context[Any, Any]) -> dict[str, Any]:
    """One skill as this project sees it: its rulebook (content), eval rules, version."""
    call = _call(ctx)
    return skills.get_skill(call.ws.engine, name, call.project).to_dict()


@_tool
def check_answer(
    text: Annotated[str, Field(description="The answer to check.")],
    ctx: Context[Any, Any],
    skill: OptionalSkill = None,
    rules: Rules = None,
) -> dict[str, Any]:
    """Check an answer against a skill's eval rules, or against given rules (one of the
    two): which rules fail, whether it succeeds, and the footnotes to show."""
    call = _call(ctx)
    if (skill is None) == (rules is None):
        raise InvalidInput("Give exactly one of `skill` or `rules`.", field="skill")
    if rules is not None:
        parsed = evals.parse_rules(rules, source="request")
    else:
        assert skill is not None
        found = skills.get_skill(call.ws.engine, skill, call.project)
        parsed = evals.parse_rules(list(found.spec.evals or ()))
    report = evals.evaluate(text, parsed, max_chars=call.ws.settings.max_text_chars)
    return report.to_dict() | {"footnotes": evals.render_footnotes(report)}


@_tool
def log_interaction(
    message: Annotated[
        str,
        Field(min_length=1, max_length=1_000_000, description="What the user asked your model."),
    ],
    answer: Annotated[
        str, Field(min_length=1, max_length=1_000_000, description="What your model answered.")
    ],
    ctx: Context[Any, Any],
    skills: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=100)]] | None,
        Field(
            max_length=assistant.MAX_LOGGED_SKILLS,
            description="The skills the answer used (the first one's rules check it); "
            "absent: the router attributes the message.",
        ),
    ] = None,
    model: Annotated[str | None, Field(min_length=1, max_length=200)] = None,
    provider: Annotated[
        str | None,
        Field(min_length=1, max_length=50, description="Who answered; default `external`."),
    ] = None,
    idempotencyKey: Annotated[
        str | None,
        Field(  # camelCase: the API's name
            min_length=1,
            max_length=assistant.MAX_IDEMPOTENCY_KEY_CHARS,
            description="A retry with the same key returns the first interaction.",
        ),
    ] = None,
) -> dict[str, Any]:
    """Record an exchange your own model answered: the eval rules check the answer and
    it counts in quality metrics like one Amelio answered. Returns its interactionId,
    for give_feedback."""
    call = _call(ctx)
    return assistant.log_exchange(
        call.ws,
        message,
        answer,
        project=call.project,
        skills=skills,
        model=model,
        provider=provider,
        idempotency_key=idempotencyKey,
    ).to_dict()


@_tool
def give_feedback(
    interactionId: Annotated[int, Field(ge=1, le=MAX_ID)],  # camelCase: the API's name
    kind: Annotated[str, Field(max_length=10, description="up, down or fixit.")],
    ctx: Context[Any, Any],
    comment: Annotated[
        str | None,
        Field(max_length=quality.MAX_COMMENT_CHARS, description="What was wrong or right."),
    ] = None,
) -> dict[str, Any]:
    """👍 (up), 👎 (down) or Fix It (fixit) on an answer; a comment becomes a learning."""
    call = _call(ctx)
    found = assistant.get_interaction(call.ws, interactionId)
    call.caller.authorize(call.ws, found["project"])
    return quality.give_answer_feedback(call.ws, interactionId, kind, comment=comment).to_dict()


@_tool
def add_learning(
    text: Annotated[
        str,
        Field(
            min_length=1,
            max_length=learnings.MAX_RULE_CHARS,
            description="The rule, e.g. 'Avoid sudo in scripts'.",
        ),
    ],
    ctx: Context[Any, Any],
    skill: Annotated[
        str | None, Field(max_length=100, description="Only when this skill is hinted.")
    ] = None,
) -> dict[str, Any]:
    """Add a learning to the project's prompts (a paraphrase merges into the existing
    one; one that contradicts an active learning, or looks like a secret or an
    injection, waits for a person; under learnings_review = "queue" every one does)."""
    call = _call(ctx)
    item, outcome = learnings.add_learning(
        call.ws,
        text,
        source="manual",
        project=call.project,
        skill=skill,
        origin=learnings.Origin(author="mcp"),
    )
    return item.to_dict() | {"outcome": outcome}


@_tool
def list_learnings(ctx: Context[Any, Any], skill: OptionalSkill = None) -> dict[str, Any]:
    """The project's active learnings, newest first (with skill: its own and global ones)."""
    call = _call(ctx)
    items = learnings.list_learnings(call.ws, project=call.project, skill=skill)
    return {"project": call.project, "learnings": [i.to_dict() for i in items]}


@_tool
def search(
    query: Annotated[str, Field(max_length=2000, description="What to search for.")],
    ctx: Context[Any, Any],
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
    sessionId: Annotated[
        str | None,
        Field(  # camelCase: the API's name
            min_length=1, max_length=200, description="The session id your feedback events send."
        ),
    ] = None,
) -> dict[str, Any]:
    """Search the corpus. Send the returned feedbackToken with the feedback events of
    what the user clicked, so the ranking learns from them."""
    call = _call(ctx)
    server = ctx.mcp_server
    assert isinstance(server, _AmelioServer)
    found = search_routes.searcher(call.request) if call.request is not None else server.searcher()
    return found.search(query, project=call.project, limit=limit, session=sessionId).to_dict()


@_tool
def ask_knowledge(
    notebook: Annotated[str, Field(max_length=100)],
    question: Annotated[str, Field(min_length=1, max_length=4000)],
    ctx: Context[Any, Any],
) -> dict[str, Any]:
    """Answer a question from a notebook, with numbered citations of its sources."""
    call = _call(ctx)
    return knowledge.answer_question(call.ws, notebook, question, project=call.project).to_dict()


_TOOLS: tuple[Callable[..., Any], ...] = (
    route_skills,
    get_skill,
    check_answer,
    log_interaction,
    give_feedback,
    add_learning,
    list_learnings,
    search,
    ask_knowledge,
)


# -- resources and the prompt ----------------------------------------------------------------


@_protocol
def skill_file(project: str, name: str, ctx: Context[Any, Any]) -> str:
    """A skill's SKILL.md as the project sees it (its fork, else the global one)."""
    call = _call(ctx)
    call.caller.authorize(call.ws, project)
    return skills.render_skill_md(skills.get_skill(call.ws.engine, name, project).spec)


@_protocol
def learnings_file(project: str, ctx: Context[Any, Any]) -> str:
    """The project's learnings.md, as Amelio keeps it in step with the database."""
    call = _call(ctx)
    call.caller.authorize(call.ws, project)
    items = learnings.list_learnings(call.ws, project=project)  # reads hand edits back first
    path = learnings.learnings_path(call.ws, project)
    return (
        path.read_text(encoding="utf-8") if path.is_file() else learnings.render_learnings_md(items)
    )


@_protocol
def system_block(message: Message, ctx: Context[Any, Any]) -> list[dict[str, Any]]:
    """The system block Amelio would send with this message (instructions,
    SKILLS_HINT, the active skill, learnings), then the message itself."""
    call = _call(ctx)
    prompt = build_prompt(call.ws, message, project=call.project)
    return [
        {"role": "user", "content": {"type": "text", "text": prompt.system}},
        {"role": "user", "content": {"type": "text", "text": prompt.message}},
    ]


if _SDK_MISSING is None:

    class _AmelioServer(MCPServer[Any]):
        """The SDK's server, knowing its workspace, and listing each skill's SKILL.md
        for the caller's project (the SDK lists only resources fixed in advance)."""

        def __init__(self, workspace: Workspace, project: str) -> None:
            super().__init__(
                SERVER_NAME,
                version=__version__,
                instructions=_INSTRUCTIONS,
                log_level="WARNING",
            )
            self.workspace = workspace
            self.project = project
            self._searcher: Searcher | None = None
            self._lock = threading.Lock()

        def searcher(self) -> Searcher:
            """The server's one searcher over stdio (its warm cache outlives a call)."""
            with self._lock:
                if self._searcher is None:
                    self._searcher = Searcher(
                        self.workspace,
                        defer_missing_vectors=browsers_embed(self.workspace.settings),
                    )
                return self._searcher

        async def _handle_list_resources(
            self, ctx: Any, params: PaginatedRequestParams | None
        ) -> ListResourcesResult:
            context = Context(request_context=ctx, mcp_server=self)
            try:
                listed = await run_in_threadpool(_list_resources, _call(context))
            except AmelioError as exc:
                raise _protocol_error(exc) from exc
            return ListResourcesResult(resources=listed)


def _list_resources(call: _Call) -> list[Resource]:
    project = call.project
    found = skills.list_skills(call.ws.engine, project)
    listed = [
        Resource(
            uri=_SKILL_URI.format(project=project, name=s.name),
            name=f"{s.name}/SKILL.md",
            description=s.spec.description,
            mime_type="text/markdown",
        )
        for s in found
    ]
    listed.append(
        Resource(
            uri=_LEARNINGS_URI.format(project=project),
            name="learnings.md",
            description=f"Learnings of project {project}, injected into prompts.",
            mime_type="text/markdown",
        )
    )
    return listed


# -- building and serving ---------------------------------------------------------------------


def build_server(workspace: Workspace, *, project: str = DEFAULT_PROJECT) -> MCPServer[Any]:
    """The MCP server for ``workspace``; ``project`` is where stdio calls work (an HTTP
    request names its own)."""
    _require_sdk()
    validate_name(project)
    # The SDK configures the root logger when a server is made; the host's logging
    # (the service's, or stdio's clean stdout) is not its to change.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        server = _AmelioServer(workspace, project)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    for tool in _TOOLS:
        server.add_tool(tool)
    server.resource(
        _SKILL_URI,
        name="SKILL.md",
        mime_type="text/markdown",
        description="A skill's SKILL.md, as the project sees it.",
    )(skill_file)
    server.resource(
        _LEARNINGS_URI,
        name="learnings.md",
        mime_type="text/markdown",
        description="A project's learnings.md.",
    )(learnings_file)
    server.prompt(name="system_block", title="Amelio system block")(system_block)
    return server


def run_stdio(workspace: Workspace, *, project: str = DEFAULT_PROJECT) -> None:
    """Serve MCP over stdin/stdout until the client closes it (``amelio mcp``)."""
    build_server(workspace, project=project).run("stdio")


class _Endpoint:
    """``/mcp``: checks the bot key and project as a route does, then hands the
    request to the SDK's session manager, which runs inside the app's lifespan."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.manager: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if self.manager is None:
            message = (
                _INSTALL_HINT
                if _SDK_MISSING is not None
                else (
                    "The MCP endpoint runs in the app's lifespan: serve the app with lifespan "
                    "events on (as `amelio serve` does)."
                )
            )
            await error_response(503, "mcp_unavailable", message)(scope, receive, send)
            return
        credentials = await _bearer(request)
        # AmelioError leaves through the app's handlers: the API's 401/403/404 bodies.
        scope[_CALLER] = await run_in_threadpool(_http_caller, request, credentials)
        await self.manager.handle_request(scope, receive, send)


def mount_mcp(app: FastAPI) -> None:
    """Serve the MCP server at ``/mcp`` on ``app`` (made by ``create_app``); a second
    call does nothing. Without the ``mcp`` extra, ``/mcp`` answers 503 with the hint."""
    if getattr(app.state, "mcp_endpoint", None) is not None:
        return
    endpoint = _Endpoint(app)
    app.state.mcp_endpoint = endpoint
    # An ASGI app is a valid route endpoint (starlette's Route serves it as is); the
    # exact path, not a mount, so a client's POST /mcp is not redirected to /mcp/.
    app.add_route("/mcp", endpoint, include_in_schema=False)  # type: ignore[arg-type]
    if _SDK_MISSING is not None:
        return
    workspace: Workspace = app.state.workspace

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # A session manager runs once, so each start of the app gets a new one.
        server = build_server(workspace)
        server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            max_request_body_size=workspace.settings.max_request_bytes,
            # The key check guards the endpoint, and the service answers on any host
            # name, so the SDK's localhost-only Host check would only get in the way.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = server.session_manager
        async with manager.run():
            endpoint.manager = manager
            try:
                yield
            finally:
                endpoint.manager = None

    app.include_router(APIRouter(lifespan=lifespan))
