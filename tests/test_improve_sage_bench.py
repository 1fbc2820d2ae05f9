"""Sage rewrites and A/B benchmarks, against a fake LLM server speaking the real protocol."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from amelio import skills
from amelio.cli import main
from amelio.errors import InvalidInput
from amelio.improve import proposals as props
from amelio.improve.bench import list_benchmarks, parse_judge, parse_scenarios_option, run_benchmark
from amelio.improve.sage import SageRejected, analyze, improve_with_sage, parse_sage_answer
from amelio.llm import Completion, LLMRequest
from amelio.llm.fake import ScriptedProvider
from amelio.server import create_app
from amelio.stats import bootstrap_mean, min_scenarios, wilcoxon_signed_rank
from amelio.testing import FakeLLMServer, FakeRequest
from amelio.workspace import keys
from amelio.workspace.folder import Workspace, open_workspace

FORCE = "Run git push --force."
SAFE = "Run `git pull --rebase`, then git push --force-with-lease."
MARKER = "Force pushes (rule FWL-7)"


def test_the_fewest_scenarios_that_can_be_significant() -> None:
    assert [min_scenarios(c) for c in (0.9, 0.95, 0.99)] == [5, 6, 8]
    for confidence in (0.9, 0.95, 0.99):  # a clean sweep of that many is significant
        n = min_scenarios(confidence)
        assert wilcoxon_signed_rank([1.0] * n) < 1 - confidence
        assert wilcoxon_signed_rank([1.0] * (n - 1)) >= 1 - confidence


def test_wilcoxon_exact_values() -> None:
    assert wilcoxon_signed_rank([1, 2, 3]) == pytest.approx(0.25)  # 3 of 3 proves nothing
    assert wilcoxon_signed_rank([1] * 8) == pytest.approx(2 / 256)
    assert wilcoxon_signed_rank([1, 2, 3, 4, 5, 6, 7, -0.5]) == pytest.approx(0.015625)
    assert wilcoxon_signed_rank([1, -1, 2, -2]) == 1.0
    assert wilcoxon_signed_rank([0, 0]) == 1.0
    _, low, high = bootstrap_mean([1.0, 2.0, 3.0], seed=1)
    assert 1.0 <= low <= 2.0 <= high <= 3.0


def test_parse_sage_answer() -> None:
    current = "# Git\n\n" + "1. Be careful with history.\n" * 10
    new = current + "2. Never suggest a plain force push.\n"
    assert parse_sage_answer("NO_CHANGE", current) is None
    assert parse_sage_answer("  NO_CHANGE.  ", current) is None
    assert parse_sage_answer(f"```markdown\n{new}```", current) == new
    assert parse_sage_answer(current, current) is None
    # A heading the skill itself already has is its own, not an echo.
    own = "# Git\n\nMETRICS: we count pushes.\n" + "1. Be careful with history.\n" * 10
    assert parse_sage_answer(own + "2. Use --force-with-lease.\n", own) is not None
    for bad, why in [
        ("", "empty"),
        ("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y", "diff"),
        ("# Git\n\n(rest unchanged)\n" + "x" * 400, "elides"),
        ("# Git\n\n2. Never force push.", "fragment"),
        # What Qwen2.5-Coder-0.5B wrote: the old skill, then its own evidence.
        (
            current + "\nMETRICS: used 10 times, success rate 100%, 0 👍 / 10 👎.\n"
            "\nCORRECTIONS PEOPLE GAVE:\n- Tells the user to run `git status`\n",
            r"copies Sage's evidence into the skill \(METRICS:, CORRECTIONS PEOPLE GAVE:\)",
        ),
    ]:
        with pytest.raises(SageRejected, match=why):
            parse_sage_answer(bad, current)


def test_parse_judge() -> None:
    assert parse_judge('Here: {"score_a": 3, "score_b": 8, "reason": "B is safer"} ok') == (
        3.0,
        8.0,
        "B is safer",
    )
    for bad in (
        "A is better",
        '{"score_a": 0, "score_b": 5}',
        '{"score_a": true, "score_b": 5}',
        '{"score_a": 11, "score_b": 5}',
        '{"a": 1}',
    ):
        with pytest.raises(ValueError, match="no valid scores"):
            parse_judge(bad)


def test_scenarios_option() -> None:
    default = parse_scenarios_option(
        None, parse_scenarios_option("both:8", parse_scenarios_option("8", _plan()))
    )
    assert (default.source, default.count) == ("both", 8)
    assert parse_scenarios_option("3", _plan()).count == 3
    assert parse_scenarios_option("replay:5", _plan()).source == "replay"
    assert parse_scenarios_option("generated", _plan()).count == 8
    for bad in ("0", "magic:3", "both:x", "101"):
        with pytest.raises(InvalidInput, match="scenarios"):
            parse_scenarios_option(bad, _plan())


def _plan():  # type: ignore[no-untyped-def]
    from amelio.improve.bench import ScenarioPlan

    return ScenarioPlan("both", 8)


# -- end to end against the fake server ------------------------------------------------


class Brain:
    """Answers like each role would: assistant, scenario writer, judge, Sage."""

    def __init__(self) -> None:
        self.sage = "NO_CHANGE"
        self.judge = "fair"
        #: Per message: the old version's answer and the new one's (else FORCE / SAFE).
        self.answers: dict[str, tuple[str, str]] = {}

    def __call__(self, request: FakeRequest) -> str:
        if request.system.startswith("You are Sage"):
            return self.sage
        if "realistic test messages" in request.system:
            count = int(re.search(r"Write (\d+)", request.prompt).group(1))  # type: ignore[union-attr]
            return json.dumps([f"git push was rejected, case {i}" for i in range(count)])
        if "and one answer" in request.system:  # the judge alone, against people's votes
            good = self.judge == "flatterer" or "lease" in request.prompt
            return json.dumps({"score": 9 if good else 3, "reason": "r"})
        if "judge" in request.system:
            if self.judge == "garbage":
                return "I prefer the second one."
            if self.judge == "first":  # reads positions: whatever comes first wins
                return json.dumps({"score_a": 9, "score_b": 2, "reason": "A reads better"})
            a, b = request.prompt.split("ANSWER A:\n", 1)[1].split("\n\nANSWER B:\n", 1)
            score = {True: 9, False: 3}
            return json.dumps(
                {
                    "score_a": score["force-with-lease" in a],
                    "score_b": score["force-with-lease" in b],
                    "reason": "the safer command wins",
                }
            )
        new = MARKER in request.system.split("ACTIVE SKILL", 1)[-1]
        if request.prompt in self.answers:
            return self.answers[request.prompt][new]
        return SAFE if new else FORCE


@pytest.fixture(scope="module")
def brain_server() -> Iterator[tuple[FakeLLMServer, Brain]]:
    brain = Brain()
    with FakeLLMServer(default=brain) as server:
        yield server, brain


@pytest.fixture
def ws(
    workspace: Workspace,
    examples: Path,
    brain_server: tuple[FakeLLMServer, Brain],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Workspace]:
    server, brain = brain_server
    server.reset()
    brain.sage, brain.judge, brain.answers = "NO_CHANGE", "fair", {}
    skills.import_skills(workspace.engine, examples)
    monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
    monkeypatch.setenv("AMELIO_LLM_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
    monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
    opened = open_workspace(workspace.root)
    from amelio.assistant.respond import respond

    for _ in range(3):  # git-help underperforms: 3 answers with --force
        respond(opened, "git push rejected", provider=ScriptedProvider(default=FORCE))
    yield opened
    opened.dispose()


def report_page(ws: Workspace, proposal_id: int) -> str:
    """The battle report of a proposal, as an admin's browser gets it."""
    _, admin = keys.create_key(ws.engine, name="report-reader", role="admin")
    with TestClient(create_app(ws)) as client:
        client.post("/login", data={"api_key": admin, "next": "/skills"})
        return client.get(f"/proposals/{proposal_id}/report").text


def better_git(ws: Workspace) -> str:
    current = skills.get_skill(ws.engine, "git-help").spec.content
    return current + f"\n## {MARKER}\n\nAlways use --force-with-lease, never a plain force.\n"


def test_sage_proposes_and_the_benchmark_proves_it(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    from amelio.assistant.respond import respond

    server, brain = brain_server
    brain.sage = f"```markdown\n{better_git(ws)}```"
    unseen = respond(ws, "git: my rebase stopped", provider=ScriptedProvider(default=SAFE))
    [result] = analyze(ws)
    assert result.outcome == "proposed" and result.benchmark is not None
    proposal = props.get_proposal(ws, result.proposal_id)  # type: ignore[arg-type]
    assert proposal.proposed_by == "sage" and "force-with-lease" in proposal.proposed_content
    sage_call = next(r for r in server.requests if r.system.startswith("You are Sage"))
    assert FORCE in sage_call.prompt  # reflective: it saw the failing answer's text
    assert "gh-001" in sage_call.prompt and "success rate 25%" in sage_call.prompt
    assert result.benchmark["verdict"] == "PASSED"
    [run] = list_benchmarks(ws, proposal.id)
    assert (run["wins"], run["losses"], run["ties"]) == (8, 0, 0)
    assert run["improvementPct"] > 0 and run["pValue"] < 0.05
    assert run["positionConsistency"] == 1.0 and run["swap"] is True
    assert run["judgeUsed"] is True and run["judgeNote"] is None
    assert run["weights"] == {"evals": 0.6, "judge": 0.4}
    # Per scenario the rules move 0.6 × 3.3 = 2.0 and the judge 0.4 × 6 = 2.4.
    assert run["scoreShare"] == {"rules": 0.455, "judge": 0.545}
    # Held out: Sage read the three failed answers, so none of them is replayed; the
    # answer it did not see is, and the rest is generated.
    seen = proposal.evidence["writtenFrom"]
    assert len(seen) == 3 and unseen.interaction_id not in seen
    assert run["heldOut"] == {"writtenFrom": 3, "leftOut": 1, "pool": 1, "replayed": 1}
    sources = [s["source"] for s in run["scenarios"]]
    assert sources[0] == "replay" and "generated" in sources  # replayed first, then generated
    assert run["scenarios"][0]["message"] == "git: my rebase stopped"
    result = CliRunner().invoke(main, ["-w", str(ws.root), "bench", str(proposal.id)])
    assert result.exit_code == 0, result.output
    assert re.search(
        r"Replayed 1 of 1 logged messages \(seed \d+\) the proposal was not written from; "
        r"1 left out \(it was written from 3 interactions\)\.",
        result.output,
    )
    s0 = run["scenarios"][1]
    assert s0["oldOutput"] == FORCE and s0["newOutput"] == SAFE
    assert s0["newEval"] == 10 and s0["oldEval"] < 10 and s0["winner"] == "new"
    assert s0["reason"] == "the safer command wins"


def test_rerun_is_free_and_reproducible(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=better_git(ws), rationale="r", author="a"
    )
    first = run_benchmark(ws, proposal.id, scenarios="generated:3", swap=False, seed=7)
    assert first.verdict == "TIE"  # 3 wins of 3: p = 0.25, not proof
    assert (first.summary["wins"], first.summary["pValue"]) == (3, 0.25)
    assert first.summary["minScenarios"] == 6  # and the report says to run at least 6
    _, admin = keys.create_key(ws.engine, name="admin", role="admin")
    with TestClient(create_app(ws)) as client:
        assert (
            client.post(
                "/login", data={"api_key": admin, "next": "/skills"}, follow_redirects=False
            ).status_code
            == 303
        )
        page = client.get(f"/proposals/{proposal.id}/report").text
    assert "Not significant with 3 scenarios: run at least 6." in page
    calls = len(brain_server[0].requests)
    again = run_benchmark(ws, proposal.id, scenarios="generated:3", swap=False, seed=7)
    assert len(brain_server[0].requests) == calls  # every call came from the cache
    assert again.summary["llmCalls"] == 0 and again.summary["cachedCalls"] > 0
    assert [s["orders"] for s in again.scenarios] == [s["orders"] for s in first.scenarios]
    assert again.summary["costUsd"] == 0


def test_sage_does_not_propose_what_a_person_rejected(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    _, brain = brain_server
    brain.sage = better_git(ws)
    [first] = analyze(ws, benchmark=False)
    props.reject_proposal(ws, first.proposal_id, actor="bob", reason="no")  # type: ignore[arg-type]
    brain.sage = better_git(ws).replace("Always use", "Always, always use")
    [second] = analyze(ws, benchmark=False)
    assert second.outcome == "rejected" and second.proposal_id is None
    assert f"like proposal #{first.proposal_id}, which bob rejected: no." in second.reason


def test_no_change_fragment_and_malformed_judge(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    _, brain = brain_server
    [result] = analyze(ws)
    assert result.outcome == "no_change" and props.list_proposals(ws) == []
    brain.sage = "## Force pushes\n\nUse --force-with-lease."
    [result] = analyze(ws)
    assert result.outcome == "rejected" and "fragment" in result.reason
    assert props.list_proposals(ws) == []

    proposal = props.create_proposal(
        ws, "git-help", proposed_content=better_git(ws), rationale="r", author="a"
    )
    brain.judge = "garbage"
    report = run_benchmark(ws, proposal.id, scenarios="replay:1", seed=1)
    assert report.verdict == "TIE" and report.summary["errors"] == 1
    assert "no usable scores after 2 tries" in report.scenarios[0]["error"]


def test_a_rewrite_that_breaks_the_skill_s_own_rules_is_not_filed(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    """git-help bans a plain --force; a rewrite that adds one is not proposed, by
    `amelio sage` or by `amelio improve --sage`, and both say which rule it breaks."""
    _, brain = brain_server
    brain.sage = better_git(ws) + "If the lease is refused, git push --force.\n"
    [result] = analyze(ws)
    assert result.outcome == "rejected" and result.proposal_id is None
    assert result.reason.startswith("not filed:") and "gh-001" in result.reason
    report = improve_with_sage(ws, notify=False)
    assert report.proposals == []
    [skipped] = report.projects[0]["skipped"]
    assert skipped["rules"] == ["gh-001"] and skipped["reason"].startswith("not filed:")
    assert props.list_proposals(ws) == []


def test_a_judge_that_reads_positions_is_left_out_of_the_verdict(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    """A judge that prefers whichever answer comes first flips with the order in
    every scenario: counted, it would make every scenario a tie and hide what the
    rules see; left out, the rules decide, and the report says why."""
    _, brain = brain_server
    brain.judge = "first"
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=better_git(ws), rationale="r", author="a"
    )
    report = run_benchmark(ws, proposal.id, seed=3)
    s = report.summary
    assert s["positionConsistency"] == 0.0 and s["judgeUsed"] is False
    assert s["weights"] == {"evals": 1.0, "judge": 0.0}
    assert "Judge left out" in s["judgeNote"] and "60%" in s["judgeNote"]
    assert report.verdict == "PASSED" and s["wins"] == 8  # the new version passes gh-001
    row = report.scenarios[0]
    assert (row["oldJudge"], row["newJudge"]) == (5.5, 5.5)  # still shown
    assert (row["oldScore"], row["newScore"]) == (round(row["oldEval"], 3), row["newEval"])


def test_with_no_rules_and_a_position_reading_judge_there_is_no_verdict(
    sqlite_workspace: Workspace, tmp_path: Path
) -> None:
    ws = sqlite_workspace
    folder = tmp_path / "tone"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: tone\ndescription: Replies to customers kindly.\ntriggers: [reply]\n---\n"
        "Be kind.\n"
    )
    skills.import_skills(ws.engine, tmp_path)
    proposal = props.create_proposal(
        ws, "tone", proposed_content="Be kind and brief.\n", rationale="r", author="a"
    )
    first = ScriptedProvider(
        default=lambda req: (
            json.dumps({"score_a": 8, "score_b": 3, "reason": "first"})
            if "judge" in req.system
            else json.dumps([f"reply to case {i}" for i in range(8)])
            if "realistic test messages" in req.system
            else ("brief" if "brief" in req.system else "kind")
        )
    )
    report = run_benchmark(ws, proposal.id, scenarios="generated:8", seed=1, provider=first)
    s = report.summary
    assert s["judgeOnly"] is True and s["judgeUsed"] is False
    assert s["judgeNote"].startswith("No verdict") and report.verdict == "TIE"
    assert s["ties"] == s["scenarioCount"] == 3 and s["stoppedEarly"]  # nothing to hear


def test_a_benchmark_stops_once_no_verdict_is_reachable(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change the model does not notice: rules and judge see no difference in the
    first three scenarios, so five more could never make six non-zero differences
    (what 95 % needs); the run stops there, and says so."""
    server, _ = brain_server
    same = skills.get_skill(ws.engine, "git-help").spec.content + "\n<!-- reworded -->\n"
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=same, rationale="r", author="a"
    )
    before = len(server.requests)
    report = run_benchmark(ws, proposal.id, scenarios="generated:8", seed=5)
    s = report.summary
    assert report.verdict == "TIE" and s["stoppedEarly"] is True
    assert (s["scenarioCount"], s["plannedScenarios"]) == (3, 8)
    judged = [r for r in server.requests[before:] if "judge" in r.system]
    # 3 scenarios, not 8, each judged judge_repeats (3) times: both orders of two equal
    # answers are one request, and an A/A pair of equal answers is not judged at all
    assert len(judged) == 3 * 3
    result = CliRunner().invoke(
        main, ["-w", str(ws.root), "bench", str(proposal.id), "--scenarios", "generated:8"]
    )
    assert result.exit_code == 0, result.output
    assert "Stopped after 3 of 8 scenarios" in result.output

    monkeypatch.setenv("AMELIO_BENCH_STOP_EARLY", "false")
    full = open_workspace(ws.root)
    try:
        whole = run_benchmark(full, proposal.id, scenarios="generated:8", seed=5)
    finally:
        full.dispose()
    assert whole.summary["scenarioCount"] == 8 and whole.summary["stoppedEarly"] is False
    assert whole.verdict == "TIE"


def test_cohen_kappa() -> None:
    from amelio.improve.agreement import cohen_kappa, parse_score

    same = [(True, True), (False, False)] * 5
    assert cohen_kappa(same) == 1.0
    assert cohen_kappa([(True, True), (True, False)] * 5) == 0.0  # one rater always says yes
    assert cohen_kappa([(True, False), (False, True)] * 5) == -1.0
    assert cohen_kappa([(True, True)] * 10) is None and cohen_kappa([]) is None
    # 20 pairs agreeing on 15: chance is 0.5 for two balanced raters, so κ = 0.5.
    mixed = [(True, True)] * 8 + [(False, False)] * 7 + [(True, False)] * 2 + [(False, True)] * 3
    assert cohen_kappa(mixed) == pytest.approx(0.5)
    assert parse_score('ok {"score": 7, "reason": "fine"}') == 7.0
    for bad in ('{"score": 0}', '{"score": true}', "seven"):
        with pytest.raises(ValueError, match="no valid score"):
            parse_score(bad)


def test_a_judge_people_disagree_with_is_left_out(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge prefers the new version, which only it can tell apart (both pass
    every rule). People kept 10 answers and turned down 10; a judge that calls all 20
    good agrees with them no better than chance (κ 0), so its preference does not
    count and the verdict is TIE. A judge that sides with people (κ 1) decides it."""
    from amelio.assistant.quality import give_answer_feedback
    from amelio.assistant.respond import respond

    _, brain = brain_server
    for i in range(20):
        kept = i % 2 == 0
        text = "Run git push --force-with-lease." if kept else "Run git push."
        reply = respond(ws, f"git question {i}", provider=ScriptedProvider(default=text))
        give_answer_feedback(ws, reply.interaction_id, "up" if kept else "down", user="ann")
    for i in range(8):
        brain.answers[f"git push was rejected, case {i}"] = (
            "Run `git pull --rebase`, then git push.",
            "Run `git pull --rebase`, then git push --force-with-lease.",
        )
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=better_git(ws), rationale="r", author="a"
    )

    brain.judge = "flatterer"  # pairwise fair, but calls every single answer good
    flattering = run_benchmark(ws, proposal.id, scenarios="generated:8", seed=1)
    s = flattering.summary
    assert s["judgeAgreement"] == {
        "pairs": 20,
        "votes": 20,
        "decisions": 0,
        "agreed": 10,
        "kappa": 0.0,
        "errors": 0,
        "minPairs": 20,
        "minKappa": 0.6,
    }
    assert flattering.verdict == "TIE" and s["judgeUsed"] is False
    assert s["judgeNote"].startswith(
        "Judge left out: judge not proven for this skill: its agreement with people is κ 0.00 "
        "over 20 pairs, under bench_min_judge_kappa 0.60"
    )

    page = report_page(ws, proposal.id)
    assert "Judge agreement with people: κ 0.00 over 20 pairs (20 votes, 0 decisions)." in page
    assert "judge not proven for this skill" in page
    from amelio.ops.metrics import exposition

    scraped = exposition(ws).decode()
    assert 'amelio_judge_kappa{project="default",skill="git-help"} 0.0' in scraped
    assert 'amelio_judge_agreement_pairs{project="default",skill="git-help"} 20.0' in scraped

    brain.judge = "fair"
    monkeypatch.setenv("AMELIO_JUDGE_MODEL", "another-judge")  # not the flatterer's cache
    other = open_workspace(ws.root)
    try:
        fair = run_benchmark(other, proposal.id, scenarios="generated:8", seed=1)
    finally:
        other.dispose()
    assert fair.summary["judgeAgreement"]["kappa"] == 1.0
    assert fair.verdict == "PASSED" and fair.summary["judgeUsed"] is True


UNDO = "git: how do I undo my last pushed commit?"
REVERT = "Run `git revert HEAD`, then git push."


def test_a_proposal_that_breaks_a_pinned_case_cannot_pass(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    """The judge prefers the new version in all 8 scenarios, but under it the answer a
    user kept (👍) for undoing a pushed commit turns into a plain force push: that
    pinned case newly fails gh-001, so the proposal is FAILED, and the card says which
    case and which rule. Unpinned, the same proposal passes."""
    from amelio.assistant.cases import list_cases, pin_case, unpin_case
    from amelio.assistant.quality import give_answer_feedback
    from amelio.assistant.respond import respond
    from amelio.improve.bench import latest_verdict
    from amelio.telegram.cards import badge

    _, brain = brain_server
    brain.answers[UNDO] = (REVERT, "Run git reset --hard HEAD~1, then git push --force.")
    kept = respond(ws, UNDO, provider=ScriptedProvider(default=REVERT))
    assert kept.applied_skill == "git-help"
    give_answer_feedback(ws, kept.interaction_id, "up", user="ann")
    [undo] = list_cases(ws, skill="git-help")
    assert (undo.source, undo.interaction_id) == ("thumbs_up", kept.interaction_id)
    forced = respond(ws, "git push rejected again", provider=ScriptedProvider(default=FORCE))
    pin_case(ws, forced.interaction_id, note="the fix must hold", author="bob")

    proposal = props.create_proposal(
        ws, "git-help", proposed_content=better_git(ws), rationale="r", author="a"
    )
    report = run_benchmark(ws, proposal.id, scenarios="generated:8", seed=2)
    s = report.summary
    assert s["scenarioVerdict"] == "PASSED" and s["wins"] == 8
    assert report.verdict == "FAILED"
    assert s["pinnedCases"] == {"pinned": 2, "limit": 20, "checked": 2, "regressed": 1}
    broken = next(r for r in report.pinned if r["regressions"])
    assert broken["caseId"] == undo.id and broken["oldFailed"] == []
    assert [r["ruleId"] for r in broken["regressions"]] == ["gh-001"]
    fixed = next(r for r in report.pinned if not r["regressions"])
    assert fixed["oldFailed"] == ["gh-001"] and fixed["newFailed"] == []  # it got better
    assert fixed["note"] == "the fix must hold"

    # The card, wherever a person reads it.
    [run] = list_benchmarks(ws, proposal.id)
    assert [r["caseId"] for r in run["pinned"]] == [r["caseId"] for r in report.pinned]
    assert len(run["scenarios"]) == 8  # the pinned rows are not scenarios
    assert badge(latest_verdict(ws, proposal.id)).endswith(" · 1 of 2 pinned cases regressed")
    page = report_page(ws, proposal.id)
    assert 'data-testid="pinned-regressed"' in page and "said PASSED" in page
    assert "gh-001" in page and "git push --force" in page
    bench = ["bench", str(proposal.id), "--scenarios", "generated:8", "--seed", "2"]
    result = CliRunner().invoke(main, ["-w", str(ws.root), *bench])
    assert result.exit_code == 0, result.output
    assert "Pinned cases: 2 of 2 checked, 1 regressed" in result.output
    assert "it cannot pass (the scenarios alone said PASSED)" in result.output
    regression = next(line for line in result.output.splitlines() if "newly failed" in line)
    row = result.output.splitlines()[result.output.splitlines().index(regression) + 2]
    assert row.split()[0] == str(undo.id) and "gh-001" in row and "git push --force." in row

    unpin_case(ws, undo.id, author="bob")
    again = run_benchmark(ws, proposal.id, scenarios="generated:8", seed=2)
    assert again.verdict == "PASSED"
    assert again.summary["pinnedCases"] == {
        "pinned": 1,
        "limit": 20,
        "checked": 1,
        "regressed": 0,
    }


def test_self_benchmark_is_a_tie_under_a_noisy_judge(
    sqlite_workspace: Workspace, examples: Path
) -> None:
    ws = sqlite_workspace
    skills.import_skills(ws.engine, examples)
    current = skills.get_skill(ws.engine, "git-help").spec.content
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=current + "\n<!-- ok -->\n", rationale="same", author="a"
    )
    noise = random.Random(42)

    class NoisyJudge:
        name, model = "noisy", "noisy"

        def complete(self, request: LLMRequest) -> Completion:
            scores = {"score_a": noise.randint(1, 10), "score_b": noise.randint(1, 10)}
            return Completion(json.dumps(scores | {"reason": "coin"}), "noisy", "noisy")

        def stream(self, request: LLMRequest):  # type: ignore[no-untyped-def]
            yield self.complete(request)

    verdicts = []
    for run in range(60):
        assistant = ScriptedProvider(
            default=lambda req, run=run: (
                json.dumps([f"run {run} case {i}" for i in range(8)])
                if "realistic test messages" in req.system
                else SAFE
            )
        )
        report = run_benchmark(
            ws,
            proposal.id,
            scenarios="generated:8",
            seed=run,
            provider=assistant,
            judge=NoisyJudge(),
        )
        verdicts.append(report.verdict)
    # Judged three times in each order, and held to the old version's own noise floor,
    # an unchanged skill never passes.
    assert "PASSED" not in verdicts and verdicts.count("TIE") / len(verdicts) >= 0.95


def test_a_gain_the_old_version_also_shows_against_itself_is_noise(
    sqlite_workspace: Workspace, examples: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old version answers with a plain force push at first, and as safely as the
    proposal when asked again: the proposal's gain (+2 a scenario, 8 of 8) is what
    the old version shows against itself, so it is not above the noise floor."""
    ws = sqlite_workspace
    skills.import_skills(ws.engine, examples)
    proposal = props.create_proposal(
        ws, "git-help", proposed_content=better_git(ws), rationale="r", author="a"
    )

    def answer(req: LLMRequest) -> str:
        if "realistic test messages" in req.system:
            return json.dumps([f"git push rejected, case {i}" for i in range(8)])
        if "judge" in req.system:  # sees no difference: the rules decide
            return json.dumps({"score_a": 5, "score_b": 5, "reason": "same"})
        if MARKER in req.system or req.sample:
            return SAFE
        return FORCE

    report = run_benchmark(
        ws, proposal.id, scenarios="generated:8", seed=4, provider=ScriptedProvider(default=answer)
    )
    s = report.summary
    assert (s["wins"], s["meanDiff"], s["ci"]) == (8, 2.0, [2.0, 2.0])
    assert s["scenarioVerdict"] == report.verdict == "TIE"
    assert s["noise"] == {"floor": 2.0, "scenarios": 8, "meanDiff": 2.0, "ci": [2.0, 2.0]}
    assert s["floorNote"].startswith("Not above the noise floor")
    assert s["judgeRepeats"] == 3 and s["repeatAgreement"] == 1.0
    row = report.scenarios[0]
    assert (row["aa"]["output"], row["aa"]["diff"]) == (SAFE, 2.0)
    page = report_page(ws, proposal.id)
    assert "Noise floor +2.00: the old version against itself, mean +2.00 over 8" in page
    assert "Gain per scenario +2.00 (interval +2.00 to +2.00), old " in page
    assert "3 judge draws per order, agreeing in 100% of them." in page
    assert "The differences came 100% from the rules and 0% from the judge." in page
    assert 'data-testid="floor-note">Not above the noise floor' in page

    monkeypatch.setenv("AMELIO_BENCH_NOISE_FLOOR", "false")
    without = open_workspace(ws.root)
    try:
        plain = run_benchmark(
            without,
            proposal.id,
            scenarios="generated:8",
            seed=4,
            provider=ScriptedProvider(default=answer),
        )
    finally:
        without.dispose()
    assert plain.verdict == "PASSED" and plain.summary["noiseFloor"] is None
    assert "aa" not in plain.scenarios[0]


def test_api_sage_and_benchmarks(ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]) -> None:
    _, brain = brain_server
    brain.sage = better_git(ws)
    _, token = keys.create_key(ws.engine, name="admin", role="admin")
    h = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(ws)) as client:
        r = client.post("/v1/sage/analyze", headers=h, json={"skills": ["git-help"]})
        assert r.status_code == 200, r.json()
        [result] = r.json()["results"]
        pid = result["proposalId"]
        runs = client.get(f"/v1/proposals/{pid}/benchmarks", headers=h).json()["runs"]
        assert runs and runs[0]["verdict"] == "PASSED"  # ran in the background
        badge = client.get(f"/v1/proposals/{pid}", headers=h).json()["benchmark"]
        assert badge["verdict"] == "PASSED" and badge["improvementPct"] > 0
        r = client.post(
            f"/v1/proposals/{pid}/benchmarks",
            headers=h,
            json={"scenarios": "replay:1", "swap": False, "seed": 3},
        )
        assert r.status_code == 202
        assert len(client.get(f"/v1/proposals/{pid}/benchmarks", headers=h).json()["runs"]) == 2
        assert client.post("/v1/proposals/999/benchmarks", headers=h).status_code == 404
        r = client.post("/v1/sage/analyze", headers=h, json={"skills": ["nope"]})
        assert r.status_code == 422


def test_cli_bench_and_improve_with_sage(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    _, brain = brain_server
    brain.sage = better_git(ws)
    runner = CliRunner()
    result = runner.invoke(main, ["-w", str(ws.root), "improve", "--sage", "--no-notify", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("Estimate: at most ")
    report = json.loads(result.stdout)
    [made] = report["projects"][0]["proposals"]
    assert report["budget"]["limit"] is None and report["budget"]["calls"] > 0
    assert report["budget"]["undone"] == []
    assert made["proposedBy"] == "sage"
    bench = ["-w", str(ws.root), "bench", str(made["id"]), "--no-swap", "--seed", "1"]
    # Sage wrote it from the only logged message: nothing is left to replay.
    result = runner.invoke(main, [*bench, "--scenarios", "replay:1"])
    assert result.exit_code == 1 and "(1 left out: the proposal was written from them)" in (
        result.output
    )
    result = runner.invoke(main, [*bench, "--scenarios", "generated:1"])
    assert result.exit_code == 0, result.output
    assert "Benchmark" in result.stdout and "★ new" in result.stdout
    assert "Not significant with 1 scenarios" in result.stdout
    assert "noise floor +0.00: the old version against itself, mean +0.00" in result.stdout
    assert "3 draws per order, agreeing in 100%" in result.stdout
    assert "Judge agreement with people: 0 pairs (0 votes, 0 decisions), too few" in result.stdout
    assert "run at least 6 (--scenarios 6)" in result.stdout


def test_sage_estimates_before_and_stops_at_its_budget(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, brain = brain_server
    brain.sage = better_git(ws)
    runner = CliRunner()
    before = len(server.requests)
    result = runner.invoke(main, ["-w", str(ws.root), "sage", "analyze", "--skill", "git-help"])
    assert result.exit_code == 0, result.output
    planned = re.search(
        r"Estimate: at most ([\d,]+) LLM calls, about ([\d,]+) input", result.stderr
    )
    assert planned is not None, result.stderr
    made = len(server.requests) - before
    assert 0 < made <= int(planned.group(1).replace(",", ""))  # an upper bound
    assert re.search(rf"Spent [\d,]+ tokens in {made} LLM calls\.", result.stderr)

    props.reject_proposal(ws, props.list_proposals(ws)[0].id, actor="bob", reason="no")
    brain.sage = better_git(ws).replace("never a plain force", "never, ever a plain force push")
    monkeypatch.setenv("AMELIO_IMPROVE_BUDGET_TOKENS", "1")
    monkeypatch.setenv("AMELIO_PROPOSAL_REJECTED_SIMILARITY", "1.01")  # let it be filed
    before = len(server.requests)
    result = runner.invoke(main, ["-w", str(ws.root), "sage", "analyze", "--skill", "git-help"])
    assert result.exit_code == 0, result.output
    assert "budget 1 tokens (improve_budget_tokens)" in result.stderr
    assert len(server.requests) - before == 1  # Sage's rewrite; its benchmark is not run
    [pending] = props.list_proposals(ws, status="pending")
    assert re.search(
        rf"Spent [\d,]+ tokens of a budget of 1 in 1 LLM calls; left undone at the budget: "
        rf"proposal #{pending.id}: not benchmarked\.",
        result.stderr,
    )
    assert "benchmark failed: The run reached improve_budget_tokens (1)" in result.stdout


def test_without_llm_both_commands_explain(workspace: Workspace, examples: Path) -> None:
    skills.import_skills(workspace.engine, examples)
    proposal = props.create_proposal(
        workspace, "git-help", proposed_content="# Git\n\nNew", rationale="r", author="a"
    )
    runner = CliRunner()
    for args in (["sage", "analyze", "--skill", "git-help"], ["bench", str(proposal.id)]):
        result = runner.invoke(main, ["-w", str(workspace.root), *args])
        assert result.exit_code == 1
        assert "AMELIO_LLM_PROVIDER" in result.output


def test_sage_drafts_a_findings_fix_from_its_evidence(
    ws: Workspace, brain_server: tuple[FakeLLMServer, Brain]
) -> None:
    """With Sage as the proposer (``amelio improve --sage``), a finding's fix is
    Sage's rewrite, written from a prompt that names the finding."""
    from amelio.improve import findings
    from amelio.improve.sage import sage_proposer
    from amelio.llm import get_provider

    server, brain = brain_server
    brain.sage = better_git(ws)
    [made] = findings.update_findings(ws, file_fixes=False).created
    filed = findings.file_fix(ws, made, proposer=sage_proposer(get_provider(ws.settings)))
    assert isinstance(filed, int)
    proposal = props.get_proposal(ws, filed)
    assert proposal.proposed_by == "sage" and MARKER in proposal.proposed_content
    assert proposal.evidence["finding"] == made and len(proposal.evidence["goldenCases"]) == 3
    asked = [r.prompt for r in server.requests if r.system.startswith("You are Sage")]
    assert f"finding #{made}" in asked[-1]
    assert findings.file_fix(ws, made) is None  # filed once
