"""`amelio route|prompt|learnings` and the /v1/route, /v1/prompt, /v1/learnings routes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.cli import main
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture
def ws(tmp_path: Path, examples: Path) -> Path:
    cli("init", str(tmp_path / "ws"))
    cli("-w", str(tmp_path / "ws"), "skills", "import", str(examples))
    return tmp_path / "ws"


def test_route_command(ws: Path) -> None:
    code, out = cli("-w", str(ws), "route", "please review this pull request")
    assert code == 0
    assert out.splitlines()[2].split()[:2] == ["1", "code-review"]
    data = json.loads(
        cli("-w", str(ws), "route", "git push rejected", "--scorer", "keywords", "--json")[1]
    )
    assert data["skills"][0] == {
        "name": "git-help",
        "description": data["skills"][0]["description"],
        "score": 4.0,
        "matched": ["git", "push rejected"],
        "scope": "global",
    }
    assert data["hint"].startswith("SKILLS_HINT")
    assert "No skill matches" in cli("-w", str(ws), "route", "tell me a joke")[1]
    code, out = cli("-w", str(ws), "route", "x", "--scorer", "nope")
    assert code == 1 and "Unknown router scorer" in out


def test_learnings_and_prompt_commands(ws: Path) -> None:
    code, out = cli(
        "-w",
        str(ws),
        "learnings",
        "add",
        "Avoid sudo in deployment scripts",
        "--source",
        "negative",
        "--skill",
        "deployment",
    )
    assert code == 0 and "added" in out
    assert "merged" in cli("-w", str(ws), "learnings", "add", "avoid SUDO in deployment scripts")[1]
    listed = json.loads(cli("-w", str(ws), "learnings", "list", "--json")[1])
    assert [(i["rule"], i["skill"], i["occurrences"]) for i in listed] == [
        ("Avoid sudo in deployment scripts", None, 2)
    ]
    prompt = cli("-w", str(ws), "prompt", "deploy the api to production")[1]
    assert "SKILLS_HINT" in prompt and "- Avoid sudo in deployment scripts" in prompt
    assert cli("-w", str(ws), "learnings", "delete", str(listed[0]["id"]))[0] == 0
    assert "Avoid sudo" not in cli("-w", str(ws), "prompt", "deploy the api")[1]
    assert cli("-w", str(ws), "learnings", "add", "x", "--source", "gossip")[0] == 2

    path = ws / "projects" / "default" / "learnings.md"
    path.write_text(path.read_text() + "- [2026-01-01T00:00:00Z] [manual] Hand rule\nbroken\n")
    result = CliRunner().invoke(main, ["-w", str(ws), "learnings", "sync"])
    assert "1 added" in result.stdout
    assert "line 10: expected" in result.stderr


@pytest.fixture
def api(workspace: Workspace, examples: Path) -> Iterator[tuple[TestClient, dict[str, dict]]]:
    skills.import_skills(workspace.engine, examples)
    headers = {
        role: {
            "Authorization": "Bearer " + keys.create_key(workspace.engine, name=role, role=role)[1]
        }
        for role in ("admin", "bot", "client")
    }
    with TestClient(create_app(workspace)) as client:
        yield client, headers


def test_route_and_prompt_routes(api: tuple[TestClient, dict[str, dict]]) -> None:
    client, h = api
    r = client.post("/v1/route", headers=h["bot"], json={"message": "git push rejected"})
    assert r.status_code == 200 and r.json()["skills"][0]["name"] == "git-help"
    assert r.json()["scorer"] == "learned"
    r = client.post("/v1/route", headers=h["bot"], json={"message": "x", "scorer": "nope"})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "scorer"
    assert client.post("/v1/route", headers=h["client"], json={"message": "x"}).status_code == 403
    assert client.post("/v1/route", headers=h["bot"], json={"message": ""}).status_code == 422
    r = client.post("/v1/prompt", headers=h["bot"], json={"message": "deploy to production"})
    body = r.json()
    assert body["text"].endswith("USER MESSAGE:\ndeploy to production")
    assert body["skills"][0]["name"] == "deployment" and len(body["promptHash"]) == 64


def test_learnings_routes(api: tuple[TestClient, dict[str, dict]]) -> None:
    client, h = api
    r = client.post(
        "/v1/learnings",
        headers=h["bot"],
        json={"rule": "Cite the runbook", "source": "fixit", "skill": "deployment"},
    )
    assert r.status_code == 201 and r.json()["outcome"] == "added"
    lid = r.json()["id"]
    r = client.post("/v1/learnings", headers=h["bot"], json={"rule": "x", "source": "gossip"})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "source"
    listed = client.get("/v1/learnings?skill=deployment", headers=h["bot"]).json()
    assert [i["id"] for i in listed["learnings"]] == [lid]
    assert client.get("/v1/learnings?skill=git-help", headers=h["bot"]).json()["learnings"] == []
    assert client.delete(f"/v1/learnings/{lid}", headers=h["bot"]).status_code == 403
    r = client.delete(f"/v1/learnings/{lid}", headers=h["admin"])
    assert r.status_code == 200 and r.json()["status"] == "retired"
    assert client.get("/v1/learnings", headers=h["bot"]).json()["learnings"] == []
    everything = client.get("/v1/learnings?includeRetired=true", headers=h["bot"]).json()
    assert len(everything["learnings"]) == 1
    assert client.delete("/v1/learnings/9999", headers=h["admin"]).status_code == 404
