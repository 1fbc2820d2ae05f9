"""Ask a notebook: an answer with numbered citations to source and chunk.

Retrieval first (:func:`amelio.knowledge.index.search`), then one of two answers:

``generated``
    With an LLM configured, the model answers from the retrieved passages only,
    citing them as ``[1]``, ``[2]``…; it is told to say so when they do not hold
    the answer. The call has its own timeout (``knowledge_answer_timeout``, 15 s,
    no retries), so a slow model cannot hold a chat tool hostage.
``extractive``
    Without an LLM (or when the call fails, with the reason in ``llmError``),
    the best sentences of the best passages, each with its citation, under a
    line that says the answer is extractive.

Either way ``citations[n-1]`` is passage ``[n]``: source id, title, kind, url,
chunk position and character span, and the chunk's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from amelio.errors import AmelioError, InvalidInput, LLMUnavailable
from amelio.knowledge.index import Embedder, Passage, embedder_for, search
from amelio.knowledge.notebooks import notebook_id
from amelio.llm import LLMRequest, Provider, get_provider
from amelio.llm.base import Timer
from amelio.text import tokens
from amelio.workspace.folder import Workspace
from amelio.workspace.projects import DEFAULT_PROJECT

__all__ = ["Answer", "answer_question", "extractive_answer", "numbered_passages"]

MAX_QUESTION = 4000
EXTRACTIVE_NOTE = "Extractive answer ({why}): the passages that best match the question."
ANSWER_SYSTEM = (
    "You answer questions from a knowledge notebook. Use ONLY the numbered passages given; "
    "do not use outside knowledge. Cite the passages you use as [1], [2], ... right after "
    "the sentence they support. If the passages do not contain the answer, say that the "
    "notebook does not say, and cite nothing. Be concise."
)
_CITE = re.compile(r"\[(\d{1,3})\]")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
_UNSET: Any = object()


@dataclass(frozen=True)
class Answer:
    notebook: str
    project: str
    question: str
    answer: str
    mode: str  # "generated" or "extractive"
    citations: tuple[Passage, ...]
    cited: tuple[int, ...] = ()
    model: str | None = None
    llm_error: str | None = None
    latency_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "notebook": self.notebook,
            "project": self.project,
            "question": self.question,
            "answer": self.answer,
            "mode": self.mode,
            "citations": [
                {"n": i} | p.to_dict() | {"cited": i in self.cited}
                for i, p in enumerate(self.citations, start=1)
            ],
            "model": self.model,
            "llmError": self.llm_error,
            "latencyMs": round(self.latency_ms, 2),
        }


def numbered_passages(passages: tuple[Passage, ...] | list[Passage]) -> str:
    """The passages as the LLM sees them: ``[n] title (source, chunk)`` then the text."""
    return "\n\n".join(
        f"[{i}] {p.title} (source {p.source_id}, chunk {p.position})\n{p.text.strip()}"
        for i, p in enumerate(passages, start=1)
    )


def _best_sentence(text: str, terms: set[str], limit: int = 400) -> str:
    if len(text) <= limit:
        return " ".join(text.split())
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    best = max(
        sentences, key=lambda s: (len(terms & set(tokens(s))), -sentences.index(s)), default=text
    )
    best = " ".join(best.split())
    return best if len(best) <= limit else best[: limit - 1] + "…"


def extractive_answer(question: str, passages: tuple[Passage, ...], why: str) -> str:
    """The best sentence of each of the top passages (at most 3), each cited."""
    terms = set(tokens(question))
    lines = [EXTRACTIVE_NOTE.format(why=why), ""]
    lines += [
        f"- {_best_sentence(p.text, terms)} [{i}]" for i, p in enumerate(passages[:3], start=1)
    ]
    return "\n".join(lines)


def _provider(ws: Workspace) -> Provider:
    settings = ws.settings
    return get_provider(
        settings.model_copy(
            update={"llm_timeout": settings.knowledge_answer_timeout, "llm_max_retries": 0}
        ),
        purpose="A generated knowledge answer",
    )


def answer_question(
    ws: Workspace,
    notebook: str,
    question: str,
    *,
    project: str = DEFAULT_PROJECT,
    top_k: int | None = None,
    provider: Provider | None = None,
    embedder: Embedder | None = _UNSET,
) -> Answer:
    """Answer ``question`` from ``notebook`` (see the module doc for the two modes).

    ``provider`` replaces the configured LLM (tests, benchmarks); ``embedder``
    replaces the configured embedding model (None: lexical only).
    """
    timer = Timer()
    question = question.strip()
    if not question:
        raise InvalidInput("The question is empty.", field="question")
    if len(question) > MAX_QUESTION:
        raise InvalidInput(f"The question is over {MAX_QUESTION} characters.", field="question")
    if embedder is _UNSET:
        embedder = embedder_for(ws.settings)
    with ws.engine.connect() as conn:
        nid = notebook_id(conn, notebook, project)
    passages = tuple(
        search(
            ws.settings,
            ws.engine,
            nid,
            question,
            top_k=top_k or ws.settings.knowledge_top_k,
            embedder=embedder,
        )
    )
    base: dict[str, Any] = {
        "notebook": notebook,
        "project": project,
        "question": question,
        "citations": passages,
    }
    if not passages:
        return Answer(
            **base,
            mode="extractive",
            latency_ms=timer.ms,
            answer=f"Nothing in notebook {notebook!r} matches the question.",
        )
    if provider is None and ws.settings.llm_provider == "none":
        return Answer(
            **base,
            mode="extractive",
            latency_ms=timer.ms,
            answer=extractive_answer(question, passages, "no LLM configured"),
            cited=tuple(range(1, min(3, len(passages)) + 1)),
        )
    try:
        llm = provider or _provider(ws)
        completion = llm.complete(
            LLMRequest.single(
                ANSWER_SYSTEM,
                f"PASSAGES:\n\n{numbered_passages(passages)}\n\nQUESTION: {question}",
                max_tokens=ws.settings.llm_max_tokens,
                temperature=0,
            )
        )
    except AmelioError as exc:
        error = exc.message
        if isinstance(exc, LLMUnavailable) and provider is None:
            error += (
                f" A knowledge query waits {ws.settings.knowledge_answer_timeout:g} s, "
                "once (knowledge_answer_timeout)."
            )
        return Answer(
            **base,
            mode="extractive",
            latency_ms=timer.ms,
            llm_error=error,
            answer=extractive_answer(question, passages, "the LLM did not answer"),
            cited=tuple(range(1, min(3, len(passages)) + 1)),
        )
    text = completion.text.strip()
    cited = tuple(sorted({int(n) for n in _CITE.findall(text) if 1 <= int(n) <= len(passages)}))
    return Answer(
        **base,
        mode="generated",
        answer=text,
        cited=cited,
        model=completion.model,
        latency_ms=timer.ms,
    )
