"""respond(), feedback and quality metrics, through the library, the API and the CLI."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.assistant import learnings
from amelio.assistant.quality import give_answer_feedback, quality_metrics
from amelio.assistant.respond import Reply, get_interaction, respond, respond_stream
from amelio.cli import main
from amelio.db.schema import eval_results, feedback, interactions
from amelio.errors import LLMNotConfigured, NotFound
from amelio.llm import TextDelta
from amelio.server import create_app
from amelio.testing import FakeLLMServer, ThreadedServer
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, init_workspace, open_workspace

FORCE = "Run git push --force and you are done."
SAFE = "Run `git pull --rebase`, then git push --force-with-lease."


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as s:
        yield s


@pytest.fixture
def ws(
    workspace: Workspace, examples: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Workspace]:
    server.reset()
    skills.import_skills(workspace.engine, examples)
    monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
    monkeypatch.setenv("AMELIO_LLM_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
    opened = open_workspace(workspace.root)
    yield opened
    opened.dispose()


def test_respond_routes_prompts_evaluates_and_records(ws: Workspace, server: FakeLLMServer) -> None:
    learnings.add_learning(ws, "Prefer --force-with-lease", skill="git-help")
    server.reply(FORCE)
    reply = respond(ws, "git push rejected, help", user="alice")
    assert reply.applied_skill == "git-help"
    assert reply.answer == FORCE
    assert reply.footnotes == ("⚠️ Never suggest --force (use --force-with-lease)",)
    assert reply.text == FORCE + "\n\n" + reply.footnotes[0]
    assert reply.evals.success is False
    sent = server.requests[-1]
    assert "SKILLS_HINT" in sent.system and "- git-help:" in sent.system
    assert "Prefer --force-with-lease" in sent.system
    assert sent.prompt == "git push rejected, help"

    stored = get_interaction(ws, reply.interaction_id)
    assert stored["answer"] == FORCE and stored["appliedSkill"] == "git-help"
    assert stored["skillVersion"] == 1 and stored["success"] is False
    assert stored["promptHash"] == reply.prompt_hash and len(stored["learningsUsed"]) == 1
    assert stored["hinted"][0]["name"] == "git-help"
    assert stored["model"] == "fake-model" and stored["inputTokens"] > 0
    assert [e["ruleId"] for e in stored["evals"] if not e["passed"]] == ["gh-001"]
    with ws.engine.connect() as conn:
        ref = conn.scalar(sa.select(interactions.c.user_ref))
    assert ref and "alice" not in ref
    if ws.engine.dialect.name == "postgresql":
        # The interaction's write relaxes its own commit only: every pooled
        # connection still commits as the server is configured.
        held = [ws.engine.connect() for _ in range(ws.engine.pool.checkedin() + 1)]
        try:
            assert {c.exec_driver_sql("SHOW synchronous_commit").scalar() for c in held} == {"on"}
        finally:
            for c in held:
                c.close()

    server.reply(SAFE)
    assert respond(ws, "git push rejected").footnotes == ()
    with pytest.raises(NotFound):
        get_interaction(ws, 999)


@pytest.mark.parametrize("commit", ["durable", "fast"])
def test_interaction_commit_decides_whether_postgresql_waits_for_the_disk(
    postgres_url: str,
    tmp_path: Path,
    examples: Path,
    monkeypatch: pytest.MonkeyPatch,
    commit: str,
) -> None:
    """Both values store the interaction and its eval results; ``fast`` sends the one
    statement that turns synchronous_commit off inside its own transaction, and
    ``durable`` one that leaves the server's setting alone."""
    from amelio.llm.fake import ScriptedProvider

    monkeypatch.setenv("AMELIO_DATABASE_URL", postgres_url)
    monkeypatch.setenv("AMELIO_INTERACTION_COMMIT", commit)
    ws, _ = init_workspace(tmp_path / "ws")
    try:
        skills.import_skills(ws.engine, examples)
        sent: list[tuple[str, object]] = []

        def record(*args: object) -> None:
            statement, parameters = str(args[2]), args[3]
            if "INSERT INTO interactions" in statement:
                sent.append((statement, parameters))

        sa.event.listen(ws.engine, "before_cursor_execute", record)
        reply = respond(ws, "git push rejected", provider=ScriptedProvider(default=FORCE))
        stored = get_interaction(ws, reply.interaction_id)
        assert stored["answer"] == FORCE and stored["appliedSkill"] == "git-help"
        assert [e["ruleId"] for e in stored["evals"] if not e["passed"]] == ["gh-001"]
        assert len(stored["evals"]) == len(reply.evals.results) > 1
        assert len(sent) == 1
        statement, parameters = sent[0]
        with ws.engine.connect() as conn:
            with conn.begin() as transaction:  # the very statement, in a transaction we keep open
                conn.exec_driver_sql(statement, parameters)  # type: ignore[arg-type]
                inside = conn.exec_driver_sql("SELECT current_setting('synchronous_commit')")
                assert inside.scalar() == ("off" if commit == "fast" else "on")
                transaction.rollback()
            assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"
    finally:
        ws.dispose()


def test_no_skill_matches_means_no_rules(ws: Workspace, server: FakeLLMServer) -> None:
    server.reply("Paris.")
    reply = respond(ws, "what is the capital of France")
    assert reply.applied_skill is None and reply.evals.results == () and reply.evals.success


def test_without_llm_chat_says_how_to_configure(workspace: Workspace) -> None:
    with pytest.raises(LLMNotConfigured, match="AMELIO_LLM_PROVIDER"):
        respond(workspace, "hello")
    assert learnings.list_learnings(workspace) == []  # nothing else broke


def test_stream_yields_tokens_then_reply(ws: Workspace, server: FakeLLMServer) -> None:
    server.reply(FORCE)
    events = list(respond_stream(ws, "git push rejected"))
    assert all(isinstance(e, TextDelta) for e in events[:-1]) and len(events) > 3
    final = events[-1]
    assert isinstance(final, Reply)
    assert "".join(e.text for e in events[:-1]) == final.answer == FORCE
    assert final.footnotes


def test_feedback_comments_become_learnings_in_the_next_prompt(
    ws: Workspace, server: FakeLLMServer
) -> None:
    server.reply(FORCE)
    first = respond(ws, "git push rejected after rebase")
    result = give_answer_feedback(
        ws, first.interaction_id, "down", comment="Explain why the push was rejected"
    )
    assert result.learning is not None
    assert result.learning.rule == "Explain why the push was rejected"
    assert result.learning.source == "negative" and result.learning.skill == "git-help"
    fix = give_answer_feedback(
        ws, first.interaction_id, "fixit", comment="Never suggest a plain force push"
    )
    assert fix.learning is not None and fix.learning.rule == "Never suggest a plain force push"
    assert fix.learning.source == "fixit"

    server.reply(SAFE)
    respond(ws, "git push rejected again")
    system = server.requests[-1].system
    assert "Never suggest a plain force push" in system
    assert "Explain why the push was rejected" in system


def test_feedback_without_a_comment_is_feedback_not_a_learning(
    ws: Workspace, server: FakeLLMServer
) -> None:
    """A bare 👎 or Fix It says the answer was wrong, not what to do instead: it counts
    in the metrics, and no rule like "Fix requested for: …" reaches the prompts."""
    server.reply(FORCE)
    first = respond(ws, "git push rejected after rebase")
    down = give_answer_feedback(ws, first.interaction_id, "down", user="ann")
    fix = give_answer_feedback(ws, first.interaction_id, "fixit", user="bob", comment="  ")
    assert down.learning is None and fix.learning is None
    assert learnings.list_learnings(ws) == []
    assert not learnings.learnings_path(ws, "default").exists()
    with ws.engine.connect() as conn:
        stored = conn.execute(sa.select(feedback.c.kind, feedback.c.learning_id)).all()
    assert sorted(stored) == [("down", None), ("fixit", None)]
    [metrics] = quality_metrics(ws, "default")
    assert (metrics.feedback_negative, metrics.feedback_fixit) == (2, 1)

    server.reply(SAFE)
    respond(ws, "git push rejected again")
    system = server.requests[-1].system
    assert "LEARNINGS" not in system and "git push rejected after rebase" not in system


def test_votes_count_once_per_user_last_one_stands(ws: Workspace, server: FakeLLMServer) -> None:
    server.reply(FORCE)
    reply = respond(ws, "git push rejected")
    why = "Warn before any force push"
    give_answer_feedback(ws, reply.interaction_id, "down", user="bob", comment=why)
    give_answer_feedback(ws, reply.interaction_id, "down", user="bob", comment=why)
    changed = give_answer_feedback(ws, reply.interaction_id, "up", user="bob")
    assert changed.replaced == "down"
    give_answer_feedback(ws, reply.interaction_id, "up", user="carol")
    with ws.engine.connect() as conn:
        rows = conn.execute(sa.select(feedback.c.kind).order_by(feedback.c.id)).scalars().all()
    assert rows == ["up", "up"]
    [metrics] = quality_metrics(ws, "default")
    assert (metrics.feedback_positive, metrics.feedback_negative) == (2, 0)
    assert len(learnings.list_learnings(ws)) == 1  # bob's 👎 still taught once
    with pytest.raises(NotFound):
        give_answer_feedback(ws, 12345, "up")


def test_helpful_and_harmful_counters(ws: Workspace, server: FakeLLMServer) -> None:
    scoped, _ = learnings.add_learning(ws, "Explain each git flag", skill="git-help")
    general, _ = learnings.add_learning(ws, "Answer in the user's language")
    for user in ("u1", "u2"):
        server.reply(SAFE)
        reply = respond(ws, "git push rejected")
        give_answer_feedback(ws, reply.interaction_id, "up", user=user)
    server.reply(FORCE)
    for user in ("u1", "u2", "u3"):
        reply = respond(ws, "git push rejected")
        result = give_answer_feedback(ws, reply.interaction_id, "down", user=user)
    by_id = {i.id: i for i in learnings.list_learnings(ws, include_retired=True)}
    assert (by_id[general.id].helpful, by_id[general.id].harmful) == (2, 0)
    assert by_id[scoped.id].harmful == 3 and by_id[scoped.id].status == "retired"
    assert scoped.id in result.retired_learning_ids


def test_metrics_match_stored_data(ws: Workspace, server: FakeLLMServer) -> None:
    for answer in (FORCE, SAFE, FORCE, SAFE, SAFE):
        server.reply(answer)
        respond(ws, "git push rejected")
    server.reply("Rollback plan: redeploy v1. Verify with a smoke test.")
    respond(ws, "deploy the api to production")
    metrics = {m.skill: m for m in quality_metrics(ws)}
    git = metrics["git-help"]
    assert (git.applied_count, git.success_count) == (5, 3)
    assert git.success_rate == pytest.approx(0.6)
    assert git.rule_failures == {"gh-001": 2}
    assert metrics["deployment"].applied_count == 1
    with ws.engine.connect() as conn:
        stored = conn.execute(
            sa.select(sa.func.count())
            .select_from(eval_results)
            .where(sa.not_(eval_results.c.passed))
        ).scalar()
    assert stored == sum(sum(m.rule_failures.values()) for m in metrics.values())
    assert git.to_dict()["ruleFailures"][0] == {
        "ruleId": "gh-001",
        "name": "Never suggest --force (use --force-with-lease)",
        "count": 2,
    }


# -- API ------------------------------------------------------------------------------


@pytest.fixture
def api(ws: Workspace) -> Iterator[tuple[TestClient, dict[str, str]]]:
    _, token = keys.create_key(ws.engine, name="bot", role="bot")
    with TestClient(create_app(ws)) as client:
        yield client, {"Authorization": f"Bearer {token}"}


def test_chat_feedback_and_quality_routes(
    api: tuple[TestClient, dict[str, str]], server: FakeLLMServer
) -> None:
    client, h = api
    server.reply(FORCE)
    r = client.post("/v1/chat", headers=h, json={"message": "git push rejected", "user": "u"})
    body = r.json()
    assert r.status_code == 200
    assert set(body) >= {"interactionId", "text", "footnotes", "skills", "evals"}
    assert body["evals"]["success"] is False and body["footnotes"]
    iid = body["interactionId"]
    r = client.post(
        f"/v1/interactions/{iid}/feedback",
        headers=h,
        json={"kind": "fixit", "comment": "Use --force-with-lease"},
    )
    assert r.status_code == 200 and r.json()["learning"]["rule"] == "Use --force-with-lease"
    assert (
        client.post(f"/v1/interactions/{iid}/feedback", headers=h, json={"kind": "meh"}).status_code
        == 422
    )
    assert (
        client.post("/v1/interactions/999/feedback", headers=h, json={"kind": "up"}).status_code
        == 404
    )
    assert client.get(f"/v1/interactions/{iid}", headers=h).json()["answer"] == FORCE
    quality = client.get("/v1/quality?project=default", headers=h).json()
    assert quality["skills"][0]["skill"] == "git-help"
    assert quality["skills"][0]["appliedCount"] == 1
    assert client.get("/v1/quality?project=nope", headers=h).status_code == 404


def parse_sse(text: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_chat_stream_orders_tokens_then_done(
    api: tuple[TestClient, dict[str, str]], server: FakeLLMServer
) -> None:
    client, h = api
    server.reply(FORCE)
    r = client.post("/v1/chat/stream", headers=h, json={"message": "git push rejected"})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    names = [e for e, _ in events]
    assert names[-1] == "done" and set(names[:-1]) == {"token"} and len(names) > 3
    assert "".join(str(d["text"]) for e, d in events if e == "token") == FORCE
    done = events[-1][1]
    assert done["footnotes"] and done["interactionId"]

    server.fail(500, times=5)
    events = parse_sse(client.post("/v1/chat/stream", headers=h, json={"message": "hi"}).text)
    assert events[-1][0] == "error" and "500" in str(events[-1][1])


def test_chat_without_llm_is_503_with_instructions(workspace: Workspace) -> None:
    _, token = keys.create_key(workspace.engine, name="bot", role="bot")
    with TestClient(create_app(workspace)) as client:
        for path in ("/v1/chat", "/v1/chat/stream"):
            r = client.post(
                path, headers={"Authorization": f"Bearer {token}"}, json={"message": "hello"}
            )
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "llm_not_configured"
            assert "AMELIO_LLM_PROVIDER" in r.json()["error"]["message"]


def test_sse_relays_each_token_before_the_next_is_produced(
    ws: Workspace, server: FakeLLMServer
) -> None:
    """Over a real socket, in lockstep: the fake model produces token n+1 only once
    the client holds n token events, so a relay that buffered the answer would
    stall it (the wait gives up once, after 10 s, and the count shows it)."""
    _, token = keys.create_key(ws.engine, name="bot", role="bot")
    words = [f"w{i}" for i in range(8)]
    server.reply(" ".join(words))
    arrivals: list[str] = []
    with (
        server.lockstep(lambda: len(arrivals)) as produced,
        ThreadedServer(create_app(ws)) as live,
        httpx.stream(
            "POST",
            f"{live.url}/v1/chat/stream",
            headers={"Authorization": f"Bearer {token}"},
            json={"message": "git push rejected"},
            timeout=30,
        ) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("event: token"):
                arrivals.append(line)
    assert produced == list(range(len(words)))
    assert len(arrivals) == len(words)


# -- CLI ------------------------------------------------------------------------------


def test_cli_chat_feedback_quality(ws: Workspace, server: FakeLLMServer) -> None:
    runner = CliRunner()
    server.reply(FORCE)
    result = runner.invoke(main, ["-w", str(ws.root), "chat", "git push rejected"])
    assert result.exit_code == 0, result.output
    assert FORCE in result.stdout and "⚠️ Never suggest --force" in result.stdout
    assert "amelio feedback 1" in result.stderr
    result = runner.invoke(
        main, ["-w", str(ws.root), "feedback", "1", "down", "-m", "No force pushes"]
    )
    assert result.exit_code == 0 and "Learning" in result.stdout
    result = runner.invoke(main, ["-w", str(ws.root), "quality"])
    assert "git-help" in result.stdout and "0%" in result.stdout
    data = json.loads(runner.invoke(main, ["-w", str(ws.root), "quality", "--json"]).stdout)
    assert data[0]["feedbackNegative"] == 1
    assert runner.invoke(main, ["-w", str(ws.root), "feedback", "1", "meh"]).exit_code == 2


def test_distill_learnings_turns_a_comment_into_one_rule(
    ws: Workspace, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.reply(FORCE)
    reply = respond(ws, "git push rejected")
    monkeypatch.setenv("AMELIO_DISTILL_LEARNINGS", "true")
    monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
    distilling = open_workspace(ws.root)
    try:
        server.reply('"Never recommend a plain force push; use --force-with-lease."')
        result = give_answer_feedback(
            distilling, reply.interaction_id, "fixit", comment="dont tell ppl to force push!!"
        )
        assert result.learning is not None
        assert result.learning.rule == "Never recommend a plain force push; use --force-with-lease."
        asked = server.requests[-1]
        assert "dont tell ppl to force push!!" in asked.prompt and FORCE in asked.prompt
        # The LLM failing never loses the correction: the comment is stored as is.
        server.fail(500, times=5)
        result = give_answer_feedback(
            distilling, reply.interaction_id, "down", comment="Too terse, explain the risk"
        )
        assert result.learning is not None
        assert result.learning.rule == "Too terse, explain the risk"
    finally:
        distilling.dispose()


def test_the_service_warms_up_as_it_starts(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``warm_up`` on, starting the service loads the provider, routes each
    project and compiles the eval rules in the background, so the first answer
    finds them ready; the log says how long it took."""
    from amelio.assistant import respond as assistant
    from amelio.routing import router

    monkeypatch.setenv("AMELIO_WARM_UP", "1")
    opened = open_workspace(ws.root)
    assistant._rules_cache.clear()
    caplog.set_level(logging.INFO, logger="amelio.server")
    try:
        with TestClient(create_app(opened)):  # runs the app's lifespan, as uvicorn does
            deadline = time.monotonic() + 60  # a guard against a hang, not a measure
            while not any("warmed up" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the warm-up never finished"
                time.sleep(0.05)
        with_rules = [s for s in skills.list_skills(opened.engine, "default") if s.spec.evals]
        assert with_rules and all(
            json.dumps(list(s.spec.evals or ()), sort_keys=True, default=str)
            in assistant._rules_cache
            for s in with_rules
        )
        assert ("default", opened.settings.router_scorer) in router._routers[opened.engine]
    finally:
        opened.dispose()


def test_two_workspaces_in_one_process_keep_their_own_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled rules are cached in the process: two databases that hold different
    skills under the same id and version must each be checked by their own."""
    from amelio.assistant.respond import log_exchange

    reports = []
    for n, phrase in enumerate(("alpha", "omega")):
        monkeypatch.setenv("AMELIO_DATABASE_URL", f"sqlite:///{tmp_path / f'db{n}.db'}")
        ws, _ = init_workspace(tmp_path / f"ws{n}")
        try:
            folder = tmp_path / f"skills{n}" / "say"
            folder.mkdir(parents=True)
            (folder / "SKILL.md").write_text(
                "---\nname: say\ndescription: say the word\ntriggers: [say]\n---\n\nSay it.\n",
                encoding="utf-8",
            )
            (folder / "say.evals.json").write_text(
                json.dumps(
                    {
                        "version": 1,
                        "skill": "say",
                        "rules": [
                            {
                                "id": "s-1",
                                "name": f"Says {phrase}",
                                "type": "icontains",
                                "value": phrase,
                                "severity": "warning",
                            }
                        ],
                    }
                ),
                encoding="utf-8",
            )
            skills.import_skills(ws.engine, folder.parent)
            reply = log_exchange(ws, "say the word", "alpha", project="default", skills=["say"])
            reports.append(reply.evals.success)
        finally:
            ws.dispose()
    assert reports == [True, False]  # the second workspace's rule wants "omega"
