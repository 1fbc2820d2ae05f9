"""The context router: the seed's scoring, normalization, scorers and the hint block."""

from __future__ import annotations

from pathlib import Path

import pytest

from amelio import skills
from amelio.errors import InvalidInput
from amelio.routing import Scorer
from amelio.routing.router import HINT_HEADER, Router, route_message, scorers
from amelio.skills.model import SkillSpec
from amelio.text import ANALYZERS, ROUTER, fold, normalize, tokens
from amelio.workspace.folder import Workspace


def spec(
    name: str, triggers: tuple[str, ...] = (), keywords: tuple[str, ...] = (), description: str = ""
) -> SkillSpec:
    return SkillSpec(
        name=name,
        description=description or f"About {name}.",
        triggers=triggers,
        keywords=keywords,
        content=f"SECRET BODY OF {name}",
    )


SEED = [
    spec("code-review", ("review", "code review"), ("owasp", "diff", "pull request")),
    spec("deploy", ("deploy", "déployer"), ("docker", "production")),
    spec("git-help", ("git",), ("rebase", "push")),
]


def keywords(message: str, skills: list[SkillSpec] = SEED) -> list[tuple[str, float]]:
    return [(h.name, h.score) for h in Router(skills, "keywords").route(message).hits]


def test_seed_scoring_trigger_two_keyword_one() -> None:
    assert keywords("please review the diff") == [("code-review", 3.0)]
    # "code review" (+2) and "review" (+2) are both triggers; "pull request" a keyword.
    assert keywords("code review of this pull request") == [("code-review", 5.0)]
    assert keywords("deploy the docker image to production") == [("deploy", 4.0)]
    # A term counts once, however often it appears.
    assert keywords("git git git") == [("git-help", 2.0)]


def test_matched_terms_are_reported() -> None:
    hit = Router(SEED, "keywords").route("Code review: the DIFF and the pull-request").hits[0]
    assert set(hit.matched) == {"review", "code review", "diff", "pull request"}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Déployer en production", [("deploy", 3.0)]),  # accents folded both ways
        ("deployer en PRODUCTION", [("deploy", 3.0)]),
        ("DÉPLOYER", [("deploy", 2.0)]),
        ("preview the page", []),  # review ≠ preview
        ("reviewing", []),  # whole words only
        ("code, review!", [("code-review", 2.0)]),  # the phrase is broken: review only
        ("pull   request", [("code-review", 1.0)]),  # phrases ignore spacing
        ("pullrequest", []),
        ("", []),
    ],
)
def test_normalization(message: str, expected: list[tuple[str, float]]) -> None:
    assert keywords(message) == expected


def test_ties_broken_by_name_and_top_five() -> None:
    many = [spec(f"skill-{c}", ("shared",)) for c in "gfedcba"]
    hits = Router(many, "keywords").route("shared word").hits
    assert [h.name for h in hits] == ["skill-a", "skill-b", "skill-c", "skill-d", "skill-e"]
    assert len(Router(many, "keywords").route("shared", limit=7).hits) == 7


def test_hint_block_has_names_and_descriptions_never_bodies() -> None:
    block = Router(SEED, "keywords").route("review and deploy").hint_block()
    assert block.splitlines()[0] == HINT_HEADER
    assert "- code-review: About code-review." in block
    assert "- deploy: About deploy." in block
    assert "SECRET BODY" not in block
    assert Router(SEED, "keywords").route("nothing relevant").hint_block() == ""


def test_text_folding() -> None:
    assert fold("Ça DÉPLOIE") == "ca deploie"
    assert tokens("L’API d'Odoo, v2.0!") == ("l'api", "d'odoo", "v2", "0")
    assert normalize("  Always USE t-call!! ") == normalize("always use t call")


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        # split at apostrophes, then the clitics and one-letter words left out
        ("What's l’API? Déployer, c'est l'été!", ["what", "api", "deployer", "est", "ete"]),
        # Lucene's stopwords and punctuation go; a hyphen splits words
        ("Is it the pull-request, or a code review?", ["pull", "request", "code", "review"]),
        ("ÉCOLE naïve: 3.14 * foo_bar", ["ecole", "naive", "14", "foo", "bar"]),
        ("I a s t -- !!!", []),
    ],
)
def test_the_router_analyzer_pins_its_terms(text: str, terms: list[str]) -> None:
    assert ANALYZERS["router"] is ROUTER
    assert ROUTER.analyze(text) == terms
    # The router tokenizes a message once, with punctuation breaks for its phrases:
    # a break is never a BM25 term.
    assert ROUTER.terms(tokens(text, breaks=True)) == terms


def test_bm25_and_hybrid_rank_and_threshold() -> None:
    skills_ = [
        spec("book-flight", ("book flight",), ("flight", "airline"), "Book a flight"),
        spec("weather", ("weather",), ("rain", "forecast"), "Weather forecast"),
        spec("hotel", ("book hotel",), ("hotel", "room"), "Book a hotel room"),
    ]
    assert Router(skills_, "bm25").route("I need an airline ticket").names[0] == "book-flight"
    hybrid = Router(skills_, "hybrid")
    # No trigger or keyword, but a description word: hybrid still finds it.
    assert hybrid.route("book a flight please", min_score=0).names[0] == "book-flight"
    # The seed score decides; BM25 only adds a fraction in [0, 1].
    top = hybrid.route("weather forecast").hits[0]
    assert top.name == "weather"
    assert 3.0 < top.score <= 4.0
    # A common word alone stays under the hybrid threshold.
    assert hybrid.route("a").hits == ()


CHAT = [
    spec("are-you-a-bot", ("are you a bot",), ("bot", "human"), "Are you a bot"),
    spec("what-can-i-ask-you", ("what can",), ("ask", "help"), "What can I ask you"),
    spec("book-flight", ("book flight",), ("flight", "airline"), "Book flight"),
    spec("api-design", ("rest api",), ("api", "endpoint"), "Designs HTTP APIs"),
]


@pytest.mark.parametrize("scorer", ["bm25", "hybrid"])
def test_bm25_ignores_function_words_in_skill_names(scorer: str) -> None:
    # Only one skill has "i" or "a", so their idf is the highest there is: before they were
    # dropped, any message with "I" or "a" was pulled toward these skills.
    router = Router(CHAT, scorer)
    assert router.route("I need a flight to the coast", min_score=0).names == ("book-flight",)
    assert router.route("this is a test of the system", min_score=0).names == ()
    assert router.route("Are you a bot?", min_score=0).names[0] == "are-you-a-bot"


@pytest.mark.parametrize(
    ("message", "skill", "term"),
    [
        ("Documente l'API", "api-design", "api"),  # a French elision
        ("what's possible here", "what-can-i-ask-you", "what"),  # an English contraction
        ("the airline’s app", "book-flight", "airline"),  # a possessive, typographic apostrophe
    ],
)
def test_bm25_matches_words_joined_by_an_apostrophe(message: str, skill: str, term: str) -> None:
    hit = Router(CHAT, "bm25").route(message).hits[0]
    assert (hit.name, hit.matched) == (skill, (term,))


def test_unknown_scorer_is_a_clear_error() -> None:
    with pytest.raises(InvalidInput, match="keywords"):
        Router(SEED, "telepathy")


def test_scorers_are_plugins() -> None:
    from collections.abc import Callable

    from amelio.hookspecs import hookimpl
    from amelio.plugins import get_plugin_manager

    def first_alphabetical(skills_: object) -> object:
        def score(message: tuple[str, ...]) -> dict[int, tuple[float, list[str]]]:
            return {0: (1.0, ["always"])}

        return score

    class Plugin:
        @hookimpl
        def register_router_scorers(self, register: Callable[[Scorer], None]) -> None:
            register(Scorer("always-first", first_alphabetical))

    pm = get_plugin_manager()
    plugin = Plugin()
    pm.register(plugin)
    try:
        assert "always-first" in scorers()
        assert Router(SEED, "always-first").route("x").names == ("code-review",)
    finally:
        pm.unregister(plugin)
    assert "always-first" not in scorers()


def test_route_message_uses_project_view_and_settings(workspace: Workspace, examples: Path) -> None:
    skills.import_skills(workspace.engine, examples)
    route = route_message(workspace, "please review this pull request")
    assert route.scorer == "learned"
    assert route.names[0] == "code-review"
    assert route_message(workspace, "git push rejected", scorer="keywords").names == ("git-help",)
    # A project fork with other triggers changes routing for that project only.
    skills.fork_skill(workspace.engine, "git-help", "acme", author="t")
    skills.update_skill(
        workspace.engine,
        "git-help",
        project="acme",
        triggers=["zzz-trigger"],
        keywords=[],
        author="t",
        reason="r",
    )
    assert route_message(workspace, "zzz-trigger", project="acme").names == ("git-help",)
    assert route_message(workspace, "zzz-trigger").names == ()
