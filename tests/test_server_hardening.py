"""Regression tests for what an attacker's probe found: every hostile
input gets a clear 4xx, never a 500, and keys bound to projects stay inside them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.cli import main
from amelio.db.schema import feedback_events, projects
from amelio.evals.engine import evaluate, parse_rules
from amelio.evals.rules import WORK_BUDGET
from amelio.feedback import Collector
from amelio.feedback.examples import example_event
from amelio.improve.proposals import create_proposal
from amelio.server import create_app
from amelio.server.params import MAX_ID
from amelio.web.session import COOKIE
from amelio.workspace import keys
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import create_project


@pytest.fixture
def app_client(workspace: Workspace, examples: Path) -> Iterator[TestClient]:
    skills.import_skills(workspace.engine, examples)
    with TestClient(create_app(workspace)) as c:
        yield c


def bearer(workspace: Workspace, role: str, *projects: str) -> dict[str, str]:
    _, token = keys.create_key(
        workspace.engine, name=f"{role}-{'-'.join(projects)}", role=role, projects=projects
    )
    return {"Authorization": f"Bearer {token}"}


def error(response: object) -> dict[str, object]:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


# -- 1. the dashboard is for bot and admin keys ------------------------------------------


def test_a_client_key_cannot_log_into_the_dashboard(
    app_client: TestClient, workspace: Workspace
) -> None:
    _, client_token = keys.create_key(workspace.engine, name="web", role="client")
    r = app_client.post(
        "/login", data={"api_key": client_token, "next": "/interactions"}, follow_redirects=False
    )
    assert r.status_code == 403
    assert "client key only sends feedback events" in r.text
    assert COOKIE not in r.cookies
    for page in ("/interactions", "/learnings", "/quality", "/search", "/skills"):
        r = app_client.get(page, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    _, bot_token = keys.create_key(workspace.engine, name="bot", role="bot")
    r = app_client.post("/login", data={"api_key": bot_token}, follow_redirects=False)
    assert r.status_code == 303 and COOKIE in r.cookies


# -- 2. json_schema rules cannot burn the CPU -------------------------------------------


SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["a", "b"],
        "properties": {
            "a": {"type": "integer", "minimum": 0},
            "b": {"type": "string", "pattern": "^x+$"},
        },
    },
}


def test_structural_rules_share_a_work_budget() -> None:
    rules = parse_rules(
        [{"id": f"s{i}", "type": "json_schema", "schema": SCHEMA} for i in range(5)]
        + [{"id": "c", "type": "string_contains", "value": "xxxx"}]
    )
    small = json.dumps([{"a": i, "b": "xxxx"} for i in range(50)])
    assert evaluate(small, rules).success
    big = json.dumps([{"a": i, "b": "xxxx"} for i in range(4000)])  # ~100 KB
    report = evaluate(big, rules)
    first, *_, last_schema, contains = report.results
    assert first.passed and not first.error  # within the budget: checked for real
    assert last_schema.error and not last_schema.passed
    assert f"work budget ({WORK_BUDGET:,} units)" in last_schema.detail
    assert contains.passed and not contains.error  # cheap rules still run


def test_structural_rules_refuse_huge_answers_and_schemas() -> None:
    [rule] = parse_rules([{"id": "s", "type": "json_schema", "schema": SCHEMA}])
    huge = json.dumps([{"a": 1, "b": "x"}] * 20_000)
    [result] = evaluate(huge, [rule]).results
    assert result.error and "structural rules parse at most" in result.detail
    from amelio.errors import EvalRuleError

    with pytest.raises(EvalRuleError, match="a rule's schema is at most"):
        parse_rules([{"id": "s", "type": "json_schema", "schema": {"enum": ["x" * 100] * 1000}}])


def test_check_route_bounds_rules_and_work(app_client: TestClient, workspace: Workspace) -> None:
    h = bearer(workspace, "bot")
    rules = [{"id": f"s{i}", "type": "json_schema", "schema": SCHEMA} for i in range(5)]
    text = json.dumps([{"a": i, "b": "xxxx"} for i in range(6000)])
    r = app_client.post("/v1/evals/check", headers=h, json={"text": text, "rules": rules})
    assert r.status_code == 200
    assert any("work budget" in res["detail"] for res in r.json()["results"])
    r = app_client.post(
        "/v1/evals/check",
        headers=h,
        json={"text": "x", "rules": [{"id": f"r{i}", "type": "not_empty"} for i in range(51)]},
    )
    assert r.status_code == 422 and "rules" in error(r)["message"]


# -- 3, 4. feedback batches: one bad event never fails the others ------------------------


def test_a_non_ascii_token_rejects_only_its_event(
    app_client: TestClient, workspace: Workspace
) -> None:
    h = bearer(workspace, "client")
    signer = Collector(workspace).signer
    good = example_event("result_clicked", signer=signer)
    bad = example_event("result_clicked", signer=signer)
    bad["request"]["feedbackToken"] = "v1.ébène.ñ"  # type: ignore[index]
    r = app_client.post("/v1/feedback/events", headers=h, json=[good, bad])
    assert r.status_code == 202, r.text
    statuses = [e["status"] for e in r.json()["events"]]
    assert statuses == ["accepted", "rejected"]
    with workspace.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(feedback_events)) == 1


def test_deeply_nested_json_is_a_clear_4xx(app_client: TestClient, workspace: Workspace) -> None:
    h = bearer(workspace, "client")
    deep = "[" * 5000 + "]" * 5000
    r = app_client.post("/v1/feedback/events", headers=h, content=deep)
    assert r.status_code == 422
    assert "nested too deeply" in error(r)["message"]
    good = json.dumps(example_event("vote_up"))
    r = app_client.post(
        "/v1/feedback/events",
        headers=h | {"Content-Type": "application/x-ndjson"},
        content=f'{good}\n{{"a": {deep}}}\n'.encode(),
    )
    assert r.status_code == 202, r.text
    events = r.json()["events"]
    assert [e["status"] for e in events] == ["accepted", "rejected"]
    assert "nested too deeply" in events[1]["reason"]
    # every JSON route, not only feedback
    bot = bearer(workspace, "bot") | {"Content-Type": "application/json"}
    for body in (deep.encode(), b"\xff]'Z\xfe"):  # too deep; not UTF-8 at all
        r = app_client.post("/v1/route", content=body, headers=bot)
        assert r.status_code == 422 and error(r)["code"] in ("invalid_json", "invalid_input")


# -- 5. cookies and CSRF fields ----------------------------------------------------------


def test_non_ascii_cookie_and_csrf_are_refused_not_crashed(
    app_client: TestClient, workspace: Workspace
) -> None:
    raw_cookie = f"{COOKIE}=é.ñ".encode()  # as a hostile client sends it: raw UTF-8
    r = app_client.get("/skills", headers={"Cookie": raw_cookie}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    _, admin = keys.create_key(workspace.engine, name="admin", role="admin")
    assert (
        app_client.post("/login", data={"api_key": admin}, follow_redirects=False).status_code
        == 303
    )
    r = app_client.post(
        "/learnings", data={"rule": "Be brief", "csrf": "jeton-é"}, follow_redirects=False
    )
    assert r.status_code == 403 and "CSRF" in error(r)["message"]


# -- 6, 7. ids and names ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/proposals/{id}"),
        ("POST", "/v1/proposals/{id}/approve"),
        ("POST", "/v1/proposals/{id}/reject"),
        ("GET", "/v1/proposals/{id}/benchmarks"),
        ("POST", "/v1/proposals/{id}/benchmarks"),
        ("DELETE", "/v1/learnings/{id}"),
        ("GET", "/v1/interactions/{id}"),
    ],
)
def test_ids_past_64_bits_are_422(
    app_client: TestClient, workspace: Workspace, method: str, path: str
) -> None:
    h = bearer(workspace, "admin")
    for value in (MAX_ID + 1, 2**63, 2**64 + 5, 10**30):
        r = app_client.request(method, path.format(id=value), headers=h)
        assert r.status_code == 422, (path, value, r.text)
    r = app_client.request(method, path.format(id=MAX_ID), headers=h)
    assert r.status_code == 404, r.text  # the largest id is a valid one that is not there


def test_nul_and_bad_project_names_are_422(app_client: TestClient, workspace: Workspace) -> None:
    h = bearer(workspace, "admin")
    r = app_client.post("/v1/learnings", headers=h, json={"rule": "x", "project": "a\x00b"})
    assert r.status_code == 422
    assert not (workspace.root / "projects" / "a").exists()
    r = app_client.get("/v1/learnings", headers=h, params={"project": "a\x00b"})
    assert r.status_code == 422
    r = app_client.get("/v1/proposals", headers=h, params={"project": "../../etc"})
    assert r.status_code == 422 and error(r)["code"] == "invalid_input"
    r = app_client.post("/v1/chat", headers=h, json={"message": "hi\x00", "project": "default"})
    assert r.status_code == 422 and "NUL" in error(r)["message"]
    r = app_client.get("/v1/skills/git-help%00")
    assert r.status_code == 422
    # an escaped backslash before u0000 is text, not a NUL
    r = app_client.post(
        "/v1/evals/check",
        headers=h | {"Content-Type": "application/json"},
        content=json.dumps(
            {"text": "write \\u0000 for NUL", "rules": [{"id": "r", "type": "not_empty"}]}
        ),
    )
    assert r.status_code == 200, r.text


# -- 8. the OpenAPI document says what can go wrong -------------------------------------


def test_openapi_documents_errors_and_name_patterns(app_client: TestClient) -> None:
    spec = app_client.get("/openapi.json").json()
    chat = spec["paths"]["/v1/chat"]["post"]["responses"]
    assert {"401", "403", "404", "413", "422", "503"} <= set(chat)
    assert chat["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    listing = spec["paths"]["/v1/proposals"]["get"]
    [project] = [p for p in listing["parameters"] if p["name"] == "project"]
    assert project["schema"]["anyOf"][0]["pattern"] == "^[a-z0-9][a-z0-9_-]{0,99}$"
    assert "429" in spec["paths"]["/v1/feedback/events"]["post"]["responses"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if operation.get("parameters") or operation.get("requestBody"):
                assert "422" in operation["responses"], (method, path)


# -- keys bound to projects ---------------------------------------------------------------


def test_a_scoped_key_stays_in_its_projects(app_client: TestClient, workspace: Workspace) -> None:
    for name in ("acme", "globex"):
        create_project(workspace.engine, name)
    acme = bearer(workspace, "bot", "acme")
    assert app_client.get("/v1/skills", headers=acme, params={"project": "acme"}).status_code == 200
    for method, path, kwargs in [
        ("GET", "/v1/skills", {"params": {"project": "globex"}}),
        ("GET", "/v1/skills", {}),  # the default project is not acme's
        ("GET", "/v1/learnings", {"params": {"project": "globex"}}),
        ("POST", "/v1/learnings", {"json": {"rule": "Be brief", "project": "globex"}}),
        ("POST", "/v1/route", {"json": {"message": "git push", "project": "globex"}}),
        ("POST", "/v1/chat", {"json": {"message": "git push", "project": "globex"}}),
        ("GET", "/v1/skills/git-help/evals", {"params": {"project": "globex"}}),
        (
            "POST",
            "/v1/knowledge/query",
            {"json": {"notebook": "n", "question": "q", "project": "globex"}},
        ),
        ("POST", "/v1/learnings", {"json": {"rule": "Be brief", "project": "newco"}}),
    ]:
        r = app_client.request(method, path, headers=acme, **kwargs)
        assert r.status_code == 403, (method, path, r.text)
        assert error(r)["code"] == "forbidden"
    r = app_client.post("/v1/learnings", headers=acme, json={"rule": "Be brief", "project": "acme"})
    assert r.status_code == 201
    # a global bot key reads every project but cannot create one by naming it
    anybot = bearer(workspace, "bot")
    r = app_client.post("/v1/learnings", headers=anybot, json={"rule": "x", "project": "newco"})
    assert r.status_code == 404 and error(r)["code"] == "project_not_found"
    with workspace.engine.connect() as conn:
        assert (
            conn.scalar(
                sa.select(sa.func.count()).select_from(projects).where(projects.c.name == "newco")
            )
            == 0
        )
    assert (
        app_client.post(
            "/v1/learnings",
            headers=bearer(workspace, "admin"),
            json={"rule": "x", "project": "newco"},
        ).status_code
        == 201
    )


def test_a_scoped_key_sees_only_its_projects_things(
    app_client: TestClient, workspace: Workspace
) -> None:
    create_project(workspace.engine, "acme")
    theirs = create_proposal(
        workspace,
        "git-help",
        project="default",
        proposed_content="# Git help\n\nNew rules.",
        rationale="r",
        proposed_by="human",
        author="t",
    )
    acme = bearer(workspace, "bot", "acme")
    assert app_client.get(f"/v1/proposals/{theirs.id}", headers=acme).status_code == 403
    assert app_client.get(f"/v1/proposals/{theirs.id}/benchmarks", headers=acme).status_code == 403
    listed = app_client.get("/v1/proposals", headers=acme).json()["proposals"]
    assert listed == []
    everyone = app_client.get("/v1/proposals", headers=bearer(workspace, "bot")).json()
    assert [p["id"] for p in everyone["proposals"]] == [theirs.id]


def test_admin_keys_are_global_and_the_cli_binds_keys(workspace: Workspace) -> None:
    from amelio.errors import InvalidInput

    with pytest.raises(InvalidInput, match="admin key is always global"):
        keys.create_key(workspace.engine, name="a", role="admin", projects=["acme"])
    runner = CliRunner()
    args = ["--workspace", str(workspace.root)]
    r = runner.invoke(
        main,
        [
            *args,
            "keys",
            "create",
            "--role",
            "bot",
            "--name",
            "acme-bot",
            "--project",
            "acme",
            "--project",
            "beta",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    created = json.loads(r.output)
    assert created["projects"] == ["acme", "beta"]
    key = keys.authenticate(workspace.engine, created["key"])
    assert key is not None and key.allows("acme") and not key.allows("default")
    r = runner.invoke(main, [*args, "keys", "list", "--json"])
    assert {k["name"]: k["projects"] for k in json.loads(r.output)}["acme-bot"] == ["acme", "beta"]


def test_the_dashboard_respects_a_keys_projects(
    app_client: TestClient, workspace: Workspace
) -> None:
    create_project(workspace.engine, "acme")
    create_project(workspace.engine, "globex")
    _, token = keys.create_key(workspace.engine, name="acme", role="bot", projects=["acme"])
    assert (
        app_client.post("/login", data={"api_key": token}, follow_redirects=False).status_code
        == 303
    )
    r = app_client.get("/learnings")
    assert r.status_code == 200
    assert '<option value="acme" selected>' in r.text and "globex" not in r.text
    for page in ("/learnings", "/interactions", "/quality", "/skills", "/search"):
        assert app_client.get(page, params={"project": "globex"}).status_code == 403, page


def test_dashboard_pages_answer_hostile_parameters_without_500(
    app_client: TestClient, workspace: Workspace
) -> None:
    """The dashboard is not in the OpenAPI document, so schemathesis never sees it."""
    _, admin = keys.create_key(workspace.engine, name="admin", role="admin")
    app_client.post("/login", data={"api_key": admin})
    hostile = ["../../etc", "é", "a" * 5000, "-1", str(2**64), "x%00y", "'; DROP TABLE x;--"]
    for value in hostile:
        for page, params in [
            ("/skills", {"project": value, "q": value}),
            (f"/skills/{value}", {"tab": value}),
            ("/skills/git-help", {"version": value, "tab": "content"}),
            ("/learnings", {"project": value, "skill": value}),
            ("/interactions", {"project": value}),
            ("/quality", {"project": value}),
            ("/search", {"q": value, "profile": value, "alpha": value, "project": value}),
            (f"/proposals/{value}/report", {}),
            ("/login", {"next": value}),
        ]:
            r = app_client.get(page, params=params, follow_redirects=False)
            assert r.status_code < 500, (page, value, r.status_code)


def test_search_respects_a_keys_projects(app_client: TestClient, workspace: Workspace) -> None:
    create_project(workspace.engine, "acme")
    acme = bearer(workspace, "bot", "acme")
    r = app_client.post("/v1/search", headers=acme, json={"query": "git", "project": "default"})
    assert r.status_code == 403
    r = app_client.post(
        "/v1/search", headers=bearer(workspace, "bot"), json={"query": "git", "project": "newco"}
    )
    assert r.status_code == 404 and error(r)["code"] == "project_not_found"
