"""Learnings: storage, dedup, the learnings.md mirror both ways, the prompt block."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from amelio import skills
from amelio.assistant import learnings
from amelio.assistant.learnings import (
    HEADERS,
    add_learning,
    delete_learning,
    learnings_path,
    list_learnings,
    parse_learnings_md,
    prompt_block,
    record_outcome,
    sync_file,
)
from amelio.assistant.prompt import build_prompt
from amelio.errors import InvalidInput, NotFound
from amelio.workspace.folder import Workspace, init_workspace, open_workspace

T0 = datetime(2026, 4, 3, 14, 22, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_add_list_delete(workspace: Workspace) -> None:
    first, outcome = add_learning(
        workspace, "Avoid sudo in deployment scripts", source="negative", at=at(0)
    )
    assert outcome == "added" and first.source == "negative" and first.status == "active"
    add_learning(
        workspace, "Always use t-call for translations in Odoo QWeb", source="fixit", at=at(5)
    )
    assert [i.rule for i in list_learnings(workspace)] == [
        "Always use t-call for translations in Odoo QWeb",
        "Avoid sudo in deployment scripts",
    ]
    gone = delete_learning(workspace, first.id)
    assert gone.status == "retired" and gone.retired_reason == "deleted"
    assert [i.id for i in list_learnings(workspace)] != [first.id]
    assert first.id in [i.id for i in list_learnings(workspace, include_retired=True)]
    with pytest.raises(NotFound):
        delete_learning(workspace, 999)


@pytest.mark.parametrize(
    ("rule", "source", "field"),
    [("   ", "manual", "rule"), ("x" * 2001, "manual", "rule"), ("ok", "gossip", "source")],
)
def test_bad_learnings_are_refused(
    workspace: Workspace, rule: str, source: str, field: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        add_learning(workspace, rule, source=source)
    assert info.value.details["field"] == field
    assert list_learnings(workspace) == []


def test_same_rule_is_stored_once_and_near_duplicates_merge(workspace: Workspace) -> None:
    one, _ = add_learning(workspace, "Always use t-call for translations in Odoo QWeb", at=at(0))
    same, outcome = add_learning(
        workspace, "  always USE t-call for translations in odoo QWeb!", at=at(1)
    )
    assert (same.id, outcome, same.occurrences) == (one.id, "merged", 2)
    near, outcome = add_learning(
        workspace, "Always use t-call for the translations in Odoo QWeb templates", at=at(2)
    )
    assert (near.id, outcome) == (one.id, "merged")
    other, outcome = add_learning(workspace, "Never use sudo in deployment scripts", at=at(3))
    assert outcome == "added" and other.id != one.id
    assert len(list_learnings(workspace)) == 2


def test_scope_widens_when_the_same_rule_comes_for_two_skills(workspace: Workspace) -> None:
    a, _ = add_learning(workspace, "Quote every identifier", skill="sql-review")
    b, _ = add_learning(workspace, "Quote every identifier", skill="code-review")
    assert a.id == b.id and b.skill is None


def test_projects_are_separate(workspace: Workspace) -> None:
    add_learning(workspace, "Rule for acme", project="acme")
    assert list_learnings(workspace) == []
    assert [i.rule for i in list_learnings(workspace, project="acme")] == ["Rule for acme"]


def test_file_mirrors_database_in_seed_format(workspace: Workspace) -> None:
    add_learning(
        workspace, "Always use t-call for translations in Odoo QWeb", source="fixit", at=at(0)
    )
    add_learning(
        workspace,
        "Avoid sudo in deployment scripts",
        source="negative",
        skill="deployment",
        at=at(48),
    )
    text = learnings_path(workspace, "default").read_text()
    assert text.startswith("# Learnings\n")
    assert (
        "- [2026-04-03T14:22:00Z] [fixit] Always use t-call for translations in Odoo QWeb" in text
    )
    assert "## Skill: deployment\n\n- [2026-04-03T15:10:00Z] [negative] Avoid sudo" in text
    entries, errors = parse_learnings_md(text)
    assert errors == []
    assert [(e.rule, e.source, e.at, e.skill) for e in entries] == [
        ("Always use t-call for translations in Odoo QWeb", "fixit", at(0), None),
        ("Avoid sudo in deployment scripts", "negative", at(48), "deployment"),
    ]


def test_hand_edits_are_read_back_and_bad_lines_kept(workspace: Workspace) -> None:
    keep, _ = add_learning(workspace, "Keep answers short", at=at(0))
    drop, _ = add_learning(workspace, "Drop me", at=at(1))
    path = learnings_path(workspace, "default")
    text = path.read_text()
    text = text.replace(f"- [{'2026-04-03T14:23:00Z'}] [manual] Drop me\n", "")
    text += (
        "- [2026-05-01T10:00:00Z] [fixit] Cite the ticket number\n"
        "- [yesterday] [fixit] Bad time\n"
        "- [2026-05-01T10:00:00Z] [gossip] Bad source\n"
        "just some words\n"
        "\n## Skill: git-help\n\n"
        "- [2026-05-02T10:00:00Z] [manual] Prefer --force-with-lease\n"
    )
    path.write_text(text)

    report = sync_file(workspace)
    assert (report.added, report.retired) == (2, 1)
    assert [(e.line, e.message.split(" ")[0]) for e in report.errors] == [
        (11, "bad"),
        (12, "unknown"),
        (13, "expected"),
    ]
    by_rule = {i.rule: i for i in list_learnings(workspace, include_retired=True)}
    assert by_rule["Drop me"].status == "retired"
    assert by_rule["Drop me"].retired_reason == "removed from learnings.md"
    assert by_rule["Cite the ticket number"].created_at == datetime(2026, 5, 1, 10, tzinfo=UTC)
    assert by_rule["Prefer --force-with-lease"].skill == "git-help"
    assert by_rule["Keep answers short"].id == keep.id and drop.id != keep.id

    rewritten = path.read_text()
    assert "## Unreadable lines" in rewritten
    for bad in ("- [yesterday] [fixit] Bad time", "[gossip] Bad source", "just some words"):
        assert bad in rewritten
    # Reading the canonical file again changes nothing and still reports the kept lines.
    assert sync_file(workspace).changed is False
    path.write_text(rewritten + "\n")
    again = sync_file(workspace)
    assert (again.added, again.retired, len(again.errors)) == (0, 0, 3)


def test_round_trip_file_to_fresh_database(workspace: Workspace, tmp_path: Path) -> None:
    add_learning(workspace, "Rule one", source="fixit", at=at(0))
    add_learning(workspace, "Rule two", source="sage", skill="deployment", at=at(1))
    text = learnings_path(workspace, "default").read_text()
    fresh, _ = init_workspace(tmp_path / "fresh")
    try:
        learnings_path(fresh, "default").parent.mkdir(parents=True, exist_ok=True)
        learnings_path(fresh, "default").write_text(text)
        sync_file(fresh)
        assert [(i.rule, i.source, i.skill, i.created_at) for i in list_learnings(fresh)] == [
            (i.rule, i.source, i.skill, i.created_at) for i in list_learnings(workspace)
        ]
        assert learnings_path(fresh, "default").read_text() == text
    finally:
        fresh.dispose()


RULES = (
    "Cache the pages",
    "Check the sizes",
    "Quote the names",
    "Trim the inputs",
    "Sort the tables",
)


def test_prompt_block_budget_newest_first_whole_rules(workspace: Workspace) -> None:
    for n, rule in enumerate(RULES):
        add_learning(workspace, rule, at=at(n))
    line = len("- Cache the pages")  # 17 chars each
    block = prompt_block(workspace, budget=line * 2 + 1)
    assert block.text.splitlines() == [HEADERS["en"], "- Sort the tables", "- Trim the inputs"]
    # One character short of the second rule: never half a rule.
    assert len(prompt_block(workspace, budget=line * 2).text.splitlines()) == 2
    assert prompt_block(workspace, budget=line - 1).text == ""
    assert prompt_block(workspace, budget=0) == learnings.LearningsBlock("", ())
    # A long rule that does not fit is skipped; later short ones still fill the budget.
    add_learning(workspace, "L" * 500, at=at(10))
    lines = prompt_block(workspace, budget=60).text.splitlines()[1:]
    assert lines[0] == "- Sort the tables" and len(lines) == 3


def test_skill_scoped_learnings_only_with_their_skill(workspace: Workspace) -> None:
    add_learning(workspace, "Global rule", at=at(0))
    add_learning(workspace, "Deployment rule", skill="deployment", at=at(1))
    assert "Deployment rule" not in prompt_block(workspace).text
    assert "Deployment rule" in prompt_block(workspace, skills=["deployment"]).text


def test_helpful_ordering_and_retirement(workspace: Workspace) -> None:
    old, _ = add_learning(workspace, "Old but helpful rule", at=at(0))
    new, _ = add_learning(workspace, "New unproven rule", at=at(1))
    record_outcome(workspace, [old.id], helpful=True)
    assert prompt_block(workspace).ids == (new.id, old.id)
    assert prompt_block(workspace, ordering="helpful").ids == (old.id, new.id)
    assert record_outcome(workspace, [new.id], helpful=False) == []  # under the minimum (2)
    assert record_outcome(workspace, [new.id], helpful=False) == [new.id]
    retired = {i.id: i for i in list_learnings(workspace, include_retired=True)}[new.id]
    assert retired.status == "retired" and retired.harmful == 2
    assert retired.rule == "New unproven rule"  # retired, never rewritten
    assert "New unproven rule" not in learnings_path(workspace, "default").read_text()


def test_french_header_and_custom_header(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_learning(workspace, "Toujours citer la source")
    monkeypatch.setenv("AMELIO_LEARNINGS_HEADER", "fr")
    ws = open_workspace(workspace.root)
    try:
        assert prompt_block(ws).text.startswith(
            "LEARNINGS (corrections passées — suivre ces règles) :"
        )
    finally:
        ws.dispose()


def test_build_prompt_is_deterministic_and_complete(workspace: Workspace, examples: Path) -> None:
    skills.import_skills(workspace.engine, examples)
    add_learning(workspace, "Avoid sudo in deployment scripts", skill="deployment", at=at(0))
    add_learning(workspace, "Reply in the user's language", at=at(1))
    prompt = build_prompt(workspace, "deploy the api to production")
    text = prompt.text
    assert (
        text.index("SKILLS_HINT")
        < text.index("ACTIVE SKILL: deployment")
        < text.index("LEARNINGS")
        < text.index("USER MESSAGE:")
    )
    body = skills.get_skill(workspace.engine, "deployment").spec.content.strip()
    assert body in text  # the model gets the rulebook of the skill that will be judged
    assert text.startswith(workspace.settings.system_prompt)
    assert "- deployment:" in text and "Avoid sudo" in text and "user's language" in text
    assert text.endswith("USER MESSAGE:\ndeploy the api to production")
    again = build_prompt(workspace, "deploy the api to production")
    assert again.hash == prompt.hash and again.text == text
    unrelated = build_prompt(workspace, "what's for lunch?")
    assert "SKILLS_HINT" not in unrelated.text and "Avoid sudo" not in unrelated.text
    assert "ACTIVE SKILL" not in unrelated.text
    assert "user's language" in unrelated.text


def test_a_hand_edit_reaches_the_very_next_prompt(workspace: Workspace) -> None:
    """Even one that keeps the file's size and modification time (an editor or
    `cp -p` restoring the mtime, or two saves within a coarse timestamp's tick):
    the next prompt has the new rule, never the one before it."""
    import os

    learnings.add_learning(workspace, "Always greet the customer first")
    assert "greet the customer" in build_prompt(workspace, "hello").system
    path = learnings.learnings_path(workspace, "default")
    before = path.stat()
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            "Always greet the customer first", "Always thank the customer later"
        ),
        encoding="utf-8",
    )
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    system = build_prompt(workspace, "hello").system
    assert "thank the customer later" in system and "greet the customer" not in system


@pytest.mark.parametrize(("liked_before", "retired"), [(1, False), (9, True)])
def test_a_learning_is_retired_only_when_answers_got_worse_with_it(
    workspace: Workspace, examples: Path, liked_before: int, retired: bool
) -> None:
    """A 👎 says an answer had a problem, not that the learning in its prompt caused
    it. Where the skill's answers were mostly disliked before the learning (1 👍 in
    10), its answers being disliked after (4 of 4) is no evidence against it; where
    they were mostly liked (9 in 10), it is: then it goes."""
    from amelio.assistant.quality import give_answer_feedback
    from amelio.assistant.respond import respond
    from amelio.llm.fake import ScriptedProvider

    skills.import_skills(workspace.engine, examples)
    provider = ScriptedProvider(default="Use git push.")

    def answered() -> int:
        reply = respond(workspace, "git push rejected", provider=provider)
        assert reply.applied_skill == "git-help"
        return reply.interaction_id

    for i in range(10):
        kind = "up" if i < liked_before else "down"
        give_answer_feedback(workspace, answered(), kind, user=f"early-{i}")
    learning, _ = add_learning(workspace, "Always say which remote rejected it", skill="git-help")
    for i in range(4):
        give_answer_feedback(workspace, answered(), "down", user=f"late-{i}")
    after = {item.id: item for item in list_learnings(workspace, include_retired=True)}[learning.id]
    assert (after.status == "retired") is retired
    # Kept, it was blamed four times and stayed; against 9 in 10 liked, the first
    # two dislikes (the minimum) were enough, and it left the prompts.
    assert after.harmful == (2 if retired else 4)


@pytest.mark.parametrize("model", ["wordllama", ""])
def test_relevant_ordering_puts_the_closest_learning_first(
    workspace: Workspace, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for one rule, the block holds the one about the message, not the
    newest, by embeddings or (without a model) shared words; ``newest`` (the seed's
    rule) and a missing message keep the old order."""
    monkeypatch.setenv("AMELIO_SEARCH_EMBEDDING_MODEL", model)
    workspace = open_workspace(workspace.root)
    git, _ = add_learning(workspace, "Quote the exact git error before suggesting a fix", at=at(0))
    add_learning(workspace, "Address customers with vous, never tu", at=at(1))
    message = "git push was rejected with an error, what now?"
    room = len("- Quote the exact git error before suggesting a fix")
    block = prompt_block(workspace, budget=room, message=message)
    assert block.ids == (git.id,)
    assert prompt_block(workspace, budget=room, message=message, ordering="newest").ids != (git.id,)
    assert prompt_block(workspace, budget=room).ids != (git.id,)  # no message: newest first
    workspace.dispose()


def test_a_new_rule_is_inserted_into_the_mirror_as_a_full_render_would_write_it(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new learning's line is put in place without rewriting the file; the text
    is the full render's, whatever section it goes to (first of a skill, between
    two skills, after the last, global, behind unreadable lines, backdated)."""
    path = learnings_path(workspace, "default")
    rewrites: list[str] = []
    rewrite = learnings._write_file

    def counted(*args: object, **kwargs: object) -> None:
        rewrites.append("x")
        rewrite(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(learnings, "_write_file", counted)

    def full_render() -> str:
        items = list_learnings(workspace, sync=False)
        _, errors = parse_learnings_md(path.read_text())
        return learnings.render_learnings_md(items, [e.text for e in errors])

    steps = [
        ("Cache the pages", None, 0),
        ("Check the sizes", "m-skill", 1),
        ("Quote the names", "z-skill", 2),
        ("Trim the inputs", "a-skill", 3),
        ("Sort the tables", "m-skill", 4),
        ("Log the requests", None, 5),
        ("Name the branches", "q-skill", 6),
        ("Close the tickets", "m-skill", -30),  # backdated: a full rewrite places it
    ]
    for n, (rule, skill, minutes) in enumerate(steps):
        add_learning(workspace, rule, skill=skill, at=at(minutes))
        assert path.read_text() == full_render(), f"after step {n}: {rule}"
        if n == 3:  # a malformed hand edit is kept under "## Unreadable lines"
            path.write_text(path.read_text() + "- no stamp here\n")
            sync_file(workspace)
            assert "## Unreadable lines" in path.read_text()
    # The first rule (no file yet), the hand edit's sync and the backdated rule.
    assert len(rewrites) == 3
