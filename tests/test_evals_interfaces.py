"""`amelio eval`, `amelio evals import-promptfoo` and the eval routes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
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

RULES = {
    "version": 1,
    "skill": "demo",
    "rules": [
        {
            "id": "d-1",
            "name": "Mentions rollback",
            "type": "icontains",
            "value": "rollback",
            "severity": "warning",
        },
        {"id": "d-2", "name": "Short", "type": "max_length", "value": 40, "severity": "info"},
    ],
}


def cli(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=input)
    return result.exit_code, result.output


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(RULES))
    return path


def test_eval_exit_codes_follow_warning_rules(rules_file: Path) -> None:
    code, out = cli("eval", "--rules", str(rules_file), input="Plan: deploy, then Rollback.")
    assert code == 0 and "Success" in out
    code, out = cli("eval", "--rules", str(rules_file), input="Plan: deploy.")
    assert code == 1 and "⚠️ Mentions rollback" in out
    # Only an info rule fails: still a success.
    code, out = cli("eval", "--rules", str(rules_file), input="rollback " + "x" * 60)
    assert code == 0 and "ℹ️ Short" in out


def test_eval_machine_formats(rules_file: Path, tmp_path: Path) -> None:
    answer = tmp_path / "answer.txt"
    answer.write_text("no mention here, and rather long for the info rule too")
    code, out = cli("eval", "--rules", str(rules_file), "--format", "json", str(answer))
    report = json.loads(out)
    assert code == 1 and report["success"] is False
    assert [(r["ruleId"], r["passed"]) for r in report["results"]] == [
        ("d-1", False),
        ("d-2", False),
    ]
    code, out = cli("eval", "--rules", str(rules_file), "--format", "junit", str(answer))
    suite = ET.fromstring(out.split("?>", 1)[1])
    assert code == 1
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    assert suite.find("testcase/failure") is not None


def test_eval_usage_and_input_errors(rules_file: Path, tmp_path: Path) -> None:
    assert cli("eval", input="x")[0] == 2
    assert cli("eval", "--rules", str(rules_file), "--skill", "x", input="x")[0] == 2
    assert cli("eval", "--rules", str(tmp_path / "missing.json"), input="x")[0] == 2
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"version": 1, "rules": [{"id": "b1", "type": "max_length", '
        '"value": -3, "severity": "warning"}]}'
    )
    code, out = cli("eval", "--rules", str(bad), input="x")
    assert code == 2 and "b1" in out and "value" in out  # 2: the check could not run


def test_eval_refuses_input_over_the_limit(
    tmp_path: Path, examples: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init", str(tmp_path / "ws"))[0] == 0
    assert cli("-w", str(tmp_path / "ws"), "skills", "import", str(examples))[0] == 0
    monkeypatch.setenv("AMELIO_MAX_TEXT_CHARS", "100")
    code, out = cli("-w", str(tmp_path / "ws"), "eval", "--skill", "git-help", input="a" * 101)
    assert code == 2 and "100-character limit" in out
    code, out = cli("-w", str(tmp_path / "ws"), "eval", "--skill", "nope", input="text")
    assert code == 2 and "No skill named" in out
    code, out = cli(
        "-w", str(tmp_path / "ws"), "eval", "--skill", "git-help", input="Run git push --force now"
    )
    assert code == 1 and "--force" in out


PROMPTFOO = """
description: support bot
prompts: ["{{question}}"]
defaultTest:
  assert:
    - type: icontains
      value: thank you
    - type: llm-rubric
      value: is polite
tests:
  - vars: {question: "refund please"}
    assert:
      - type: not-contains
        value: "as I said"
      - type: javascript
        value: output.length < 500
"""


def test_promptfoo_import_adds_rules_as_a_new_version(tmp_path: Path, examples: Path) -> None:
    ws = tmp_path / "ws"
    cli("init", str(ws))
    cli("-w", str(ws), "skills", "import", str(examples))
    config = tmp_path / "promptfooconfig.yaml"
    config.write_text(PROMPTFOO)
    before = len(
        json.loads(cli("-w", str(ws), "skills", "show", "customer-support-reply", "--json")[1])[
            "evals"
        ]
    )
    code, out = cli(
        "-w",
        str(ws),
        "evals",
        "import-promptfoo",
        str(config),
        "--skill",
        "customer-support-reply",
        "--dry-run",
    )
    assert code == 0 and "would be added" in out
    code, out = cli(
        "-w", str(ws), "evals", "import-promptfoo", str(config), "--skill", "customer-support-reply"
    )
    assert code == 0, out
    assert out.count("not mapped:") == 2 and "llm-rubric" in out and "javascript" in out
    detail = json.loads(cli("-w", str(ws), "skills", "show", "customer-support-reply", "--json")[1])
    assert detail["version"] == 2 and len(detail["evals"]) == before + 2
    assert len({r["id"] for r in detail["evals"]}) == len(detail["evals"])
    code, out = cli(
        "-w", str(ws), "evals", "import-promptfoo", str(config), "--skill", "customer-support-reply"
    )
    assert "No new rules" in out
    assert (
        json.loads(cli("-w", str(ws), "skills", "show", "customer-support-reply", "--json")[1])[
            "version"
        ]
        == 2
    )


# -- API --------------------------------------------------------------------------------


@pytest.fixture
def api(workspace: Workspace, examples: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    skills.import_skills(workspace.engine, examples)
    headers = {
        role: {
            "Authorization": "Bearer " + keys.create_key(workspace.engine, name=role, role=role)[1]
        }
        for role in ("admin", "bot", "client")
    }
    with TestClient(create_app(workspace)) as client:
        yield client, headers


def test_get_and_put_rules(api: tuple[TestClient, dict[str, str]], workspace: Workspace) -> None:
    client, h = api
    got = client.get("/v1/skills/git-help/evals", headers=h["bot"]).json()
    assert got["version"] == 1 and got["skillVersion"] == 1
    assert got["rules"][0]["id"] == "gh-001"
    new_rules = [
        *got["rules"],
        {"id": "gh-9", "name": "Short", "type": "max_length", "value": 900, "severity": "info"},
    ]
    assert (
        client.put(
            "/v1/skills/git-help/evals", headers=h["bot"], json={"rules": new_rules}
        ).status_code
        == 403
    )
    r = client.put(
        "/v1/skills/git-help/evals",
        headers=h["admin"],
        json={"rules": new_rules, "reason": "cap length", "expectedVersion": 1},
    )
    assert r.status_code == 200 and r.json()["skillVersion"] == 2
    history = skills.list_versions(workspace.engine, "git-help")
    assert history[-1].reason == "cap length" and history[-1].author == "key:admin"
    stale = client.put(
        "/v1/skills/git-help/evals",
        headers=h["admin"],
        json={"rules": new_rules[:1], "expectedVersion": 1},
    )
    assert stale.status_code == 409


def test_put_invalid_rules_is_422_and_changes_nothing(
    api: tuple[TestClient, dict[str, str]], workspace: Workspace
) -> None:
    client, h = api
    bad = [
        {
            "id": "x-1",
            "name": "n",
            "type": "regex_match",
            "pattern": "(a)\\1",
            "severity": "warning",
        }
    ]
    r = client.put("/v1/skills/git-help/evals", headers=h["admin"], json={"rules": bad})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "eval_rule_error"
    assert err["details"]["ruleId"] == "x-1" and err["details"]["field"] == "pattern"
    assert skills.get_skill(workspace.engine, "git-help").version == 1
    r = client.put(
        "/v1/skills/git-help/evals", headers=h["admin"], json={"rules": [], "skill": "other"}
    )
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "skill"


def test_check_endpoint(api: tuple[TestClient, dict[str, str]]) -> None:
    client, h = api
    r = client.post(
        "/v1/evals/check", headers=h["bot"], json={"skill": "git-help", "text": "git push --force"}
    )
    body = r.json()
    assert r.status_code == 200 and body["success"] is False
    assert body["footnotes"][0].startswith("⚠️")
    r = client.post(
        "/v1/evals/check", headers=h["bot"], json={"rules": RULES["rules"], "text": "rollback plan"}
    )
    assert r.json()["success"] is True
    r = client.post(
        "/v1/evals/check",
        headers=h["bot"],
        json={"rules": [{"id": "z", "type": "nope"}], "text": "t"},
    )
    assert r.status_code == 422 and r.json()["error"]["details"]["ruleId"] == "z"
    assert client.post("/v1/evals/check", headers=h["bot"], json={"text": "t"}).status_code == 422
    assert (
        client.post(
            "/v1/evals/check", headers=h["client"], json={"skill": "git-help", "text": "t"}
        ).status_code
        == 403
    )
    hostile = client.post(
        "/v1/evals/check",
        headers=h["bot"],
        json={
            "rules": [
                {"id": "h", "type": "regex_match", "pattern": "(a+)+$", "severity": "warning"}
            ],
            "text": "a" * 50 + "b",
        },
    )
    assert hostile.status_code == 200 and hostile.json()["results"][0]["passed"] is False


def test_check_refuses_text_over_the_limit(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amelio.workspace.folder import open_workspace

    monkeypatch.setenv("AMELIO_MAX_TEXT_CHARS", "50")
    ws = open_workspace(workspace.root)
    _, token = keys.create_key(ws.engine, name="b", role="bot")
    with TestClient(create_app(ws)) as client:
        r = client.post(
            "/v1/evals/check",
            headers={"Authorization": f"Bearer {token}"},
            json={"rules": RULES["rules"], "text": "x" * 51},
        )
    ws.dispose()
    assert r.status_code == 413 and r.json()["error"]["code"] == "input_too_large"


def test_get_edit_put_round_trip_and_project_forks(
    api: tuple[TestClient, dict[str, str]], workspace: Workspace
) -> None:
    client, h = api
    for _ in range(2):  # what GET returns, PUT takes back, at any version
        doc = client.get("/v1/skills/git-help/evals", headers=h["bot"]).json()
        doc["rules"] = doc["rules"][:-1]
        r = client.put("/v1/skills/git-help/evals", headers=h["admin"], json=doc)
        assert r.status_code == 200, r.json()
    assert skills.get_skill(workspace.engine, "git-help").version == 3
    same = client.get("/v1/skills/git-help/evals", headers=h["bot"]).json()
    assert (
        client.put("/v1/skills/git-help/evals", headers=h["admin"], json=same).json()[
            "skillVersion"
        ]
        == 3
    )  # no change, no new version
    # ?project= changes that project's fork only, forking the global skill first.
    r = client.put(
        "/v1/skills/git-help/evals?project=acme",
        headers=h["admin"],
        json={"rules": [], "skillVersion": 3},
    )
    assert r.status_code == 200 and r.json()["project"] == "acme" and r.json()["rules"] == []
    assert skills.get_skill(workspace.engine, "git-help").spec.evals
    assert skills.get_skill(workspace.engine, "git-help", "acme").spec.evals == ()
