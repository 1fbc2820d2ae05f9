"""Personal data stays out of storage: the patterns, each write path, and the whole database.

The last test is the one that matters: a realistic run seeded with an e-mail
address, a phone number and IP addresses under ``pii_scrub = all``, then every
row of every table (and the learnings.md mirror) searched for them, on SQLite
and PostgreSQL. The others say where each piece of text is scrubbed, under
which setting, and that ordinary numbers survive.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from amelio import skills
from amelio.assistant import learnings
from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import get_interaction, respond
from amelio.db.schema import eval_results, feedback, feedback_events, metadata
from amelio.feedback import Collector
from amelio.feedback.examples import example_event
from amelio.privacy.anonymize import scrub, scrub_emails
from amelio.privacy.pii import Area, scrub_for_storage, scrubs
from amelio.search.aggregation import aggregate
from amelio.search.engines.fts5 import Fts5Engine
from amelio.search.service import Searcher
from amelio.testing import FakeLLMServer
from amelio.text import normalize
from amelio.workspace.folder import Workspace, open_workspace

EMAIL = "jeanne.moreau@corp.example"
PHONE = "+33 6 12 34 56 78"
IPV4 = "203.0.113.42"
IPV6 = "2001:db8:85a3::8a2e:370:7334"
SEEDED = (EMAIL, PHONE, IPV4, IPV6)


# -- the patterns (no database) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my address is 10.0.0.1.", "my address is [ip]."),
        ("host 192.168.100.200:8080 refused", "host [ip]:8080 refused"),
        ("subnet 10.0.0.0/8, range 10.0.0.1-10.0.0.9", "subnet [ip]/8, range [ip]-[ip]"),
        ("unreachable from 2001:db8::1: timeout", "unreachable from [ip]: timeout"),
        ("full 2001:0db8:85a3:0000:0000:8a2e:0370:7334 form", "full [ip] form"),
        ("link fe80::1ff:fe23:4567:890a%eth0 down", "link [ip] down"),
        ("mapped ::ffff:192.0.2.128 and ::1", "mapped [ip] and [ip]"),
        ("url http://[2001:db8::7]:443/x", "url http://[[ip]]:443/x"),
        ("IP: 8.8.8.8, call 06 12 34 56 78", "IP: [ip], call [phone]"),
    ],
)
def test_ip_addresses_become_a_placeholder(text: str, expected: str) -> None:
    assert scrub(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "version 1.2.3, v1.2.3.4 and 1.2.3.4.5",  # versions: 3 parts, a prefix, 5 parts
        "on 15.05.2026 at 14:30, or 2026.05.15 at 14:30:15",  # dates and times
        "999.1.1.1 and 256.10.1.1",  # octets over 255
        "padded 01.2.3.4",  # a leading zero: not an address
        "mac 00:1a:2b:3c:4d:5e",  # six groups, no '::'
        "Cafe::Add, std::vector and a ratio of 3:2",  # code, not an address (no digit)
        "ticket 4711, order 1234567, 42 people",
    ],
)
def test_what_only_looks_like_an_address_survives(text: str) -> None:
    assert scrub(text) == text


def test_document_ids_lose_only_e_mail_addresses() -> None:
    assert scrub_emails(f"contact:{EMAIL}") == "contact:[email]"
    assert scrub_emails("ticket/061234567890") == "ticket/061234567890"
    assert scrub("ticket/061234567890") == "ticket/[phone]"  # free text would lose it


def test_scrubbing_is_idempotent() -> None:
    once = scrub(f"{EMAIL} {PHONE} {IPV4} {IPV6} FR76 3000 6000 0112 3456 7890 189")
    assert once == "[email] [phone] [ip] [ip] [iban]"
    assert scrub(once) == once


@pytest.mark.parametrize(
    ("mode", "scrubbed"),
    [
        ("off", set()),
        ("events", {"events", "impressions"}),
        ("all", {"events", "impressions", "interactions", "comments", "learnings"}),
    ],
)
def test_the_setting_decides_each_area(
    sqlite_workspace: Workspace, mode: str, scrubbed: set[str]
) -> None:
    settings = sqlite_workspace.settings.model_copy(update={"pii_scrub": mode})
    areas: tuple[Area, ...] = ("events", "impressions", "interactions", "comments", "learnings")
    assert {a for a in areas if scrubs(settings, a)} == scrubbed
    for area in areas:
        expected = "[email]" if area in scrubbed else EMAIL
        assert scrub_for_storage(settings, EMAIL, area) == expected


# -- the collector: every free-text field of MartyFeedbackEventV1 -------------------------


def _with(ws: Workspace, monkeypatch: pytest.MonkeyPatch, **env: str) -> Workspace:
    """``ws`` reopened with these AMELIO_* settings (as a deployment would set them)."""
    for name, value in env.items():
        monkeypatch.setenv(f"AMELIO_{name.upper()}", value)
    return open_workspace(ws.root)


def _ingest_one(
    ws: Workspace, kind: str, change: Callable[[dict[str, Any]], None]
) -> tuple[dict[str, Any], str | None]:
    """Store one ``kind`` event edited by ``change``; its payload and doc_id column."""
    c = Collector(ws)
    event = example_event(kind, signer=c.signer)
    change(event)
    assert c.ingest([event]).counts()["accepted"] == 1
    with ws.engine.connect() as conn:
        row = conn.execute(
            sa.select(feedback_events.c.payload, feedback_events.c.doc_id)
            .order_by(feedback_events.c.seq.desc())
            .limit(1)
        ).one()
    return json.loads(row.payload), row.doc_id


def _put(path: str, value: str) -> Callable[[dict[str, Any]], None]:
    section, field = path.split(".")

    def change(event: dict[str, Any]) -> None:
        event.setdefault(section, {})[field] = value

    return change


# (event type, field, what the client sent, what is stored)
FIELDS = [
    ("result_clicked", "context.routeId", f"/people/{EMAIL}/calendar", "/people/[email]/calendar"),
    (
        "query_abandoned",
        "context.routeId",
        "/orders/0612345678?from=10.1.2.3",
        "/orders/[phone]?from=[ip]",
    ),
    ("result_clicked", "result.docId", EMAIL, "[email]"),
    ("result_pinned", "result.docId", f"person:{EMAIL}", "person:[email]"),
    ("vote_down", "vote.comment", f"Fails from {IPV4} and {IPV6}", "Fails from [ip] and [ip]"),
    ("vote_up", "vote.comment", f"Thanks, write to {EMAIL}", "Thanks, write to [email]"),
    ("result_hidden", "hide.reason", f"mine, call {PHONE}", "mine, call [phone]"),
    (
        "report_problem",
        "problem.freeText",
        f"Blocked at {IPV4}, I am {EMAIL}",
        "Blocked at [ip], I am [email]",
    ),
    ("correction_inline", "correction.beforeValue", f"{EMAIL}", "[email]"),
    ("correction_inline", "correction.afterValue", f"room of {IPV4}", "room of [ip]"),
]


@pytest.mark.parametrize(
    ("kind", "path", "sent", "kept"), FIELDS, ids=[f"{k}-{p}" for k, p, _, _ in FIELDS]
)
def test_collector_scrubs_every_free_text_field(
    sqlite_workspace: Workspace, kind: str, path: str, sent: str, kept: str
) -> None:
    payload, doc_id = _ingest_one(sqlite_workspace, kind, _put(path, sent))
    section, field = path.split(".")
    assert payload[section][field] == kept
    if path == "result.docId":
        assert doc_id == kept  # the indexed copy the signals read, too


def test_collector_keeps_identifiers_numeric_doc_ids_and_vocabulary(
    sqlite_workspace: Workspace,
) -> None:
    def change(event: dict[str, Any]) -> None:
        event["result"]["docId"] = "ticket:061234567890"
        event["request"]["modelBundleVersion"] = "v3.2.1"

    payload, doc_id = _ingest_one(sqlite_workspace, "result_clicked", change)
    assert doc_id == payload["result"]["docId"] == "ticket:061234567890"
    assert payload["request"]["modelBundleVersion"] == "v3.2.1"
    assert payload["context"]["routeId"] == "/recherche"


def test_pii_scrub_off_stores_event_text_verbatim(
    sqlite_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _with(sqlite_workspace, monkeypatch, pii_scrub="off")
    try:
        comment = f"call {PHONE} from {IPV4}"
        payload, doc_id = _ingest_one(ws, "vote_down", _put("vote.comment", comment))
        assert payload["vote"]["comment"] == comment
        payload, doc_id = _ingest_one(ws, "result_clicked", _put("result.docId", EMAIL))
        assert doc_id == EMAIL
    finally:
        ws.dispose()


# -- the assistant: interactions, comments, learnings, per setting -------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


SKILL = """---
name: account-help
description: Helps with mailbox and account problems.
triggers:
  - mailbox
---
Greet the person, then fix the mailbox.
"""
GREETING = "Hello, thanks for reaching the help desk."
EVALS = {
    "version": 1,
    "skill": "account-help",
    "rules": [
        {
            "id": "ah-001",
            "name": "Greets first",
            "type": "starts_with",
            "value": GREETING,
            "severity": "warning",
        }
    ],
}


def _assistant(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer, mode: str
) -> Workspace:
    """``ws`` with the account-help skill, the fake LLM and ``pii_scrub = mode``."""
    llm.reset()
    folder = ws.root / "account-skills" / "account-help"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (folder / "account-help.evals.json").write_text(json.dumps(EVALS), encoding="utf-8")
    skills.import_skills(ws.engine, folder.parent)
    return _with(
        ws,
        monkeypatch,
        pii_scrub=mode,
        llm_provider="openai",
        llm_base_url=llm.openai_base_url,
        llm_model="fake-model",
    )


MESSAGE = f"My mailbox {EMAIL} is full, I connect from {IPV4}; call {PHONE}"
ANSWER = f"{EMAIL}: your mailbox is full. From {IPV6}, run `mailctl purge`."


@pytest.mark.parametrize(("mode", "scrubbed"), [("all", True), ("events", False), ("off", False)])
def test_interactions_comments_and_learnings_follow_the_setting(
    sqlite_workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    llm: FakeLLMServer,
    mode: str,
    scrubbed: bool,
) -> None:
    ws = _assistant(sqlite_workspace, monkeypatch, llm, mode)
    try:
        llm.reply(ANSWER)
        reply = respond(ws, MESSAGE)
        # The person and the model always see the real text; only the record differs.
        assert reply.answer == ANSWER and llm.requests[-1].prompt == MESSAGE
        stored = get_interaction(ws, reply.interaction_id)
        [detail] = [e["detail"] for e in stored["evals"] if not e["passed"]]
        comment = f"Never echo {EMAIL}; I am at {IPV4}"
        result = give_answer_feedback(ws, reply.interaction_id, "down", comment=comment)
        added, _ = learnings.add_learning(
            ws, f"Escalate to {PHONE} when {IPV6} is down", skill="account-help"
        )
        with ws.engine.connect() as conn:
            kept_comment = conn.scalar(sa.select(feedback.c.comment))
        mirror = learnings.learnings_path(ws, "default").read_text(encoding="utf-8")
    finally:
        ws.dispose()
    assert result.learning is not None
    if scrubbed:
        assert stored["message"] == "My mailbox [email] is full, I connect from [ip]; call [phone]"
        assert stored["answer"] == "[email]: your mailbox is full. From [ip], run `mailctl purge`."
        assert "[email]" in detail and EMAIL not in detail
        assert kept_comment == result.learning.rule == "Never echo [email]; I am at [ip]"
        assert added.rule == "Escalate to [phone] when [ip] is down"
        assert "Never echo [email]; I am at [ip]" in mirror and "[phone]" in mirror
    else:
        assert stored["message"] == MESSAGE and stored["answer"] == ANSWER
        assert EMAIL in detail
        assert kept_comment == result.learning.rule == comment
        assert added.rule == f"Escalate to {PHONE} when {IPV6} is down"
    assert all((s in mirror) != scrubbed for s in SEEDED)


def test_learnings_typed_into_the_mirror_are_scrubbed_under_all(
    sqlite_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _with(sqlite_workspace, monkeypatch, pii_scrub="all")
    try:
        learnings.add_learning(ws, "Keep answers short")
        path = learnings.learnings_path(ws, "default")
        path.write_text(
            path.read_text(encoding="utf-8")
            + f"- [2026-05-01T10:00:00Z] [manual] Page {PHONE} if {IPV4} is down\n"
            + f"Ask {EMAIL} first\n",
            encoding="utf-8",
        )  # an unreadable line
        rules = [item.rule for item in learnings.list_learnings(ws)]
        mirror = path.read_text(encoding="utf-8")
    finally:
        ws.dispose()
    assert rules == ["Keep answers short", "Page [phone] if [ip] is down"]
    assert "Page [phone] if [ip] is down" in mirror
    assert "Ask [email] first" in mirror  # kept for a person to fix, without the address
    assert not any(s in mirror for s in SEEDED)


# -- the whole database ---------------------------------------------------------------------


DOCS = [
    {"_id": "mailbox-full", "title": "Mailbox full", "text": "Purge the mailbox archive."},
    {"_id": "vpn", "title": "VPN access", "text": "Connect to the VPN from your laptop."},
]


def _leaks(ws: Workspace, secrets: tuple[str, ...]) -> list[str]:
    """Where any of ``secrets`` appears: ``table.column: secret`` for every hit."""
    found = []
    with ws.engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(sa.select(table)):
                for column, value in row._mapping.items():
                    text = str(value)
                    found += [f"{table.name}.{column}: {s!r}" for s in secrets if s in text]
    return found


def test_no_table_holds_the_seeded_personal_data(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    ws = _assistant(workspace, monkeypatch, llm, "all")
    try:
        # Search, with the personal data in the query, and a click on its result.
        corpus = Fts5Engine.for_workspace(ws.settings.data_dir)
        (tmp_path / "docs.jsonl").write_text(
            "".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8"
        )
        corpus.import_file(tmp_path / "docs.jsonl")
        searcher = Searcher(ws, engine=corpus, background_aggregation=False)
        response = searcher.search(f"mailbox full {EMAIL} {PHONE} {IPV4}", profile="bm25")
        assert response.results

        # Feedback events from a client: raw ids and every free-text field.
        c = Collector(ws)
        events = [
            example_event(
                kind,
                token=response.token,
                query_id=response.query_id,
                request_id=response.request_id,
                session_id=EMAIL,
                user_id=PHONE,
            )
            for kind in (
                "result_clicked",
                "result_dwell_time",
                "vote_down",
                "result_hidden",
                "report_problem",
                "correction_inline",
            )
        ]
        clicked = {"docId": response.results[0].doc_id, "rankShown": 1}
        events[0]["result"] = dict(clicked)
        events[1]["result"] = dict(clicked)
        events[0]["context"]["routeId"] = f"/search?q={EMAIL}&ip={IPV4}"
        events[2]["vote"]["comment"] = f"Reach me at {PHONE} or {EMAIL}"
        events[3]["result"]["docId"] = EMAIL
        events[3]["hide"]["reason"] = f"That is me, {EMAIL}"
        events[4]["problem"]["freeText"] = f"Blocked from {IPV6} and {IPV4}"
        events[5]["correction"] = {"slot": "contact", "beforeValue": PHONE, "afterValue": EMAIL}
        assert c.ingest(events).counts()["accepted"] == len(events)
        aggregate(ws)

        # The assistant: a chat, a 👎 with a comment, a bare Fix It (feedback only), a
        # learning, a hand edit.
        llm.reply(ANSWER)
        reply = respond(ws, MESSAGE, user=EMAIL)
        give_answer_feedback(
            ws,
            reply.interaction_id,
            "down",
            user=EMAIL,
            comment=f"Do not repeat {EMAIL} or {PHONE}; I am on {IPV6}",
        )
        llm.reply(f"Purged. Logged from {IPV4}.")
        again = respond(ws, f"mailbox still full for {EMAIL}")
        give_answer_feedback(ws, again.interaction_id, "fixit", user=PHONE)
        learnings.add_learning(ws, f"Escalate to {EMAIL} when {IPV4} is down")
        mirror = learnings.learnings_path(ws, "default")
        mirror.write_text(
            mirror.read_text(encoding="utf-8")
            + f"- [2026-05-01T10:00:00Z] [manual] Call {PHONE} first\n",
            encoding="utf-8",
        )
        assert len(learnings.list_learnings(ws)) == 3

        # The normalized forms too: search keeps "jeanne moreau corp example".
        secrets = tuple(dict.fromkeys(f for s in SEEDED for f in (s, s.casefold(), normalize(s))))
        with ws.engine.connect() as conn:
            assert conn.scalar(sa.select(sa.func.count()).select_from(eval_results))
        assert _leaks(ws, secrets) == []
        assert not [s for s in secrets if s in mirror.read_text(encoding="utf-8")]
    finally:
        ws.dispose()
