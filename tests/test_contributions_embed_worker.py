"""The browser embedder: amelio/embed-worker.js in a real browser (Debian's Chromium,
driven by Playwright) must compute the server's WordLlama vectors, and the model-file
routes must serve it exactly the files the server embeds with.

The worker runs on the Amelio origin itself (a module worker must be same-origin with
its page), loading the model over real HTTP on loopback from
``/v1/contributions/models/wordllama/``, once per module. Its vectors are compared
with ``load_embedder("wordllama").embed`` and its token ids with the Hugging Face
tokenizer the server uses, on texts chosen to break a tokenizer: accents, emoji,
CJK, special tokens written in the text, runs of spaces, a text longer than any
truncation, and a few hundred random strings.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from amelio.embeddings import load_embedder
from amelio.server import create_app
from amelio.server.routes.contribution_models import DIMENSIONS, FILES
from amelio.testing import ThreadedServer
from browser_support import launch_chromium, workspace_with

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("wordllama") is None, reason="needs amelio[semantic] (wordllama)"
)

MODELS = "/v1/contributions/models"
WORKER = "/static/amelio/embed-worker.js"

TEXTS = [
    "Reset your password\nOpen settings, choose security, then reset the password.",
    "Réinitialiser le mot de passe : ouvrez les paramètres, choisissez « Sécurité », puis "
    "« Réinitialiser ». Où est-ce ? Déjà vu, naïve façade, cœur, Ærø, ÉLÈVE.",
    "Emoji 😀🎉👍🏽 and a flag 🇫🇷, sparkles ✨ mixed with text",
    "Invoice #12345 due 2024-03-31: total €1,234.56 (VAT 20%) — ref. A-7/B, 3.14159",
    "Punctuation!!! ??? ... ;;; --- ((brackets)) [[x]] {{y}} <tag/> \"quoted\" 'single' `t`",
    " ",
    "   leading and trailing spaces   ",
    "a  b   c    d",
    "Tabs\tand\nnew\nlines\r\nand\u00a0non-breaking\u200bzero-width",
    "MiXeD CaSe WoRdS, ALLCAPS SHOUTING and lowercase whispering",
    "中文搜索文档：如何重置密码？请打开设置。日本語のテキストと한국어 텍스트",
    "Special tokens as text: <s> begin, </s> end, <unk> unknown, <0x41> literal",
    "\u2581already\u2581marked\u2581spaces",
    "x",
    "a" * 1500,  # one piece of 1500 characters: the merge queue's worst case
    " ".join(f"Word{i} number {i * 7} in a very long document." for i in range(700)),
]


def random_texts(count: int, seed: int) -> list[str]:
    """Short random strings from an alphabet made to break a tokenizer."""
    rng = random.Random(seed)
    alphabet = [
        *"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        *"      .,;:!?'\"()[]{}-_/\\\n\t@#$%^&*+=<>~`|",
        *"éèêàçùœÉÀßñüΩ∑",
        "😀",
        "👍🏽",
        "中",
        "文",
        "日本",
        "한국어",
        "\u00a0",
        "\u200b",
        "\u2581",
        "<s>",
        "</s>",
        "<unk>",
        "<0x41>",
        "  ",
        "   ",
        "the",
        " of",
        "ing",
    ]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(count)]


def documents(count: int, words: int, seed: int) -> list[str]:
    """Search-document-like texts of ``words`` English words."""
    vocabulary = [
        "the",
        "a",
        "an",
        "of",
        "to",
        "in",
        "for",
        "on",
        "with",
        "by",
        "from",
        "password",
        "account",
        "settings",
        "reset",
        "choose",
        "open",
        "security",
        "email",
        "link",
        "invoice",
        "billing",
        "download",
        "company",
        "sign",
        "provider",
        "identity",
        "expire",
        "days",
        "new",
        "user",
        "page",
        "search",
        "result",
        "click",
        "team",
        "project",
        "help",
        "support",
        "question",
        "answer",
        "update",
        "install",
        "configure",
        "server",
        "client",
        "browser",
        "network",
        "error",
        "message",
        "document",
        "title",
        "body",
        "text",
        "index",
        "vector",
        "model",
        "embed",
        "quickly",
    ]
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + "."
        for _ in range(count)
    ]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def package_file(name: str) -> Path:
    spec = importlib.util.find_spec("wordllama")
    assert spec is not None and spec.origin
    return Path(spec.origin).parent.joinpath(*FILES[name].parts)


@dataclass
class Servers:
    amelio: str  # the Amelio service
    site: str  # a customer's site on another origin, which Amelio lets call it (CORS)


async def blank_page(_: Request) -> HTMLResponse:
    return HTMLResponse("<!doctype html><title>A customer's site</title>")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The Amelio service and another site, each on a real loopback port."""
    root = tmp_path_factory.mktemp("embed-worker")
    with ThreadedServer(Starlette(routes=[Route("/", blank_page)])) as site:
        ws = workspace_with(root / "ws", warm_up=False, cors_origins=site.url)
        try:
            with ThreadedServer(create_app(ws)) as server:
                yield Servers(server.url, site.url)
        finally:
            ws.dispose()


@pytest.fixture(scope="module")
def amelio(servers: Servers) -> str:
    return servers.amelio


# A page helper: workers by name, and ask(name, message) -> the answer with its id
# ("init" answers have id null), failing after 60 s rather than hanging the test. The
# worker answers its vectors as one Float32Array (n × dimensions); ask() gives them as
# rows, which Python compares, and the log keeps the answers as they came.
HELPER = """([url, dimensions]) => {
  window.workers = {};
  window.rows = (matrix) => Array.from({ length: matrix.length / dimensions },
    (_, i) => Array.from(matrix.subarray(i * dimensions, (i + 1) * dimensions)));
  window.startWorker = (name) => {
    const worker = new Worker(url, { type: "module" });
    const waiting = new Map();
    const entry = { worker, waiting, log: [] };
    worker.onmessage = (event) => {
      entry.log.push(event.data);
      const key = event.data.id ?? null;
      const resolve = waiting.get(key);
      const answer = event.data.vectors instanceof Float32Array
        ? { ...event.data, vectors: window.rows(event.data.vectors) } : event.data;
      if (resolve) { waiting.delete(key); resolve(answer); }
    };
    worker.onerror = (event) => {
      for (const resolve of waiting.values()) resolve({ type: "crash", message: event.message });
      waiting.clear();
    };
    window.workers[name] = entry;
  };
  window.ask = (name, message) => new Promise((resolve) => {
    const entry = window.workers[name];
    entry.waiting.set(message.id ?? null, resolve);
    entry.worker.postMessage(message);
    setTimeout(() => resolve({ type: "timeout", message }), 60000);
  });
}"""


@dataclass
class Browser:
    """A page on the Amelio origin and the answer of its ``main`` worker's init."""

    page: Any
    ready: dict[str, Any]


@pytest.fixture(scope="module")
def browser(amelio: str, chromium: str) -> Iterator[Browser]:
    """A page on the Amelio origin with one worker, ``main``, loaded from the server."""
    with launch_chromium(chromium) as chrome:
        page = chrome.new_context().new_page()
        page.goto(f"{amelio}/v1/health")
        page.evaluate(HELPER, [WORKER, DIMENSIONS])
        page.evaluate("window.startWorker('main')")
        ready = ask(page, "main", {"type": "init", "modelBase": f"{amelio}{MODELS}/wordllama/"})
        yield Browser(page, ready)


@pytest.fixture
def page(browser: Browser) -> Any:
    return browser.page


def ask(page: Any, worker: str, message: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = page.evaluate("([w, m]) => window.ask(w, m)", [worker, message])
    assert answer["type"] != "timeout", answer
    return answer


def embed(page: Any, texts: list[str], worker: str = "main") -> dict[str, Any]:
    return ask(page, worker, {"type": "embed", "id": "e1", "texts": texts})


# -- the worker, in Chromium -------------------------------------------------------------


@pytest.mark.slow
def test_init_answers_ready_once_loaded(browser: Browser, amelio: str) -> None:
    page, ready = browser.page, browser.ready
    assert set(ready) == {"type", "model", "dimensions", "loadMs"}
    assert (ready["type"], ready["model"], ready["dimensions"]) == ("ready", "wordllama", 256)
    assert 0 < ready["loadMs"] < 60_000
    # A second init loads nothing again: the same model answers.
    again = ask(page, "main", {"type": "init", "modelBase": f"{amelio}{MODELS}/wordllama/"})
    assert again == ready


@pytest.mark.slow
def test_vectors_equal_the_servers(page: Any) -> None:
    answer = embed(page, TEXTS)
    assert answer["type"] == "result", answer
    # As it came: one matrix of n × 256 float32, which the page sends as it is.
    form = page.evaluate(
        "(({vectors: v}) => [v.constructor.name, v.length, v.byteOffset])"
        "(window.workers.main.log.at(-1))"
    )
    assert form == ["Float32Array", len(TEXTS) * DIMENSIONS, 0]
    assert answer["id"] == "e1" and answer["computeMs"] >= 0
    vectors = answer["vectors"]
    expected = load_embedder("wordllama").embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    for text, got, want in zip(TEXTS, vectors, expected, strict=True):
        assert len(got) == DIMENSIONS
        assert abs(math.sqrt(sum(x * x for x in got)) - 1) < 1e-5, text[:40]
        assert cosine(got, want) >= 0.9999, text[:40]
    # The check can fail: the texts' vectors are far apart, so a wrong one is seen.
    assert min(cosine(vectors[i], expected[i + 1]) for i in range(len(TEXTS) - 1)) < 0.9
    # One text at a time gives the same vector as in a batch (no padding effect).
    alone = embed(page, [TEXTS[3]])["vectors"][0]
    assert cosine(alone, vectors[3]) > 0.999999


@pytest.mark.slow
def test_token_ids_equal_the_hugging_face_tokenizers(page: Any) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(package_file("tokenizer.json")))
    texts = [*TEXTS, "", *random_texts(400, seed=20)]
    answer = ask(page, "main", {"type": "tokenize", "id": "t1", "texts": texts})
    assert answer["type"] == "tokens" and answer["id"] == "t1", answer
    expected = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    mismatches = [
        (t, got, want)
        for t, got, want in zip(texts, answer["ids"], expected, strict=True)
        if got != want
    ]
    assert mismatches == []
    # Random strings do hit the hard cases: special tokens and byte fallback.
    assert any(1 in ids for ids in expected) and any(3 <= i < 259 for ids in expected for i in ids)


@pytest.mark.slow
def test_a_text_without_tokens_gets_zeros(page: Any) -> None:
    # Python's wordllama divides 0 by 0 here (NaN, which JSON cannot carry).
    answer = embed(page, ["", "a"])
    assert answer["vectors"][0] == [0] * DIMENSIONS
    assert abs(sum(x * x for x in answer["vectors"][1]) - 1) < 1e-5


@pytest.mark.slow
def test_bad_messages_get_errors_with_their_id(page: Any) -> None:
    for message, says in [
        ({"type": "embed", "id": "b1", "texts": "not a list"}, "array of strings"),
        ({"type": "embed", "id": "b2", "texts": ["ok", 3]}, "array of strings"),
        ({"type": "classify", "id": "b3"}, "unknown message type"),
    ]:
        answer = ask(page, "main", message)
        assert answer["type"] == "error" and answer["id"] == message["id"], answer
        assert says in answer["message"]
    assert embed(page, ["still works"])["type"] == "result"


@pytest.mark.slow
def test_load_failures_are_reported(page: Any, amelio: str) -> None:
    page.evaluate("window.startWorker('early')")
    answer = ask(page, "early", {"type": "embed", "id": "x", "texts": ["hello"]})
    assert answer == {"type": "error", "id": "x", "message": answer["message"]}
    assert 'send {type: "init"' in answer["message"]

    page.evaluate("window.startWorker('lost')")
    for base, says in [
        (f"{amelio}{MODELS}/glove/", "HTTP 404 (No model 'glove'"),
        (f"{amelio}{MODELS}/wordllama", 'ending in "/"'),
    ]:
        failed = ask(page, "lost", {"type": "init", "modelBase": base})
        assert failed["type"] == "error" and failed["id"] is None, failed
        assert says in failed["message"]
        # Work sent after a failed load fails with the reason, not a hang.
        answer = ask(page, "lost", {"type": "embed", "id": "y", "texts": ["a"]})
        assert answer["type"] == "error" and "not loaded" in answer["message"]
    # A later init may succeed (a network back, a fixed URL).
    ready = ask(page, "lost", {"type": "init", "modelBase": f"{amelio}{MODELS}/wordllama/"})
    assert ready["type"] == "ready"
    page.evaluate("window.workers.early.worker.terminate(); window.workers.lost.worker.terminate()")


# What a customer's page does: amelio.js comes from Amelio's origin, but a worker must
# be same-origin with its page, so the page starts a tiny blob worker that imports the
# worker module from Amelio (a module import may cross origins, with CORS).
CROSS_ORIGIN = """async ([amelio, texts]) => {
  const url = amelio + "/static/amelio/embed-worker.js";
  let direct;
  try { new Worker(url, { type: "module" }); direct = "allowed"; }
  catch (error) { direct = error.name; }
  const source = `import ${JSON.stringify(url)};`;
  const worker = new Worker(URL.createObjectURL(new Blob([source], { type: "text/javascript" })),
                            { type: "module" });
  const next = () => new Promise((resolve) => {
    worker.onmessage = (event) => resolve(event.data);
    worker.onerror = (event) => resolve({ type: "crash", message: event.message });
  });
  let answer = next();
  worker.postMessage({ type: "init", modelBase: amelio + "/v1/contributions/models/wordllama/" });
  const ready = await answer;
  answer = next();
  worker.postMessage({ type: "embed", id: "c1", texts });
  const result = await answer;
  worker.terminate();
  const d = ready.dimensions;  // the matrix as rows, for Python
  if (result.vectors instanceof Float32Array) {
    result.vectors = Array.from({ length: result.vectors.length / d },
                                (_, i) => Array.from(result.vectors.subarray(i * d, (i + 1) * d)));
  }
  return { direct, ready, result };
}"""


@pytest.mark.slow
def test_a_page_on_another_origin_runs_the_worker_through_a_blob(
    browser: Browser, servers: Servers
) -> None:
    page = browser.page.context.new_page()
    try:
        page.goto(f"{servers.site}/")
        texts = [TEXTS[0], TEXTS[1]]
        outcome = page.evaluate(CROSS_ORIGIN, [servers.amelio, texts])
    finally:
        page.close()
    assert outcome["direct"] == "SecurityError"  # hence the blob
    assert outcome["ready"]["type"] == "ready", outcome["ready"]
    result = outcome["result"]
    assert result["type"] == "result" and result["id"] == "c1", result
    for got, want in zip(result["vectors"], load_embedder("wordllama").embed(texts), strict=True):
        assert cosine(got, want) >= 0.9999


@pytest.mark.slow
def test_embedding_speed(page: Any, capsys: pytest.CaptureFixture[str]) -> None:
    docs = documents(400, words=200, seed=3)
    embed(page, docs[:8])  # warm the tokenizer's cache and the JIT
    computed = 0.0
    for start in range(0, len(docs), 8):  # the protocol's batch size
        answer = embed(page, docs[start : start + 8])
        assert answer["type"] == "result"
        computed += answer["computeMs"]
    rate = len(docs) / (computed / 1000)
    with capsys.disabled():
        print(
            f"\nembed worker: {rate:.0f} docs/s for 200-word documents "
            f"({computed:.0f} ms of compute for {len(docs)})"
        )
    assert rate > 100  # a quadratic tokenizer or a per-call reload would be far slower


# -- the model files ---------------------------------------------------------------------


def test_listing_names_each_file_with_its_size_and_sha256(amelio: str) -> None:
    r = httpx.get(f"{amelio}{MODELS}/wordllama/")
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == "wordllama" and body["dimensions"] == DIMENSIONS == 256
    assert set(body["files"]) == {"tokenizer.json", "weights.safetensors"}
    for name, listed in body["files"].items():
        content = package_file(name).read_bytes()
        assert listed == {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    assert r.headers["cache-control"] == "no-cache" and r.headers["etag"]
    again = httpx.get(f"{amelio}{MODELS}/wordllama/", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize("name", ["tokenizer.json", "weights.safetensors"])
def test_files_are_served_cacheable_with_their_sha256_as_etag(amelio: str, name: str) -> None:
    r = httpx.get(f"{amelio}{MODELS}/wordllama/{name}?v=anything")
    assert r.status_code == 200
    content = package_file(name).read_bytes()
    assert r.content == content
    digest = hashlib.sha256(content).hexdigest()
    assert r.headers["etag"] == f'"{digest}"'
    assert r.headers["cache-control"] == "public, max-age=86400, immutable"
    assert r.headers["content-type"].startswith(FILES[name].media_type)
    for header in (f'"{digest}"', f'W/"{digest}"', f'"other", "{digest}"', "*"):
        cached = httpx.get(f"{amelio}{MODELS}/wordllama/{name}", headers={"If-None-Match": header})
        assert cached.status_code == 304 and cached.content == b"", header
        assert cached.headers["etag"] == f'"{digest}"'
    stale = httpx.get(f"{amelio}{MODELS}/wordllama/{name}", headers={"If-None-Match": '"0"'})
    assert stale.status_code == 200 and len(stale.content) == len(content)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/glove/", "No model 'glove'"),
        ("/glove/tokenizer.json", "No model 'glove'"),
        ("/wordllama/model.onnx", "has no file 'model.onnx'"),
        ("/wordllama/__init__.py", "has no file '__init__.py'"),
        ("/wordllama/%2E%2E", "has no file '..'"),
        ("/wordllama/..%2F__init__.py", ""),  # no route takes a "/" in a file name
        ("/wordllama/l2_supercat_256.safetensors", "has no file"),
    ],
)
def test_unknown_models_and_files_are_404(amelio: str, path: str, says: str) -> None:
    r = httpx.get(f"{amelio}{MODELS}{path}")
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["code"] == "not_found" and says in error["message"]


def test_without_wordllama_the_files_are_503(amelio: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # as if it were not installed
    for path in ("/wordllama/", "/wordllama/weights.safetensors"):
        r = httpx.get(f"{amelio}{MODELS}{path}")
        assert r.status_code == 503
        error = r.json()["error"]
        assert error["code"] == "semantic_unavailable"
        assert "pip install 'amelio[semantic]'" in error["message"]
