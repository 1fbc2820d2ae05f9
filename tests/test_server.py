"""The HTTP service: in process through ASGI, and end to end over loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from amelio import skills
from amelio.server import create_app
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace
from support.processes import free_port


@pytest.fixture
def tokens(workspace: Workspace) -> dict[str, str]:
    return {
        role: keys.create_key(workspace.engine, name=role, role=role)[1]
        for role in ("admin", "bot", "client")
    }


@pytest.fixture
def client(workspace: Workspace, examples: Path) -> Iterator[TestClient]:
    skills.import_skills(workspace.engine, examples)
    with TestClient(create_app(workspace)) as c:
        yield c


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_health_is_public_and_reports_migration(client: TestClient) -> None:
    r = client.get("/v1/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["migration"]["current"] == body["migration"]["head"]


def test_keys_and_roles(client: TestClient, tokens: dict[str, str], workspace: Workspace) -> None:
    r = client.get("/v1/skills")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/skills", headers=auth("amk_forged")).status_code == 401
    assert client.get("/v1/skills", headers=auth(tokens["admin"] + "x")).status_code == 401
    r = client.get("/v1/skills", headers=auth(tokens["client"]))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    assert client.get("/v1/skills", headers=auth(tokens["bot"])).status_code == 200
    assert client.get("/v1/skills", headers=auth(tokens["admin"])).status_code == 200
    admin = next(k for k in keys.list_keys(workspace.engine) if k.role == "admin")
    keys.revoke_key(workspace.engine, admin.id)
    assert client.get("/v1/skills", headers=auth(tokens["admin"])).status_code == 401


def test_list_and_show_skills(
    client: TestClient, tokens: dict[str, str], workspace: Workspace
) -> None:
    r = client.get("/v1/skills", headers=auth(tokens["bot"]))
    body = r.json()
    assert body["project"] == "default"
    names = [s["name"] for s in body["skills"]]
    assert "code-review" in names
    assert names == sorted(names)
    first = body["skills"][0]
    assert {"name", "description", "triggers", "keywords", "version", "updatedAt"} <= set(first)
    assert "content" not in first

    skills.update_skill(
        workspace.engine, "git-help", content="# Git\n\nv2 body", author="ana", reason="shorter"
    )
    r = client.get("/v1/skills/git-help", headers=auth(tokens["bot"]))
    detail = r.json()
    assert detail["version"] == 2
    assert detail["content"] == "# Git\n\nv2 body\n"
    assert [(v["version"], v["author"]) for v in detail["versions"]] == [(1, "import"), (2, "ana")]
    old = client.get("/v1/skills/git-help?version=1", headers=auth(tokens["bot"])).json()
    assert old["version"] == 1
    assert old["currentVersion"] == 2
    assert "v2 body" not in old["content"]

    missing = client.get("/v1/skills/nope", headers=auth(tokens["bot"]))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "skill_not_found"
    r = client.get("/v1/skills/git-help?version=9", headers=auth(tokens["bot"]))
    assert r.status_code == 404
    r = client.get("/v1/skills?project=nope", headers=auth(tokens["bot"]))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "project_not_found"


def test_validation_errors_and_oversized_bodies_are_json(
    client: TestClient, tokens: dict[str, str]
) -> None:
    r = client.get("/v1/skills/git-help?version=zero", headers=auth(tokens["bot"]))
    assert r.status_code == 422
    assert r.json()["error"]["details"]["errors"][0]["field"] == "query.version"
    big = b"x" * (client.app.state.settings.max_request_bytes + 1)  # type: ignore[attr-defined]
    r = client.post("/v1/skills", content=big, headers=auth(tokens["admin"]))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "input_too_large"
    r = client.post(
        "/v1/evals/check",
        content=b'{"text": "x",',
        headers={**auth(tokens["bot"]), "content-type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_json"
    assert "not valid JSON" in r.json()["error"]["message"]
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"


def test_openapi_documents_the_routes(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/v1/health", "/v1/skills", "/v1/skills/{name}"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


# -- end to end: a real server process over loopback -----------------------------------


def amelio(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amelio", *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=60,
        env=os.environ.copy(),
        check=False,
    )


@pytest.mark.slow
def test_serve_end_to_end_and_refusal_when_unmigrated(tmp_path: Path, examples: Path) -> None:
    ws, _ = init_workspace(tmp_path / "ws")
    skills.import_skills(ws.engine, examples)
    _, token = keys.create_key(ws.engine, name="e2e", role="admin")
    ws.dispose()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "amelio", "-w", str(tmp_path / "ws"), "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        r = httpx.get(f"{base}/v1/skills", headers=auth(token), timeout=5)
        assert r.status_code == 200
        assert len(r.json()["skills"]) >= 10
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "amelio.toml").write_text("")
    result = amelio("-w", str(fresh), "serve", "--port", str(free_port()), cwd=tmp_path)
    assert result.returncode == 1
    assert "amelio db upgrade" in result.stderr


# -- a JSON body must say it is JSON -------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "shown"),
    [
        ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded"),  # curl -d
        ("text/plain;charset=UTF-8", "text/plain;charset=UTF-8"),  # fetch() with a string
        (None, "none"),
    ],
)
def test_a_json_body_without_its_content_type_names_the_header(
    client: TestClient, tokens: dict[str, str], content_type: str | None, shown: str
) -> None:
    """What `curl -d '{…}'` sends without `-H 'Content-Type: application/json'`: the
    answer says which header is missing, not that the body is not a dictionary."""
    headers = auth(tokens["bot"])
    if content_type is not None:
        headers["Content-Type"] = content_type
    body = b'{"message": "git push rejected", "answer": "Pull first."}'
    r = client.post("/v1/interactions", content=body, headers=headers)
    assert r.status_code == 415
    error = r.json()["error"]
    assert error["code"] == "unsupported_media_type"
    assert "Content-Type: application/json" in error["message"]
    assert shown in error["message"]
    assert error["details"] == {
        "header": "Content-Type",
        "expected": "application/json",
        "received": content_type,
    }
    # Nothing was stored: the same body, labelled, is the first interaction.
    r = client.post(
        "/v1/interactions", content=body, headers={**headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 200 and r.json()["interactionId"] == 1


def test_a_labelled_body_that_is_not_an_object_stays_invalid_input(
    client: TestClient, tokens: dict[str, str]
) -> None:
    r = client.post("/v1/interactions", json=["a list"], headers=auth(tokens["bot"]))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"


def test_openapi_lists_415_for_routes_that_take_a_json_body(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "415" in paths["/v1/interactions"]["post"]["responses"]
    assert "415" in paths["/v1/evals/check"]["post"]["responses"]
    assert "415" not in paths["/v1/skills"]["get"]["responses"]  # no body, no such error
    # Feedback events take JSON or NDJSON under any type (sendBeacon sends text/plain).
    assert "415" not in paths["/v1/feedback/events"]["post"]["responses"]


def test_an_empty_idempotency_key_is_refused(client: TestClient, tokens: dict[str, str]) -> None:
    """An empty key is a client bug (a key generator that printed nothing): refused,
    not taken as "no key", which would store a duplicate on every retry."""
    r = client.post(
        "/v1/interactions",
        json={"message": "git push rejected", "answer": "Pull first."},
        headers={**auth(tokens["bot"]), "Idempotency-Key": ""},
    )
    assert r.status_code == 422
    assert r.json()["error"]["details"]["errors"][0]["field"] == "header.Idempotency-Key"
