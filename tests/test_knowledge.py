"""The knowledge loop: sources, the durable sync queue, the index and cited answers."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from amelio import knowledge
from amelio.db.schema import knowledge_chunks, knowledge_queue
from amelio.errors import ConfigError, InputTooLarge, InvalidInput, NotFound
from amelio.knowledge import Source
from amelio.knowledge.index import collection_name, embedder_for, prepare_source, search
from amelio.knowledge.sync import CLAIM_SECONDS, _claim
from amelio.llm.fake import ScriptedProvider
from amelio.search.engines.registry import open_collection
from amelio.testing import FakeLLMServer
from amelio.text import ANALYZERS, KNOWLEDGE, SEARCH, s_stem
from amelio.workspace.config import Settings
from amelio.workspace.folder import Workspace, open_workspace

T0 = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
VPN = (
    "# VPN access\n\nThe VPN is for remote work only. Connect with the Amelio client.\n\n"
    "## Password reset\n\nTo reset the VPN password, open the self-service portal and "
    "choose Reset. The new password reaches the VPN gateway within five minutes.\n\n"
    "## Outages\n\nDuring an outage, call the helpdesk at extension 4242."
)
REFUND = (
    "Refunds are granted within thirty days of purchase with a receipt. After thirty "
    "days customers get store credit. Damaged items are always refunded."
)


def src(source_id: str, text: str, at: datetime = T0, **extra: str) -> Source:
    return Source(source_id=source_id, text=text, updated_at=at, **extra)


@pytest.fixture
def ws(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """Small chunks (so a source has several), no backoff (so retries are due at once)."""
    monkeypatch.setenv("AMELIO_KNOWLEDGE_CHUNK_CHARS", "200")
    monkeypatch.setenv("AMELIO_KNOWLEDGE_SYNC_BACKOFF", "0")
    opened = open_workspace(workspace.root)
    knowledge.create_notebook(opened, "support")
    yield opened
    opened.dispose()


def count(ws: Workspace, table: sa.Table) -> int:
    with ws.engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


# -- values ---------------------------------------------------------------------------------


def test_source_validation() -> None:
    ok = Source.parse(
        {"sourceId": "T-1", "kind": "ticket", "text": "x", "updatedAt": "2026-05-01T12:00:00"},
        max_chars=100,
    )
    assert ok.updated_at == datetime(2026, 5, 1, 12, tzinfo=UTC)  # naive means UTC
    assert ok.title == "T-1" and ok.url is None
    shifted = Source.parse(
        {"sourceId": "a", "text": "x", "updatedAt": "2026-05-01T14:00+02:00"}, max_chars=100
    )
    assert shifted.updated_at == datetime(2026, 5, 1, 12, tzinfo=UTC)
    bad = [
        ({"text": "x", "updatedAt": "2026-05-01"}, "sourceId"),
        ({"sourceId": "a", "kind": "Ticket!", "text": "x", "updatedAt": "2026-05-01"}, "kind"),
        ({"sourceId": "a", "text": "  ", "updatedAt": "2026-05-01"}, "text"),
        ({"sourceId": "a", "text": "x", "updatedAt": "yesterday"}, "updatedAt"),
        ({"sourceId": "a", "text": "x"}, "updatedAt"),
        (
            {"sourceId": "a", "text": "x", "updatedAt": "2026-05-01", "url": "javascript:alert(1)"},
            "url",
        ),
        ({"sourceId": "a", "text": "x", "updatedAt": "2026-05-01", "body": "?"}, "body"),
        ({"sourceId": "a\nb", "text": "x", "updatedAt": "2026-05-01"}, "sourceId"),
    ]
    for data, field in bad:
        with pytest.raises(InvalidInput) as info:
            Source.parse(data, max_chars=100)
        assert info.value.details["field"] == field, data
    with pytest.raises(InputTooLarge):
        Source.parse({"sourceId": "a", "text": "x" * 101, "updatedAt": "2026-05-01"}, max_chars=100)


def test_chunks_keep_their_spans_and_sections() -> None:
    chunks = knowledge.chunk_text(VPN, 200)
    assert len(chunks) == 3
    for chunk in chunks:
        assert VPN[chunk.start : chunk.end] == chunk.text and len(chunk.text) <= 200
    assert chunks[1].text.startswith("## Password reset")  # a heading starts a chunk
    long = " ".join(f"Sentence {i} says something." for i in range(100))
    assert all(len(c.text) <= 200 for c in knowledge.chunk_text(long, 200))
    assert knowledge.chunk_text("\n\n  \n", 200) == []


# -- sync, index and query ------------------------------------------------------------------


def test_citations_point_at_the_right_chunks(ws: Workspace) -> None:
    receipt = knowledge.enqueue(
        ws,
        "support",
        [
            src("wiki/vpn", VPN, kind="wiki", title="VPN guide", url="https://wiki.example/vpn"),
            src("T-9", REFUND, kind="ticket", title="Refund question"),
        ],
    )
    assert receipt.queued == ("wiki/vpn", "T-9")
    report = knowledge.drain(ws)
    assert sorted(report.indexed) == ["T-9", "wiki/vpn"] and report.pending == 0

    answer = knowledge.answer_question(ws, "support", "How do I reset my VPN password?")
    assert answer.mode == "extractive"
    assert answer.answer.startswith("Extractive answer (no LLM configured)")
    first = answer.citations[0]
    assert (first.source_id, first.position) == ("wiki/vpn", 1)
    assert VPN[first.start : first.end] == first.text and "self-service portal" in first.text
    assert "self-service portal" in answer.answer.splitlines()[2]
    assert answer.answer.splitlines()[2].endswith("[1]")
    cited = answer.to_dict()["citations"][0]
    assert cited | {"score": 0, "lexicalScore": 0} == {
        "n": 1,
        "sourceId": "wiki/vpn",
        "kind": "wiki",
        "title": "VPN guide",
        "url": "https://wiki.example/vpn",
        "updatedAt": T0.isoformat(),
        "chunk": 1,
        "chunkId": first.chunk_id,
        "start": first.start,
        "end": first.end,
        "text": first.text,
        "score": 0,
        "lexicalScore": 0,
        "semanticScore": None,
        "cited": True,
    }

    refund = knowledge.answer_question(ws, "support", "are damaged items refunded?")
    assert refund.citations[0].source_id == "T-9"
    nothing = knowledge.answer_question(ws, "support", "quarterly revenue")
    assert nothing.citations == () and "Nothing in notebook" in nothing.answer
    [nb] = knowledge.list_notebooks(ws)
    assert (nb.sources, nb.chunks, nb.pending, nb.failures) == (2, 4, 0, 0)
    assert nb.last_sync is not None
    with pytest.raises(NotFound, match="amelio knowledge create"):
        knowledge.answer_question(ws, "nope", "vpn")


def test_resync_is_idempotent_and_newer_replaces(ws: Workspace) -> None:
    knowledge.enqueue(ws, "support", [src("T-1", REFUND)])
    knowledge.drain(ws)
    chunks = count(ws, knowledge_chunks)
    again = knowledge.enqueue(ws, "support", [src("T-1", REFUND)])
    older = knowledge.enqueue(ws, "support", [src("T-1", "old text", T0 - timedelta(days=1))])
    assert again.unchanged == ("T-1",) and older.unchanged == ("T-1",)
    assert count(ws, knowledge_queue) == 0 and count(ws, knowledge_chunks) == chunks

    # Two newer versions before the worker runs: only the newest is kept.
    knowledge.enqueue(
        ws, "support", [src("T-1", "Refunds need the manager's approval.", T0 + timedelta(hours=1))]
    )
    knowledge.enqueue(
        ws, "support", [src("T-1", "Refunds are issued as vouchers now.", T0 + timedelta(hours=2))]
    )
    assert count(ws, knowledge_queue) == 1
    assert knowledge.drain(ws).indexed == ["T-1"]
    [stored] = knowledge.list_sources(ws, "support")
    assert stored["updatedAt"] == (T0 + timedelta(hours=2)).isoformat()
    assert knowledge.answer_question(ws, "support", "vouchers").citations[0].source_id == "T-1"
    assert knowledge.answer_question(ws, "support", "receipt").citations == ()
    assert count(ws, knowledge_chunks) == 1  # the old chunks are gone, from the index too
    index = open_collection(ws.settings, collection_name(knowledge.get_notebook(ws, "support").id))
    assert index.count() == 1


def test_delete_removes_the_source_and_any_queued_version(ws: Workspace) -> None:
    knowledge.enqueue(ws, "support", [src("wiki/vpn", VPN), src("T-9", REFUND)])
    knowledge.drain(ws)
    knowledge.delete_source(ws, "support", "wiki/vpn")
    assert knowledge.answer_question(ws, "support", "VPN password").citations == ()
    assert count(ws, knowledge_chunks) == 1
    nid = knowledge.get_notebook(ws, "support").id
    assert open_collection(ws.settings, collection_name(nid)).lexical("vpn", 5) == []
    # A version still queued cannot bring a deleted source back.
    knowledge.enqueue(ws, "support", [src("T-9", REFUND + " Updated.", T0 + timedelta(1))])
    knowledge.delete_source(ws, "support", "T-9")
    assert knowledge.drain(ws).indexed == [] and count(ws, knowledge_chunks) == 0
    with pytest.raises(NotFound, match="no source 'T-9'"):
        knowledge.delete_source(ws, "support", "T-9")


class FlakyIndexer:
    """Fails the first ``failures`` calls, then indexes normally."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, source: Source) -> knowledge.index.IndexedSource:  # type: ignore[name-defined]
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"index unavailable (call {self.calls})")
        return prepare_source(source, chunk_chars=200)


def test_retries_with_backoff_then_dead_letters(workspace: Workspace) -> None:
    ws = workspace  # default backoff: 2 s, then 4 s
    knowledge.create_notebook(ws, "support")
    knowledge.enqueue(ws, "support", [src("T-1", REFUND)])
    now = [datetime.now(UTC)]
    failing = FlakyIndexer(failures=99)

    def drain() -> knowledge.DrainReport:
        return knowledge.drain(ws, indexer=failing, clock=lambda: now[0])

    assert drain().failed == ["T-1"]
    assert drain().failed == []  # not due before its backoff
    now[0] += timedelta(seconds=2)
    assert drain().failed == ["T-1"]
    now[0] += timedelta(seconds=3.9)
    assert drain().failed == []  # the second backoff is twice as long
    now[0] += timedelta(seconds=0.2)
    report = drain()
    assert report.dead == ["T-1"] and report.pending == 0 and failing.calls == 3
    now[0] += timedelta(hours=1)
    assert drain().dead == [] and failing.calls == 3  # a dead letter is never tried again

    [dead] = knowledge.failures(ws)
    assert (dead.source_id, dead.notebook, dead.attempts) == ("T-1", "support", 3)
    assert dead.error == "RuntimeError: index unavailable (call 3)"
    health = knowledge.queue_health(ws)
    assert (health["status"], health["queueDepth"], health["deadLetters"]) == ("degraded", 0, 1)
    assert knowledge.list_notebooks(ws)[0].failures == 1

    assert knowledge.retry(ws, [dead.id]) == [dead.id]
    assert knowledge.retry(ws) == []  # nothing dead any more
    flaky = FlakyIndexer(failures=1)
    first = knowledge.drain(ws, indexer=flaky, clock=lambda: now[0])
    assert first.failed == ["T-1"] and first.indexed == []
    now[0] += timedelta(seconds=2)
    assert knowledge.drain(ws, indexer=flaky, clock=lambda: now[0]).indexed == ["T-1"]
    assert knowledge.failures(ws) == [] and knowledge.queue_health(ws)["status"] == "ok"


def test_wait_drains_through_the_backoff(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMELIO_KNOWLEDGE_SYNC_BACKOFF", "0.05")
    slow = open_workspace(ws.root)
    knowledge.enqueue(slow, "support", [src("T-1", REFUND)])
    report = knowledge.drain(slow, indexer=FlakyIndexer(failures=2), wait=True)
    assert (report.failed, report.indexed, report.pending) == (["T-1", "T-1"], ["T-1"], 0)
    slow.dispose()


def test_a_restart_keeps_the_queue(ws: Workspace) -> None:
    knowledge.enqueue(ws, "support", [src("wiki/vpn", VPN), src("T-9", REFUND)])
    claimed = _claim(ws, datetime.now(UTC))  # a worker took one, then the process died
    assert claimed is not None
    ws.dispose()

    restarted = open_workspace(ws.root)
    health = knowledge.queue_health(restarted)
    assert health["queueDepth"] == 2 and health["oldestPending"] is not None
    assert knowledge.drain(restarted).indexed == ["T-9"]  # the claimed one waits its lease
    later = datetime.now(UTC) + timedelta(seconds=CLAIM_SECONDS + 1)
    assert knowledge.drain(restarted, clock=lambda: later).indexed == ["wiki/vpn"]
    assert knowledge.queue_health(restarted)["queueDepth"] == 0
    restarted.dispose()


# -- answers with an LLM --------------------------------------------------------------------


def test_generated_answer_cites_the_retrieved_chunks(
    sqlite_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = sqlite_workspace
    knowledge.create_notebook(ws, "support")
    knowledge.enqueue(ws, "support", [src("wiki/vpn", VPN, title="VPN guide"), src("T-9", REFUND)])
    knowledge.drain(ws)
    with FakeLLMServer(default=lambda r: "Use the self-service portal [1]; ask IT [7].") as fake:
        monkeypatch.setenv("AMELIO_LLM_PROVIDER", "openai")
        monkeypatch.setenv("AMELIO_LLM_BASE_URL", fake.openai_base_url)
        monkeypatch.setenv("AMELIO_LLM_MODEL", "fake-model")
        monkeypatch.setenv("AMELIO_KNOWLEDGE_ANSWER_TIMEOUT", "0.3")
        llm_ws = open_workspace(ws.root)
        answer = knowledge.answer_question(llm_ws, "support", "reset the VPN password")
        assert (answer.mode, answer.model, answer.llm_error) == ("generated", "fake-model", None)
        assert answer.answer == "Use the self-service portal [1]; ask IT [7]."
        assert answer.cited == (1,)  # [7] names no passage
        [request] = fake.requests
        assert "ONLY the numbered passages" in request.system
        assert request.prompt.startswith("PASSAGES:\n\n[1] VPN guide (source wiki/vpn, chunk")
        assert "self-service portal" in request.prompt.split("[2]")[0]
        assert request.prompt.endswith("QUESTION: reset the VPN password")

        fake.hang(0.8)  # slower than knowledge_answer_timeout: the passages still answer
        slow = knowledge.answer_question(llm_ws, "support", "reset the VPN password")
        assert slow.mode == "extractive" and "did not answer in time" in (slow.llm_error or "")
        assert "waits 0.3 s, once (knowledge_answer_timeout)" in (slow.llm_error or "")
        assert slow.answer.startswith("Extractive answer (the LLM did not answer)")
        assert len(fake.requests) == 2  # no retry: the timeout is the whole budget
        llm_ws.dispose()
    scripted = knowledge.answer_question(
        ws, "support", "refund receipt", provider=ScriptedProvider(default="No idea.")
    )
    assert scripted.mode == "generated" and scripted.cited == ()


# -- semantic retrieval (optional) ----------------------------------------------------------


class ConceptEmbedder:
    """A deterministic stand-in for a sentence model: words map to concepts."""

    model = "concepts-v1"
    CONCEPTS: Sequence[set[str]] = (
        {"car", "automobile", "vehicle"},
        {"refund", "money"},
        {"vpn", "network"},
    )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            words = set(text.lower().replace(".", " ").split())
            out.append([float(len(words & c)) for c in self.CONCEPTS] + [0.01])
        return out


def test_semantic_retrieval_finds_what_words_miss(ws: Workspace) -> None:
    embedder = ConceptEmbedder()
    knowledge.enqueue(
        ws, "support", [src("fleet", "Company car keys are at reception."), src("T-9", REFUND)]
    )
    knowledge.drain(ws, indexer=lambda s: prepare_source(s, chunk_chars=200, embedder=embedder))
    nid = knowledge.get_notebook(ws, "support").id
    assert search(ws.settings, ws.engine, nid, "automobile") == []  # no shared word
    [hit, *_] = search(ws.settings, ws.engine, nid, "automobile", embedder=embedder)
    assert hit.source_id == "fleet" and hit.semantic is not None and hit.lexical == 0
    both = search(ws.settings, ws.engine, nid, "refund money", embedder=embedder)
    assert both[0].source_id == "T-9" and both[0].lexical > 0 and both[0].semantic
    answer = knowledge.answer_question(ws, "support", "automobile", embedder=embedder)
    assert answer.citations[0].source_id == "fleet"


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None,
    reason="the embeddings extra is installed",
)
def test_an_embedding_model_without_the_extra_is_a_clear_error() -> None:
    assert embedder_for(Settings()) is None
    with pytest.raises(ConfigError, match=r"pip install 'amelio\[embeddings\]'"):
        embedder_for(Settings(knowledge_embedding_model="all-MiniLM-L6-v2"))


def test_plurals_fold_so_refunds_finds_refund() -> None:
    assert [
        s_stem(t)
        for t in (
            "refunds",
            "policies",
            "boxes",
            "employees",
            "access",
            "status",
            "gas",
            "remboursements",
        )
    ] == ["refund", "policy", "boxe", "employee", "access", "status", "gas", "remboursement"]


@pytest.mark.parametrize(
    ("text", "terms", "held"),
    [
        (
            "What's l’API? Déployer, c'est l'été!",
            ["what'", "l'api", "deployer", "c'est", "l'ete"],
            ["what", "l", "api", "deployer", "c", "est", "l", "ete"],
        ),
        (
            "Refunds: the POLICIES, a pull-request.",
            ["refund", "the", "policy", "a", "pull", "request"],
            ["refund", "the", "policy", "a", "pull", "request"],
        ),
        ("x" * 70 + "s", ["x" * 64], ["x" * 64]),
    ],
)
def test_the_knowledge_analyzer_pins_its_terms(
    text: str, terms: list[str], held: list[str]
) -> None:
    """The knowledge analyzer's terms, and what a notebook's collection holds once
    its search engine has read them with the search analyzer (apostrophes split)."""
    assert ANALYZERS["knowledge"] is KNOWLEDGE
    assert KNOWLEDGE.analyze(text) == terms
    assert SEARCH.analyze(" ".join(terms)) == held
