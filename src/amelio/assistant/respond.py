"""respond(): the online path of the skill loop.

message → router → learnings → prompt → LLM → evals → answer + footnotes, and
every step recorded as one interaction, so quality metrics can always be
rebuilt from what was stored. The LLM call is the only slow part; everything
Amelio adds around it is measured by ``benchmarks/respond_overhead.py``.

An answer made by another system (an agent with its own model) enters the same
record through :func:`log_exchange`: routed (or attributed to the skills the
caller names), checked by the same rules and stored as one interaction, so it
counts in quality metrics, underperformers and Sage like any other answer.

Under ``pii_scrub = all`` the stored message, answer and eval details are
scrubbed (:mod:`amelio.privacy.pii`); the model still sees the message and the person
still gets the answer as written: only the record loses the personal data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from amelio import db, evals
from amelio.assistant.prompt import Prompt, build_prompt
from amelio.db.schema import eval_results, interactions, projects, utcnow
from amelio.errors import Conflict, InputTooLarge, InvalidInput, LLMError, NotFound
from amelio.improve.rollouts import unit_of
from amelio.improve.shadow import maybe_shadow
from amelio.llm import Completion, LLMRequest, Provider, TextDelta, get_provider
from amelio.ops.tracing import span
from amelio.privacy.identity import user_ref
from amelio.privacy.pii import scrub_for_storage
from amelio.routing.router import RouteHit, route_message
from amelio.skills.model import Skill
from amelio.skills.store import get_skill, visible_skills
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT, project_id, require_project

__all__ = [
    "EXTERNAL_PROVIDER",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "Reply",
    "answer_unrecorded",
    "answer_with",
    "get_interaction",
    "log_exchange",
    "record_reply",
    "respond",
    "respond_stream",
]

#: The provider recorded for an answer made elsewhere when the caller names none.
EXTERNAL_PROVIDER = "external"
#: The longest idempotency key (the column's size).
MAX_IDEMPOTENCY_KEY_CHARS = 200


@dataclass(frozen=True)
class Reply:
    """An answer as the user sees it (``text``: answer + footnotes) and as it was checked."""

    interaction_id: int
    text: str
    answer: str
    footnotes: tuple[str, ...]
    skills: tuple[RouteHit, ...]
    applied_skill: str | None
    evals: evals.EvalReport
    completion: Completion
    prompt_hash: str
    learning_ids: tuple[int, ...] = field(default=())
    #: The applied skill's version that answered (a canary rollout's old or new one).
    skill_version: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "interactionId": self.interaction_id,
            "text": self.text,
            "answer": self.answer,
            "footnotes": list(self.footnotes),
            "skills": [h.to_dict() for h in self.skills],
            "appliedSkill": self.applied_skill,
            "skillVersion": self.skill_version,
            "evals": self.evals.to_dict(),
            "promptHash": self.prompt_hash,
            "learningsUsed": list(self.learning_ids),
            "model": self.completion.model,
            "provider": self.completion.provider,
            "usage": {
                "inputTokens": self.completion.input_tokens,
                "outputTokens": self.completion.output_tokens,
                "costUsd": self.completion.cost_usd,
            },
            "latencyMs": round(self.completion.latency_ms, 2),
        }


# Compiled rules, keyed by the rules themselves: regexes and schemas compile once,
# not per answer. Not by (skill id, version): two workspaces (two databases) in one
# process have different skills under the same id and version.
_rules_cache: dict[str, tuple[evals.EvalRule, ...]] = {}
_rules_lock = threading.Lock()


def rules_of(skill: Skill) -> tuple[evals.EvalRule, ...]:
    """The skill's rules, compiled once per distinct rule list."""
    raw = list(skill.spec.evals or ())
    key = json.dumps(raw, sort_keys=True, default=str)
    with _rules_lock:
        cached = _rules_cache.get(key)
    if cached is None:
        cached = evals.parse_rules(raw)
        with _rules_lock:
            if len(_rules_cache) > 1024:
                _rules_cache.clear()
            _rules_cache[key] = cached
    return cached


def _prepare(
    ws: Workspace, message: str, project: str, scorer: str | None, unit: str | None
) -> tuple[Prompt, Skill | None, LLMRequest]:
    prompt = build_prompt(ws, message, project=project, scorer=scorer, unit=unit)
    request = LLMRequest.single(prompt.system, message, max_tokens=ws.settings.llm_max_tokens)
    return prompt, prompt.applied, request


def _finish(
    ws: Workspace,
    *,
    prompt: Prompt,
    applied: Skill | None,
    completion: Completion,
    project: str,
    user: str | None,
    started: float,
    request: LLMRequest | None = None,
) -> Reply:
    """Check the answer, store the interaction and its eval results in one transaction;
    then, at ``shadow_rate``, hand ``request`` to the shadow model in the background
    (:mod:`amelio.improve.shadow`)."""
    hits = prompt.route.hits if prompt.route else ()
    learning_ids = prompt.learnings.ids if prompt.learnings else ()
    reply = _store(
        ws,
        project=project,
        user=user,
        message=prompt.message,
        hits=hits,
        applied=applied,
        prompt_hash=prompt.hash,
        learning_ids=learning_ids,
        completion=completion,
        started=started,
    )
    if request is not None:
        maybe_shadow(ws, request, applied, reply.interaction_id)
    return reply


_INSERT_INTERACTION = interactions.insert()
_INSERT_EVAL_RESULTS = eval_results.insert()


#: An eval result's own columns (besides its id and interaction): one array each.
_RESULT_COLUMNS = tuple(c.name for c in eval_results.c if c.name not in ("id", "interaction_id"))


def _postgres_insert(*, fast: bool) -> sa.TextClause:
    """The interaction and its eval results as one statement, for PostgreSQL: one
    statement is atomic on its own, so it runs without BEGIN and COMMIT, in one round
    trip instead of four. The columns come from the tables, so the SQL follows the
    schema; the results travel as one array per column, unnested.

    ``fast`` (the ``interaction_commit`` setting) turns ``synchronous_commit`` off for
    this statement's own transaction (``set_config(..., true)``), so its commit does
    not wait for the write-ahead log's flush; every other write, and every other
    transaction on the same pooled connection, keeps the server's setting.
    """
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]
    columns = [c for c in interactions.c if c.name != "id"]
    checked = [eval_results.c[name] for name in _RESULT_COLUMNS]
    names = ", ".join(c.name for c in columns)
    values = ", ".join(f":{c.name}" for c in columns)
    arrays = ", ".join(f"CAST(:r_{c.name} AS {c.type.compile(dialect=pg)}[])" for c in checked)
    result_names = ", ".join(c.name for c in checked)
    # Referenced by the final SELECT: a CTE nothing reads is never run.
    relaxed = "relaxed AS (SELECT set_config('synchronous_commit', 'off', true)), "
    # Names come from the table definitions; every value is bound.
    return sa.text(
        f"WITH {relaxed if fast else ''}"  # noqa: S608
        f"inserted AS (INSERT INTO interactions ({names}) VALUES ({values}) "
        f"RETURNING id), "
        f"checked AS (INSERT INTO eval_results (interaction_id, {result_names}) "
        f"SELECT inserted.id, r.* FROM inserted, unnest({arrays}) AS r({result_names})) "
        f"SELECT id FROM inserted{', relaxed' if fast else ''}"
    ).bindparams(
        *(sa.bindparam(c.name, type_=c.type) for c in columns),
        *(sa.bindparam(f"r_{c.name}", type_=postgresql.ARRAY(c.type)) for c in checked),
    )


#: The statement for each ``interaction_commit`` value, built once.
_POSTGRES_INSERT = {
    "durable": _postgres_insert(fast=False),
    "fast": _postgres_insert(fast=True),
}


def _insert_postgres(
    engine: sa.Engine, row: dict[str, Any], results: list[dict[str, Any]], commit: str
) -> int:
    params = {**row, **{f"r_{name}": [r[name] for r in results] for name in _RESULT_COLUMNS}}
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        return int(conn.execute(_POSTGRES_INSERT[commit], params).scalar_one())


def _store(
    ws: Workspace,
    *,
    project: str,
    user: str | None,
    message: str,
    hits: tuple[RouteHit, ...],
    applied: Skill | None,
    prompt_hash: str,
    learning_ids: tuple[int, ...],
    completion: Completion,
    started: float,
    idempotency_key: str | None = None,
) -> Reply:
    """Evaluate ``completion.text`` with the applied skill's rules and store it all: the
    one write path of every interaction, whoever made the answer."""
    rules = rules_of(applied) if applied is not None else ()
    with span("amelio.evals", {"amelio.evals.rules": len(rules)}) as checking:
        report = evals.evaluate(completion.text, rules, max_chars=ws.settings.max_text_chars)
        if checking is not None:
            checking.set_attributes(
                {
                    "amelio.evals.success": report.success,
                    "amelio.evals.failed": sum(not r.passed for r in report.results),
                }
            )
    footnotes = tuple(evals.render_footnotes(report))
    total_ms = (time.perf_counter() - started) * 1000

    def clean(text: str) -> str:
        # Eval details too: one may quote the answer (starts_with shows its start).
        return scrub_for_storage(ws.settings, text, "interactions")

    row = {
        "project_id": require_project(ws.engine, project),
        "user_ref": user_ref(ws.settings, user) if user else None,
        "message": clean(message),
        "hinted": [{"name": h.name, "score": round(h.score, 4)} for h in hits],
        "applied_skill": applied.name if applied else None,
        "skill_version": applied.version if applied else None,
        "prompt_hash": prompt_hash,
        "learning_ids": list(learning_ids),
        "answer": clean(completion.text),
        "success": report.success,
        "provider": completion.provider,
        "model": completion.model,
        "llm_ms": completion.latency_ms,
        "total_ms": total_ms,
        "input_tokens": completion.input_tokens,
        "output_tokens": completion.output_tokens,
        "cost_usd": completion.cost_usd,
        "created_at": utcnow(),
        "idempotency_key": idempotency_key,
    }
    results = [
        {
            "rule_id": r.rule_id,
            "rule_name": r.name,
            "rule_type": r.type,
            "severity": r.severity,
            "passed": r.passed,
            "detail": clean(r.detail),
        }
        for r in report.results
    ]
    if ws.engine.dialect.name == "postgresql":
        interaction_id = _insert_postgres(ws.engine, row, results, ws.settings.interaction_commit)
    else:
        with db.transaction(ws.engine) as conn:
            # Values as parameters, not .values(): the statement is then one cached
            # object instead of a new one to build and compile-key on every answer.
            result = conn.execute(_INSERT_INTERACTION, row)
            assert result.inserted_primary_key is not None
            interaction_id = int(result.inserted_primary_key[0])
            if results:
                conn.execute(
                    _INSERT_EVAL_RESULTS, [{"interaction_id": interaction_id, **r} for r in results]
                )
    return Reply(
        interaction_id=interaction_id,
        text=evals.append_footnotes(completion.text, report),
        answer=completion.text,
        footnotes=footnotes,
        skills=hits,
        applied_skill=applied.name if applied else None,
        evals=report,
        completion=completion,
        prompt_hash=prompt_hash,
        learning_ids=learning_ids,
        skill_version=applied.version if applied else None,
    )


def warm_up(ws: Workspace, *, projects_limit: int = 50) -> float:
    """Load what a service's first answer would otherwise wait for, and return the
    seconds it took: the LLM provider (its SDK import is most of it), and for each
    project (the first ``projects_limit``) its skills, router index, learnings
    and compiled eval rules. Reads only; a provider that is not configured is
    skipped (the first chat will say how to configure it)."""
    started = time.perf_counter()
    with contextlib.suppress(LLMError, InvalidInput):  # not configured: nothing to load
        get_provider(ws.settings, purpose="Chat")
    with ws.engine.connect() as conn:
        names = conn.scalars(
            sa.select(projects.c.name).order_by(projects.c.id).limit(projects_limit)
        ).all()
    for name in names:
        build_prompt(ws, "warm up", project=name)
        for skill in visible_skills(ws.engine, name):
            rules_of(skill)
    return time.perf_counter() - started


def record_reply(
    ws: Workspace,
    prompt: Prompt,
    completion: Completion,
    *,
    project: str = DEFAULT_PROJECT,
    user: str | None = None,
    started: float | None = None,
) -> Reply:
    """The end of :func:`respond` for a caller that made the LLM call itself with a
    prompt from :func:`amelio.assistant.prompt.build_prompt` (the OpenAI-compatible endpoint,
    which forwards the client's own request): evaluate and store, as respond() does.

    ``started`` is the caller's ``time.perf_counter()`` at the start, for ``totalMs``.
    """
    return _finish(
        ws,
        prompt=prompt,
        applied=prompt.applied,
        completion=completion,
        project=project,
        user=user,
        started=time.perf_counter() if started is None else started,
    )


def respond(
    ws: Workspace,
    message: str,
    *,
    project: str = DEFAULT_PROJECT,
    user: str | None = None,
    provider: Provider | None = None,
    scorer: str | None = None,
    conversation: str | None = None,
) -> Reply:
    """Answer ``message`` with the configured LLM and record the interaction.

    A canary rollout of the applied skill sticks to ``user``, else to
    ``conversation`` (an id the caller keeps for one thread of messages)."""
    started = time.perf_counter()
    provider = provider or get_provider(ws.settings, purpose="Chat")
    prompt, applied, request = _prepare(ws, message, project, scorer, unit_of(user, conversation))
    completion = provider.complete(request)
    return _finish(
        ws,
        prompt=prompt,
        applied=applied,
        completion=completion,
        project=project,
        user=user,
        started=started,
        request=request,
    )


def respond_stream(
    ws: Workspace,
    message: str,
    *,
    project: str = DEFAULT_PROJECT,
    user: str | None = None,
    provider: Provider | None = None,
    scorer: str | None = None,
    conversation: str | None = None,
) -> Iterator[TextDelta | Reply]:
    """Like :func:`respond`, yielding text deltas as the model writes, then the Reply.

    Routing, the prompt and the provider are set up before the first ``next()``
    returns, so configuration errors surface before anything is streamed.
    """
    started = time.perf_counter()
    provider = provider or get_provider(ws.settings, purpose="Chat")
    prompt, applied, request = _prepare(ws, message, project, scorer, unit_of(user, conversation))

    def events() -> Iterator[TextDelta | Reply]:
        completion: Completion | None = None
        for event in provider.stream(request):
            if isinstance(event, Completion):
                completion = event
            else:
                yield event
        if completion is None:
            raise LLMError("The provider's stream ended without a final answer.")
        yield _finish(
            ws,
            prompt=prompt,
            applied=applied,
            completion=completion,
            project=project,
            user=user,
            started=started,
            request=request,
        )

    return events()


def get_interaction(ws: Workspace, interaction_id: int) -> dict[str, Any]:
    """One stored interaction with its eval results (for display and feedback)."""
    with ws.engine.connect() as conn:
        row = conn.execute(
            sa.select(interactions, projects.c.name.label("project_name"))
            .join(projects, projects.c.id == interactions.c.project_id)
            .where(interactions.c.id == interaction_id)
        ).first()
        if row is None:
            raise NotFound(f"No interaction {interaction_id}.", interaction_id=interaction_id)
        rules = conn.execute(
            sa.select(eval_results)
            .where(eval_results.c.interaction_id == interaction_id)
            .order_by(eval_results.c.id)
        ).all()
    m = row._mapping
    return {
        "interactionId": m["id"],
        "project": m["project_name"],
        "message": m["message"],
        "answer": m["answer"],
        "hinted": m["hinted"],
        "appliedSkill": m["applied_skill"],
        "skillVersion": m["skill_version"],
        "promptHash": m["prompt_hash"],
        "learningsUsed": m["learning_ids"],
        "success": m["success"],
        "model": m["model"],
        "provider": m["provider"],
        "llmMs": m["llm_ms"],
        "totalMs": m["total_ms"],
        "inputTokens": m["input_tokens"],
        "outputTokens": m["output_tokens"],
        "costUsd": m["cost_usd"],
        "createdAt": m["created_at"].isoformat(),
        "evals": [
            {
                "ruleId": r.rule_id,
                "name": r.rule_name,
                "type": r.rule_type,
                "severity": r.severity,
                "passed": r.passed,
                "detail": r.detail,
            }
            for r in rules
        ],
    }


def answer_unrecorded(
    ws: Workspace, message: str, *, provider: Provider, project: str = DEFAULT_PROJECT
) -> tuple[Completion, Skill | None]:
    """The pipeline respond() runs (routing, the skill, its learnings, the prompt)
    with nothing stored, and the skill that applied: how a study measures answers to
    held-out messages, which must never become evidence the loop learns from (a
    benchmark would replay them, quality would count them)."""
    _, applied, request = _prepare(ws, message, project, None, None)
    return provider.complete(request), applied


def answer_with(
    ws: Workspace,
    message: str,
    *,
    skill: str,
    content: str,
    provider: Provider,
    project: str = DEFAULT_PROJECT,
    sample: int = 0,
) -> tuple[Completion, evals.EvalReport]:
    """The pipeline respond() runs, with ``skill`` applied at ``content`` and nothing
    stored: how a benchmark compares an old and a new version of a skill. ``sample``
    asks a cached provider for another draw of the same answer (the A/A noise floor)."""
    prompt = build_prompt(ws, message, project=project, skill=skill, content=content)
    request = LLMRequest.single(
        prompt.system, message, max_tokens=ws.settings.llm_max_tokens, sample=sample
    )
    completion = provider.complete(request)
    assert prompt.applied is not None
    report = evals.evaluate(
        completion.text, rules_of(prompt.applied), max_chars=ws.settings.max_text_chars
    )
    return completion, report


# -- answers made elsewhere -------------------------------------------------------------

#: The most skills one logged exchange may name.
MAX_LOGGED_SKILLS = 20


def _bounded(value: str | None, what: str, limit: int) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        raise InvalidInput(f"The {what} is empty: leave it out or give a value.", field=what)
    if len(value) > limit:
        raise InvalidInput(f"The {what} is at most {limit} characters.", field=what)
    return value


def _attribute(
    ws: Workspace, message: str, project: str, skills: list[str] | None
) -> tuple[tuple[RouteHit, ...], Skill | None]:
    """The skills an answer made elsewhere is counted under: the ones the caller names
    (the first is applied), else the router's, exactly as respond() would pick them."""
    settings = ws.settings
    with db.reading(ws.engine) as conn:
        if skills:
            found = [get_skill(conn, name, project) for name in dict.fromkeys(skills)]
            hits = tuple(RouteHit(s.name, s.spec.description, 1.0, (), s.project, s) for s in found)
        else:
            hits = route_message(ws, message, project=project, conn=conn).hits
        applied: Skill | None = None
        if settings.apply_skill == "top" and hits:
            applied = hits[0].skill or get_skill(conn, hits[0].name, project)
    return hits, applied


def _logged(ws: Workspace, project: str, key: str) -> int | None:
    with db.reading(ws.engine) as conn:
        found = conn.scalar(
            sa.select(interactions.c.id)
            .join(projects, projects.c.id == interactions.c.project_id)
            .where(projects.c.name == project, interactions.c.idempotency_key == key)
        )
    return None if found is None else int(found)


def _stored_reply(ws: Workspace, interaction_id: int, message: str, answer: str) -> Reply:
    """The Reply of an interaction logged before under the same idempotency key; a key
    reused for another exchange is a client bug, refused rather than silently lost."""
    stored = get_interaction(ws, interaction_id)
    clean = scrub_for_storage(ws.settings, message, "interactions")
    if stored["message"] != clean or stored["answer"] != scrub_for_storage(
        ws.settings, answer, "interactions"
    ):
        raise Conflict(
            "This idempotency key was already used for a different exchange in "
            "this project: use a new key for each exchange.",
            interaction_id=interaction_id,
        )
    report = evals.EvalReport(
        tuple(
            evals.EvalResult(
                r["ruleId"], r["name"], r["type"], r["severity"], r["passed"], r["detail"]
            )
            for r in stored["evals"]
        )
    )
    hits = tuple(RouteHit(h["name"], "", float(h["score"]), ()) for h in stored["hinted"])
    completion = Completion(
        answer,
        stored["model"],
        stored["provider"],
        stored["inputTokens"],
        stored["outputTokens"],
        stored["llmMs"],
        stored["costUsd"],
    )
    return Reply(
        interaction_id=interaction_id,
        text=evals.append_footnotes(answer, report),
        answer=answer,
        footnotes=tuple(evals.render_footnotes(report)),
        skills=hits,
        applied_skill=stored["appliedSkill"],
        evals=report,
        completion=completion,
        prompt_hash=stored["promptHash"],
        learning_ids=tuple(stored["learningsUsed"]),
        skill_version=stored["skillVersion"],
    )


def log_exchange(
    ws: Workspace,
    message: str,
    answer: str,
    *,
    project: str,
    skills: list[str] | None = None,
    model: str | None = None,
    provider: str | None = None,
    idempotency_key: str | None = None,
) -> Reply:
    """Record an exchange answered by another system (an agent with its own model).

    The answer is checked by the applied skill's rules and stored as one interaction,
    so it counts in quality metrics, underperformers and Sage like an answer Amelio
    made. ``skills`` names the skills the other system used (the first one's rules
    apply); without it the router attributes the message as respond() would.
    With ``idempotency_key`` a retry of the same exchange returns the first
    interaction instead of storing a second (a key is unique per project).
    The prompt hash is the message's alone: the other system's prompt is unknown.
    """
    started = time.perf_counter()
    limit = ws.settings.max_text_chars
    for what, text in (("message", message), ("answer", answer)):
        if not text.strip():
            raise InvalidInput(f"The {what} is empty.", field=what)
        if len(text) > limit:
            raise InputTooLarge(
                f"The {what} is over {limit:,} characters (max_text_chars).",
                field=what,
                limit=limit,
            )
    if skills is not None and len(skills) > MAX_LOGGED_SKILLS:
        raise InvalidInput(f"Name at most {MAX_LOGGED_SKILLS} skills.", field="skills")
    model = _bounded(model, "model", 200) or "unknown"
    provider = _bounded(provider, "provider", 50) or EXTERNAL_PROVIDER
    key = _bounded(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY_CHARS)
    with db.reading(ws.engine) as conn:
        project_id(conn, project)  # an unknown project is 404 before any routing
    if key is not None and (found := _logged(ws, project, key)) is not None:
        return _stored_reply(ws, found, message, answer)
    hits, applied = _attribute(ws, message, project, skills)
    completion = Completion(answer, model, provider)
    try:
        return _store(
            ws,
            project=project,
            user=None,
            message=message,
            hits=hits,
            applied=applied,
            prompt_hash=hashlib.sha256(message.encode("utf-8")).hexdigest(),
            learning_ids=(),
            completion=completion,
            started=started,
            idempotency_key=key,
        )
    except sa.exc.IntegrityError:
        # A concurrent retry with the same key won the insert: answer with its row.
        if key is None or (found := _logged(ws, project, key)) is None:
            raise
        return _stored_reply(ws, found, message, answer)
