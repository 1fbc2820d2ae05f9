"""Before changing models: `amelio bench --model`, and shadow traffic.

A fake OpenAI-compatible server answers per model: the current model follows
git-help's rule (never a plain --force), the candidate breaks it. The two local
models' real figures come from the benchmark run docs/rollouts.md reports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from amelio import skills
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import respond
from amelio.cli import main
from amelio.errors import ConfigError, InvalidInput
from amelio.improve import model_check, shadow
from amelio.improve import proposals as props
from amelio.testing import FakeLLMServer, FakeRequest
from amelio.workspace.folder import Workspace, open_workspace

GOOD = "Run git pull --rebase, then git push --force-with-lease."
BAD = "Just run git push --force."
SAGE_MARK = "## Written for the candidate"


class Models:
    """The current model (fake-model) answers well; the candidate (weak-model) badly,
    unless the skill's rulebook carries Sage's rewrite for it."""

    def __call__(self, request: FakeRequest) -> str:
        if request.system.startswith("You are Sage"):
            current = request.prompt.split("CURRENT CONTENT:\n", 1)[1]
            body = re.split(r"\n\n(?:METRICS:|ANSWERS THAT FAILED|JUDGE|CORRECTIONS)", current)[0]
            return f"{body.strip()}\n\n{SAGE_MARK}\n\nNever write a plain force push.\n"
        if "judge" in request.system:
            if "ANSWER A:" in request.prompt:
                a, b = request.prompt.split("ANSWER A:\n", 1)[1].split("\n\nANSWER B:\n", 1)
                score = {True: 9, False: 3}
                return json.dumps(
                    {
                        "score_a": score["lease" in a],
                        "score_b": score["lease" in b],
                        "reason": "the safer command",
                    }
                )
            return json.dumps({"score": 5, "reason": "r"})
        if "realistic test messages" in request.system:
            return json.dumps(["my push was rejected", "cannot push to main"])
        if request.model == "weak-model" and SAGE_MARK not in request.system:
            return BAD
        return GOOD


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default=Models()) as fake:
        yield fake


@pytest.fixture
def ws(
    workspace: Workspace,
    examples: Path,
    server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Workspace]:
    server.reset()
    skills.import_skills(workspace.engine, examples)
    monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
    monkeypatch.setenv("AMELIO_LLM_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
    monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
    opened = open_workspace(workspace.root)
    for i, message in enumerate(("git push rejected", "my push was refused", "push to main")):
        reply = respond(opened, f"{message} ({i})")
        give_answer_feedback(opened, reply.interaction_id, "up", user=f"u{i}")
    yield opened
    opened.dispose()


def test_a_weaker_model_regresses_gets_a_proposal_benchmarked_on_it(ws: Workspace) -> None:
    weak = model_check.candidate_provider(ws.settings, "weak-model")
    report = model_check.compare_models(
        ws, weak, candidate_name="weak-model", project="default", propose=True
    )
    [git] = [s for s in report.skills if s.skill == "git-help"]
    assert report.skills[0].skill == "git-help"  # the most regressed first
    # A 👍 pins its answer: the three liked messages come back as pinned cases, once each.
    assert git.cases == {"pinned": 3} and git.pass_current == 1.0 and git.pass_candidate < 1
    assert git.regressed and git.pass_interval is not None and git.pass_interval[1] < 0
    assert git.judge_change is not None and git.judge_change < 0
    assert git.worse and "gh-001" in git.worse[0]["rules"]
    # Sage rewrote it for the weak model, and the benchmark ran on the weak model.
    assert git.proposal_id is not None and git.proposal_verdict is not None
    assert git.proposal_improvement is not None and git.proposal_improvement > 0
    proposal = props.get_proposal(ws, git.proposal_id)
    assert SAGE_MARK in proposal.proposed_content and proposal.evidence["model"] == "weak-model"
    assert "| git-help |" in report.markdown() and "**yes**" in report.markdown()


def test_the_same_model_regresses_nothing(ws: Workspace) -> None:
    same = model_check.candidate_provider(ws.settings, "fake-model")
    report = model_check.compare_models(ws, same, candidate_name="fake-model", project="default")
    assert report.regressed == [] and all(s.pass_change == 0 for s in report.skills)


def test_a_model_the_provider_refuses_is_a_clear_error(
    ws: Workspace, server: FakeLLMServer
) -> None:
    server.fail(404, times=1)
    unknown = model_check.candidate_provider(ws.settings, "no-such-model")
    with pytest.raises(ConfigError, match="refused model 'no-such-model'"):
        model_check.compare_models(ws, unknown, candidate_name="no-such-model", project="default")
    with pytest.raises(InvalidInput, match="No skill named nope"):
        model_check.compare_models(
            ws, unknown, candidate_name="x", project="default", skills=["nope"]
        )


def test_the_cli_gates_a_deployment_and_writes_markdown(ws: Workspace, tmp_path: Path) -> None:
    out = tmp_path / "check.md"
    result = CliRunner().invoke(
        main,
        ["-w", str(ws.root), "bench", "--model", "weak-model", "--no-propose",
         "--markdown", str(out), "--json"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # a skill regressed
    data = json.loads(result.output)
    assert data["regressed"] == ["git-help"] and data["candidate"] == "weak-model"
    assert "git-help" in out.read_text()
    same = CliRunner().invoke(main, ["-w", str(ws.root), "bench", "--model", "fake-model"])
    assert same.exit_code == 0, same.output
    usage = CliRunner().invoke(main, ["-w", str(ws.root), "bench"])
    assert usage.exit_code == 2 and "--model" in usage.output


def test_shadow_traffic_is_answered_after_the_user_and_compared(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_SHADOW_MODEL", "weak-model")
    monkeypatch.setenv("AMELIO_SHADOW_RATE", "1")
    shadowed = open_workspace(ws.root)
    try:
        for i in range(6):
            reply = respond(shadowed, f"git push rejected, take {i}")
            assert reply.answer == GOOD  # the user never sees the shadow answer
        assert shadow.wait_idle()
        report = model_check.compare_shadow(shadowed, "weak-model", project="default")
        [git] = report.skills
        assert report.source == "shadow" and git.cases == {"shadow": 6}
        assert git.pass_current == 1.0 and git.pass_candidate < 1.0 and git.regressed
        with pytest.raises(ConfigError, match="not 'other-model'"):
            model_check.compare_shadow(shadowed, "other-model", project="default")
    finally:
        shadowed.dispose()
    with pytest.raises(ConfigError, match="needs a second model"):
        model_check.compare_shadow(ws, "weak-model", project="default")


def test_a_shadow_rate_without_a_shadow_model_is_refused(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMELIO_SHADOW_RATE", "0.1")
    with pytest.raises(ConfigError, match="shadow_model"):
        open_workspace(workspace.root)


def test_without_sage_a_template_proposal_names_the_rules_the_candidate_breaks(
    workspace: Workspace, examples: Path, server: FakeLLMServer
) -> None:
    """No LLM configured for Sage: the regressed skill gets a template proposal, one
    instruction per rule the candidate newly fails, filed without a benchmark run."""
    from amelio.assistant.cases import pin_case
    from amelio.assistant.respond import log_exchange
    from amelio.llm.fake import ScriptedProvider

    skills.import_skills(workspace.engine, examples)
    for i in range(3):
        logged = log_exchange(
            workspace, f"git push rejected ({i})", GOOD, project="default", skills=["git-help"]
        )
        pin_case(workspace, logged.interaction_id)
    weak = model_check.candidate_provider(
        workspace.settings, "weak-model", provider="openai", base_url=server.openai_base_url
    )
    report = model_check.compare_models(
        workspace,
        weak,
        candidate_name="weak-model",
        project="default",
        skills=["git-help"],
        current=ScriptedProvider(default=GOOD),
        propose=True,
        bench=False,
    )
    [git] = report.skills
    assert git.regressed and git.lost_rules == {"gh-001": 3}
    assert git.note == "a template proposal" and git.proposal_verdict is None
    proposal = props.get_proposal(workspace, git.proposal_id or 0)
    assert proposal.proposed_by == "template" and "gh-001" in proposal.proposed_content


def test_a_full_shadow_queue_drops_the_draw_instead_of_waiting(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every slot taken, a draw is dropped and counted: the live path never
    waits for a shadow answer."""
    import threading

    from amelio.llm import LLMRequest

    monkeypatch.setenv("AMELIO_SHADOW_MODEL", "weak-model")
    monkeypatch.setenv("AMELIO_SHADOW_RATE", "1")
    shadowed = open_workspace(ws.root)
    slots = threading.BoundedSemaphore(1)
    monkeypatch.setattr(shadow, "_SLOTS", slots)
    try:
        assert slots.acquire(blocking=False)  # the one slot is busy
        before = shadow.dropped()
        request = LLMRequest.single("system", "git push rejected")
        assert shadow.maybe_shadow(shadowed, request, None, 1) is False
        assert shadow.dropped() == before + 1
        slots.release()
    finally:
        shadowed.dispose()
