"""Routing snapshots: `amelio route` routes from .amelio/cache/ exactly as through the
database, and only while nothing it was built from changed: no setting, no package,
and no skill or routing example write (the routing generation), from any process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amelio import skills
from amelio.cli import main
from amelio.routing import examples as routing_examples
from amelio.routing import snapshot as route_snapshot
from amelio.routing.snapshot import route_and_save, route_from_snapshot, snapshot_path
from amelio.skills.model import SkillSpec
from amelio.workspace.folder import Workspace, open_workspace
from amelio.workspace.projects import create_project

MESSAGES = [
    "I was charged twice for my invoice",
    "book a flight to Lisbon next week",
    "will it rain tomorrow",
    "something no skill is about",
    "refund",
]
EXAMPLES = {
    "billing": [
        "I was billed twice",
        "where is my refund",
        "my card was charged",
        "download last month's invoice",
        "update my payment method",
        "why is my bill so high",
        "cancel my subscription payment",
        "I need a receipt",
        "pay my invoice",
        "refund my payment",
        "invoice for my payment",
        "a refund for the invoice",
    ],
    "travel": [
        "find me a hotel in Rome",
        "change my flight",
        "book a train ticket",
        "I need a rental car",
        "cancel my trip",
        "what time is my flight",
        "upgrade my seat",
        "add a bag to my booking",
    ],
    "weather": [
        "is it sunny in Paris",
        "do I need an umbrella",
        "how cold is it outside",
        "weekend forecast please",
        "will it snow",
        "what's the temperature",
        "is a storm coming",
        "how windy is it",
        "forecast for rain",
        "sunny or rain",
        "rain forecast",
        "sunny forecast",
    ],
}


def _skills(folder: Path) -> Path:
    for name, description, triggers, keywords in (
        ("billing", "Invoices and payments.", "invoice", "payment, refund"),
        ("travel", "Trips and bookings.", "book a flight", "hotel, trip"),
        ("weather", "Forecasts.", "forecast", "rain, sunny"),
    ):
        (folder / name).mkdir(parents=True)
        (folder / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {description}\ntriggers: [{triggers}]\n"
            f"keywords: [{keywords}]\n---\n\n# {name}\n",
            encoding="utf-8",
        )
    return folder


@pytest.fixture
def ws(sqlite_workspace: Workspace, tmp_path: Path) -> Workspace:
    skills.import_skills(sqlite_workspace.engine, _skills(tmp_path / "skills"))
    return sqlite_workspace


def _reopen(ws: Workspace) -> Workspace:
    """The workspace as a new process opens it (settings read again)."""
    return open_workspace(ws.root)


def _fast(ws: Workspace, message: str, **kw: object) -> dict[str, object] | None:
    kw.setdefault("project", "default")
    route = route_from_snapshot(ws.root, message, **kw)  # type: ignore[arg-type]
    return None if route is None else route.to_dict()


def _full(ws: Workspace, message: str, **kw: object) -> dict[str, object]:
    kw.setdefault("project", "default")
    return route_and_save(_reopen(ws), message, **kw).to_dict()  # type: ignore[arg-type]


@pytest.mark.parametrize("scorer", [None, "learned", "hybrid", "keywords", "bm25"])
@pytest.mark.parametrize("semantic", [True, False])
@pytest.mark.parametrize("with_examples", [True, False])
def test_a_snapshot_routes_as_the_database_does(
    ws: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    scorer: str | None,
    semantic: bool,
    with_examples: bool,
) -> None:
    if not semantic:
        monkeypatch.setenv("AMELIO_ROUTER_EMBEDDING_MODEL", "")
    if with_examples:  # 36 examples: the threshold is learned from them
        for skill, texts in EXAMPLES.items():
            for text in texts:
                routing_examples.add_example(ws, skill, text)
    assert _fast(ws, MESSAGES[0], scorer=scorer) is None  # nothing saved yet
    for message in MESSAGES:
        full = _full(ws, message, scorer=scorer)
        assert _fast(ws, message, scorer=scorer) == full
        assert _fast(ws, message, scorer=scorer, limit=1) == _full(
            ws, message, scorer=scorer, limit=1
        )
    if scorer in (None, "learned") and with_examples:
        snapshot = _header(ws, scorer)
        assert snapshot["calibration"]["source"] == "examples"
        assert snapshot["model"] == ("wordllama" if semantic else None)


def _header(
    ws: Workspace, scorer: str | None = None, project: str = "default"
) -> dict[str, object]:
    raw = snapshot_path(ws.root, project, scorer).read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + size])  # type: ignore[no-any-return]


def test_project_forks_are_routed_with_their_scope(ws: Workspace) -> None:
    create_project(ws.engine, "acme")
    skills.update_project_skill(
        ws.engine,
        "billing",
        "acme",
        author="test",
        reason="fork",
        description="Acme's invoices.",
        keywords=["acme", "payment"],
    )
    full = _full(ws, "acme payment", project="acme")
    assert full["skills"][0] == full["skills"][0] | {"name": "billing", "scope": "project"}
    assert _fast(ws, "acme payment", project="acme") == full
    assert _fast(ws, "acme payment") is None  # the default project has its own snapshot


def _approve_a_proposal(ws: Workspace) -> None:
    from amelio.improve.proposals import approve_proposal, create_proposal

    proposal = create_proposal(
        ws,
        "weather",
        routing={"triggers": ["forecast"], "keywords": ["hail"]},
        rationale="r",
        author="test",
    )
    approve_proposal(ws, proposal.id, actor="admin")


def _vote(ws: Workspace, kind: str) -> None:
    """A 👍 on a kept answer adds its message as an example; a 👎 takes it back."""
    from amelio.assistant.quality import give_answer_feedback
    from amelio.assistant.respond import log_exchange

    kept = log_exchange(ws, "hail tonight?", "Maybe.", project="default", skills=["weather"])
    give_answer_feedback(ws, kept.interaction_id, "up", user="u")
    if kind == "down":
        _full(ws, "will it snow or hail")  # a current snapshot with the example in it
        give_answer_feedback(ws, kept.interaction_id, "down", user="u")


CHANGES = {
    "a skill edited": lambda ws: skills.update_skill(
        ws.engine, "weather", author="test", reason="test", keywords=["rain", "snow"]
    ),
    "a skill added": lambda ws: skills.save_skills(
        ws.engine, [SkillSpec(name="music", description="Songs.", keywords=("song",))]
    ),
    "a skill forked by the project": lambda ws: skills.update_project_skill(
        ws.engine, "weather", "default", author="test", reason="test", keywords=["hail"]
    ),
    "a skill rolled back": lambda ws: (
        skills.update_skill(ws.engine, "weather", author="t", reason="t", keywords=["hail"]),
        _full(ws, "will it snow or hail"),
        skills.rollback_skill(ws.engine, "weather", 1, author="t"),
    ),
    "a SKILL.md example removed": lambda ws: (
        skills.update_skill(ws.engine, "weather", author="t", reason="t", examples=["hail?"]),
        _full(ws, "will it snow or hail"),
        routing_examples.remove(ws, "weather", "md1"),
    ),
    "a proposal approved": _approve_a_proposal,
    "an example added": lambda ws: routing_examples.add_example(ws, "weather", "hail?"),
    "an example removed": lambda ws: routing_examples.remove_example(
        ws, routing_examples.list_examples(ws, "billing")[-1].id
    ),
    "a 👍 adds an example": lambda ws: _vote(ws, "up"),
    "a 👎 takes it back": lambda ws: _vote(ws, "down"),
    "amelio.toml edited": lambda ws: (ws.root / "amelio.toml").write_text(
        "router_limit = 2\n", encoding="utf-8"
    ),
    "an AMELIO_ variable set": lambda ws: __import__("os").environ.__setitem__(
        "AMELIO_ROUTER_MIN_SCORE", "0.5"
    ),
    "an AMELIO_ variable in lower case": lambda ws: __import__("os").environ.__setitem__(
        "amelio_router_limit", "3"
    ),
    "another Amelio version": lambda ws: setattr(route_snapshot, "__version__", "99.0"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_makes_the_snapshot_stale_and_the_next_run_saves_a_new_one(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    monkeypatch.setattr(route_snapshot, "__version__", route_snapshot.__version__)  # restored
    monkeypatch.setenv("AMELIO_ROUTER_MIN_SCORE", "")  # so the tests can set it
    monkeypatch.delenv("AMELIO_ROUTER_MIN_SCORE")
    monkeypatch.setenv("amelio_router_limit", "5")
    routing_examples.add_example(ws, "billing", "I was billed twice")
    message = "will it snow or hail"
    _full(ws, message)
    assert _fast(ws, message) is not None
    CHANGES[change](ws)
    assert _fast(ws, message) is None, f"{change}: the old snapshot was used"
    fresh = _full(ws, message)
    assert _fast(ws, message) == fresh


def test_the_newest_example_taken_back_then_another_added_makes_the_snapshot_stale(
    ws: Workspace,
) -> None:
    """A 👎 deletes its example's row, and SQLite gives that id to the next example:
    the stamp must still move (it holds the newest creation time too)."""
    from amelio.assistant.quality import give_answer_feedback
    from amelio.assistant.respond import log_exchange

    for text in EXAMPLES["weather"][:3]:
        routing_examples.add_example(ws, "weather", text)
    kept = log_exchange(ws, "hail storm tonight", "Stay in.", project="default", skills=["weather"])
    give_answer_feedback(ws, kept.interaction_id, "up", user="u")
    newest = routing_examples.list_examples(ws, "weather")[0]
    assert newest.text == "hail storm tonight"
    message = "hail storm tonight"
    _full(ws, message)
    assert _fast(ws, message) is not None
    give_answer_feedback(ws, kept.interaction_id, "down", user="u")  # the row is deleted
    again = routing_examples.add_example(ws, "billing", "hail storm tonight")
    assert again.id == newest.id  # the id is given again: (count, last id) did not move
    assert _fast(ws, message) is None
    fresh = _full(ws, message)
    assert _fast(ws, message) == fresh


def test_a_plugin_cannot_replace_a_builtin_scorer_behind_its_snapshot(ws: Workspace) -> None:
    """A snapshot holds a built-in scorer's index: were a plugin able to register a
    scorer under a built-in's name, the snapshot would route with the wrong one.
    The plugin is refused, so the built-in routes, and the snapshot is its own."""
    from collections.abc import Callable

    from amelio.hookspecs import hookimpl
    from amelio.plugins import get_plugin_manager
    from amelio.routing import Scorer

    def first(skills_: object) -> object:
        return lambda message: {0: (9.0, ["plugin"])}

    class Plugin:
        @hookimpl
        def register_router_scorers(self, register: Callable[[Scorer], None]) -> None:
            register(Scorer("bm25", first))

    pm = get_plugin_manager()
    plugin = Plugin()
    pm.register(plugin)
    try:
        route = _full(ws, MESSAGES[2], scorer="bm25")
        assert snapshot_path(ws.root, "default", "bm25").exists()
        assert _fast(ws, MESSAGES[2], scorer="bm25") == route
    finally:
        pm.unregister(plugin)
    hits = route["skills"]
    assert isinstance(hits, list)
    assert not any("plugin" in hit["matched"] for hit in hits)
    assert _full(ws, MESSAGES[2], scorer="bm25") == route  # as the built-in routes alone


def test_a_package_installed_makes_the_snapshot_stale(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import sys

    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    _full(ws, MESSAGES[0])
    assert _fast(ws, MESSAGES[0]) is not None
    (site / "some_plugin-1.0.dist-info").mkdir()  # as pip install does
    os.utime(site, ns=(1, 1))  # a time that differs whatever the clock's resolution
    assert _fast(ws, MESSAGES[0]) is None
    _full(ws, MESSAGES[0])
    assert _fast(ws, MESSAGES[0]) is not None


def test_a_database_restored_from_before_a_write_is_another_generation(
    ws: Workspace, tmp_path: Path
) -> None:
    """A backup restored after the snapshot was made, then written to as often as
    the original was since the backup: a count of writes would match the snapshot
    again; the random generation does not."""
    import sqlite3
    from contextlib import closing

    def copy(source: Path, target: Path) -> None:  # as SQLite's online backup does
        with closing(sqlite3.connect(source)) as a, closing(sqlite3.connect(target)) as b:
            a.backup(b)

    database = ws.root / ".amelio" / "amelio.db"
    copy(database, tmp_path / "backup.db")
    skills.update_skill(ws.engine, "weather", author="t", reason="t", keywords=["hail"])
    assert _full(ws, "hail")["skills"][0]["name"] == "weather"
    assert _fast(ws, "hail") is not None
    copy(tmp_path / "backup.db", database)
    skills.update_skill(ws.engine, "billing", author="t", reason="t", keywords=["hail"])
    assert _fast(ws, "hail") is None
    assert _full(ws, "hail")["skills"][0]["name"] == "billing"


def test_a_write_from_another_process_makes_the_snapshot_stale(ws: Workspace) -> None:
    import subprocess
    import sys

    writes = {
        "skill": "skills.update_skill(ws.engine, 'weather', author='t', reason='t', "
        "keywords=['hail'])",
        "example": "examples.add_example(ws, 'weather', 'hail?')",
    }
    for what, call in writes.items():
        _full(ws, "hail")
        assert _fast(ws, "hail") is not None
        code = (
            "from amelio import skills\n"
            "from amelio.routing import examples\n"
            "from amelio.workspace.folder import open_workspace\n"
            f"ws = open_workspace({str(ws.root)!r})\n{call}\nws.dispose()\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert _fast(ws, "hail") is None, f"a {what} written by another process was not seen"


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "not json", "huge header", "another generation", "missing database"],
)
def test_a_damaged_snapshot_is_ignored_and_replaced(ws: Workspace, damage: str) -> None:
    full = _full(ws, MESSAGES[0])
    path = snapshot_path(ws.root, "default", None)
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    if damage == "another generation":
        header["generation"] += 1
    elif damage == "missing database":
        header["database"] = str(ws.root / "gone.db")
    encoded = json.dumps(header).encode()
    path.write_bytes(
        {
            "empty": b"",
            "truncated": raw[: size // 2],
            "not json": raw[:8] + b"{" * size + raw[8 + size :],
            "huge header": (2**62).to_bytes(8, "little") + raw[8:],
            "another generation": len(encoded).to_bytes(8, "little") + encoded + raw[8 + size :],
            "missing database": len(encoded).to_bytes(8, "little") + encoded + raw[8 + size :],
        }[damage]
    )
    assert _fast(ws, MESSAGES[0]) is None
    assert not (ws.root / "gone.db").exists()  # read-only: nothing was created
    assert _full(ws, MESSAGES[0]) == full
    assert _fast(ws, MESSAGES[0]) == full


def test_the_snapshot_is_private_and_holds_no_code(ws: Workspace) -> None:
    _full(ws, MESSAGES[0])
    path = snapshot_path(ws.root, "default", None)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent == ws.root / ".amelio" / "cache"
    assert not list(path.parent.glob(".*"))  # no partial file left behind
    header = _header(ws)
    assert header["format"] == route_snapshot.FORMAT
    assert {s["name"] for s in header["skills"]} == {"billing", "travel", "weather"}


def test_the_routing_generation_moves_with_each_write_and_only_then(
    workspace: Workspace, tmp_path: Path
) -> None:
    """On both databases: a write commits a new generation with it; a write that
    changes nothing, or fails and rolls back, leaves it as it was."""
    from amelio.errors import Conflict
    from amelio.skills.store import routing_generation

    folder = _skills(tmp_path / "skills")
    skills.import_skills(workspace.engine, folder)
    seen = [routing_generation(workspace.engine)]

    def moved() -> bool:
        seen.append(routing_generation(workspace.engine))
        return seen[-1] != seen[-2]

    skills.import_skills(workspace.engine, folder)  # every skill unchanged
    assert not moved()
    skills.update_skill(workspace.engine, "weather", author="t", reason="t", keywords=["hail"])
    assert moved()
    with pytest.raises(Conflict):
        skills.update_skill(
            workspace.engine, "weather", author="t", reason="t", keywords=["x"], expected_version=1
        )
    assert not moved()
    example = routing_examples.add_example(workspace, "weather", "hail?")
    assert moved()
    routing_examples.remove_example(workspace, example.id or 0)
    assert moved()
    routing_examples.remove_example(workspace, example.id or 0)  # removed already
    assert not moved()
    assert len(set(seen)) == 4


def test_only_a_sqlite_workspace_gets_a_snapshot(workspace: Workspace, tmp_path: Path) -> None:
    skills.import_skills(workspace.engine, _skills(tmp_path / "more"))
    route = route_and_save(workspace, MESSAGES[0], project="default")
    saved = snapshot_path(workspace.root, "default", None).exists()
    assert route.top is not None and route.top.name == "billing"
    assert saved == (workspace.engine.dialect.name == "sqlite")


def test_the_command_routes_from_the_snapshot_and_prints_the_same(ws: Workspace) -> None:
    runner = CliRunner()
    args = ["-w", str(ws.root), "route", MESSAGES[0], "--json"]
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert snapshot_path(ws.root, "default", None).is_file()
    second = runner.invoke(main, args)
    assert second.exit_code == 0 and second.output == first.output
    assert json.loads(second.output)["skills"][0]["name"] == "billing"
    table = runner.invoke(main, ["-w", str(ws.root), "route", MESSAGES[0]])
    assert table.exit_code == 0 and "billing" in table.output
    unknown = runner.invoke(main, ["-w", str(ws.root), "route", "hi", "--scorer", "nope"])
    assert unknown.exit_code == 1 and "Unknown router scorer 'nope'" in unknown.output
    missing = runner.invoke(main, ["-w", str(ws.root), "route", "hi", "-p", "nope"])
    assert missing.exit_code == 1 and "No project named 'nope'" in missing.output
