"""Pinned cases from feedback, by hand, from the command line and over HTTP.

What a benchmark does with them is tested in test_improve_sage_bench.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from amelio import skills
from amelio.assistant import cases
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import respond
from amelio.cli import main
from amelio.errors import InvalidInput, NotFound
from amelio.llm.fake import ScriptedProvider
from amelio.server import create_app
from amelio.workspace import keys, projects
from amelio.workspace.folder import Workspace, open_workspace

GIT = "git push rejected, what now?"
ANSWER = "Run `git pull --rebase`, then git push."


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    return workspace


def answered(ws: Workspace, message: str = GIT, project: str = "default") -> int:
    reply = respond(ws, message, provider=ScriptedProvider(default=ANSWER), project=project)
    return reply.interaction_id


def pinned(ws: Workspace, **kwargs: object) -> list[tuple[int, str, str | None]]:
    return [
        (c.interaction_id, c.source, c.correction)
        for c in cases.list_cases(ws, **kwargs)  # type: ignore[arg-type]
    ]


def cli(ws: Workspace, *args: str) -> Result:
    return CliRunner().invoke(main, ["-w", str(ws.root), *args])


def test_feedback_pins_and_takes_back(ws: Workspace) -> None:
    """👍 pins; another person's 👎 takes an automatic pin back; a Fix It pins the
    message with its correction; an unpinned case stays unpinned under a later 👍."""
    liked, fixed, disputed = answered(ws), answered(ws), answered(ws)
    give_answer_feedback(ws, liked, "up", user="ann")
    give_answer_feedback(ws, liked, "up", user="bob")  # one case per interaction
    assert pinned(ws) == [(liked, "thumbs_up", None)]
    [case] = cases.list_cases(ws, skill="git-help")
    assert (case.skill, case.message, case.answer) == ("git-help", GIT, ANSWER)

    give_answer_feedback(ws, disputed, "down", user="cid")
    give_answer_feedback(ws, disputed, "up", user="ann")  # someone objected: not pinned
    give_answer_feedback(ws, liked, "down", user="cid")
    assert pinned(ws) == []

    give_answer_feedback(ws, fixed, "fixit", user="ann")  # nothing to say: nothing to pin
    assert pinned(ws) == []
    give_answer_feedback(ws, fixed, "fixit", comment="Say how to undo it too.", user="ann")
    assert pinned(ws) == [(fixed, "fixit", "Say how to undo it too.")]

    give_answer_feedback(ws, liked, "up", user="dan")  # the objection stands
    assert pinned(ws) == [(fixed, "fixit", "Say how to undo it too.")]
    again = answered(ws)
    give_answer_feedback(ws, again, "up", user="ann")
    [newest, _] = cases.list_cases(ws)
    assert newest.interaction_id == again
    cases.unpin_case(ws, newest.id, author="eve")
    give_answer_feedback(ws, again, "up", user="bob")
    assert [c.interaction_id for c in cases.list_cases(ws)] == [fixed]
    [gone] = [c for c in cases.list_cases(ws, unpinned=True) if c.id == newest.id]
    assert (gone.pinned, gone.unpinned_by) == (False, "eve")
    # A person may pin it again by hand.
    case, created = cases.pin_case(ws, again, note="  keep   this ", author="eve")
    assert created and (case.source, case.note, case.pinned) == ("manual", "keep this", True)
    same, created = cases.pin_case(ws, again, author="eve")
    assert not created and same.id == case.id and same.note == "keep this"


def test_pinning_follows_the_setting_and_refuses_what_it_cannot_pin(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_PIN_ON_THUMBS_UP", "false")
    off = open_workspace(ws.root)
    try:
        interaction = answered(off)
        give_answer_feedback(off, interaction, "up", user="ann")
        give_answer_feedback(off, interaction, "fixit", comment="Shorter.", user="bob")
        assert pinned(off) == []
        unrouted = answered(off, "what is the weather like")
        with pytest.raises(InvalidInput, match="answered without a skill"):
            cases.pin_case(off, unrouted)
        with pytest.raises(NotFound, match="No interaction 999"):
            cases.pin_case(off, 999)
        with pytest.raises(NotFound, match="No pinned case 5 in project 'default'"):
            cases.unpin_case(off, 5)
        with pytest.raises(InvalidInput, match="A note is at most 1,000"):
            cases.pin_case(off, interaction, note="x" * 1001)
        assert pinned(off) == []  # nothing half-written
    finally:
        off.dispose()


def test_cases_commands(ws: Workspace) -> None:
    interaction = answered(ws)
    empty = cli(ws, "cases", "list")
    assert empty.exit_code == 0 and "No pinned cases in project default" in empty.output

    result = cli(ws, "cases", "pin", str(interaction), "--note", "the classic")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Pinned case 1 for git-help (project default): git push")
    again = json.loads(cli(ws, "cases", "pin", str(interaction), "--json").output)
    assert (again["id"], again["created"], again["note"]) == (1, False, "the classic")

    listed = cli(ws, "cases", "list", "--skill", "git-help")
    lines = listed.output.splitlines()
    assert lines[0].split()[:5] == ["id", "skill", "source", "interaction", "message"]
    assert lines[0].endswith("correction or note")
    assert lines[2].split()[:4] == ["1", "git-help", "manual", str(interaction)]
    assert "the classic" in lines[2]
    data = json.loads(cli(ws, "cases", "list", "--json").output)
    assert [c["message"] for c in data["cases"]] == [GIT]

    result = cli(ws, "cases", "unpin", "1")
    assert result.exit_code == 0 and result.output.startswith("Unpinned case 1 of git-help")
    assert json.loads(cli(ws, "cases", "list", "--json").output)["cases"] == []
    assert "unpinned" in cli(ws, "cases", "list", "--unpinned").output.splitlines()[0]

    for args, error in (
        (["pin", "999"], "Error: No interaction 999."),
        (["unpin", "7"], "Error: No pinned case 7 in project 'default'."),
        (["list", "--project", "nope"], "Error: "),
    ):
        result = cli(ws, "cases", *args)
        assert result.exit_code == 1 and error in result.output, (args, result.output)
    assert cli(ws, "cases", "pin", "0").exit_code == 2  # a usage error, before any query


def test_cases_routes_read_for_bots_and_write_for_admins(ws: Workspace) -> None:
    projects.create_project(ws.engine, "other")
    ours, theirs = answered(ws), answered(ws, project="other")
    _, bot = keys.create_key(ws.engine, name="bot", role="bot")
    _, admin = keys.create_key(ws.engine, name="admin", role="admin")
    _, scoped = keys.create_key(ws.engine, name="scoped", role="bot", projects=["default"])
    as_bot, as_admin = {"Authorization": f"Bearer {bot}"}, {"Authorization": f"Bearer {admin}"}
    as_scoped = {"Authorization": f"Bearer {scoped}"}
    with TestClient(create_app(ws)) as client:
        body = {"interactionId": ours, "note": "kept"}
        assert client.post("/v1/cases", json=body, headers=as_bot).status_code == 403
        made = client.post("/v1/cases", json=body, headers=as_admin)
        assert made.status_code == 201 and made.json()["created"] is True
        assert made.json()["author"] == "key:admin" and made.json()["note"] == "kept"
        assert client.post("/v1/cases", json=body, headers=as_admin).status_code == 200
        listed = client.get("/v1/cases", params={"skill": "git-help"}, headers=as_bot).json()
        assert [c["interactionId"] for c in listed["cases"]] == [ours]

        assert (
            client.get("/v1/cases", params={"project": "other"}, headers=as_scoped).status_code
            == 403
        )
        assert client.get("/v1/cases", headers=as_scoped).json()["cases"]  # its own project
        made_there = client.post("/v1/cases", json={"interactionId": theirs}, headers=as_admin)
        case_there = made_there.json()["id"]
        assert made_there.json()["project"] == "other"
        # A case is unpinned in its own project: another project's id is not found.
        assert client.delete(f"/v1/cases/{case_there}", headers=as_admin).status_code == 404
        there = client.delete(f"/v1/cases/{case_there}?project=other", headers=as_admin)
        assert there.status_code == 200 and there.json()["pinned"] is False
        for bad in ({"interactionId": 0}, {"interactionId": ours, "extra": 1}, {}):
            assert client.post("/v1/cases", json=bad, headers=as_admin).status_code == 422
        assert (
            client.post("/v1/cases", json={"interactionId": 999}, headers=as_admin).status_code
            == 404
        )

        gone = client.delete(f"/v1/cases/{made.json()['id']}", headers=as_admin)
        assert gone.status_code == 200 and gone.json()["pinned"] is False
        assert client.get("/v1/cases", headers=as_bot).json()["cases"] == []
        kept = client.get("/v1/cases", params={"unpinned": "true"}, headers=as_bot).json()
        assert [c["unpinnedBy"] for c in kept["cases"]] == ["key:admin"]
