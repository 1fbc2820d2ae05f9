"""The skill generator and proposals for new skills: validated, never applied without
approval, created at version 1 when approved."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from amelio import knowledge, skills
from amelio.errors import Conflict, EvalRuleError, InvalidInput, LLMError, SkillNotFound
from amelio.improve import proposals as props
from amelio.improve.bench import run_benchmark
from amelio.llm.fake import ScriptedProvider
from amelio.routing.router import route_message
from amelio.server import create_app
from amelio.testing import FakeLLMServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace

REFUNDS = (
    "Refunds are granted within 30 days of purchase with a receipt. After 30 days the "
    "customer gets store credit. Damaged items are always refunded, receipt or not."
)
SKILL = """---
name: refund-requests
description: Answers customer refund requests by the store's refund policy.
triggers: [refund, money back]
keywords: [receipt, store credit]
---
# Refund requests

1. Grant a refund within 30 days of purchase when there is a receipt [1].
2. After 30 days, offer store credit instead [1].
3. Always refund damaged items [1].
"""


def at(day: int) -> datetime:
    return datetime(2026, 5, day, tzinfo=UTC)


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    knowledge.create_notebook(workspace, "policies")
    knowledge.enqueue(
        workspace,
        "policies",
        [knowledge.Source("wiki/refunds", REFUNDS, at(1), "wiki", "Refund policy")],
    )
    knowledge.drain(workspace)
    return workspace


def test_a_generated_skill_is_a_proposal_until_approved(ws: Workspace) -> None:
    llm = ScriptedProvider([f"Here is the skill:\n```markdown\n{SKILL}```"], model="m1")
    made = knowledge.generate_skill(ws, "policies", "how we handle refund requests", provider=llm)
    [request] = llm.requests
    assert request.system.startswith("You are an AI architect")
    assert "OBJECTIVE: how we handle refund requests" in request.messages[0].content
    assert "[1] Refund policy (source wiki/refunds, chunk 0)" in request.messages[0].content
    p = made.proposal
    assert (p.skill, p.scope, p.status, p.proposed_by, p.base_version) == (
        "refund-requests",
        "new",
        "pending",
        "generator",
        0,
    )
    assert p.new_skill == {
        "description": "Answers customer refund requests by the store's refund policy.",
        "triggers": ["refund", "money back"],
        "keywords": ["receipt", "store credit"],
        "extra": {},
        "evals": None,
        "scope": "global",
    }
    assert p.evidence["sources"] == ["wiki/refunds"] and p.evidence["model"] == "m1"
    assert p.proposed_content.startswith("# Refund requests")
    assert "+3. Always refund damaged items [1]." in p.diff()
    with pytest.raises(SkillNotFound):  # nothing is applied before a person approves
        skills.get_skill(ws.engine, "refund-requests")
    assert [x.id for x in props.list_proposals(ws, scope="new")] == [p.id]
    assert props.list_proposals(ws, scope="global") == []
    assert props.supersede_stale(ws) == []
    with pytest.raises(InvalidInput, match="no old version"):
        run_benchmark(ws, p.id, provider=ScriptedProvider())

    approved = props.approve_proposal(ws, p.id, actor="ceo", reason="matches the policy")
    assert (approved.status, approved.result_version, approved.scope) == ("approved", 1, "new")
    skill = skills.get_skill(ws.engine, "refund-requests")
    assert skill.version == 1 and skill.spec.triggers == ("refund", "money back")
    assert skill.spec.content == p.proposed_content
    [event] = skills.skill_log(ws.engine, "refund-requests")
    assert (event.kind, event.version, event.proposal_id, event.actor) == (
        "approval",
        1,
        p.id,
        "ceo",
    )
    assert route_message(ws, "I want my money back").names[0] == "refund-requests"
    with pytest.raises(Conflict, match="already approved"):
        props.approve_proposal(ws, p.id, actor="ceo")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("I could not find enough information.", "front matter"),
        (SKILL.replace("triggers: [refund, money back]\n", ""), "trigger"),
        (SKILL.replace("keywords: [receipt, store credit]\n", "keywords: []\n"), "keyword"),
        (SKILL.replace("name: refund-requests", "name: Refund Requests"), "not a valid skill name"),
        (SKILL.replace("name: refund-requests", "name: git-help"), "already exists"),
        (SKILL.split("# Refund requests")[0], "rulebook body"),
        (
            SKILL.replace(
                "description: Answers customer refund requests by the store's refund policy.\n", ""
            ),
            "description",
        ),
        ("---\nname: [unclosed\n---\n# Body", "invalid YAML"),
    ],
)
def test_invalid_generated_skills_are_rejected_and_not_stored(
    sqlite_workspace: Workspace, examples: Path, answer: str, why: str
) -> None:
    ws = sqlite_workspace
    skills.import_skills(ws.engine, examples)
    knowledge.create_notebook(ws, "policies")
    knowledge.enqueue(ws, "policies", [knowledge.Source("wiki/refunds", REFUNDS, at(1))])
    knowledge.drain(ws)
    with pytest.raises(LLMError, match=why) as info:
        knowledge.generate_skill(
            ws, "policies", "refund requests", provider=ScriptedProvider([answer])
        )
    assert "nothing was stored" in info.value.message
    assert props.list_proposals(ws) == []


def test_new_skill_proposals_conflicts_and_rejection(ws: Workspace) -> None:
    p = props.create_skill_proposal(
        ws,
        SKILL,
        rationale="r",
        author="ana",
        rules=[
            {
                "id": "r1",
                "name": "mentions credit",
                "type": "icontains",
                "value": "credit",
                "severity": "warning",
            }
        ],
    )
    with pytest.raises(Conflict, match=f"Proposal #{p.id}"):
        props.create_skill_proposal(ws, SKILL, rationale="again", author="ana")
    with pytest.raises(EvalRuleError, match="rule 'x'"):
        props.create_skill_proposal(
            ws,
            SKILL.replace("refund-requests", "other"),
            rationale="r",
            author="ana",
            rules=[{"id": "x"}],
        )
    rejected = props.reject_proposal(ws, p.id, actor="ceo", reason="not now")
    assert rejected.status == "rejected" and rejected.decision_reason == "not now"

    again = props.create_skill_proposal(ws, SKILL, rationale="r2", author="ana")
    skills.save_skills(
        ws.engine,
        [
            skills.SkillSpec(
                "refund-requests", "made by hand", ("refund",), ("receipt",), "# Hand\n"
            )
        ],
    )
    with pytest.raises(Conflict, match="created since"):
        props.approve_proposal(ws, again.id, actor="ceo")
    assert props.get_proposal(ws, again.id).status == "pending"
    with pytest.raises(Conflict, match="already exists"):
        props.create_skill_proposal(ws, SKILL, rationale="r3", author="ana")

    scoped = props.create_skill_proposal(
        ws,
        SKILL.replace("refund-requests", "acme-refunds"),
        rationale="r",
        author="ana",
        scope="project",
    )
    props.approve_proposal(ws, scoped.id, actor="ceo")
    assert skills.get_skill(ws.engine, "acme-refunds", "default").scope == "project"
    assert "acme-refunds" not in {s.name for s in skills.list_skills(ws.engine)}
    assert {x.scope for x in props.list_proposals(ws)} == {"new"}


@pytest.fixture
def llm_ws(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Workspace, FakeLLMServer]]:
    with FakeLLMServer(default=SKILL) as fake:
        monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
        monkeypatch.setenv("AMELIO_LLM_BASE_URL", fake.openai_base_url)
        monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
        opened = open_workspace(ws.root)
        yield opened, fake
        opened.dispose()


def test_generate_route(llm_ws: tuple[Workspace, FakeLLMServer], ws: Workspace) -> None:
    opened, fake = llm_ws
    admin = {"Authorization": "Bearer " + keys.create_key(ws.engine, name="a", role="admin")[1]}
    bot = {"Authorization": "Bearer " + keys.create_key(ws.engine, name="b", role="bot")[1]}
    with TestClient(create_app(opened)) as client:
        body = {"notebook": "policies", "objective": "refund requests"}
        assert client.post("/v1/skills/generate", headers=bot, json=body).status_code == 403
        r = client.post("/v1/skills/generate", headers=admin, json=body)
        assert r.status_code == 201, r.json()
        made = r.json()
        assert made["proposal"]["scope"] == "new" and made["sources"] == ["wiki/refunds"]
        assert made["proposal"]["proposedBy"] == "generator"
        assert made["proposal"]["newSkill"]["triggers"] == ["refund", "money back"]
        assert "Refund policy" in fake.requests[-1].prompt
        listed = client.get("/v1/proposals?scope=new", headers=bot).json()["proposals"]
        assert [p["skill"] for p in listed] == ["refund-requests"]
        r = client.post("/v1/skills/generate", headers=admin, json=body)  # the same name again
        assert r.status_code == 502 and "still pending" in r.json()["error"]["message"]
        r = client.post(
            "/v1/skills/generate",
            headers=admin,
            json={"notebook": "policies", "objective": "quarterly revenue"},
        )
        assert r.status_code == 422 and "nothing about" in r.json()["error"]["message"]
    with TestClient(create_app(ws)) as client:  # no LLM configured
        r = client.post("/v1/skills/generate", headers=admin, json=body)
        assert r.status_code == 503 and r.json()["error"]["code"] == "llm_not_configured"


def test_the_migration_keeps_proposals_and_their_benchmarks(database_url: str) -> None:
    """0007 rebuilds ``proposals`` on SQLite; the benchmark runs that reference it
    (ON DELETE CASCADE) must survive the rebuild."""
    import sqlalchemy as sa

    from amelio import db

    engine = db.create_engine(database_url)
    try:
        db.upgrade(engine, "0006_feedback_events")
        with db.transaction(engine) as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO skills (name, description, triggers, keywords, extra, content, "
                    "version, content_hash, created_at, updated_at) VALUES ('s', '', '[]', '[]', "
                    "'{}', 'x', 1, 'h', :t, :t)"
                ),
                {"t": at(1)},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO proposals (skill_id, skill_name, project_id, base_version, "
                    "current_content, proposed_content, rationale, evidence, status, proposed_by, "
                    "author, created_at) SELECT id, 's', 1, 1, 'x', 'y', 'r', '{}', 'pending', "
                    "'human', 'a', :t FROM skills"
                ),
                {"t": at(1)},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO benchmark_runs (proposal_id, status, summary, created_at) "
                    "SELECT id, 'done', '{}', :t FROM proposals"
                ),
                {"t": at(1)},
            )
        db.upgrade(engine)
        with engine.connect() as conn:
            assert conn.scalar(sa.text("SELECT count(*) FROM benchmark_runs")) == 1
            assert (
                conn.scalar(
                    sa.text(
                        "SELECT count(*) FROM proposals WHERE new_skill IS "
                        "NULL AND skill_id IS NOT NULL"
                    )
                )
                == 1
            )
            if conn.dialect.name == "sqlite":
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()
