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


def test_search_page_shows_scores_and_signals_without_logging(sqlite_workspace: Workspace,
                                                              tmp_path: Path) -> None:
    from amelio.feedback import Collector
    from amelio.search import Corpus, Searcher, aggregate
    from test_search import DOCS, click_events, write_jsonl

    ws = sqlite_workspace
    Corpus.for_workspace(ws.settings.data_dir).import_file(
        write_jsonl(tmp_path / "docs.jsonl", DOCS))
    response = Searcher(ws, background_aggregation=False).search(
        "password", profile="hybrid_with_feedback")
    Collector(ws).ingest(click_events(response, "expire", "s1") + click_events(
        response, "sso", "s2", dwell_ms=1_000), rate_limit=False)
    aggregate(ws)
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    _, bot = keys.create_key(ws.engine, name="bob", role="bot")
    with TestClient(create_app(ws)) as client:
        assert client.get("/search", follow_redirects=False).status_code == 303
        login(client, admin)
        before = _impressions(ws)
        page = client.get("/search", params={"q": "Password", "profile": "hybrid_with_feedback"})
        assert page.status_code == 200
        text = page.text
        assert "Password expiry" in text and "<code>password</code>" in text
        assert "Bounces" in text and "Most clicked queries" in text
        row = re.search(r"<code>expire</code>.*?</tr>", text, re.S)
        assert row and re.search(r'class="up">\+0\.\d+', row.group(0))
        assert _impressions(ws) == before  # looking taught nothing
        bad = client.get("/search", params={"q": "password", "alpha": "2",
                                            "profile": "hybrid"})
        assert bad.status_code == 200 and "alpha is the semantic weight" in bad.text
        junk = client.get("/search", params={"q": "password", "alpha": "lots"})
        assert "alpha is a number" in junk.text
        empty = client.get("/search", params={"q": "?!"})
        assert "The query is empty" in empty.text
        client.post("/logout", data={"csrf": re.search(
            r'name="csrf" value="([0-9a-f]+)"', client.get("/skills").text).group(1)})
        login(client, bot)
        as_bot = client.get("/search", params={"q": "password"}).text
        assert "Password expiry" in as_bot and "Bounces" not in as_bot


def _impressions(ws: Workspace) -> int:
    import sqlalchemy as sa

    from amelio.db.schema import search_impressions

    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(search_impressions)))


def test_a_notification_link_opens_the_proposal_after_signing_in(
        sqlite_workspace: Workspace, examples: Path) -> None:
    ws = sqlite_workspace
    skills.import_skills(ws.engine, examples)
    git = skills.get_skill(ws.engine, "git-help")
    proposal = props.create_proposal(ws, "git-help", proposed_content=git.spec.content + "\nx\n",
                                     rationale="r", proposed_by="template", author="t")
    new = props.create_skill_proposal(ws, NEW_SKILL, rationale="wiki", proposed_by="generator",
                                      author="generator")
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    with TestClient(create_app(ws)) as client:
        r = client.get(f"/proposals/{proposal.id}", follow_redirects=False)
        assert r.status_code == 303  # not signed in: to the login page, and back after
        assert r.headers["location"] == f"/login?next=/proposals/{proposal.id}"
        login(client, admin)
        r = client.get(f"/proposals/{proposal.id}", follow_redirects=False)
        assert r.headers["location"] == (f"/skills/git-help?project=default&tab=prs"
                                         f"#proposal-{proposal.id}")
        page = client.get(r.headers["location"]).text
        assert f'id="proposal-{proposal.id}"' in page
        r = client.get(f"/proposals/{new.id}", follow_redirects=False)
        assert r.headers["location"] == f"/skills?project=default#proposal-{new.id}"
        assert client.get("/proposals/99999", follow_redirects=False).status_code == 404
