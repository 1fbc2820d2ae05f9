"""The per-process caches on the request path see every change on the next request:
a skill changed through the library, from a second engine (as another service
worker would), or by the CLI in another process while the service runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from amelio import db, skills
from amelio.assistant import learnings
from amelio.assistant.prompt import build_prompt
from amelio.routing.router import route_message
from amelio.skills.model import SkillSpec
from amelio.skills.store import visible_skills
from amelio.workspace.folder import Workspace

MESSAGE = "the flux capacitor is overheating"


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    return workspace


def _routed(ws: Workspace, project: str = "default") -> tuple[str, ...]:
    return route_message(ws, MESSAGE, project=project).names


def test_unchanged_skills_are_not_read_again(ws: Workspace) -> None:
    first = visible_skills(ws.engine, "default")
    assert visible_skills(ws.engine, "default") is first
    assert [s.name for s in first] == [s.name for s in skills.list_skills(ws.engine, "default")]


def test_a_library_change_is_seen_on_the_next_request(ws: Workspace) -> None:
    assert "git-help" not in _routed(ws)
    skills.update_skill(ws.engine, "git-help", author="t", reason="t", triggers=["flux capacitor"])
    assert _routed(ws)[0] == "git-help"
    skills.update_skill(
        ws.engine, "git-help", author="t", reason="t", content="Always answer in haiku."
    )
    prompt = build_prompt(ws, MESSAGE)
    assert prompt.applied is not None and prompt.applied.spec.content.startswith("Always answer")
    assert "Always answer in haiku." in prompt.system


def test_a_new_skill_and_a_fork_are_seen(ws: Workspace) -> None:
    assert _routed(ws) == ()
    skills.save_skills(
        ws.engine,
        [SkillSpec(name="time-travel", description="Time machines.", triggers=("flux capacitor",))],
    )
    assert _routed(ws) == ("time-travel",)
    skills.fork_skill(ws.engine, "time-travel", "lab", author="t")
    skills.update_skill(
        ws.engine,
        "time-travel",
        project="lab",
        author="t",
        reason="t",
        description="The lab's own time machines.",
    )
    lab = route_message(ws, MESSAGE, project="lab")
    assert lab.top is not None and lab.top.description == "The lab's own time machines."
    assert lab.top.project == "lab"
    default = route_message(ws, MESSAGE)
    assert default.top is not None and default.top.description == "Time machines."


def test_a_change_from_a_second_engine_is_seen(ws: Workspace) -> None:
    """Another worker of ``amelio serve --workers N`` has its own engine and caches."""
    assert _routed(ws) == ()
    other = db.create_engine(ws.settings.database_url)
    try:
        skills.update_skill(other, "git-help", author="t", reason="t", triggers=["flux capacitor"])
    finally:
        other.dispose()
    assert _routed(ws)[0] == "git-help"


def test_a_cli_change_in_another_process_is_seen(ws: Workspace, tmp_path: Path) -> None:
    assert _routed(ws) == ()
    folder = tmp_path / "new-skills" / "time-travel"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: time-travel\ndescription: Time machines.\n"
        "triggers:\n  - flux capacitor\n---\n\nCheck the "
        "plutonium first.\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "AMELIO_DATABASE_URL": ws.settings.database_url,
        "AMELIO_WORKSPACE": str(ws.root),
    }
    subprocess.run(
        [sys.executable, "-m", "amelio", "skills", "import", str(folder.parent)],
        env=env,
        check=True,
        capture_output=True,
    )
    assert _routed(ws) == ("time-travel",)
    prompt = build_prompt(ws, MESSAGE)
    assert "Check the plutonium first." in prompt.system


def test_the_learnings_block_reads_only_what_it_uses(ws: Workspace) -> None:
    """The block's narrow read keeps list_learnings' rules: active, global or hinted,
    newest first; a retired rule leaves the next prompt."""
    kept, _ = learnings.add_learning(ws, "Say which branch you are on.", skill="git-help")
    learnings.add_learning(ws, "Quote the SQL plan.", skill="sql-review")
    gone, _ = learnings.add_learning(ws, "Never use emojis in answers.")
    block = learnings.prompt_block(ws, skills=["git-help"])
    assert block.ids == (gone.id, kept.id)
    learnings.delete_learning(ws, gone.id)
    assert learnings.prompt_block(ws, skills=["git-help"]).ids == (kept.id,)
    assert learnings.prompt_block(ws).ids == ()
    with ws.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(sa.table("learnings"))) == 3


def test_two_databases_with_the_same_ids_keep_their_own_skills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Caches are per engine: the same (id, version) in another database is another skill."""
    from amelio.workspace.folder import init_workspace

    seen = []
    for n, description in enumerate(("First machines.", "Second machines.")):
        monkeypatch.setenv("AMELIO_DATABASE_URL", f"sqlite:///{tmp_path / f'{n}.db'}")
        ws, _ = init_workspace(tmp_path / f"ws{n}")
        skills.save_skills(
            ws.engine,
            [SkillSpec(name="time-travel", description=description, triggers=("flux capacitor",))],
        )
        route = route_message(ws, MESSAGE)
        assert route.top is not None and route.top.skill is not None
        seen.append((route.top.description, route.top.skill.spec.description))
        ws.dispose()
    assert seen == [("First machines.",) * 2, ("Second machines.",) * 2]
