"""Findings: failures grouped into problems that keep their id, close and reopen.

The grouping's quality is measured by benchmarks/findings.py on its own fixture;
these tests use a few comments of their own."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from amelio import skills
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import respond
from amelio.cli import main
from amelio.db.schema import utcnow
from amelio.embeddings import EmbedderUnavailable
from amelio.errors import Conflict
from amelio.improve import findings
from amelio.llm.fake import ScriptedProvider
from amelio.workspace.folder import Workspace, open_workspace

FORCE = [
    "Never suggest a plain force push",
    "Do not tell people to force push",
    "Force pushing is dangerous, use --force-with-lease",
    "No git push --force please, it rewrites history",
]
LONG = [
    "The answer is way too long",
    "Answer is too long, be brief",
    "Far too long, the answer should be two lines",
]


@pytest.fixture
def ws(workspace: Workspace, examples: Path) -> Workspace:
    skills.import_skills(workspace.engine, examples)
    return workspace


def complain(ws: Workspace, comments: list[str], message: str = "git push rejected") -> None:
    for comment in comments:
        reply = respond(ws, message, provider=ScriptedProvider(default="Run git push --force."))
        give_answer_feedback(ws, reply.interaction_id, "fixit", comment=comment, user="ann")


def test_failures_group_into_findings_that_keep_their_id(ws: Workspace) -> None:
    complain(ws, FORCE)
    complain(ws, LONG, "explain git rebase")
    report = findings.update_findings(ws, file_fixes=False)
    assert len(report.created) == 2 and report.waiting == 0
    found = {f.id: f for f in findings.list_findings(ws)}
    force = next(f for f in found.values() if "force" in f.title)
    assert force.evidence_count == 4 and force.skills == ("git-help",)
    assert force.status == "open" and 0 < force.share <= 1
    shown = findings.get_finding(ws, force.id)
    assert {e.text for e in shown.evidence} == set(FORCE)
    # Run again: nothing new, nothing moves; a new failure of the same kind joins.
    assert findings.update_findings(ws, file_fixes=False).created == []
    complain(ws, ["Please stop recommending git push --force"])
    again = findings.update_findings(ws, file_fixes=False)
    assert (again.matched, again.created) == (1, [])
    assert findings.get_finding(ws, force.id).evidence_count == 5


def test_a_closed_finding_reopens_when_its_problem_comes_back(ws: Workspace) -> None:
    complain(ws, FORCE)
    [made] = findings.update_findings(ws, file_fixes=False).created
    closed = findings.close_finding(ws, made, actor="ana", reason="fixed in v2")
    assert (closed.status, closed.closed_by, closed.close_reason) == (
        "closed",
        "ana",
        "fixed in v2",
    )
    with pytest.raises(Conflict):
        findings.close_finding(ws, made, actor="ana")
    complain(ws, FORCE[:2])
    assert findings.update_findings(ws, file_fixes=False).reopened == []  # two are not enough
    complain(ws, FORCE[2:3])
    assert findings.update_findings(ws, file_fixes=False).reopened == [made]
    assert findings.get_finding(ws, made).status == "reopened"


def test_without_an_embedder_nothing_is_written(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    complain(ws, FORCE)
    monkeypatch.setenv("AMELIO_SEARCH_EMBEDDING_MODEL", "")
    bare = open_workspace(ws.root)
    try:
        with pytest.raises(EmbedderUnavailable, match="search_embedding_model is empty"):
            findings.update_findings(bare)
    finally:
        bare.dispose()
    assert findings.list_findings(ws) == []


def test_old_failures_are_outside_the_window(ws: Workspace) -> None:
    complain(ws, FORCE)
    [made] = findings.update_findings(ws).created
    assert findings.get_finding(ws, made).share > 0
    later = utcnow() + timedelta(days=ws.settings.findings_window_days + 1)
    report = findings.update_findings(ws, now=later)
    assert (report.evidence, report.created) == (0, [])
    assert findings.get_finding(ws, made).share == 0  # none of it in the window now


def test_the_cli_updates_lists_shows_and_closes(ws: Workspace) -> None:
    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["-w", str(ws.root), "findings", *args])
        assert result.exit_code == 0, result.output
        return result.output

    assert "No failures in project 'default' in the last 14 days" in cli("update")
    assert findings.list_findings(ws) == []
    complain(ws, FORCE)

    updated = cli("update")
    assert "1 new finding(s)" in updated and "Proposal #" in updated
    listed = cli("list")
    assert "fixing" in listed and "git-help" in listed
    [made] = findings.list_findings(ws)
    assert "feedback:" in cli("show", str(made.id))
    assert "closed" in cli("close", str(made.id), "--reason", "fixed")
    assert cli("list", "--status", "fixing").strip() == "No findings."


def test_over_http_a_bot_reads_and_an_admin_closes(ws: Workspace) -> None:
    from fastapi.testclient import TestClient

    from amelio.server import create_app
    from amelio.workspace import keys, projects

    complain(ws, FORCE)
    [made] = findings.update_findings(ws, file_fixes=False).created
    projects.create_project(ws.engine, "other")
    _, bot = keys.create_key(ws.engine, name="bot", role="bot")
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    _, elsewhere = keys.create_key(ws.engine, name="o", role="bot", projects=["other"])
    as_bot, as_admin = {"Authorization": f"Bearer {bot}"}, {"Authorization": f"Bearer {admin}"}
    with TestClient(create_app(ws)) as client:
        listed = client.get("/v1/findings", headers=as_bot).json()
        assert [f["id"] for f in listed["findings"]] == [made]
        one = client.get(f"/v1/findings/{made}", headers=as_bot).json()
        assert len(one["evidence"]) == 4 and one["status"] == "open"
        other = {"Authorization": f"Bearer {elsewhere}"}
        assert client.get("/v1/findings", headers=other).status_code == 403
        assert client.get(f"/v1/findings/{made}?project=other", headers=other).status_code == 404
        assert client.post(f"/v1/findings/{made}/close", headers=as_bot).status_code == 403
        r = client.post(f"/v1/findings/{made}/close", json={"reason": "fixed"}, headers=as_admin)
        assert (r.json()["status"], r.json()["closedBy"]) == ("closed", "key:ana")
        assert client.post(f"/v1/findings/{made}/close", headers=as_admin).status_code == 409
        assert client.get("/v1/findings?status=open", headers=as_bot).json()["findings"] == []


def test_the_nightly_report_carries_the_findings(ws: Workspace) -> None:
    from amelio.improve.nightly import run_improve

    complain(ws, FORCE)
    report = run_improve(ws, notify=False)
    card = report.projects[0]["findings"]
    assert len(card["created"]) == 1 and card["top"][0]["skills"] == ["git-help"]
    assert "finding #" in report.markdown()


def test_a_reopened_finding_is_news_in_the_report_and_the_admin_chat(ws: Workspace) -> None:
    from amelio.improve.nightly import improve_notification, run_improve
    from amelio.telegram.notifier import summary_for

    complain(ws, FORCE)
    [made] = findings.update_findings(ws).created
    findings.close_finding(ws, made, actor="ana")
    complain(ws, ["Stop saying git push --force", *FORCE[:2]])
    report = run_improve(ws, notify=False)
    card = report.projects[0]["findings"]
    assert card["reopened"] == [made] and card["top"][0]["id"] == made
    assert "Stop saying git push --force" in card["reopenedEvidence"][str(made)]
    assert f"finding #{made} reopened" in report.markdown()
    said = summary_for(improve_notification(ws, report), "default")
    assert said is not None and "REOPENED" in said and "Stop saying git push --force" in said


def test_the_dashboard_lists_findings_and_an_admin_closes_one(ws: Workspace) -> None:
    import re

    from fastapi.testclient import TestClient

    from amelio.server import create_app
    from amelio.workspace import keys

    complain(ws, FORCE)
    [made] = findings.update_findings(ws).created
    _, admin = keys.create_key(ws.engine, name="ana", role="admin")
    with TestClient(create_app(ws)) as client:
        client.post("/login", data={"api_key": admin, "next": "/findings"})
        page = client.get("/findings").text
        assert f"#{made} " in page and "feedback:" in page and "git-help" in page
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        r = client.post(
            f"/findings/{made}/close",
            data={"csrf": csrf.group(1), "reason": "fixed"},
            follow_redirects=False,
        )
        assert r.status_code == 303 and "finding_closed" in r.headers["location"]
    assert findings.get_finding(ws, made).status == "closed"


def test_a_proposal_for_its_skill_makes_it_fixing_and_its_approval_closes_it(
    ws: Workspace,
) -> None:
    from amelio.improve import proposals as props

    complain(ws, FORCE)
    [made] = findings.update_findings(ws, file_fixes=False).created
    first = props.create_proposal(
        ws,
        "git-help",
        proposed_content="# Git\n\nUse --force-with-lease.",
        rationale="r",
        author="x",
    )
    findings.sync_with_proposals(ws)
    fixing = findings.get_finding(ws, made)
    assert (fixing.status, fixing.proposal_ids) == ("fixing", (first.id,))
    props.reject_proposal(ws, first.id, actor="ana", reason="not yet")
    assert findings.get_finding(ws, made).status == "open"  # at once, not next run
    second = props.create_proposal(
        ws, "git-help", proposed_content="# Git\n\nNever force push.", rationale="r", author="x"
    )
    findings.update_findings(ws, file_fixes=False)
    props.approve_proposal(ws, second.id, actor="ana")
    done = findings.get_finding(ws, made)
    assert (done.status, done.closed_by) == ("closed", f"proposal #{second.id}")
    assert done.proposal_ids == (first.id, second.id)


def test_a_finding_comes_with_a_rule_that_catches_it(ws: Workspace) -> None:
    """The failing answers say "git push --force"; the clean ones of the skill do
    not (one says --force-with-lease): the mined rule fires on all of the first
    and none of the second."""
    clean = ScriptedProvider(default="Run git pull --rebase, then git push --force-with-lease.")
    for _ in range(4):
        respond(ws, "git push rejected", provider=clean)
    complain(ws, FORCE)
    [made] = findings.update_findings(ws).created
    fix = findings.get_finding(ws, made).fix
    assert fix is not None and fix["rule"]["type"] == "regex_not_match"
    assert "--force" in fix["rule"]["name"] and "lease" not in fix["rule"]["name"]
    assert (fix["firesOnEvidence"], fix["firesOnClean"]) == (1.0, 0.0)
    assert (fix["evidence"], fix["clean"]) == (4, 4)


def test_with_an_llm_a_new_finding_gets_its_one_line_title(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amelio.testing import FakeLLMServer

    complain(ws, FORCE)
    with FakeLLMServer() as server:
        monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
        monkeypatch.setenv("AMELIO_LLM_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
        monkeypatch.setenv("AMELIO_LLM_MAX_RETRIES", "0")
        named = open_workspace(ws.root)
        try:
            server.reply("Suggests a plain force push.")
            [made] = findings.update_findings(named).created
            assert findings.get_finding(named, made).title == "Suggests a plain force push"
            assert FORCE[0] in server.requests[-1].prompt
        finally:
            named.dispose()


def test_more_failures_than_one_batch_are_all_grouped(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grouping works on at most MAX_GROUPED pieces at once; the older ones are
    matched to the groups just made, then grouped in turn, never dropped."""
    monkeypatch.setattr(findings, "MAX_GROUPED", 4)
    complain(ws, FORCE)
    complain(ws, LONG, "explain git rebase")
    report = findings.update_findings(ws)
    assert len(report.created) == 2 and report.waiting == 0
    assert sorted(f.evidence_count for f in findings.list_findings(ws)) == [3, 4]


def thumbs_down(ws: Workspace, comments: list[str], answer: str = "Run git push --force.") -> None:
    """👎 with a comment: unlike a Fix It, it pins nothing by itself."""
    for comment in comments:
        reply = respond(ws, "git push rejected", provider=ScriptedProvider(default=answer))
        give_answer_feedback(ws, reply.interaction_id, "down", comment=comment, user="ann")


def test_a_findings_fix_is_one_proposal_whose_approval_adds_the_rule_and_pins_its_cases(
    ws: Workspace,
) -> None:
    from amelio.assistant.cases import list_cases
    from amelio.improve import proposals as props
    from amelio.improve.templates import FINDINGS_START
    from amelio.skills.store import get_skill

    clean = ScriptedProvider(default="Run git pull --rebase, then git push --force-with-lease.")
    for _ in range(4):
        respond(ws, "git push rejected", provider=clean)
    thumbs_down(ws, FORCE)
    report = findings.update_findings(ws)
    [made], [filed] = report.created, report.proposals
    proposal = props.get_proposal(ws, filed)
    rule = next(r for r in proposal.evals or () if r["id"] == f"finding-{made}")
    assert rule["type"] == "regex_not_match" and proposal.proposed_by == "template"
    # The card says both rates; the new line names the problem without teaching the
    # very words the rule forbids.
    assert "fires on 100% of the finding's evidence and 0% of git-help's clean" in (
        proposal.rationale
    )
    added = proposal.proposed_content[proposal.proposed_content.index(FINDINGS_START) :]
    assert f"(finding #{made})" in added and "4 times" in added
    assert "push --force " not in added and "push --force." not in added
    assert f"+ rule finding-{made}" in proposal.diff()
    golden = proposal.evidence["goldenCases"]
    assert len(golden) == 4 and proposal.evidence["finding"] == made
    assert findings.get_finding(ws, made).status == "fixing"
    # Filed once: the next run files nothing more for it.
    assert findings.update_findings(ws).proposals == []
    props.approve_proposal(ws, filed, actor="ana")
    skill = get_skill(ws.engine, "git-help")
    assert f"finding-{made}" in {r["id"] for r in skill.spec.evals or ()}
    pinned = {c.interaction_id: c for c in list_cases(ws, skill="git-help")}
    assert {g["interactionId"] for g in golden} <= set(pinned)
    assert {pinned[g["interactionId"]].source for g in golden} == {"finding"}
    assert findings.get_finding(ws, made).status == "closed"


def test_a_rejected_fix_is_not_filed_again_until_the_finding_reopens(ws: Workspace) -> None:
    from amelio.improve import proposals as props

    thumbs_down(ws, FORCE)
    report = findings.update_findings(ws)
    [made], [first] = report.created, report.proposals
    props.reject_proposal(ws, first, actor="ana", reason="not like this")
    assert findings.get_finding(ws, made).status == "open"
    assert findings.update_findings(ws).proposals == []  # a person said no to it
    findings.close_finding(ws, made, actor="ana")
    thumbs_down(ws, ["Still suggesting git push --force", *FORCE[:2]])
    again = findings.update_findings(ws)
    assert again.reopened == [made]
    # Reopening forgets the filing, but nearly the change a person rejected is still
    # not filed a second time, and the report says why.
    assert again.proposals == []
    assert "which ana rejected: not like this" in again.skipped[0]["reason"]


def test_a_finding_whose_skill_has_a_pending_proposal_waits_for_it(ws: Workspace) -> None:
    from amelio.improve import proposals as props

    pending = props.create_proposal(
        ws, "git-help", proposed_content="# Git\n\nBe careful.", rationale="r", author="x"
    )
    thumbs_down(ws, FORCE)
    report = findings.update_findings(ws)
    assert report.proposals == []
    assert f"proposal #{pending.id}" in report.skipped[0]["reason"]
    [made] = report.created
    assert findings.get_finding(ws, made).proposal_ids == (pending.id,)


def test_a_proposal_can_set_the_skills_rules_and_bad_rules_are_refused(ws: Workspace) -> None:
    from amelio.errors import InvalidInput
    from amelio.improve import proposals as props

    with pytest.raises(InvalidInput, match="pattern"):
        props.create_proposal(
            ws,
            "git-help",
            rules=[{"id": "x", "type": "regex_match", "pattern": "(unclosed"}],
            rationale="r",
            author="x",
        )
    rules = [{"id": "lease", "name": "Says lease", "type": "icontains", "value": "lease"}]
    made = props.create_proposal(ws, "git-help", rules=rules, rationale="r", author="x")
    assert "+ rule lease" in made.diff() and made.evals is not None
    props.approve_proposal(ws, made.id, actor="ana")
    from amelio.skills.store import get_skill

    assert [r["id"] for r in get_skill(ws.engine, "git-help").spec.evals or ()] == ["lease"]


# -- the search side -------------------------------------------------------------------

SEARCH_DOCS = [
    {"_id": "unsubscribe", "title": "Unsubscribe from the newsletter", "text": "Use the link."},
    {"_id": "invoice", "title": "Download an invoice", "text": "Invoices are under billing."},
    {"_id": "old-invoice", "title": "Invoices before 2019", "text": "Ask support for those."},
]


def test_searches_that_fail_people_become_search_findings_with_their_fix(
    ws: Workspace, tmp_path: Path
) -> None:
    """Three people find nothing for "warranty claim", three reformulate "stop
    newsletter" into "unsubscribe newsletter" and click, three hide an old invoice:
    three search findings, each with its fix."""
    import json
    import random

    from amelio.feedback import Collector
    from amelio.search import Searcher
    from amelio.search.engines.registry import workspace_corpus
    from amelio.search.simulate import result_event

    now = int(time.time() * 1000)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in SEARCH_DOCS), encoding="utf-8")
    corpus = workspace_corpus(ws.settings)
    corpus.import_file(docs)
    searcher = Searcher(ws, engine=corpus, background_aggregation=False, rng=random.Random(0))
    searcher.settings = ws.settings.model_copy(
        update={"search_thompson": 0.0, "search_exploration": 0.0}
    )
    events: list[dict] = []
    for person in ("ann", "bob", "cy"):
        assert (
            searcher.search("warranty claim", profile="bm25", session=f"w-{person}").results == ()
        )
        searcher.search("stop newsletter", profile="bm25", session=f"n-{person}")
        found = searcher.search("unsubscribe newsletter", profile="bm25", session=f"n-{person}")
        events.append(result_event(found, "unsubscribe", "result_clicked", f"n-{person}", now))
        old = searcher.search("invoices", profile="bm25", session=f"i-{person}")
        events.append(
            result_event(
                old, "old-invoice", "result_hidden", f"i-{person}", now, hide={"reason": "outdated"}
            )
        )
    assert Collector(ws).ingest(events, rate_limit=False).count("accepted") == len(events)
    report = findings.update_findings(ws)
    assert report.search_evidence >= 9 and report.proposals == []
    made = [findings.get_finding(ws, i) for i in report.created]
    assert {f.kind for f in made} == {"search"} and len(made) == 3
    by_kind = {f.evidence[0].ref.split(":")[1]: f for f in made}
    empty = by_kind["empty"].fix
    assert empty is not None and empty["corpusLacks"]
    assert empty["unanswered"] == [{"query": "warranty claim", "times": 3}]
    chain = by_kind["chain"].fix
    assert chain is not None and chain["synonyms"] == [
        {"from": "stop", "to": "unsubscribe", "chains": 3}
    ]
    assert chain["pins"] == [{"query": "stop newsletter", "doc": "unsubscribe", "chains": 3}]
    assert not chain["corpusLacks"]
    hidden = next(f for f in made if f.fix and f.fix["hidden"]).fix
    assert hidden is not None and hidden["hidden"][0]["doc"] == "old-invoice"
    shown = "\n".join(findings.describe_fix(chain))
    assert "“stop” → “unsubscribe”" in shown and "Pin unsubscribe" in shown
    # Shares are of the window's searches (twelve), not of its answers (none).
    assert by_kind["empty"].share == 0.25 and by_kind["chain"].share == 0.25
