"""Router accuracy and latency per scorer on a routing data set, beside an outside BM25.

Data: any folder in the ``routing-*`` layout of ``../shared/data/README.md``:
``skills/<name>/SKILL.md`` and ``queries.jsonl`` of ``{"text", "skill"}``, where
``skill`` is the expected top skill, or ``null`` for an out-of-scope message that
no skill should take. The default is ``../shared/data/routing-clinc150`` (CLINC150:
150 skills, 4,500 in-scope and 1,000 out-of-scope test queries). The hand-labelled
``benchmarks/data/example_routing.jsonl`` (for ``examples/skills``) is always run too.

Per scorer, at threshold 0 and at the scorer's own threshold:

* **top-1 / top-5**: the expected skill first / among the 5 routed, on in-scope queries;
* **OOS rej.**: out-of-scope queries for which no skill scores over the threshold;
* **p50 / p95 µs**: routing one message (tokenize, score, rank the top 5), every
  query of the data set in turn on the data set's own skills, all distinct and real;
  the median over ``--repeats`` runs. DESIGN.md's target is ≤ 1 ms for 200 skills:
  a data set with fewer skills has its p95 scaled by 200/skills for the target, and
  the line says so. Scoring walks postings that grow with the skill count, so the
  linear scale over-states (tokenizing the message does not grow); a data set of
  under 100 skills (a scale over ×2) is too small to check the target on, and its
  p95 is printed without it.

**bm25s** is an outside in-memory BM25 (numpy; Lucene's formula, k1 1.5, b 0.75, its
default analysis: lowercase, words of 2+ characters, Lucene's 33 English stopwords),
indexing for each skill the same text as Amelio's ``bm25`` scorer (name with hyphens
as spaces, description, triggers, keywords), asked the same queries, ranked the same
way (score > 0, ties by name). Its query analysis is bm25s's own regular expression
and stopwords, compiled once (``bm25s.tokenize`` costs ~60 µs of setup per call,
which would flatter Amelio); it is checked against ``bm25s.tokenize`` on every query.

``--ablation`` finds what separates a BM25 from bm25s: a reference BM25 in this file,
checked to reproduce Amelio's ``bm25`` exactly, is changed one analysis step or
parameter at a time, from the analysis Amelio's ``bm25`` had before it adopted
bm25s's (whole tokens, all words) and back from bm25s's.

**Warm mode** (``--warm K``, default 10; 0 skips it): the router learning from use.
For each of ``--seeds`` seeds (default 3), K in-scope queries per skill are drawn
from the queries file and fed the way real use feeds them: each is logged as an
interaction answered by its skill (``log_exchange``) and given 👍
(``give_answer_feedback``), in a fresh SQLite workspace holding the data set's
skills; the router is then the one ``route_message`` builds for the project (its
examples read from the database, its out-of-scope threshold learned from them).
It routes the remaining in-scope queries and every out-of-scope one. Reported,
as means over the seeds: top-1 / top-5 without threshold, top-1 at the learned
threshold (an in-scope query rejected counts as a miss), out-of-scope rejection
at that threshold, p50 / p95 of ``Router.route`` (the index, as in cold mode),
and the time to build and calibrate the index. The outside baseline is
scikit-learn's TF-IDF + logistic regression trained on the same K examples per
skill (``TfidfVectorizer(sublinear_tf=True)``, ``LogisticRegression(C=10)``),
which knows no skill metadata.

Targets: cold, the default scorer top-1 ≥ 78 % and top-5 ≥ 95 %; warm with K = 10,
top-1 ≥ 88 % and top-5 ≥ 97 %, out-of-scope rejection ≥ 50 % at a top-1 cost of at
most 2 points; the default scorer at least as good as the seed's ``keywords`` on
top-1 and on out-of-scope rejection (docs/router.md); Amelio's ``bm25`` within 1
point of bm25s's top-1; the examples routed 100 % right; the default scorer's p95
≤ 1 ms at 200 skills, cold and warm.

    python benchmarks/router_accuracy.py [--data DIR] [--repeats 3] [--warm 10]
                                         [--seeds 3] [--ablation]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import bm25s  # type: ignore[import-untyped]
import numpy as np
from benchlib import Clock, median_of, percentile, target
from bm25s.stopwords import STOPWORDS_EN  # type: ignore[import-untyped]

from amelio.assistant.quality import give_answer_feedback
from amelio.assistant.respond import log_exchange
from amelio.routing.lexical import skill_text
from amelio.routing.router import (
    DEFAULT_LIMIT,
    DEFAULT_SCORER,
    Router,
    project_router,
    scorers,
)
from amelio.skills import import_skills, read_skills
from amelio.skills.model import SkillSpec
from amelio.text import ENGLISH_STOPWORDS, tokens
from amelio.workspace.folder import init_workspace
from amelio.workspace.projects import DEFAULT_PROJECT

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "routing-clinc150"
#: DESIGN.md: "router ≤ 1 ms for 200 skills".
TARGET_SKILLS = 200
TARGET_P95_US = 1000.0
#: Fewer skills than this are too few to scale the p95 from (over ×2): no latency target.
MIN_SCALED_SKILLS = TARGET_SKILLS // 2
#: The issue's warm-mode targets are set for 10 examples per skill.
WARM_TARGET_K = 10
LIMIT = DEFAULT_LIMIT

Queries = list[tuple[str, str | None]]
RouteFn = Callable[[str], Sequence[str]]


@dataclass(frozen=True)
class DataSet:
    name: str
    skills: list[SkillSpec]
    queries: Queries
    source: str = ""
    folder: Path = Path()

    @property
    def in_scope(self) -> int:
        return sum(e is not None for _, e in self.queries)

    @property
    def out_of_scope(self) -> int:
        return sum(e is None for _, e in self.queries)


def load_queries(path: Path) -> Queries:
    with path.open(encoding="utf-8") as f:
        return [(q["text"], q["skill"]) for q in map(json.loads, f) if q.get("text")]


def load(folder: Path) -> DataSet:
    """A ``routing-*`` folder; unknown expected skills are an error, not a silent miss."""
    skills = read_skills(folder / "skills")
    queries = load_queries(folder / "queries.jsonl")
    unknown = {e for _, e in queries if e is not None} - {s.name for s in skills}
    if unknown:
        raise SystemExit(
            f"{folder}: queries expect skills it does not have: {', '.join(sorted(unknown)[:5])}"
        )
    source = folder / "SOURCE.md"
    first = source.read_text(encoding="utf-8").splitlines()[0] if source.is_file() else ""
    return DataSet(folder.name, skills, queries, first, folder)


def accuracy(route: RouteFn, queries: Queries) -> dict[str, float]:
    top1 = top5 = inscope = oos = rejected = 0
    for text, expected in queries:
        names = route(text)
        if expected is None:
            oos += 1
            rejected += not names
            continue
        inscope += 1
        top1 += bool(names) and names[0] == expected
        top5 += expected in names
    return {
        "top1": top1 / inscope if inscope else math.nan,
        "top5": top5 / inscope if inscope else math.nan,
        "oos_rejected": rejected / oos if oos else math.nan,
    }


def router_route(router: Router, min_score: float | None = None) -> RouteFn:
    return lambda text: router.route(text, limit=LIMIT, min_score=min_score).names


def latency_run(route: RouteFn, messages: Sequence[str]) -> tuple[float, float]:
    """p50 and p95 in µs of one pass over ``messages``."""
    samples: list[float] = []
    for text in messages:
        start = time.perf_counter()
        route(text)
        samples.append((time.perf_counter() - start) * 1e6)
    return percentile(samples, 50), percentile(samples, 95)


# -- the outside baseline ---------------------------------------------------------------


class Bm25s:
    """bm25s with its defaults over :func:`skill_text`, routing like Amelio's router."""

    #: bm25s.tokenize's default analysis, compiled once.
    _WORD = re.compile(r"(?u)\b\w\w+\b")
    _STOP = frozenset(STOPWORDS_EN)

    def __init__(self, skills: Sequence[SkillSpec]) -> None:
        self.names = [s.name for s in skills]
        corpus = bm25s.tokenize([skill_text(s) for s in skills], show_progress=False)
        self.retriever = bm25s.BM25()
        self.retriever.index(corpus, show_progress=False)
        self._vocab: dict[str, int] = self.retriever.vocab_dict
        # Ties broken by name, as Amelio's router does.
        self._by_name = np.argsort(np.argsort(np.array(self.names)))

    @classmethod
    def analyze(cls, text: str) -> list[str]:
        return [t for t in cls._WORD.findall(text.lower()) if t not in cls._STOP]

    def route(self, text: str) -> tuple[str, ...]:
        ids = [self._vocab[t] for t in self.analyze(text) if t in self._vocab]
        if not ids:
            return ()
        scores = self.retriever.get_scores(ids)
        best = np.lexsort((self._by_name, -scores))[:LIMIT]
        return tuple(self.names[i] for i in best if scores[i] > 0)

    @classmethod
    def check_analysis(cls, texts: Sequence[str]) -> int:
        """How many texts :meth:`analyze` reads unlike ``bm25s.tokenize`` (must be 0)."""
        theirs = bm25s.tokenize(list(texts), return_ids=False, show_progress=False)
        return sum(cls.analyze(t) != list(b) for t, b in zip(texts, theirs, strict=True))


# -- ablation: what separates Amelio's bm25 from bm25s -----------------------------------


@dataclass(frozen=True)
class Analysis:
    """One BM25 configuration of the reference implementation below."""

    bm25s_tokens: bool = False  # bm25s's \\w\\w+ on lowercase, else amelio.text.tokens
    split_apostrophes: bool = False
    min_length: int = 1
    stopwords: frozenset[str] = frozenset()
    k1: float = 1.2
    b: float = 0.75
    distinct_query_terms: bool = True  # Amelio counts a repeated word once, bm25s twice

    def terms(self, text: str) -> list[str]:
        words: Iterable[str] = (
            Bm25s._WORD.findall(text.lower()) if self.bm25s_tokens else tokens(text)
        )
        if self.split_apostrophes:
            words = (p for w in words for p in w.split("'"))
        return [w for w in words if len(w) >= self.min_length and w not in self.stopwords]


def reference_bm25(skills: Sequence[SkillSpec], a: Analysis) -> RouteFn:
    """Okapi BM25 (Lucene's idf, the formula of Amelio's scorer and of bm25s), in plain
    Python, so each difference can be switched alone."""
    docs = [a.terms(skill_text(s)) for s in skills]
    names = [s.name for s in skills]
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for i, doc in enumerate(docs):
        tf: dict[str, int] = defaultdict(int)
        for t in doc:
            tf[t] += 1
        norm = a.k1 * (1 - a.b + a.b * len(doc) / avgdl)
        for t, f in tf.items():
            postings[t].append((i, f * (a.k1 + 1) / (f + norm)))
    index = {
        t: [(i, math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) * w) for i, w in p]
        for t, p in postings.items()
    }

    def route(text: str) -> tuple[str, ...]:
        query = a.terms(text)
        scores: dict[int, float] = defaultdict(float)
        for t in dict.fromkeys(query) if a.distinct_query_terms else query:
            for i, w in index.get(t, ()):
                scores[i] += w
        ranked = sorted(scores.items(), key=lambda x: (-x[1], names[x[0]]))
        return tuple(names[i] for i, s in ranked[:LIMIT] if s > 0)

    return route


def ablation(data: DataSet) -> bool:
    """Print the ablation table; False if the reference does not reproduce Amelio."""
    stop = frozenset(STOPWORDS_EN)
    before = Analysis()
    now = Analysis(split_apostrophes=True, min_length=2, stopwords=ENGLISH_STOPWORDS)
    theirs = Analysis(
        bm25s_tokens=True, min_length=2, stopwords=stop, k1=1.5, distinct_query_terms=False
    )
    rows: list[tuple[str, Analysis]] = [
        ("Amelio bm25 before (whole tokens, all words, k1 1.2)", before),
        ("  + split at apostrophes (what's -> what s)", Analysis(split_apostrophes=True)),
        ("  + drop one-character words", Analysis(min_length=2)),
        (
            "  + split at apostrophes, drop one-character words",
            Analysis(split_apostrophes=True, min_length=2),
        ),
        ("  + drop Lucene's 33 English stopwords", Analysis(stopwords=stop)),
        ("  + k1 1.5", Analysis(k1=1.5)),
        ("  + count a repeated query word each time", Analysis(distinct_query_terms=False)),
        ("Amelio bm25 now (the three analysis steps)", now),
        (
            "  + k1 1.5",
            Analysis(split_apostrophes=True, min_length=2, stopwords=ENGLISH_STOPWORDS, k1=1.5),
        ),
        (
            "  + b 1.0",
            Analysis(split_apostrophes=True, min_length=2, stopwords=ENGLISH_STOPWORDS, b=1.0),
        ),
        ("bm25s's analysis and parameters", theirs),
        (
            "  - its words (Amelio's whole tokens, one-character kept)",
            Analysis(stopwords=stop, k1=1.5, distinct_query_terms=False),
        ),
        (
            "  - stopwords",
            Analysis(bm25s_tokens=True, min_length=2, k1=1.5, distinct_query_terms=False),
        ),
        (
            "  - k1 1.5 (1.2)",
            Analysis(bm25s_tokens=True, min_length=2, stopwords=stop, distinct_query_terms=False),
        ),
        (
            "  - repeated query words (counted once)",
            Analysis(bm25s_tokens=True, min_length=2, stopwords=stop, k1=1.5),
        ),
    ]
    print(f"\nablation on {data.name}: a reference BM25, one change at a time")
    print(f"{'configuration':58} {'top-1':>7} {'top-5':>7} {'OOS rej.':>9}")
    found: dict[Analysis, dict[str, float]] = {}
    for label, a in rows:
        found[a] = r = found.get(a) or accuracy(reference_bm25(data.skills, a), data.queries)
        print(f"{label:58} {r['top1']:7.1%} {r['top5']:7.1%} {r['oos_rejected']:9.1%}")
    amelio = accuracy(router_route(Router(data.skills, "bm25"), 0.0), data.queries)
    real = accuracy(Bm25s(data.skills).route, data.queries)
    same_amelio = all(
        math.isclose(amelio[k], found[now][k]) or math.isnan(amelio[k]) for k in amelio
    )
    same_bm25s = all(math.isclose(real[k], found[theirs][k]) or math.isnan(real[k]) for k in real)
    print(
        f"reference reproduces Amelio's bm25: {'yes' if same_amelio else 'NO'}; "
        f"bm25s: {'yes' if same_bm25s else 'NO (ties or float32 rounding)'}"
    )
    return same_amelio


# -- warm mode: the router learning from kept answers ------------------------------------


@dataclass
class WarmResult:
    top1: float
    top5: float
    top1_kept: float
    oos_rejected: float
    p50: float
    p95: float
    build_ms: float
    threshold: float


def warm_split(data: DataSet, k: int, seed: int) -> tuple[dict[str, list[str]], Queries]:
    """K in-scope queries per skill to learn from, the rest (and all out-of-scope) to test."""
    rng = random.Random(seed)
    by_skill: dict[str, list[str]] = defaultdict(list)
    for text, expected in data.queries:
        if expected is not None:
            by_skill[expected].append(text)
    train: dict[str, list[str]] = {}
    test: Queries = []
    for name in sorted(by_skill):
        texts = by_skill[name][:]
        rng.shuffle(texts)
        train[name] = texts[:k]
        test.extend((t, name) for t in texts[k:])
    test.extend((t, e) for t, e in data.queries if e is None)
    return train, test


def warm_amelio(
    data: DataSet, train: dict[str, list[str]], test: Queries, folder: Path
) -> WarmResult:
    """Feed ``train`` as logged, 👍'd interactions; route ``test`` with the project's router."""
    ws, _ = init_workspace(folder)
    try:
        import_skills(ws.engine, data.folder / "skills")
        for skill, texts in train.items():
            for text in texts:
                reply = log_exchange(ws, text, "Done.", project=DEFAULT_PROJECT, skills=[skill])
                give_answer_feedback(ws, reply.interaction_id, "up", user="bench")
        with Clock() as clock:
            router = project_router(ws)
        free = accuracy(router_route(router, -math.inf), test)
        kept = accuracy(router_route(router), test)
        p50, p95 = latency_run(router_route(router), [t for t, _ in test])
        return WarmResult(
            free["top1"],
            free["top5"],
            kept["top1"],
            kept["oos_rejected"],
            p50,
            p95,
            clock.wall * 1e3,
            router.min_score,
        )
    finally:
        ws.dispose()


def warm_reference(train: dict[str, list[str]], test: Queries) -> dict[str, float]:
    """scikit-learn's TF-IDF + logistic regression on the same examples (no metadata)."""
    from sklearn.feature_extraction.text import (  # type: ignore[import-untyped]
        TfidfVectorizer,
    )
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]

    texts = [t for name in train for t in train[name]]
    labels = [name for name in train for _ in train[name]]
    vectorizer = TfidfVectorizer(sublinear_tf=True)
    model = LogisticRegression(C=10, max_iter=2000).fit(vectorizer.fit_transform(texts), labels)
    classes = list(model.classes_)
    probabilities = model.predict_proba(vectorizer.transform([t for t, _ in test]))
    routed = {
        t: tuple(classes[i] for i in np.argsort(-p)[:LIMIT])
        for (t, _), p in zip(test, probabilities, strict=True)
    }
    return accuracy(lambda text: routed[text], test)


def warm_mode(data: DataSet, k: int, seeds: int) -> dict[str, float]:
    """Mean warm results over ``seeds`` splits, printed per seed and as a mean."""
    print(
        f"\nwarm: {k} examples per skill logged as kept answers, tested on the rest; {seeds} seeds"
    )
    header = (
        f"{'seed':>4} {'router':14} {'top-1':>7} {'top-5':>7} {'top-1@thr':>9} "
        f"{'OOS rej.':>9} {'p50 µs':>8} {'p95 µs':>8} {'build ms':>9} {'threshold':>9}"
    )
    print(f"{header}\n{'-' * len(header)}")
    rows: list[WarmResult] = []
    refs: list[dict[str, float]] = []
    for seed in range(seeds):
        train, test = warm_split(data, k, seed)
        with tempfile.TemporaryDirectory(prefix="amelio-router-warm-") as tmp:
            got = warm_amelio(data, train, test, Path(tmp) / "ws")
        ref = warm_reference(train, test)
        rows.append(got)
        refs.append(ref)
        print(
            f"{seed:>4} {DEFAULT_SCORER:14} {got.top1:7.1%} {got.top5:7.1%} "
            f"{got.top1_kept:9.1%} {got.oos_rejected:9.1%} {got.p50:8.1f} {got.p95:8.1f} "
            f"{got.build_ms:9.1f} {got.threshold:9.3f}"
        )
        print(f"{seed:>4} {'tf-idf+LR*':14} {ref['top1']:7.1%} {ref['top5']:7.1%}")
    mean = {
        key: float(np.mean([getattr(r, key) for r in rows]))
        for key in ("top1", "top5", "top1_kept", "oos_rejected", "p50", "p95", "build_ms")
    }
    ref_mean = {key: float(np.mean([r[key] for r in refs])) for key in ("top1", "top5")}
    print(
        f"{'mean':>4} {DEFAULT_SCORER:14} {mean['top1']:7.1%} {mean['top5']:7.1%} "
        f"{mean['top1_kept']:9.1%} {mean['oos_rejected']:9.1%} {mean['p50']:8.1f} "
        f"{mean['p95']:8.1f} {mean['build_ms']:9.1f}"
    )
    print(f"{'mean':>4} {'tf-idf+LR*':14} {ref_mean['top1']:7.1%} {ref_mean['top5']:7.1%}")
    print("* outside baseline: scikit-learn TF-IDF + logistic regression on the same examples")
    return mean | {f"ref_{key}": v for key, v in ref_mean.items()}


# -- main -------------------------------------------------------------------------------


@dataclass
class Contender:
    """A scorer (or the baseline) on the data set and on the examples, and its phases."""

    name: str
    at: Callable[[float], RouteFn]
    example_at: Callable[[float], RouteFn]
    thresholds: list[float]
    latency_route: RouteFn
    index: Clock
    accuracy: list[Clock] = field(default_factory=list)
    latency: list[Clock] = field(default_factory=list)


def amelio(name: str, data: DataSet, examples: DataSet) -> Contender:
    with Clock() as clock:
        router = Router(data.skills, name)
    example_router = Router(examples.skills, name)
    return Contender(
        name,
        lambda m: router_route(router, m),
        lambda m: router_route(example_router, m),
        sorted({0.0, router.min_score}),
        router_route(router),
        clock,
    )


def outside(data: DataSet, examples: DataSet) -> Contender:
    with Clock() as clock:
        baseline = Bm25s(data.skills)
    example_baseline = Bm25s(examples.skills)
    return Contender(
        "bm25s",
        lambda _: baseline.route,
        lambda _: example_baseline.route,
        [0.0],
        baseline.route,
        clock,
    )


def total(clocks: Sequence[Clock]) -> str:
    return f"{sum(c.wall for c in clocks):6.2f} / {sum(c.cpu for c in clocks):6.2f}"


def _figure(
    name: str, measured: float, goal: float, unit: str, *, higher_is_better: bool = True
) -> None:
    """A CLINC150 target's figure on other data: printed, not judged."""
    sign = "≥" if higher_is_better else "≤"
    print(
        f"figure {name}: {measured:.1f} {unit} (CLINC150's target, {sign} {goal:g} {unit}, "
        "is not checked on other data)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="A routing-* folder (skills/ and queries.jsonl).",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ablation", action="store_true", help="Also find what separates Amelio's bm25 from bm25s."
    )
    parser.add_argument(
        "--warm",
        type=int,
        default=10,
        metavar="K",
        help="Examples per skill in warm mode (0: cold mode only).",
    )
    parser.add_argument("--seeds", type=int, default=3, help="Warm-mode splits to average.")
    args = parser.parse_args()
    if not (args.data / "queries.jsonl").is_file() or not (args.data / "skills").is_dir():
        print(
            f"no routing data set at {args.data} (skills/ and queries.jsonl); pass --data",
            file=sys.stderr,
        )
        return 2
    data = load(args.data)
    examples = DataSet(
        "examples",
        read_skills(ROOT / "examples" / "skills"),
        load_queries(HERE / "data" / "example_routing.jsonl"),
    )
    messages = [t for t, _ in data.queries]
    skills_n = len(data.skills)

    print(
        f"data: {data.name} ({args.data}): {skills_n} skills, {data.in_scope:,} in-scope "
        f"+ {data.out_of_scope:,} out-of-scope queries"
    )
    if data.source:
        print(f"      {data.source}")
    print(f"examples: {len(examples.skills)} skills, {len(examples.queries)} queries")
    print(
        f"latency: every query of {data.name} ({len(messages):,}) routed on its "
        f"{skills_n} distinct skills, {args.repeats} runs (medians of the runs' p50, p95); "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )

    contenders = [amelio(name, data, examples) for name in scorers()]
    contenders.append(outside(data, examples))
    mismatched = Bm25s.check_analysis(messages)
    if mismatched:
        print(
            f"bm25s baseline: {mismatched} queries analyzed unlike bm25s.tokenize", file=sys.stderr
        )
        return 1

    # Latency first, run after run in turn, so machine load falls on every scorer alike.
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _ in range(args.repeats):
        for c in contenders:
            with Clock() as clock:
                runs[c.name].append(latency_run(c.latency_route, messages))
            c.latency.append(clock)
    latency = {
        name: (median_of([p50 for p50, _ in r]), median_of([p95 for _, p95 in r]))
        for name, r in runs.items()
    }

    header = (
        f"{'scorer':10} {'min score':>9} {'data':18} {'top-1':>7} {'top-5':>7} "
        f"{'OOS rej.':>9} {'p50 µs':>8} {'p95 µs':>8}"
    )
    print(f"\n{header}\n{'-' * len(header)}")
    results: dict[tuple[str, str, float], dict[str, float]] = {}
    for c in contenders:
        p50, p95 = latency[c.name]
        label = c.name if c.name != "bm25s" else "bm25s*"
        for threshold in c.thresholds:
            with Clock() as clock:
                got = accuracy(c.at(threshold), data.queries)
            c.accuracy.append(clock)
            ex = accuracy(c.example_at(threshold), examples.queries)
            results[c.name, data.name, threshold] = got
            results[c.name, "examples", threshold] = ex
            print(
                f"{label:10} {threshold:9.2f} {data.name:18} {got['top1']:7.1%} "
                f"{got['top5']:7.1%} {got['oos_rejected']:9.1%} {p50:8.1f} {p95:8.1f}"
            )
            print(
                f"{label:10} {threshold:9.2f} {'examples':18} {ex['top1']:7.1%} "
                f"{ex['top5']:7.1%} {ex['oos_rejected']:9.1%}"
            )
    print("* outside baseline: bm25s on the same skill text and queries")

    print(f"\n{'phase: wall / CPU':18} {'index ms':>17} {'accuracy s':>15} {'latency s':>15}")
    for c in contenders:
        print(
            f"{c.name:18} {c.index.wall * 1e3:7.1f} / {c.index.cpu * 1e3:7.1f} "
            f"{total(c.accuracy)} {total(c.latency)}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")

    default_threshold = next(c for c in contenders if c.name == DEFAULT_SCORER).thresholds[-1]
    default = results[DEFAULT_SCORER, data.name, default_threshold]
    free = results[DEFAULT_SCORER, data.name, 0.0]
    seed = results["keywords", data.name, scorers()["keywords"].min_score]
    warm = warm_mode(data, args.warm, args.seeds) if args.warm > 0 else None

    print()
    # The absolute targets are set on CLINC150; on other data (intent_data.py)
    # the same figures are printed without a verdict, and the relative targets below
    # (against the seed's rule and the outside BM25) are checked everywhere.
    absolute = target if data.folder.resolve() == DEFAULT_DATA.resolve() else _figure
    absolute(f"{data.name} cold: {DEFAULT_SCORER} top-1", 100 * free["top1"], 78, "%")
    absolute(f"{data.name} cold: {DEFAULT_SCORER} top-5", 100 * free["top5"], 95, "%")
    if warm is not None and args.warm != WARM_TARGET_K:
        print(f"(the warm targets are for k = {WARM_TARGET_K}; k = {args.warm} is reported only)")
    if warm is not None and args.warm == WARM_TARGET_K:
        absolute(
            f"{data.name} warm k={args.warm}: top-1 (mean of {args.seeds})",
            100 * warm["top1"],
            88,
            "%",
        )
        absolute(f"{data.name} warm k={args.warm}: top-5", 100 * warm["top5"], 97, "%")
        if data.out_of_scope:
            absolute(
                f"{data.name} warm k={args.warm}: out-of-scope rejection at the learned threshold",
                100 * warm["oos_rejected"],
                50,
                "%",
            )
            absolute(
                f"{data.name} warm k={args.warm}: top-1 given up by the threshold",
                100 * (warm["top1"] - warm["top1_kept"]),
                2,
                "pt",
                higher_is_better=False,
            )
    target(
        f"{data.name}: {DEFAULT_SCORER} top-1 vs keywords",
        100 * default["top1"],
        100 * seed["top1"],
        "%",
    )
    if data.out_of_scope:
        target(
            f"{data.name}: {DEFAULT_SCORER} out-of-scope rejection vs keywords",
            100 * default["oos_rejected"],
            100 * seed["oos_rejected"],
            "%",
        )
    target(
        f"{data.name}: bm25 top-1 vs bm25s - 1 pt",
        100 * results["bm25", data.name, 0.0]["top1"],
        100 * results["bm25s", data.name, 0.0]["top1"] - 1,
        "%",
    )
    target(
        f"examples: {DEFAULT_SCORER} top-1",
        100 * results[DEFAULT_SCORER, "examples", default_threshold]["top1"],
        100,
        "%",
    )
    scale = max(1.0, TARGET_SKILLS / skills_n)
    measured_on = (
        f"scaled ×{scale:.2f} from {skills_n} real skills"
        if scale > 1
        else f"measured on {skills_n} skills"
    )
    if skills_n < MIN_SCALED_SKILLS:
        warm_p95 = f", warm {warm['p95']:.0f} µs" if warm is not None else ""
        print(
            f"{DEFAULT_SCORER} p95 on {skills_n} skills: cold "
            f"{latency[DEFAULT_SCORER][1]:.0f} µs{warm_p95} (no {TARGET_SKILLS}-skill "
            f"latency target: under {MIN_SCALED_SKILLS} skills, too few to scale from)"
        )
    else:
        target(
            f"{DEFAULT_SCORER} cold p95 at {TARGET_SKILLS} skills ({measured_on})",
            latency[DEFAULT_SCORER][1] * scale,
            TARGET_P95_US,
            "µs",
            higher_is_better=False,
        )
        if warm is not None:
            target(
                f"{DEFAULT_SCORER} warm p95 at {TARGET_SKILLS} skills ({measured_on})",
                warm["p95"] * scale,
                TARGET_P95_US,
                "µs",
                higher_is_better=False,
            )

    if args.ablation and not ablation(data):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
