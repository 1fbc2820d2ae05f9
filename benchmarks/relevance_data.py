"""Build a second relevance data set in BEIR layout, so that settings tuned with
``amelio simulate`` on Cranfield (``search_beta`` above all) are checked on a set
they were not chosen on ("never tune to a single data set").

It is **synthetic**. No public relevance data set of a few thousand documents
ships inside a package on the registries this project can reach (PyPI, npm,
Debian): the Python tools that read them (``ir_datasets``, ``beir``,
``pyserini``) download the documents from their hosts at run time, and the
Anserini jar inside ``pyserini``'s wheel carries judgments without documents.
SciFact, which BEIR hosts, is kept for outside checks. So the documents, the
queries and the graded judgments below are drawn from a seeded generator, built
so that BM25 gets the easy part right and not the rest, as on real data:

* a background vocabulary of 4,000 made-up words with Zipf-shaped frequencies
  (most of every text), and for each of 150 topics 5 *query words* (what a
  person types: queries are 2–4 of them) and 3 *synonyms* (words the topic's
  documents use that no query does: the vocabulary mismatch BM25 cannot bridge);
  a query word belongs to a second topic one time in ten (ambiguity);
* per topic, 12 judged documents: 2 of grade 3 (about the topic: a topic word
  in every 5 or so, one or two in the title), 4 of grade 2 (one in 8, a title
  word half the time) and 6 of grade 1 (mentions it: one in 16); each leans on
  the synonyms by a share drawn from 0 to 0.8, so a good document can hold few
  query words;
* 6 decoys per topic, unjudged (grade 0): background words with one of the
  topic's query words repeated 2–5 times, in the title half the time (what
  keyword matching ranks too high);
* 1,000 documents of background words alone.

That is 3,700 documents, 150 queries and 1,800 graded judgments (1 to 3); titles
of 4–8 words, bodies of 40–120, as ``benchmarks/search_latency.py``'s. A
synthetic set checks that a setting is not an accident of Cranfield's; it does
not stand for real users' data, and its figures are quoted as synthetic.

The output is deterministic (``--seed``); ``README.md`` in the folder says what
it is. Run::

    python benchmarks/relevance_data.py [--out DIR] [--seed N]
    amelio simulate --dataset ~/.cache/amelio-bench/relevance/synthetic-graded
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amelio-bench"
OUT_DIR = CACHE_DIR / "relevance" / "synthetic-graded"
SEED = 20_250_301
BACKGROUND_WORDS = 4_000
TOPICS = 150
QUERY_WORDS = 5
SYNONYMS = 3
#: The share of query words that also belong to a second topic.
SHARED = 0.2
#: Judged documents per topic by grade, and the share of topic words in their text.
GRADES: dict[int, tuple[int, float]] = {3: (2, 0.10), 2: (4, 0.07), 1: (6, 0.04)}
DECOYS = 10
BACKGROUND_DOCS = 1_000
#: The marker in README.md that lets a rebuild replace a folder this script wrote.
MARKER = "benchmarks/relevance_data.py"


@dataclass(frozen=True)
class Topic:
    query_words: tuple[str, ...]
    synonyms: tuple[str, ...]


class Generator:
    """The seeded source of every word, document and query."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        words = self._words(BACKGROUND_WORDS + TOPICS * (QUERY_WORDS + SYNONYMS))
        self.background = words[:BACKGROUND_WORDS]
        self.cumulative = list(itertools.accumulate(1.0 / (i + 1) for i in range(BACKGROUND_WORDS)))
        specific = iter(words[BACKGROUND_WORDS:])
        own = [
            (
                [next(specific) for _ in range(QUERY_WORDS)],
                [next(specific) for _ in range(SYNONYMS)],
            )
            for _ in range(TOPICS)
        ]
        self.topics: list[Topic] = []
        for n, (query_words, synonyms) in enumerate(own):
            for i in range(QUERY_WORDS):
                if self.rng.random() < SHARED:  # borrowed from another topic
                    other = self.rng.choice([t for t in range(TOPICS) if t != n])
                    query_words[i] = self.rng.choice(own[other][0])
            self.topics.append(Topic(tuple(dict.fromkeys(query_words)), tuple(synonyms)))

    def _words(self, count: int) -> list[str]:
        """``count`` distinct made-up words of 3–10 letters."""
        letters = "abcdefghijklmnopqrstuvwxyz"
        found: dict[str, None] = {}
        while len(found) < count:
            found["".join(self.rng.choices(letters, k=self.rng.randint(3, 10)))] = None
        return list(found)

    def _filler(self, k: int) -> list[str]:
        return self.rng.choices(self.background, cum_weights=self.cumulative, k=k)

    def _topic_word(self, topic: Topic, synonym_share: float) -> str:
        if self.rng.random() < synonym_share:
            return self.rng.choice(topic.synonyms)
        return self.rng.choice(topic.query_words)

    def document(self, topic: Topic, share: float, title_words: int) -> tuple[str, str]:
        """A title and a body about ``topic``: ``share`` of the body's words are the
        topic's (its synonyms by a share of its own), ``title_words`` of the title's."""
        synonym_share = self.rng.uniform(0.1, 0.8)
        title = self._filler(self.rng.randint(4, 8))
        for i in self.rng.sample(range(len(title)), min(title_words, len(title))):
            title[i] = self._topic_word(topic, synonym_share)
        body = [
            self._topic_word(topic, synonym_share) if self.rng.random() < share else word
            for word in self._filler(self.rng.randint(40, 120))
        ]
        return " ".join(title).capitalize(), " ".join(body)

    def decoy(self, topic: Topic) -> tuple[str, str]:
        """A document about nothing in particular that repeats one of ``topic``'s
        query words."""
        title, words = self._filler(self.rng.randint(4, 8)), self._filler(self.rng.randint(40, 120))
        word = self.rng.choice(topic.query_words)
        for _ in range(self.rng.randint(3, 8)):
            words.insert(self.rng.randrange(len(words) + 1), word)
        if self.rng.random() < 0.5:
            title.append(word)
        return " ".join(title).capitalize(), " ".join(words)

    def query(self, topic: Topic) -> str:
        k = self.rng.randint(2, min(4, len(topic.query_words)))
        return " ".join(self.rng.sample(topic.query_words, k))


def build(out: Path, seed: int) -> None:
    """Write the data set into ``out`` (replacing one this script wrote there)."""
    if out.exists():
        readme = out / "README.md"
        if not (readme.is_file() and MARKER in readme.read_text(encoding="utf-8")):
            raise SystemExit(f"{out} exists and was not written by {MARKER}: not replaced.")
        shutil.rmtree(out)
    gen = Generator(seed)
    corpus: list[dict[str, str]] = []
    qrels: list[tuple[str, str, int]] = []
    queries: list[dict[str, str]] = []

    def add(title: str, body: str) -> str:
        doc_id = f"d{len(corpus):05d}"
        corpus.append({"_id": doc_id, "title": title, "text": body})
        return doc_id

    for n, topic in enumerate(gen.topics):
        qid = f"q{n:03d}"
        queries.append({"_id": qid, "text": gen.query(topic)})
        for grade, (count, share) in GRADES.items():
            for _ in range(count):
                title_words = {3: gen.rng.randint(1, 2), 2: gen.rng.randint(0, 1), 1: 0}[grade]
                qrels.append((qid, add(*gen.document(topic, share, title_words)), grade))
        for _ in range(DECOYS):
            add(*gen.decoy(topic))
    for _ in range(BACKGROUND_DOCS):
        add(" ".join(gen._filler(gen.rng.randint(4, 8))).capitalize(), " ".join(gen._filler(80)))
    order = list(range(len(corpus)))
    gen.rng.shuffle(order)  # judged documents are not all at the start of the file
    (out / "qrels").mkdir(parents=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for i in order:
            f.write(json.dumps(corpus[i]) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps(q) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, doc_id, grade in qrels:
            f.write(f"{qid}\t{doc_id}\t{grade}\n")
    (out / "README.md").write_text(
        f"# synthetic-graded: a synthetic relevance data set (BEIR layout)\n\n"
        f"Written by `{MARKER}` with seed {seed}: {len(corpus):,} documents, "
        f"{len(queries)} queries, {len(qrels):,} graded judgments (3 = about the "
        "topic, 2, 1 = mentions it). **Synthetic**: made-up words drawn by a seeded "
        "generator (topics, synonyms that no query uses, decoys that repeat a query "
        "word), not real documents or real judgments. See the script's docstring.\n",
        encoding="utf-8",
    )
    print(f"{out}: {len(corpus):,} documents, {len(queries)} queries, {len(qrels):,} judgments")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=f"default {OUT_DIR}")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    build(args.out.expanduser(), args.seed)


if __name__ == "__main__":
    main()
