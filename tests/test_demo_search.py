"""The demo corpus: generated from its templates, indexed by ``amelio demo`` once."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from amelio.demo.app import load_demo_corpus, load_demo_searches, prepare_demo
from amelio.search import Fts5Engine, Searcher

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"


def test_committed_corpus_is_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("generate_corpus", DEMO / "generate_corpus.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    lines = (DEMO / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    committed = [json.loads(line) for line in lines]
    assert committed == generator.articles()
    assert 200 <= len(committed) <= 1000
    assert len({a["_id"] for a in committed}) == len(committed)
    assert all(a["title"] and len(a["text"]) > 40 for a in committed)
    topics = {a["topic"] for a in committed}
    assert {
        "git",
        "deployment",
        "docker",
        "sql",
        "incident",
        "release",
        "api",
        "secrets",
        "support",
        "odoo",
    } <= topics


def test_demo_indexes_the_corpus_once(tmp_path: Path) -> None:
    ws, _ = prepare_demo(tmp_path / "demo")
    corpus = Fts5Engine.for_workspace(ws.settings.data_dir)
    total = corpus.count()
    assert total == len((DEMO / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
    top = Searcher(ws, background_aggregation=False).rank(
        "undo the last commit", profile="bm25", limit=3
    )
    assert top[0].doc_id == "git-howto-1"
    assert load_demo_corpus(ws) == 0  # a re-run imports nothing
    # the recorded sessions taught search: what people read long rises above BM25's top
    learned = [
        d.doc_id
        for d in Searcher(ws, background_aggregation=False).rank(
            "undo the last commit", profile="hybrid_with_feedback", limit=3
        )
    ]
    assert learned[0] == "git-checklist-1"
    assert load_demo_searches(ws) == 0
    ws.dispose()
    again, _ = prepare_demo(tmp_path / "demo")
    assert Fts5Engine.for_workspace(again.settings.data_dir).count() == total
    again.dispose()
