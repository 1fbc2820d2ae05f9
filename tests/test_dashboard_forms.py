"""Dashboard forms in process (no browser): sessions, CSRF, new-skill proposals."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from amelio import keys, skills
from amelio.improve import proposals as props
from amelio.server import create_app
from amelio.workspace import Workspace

NEW_SKILL = """---
name: refund-policy
description: Answers refund questions from the written policy.
triggers: [refund]
keywords: [policy, money back]
---

# Refund policy

1. Quote the policy section that applies.
"""


def login(client: TestClient, token: str) -> str:
    r = client.post("/login", data={"api_key": token, "next": "/skills"},
                    follow_redirects=False)
    assert r.status_code == 303
    page = client.get("/skills").text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match
    return match.group(1)


def test_new_skill_proposals_are_reviewed_on_the_skills_page(sqlite_workspace: Workspace,
                                                             examples: Path) -> None:
    ws = sqlite_workspace
    skills.import_skills(ws.engine, examples)
    proposal = props.create_skill_proposal(ws, NEW_SKILL, rationale="from the wiki",
                                           proposed_by="generator", author="generator")
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    with TestClient(create_app(ws)) as client:
        assert client.get("/skills", follow_redirects=False).status_code == 303
        csrf = login(client, admin)
        page = client.get("/skills").text
        assert "refund-policy" in page and "from the wiki" in page
        r = client.post(f"/proposals/{proposal.id}/approve", data={"csrf": "wrong"})
        assert r.status_code == 403
        r = client.post(f"/proposals/{proposal.id}/approve", data={"csrf": csrf},
                        follow_redirects=False)
        assert r.status_code == 303 and "/skills/refund-policy" in r.headers["location"]
    assert skills.get_skill(ws.engine, "refund-policy").version == 1


def test_revoking_a_key_ends_its_session(sqlite_workspace: Workspace) -> None:
    ws = sqlite_workspace
    key, token = keys.create_key(ws.engine, name="bob", role="bot")
    with TestClient(create_app(ws)) as client:
        login(client, token)
        assert client.get("/quality").status_code == 200
        keys.revoke_key(ws.engine, key.id)
        r = client.get("/quality", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        r = client.post("/login", data={"api_key": "amk_wrong"})
        assert r.status_code == 401 and "not valid" in r.text
