"""Proposals: a new content for one skill, waiting for a person's decision.

``pending → approved | rejected | superseded``. Approval writes the new skill
version in the same transaction that marks the proposal approved, with a
compare-and-set on the status, so two people approving at once cannot both win
(the second gets :class:`Conflict`). A proposal written against a version the
skill has since moved past is stale: approving it would silently undo that
change, so it is refused with :class:`Conflict` and `amelio improve` supersedes it.

For a file-backed skill (a global skill whose folder is in the workspace's
``skills/``), approval also rotates its files crash-safely: the replaced version
is kept as ``SKILL.v<N>.md``, the 3 newest such backups at most
(:mod:`amelio.improve.rotation`).

Before a machine-written proposal is filed, the text it adds is held to the
skill's own ``warning`` rules that forbid something (:func:`own_rule_breaks`): a
rule that bans a literal is broken as surely by an instruction that quotes it
("Never suggest --force") as by an answer that uses it, because the model copies
what its prompt says.

A proposal can also be for a skill that does not exist yet (scope ``new``; the
knowledge loop's skill generator makes them): it carries the whole skill,
validated as a SKILL.md would be, and approving it creates the skill at version
1 in the same transaction. Such a proposal is never stale, so
:func:`supersede_stale` leaves it alone.

Who may decide is one rule, :func:`authorize_decision`, that every door applies
(the API, the dashboard, Telegram): only an admin, and for a proposal that changes
what every project sees (a global skill, or a new global one) only an admin bound
to no project. A project's admin chat decides its project's forks and skills, not
the skills it shares with every other project.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from amelio import db, evals
from amelio.db.schema import interactions, projects, proposals, skills, utcnow
from amelio.errors import (
    AmelioError,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    SkillFileError,
)
from amelio.improve import rotation
from amelio.skills import files
from amelio.skills.model import SkillSpec
from amelio.skills.store import (
    find_skill_row,
    get_skill,
    record_event,
    spec_from_row,
    version_of_file,
    write_version,
)
from amelio.text import tokens
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT, project_id

__all__ = [
    "LEAK_WORDS",
    "PROPOSERS",
    "REVIEW",
    "SCOPES",
    "STATUSES",
    "Proposal",
    "ResemblesRejected",
    "approve_proposal",
    "authorize_decision",
    "check_new_skill",
    "create_proposal",
    "create_skill_proposal",
    "describe_breaks",
    "forbidding_rules",
    "get_proposal",
    "list_proposals",
    "may_decide",
    "own_rule_breaks",
    "pending_for",
    "recover_files",
    "reject_proposal",
    "review_flags",
    "similarity",
    "supersede_stale",
]

log = logging.getLogger(__name__)


class ResemblesRejected(Conflict):
    """A new proposal makes nearly the change a person already rejected for the skill:
    it is not filed, whoever wrote it, and the message names the rejection."""

    code = "resembles_rejected"


#: Where, in a proposal's evidence, Amelio keeps what it found for the reviewer:
#: ``changedLines``, ``large`` and ``leaks`` (:func:`_review`).
REVIEW = "review"
#: A proposal line that copies this many words in a row from a message it was
#: written from is flagged: a skill that memorises its evidence does not generalise.
LEAK_WORDS = 8

#: Where a proposal that sets the skill's rules keeps those it was written against.
RULES_BEFORE = "rulesBefore"
#: Where a proposal filed for a finding keeps the messages it pins once approved:
#: ``[{"interactionId": ..., "message": ...}]`` (:mod:`amelio.improve.findings`).
GOLDEN_CASES = "goldenCases"

STATUSES = ("pending", "approved", "rejected", "superseded")
PROPOSERS = ("template", "sage", "generator", "human")
#: Which row approval changes: the global skill, a project's fork, or none yet.
SCOPES = ("global", "project", "new")


@dataclass(frozen=True)
class Proposal:
    id: int
    skill: str
    project: str
    scope: str  # "global", "project" or "new": which row approval changes (or creates)
    base_version: int
    current_content: str
    proposed_content: str
    rationale: str
    evidence: dict[str, Any]
    status: str
    proposed_by: str
    author: str
    created_at: datetime
    decided_by: str | None = None
    decision_reason: str | None = None
    decided_at: datetime | None = None
    result_version: int | None = None
    #: For scope "new": the skill's front matter (description, triggers, keywords,
    #: extra), its eval rules (or None) and the scope it will be created in.
    new_skill: dict[str, Any] | None = None
    #: For a routing proposal: ``{"triggers": [...], "keywords": [...]}`` as approval
    #: sets them, with ``"before"`` holding the lists it was written against.
    routing: dict[str, Any] | None = None
    #: The skill's eval rules as approval sets them (a finding's mined rule added), or
    #: None when the proposal leaves them alone.
    evals: list[dict[str, Any]] | None = None

    @property
    def review(self) -> dict[str, Any]:
        """What Amelio found about the change when it was filed (empty for older ones)."""
        found = self.evidence.get(REVIEW)
        return found if isinstance(found, dict) else {}

    @property
    def large(self) -> bool:
        """Over ``proposal_max_changed_lines`` when filed: a PASSED verdict alone does
        not clear it (a person reads the diff)."""
        return bool(self.review.get("large"))

    @property
    def shared(self) -> bool:
        """Whether approving it changes, or creates, a skill that every project sees."""
        if self.scope == "new":
            return bool((self.new_skill or {}).get("scope", "global") == "global")
        return self.scope == "global"

    def diff(self) -> str:
        """A unified diff from the content it was written against to the proposal
        (for a routing proposal, of the triggers and keywords lines)."""
        before = (
            f"{self.skill} (new skill)"
            if self.scope == "new"
            else f"{self.skill} v{self.base_version}"
        )
        after = f"{self.skill} proposal #{self.id}"
        if self.routing is not None:
            old = self.routing.get("before", {})
            return "".join(
                difflib.unified_diff(
                    [f"{k}: {', '.join(old.get(k, []))}\n" for k in ("triggers", "keywords")],
                    [f"{k}: {', '.join(self.routing[k])}\n" for k in ("triggers", "keywords")],
                    fromfile=before,
                    tofile=after,
                )
            )
        text = "".join(
            difflib.unified_diff(
                self.current_content.splitlines(keepends=True),
                self.proposed_content.splitlines(keepends=True),
                fromfile=before,
                tofile=after,
            )
        )
        return text + self.rules_diff()

    def rules_diff(self) -> str:
        """The rules approval adds and removes, one ``+``/``-`` line each (empty when
        the proposal leaves the rules alone)."""
        if self.evals is None:
            return ""
        before = {str(r.get("id")): r for r in self.evidence.get(RULES_BEFORE, ())}
        after = {str(r.get("id")): r for r in self.evals}
        lines = [f"- rule {k}: {before[k].get('name', k)}\n" for k in before if k not in after]
        lines += [
            f"+ rule {k}: {r.get('name', k)} ({r.get('type')})\n"
            for k, r in after.items()
            if before.get(k) != r
        ]
        return "".join(["eval rules:\n", *lines]) if lines else ""

    def to_dict(self, *, with_content: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "skill": self.skill,
            "project": self.project,
            "scope": self.scope,
            "baseVersion": self.base_version,
            "status": self.status,
            "proposedBy": self.proposed_by,
            "author": self.author,
            "rationale": self.rationale,
            "evidence": self.evidence,
            "createdAt": self.created_at.isoformat(),
            "decidedBy": self.decided_by,
            "decisionReason": self.decision_reason,
            "decidedAt": self.decided_at.isoformat() if self.decided_at else None,
            "resultVersion": self.result_version,
            "newSkill": self.new_skill,
            "routing": self.routing,
            "evals": self.evals,
        }
        if with_content:
            data |= {
                "currentContent": self.current_content,
                "proposedContent": self.proposed_content,
                "diff": self.diff(),
            }
        return data


def _select() -> sa.Select[Any]:
    return (
        sa.select(
            proposals,
            projects.c.name.label("project_name"),
            skills.c.project_id.label("skill_project_id"),
        )
        .join(projects, projects.c.id == proposals.c.project_id)
        .join(skills, skills.c.id == proposals.c.skill_id, isouter=True)
    )


def _from_row(row: sa.Row[Any]) -> Proposal:
    m = row._mapping
    created = m["created_at"]
    assert created is not None
    new_skill = m["new_skill"]
    scope = (
        "new"
        if new_skill is not None
        else ("global" if m["skill_project_id"] is None else "project")
    )
    return Proposal(
        id=m["id"],
        skill=m["skill_name"],
        project=m["project_name"],
        scope=scope,
        base_version=m["base_version"],
        current_content=m["current_content"],
        proposed_content=m["proposed_content"],
        rationale=m["rationale"],
        evidence=dict(m["evidence"]),
        status=m["status"],
        proposed_by=m["proposed_by"],
        author=m["author"],
        created_at=created,
        decided_by=m["decided_by"],
        decision_reason=m["decision_reason"],
        decided_at=m["decided_at"],
        result_version=m["result_version"],
        new_skill=None if new_skill is None else dict(new_skill),
        routing=None if m["routing"] is None else dict(m["routing"]),
        evals=None if m["evals"] is None else [dict(r) for r in m["evals"]],
    )


def get_proposal(ws: Workspace, proposal_id: int) -> Proposal:
    with ws.engine.connect() as conn:
        row = conn.execute(_select().where(proposals.c.id == proposal_id)).first()
    if row is None:
        raise NotFound(f"No proposal {proposal_id}.", proposal_id=proposal_id)
    return _from_row(row)


def authorize_decision(proposal: Proposal, *, role: str, projects: Collection[str]) -> None:
    """Refuse with :class:`Forbidden` unless an actor with ``role``, bound to
    ``projects`` (none: every project), may approve or reject ``proposal``.

    The faces differ in who their actors are (an API key, a dashboard session, a
    Telegram chat linked to one project) but not in what an actor may decide, so
    each asks this one function rather than keeping its own copy of the rule. The
    CLI runs as the workspace's owner, with every right, and asks nothing."""
    if role != "admin":
        raise Forbidden(
            f"Only an admin can approve or reject proposals, not a {role!r}.",
            proposal_id=proposal.id,
            role=role,
        )
    if not projects:
        return
    if proposal.shared:
        what = "creates the global skill" if proposal.scope == "new" else "changes the global skill"
        raise Forbidden(
            f"Proposal #{proposal.id} {what} {proposal.skill!r}, which every project "
            "sees: only a global admin decides it (the API, the dashboard or the CLI).",
            proposal_id=proposal.id,
            project=proposal.project,
        )
    if proposal.project not in projects:
        raise Forbidden(
            f"Proposal #{proposal.id} is in project {proposal.project!r}; this is bound to "
            f"{', '.join(sorted(projects))}.",
            proposal_id=proposal.id,
            project=proposal.project,
        )


def may_decide(proposal: Proposal, *, role: str, projects: Collection[str]) -> bool:
    """:func:`authorize_decision` as a yes or no, for a face that shows the decision's
    buttons only to whom they would work for."""
    try:
        authorize_decision(proposal, role=role, projects=projects)
    except Forbidden:
        return False
    return True


def list_proposals(
    ws: Workspace,
    *,
    status: str | None = None,
    skill: str | None = None,
    project: str | None = None,
    scope: str | None = None,
) -> list[Proposal]:
    """Proposals, newest first, optionally filtered."""
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"Unknown status {status!r}: use {', '.join(STATUSES)}.", field="status")
    if scope is not None and scope not in SCOPES:
        raise InvalidInput(f"Unknown scope {scope!r}: use {', '.join(SCOPES)}.", field="scope")
    query = _select().order_by(proposals.c.id.desc())
    if status:
        query = query.where(proposals.c.status == status)
    if skill:
        query = query.where(proposals.c.skill_name == skill)
    if project:
        query = query.where(projects.c.name == project)
    if scope == "new":
        query = query.where(proposals.c.new_skill.is_not(None))
    elif scope is not None:
        query = query.where(
            proposals.c.new_skill.is_(None),
            skills.c.project_id.is_(None)
            if scope == "global"
            else skills.c.project_id.is_not(None),
        )
    with ws.engine.connect() as conn:
        return [_from_row(r) for r in conn.execute(query)]


def pending_for(conn: sa.Connection, skill_id: int) -> int | None:
    """The pending proposal on a skill row, if any."""
    return conn.scalar(
        sa.select(proposals.c.id).where(
            proposals.c.skill_id == skill_id, proposals.c.status == "pending"
        )
    )


def create_proposal(
    ws: Workspace,
    skill: str,
    *,
    proposed_content: str | None = None,
    rationale: str,
    proposed_by: str = "human",
    author: str,
    project: str = DEFAULT_PROJECT,
    evidence: dict[str, Any] | None = None,
    run_id: int | None = None,
    routing: dict[str, Sequence[str]] | None = None,
    rules: Sequence[dict[str, Any]] | None = None,
) -> Proposal:
    """Propose new content for the skill ``project`` sees (one pending proposal per skill).

    ``routing`` (``{"triggers": [...], "keywords": [...]}``) proposes new routing
    metadata instead; the content then stays as it is unless also given. ``rules``
    proposes the skill's whole list of eval rules (validated here, as an evals file
    would be), for instance with a rule mined from a finding added."""
    if proposed_by not in PROPOSERS:
        raise InvalidInput(
            f"Unknown proposer {proposed_by!r}: use {', '.join(PROPOSERS)}.", field="proposedBy"
        )
    if proposed_content is None and routing is None and rules is None:
        raise InvalidInput("A proposal needs content, routing or rules.", field="proposedContent")
    checked = (
        None
        if rules is None
        else [r.to_dict() for r in evals.parse_rules(list(rules), source="the proposed rules")]
    )
    if proposed_content is not None and (
        not proposed_content.strip() or "\x00" in proposed_content
    ):
        raise InvalidInput("A proposal needs non-empty text content.", field="proposedContent")
    with db.transaction(ws.engine) as conn:
        current = get_skill(conn, skill, project)
        before = {"triggers": list(current.spec.triggers), "keywords": list(current.spec.keywords)}
        content = (
            current.spec.content
            if proposed_content is None
            else proposed_content.strip("\n") + "\n"
        )
        lists = (
            before
            if routing is None
            else {k: [str(t) for t in routing.get(k, ())] for k in ("triggers", "keywords")}
        )
        rules_before = [
            r.to_dict() for r in evals.parse_rules(list(current.spec.evals or ()), source=skill)
        ]
        if (
            content == current.spec.content
            and lists == before
            and (checked is None or checked == rules_before)
        ):
            raise InvalidInput(
                f"The proposal is identical to {skill} v{current.version}.",
                field="proposedContent" if routing is None else "routing",
            )
        stored_routing = None if routing is None else {**lists, "before": before}
        review: dict[str, Any] = {}
        if content != current.spec.content:
            breaks = own_rule_breaks(current.spec, content)
            if breaks:
                raise InvalidInput(
                    describe_breaks(breaks),
                    field="proposedContent",
                    rules=[b.rule_id for b in breaks],
                )
            change = _change(current.spec.content, content)
            _refuse_rejected(ws, conn, current.id, skill, change)
            review = _review(ws, conn, change, evidence or {})
        pending = pending_for(conn, current.id)
        if pending is not None:
            raise Conflict(
                f"Proposal #{pending} for {skill} is still pending: approve or reject it first.",
                proposal_id=pending,
            )
        result = conn.execute(
            proposals.insert().values(
                skill_id=current.id,
                skill_name=skill,
                project_id=project_id(conn, project),
                base_version=current.version,
                current_content=current.spec.content,
                proposed_content=content,
                rationale=rationale,
                evidence=json.loads(
                    json.dumps(
                        {
                            **(evidence or {}),
                            **({REVIEW: review} if review else {}),
                            **({RULES_BEFORE: rules_before} if checked is not None else {}),
                        },
                        default=str,
                    )
                ),
                status="pending",
                proposed_by=proposed_by,
                author=author[:200],
                run_id=run_id,
                created_at=utcnow(),
                routing=stored_routing,
                evals=checked,
            )
        )
        assert result.inserted_primary_key is not None
        new_id = int(result.inserted_primary_key[0])
        record_event(
            conn, current.id, "proposal", actor=author, reason=rationale[:500], proposal_id=new_id
        )
    return get_proposal(ws, new_id)


def _change(current: str, proposed: str) -> list[str]:
    """The lines a proposal adds (``+``) and removes (``-``), in diff order."""
    return [
        line
        for line in difflib.unified_diff(
            current.splitlines(), proposed.splitlines(), lineterm="", n=0
        )
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def similarity(first: Sequence[str], second: Sequence[str]) -> float:
    """How alike two changes (:func:`_change`) are, 0 to 1: the mean of how alike
    their added lines are and how alike their removed lines are (difflib's ratio,
    white space runs made single), over the parts either change has. Two rewrites
    of a whole skill remove the same lines; what they add is what tells them apart."""

    def ratio(sign: str) -> float | None:
        a, b = (
            "\n".join(" ".join(line[1:].split()) for line in change if line[:1] == sign)
            for change in (first, second)
        )
        if not a and not b:
            return None
        return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() if a and b else 0.0

    parts = [r for r in (ratio("+"), ratio("-")) if r is not None]
    return sum(parts) / len(parts) if parts else 0.0


def _refuse_rejected(
    ws: Workspace, conn: sa.Connection, skill_id: int, skill: str, change: list[str]
) -> None:
    """:class:`ResemblesRejected` if ``change`` is close to one a person rejected for
    this skill row (the newest 50 rejections are compared; one its own author
    rejected was withdrawn, and does not count)."""
    threshold = ws.settings.proposal_rejected_similarity
    if threshold > 1:
        return
    rows = conn.execute(
        sa.select(
            proposals.c.id,
            proposals.c.current_content,
            proposals.c.proposed_content,
            proposals.c.decided_by,
            proposals.c.decision_reason,
        )
        .where(
            proposals.c.skill_id == skill_id,
            proposals.c.status == "rejected",
            proposals.c.routing.is_(None),
            # Rejected by its own author is withdrawn (a sync's replaced hand edit), not
            # a reviewer's no to the idea.
            sa.or_(proposals.c.decided_by.is_(None), proposals.c.decided_by != proposals.c.author),
        )
        .order_by(proposals.c.id.desc())
        .limit(50)
    )
    for row in rows:
        score = similarity(change, _change(row.current_content, row.proposed_content))
        if score >= threshold:
            why = f": {row.decision_reason}" if row.decision_reason else ""
            raise ResemblesRejected(
                f"Not filed: this change to {skill} is {score:.0%} like proposal #{row.id}, "
                f"which {row.decided_by or 'a person'} rejected{why}. Write a different "
                f"change, or lower the bar with proposal_rejected_similarity.",
                proposal_id=row.id,
                similarity=round(score, 3),
            )


def _review(
    ws: Workspace, conn: sa.Connection, change: list[str], evidence: dict[str, Any]
) -> dict[str, Any]:
    """What a reviewer should know about a change before reading it: its size against
    ``proposal_max_changed_lines`` and the added lines that copy
    :data:`LEAK_WORDS` words in a row from a message it was written from."""
    limit = ws.settings.proposal_max_changed_lines
    review: dict[str, Any] = {
        "changedLines": len(change),
        "maxChangedLines": limit,
        "large": len(change) > limit,
        "leaks": [],
    }
    sources = evidence.get("writtenFrom")
    if not isinstance(sources, list) or not sources:
        return review
    grams: dict[tuple[str, ...], int] = {}
    for iid, message in conn.execute(
        sa.select(interactions.c.id, interactions.c.message).where(
            interactions.c.id.in_([int(i) for i in sources])
        )
    ):
        for gram in _grams(message):
            grams.setdefault(gram, iid)
    for line in change:
        if not line.startswith("+"):
            continue
        hit = next((grams[g] for g in _grams(line[1:]) if g in grams), None)
        if hit is not None:
            review["leaks"].append({"line": line[1:].strip()[:300], "interactionId": hit})
    return review


def review_flags(proposal: Proposal) -> list[str]:
    """What a reviewer must see before deciding, one line each: a large change, and
    the lines that copy a message the proposal was written from."""
    review = proposal.review
    flags = []
    if review.get("large"):
        flags.append(
            f"Large change: {review['changedLines']} lines added or removed (over "
            f"proposal_max_changed_lines {review['maxChangedLines']}): a PASSED verdict "
            "alone does not clear it; read the diff."
        )
    for leak in review.get("leaks") or ():
        flags.append(
            f"Copies {LEAK_WORDS}+ words from interaction {leak['interactionId']}'s message, "
            f"which it was written from: “{leak['line']}”"
        )
    return flags


def _grams(text: str) -> list[tuple[str, ...]]:
    words = tokens(text)
    return [tuple(words[i : i + LEAK_WORDS]) for i in range(len(words) - LEAK_WORDS + 1)]


#: Rule types about an answer's size or form. A skill's added text is not an answer,
#: so its length or shape says nothing about theirs.
_FORM_TYPES = frozenset(
    {"max_length", "min_length", "word_count", "not_empty", "starts_with", "equals"}
    | {"is_json", "json_schema"}
)


def forbidding_rules(spec: SkillSpec) -> tuple[evals.EvalRule, ...]:
    """The skill's ``warning`` rules that forbid something a text says: the ones an
    empty text passes (a rule that asks for something is not broken by a text that
    leaves it to the rest of the skill), less those about size and form."""
    return tuple(
        rule
        for rule in evals.parse_rules(list(spec.evals or ()))
        if rule.severity == "warning"
        and rule.type not in _FORM_TYPES
        and evals.evaluate("", (rule,)).success
    )


def own_rule_breaks(spec: SkillSpec, proposed_content: str) -> tuple[evals.EvalResult, ...]:
    """The skill's forbidding rules (:func:`forbidding_rules`) that the lines a
    proposal adds to ``spec``'s content break. Only added lines are held to them: a
    skill may quote what it forbids in its own rulebook, and a proposal that keeps
    that line is not the one writing it."""
    kept = set(spec.content.splitlines())
    added = "\n".join(line for line in proposed_content.splitlines() if line not in kept)
    if not added.strip():
        return ()
    return tuple(r for r in evals.evaluate(added, forbidding_rules(spec)).failed if not r.error)


def describe_breaks(breaks: Sequence[evals.EvalResult]) -> str:
    """What a report says of a proposal that was not filed."""
    rules = "; ".join(f"{r.rule_id} “{r.name}” ({r.detail})" for r in breaks)
    return f"not filed: the text it adds breaks the skill's own rule(s) {rules}"


def check_new_skill(skill_md: str, source: str) -> SkillSpec:
    """A proposed new skill, held to what makes a skill routable and usable: a
    valid SKILL.md with a description, triggers, keywords and a rulebook body."""
    spec = files.parse_skill_md(skill_md, source=source)
    if not spec.description:
        raise SkillFileError("a new skill needs a description", file=source, field="description")
    if not spec.triggers:
        raise SkillFileError(
            "a new skill needs at least one trigger, or the router never picks it",
            file=source,
            field="triggers",
        )
    if not spec.keywords:
        raise SkillFileError(
            "a new skill needs at least one keyword", file=source, field="keywords"
        )
    if len(spec.content.strip()) < 20:
        raise SkillFileError(
            "a new skill needs a rulebook body (Markdown after the front matter)",
            file=source,
            field="body",
        )
    return spec


def create_skill_proposal(
    ws: Workspace,
    skill_md: str,
    *,
    rationale: str,
    proposed_by: str = "human",
    author: str,
    project: str = DEFAULT_PROJECT,
    scope: str = "global",
    rules: list[dict[str, Any]] | None = None,
    evidence: dict[str, Any] | None = None,
    source: str = "proposal",
) -> Proposal:
    """Propose a skill that does not exist yet, from its whole SKILL.md text.

    The text is validated as a skill file (front matter, triggers, keywords,
    body) and ``rules`` as eval rules before anything is stored; a name that a
    skill (global, or ``project``'s) or another pending proposal already uses is
    refused. ``scope`` says where approval creates it: ``global`` or ``project``
    (a skill only ``project`` sees).
    """
    if proposed_by not in PROPOSERS:
        raise InvalidInput(
            f"Unknown proposer {proposed_by!r}: use {', '.join(PROPOSERS)}.", field="proposedBy"
        )
    if scope not in ("global", "project"):
        raise InvalidInput(
            f"A new skill is created global or in a project, not {scope!r}.", field="scope"
        )
    spec = check_new_skill(skill_md, source)
    checked = (
        None if rules is None else [r.to_dict() for r in evals.parse_rules(rules, source=source)]
    )
    new_skill = {
        "description": spec.description,
        "triggers": list(spec.triggers),
        "keywords": list(spec.keywords),
        "extra": dict(spec.extra),
        "evals": checked,
        "scope": scope,
    }
    with db.transaction(ws.engine) as conn:
        pid = project_id(conn, project)
        if (
            find_skill_row(conn, spec.name, None) is not None
            or find_skill_row(conn, spec.name, pid) is not None
        ):
            raise Conflict(
                f"A skill named {spec.name!r} already exists: propose a change to it "
                "instead, or choose another name.",
                skill=spec.name,
            )
        pending = conn.scalar(
            sa.select(proposals.c.id).where(
                proposals.c.skill_name == spec.name,
                proposals.c.status == "pending",
                proposals.c.new_skill.is_not(None),
            )
        )
        if pending is not None:
            raise Conflict(
                f"Proposal #{pending} for a new skill {spec.name!r} is still "
                "pending: approve or reject it first.",
                proposal_id=pending,
            )
        result = conn.execute(
            proposals.insert().values(
                skill_id=None,
                skill_name=spec.name,
                project_id=pid,
                base_version=0,
                current_content="",
                proposed_content=spec.content,
                rationale=rationale,
                evidence=json.loads(json.dumps(evidence or {}, default=str)),
                status="pending",
                proposed_by=proposed_by,
                author=author[:200],
                created_at=utcnow(),
                new_skill=new_skill,
            )
        )
        assert result.inserted_primary_key is not None
        new_id = int(result.inserted_primary_key[0])
    return get_proposal(ws, new_id)


def _skill_folder(ws: Workspace, skill_row: sa.Row[Any]) -> Path | None:
    """The folder of a file-backed skill: global, with a SKILL.md in the workspace."""
    if skill_row.project_id is not None:
        return None
    folder = ws.skills_dir / skill_row.name
    return folder if (folder / files.SKILL_FILE).is_file() else None


def recover_files(ws: Workspace, skill: str) -> str | None:
    """Finish or undo a rotation a crash interrupted, by what the database holds."""
    folder = ws.skills_dir / skill
    if not folder.is_dir():
        return None

    def committed(version: int) -> bool:
        with ws.engine.connect() as conn:
            row = find_skill_row(conn, skill, None)
        return row is not None and row.version >= version

    done = rotation.recover(folder, committed)
    with ws.engine.connect() as conn:
        current = find_skill_row(conn, skill, None)
    if current is not None:  # backups an older Amelio named by position
        rotation.rename_backups(folder, version_of_file(ws.engine, skill), int(current.version))
    return done


def approve_proposal(
    ws: Workspace,
    proposal_id: int,
    *,
    actor: str,
    reason: str | None = None,
    canary: int | None = None,
) -> Proposal:
    """Make the proposal the skill's new version, atomically; rotate its files.

    With ``canary`` (1–99), the new version goes live for that share of
    conversations only, and a rollout (:mod:`amelio.improve.rollouts`) started in the
    same transaction decides whether it goes on to everyone."""
    if canary is not None:
        from amelio.improve.rollouts import check_percent

        check_percent(canary)
    staged: list[rotation.Rotation] = []
    try:
        _approve(ws, proposal_id, actor, reason, staged, canary)
    except sa.exc.IntegrityError as exc:  # a new skill's name was taken meanwhile
        for pending in staged:
            pending.abort()
        raise Conflict(
            f"Proposal #{proposal_id} lost a race: a skill of the same name was "
            "created meanwhile. Reject it.",
            proposal_id=proposal_id,
        ) from exc
    except BaseException:
        for pending in staged:  # the commit failed: the files stay as they were
            pending.abort()
        raise
    for pending in staged:
        pending.apply()
    done = get_proposal(ws, proposal_id)
    _findings_follow(ws, done)
    return done


def _findings_follow(ws: Workspace, proposal: Proposal) -> None:
    """A finding that this proposal fixes closes (approved) or opens again (rejected)
    now rather than at the next ``amelio findings update``. Best effort: a decision
    is never undone because its findings could not be updated."""
    from amelio.improve.finding_status import sync_with_proposals

    try:
        sync_with_proposals(ws, project=proposal.project)
    except AmelioError as exc:
        log.warning("findings not updated after proposal #%s: %s", proposal.id, exc.message)


def _approve(
    ws: Workspace,
    proposal_id: int,
    actor: str,
    reason: str | None,
    staged: list[rotation.Rotation],
    canary: int | None = None,
) -> None:
    from amelio.improve.rollouts import active_for, start_rollout

    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(proposals).where(proposals.c.id == proposal_id).with_for_update()
        ).first()
        if row is None:
            raise NotFound(f"No proposal {proposal_id}.", proposal_id=proposal_id)
        if row.status != "pending":
            raise Conflict(
                f"Proposal #{proposal_id} is already {row.status}.",
                proposal_id=proposal_id,
                status=row.status,
            )
        if row.new_skill is not None:
            if canary is not None:
                raise InvalidInput(
                    f"Proposal #{proposal_id} creates a skill: a canary compares a new version "
                    "with the one it replaces, and there is none.",
                    field="canary",
                )
            _approve_new(conn, row, actor, reason)
            return
        skill_row = conn.execute(
            sa.select(skills).where(skills.c.id == row.skill_id).with_for_update()
        ).one()
        rolling = active_for(conn, skill_row.id, lock=True)
        if rolling is not None:
            raise Conflict(
                f"{row.skill_name} already has a canary rollout (#{rolling.id}, "
                f"{rolling.status}): promote it to the end or abort it before approving "
                f"proposal #{proposal_id}.",
                proposal_id=proposal_id,
                rollout_id=rolling.id,
            )
        if skill_row.version != row.base_version:
            raise Conflict(
                f"Proposal #{proposal_id} is stale: it was written for {row.skill_name} "
                f"v{row.base_version}, which is now v{skill_row.version}. Reject it, or run "
                "`amelio improve` to supersede it with a fresh proposal.",
                proposal_id=proposal_id,
                base_version=row.base_version,
                current_version=skill_row.version,
            )
        spec = replace(
            spec_from_row(skill_row._mapping, skill_row.name), content=row.proposed_content
        )
        if row.routing is not None:
            spec = replace(
                spec,
                triggers=tuple(row.routing["triggers"]),
                keywords=tuple(row.routing["keywords"]),
            )
        if row.evals is not None:
            spec = replace(spec, evals=tuple(dict(r) for r in row.evals))
        why = f"approved proposal #{proposal_id}" + (f": {reason}" if reason else "")
        version = write_version(
            conn,
            spec,
            skill_row.project_id,
            author=actor,
            reason=why,
            expected_version=row.base_version,
            kind="approval",
            proposal_id=proposal_id,
        )
        updated = conn.execute(
            proposals.update()
            .where(proposals.c.id == proposal_id, proposals.c.status == "pending")
            .values(
                status="approved",
                decided_by=actor[:200],
                decision_reason=reason,
                decided_at=utcnow(),
                result_version=version,
            )
        )
        if updated.rowcount != 1:
            raise Conflict(
                f"Proposal #{proposal_id} was decided meanwhile.", proposal_id=proposal_id
            )
        if canary is not None:
            start_rollout(
                conn,
                project_id=row.project_id,
                skill_id=skill_row.id,
                skill_name=row.skill_name,
                proposal_id=proposal_id,
                from_version=row.base_version,
                to_version=version,
                percent=canary,
                actor=actor,
            )
        golden = (row.evidence or {}).get(GOLDEN_CASES) or ()
        if golden:
            from amelio.assistant.cases import pin_golden_cases

            pin_golden_cases(
                conn,
                [int(c["interactionId"]) for c in golden],
                project_id=row.project_id,
                skill=row.skill_name,
                note=f"golden case of proposal #{proposal_id}",
                author=actor,
            )
        folder = _skill_folder(ws, skill_row)
        if folder is not None:
            recover_files(ws, skill_row.name)
            evals = (
                None
                if spec.evals is None
                else json.dumps(
                    {"version": 1, "skill": spec.name, "rules": [dict(r) for r in spec.evals]},
                    indent=2,
                    ensure_ascii=False,
                )
                + "\n"
            )
            # Staged inside the transaction: if the commit fails, abort() undoes it; if
            # the process dies, recover() decides by the version the database holds.
            staged.append(
                rotation.stage_rotation(
                    folder,
                    skill_md=files.render_skill_md(spec),
                    evals_json=evals,
                    evals_name=f"{spec.name}.evals.json",
                    target_version=version,
                    current_version=row.base_version,
                )
            )


def _approve_new(conn: sa.Connection, row: sa.Row[Any], actor: str, reason: str | None) -> None:
    """Create the proposed skill at version 1 and link the proposal to it."""
    meta = dict(row.new_skill)
    pid = None if meta.get("scope", "global") == "global" else int(row.project_id)
    if find_skill_row(conn, row.skill_name, None, lock=True) is not None or (
        pid is not None and find_skill_row(conn, row.skill_name, pid, lock=True) is not None
    ):
        raise Conflict(
            f"Proposal #{row.id} would create {row.skill_name!r}, but a skill of "
            "that name was created since. Reject it.",
            proposal_id=row.id,
        )
    spec = SkillSpec(
        name=row.skill_name,
        description=meta.get("description", ""),
        triggers=tuple(meta.get("triggers", ())),
        keywords=tuple(meta.get("keywords", ())),
        content=row.proposed_content,
        evals=None if meta.get("evals") is None else tuple(meta["evals"]),
        extra=dict(meta.get("extra") or {}),
    )
    why = f"approved proposal #{row.id} (new skill)" + (f": {reason}" if reason else "")
    version = write_version(
        conn, spec, pid, author=actor, reason=why, kind="approval", proposal_id=row.id
    )
    created = find_skill_row(conn, row.skill_name, pid)
    assert created is not None
    updated = conn.execute(
        proposals.update()
        .where(proposals.c.id == row.id, proposals.c.status == "pending")
        .values(
            status="approved",
            decided_by=actor[:200],
            decision_reason=reason,
            decided_at=utcnow(),
            result_version=version,
            skill_id=created.id,
        )
    )
    if updated.rowcount != 1:
        raise Conflict(f"Proposal #{row.id} was decided meanwhile.", proposal_id=row.id)


def reject_proposal(
    ws: Workspace, proposal_id: int, *, actor: str, reason: str | None = None
) -> Proposal:
    with db.transaction(ws.engine) as conn:
        row = conn.execute(
            sa.select(proposals).where(proposals.c.id == proposal_id).with_for_update()
        ).first()
        if row is None:
            raise NotFound(f"No proposal {proposal_id}.", proposal_id=proposal_id)
        updated = conn.execute(
            proposals.update()
            .where(proposals.c.id == proposal_id, proposals.c.status == "pending")
            .values(
                status="rejected",
                decided_by=actor[:200],
                decision_reason=reason,
                decided_at=utcnow(),
            )
        )
        if updated.rowcount != 1:
            raise Conflict(
                f"Proposal #{proposal_id} is already {row.status}.",
                proposal_id=proposal_id,
                status=row.status,
            )
        if row.skill_id is not None:  # a new skill's proposal has no skill to log it on
            record_event(
                conn,
                row.skill_id,
                "rejection",
                actor=actor,
                reason=f"rejected proposal #{proposal_id}" + (f": {reason}" if reason else ""),
                proposal_id=proposal_id,
            )
    done = get_proposal(ws, proposal_id)
    _findings_follow(ws, done)
    return done


def supersede_stale(ws: Workspace) -> list[int]:
    """Mark pending proposals whose skill moved on as superseded; returns their ids."""
    with db.transaction(ws.engine) as conn:
        stale = conn.execute(
            sa.select(proposals.c.id, proposals.c.skill_id)
            .join(skills, skills.c.id == proposals.c.skill_id)
            .where(
                proposals.c.status == "pending",
                proposals.c.new_skill.is_(None),
                skills.c.version != proposals.c.base_version,
            )
        ).all()
        for pid, skill_id in stale:
            conn.execute(
                proposals.update()
                .where(proposals.c.id == pid)
                .values(
                    status="superseded",
                    decided_by="amelio",
                    decided_at=utcnow(),
                    decision_reason="the skill changed since the proposal was made",
                )
            )
            record_event(
                conn,
                skill_id,
                "superseded",
                actor="amelio",
                reason=f"proposal #{pid} superseded: the skill changed",
                proposal_id=pid,
            )
    return [int(pid) for pid, _ in stale]
