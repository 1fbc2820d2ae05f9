"""The learned router's examples and mined triggers from outside: `amelio skills examples`,
`amelio skills suggest-triggers`, /v1/skills/{name}/examples and suggest-triggers, and
the skill page's Routing tab."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from amelio import skills
from amelio.cli import main
from amelio.routing import examples as routing_examples
from amelio.server import create_app
from amelio.web.i18n import _EN, _FR
from amelio.workspace import keys
from amelio.workspace.folder import Workspace

#: Messages a billing skill's metadata does not name, sharing the pair "charged twice".
BILLING_EXAMPLES = (
    "charged twice this month",
    "I was charged twice",
    "why charged twice again",
    "double charge on my card",
)


def write_skill(folder: Path, name: str, front: str) -> None:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(
        f"---\nname: {name}\n{front}---\n\n# {name}\n", encoding="utf-8"
    )


@pytest.fixture
def ws(tmp_path: Path, workspace: Workspace) -> Workspace:
    """Two skills; billing has one SKILL.md example."""
    write_skill(
        tmp_path / "skills",
        "billing",
        "description: Invoices.\ntriggers: [invoice]\nexamples:\n  - where is my money back\n",
    )
    write_skill(tmp_path / "skills", "travel", "description: Trips.\ntriggers: [hotel]\n")
    skills.import_skills(workspace.engine, tmp_path / "skills")
    return workspace


def cli(ws: Workspace, *args: str) -> Result:
    return CliRunner().invoke(main, ["-w", str(ws.root), *args])


# -- CLI ----------------------------------------------------------------------------------


def test_examples_commands_list_add_and_remove(ws: Workspace) -> None:
    added = [
        json.loads(cli(ws, "skills", "examples", "add", "billing", text, "--json").output)
        for text in BILLING_EXAMPLES[:2]
    ]
    assert [(a["text"], a["source"], a["author"]) for a in added] == [
        (BILLING_EXAMPLES[0], "manual", added[0]["author"]),
        (BILLING_EXAMPLES[1], "manual", added[0]["author"]),
    ]
    assert added[0]["author"]  # the OS user, or "cli"
    result = cli(ws, "skills", "examples", "add", "billing", "  a refund\nplease ")
    assert result.exit_code == 0, result.output
    assert "added to billing (project default): a refund please" in result.output

    listed = cli(ws, "skills", "examples", "list", "billing")
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert lines[0].split() == ["ref", "source", "text", "author", "created"]
    assert lines[2].split()[:2] == ["md1", "skill"]
    data = json.loads(cli(ws, "skills", "examples", "list", "billing", "--json").output)
    assert (data["skill"], data["project"]) == ("billing", "default")
    first = str(added[0]["id"])
    refs = [e["ref"] for e in data["examples"]]
    assert refs[0] == "md1" and refs[-1] == first  # SKILL.md's first, then newest first

    removed = cli(ws, "skills", "examples", "remove", "billing", first)
    assert removed.exit_code == 0, removed.output
    assert f"Removed example {first} of billing: {BILLING_EXAMPLES[0]}" in removed.output
    now = json.loads(cli(ws, "skills", "examples", "list", "billing", "--json").output)
    assert first not in [e["ref"] for e in now["examples"]]
    kept = json.loads(
        cli(ws, "skills", "examples", "list", "billing", "--removed", "--json").output
    )
    (gone,) = [e for e in kept["examples"] if e["ref"] == first]
    assert gone["removedAt"] and gone["removedBy"] == added[0]["author"]
    assert (
        "removed"
        in cli(ws, "skills", "examples", "list", "billing", "--removed").output.splitlines()[0]
    )

    md = cli(ws, "skills", "examples", "remove", "billing", "md1", "--json")
    assert md.exit_code == 0 and json.loads(md.output)["source"] == "skill"
    # A new version of the skill the project sees (the global one is forked, unchanged).
    assert skills.get_skill(ws.engine, "billing", "default").version == 2
    assert skills.get_skill(ws.engine, "billing", "default").spec.examples == ()

    for ref, error in (
        ("999", "Error: No routing example 999 of skill 'billing'"),
        ("x1", "Error: 'x1' names no example"),
        ("²", "Error: '²' names no example"),
        ("md7", "Error: Skill 'billing' has no SKILL.md example md7"),
    ):
        result = cli(ws, "skills", "examples", "remove", "billing", ref)
        assert result.exit_code == 1 and error in result.output, (ref, result.output)
    result = cli(ws, "skills", "examples", "add", "nope", "text")
    assert result.exit_code == 1 and "Error: " in result.output
    result = cli(ws, "skills", "examples", "add", "billing", "   ")
    assert result.exit_code == 1 and "Error: An example needs some text." in result.output
    empty = cli(ws, "skills", "examples", "list", "travel")
    assert empty.exit_code == 0 and "travel has no routing examples" in empty.output


def test_suggest_triggers_command_files_a_proposal_to_approve(ws: Workspace) -> None:
    result = cli(ws, "skills", "suggest-triggers", "travel")
    assert result.exit_code == 1 and "needs at least 3" in result.output
    for text in BILLING_EXAMPLES:
        routing_examples.add_example(ws, "billing", text)
    routing_examples.add_example(ws, "travel", "card for the hotel")

    dry = json.loads(cli(ws, "skills", "suggest-triggers", "billing", "--dry-run", "--json").output)
    assert dry["proposal"] is None and dry["examples"] == 5
    assert {"term": "charged twice", "kind": "trigger"}.items() <= dry["terms"][0].items()
    assert dry["triggers"] == ["invoice", "charged twice"]
    few = json.loads(
        cli(
            ws,
            "skills",
            "suggest-triggers",
            "billing",
            "--dry-run",
            "--max-keywords",
            "0",
            "--json",
        ).output
    )
    assert {t["kind"] for t in few["terms"]} == {"trigger"}
    shown = cli(ws, "skills", "suggest-triggers", "billing", "--dry-run")
    assert shown.exit_code == 0
    assert re.search(r"trigger\s+charged twice\s+\d of 5\s+0", shown.output), shown.output
    assert "Dry run: nothing proposed." in shown.output
    assert not cli(ws, "proposals", "list", "--json").output.strip("[]\n")

    filed = cli(ws, "skills", "suggest-triggers", "billing")
    assert filed.exit_code == 0, filed.output
    proposal_id = re.search(r"Proposal #(\d+) filed", filed.output)
    assert proposal_id, filed.output
    assert f"amelio proposals approve {proposal_id.group(1)}" in filed.output
    assert re.search(
        r"On metadata alone, \d of 5 examples route to billing first now, "
        r"\d with these terms\.",
        filed.output,
    )
    pending = cli(ws, "skills", "suggest-triggers", "billing")
    assert pending.exit_code == 1 and "still pending" in pending.output
    approved = cli(ws, "proposals", "approve", proposal_id.group(1))
    assert approved.exit_code == 0, approved.output
    assert "charged twice" in skills.get_skill(ws.engine, "billing", "default").spec.triggers
    again = cli(ws, "skills", "suggest-triggers", "billing")
    assert again.exit_code == 0 and "Nothing to add" in again.output


# -- API ----------------------------------------------------------------------------------


@pytest.fixture
def api(ws: Workspace) -> Iterator[tuple[TestClient, dict[str, dict[str, str]]]]:
    headers = {
        role: {"Authorization": "Bearer " + keys.create_key(ws.engine, name=role, role=role)[1]}
        for role in ("admin", "bot", "client")
    }
    with TestClient(create_app(ws)) as client:
        yield client, headers


def test_examples_routes_read_for_bots_and_write_for_admins(
    api: tuple[TestClient, dict[str, dict[str, str]]], ws: Workspace
) -> None:
    client, h = api
    url = "/v1/skills/billing/examples"
    assert client.get(url, headers=h["client"]).status_code == 403
    r = client.get(url, headers=h["bot"])
    assert r.status_code == 200
    assert r.json() == {
        "skill": "billing",
        "project": "default",
        "examples": [routing_examples.list_examples(ws, "billing")[0].to_dict()],
    }

    refused = client.post(url, headers=h["bot"], json={"text": "charged twice"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    r = client.post(url, headers=h["admin"], json={"text": "charged  twice", "project": "default"})
    assert r.status_code == 201
    example = r.json()
    assert (example["text"], example["source"], example["author"]) == (
        "charged twice",
        "manual",
        "key:admin",
    )
    assert [e["ref"] for e in client.get(url, headers=h["bot"]).json()["examples"]] == [
        "md1",
        example["ref"],
    ]

    assert client.delete(f"{url}/{example['ref']}", headers=h["bot"]).status_code == 403
    r = client.delete(f"{url}/{example['ref']}", headers=h["admin"])
    assert r.status_code == 200
    assert r.json()["removedBy"] == "key:admin" and r.json()["removedAt"]
    assert [e["ref"] for e in client.get(url, headers=h["bot"]).json()["examples"]] == ["md1"]
    everything = client.get(url, headers=h["bot"], params={"removed": "true"}).json()
    assert [e["ref"] for e in everything["examples"]] == ["md1", example["ref"]]
    r = client.delete(f"{url}/md1", headers=h["admin"])
    assert r.status_code == 200 and r.json()["source"] == "skill"
    assert client.get("/v1/skills/billing", headers=h["bot"]).json()["version"] == 2

    r = client.delete(f"{url}/999", headers=h["admin"])
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    for ref in ("abc", "99999999999", "3000000000"):
        r = client.delete(f"{url}/{ref}", headers=h["admin"])
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", ref
    r = client.post("/v1/skills/nope/examples", headers=h["admin"], json={"text": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "skill_not_found"
    r = client.post(url, headers=h["admin"], json={"text": "   "})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "text"
    r = client.get(url, headers=h["bot"], params={"project": "nope"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "project_not_found"


def test_suggest_triggers_route(
    api: tuple[TestClient, dict[str, dict[str, str]]], ws: Workspace
) -> None:
    client, h = api
    url = "/v1/skills/billing/suggest-triggers"
    assert client.post(url, headers=h["bot"]).status_code == 403
    r = client.post(url, headers=h["admin"])
    assert r.status_code == 422 and "at least 3" in r.json()["error"]["message"]
    for text in BILLING_EXAMPLES:
        routing_examples.add_example(ws, "billing", text)
    dry = client.post(url, headers=h["admin"], json={"dryRun": True, "maxKeywords": 0})
    assert dry.status_code == 200
    assert dry.json()["proposal"] is None
    assert {t["kind"] for t in dry.json()["terms"]} == {"trigger"}
    r = client.post(url, headers=h["admin"], json={"project": "default"})
    assert r.status_code == 201
    proposal = r.json()["proposal"]
    assert proposal["routing"]["triggers"][:2] == ["invoice", "charged twice"]
    assert proposal["author"] == "key:admin" and proposal["status"] == "pending"
    assert client.post(url, headers=h["admin"]).status_code == 409
    assert client.post(url, headers=h["admin"], json={"maxTriggers": -1}).status_code == 422
    assert client.post("/v1/skills/nope/suggest-triggers", headers=h["admin"]).status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/v1/skills/{name}/examples",
        "/v1/skills/{name}/examples/{ref}",
        "/v1/skills/{name}/suggest-triggers",
    } <= set(paths)
    assert {"200", "201", "409"} <= set(
        paths["/v1/skills/{name}/suggest-triggers"]["post"]["responses"]
    )


# -- dashboard ----------------------------------------------------------------------------


def login(client: TestClient, token: str) -> str:
    r = client.post("/login", data={"api_key": token, "next": "/skills"}, follow_redirects=False)
    assert r.status_code == 303
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/skills").text)
    assert match
    return match.group(1)


@pytest.fixture
def site(tmp_path: Path, sqlite_workspace: Workspace) -> Iterator[tuple[TestClient, Workspace]]:
    ws = sqlite_workspace
    write_skill(
        tmp_path / "skills",
        "billing",
        "description: Invoices.\ntriggers: [invoice]\nexamples:\n  - where is my money back\n",
    )
    write_skill(tmp_path / "skills", "travel", "description: Trips.\ntriggers: [hotel]\n")
    skills.import_skills(ws.engine, tmp_path / "skills")
    with TestClient(create_app(ws)) as client:
        yield client, ws


ROUTING = "/skills/billing?project=default&tab=routing"


def flash(page: str) -> str:
    """The message a form's redirect shows."""
    match = re.search(r'<p class="flash" role="status">(.*?)</p>', page, re.S)
    return html.unescape(match.group(1)) if match else ""


def test_routing_tab_adds_removes_and_suggests(site: tuple[TestClient, Workspace]) -> None:
    client, ws = site
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    csrf = login(client, admin)
    page = client.get(ROUTING).text
    assert 'aria-current="page">Routing</a>' in page
    assert "where is my money back" in page and "<code>md1</code>" in page
    assert 'action="/skills/billing/examples"' in page
    assert 'action="/skills/billing/examples/md1/remove"' in page
    assert "Suggesting triggers needs at least 3 examples." in page

    r = client.post("/skills/billing/examples", data={"csrf": "wrong", "text": "x"})
    assert r.status_code == 403
    for text in BILLING_EXAMPLES:
        r = client.post(
            "/skills/billing/examples",
            data={"csrf": csrf, "project": "default", "text": text},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"].startswith(ROUTING + "&msg=")
    listed = routing_examples.list_examples(ws, "billing")
    assert [e.text for e in listed][1:] == list(reversed(BILLING_EXAMPLES))
    assert {e.author for e in listed[1:]} == {"key:ana"}
    r = client.post("/skills/billing/examples", data={"csrf": csrf, "text": "  "})
    assert flash(r.text).startswith("Not done: the form's input was refused")  # on the tab
    page = client.get(ROUTING).text
    assert "charged twice this month" in page and "added by hand" in page

    last = listed[1]
    r = client.post(
        f"/skills/billing/examples/{last.ref}/remove", data={"csrf": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    assert flash(client.get(r.headers["location"]).text) == f"Example {last.ref} removed."
    assert last.text not in client.get(ROUTING).text.split("<tbody>")[1]
    assert "1 removed" in client.get(ROUTING).text
    for ref in ("999", "²", "3000000000", "md9"):
        r = client.post(f"/skills/billing/examples/{ref}/remove", data={"csrf": csrf})
        assert r.status_code == 200 and flash(r.text).startswith("Not found"), ref

    r = client.post(
        "/skills/billing/suggest-triggers",
        data={"csrf": csrf, "project": "default"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    target = r.headers["location"]
    match = re.fullmatch(
        r"/skills/billing\?project=default&tab=prs&msg=[^#]+#proposal-(\d+)", target
    )
    assert match, target
    prs = client.get(target.split("#")[0]).text
    assert f'id="proposal-{match.group(1)}"' in prs and "charged twice" in prs
    assert "+triggers: invoice, charged twice" in prs
    r = client.post("/skills/billing/suggest-triggers", data={"csrf": csrf})
    assert r.status_code == 200 and flash(r.text).startswith("Not done: it conflicts")


def test_routing_tab_for_viewers_and_in_french(site: tuple[TestClient, Workspace]) -> None:
    client, ws = site
    _, bot = keys.create_key(ws.engine, name="bob", role="bot")
    example = routing_examples.add_example(ws, "billing", "charged twice", author="ann")
    csrf = login(client, bot)
    page = client.get(ROUTING).text
    assert "charged twice" in page and "ann" in page
    assert "/remove" not in page and 'action="/skills/billing/examples"' not in page
    assert "suggest-triggers" not in page
    for path, data in (
        (f"/skills/billing/examples/{example.ref}/remove", {}),
        ("/skills/billing/examples", {"text": "x"}),
        ("/skills/billing/suggest-triggers", {}),
    ):
        r = client.post(path, data={"csrf": csrf, **data})
        assert r.status_code == 403, path
    assert len(routing_examples.list_examples(ws, "billing")) == 2

    french = client.get(ROUTING, headers={"Accept-Language": "fr-FR,fr;q=0.9"}).text
    assert 'aria-current="page">Routage</a>' in french
    assert "ajouté à la main" in french and "Réf." in french


def test_routing_strings_exist_in_both_languages() -> None:
    keys_ = (
        "routing",
        "examples_help",
        "no_examples",
        "add_example",
        "remove",
        "suggest_triggers",
        "nothing_to_add",
        "triggers_proposed",
        "example_added",
        "example_removed",
        "skill_example_removed",
        "no_such_example",
        "source_skill",
        "source_interaction",
        "source_manual",
        "suggest_needs",
        "removed_examples",
    )
    for key in keys_:
        assert key in _EN and key in _FR, key
    assert set(_EN) - set(_FR) == {"app"}
