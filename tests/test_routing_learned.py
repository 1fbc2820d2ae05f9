"""The learned router: examples from SKILL.md and kept answers, curation, calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amelio import skills
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import log_exchange
from amelio.errors import InvalidInput, NotFound, SkillFileError, SkillNotFound
from amelio.routing import examples as routing_examples
from amelio.routing.learned import MIN_CALIBRATION, LearnedIndex, TrainingData
from amelio.routing.router import Router, project_router, route_message
from amelio.skills.files import parse_skill_md
from amelio.skills.model import SkillSpec
from amelio.workspace.folder import Workspace

BILLING = SkillSpec(
    name="billing",
    description="Invoices and payments.",
    triggers=("invoice",),
    keywords=("payment", "refund"),
)
TRAVEL = SkillSpec(
    name="travel",
    description="Trips and bookings.",
    triggers=("book a flight",),
    keywords=("hotel", "trip"),
)
WEATHER = SkillSpec(
    name="weather", description="Forecasts.", triggers=("forecast",), keywords=("rain", "sunny")
)
SKILLS = [BILLING, TRAVEL, WEATHER]


def write_skill(folder: Path, name: str, front: str) -> None:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(
        f"---\nname: {name}\n{front}---\n\n# {name}\n", encoding="utf-8"
    )


def lexical(examples: list[list[str]], **kw: float) -> Router:
    return Router(SKILLS, "learned", data=TrainingData(examples=examples, **kw))


# -- SKILL.md examples ----------------------------------------------------------------


def test_skill_md_examples_are_parsed_bounded_and_kept_on_export(
    tmp_path: Path, workspace: Workspace
) -> None:
    spec = parse_skill_md(
        "---\nname: a\nexamples:\n  - 'where is my money'\n  - ' '\n---\n", source="a/SKILL.md"
    )
    assert spec.examples == ("where is my money",)
    with pytest.raises(SkillFileError, match="examples"):
        parse_skill_md("---\nname: a\nexamples: nope\n---\n", source="a/SKILL.md")
    with pytest.raises(SkillFileError, match="at most 1000 characters"):
        parse_skill_md(f"---\nname: a\nexamples: ['{'x' * 1001}']\n---\n", source="a/SKILL.md")
    write_skill(
        tmp_path / "in",
        "billing",
        "description: Money.\nexamples:\n  - where is my money\n  - charged twice this month\n",
    )
    skills.import_skills(workspace.engine, tmp_path / "in")
    skills.export_skills(workspace.engine, tmp_path / "out")
    again = parse_skill_md(
        (tmp_path / "out" / "billing" / "SKILL.md").read_text("utf-8"), source="out"
    )
    assert again.examples == ("where is my money", "charged twice this month")


def test_examples_teach_a_skill_what_its_metadata_does_not_say() -> None:
    message = "I was charged twice this month"
    assert lexical([[], [], []], min_score=0.0).route(message).names == ()
    taught = lexical([["charged twice on my card", "why was I charged"], [], []], min_score=0.0)
    assert taught.route(message).names[0] == "billing"
    # Whole words, as everywhere in the router: "charge" alone is another word.
    assert taught.route("battery charge").names == ()


def test_without_embeddings_the_router_is_lexical_and_falls_back_to_metadata() -> None:
    router = lexical([[], [], []])
    assert router.calibration.source == "default"
    assert router.route("please refund this invoice").names == ("billing",)
    assert router.route("what is the meaning of life").names == ()


def test_embeddings_route_a_paraphrase_no_word_of_which_a_skill_has() -> None:
    from amelio.routing.router import load_router_embedder

    embedder = load_router_embedder("wordllama")
    if embedder is None:  # pragma: no cover - the dev extra installs it
        pytest.fail("amelio[semantic] is part of the dev install")
    router = Router(
        SKILLS,
        "learned",
        data=TrainingData(
            examples=[
                ["my card was debited two times"],
                ["reserve a room in Rome"],
                ["will it be cold tomorrow"],
            ],
            embedder=embedder,
        ),
    )
    assert router.route("will there be snow this weekend", min_score=-100).names[0] == "weather"


# -- calibration ------------------------------------------------------------------------


def test_threshold_is_learned_from_enough_examples_or_set() -> None:
    few = lexical([["refund my order"], [], []])
    assert few.calibration.source == "default"
    texts = [
        [f"refund order {i} payment" for i in range(MIN_CALIBRATION)],
        [f"hotel trip number {i}" for i in range(MIN_CALIBRATION)],
        [f"rain forecast day {i}" for i in range(MIN_CALIBRATION)],
    ]
    learned = lexical(texts)
    assert learned.calibration.source == "examples"
    assert learned.calibration.examples == 3 * MIN_CALIBRATION
    # Routed as new messages, almost every example clears the threshold it learned.
    kept = sum(
        learned.route(t).names[:1] == (SKILLS[i].name,) for i, own in enumerate(texts) for t in own
    )
    assert kept >= 0.95 * 3 * MIN_CALIBRATION
    fixed = lexical(texts, min_score=7.5)
    assert (fixed.calibration.source, fixed.min_score) == ("setting", 7.5)


def test_an_example_left_out_scores_lower_than_with_itself() -> None:
    index = LearnedIndex(
        SKILLS, TrainingData(examples=[["zebra crossing refund", "refund payment"], [], []])
    )
    ((own, other),) = index._left_out([(0, "zebra crossing refund")])
    with_itself = index.score("zebra crossing refund", ("zebra", "crossing", "refund"))[0][0]
    assert own < with_itself
    assert other == 0.0  # no other skill matches any of its words


def test_calibration_is_kept_until_the_examples_move_by_a_tenth() -> None:
    texts = [[f"refund order {i} payment" for i in range(30)], [], []]
    first = lexical(texts)
    data = TrainingData(
        examples=[texts[0] + ["refund one more"], [], []], previous=first.calibration
    )
    assert Router(SKILLS, "learned", data=data).calibration is first.calibration
    grown = TrainingData(
        examples=[texts[0] + [f"refund more {i}" for i in range(5)], [], []],
        previous=first.calibration,
    )
    assert Router(SKILLS, "learned", data=grown).calibration is not first.calibration


# -- kept answers become examples --------------------------------------------------------


@pytest.fixture
def billing_ws(tmp_path: Path, workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    write_skill(tmp_path / "skills", "billing", "description: Invoices.\ntriggers: [invoice]\n")
    write_skill(tmp_path / "skills", "travel", "description: Trips.\ntriggers: [hotel]\n")
    (tmp_path / "skills" / "travel" / "travel.evals.json").write_text(
        '{"version": 1, "rules": [{"id": "short", "type": "max_length", "value": 10}]}',
        encoding="utf-8",
    )
    skills.import_skills(workspace.engine, tmp_path / "skills")
    return workspace


def texts(ws: Workspace, skill: str) -> list[str]:
    return [e.text for e in routing_examples.list_examples(ws, skill)]


def test_a_kept_answer_becomes_an_example_and_a_correction_takes_it_back(
    billing_ws: Workspace,
) -> None:
    ws = billing_ws
    reply = log_exchange(
        ws, "charged  twice\nthis month", "Refunded.", project="default", skills=["billing"]
    )
    assert route_message(ws, "charged twice").names == ()
    give_answer_feedback(ws, reply.interaction_id, "up", user="u1")
    assert texts(ws, "billing") == ["charged twice this month"]
    # The very next route learns from it (the router's stamp moved).
    assert route_message(ws, "charged twice").names[:1] == ("billing",)
    give_answer_feedback(ws, reply.interaction_id, "up", user="u2")  # counted once
    assert texts(ws, "billing") == ["charged twice this month"]
    give_answer_feedback(ws, reply.interaction_id, "down", user="u2")
    assert texts(ws, "billing") == []
    give_answer_feedback(ws, reply.interaction_id, "up", user="u3")  # someone objected
    assert texts(ws, "billing") == []
    assert route_message(ws, "charged twice").names == ()


def test_failed_evals_or_no_skill_teach_nothing(billing_ws: Workspace) -> None:
    ws = billing_ws
    failed = log_exchange(
        ws, "a hotel in Rome", "A very long answer indeed.", project="default", skills=["travel"]
    )
    assert not failed.evals.success
    give_answer_feedback(ws, failed.interaction_id, "up", user="u")
    unrouted = log_exchange(ws, "hello there", "Hi.", project="default")
    give_answer_feedback(ws, unrouted.interaction_id, "up", user="u")
    assert texts(ws, "travel") == []
    assert routing_examples.stamp(ws.engine)[:2] == (0, 0)


def test_admin_removal_sticks_and_added_examples_route(billing_ws: Workspace) -> None:
    ws = billing_ws
    reply = log_exchange(ws, "wrong skill message", "ok", project="default", skills=["billing"])
    give_answer_feedback(ws, reply.interaction_id, "up", user="u1")
    (example,) = routing_examples.list_examples(ws, "billing")
    removed = routing_examples.remove_example(ws, example.id or 0, author="ann")
    assert removed.removed_by == "ann" and removed.removed_at is not None
    give_answer_feedback(ws, reply.interaction_id, "up", user="u2")
    assert texts(ws, "billing") == []
    assert [e.text for e in routing_examples.list_examples(ws, "billing", removed=True)] == [
        "wrong skill message"
    ]
    with pytest.raises(NotFound):
        routing_examples.remove_example(ws, 999)

    added = routing_examples.add_example(ws, "travel", "  a room\nin Rome ", author="ann")
    assert (added.text, added.source, added.author) == ("a room in Rome", "manual", "ann")
    assert route_message(ws, "room in rome").names[:1] == ("travel",)
    with pytest.raises(InvalidInput):
        routing_examples.add_example(ws, "travel", "   ")
    with pytest.raises(SkillNotFound):
        routing_examples.add_example(ws, "nope", "text")


def test_removing_a_skill_md_example_writes_a_new_version(
    tmp_path: Path, workspace: Workspace
) -> None:
    write_skill(tmp_path / "s", "billing", "examples: [charged twice, where is my money]\n")
    skills.import_skills(workspace.engine, tmp_path / "s")
    listed = routing_examples.list_examples(workspace, "billing")
    assert [(e.source, e.text) for e in listed] == [
        ("skill", "charged twice"),
        ("skill", "where is my money"),
    ]
    version = routing_examples.remove_skill_example(
        workspace, "billing", "charged twice", author="ann"
    )
    assert version == 2
    assert texts(workspace, "billing") == ["where is my money"]
    with pytest.raises(NotFound):
        routing_examples.remove_skill_example(workspace, "billing", "charged twice")


def test_the_project_router_is_reused_until_skills_or_examples_change(
    billing_ws: Workspace,
) -> None:
    ws = billing_ws
    first = project_router(ws)
    assert project_router(ws) is first
    routing_examples.add_example(ws, "billing", "charged twice")
    second = project_router(ws)
    assert second is not first
    assert project_router(ws) is second


# -- suggest-triggers -------------------------------------------------------------------


def test_suggest_triggers_mines_the_examples_into_a_routing_proposal(billing_ws: Workspace) -> None:
    from amelio.improve.proposals import approve_proposal
    from amelio.improve.triggers import suggest_triggers

    ws = billing_ws
    for text in (
        "charged twice this month",
        "I was charged twice",
        "double charge on my card",
        "why charged twice again",
        "hotel booking for the card holder",
    ):
        routing_examples.add_example(ws, "billing", text)
    routing_examples.add_example(ws, "travel", "card for the hotel")
    with pytest.raises(InvalidInput, match="at least 3"):
        suggest_triggers(ws, "travel")
    dry = suggest_triggers(ws, "billing", propose=False)
    assert dry.proposal is None
    added = {(t.kind, t.term) for t in dry.terms}
    assert ("trigger", "charged twice") in added and ("keyword", "charged") in added
    assert ("keyword", "card") not in added  # as common in the other skill's examples
    assert dry.triggers[:1] == ("invoice",)  # the author's own come first, unchanged
    assert dry.routed_after > dry.routed_before

    suggestion = suggest_triggers(ws, "billing", author="miner")
    proposal = suggestion.proposal
    assert proposal is not None and proposal.routing is not None
    assert "+triggers: invoice, charged twice" in proposal.diff()
    approved = approve_proposal(ws, proposal.id, actor="ann")
    current = skills.get_skill(ws.engine, "billing")
    assert current.version == approved.result_version == 2
    assert "charged twice" in current.spec.triggers
    assert current.spec.content  # the body is untouched


def test_another_process_example_is_seen_once_the_stamp_expires(
    billing_ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amelio import db
    from amelio.db.schema import routing_examples as table
    from amelio.db.schema import utcnow

    ws = billing_ws
    monkeypatch.setattr(routing_examples, "STAMP_TTL_S", 3600.0)
    before = routing_examples.stamp(ws.engine)
    with db.transaction(ws.engine) as conn:  # as another process writes it: no local bump
        conn.execute(
            table.insert().values(
                project_id=1,
                skill="billing",
                text="charged twice",
                source="manual",
                created_at=utcnow(),
            )
        )
    assert routing_examples.stamp(ws.engine) == before
    monkeypatch.setattr(routing_examples, "STAMP_TTL_S", 0.0)
    assert routing_examples.stamp(ws.engine)[:2] == (before[0] + 1, before[1] + 1)
    assert route_message(ws, "charged twice").names[:1] == ("billing",)


# -- the examples' log-odds ---------------------------------------------------------------

LISTS = [
    SkillSpec(name="list-add", description="Add an item to a list."),
    SkillSpec(name="list-remove", description="Remove an item from a list."),
    SKILLS[2],
]
LIST_EXAMPLES = [
    [
        "put milk on the shopping list",
        "add eggs to my shopping list",
        "add bread to the grocery list",
        "put apples on my list",
        "add rice to the list",
        "put soap on the shopping list",
        "add tea to my grocery list",
        "put jam on the list",
    ],
    [
        "remove milk from the shopping list",
        "take eggs off my shopping list",
        "remove bread from the grocery list",
        "take apples off my list",
        "remove rice from the list",
        "take soap off the shopping list",
        "remove tea from my grocery list",
        "take jam off the list",
    ],
    [
        "will it rain tomorrow",
        "is it sunny in Rome",
        "forecast for the weekend",
        "do I need an umbrella",
        "rain in Paris today",
        "sunny or cloudy",
        "weekend rain",
        "forecast please",
    ],
]


def _words(text: str) -> tuple[str, ...]:
    from amelio.routing.learned import _analyzed
    from amelio.routing.learned import _words as words_of

    return words_of(_analyzed(text)[0])


def test_log_odds_tell_apart_skills_whose_examples_share_their_words() -> None:
    from amelio.routing.learned import LogOdds

    odds = LogOdds([[_words(t) for t in own] for own in LIST_EXAMPLES])
    add, remove, weather = odds.scores(_words("take milk off the grocery list")).tolist()
    assert remove > add > weather
    assert odds.scores(_words("zzz qqq")) is None  # no word any example used
    # "on" and "off" are all that separate these two: stopwords are kept
    assert odds.scores(_words("milk on"))[0] > odds.scores(_words("milk on"))[1]
    assert odds.scores(_words("milk off"))[1] > odds.scores(_words("milk off"))[0]
    # the learned router, lexical, routes with them once there are enough examples
    router = Router(LISTS, "learned", data=TrainingData(examples=LIST_EXAMPLES))
    assert router.route("take the milk off the list", min_score=-1e9).names[0] == "list-remove"
    assert router.route("put the milk on the list", min_score=-1e9).names[0] == "list-add"


def test_log_odds_leave_one_out_is_the_model_without_that_example() -> None:
    from collections import Counter

    from amelio.routing.learned import LogOdds

    examples = [[_words(t) for t in own] for own in LIST_EXAMPLES]
    examples[1].append(_words("delete zebra quokka"))  # words no other example uses
    full = LogOdds(examples)
    messages = [
        _words(t)
        for t in (
            "remove the milk from my list",
            "delete zebra",
            "zebra quokka",
            "will it rain",
            "put jam on it",
        )
    ]
    for i, own in enumerate(examples):
        for k, gone in enumerate(own):
            rebuilt = LogOdds([o[:k] + o[k + 1 :] if j == i else o for j, o in enumerate(examples)])
            for message in messages:
                expected = rebuilt.scores(message)
                got = full.scores(message, without=(i, Counter(gone)))
                assert (got is None) == (expected is None), (gone, message)
                if got is not None:
                    assert np.allclose(got, expected), (gone, message)


def test_a_skill_without_examples_is_never_pushed_down_by_the_log_odds() -> None:
    from amelio.routing.learned import MIN_CALIBRATION, LearnedIndex, LogOdds

    odds = LogOdds(
        [[_words(t) for t in LIST_EXAMPLES[0]], [], [_words(t) for t in LIST_EXAMPLES[2]]]
    )
    scores = odds.scores(_words("remove the milk"))
    assert scores is not None and scores[1] == max(scores[0], scores[2])
    few = [own[:3] for own in LIST_EXAMPLES]  # 9 examples: too few to weigh words
    assert sum(map(len, few)) < MIN_CALIBRATION
    assert LearnedIndex(LISTS, TrainingData(examples=few))._odds is None
    assert LearnedIndex(LISTS, TrainingData(examples=LIST_EXAMPLES))._odds is not None
