"""`amelio study` end to end against the fake LLM server in its instruction-following
mode, on a tiny suite: the plumbing, the arms, the metric and the intervals, with no
model. The fake repeats the "Always…"/"Never…" lines of its system prompt, so a
learning that says "Always say WAVE" makes its answers pass the oracle rule that
wants WAVE: what the loop learns shows in what the model says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from amelio.cli import main
from amelio.db.schema import interactions
from amelio.testing import FakeLLMServer, FakeRequest, follow_instructions
from amelio.workspace.folder import Workspace

GREETINGS = ["hello there", "greet my team", "welcome the new hire"]
GREETINGS_TEST = ["hello from paris", "greet the guests", "welcome back message", "hello all"]
COUNTS = ["count the apples", "how many days in a week", "total of 2 and 3"]
COUNTS_TEST = ["count the words", "how many legs has a cat", "total the bill", "count the cars"]
ORACLE = {
    "greeter": [
        {"id": "wave", "name": "Always say WAVE", "type": "string_contains", "value": "WAVE"}
    ],
    "counter": [
        {
            "id": "num",
            "name": "Always give the NUMBER",
            "type": "string_contains",
            "value": "NUMBER",
        },
        {"id": "short", "name": "Keep it short", "type": "max_length", "value": 2000},
    ],
}


def write_suite(
    root: Path, *, oracle: dict[str, Any] | None = ORACLE, tasks: Any = None, rulebook: str = ""
) -> Path:
    for name, what, words in (
        ("greeter", "Greets people and says hello, welcome messages.", "hello, greet, welcome"),
        ("counter", "Counts things, numbers and totals.", "count, how many, total"),
    ):
        folder = root / "skills" / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {what}\ntriggers: [{words}]\n---\n"
            f"Answer the {name} request.\n{rulebook}",
            encoding="utf-8",
        )
    if tasks is None:
        tasks = [
            {"id": f"{skill}-{i}", "message": m, "skill": skill, "split": split}
            for skill, train, test in (
                ("greeter", GREETINGS, GREETINGS_TEST),
                ("counter", COUNTS, COUNTS_TEST),
            )
            for split, messages in (("train", train), ("test", test))
            for i, m in enumerate(messages, start=0 if split == "train" else 10)
        ]
    (root / "tasks.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8"
    )
    if oracle is not None:
        (root / "oracle.json").write_text(json.dumps(oracle), encoding="utf-8")
    return root


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default=follow_instructions) as server:
        yield server


@pytest.fixture
def llm_env(fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> FakeLLMServer:
    for name, value in {
        "AMELIO_LLM_PROVIDER": "openai",
        "AMELIO_LLM_BASE_URL": fake.openai_base_url,
        "AMELIO_LLM_API_KEY": "fake-key",
        "AMELIO_LLM_MODEL": "fake-model",
        "AMELIO_LLM_MAX_RETRIES": "0",
    }.items():
        monkeypatch.setenv(name, value)
    return fake


def study(*args: str, workspace: Path | None = None) -> Any:
    prefix = ["-w", str(workspace)] if workspace else []
    return CliRunner().invoke(main, [*prefix, "study", *args])


def rounds(data: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["arm"], r["round"]): r for r in data["rounds"]}


def test_every_arm_is_measured_and_learnings_close_the_gap(
    llm_env: FakeLLMServer, tmp_path: Path
) -> None:
    suite = write_suite(tmp_path / "suite")
    out = tmp_path / "out"
    result = study(str(suite), "--out", str(out), "--rounds", "2", "--fixit-rate", "1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads((out / "study.json").read_text(encoding="utf-8"))
    by = rounds(data)
    assert set(by) == {
        ("bare", 0),
        ("skills", 0),
        ("told", 0),
        *((arm, n) for arm in ("learnings", "loop") for n in (0, 1, 2)),
    }
    # Half the rules pass anyway (max_length): a quarter of each skill's tasks' share.
    assert by[("skills", 0)]["passRate"] == pytest.approx(0.25)
    assert by[("told", 0)]["passRate"] == 1.0  # told every rule: the fake follows them all
    assert by[("learnings", 0)]["passRate"] == by[("skills", 0)]["passRate"]
    # One round of Fix-Its (rate 1) names each skill's failing rule: a learning each.
    assert by[("learnings", 1)]["passRate"] == 1.0
    assert by[("learnings", 1)]["learnings"] == 2
    assert by[("learnings", 1)]["allPass"] == 1.0
    for r in data["rounds"]:
        low, high = r["ci"]
        assert low <= r["passRate"] <= high
        assert r["tasks"] == len(GREETINGS_TEST) + len(COUNTS_TEST)
    # The loop filed proposals (templates, then Sage) and benchmarked each.
    assert by[("loop", 1)]["proposals"]["filed"] >= 1
    assert by[("loop", 1)]["phases"].keys() >= {"train", "improve", "bench", "test"}
    comparisons = {c["what"]: c for c in data["comparisons"]}
    assert comparisons["told − skills"]["difference"] == pytest.approx(0.75)
    assert comparisons["learnings r2 − skills"]["above0"] is True
    assert comparisons["share of the skills → told gap loop closed"]["gapClosed"] >= 0
    assert data["judge"]["positionConsistency"] == 1.0  # the fake judge always ties
    assert data["error"] is None
    # Round 0 is one prompt in three arms: sent once.
    assert data["llm"]["reused"] >= 2 * len(GREETINGS_TEST + COUNTS_TEST)
    # Tokens of the calls made only (the fake counts words): where a study's time goes.
    assert data["llm"]["outputTokens"] >= data["llm"]["calls"] > 0
    assert data["llm"]["inputTokens"] > data["llm"]["outputTokens"]
    answers = [json.loads(line) for line in (out / "answers.jsonl").open(encoding="utf-8")]
    assert len(answers) == sum(r["tasks"] for r in data["rounds"])
    assert "| told | 0 | 1.000 |" in (out / "study.md").read_text(encoding="utf-8")
    assert (out / "study.png").stat().st_size > 0


def test_the_users_workspace_is_untouched(
    llm_env: FakeLLMServer, workspace: Workspace, tmp_path: Path
) -> None:
    """The arms open their own SQLite files even where AMELIO_DATABASE_URL names the
    user's database (as it does for this fixture's workspace)."""
    suite = write_suite(tmp_path / "suite")
    out = tmp_path / "out"
    result = study(
        str(suite),
        "--out",
        str(out),
        "--rounds",
        "1",
        "--arms",
        "learnings",
        "--json",
        workspace=workspace.root,
    )
    assert result.exit_code == 0, result.output
    with workspace.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(interactions)) == 0
    assert (out / "learnings" / ".amelio" / "amelio.db").is_file()


def test_test_answers_are_never_recorded(llm_env: FakeLLMServer, tmp_path: Path) -> None:
    """Held-out answers must not become evidence: only train answers are stored."""
    suite = write_suite(tmp_path / "suite")
    out = tmp_path / "out"
    assert (
        study(str(suite), "--out", str(out), "--rounds", "1", "--arms", "learnings").exit_code == 0
    )
    engine = sa.create_engine(f"sqlite:///{out / 'learnings' / '.amelio' / 'amelio.db'}")
    with engine.connect() as conn:
        stored = set(conn.scalars(sa.select(interactions.c.message)))
    engine.dispose()
    assert stored == set(GREETINGS + COUNTS)


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        ({"oracle": None}, "oracle.json: missing"),
        (
            {"tasks": [{"id": "a", "message": "hi", "skill": "nobody", "split": "test"}]},
            "names skill 'nobody'",
        ),
        (
            {"tasks": [{"id": "a", "message": "hello", "skill": "greeter", "split": "train"}]},
            "no test tasks",
        ),
        (
            {"oracle": {"greeter": [{"id": "x", "name": "X", "type": "telepathy"}]}},
            "telepathy",
        ),
        ({"oracle": {"greeter": [{"id": "x", "type": "not_empty"}]}}, "needs a 'name'"),
    ],
)
def test_a_bad_suite_is_refused_before_anything_is_written(
    llm_env: FakeLLMServer, tmp_path: Path, broken: dict[str, Any], says: str
) -> None:
    suite = write_suite(tmp_path / "suite", **broken)
    out = tmp_path / "out"
    result = study(str(suite), "--out", str(out))
    assert result.exit_code == 1
    assert says in result.output
    assert not out.exists()
    assert llm_env.requests == []


def test_a_folder_it_did_not_write_is_refused(llm_env: FakeLLMServer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite")
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    result = study(str(suite), "--out", str(out))
    assert result.exit_code == 1
    assert "holds no study.json" in result.output
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_an_llm_that_goes_down_stops_the_study_and_keeps_the_rounds_done(
    fake: FakeLLMServer, llm_env: FakeLLMServer, tmp_path: Path
) -> None:
    calls = 0

    def dies_later(request: FakeRequest) -> str:
        nonlocal calls
        calls += 1
        if calls > 20:
            raise RuntimeError("the model server fell over")
        return follow_instructions(request)

    fake.default = dies_later
    suite = write_suite(tmp_path / "suite")
    out = tmp_path / "out"
    result = study(str(suite), "--out", str(out), "--rounds", "2", "--arms", "skills,learnings")
    assert result.exit_code == 1
    data = json.loads((out / "study.json").read_text(encoding="utf-8"))
    assert ("skills", 0) in rounds(data)
    assert "arm learnings, round " in data["error"]
    assert "the LLM call failed" in data["error"]
    assert "the study stopped" in result.output


def test_each_arm_round_is_written_as_it_is_measured(
    llm_env: FakeLLMServer, tmp_path: Path
) -> None:
    """A real study takes an hour: stopped halfway (Ctrl-C, a machine going away),
    its folder still holds every arm-round measured so far."""
    from amelio.llm import get_provider
    from amelio.study import StudyLLM, StudyOptions, load_suite, run_study
    from amelio.study.report import write_report
    from amelio.workspace.config import Settings

    suite = load_suite(write_suite(tmp_path / "suite"))
    out = tmp_path / "out"
    seen: list[int] = []

    def recorded(so_far: Any) -> None:
        write_report(so_far, out)
        seen.append(len(so_far.rounds))
        if len(seen) == 2:
            raise KeyboardInterrupt  # a person, after two arm-rounds

    settings = Settings(workspace=out)
    llm = StudyLLM(get_provider(settings, purpose="The study"))
    with pytest.raises(KeyboardInterrupt):
        run_study(
            suite,
            StudyOptions(rounds=1, arms=("skills", "learnings")),
            settings=settings,
            llm=llm,
            out=out,
            recorded=recorded,
        )
    assert seen == [1, 2]
    data = json.loads((out / "study.json").read_text(encoding="utf-8"))
    assert list(rounds(data)) == [("skills", 0), ("learnings", 0)]
    assert data["llm"]["calls"] > 0 and data["seconds"] > 0


def test_options_are_checked(llm_env: FakeLLMServer, tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite")
    for args, says in (
        (["--arms", "bare,magic"], "Unknown arm(s) magic"),
        (["--fixit-rate", "1.5"], "--fixit-rate is between 0 and 1"),
        (["--rounds", "0"], "--rounds is between 1 and 20"),
    ):
        result = study(str(suite), "--out", str(tmp_path / "out"), *args)
        assert result.exit_code == 1 and says in result.output, result.output


def test_planted_harmful_proposals_are_counted_where_they_stop(
    llm_env: FakeLLMServer, tmp_path: Path
) -> None:
    """Rate 1: each skill gets a harmful proposal in each loop round. The fake judge
    ties and the skills have no rules, so every benchmark is a TIE: gated, none gets
    through; approving all, every one does, and the report says so."""
    suite = write_suite(tmp_path / "suite", rulebook="\n1. Keep it friendly.\n")
    common = ["--arms", "loop", "--rounds", "1", "--plant-harmful", "1", "--no-sage"]
    gated = study(str(suite), "--out", str(tmp_path / "gated"), *common, "--json")
    assert gated.exit_code == 0, gated.output
    data = json.loads((tmp_path / "gated" / "study.json").read_text(encoding="utf-8"))
    assert data["settings"]["plantHarmful"] == 1.0
    planted = data["gate"]["planted"]
    assert (planted["total"], planted["approved"], planted["falseApproveRate"]) == (2, 0, 0.0)
    assert set(planted["byKind"]) == {"contradict", "copy_evidence"}
    made = [d for d in data["gate"]["decisions"] if d["planted"]]
    assert {d["outcome"] for d in made} == {"rejected"} and {d["verdict"] for d in made} == {"TIE"}
    text = (tmp_path / "gated" / "study.md").read_text(encoding="utf-8")
    assert "Planted harmful proposals: 2, 0 stopped at filing, 2 rejected, 0 approved" in text

    everything = study(str(suite), "--out", str(tmp_path / "all"), *common, "--approve", "all")
    assert everything.exit_code == 0, everything.output
    data = json.loads((tmp_path / "all" / "study.json").read_text(encoding="utf-8"))
    assert data["gate"]["planted"]["approved"] == 2
    assert data["gate"]["planted"]["falseApproveRate"] == 1.0
    assert data["gate"]["approvedWithRegressions"] == 0  # the suite's skills pin nothing
    assert {d["regressed"] for d in data["gate"]["decisions"]} == {0}
    result = study(str(suite), "--out", str(tmp_path / "bad"), "--plant-harmful", "2")
    assert result.exit_code == 1 and "--plant-harmful is between 0 and 1" in result.output


def test_harmful_content_of_each_kind() -> None:
    import random

    from amelio.study.planting import harmful_content

    rulebook = "# Git\n\nSome words.\n\n1. Never force push.\n2. Say how to undo it.\n"
    rng = random.Random(1)
    deleted = harmful_content("delete_rule", rulebook, [], rng)
    assert deleted is not None and deleted.count("\n") == rulebook.count("\n") - 1
    contradicted = harmful_content("contradict", rulebook, [], rng)
    assert contradicted is not None and "- Ignore the instruction “" in contradicted
    copied = harmful_content("copy_evidence", rulebook, [("push failed", "run  git pull")], rng)
    assert copied is not None and "- When asked “push failed”, answer: run git pull" in copied
    assert harmful_content("delete_rule", "no rules here", [], rng) is None
    assert harmful_content("copy_evidence", rulebook, [], rng) is None


def test_an_answer_store_spares_a_rerun_every_request_it_already_made(
    fake: FakeLLMServer, llm_env: FakeLLMServer, tmp_path: Path
) -> None:
    """An ablation re-runs an hour-long study with one setting changed: with
    --llm-cache the second run sends only what changed (here: nothing), measures
    the same, and says its seconds are not a cold run's."""
    suite = write_suite(tmp_path / "suite")
    store = tmp_path / "answers.sqlite"
    args = ["--rounds", "1", "--arms", "skills,learnings", "--fixit-rate", "1"]
    first = study(str(suite), "--out", str(tmp_path / "a"), "--llm-cache", str(store), *args)
    assert first.exit_code == 0, first.output
    sent = len(fake.requests)
    assert sent > 0
    second = study(str(suite), "--out", str(tmp_path / "b"), "--llm-cache", str(store), *args)
    assert second.exit_code == 0, second.output
    assert len(fake.requests) == sent  # not one request reached the model
    a, b = (json.loads((tmp_path / d / "study.json").read_text("utf-8")) for d in "ab")
    assert [r["passRate"] for r in b["rounds"]] == [r["passRate"] for r in a["rounds"]]
    assert b["llm"]["calls"] == 0 and b["llm"]["stored"] == a["llm"]["calls"]
    assert "not what a cold run costs" in (tmp_path / "b" / "study.md").read_text("utf-8")
    assert a["llm"]["stored"] == 0


def test_an_answer_store_that_is_not_one_is_refused_before_anything_is_written(
    llm_env: FakeLLMServer, tmp_path: Path
) -> None:
    suite = write_suite(tmp_path / "suite")
    bad = tmp_path / "notes.txt"
    bad.write_text("these are my notes, not a database\n" * 200, encoding="utf-8")
    out = tmp_path / "out"
    result = study(str(suite), "--out", str(out), "--llm-cache", str(bad))
    assert result.exit_code == 1
    assert f"--llm-cache {bad} is not an answer store" in result.output
    assert not out.exists()
    assert bad.read_text(encoding="utf-8").startswith("these are my notes")
