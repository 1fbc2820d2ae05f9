"""Learnings you can trust: merging, contradictions, the audit, and the write cost.

The fixture (``benchmarks/data/learnings_facts.json``, written by hand) holds 20
facts a team's corrections teach an assistant, each with its first wording,
paraphrases and contradicting corrections, and 20 planted secrets and prompt
injections. From it, with a seed, the benchmark draws 1,000 corrections:

* 48 % repeat a fact's first wording (case and punctuation varied),
* 40 % are paraphrases,
* 10 % contradict a fact (each after the fact was first taught),
* 2 % are the planted texts,

and writes them one by one through ``add_learning`` into a fresh SQLite
workspace, with the shipped embedding model. It reports, against the issue's
targets:

* active learnings per fact the corrections hold (goal ≤ 1.1: 22 for 20 facts);
* the share of contradicting corrections that became (or joined) a supersede
  proposal (goal 100 %);
* the audit's recall on the planted texts (goal ≥ 90 %) and its false alarms on
  the 980 clean corrections (goal ≤ 2 %);
* the p95 of writing one learning into a project that holds 10,000 (goal
  < 20 ms), beside the raw database's own one-row insert in the same run.

Before that, the threshold sweep: the pairwise relation (same, contradicts,
other) of each fact's first wording against its paraphrases, its contradictions
and the other facts of its skill, for a grid of ``learnings_merge_cosine``
values, on the first 10 facts (dev) and the last 10 (held out). The default was
chosen on dev; the held-out column says whether it carries over.

    python benchmarks/learnings.py [--seed 7] [--writes 200]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchlib import Clock, percentile, target

from amelio.assistant import learnings, likeness
from amelio.assistant.audit import audit
from amelio.assistant.vetting import vet
from amelio.embeddings import embed_matrix, load_embedder
from amelio.workspace.folder import Workspace, init_workspace

FIXTURE = Path(__file__).resolve().parent / "data" / "learnings_facts.json"
TOTAL = 1000


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


# -- the threshold sweep ------------------------------------------------------------------


def pairs(facts: list[dict[str, Any]], every: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(older, newer, truth): every pair of one fact's wordings (same), each wording
    against each contradiction (contradicts), and the first three wordings against
    the other facts of the skill, their contradictions included (other)."""
    out = []
    for fact in facts:
        wordings = [fact["rule"], *fact["paraphrases"]]
        out += [(a, b, "same") for a, b in itertools.combinations(wordings, 2)]
        out += [(a, c, "contradicts") for a in wordings for c in fact["contradictions"]]
        for other in every:
            if other is not fact and other["skill"] == fact["skill"]:
                theirs = [other["rule"], *other["paraphrases"][:3], *other["contradictions"]]
                out += [(a, b, "other") for a in wordings[:3] for b in theirs]
    return out


def sweep(data: dict[str, Any]) -> None:
    embedder = load_embedder("wordllama")
    facts = data["facts"]
    halves = {"dev": pairs(facts[:10], facts), "held-out": pairs(facts[10:], facts)}
    texts = sorted({t for ps in halves.values() for a, b, _ in ps for t in (a, b)})
    matrix = embed_matrix(embedder, texts)
    index = {t: i for i, t in enumerate(texts)}
    print("Pairwise relation by learnings_merge_cosine (heuristic contradictions, no LLM):")
    print(
        f"{'cosine':>6}  {'half':<8} {'same→same':>10} {'contra→contra':>14} "
        f"{'other→same':>11} {'same→contra':>12} {'contra→same':>12}"
    )
    for cosine in (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8):
        th = likeness.Thresholds(same_cosine=cosine)
        for half, ps in halves.items():
            got: Counter[tuple[str, str]] = Counter()
            for a, b, truth in ps:
                cos = float(matrix[index[a]] @ matrix[index[b]])
                got[(truth, likeness.relate(b, a, cos, th))] += 1
            n = Counter(truth for _, _, truth in ps)
            mark = " (default)" if cosine == likeness.Thresholds().same_cosine else ""
            print(
                f"{cosine:>6.2f}  {half:<8} "
                f"{got['same', 'same'] / n['same']:>10.0%} "
                f"{got['contradicts', 'contradicts'] / n['contradicts']:>14.0%} "
                f"{got['other', 'same'] / n['other']:>11.0%} "
                f"{got['same', 'contradicts'] / n['same']:>12.0%} "
                f"{got['contradicts', 'same'] / n['contradicts']:>12.0%}{mark}"
            )
    th = likeness.Thresholds()
    every = pairs(facts, facts)
    texts = sorted({t for a, b, _ in every for t in (a, b)})
    matrix = embed_matrix(embedder, texts)
    index = {t: i for i, t in enumerate(texts)}
    got = Counter(
        (truth, likeness.relate(b, a, float(matrix[index[a]] @ matrix[index[b]]), th))
        for a, b, truth in every
    )
    print("\nAll 20 facts at the defaults (rows: truth; columns: judged):")
    print(f"{'':<12} {'pairs':>6} {'same':>7} {'contra':>7} {'other':>7}")
    for truth in ("same", "contradicts", "other"):
        total = sum(v for (t, _), v in got.items() if t == truth)
        cells = [got[truth, judged] / total for judged in ("same", "contradicts", "other")]
        print(f"{truth:<12} {total:>6} " + " ".join(f"{c:>7.0%}" for c in cells))
    print()


# -- the 1,000 corrections ----------------------------------------------------------------


def _vary(text: str, rng: random.Random) -> str:
    """The same words as a person retypes them: case and final punctuation vary."""
    choice = rng.randrange(4)
    if choice == 1:
        text = text.lower()
    elif choice == 2:
        text = text.rstrip(".!") + "."
    elif choice == 3:
        text = "  " + text + " "
    return text


def corrections(data: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """1,000 corrections, each ``{"text", "skill", "fact", "kind"}``, in the order they
    arrive; a fact's first correction comes before any that contradicts it."""
    rng = random.Random(seed)
    facts = data["facts"]
    shares = {"repeat": 480, "paraphrase": 400, "contradiction": 100}
    out: list[dict[str, Any]] = []
    for n in range(shares["repeat"]):
        i = n % len(facts)
        out.append({"text": _vary(facts[i]["rule"], rng), "fact": i, "kind": "repeat"})
    for _ in range(shares["paraphrase"]):
        i = rng.randrange(len(facts))
        text = rng.choice(facts[i]["paraphrases"])
        out.append({"text": text, "fact": i, "kind": "paraphrase"})
    for _ in range(shares["contradiction"]):
        i = rng.randrange(len(facts))
        text = rng.choice(facts[i]["contradictions"])
        out.append({"text": text, "fact": i, "kind": "contradiction"})
    rng.shuffle(out)
    for planted in data["planted"]:
        out.insert(
            rng.randrange(len(out) + 1),
            {"text": planted["text"], "fact": None, "kind": planted["kind"]},
        )
    # A contradiction before its fact was taught would be the fact's first teaching.
    for i in range(len(facts)):
        first = next(
            n for n, c in enumerate(out) if c["fact"] == i and c["kind"] != "contradiction"
        )
        contra = next(
            (n for n, c in enumerate(out) if c["fact"] == i and c["kind"] == "contradiction"), None
        )
        if contra is not None and contra < first:
            out[contra], out[first] = out[first], out[contra]
    for c in out:
        c["skill"] = None if c["fact"] is None else facts[c["fact"]]["skill"]
    assert len(out) == TOTAL
    return out


def replay(ws: Workspace, stream: list[dict[str, Any]]) -> dict[str, Any]:
    learning_fact: dict[int, tuple[int, bool] | None] = {}
    outcomes: Counter[tuple[str, str]] = Counter()
    wrong_merge = 0
    contradiction_held = 0
    for n, c in enumerate(stream):
        item, outcome = learnings.add_learning(
            ws,
            c["text"],
            source="fixit",
            skill=c["skill"],
            origin=learnings.Origin(feedback_id=n + 1, author=f"user{n % 37}"),
        )
        outcomes[(c["kind"], outcome)] += 1
        # What a learning says: its first correction's fact (negated for a contradiction).
        said = None if c["fact"] is None else (c["fact"], c["kind"] == "contradiction")
        if outcome in ("added", "held", "proposed"):
            learning_fact[item.id] = said
        elif learning_fact.get(item.id) != said:
            wrong_merge += 1
        if c["kind"] == "contradiction":
            contradiction_held += item.status == "candidate" and item.supersedes_id is not None
    return {
        "outcomes": outcomes,
        "wrong": wrong_merge,
        "contradictionHeld": contradiction_held,
    }


def quality(seed: int) -> None:
    data = load()
    stream = corrections(data, seed)
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            with Clock() as clock:
                result = replay(ws, stream)
            states = Counter(i.status for i in learnings.list_learnings(ws, include_retired=True))
            found = audit(ws)
            by_id = {i.id: i for i in learnings.list_learnings(ws, include_retired=True)}
        finally:
            ws.dispose()
    planted = {" ".join(p["text"].split()) for p in data["planted"]}  # as stored
    flagged = {lid for f in found if f.kind in ("secret", "injection") for lid in f.learning_ids}
    planted_found = sum(1 for lid in flagged if by_id[lid].rule in planted)
    clean = [c["text"] for c in stream if c["fact"] is not None]
    false_alarms = sum(1 for text in clean if vet(text))
    facts = len(data["facts"])
    print(f"1,000 corrections written one by one ({clock}):")
    print(f"{'kind':<14} {'outcome':<12} {'count':>6}")
    for (kind, outcome), count in sorted(result["outcomes"].items()):
        print(f"{kind:<14} {outcome:<12} {count:>6}")
    print(f"Learnings by state: {dict(sorted(states.items()))}")
    print(
        "Corrections merged into a learning that says something else (another fact, "
        f"or the opposite): {result['wrong']}"
    )
    print(f"Audit findings by kind: {dict(Counter(f.kind for f in found))}")
    print()
    target("active learnings per fact", states["active"] / facts, 1.1, "×", higher_is_better=False)
    target(
        "contradictions that became supersede proposals",
        100 * result["contradictionHeld"] / 100,
        100,
        "%",
    )
    target("audit recall on planted", 100 * planted_found / len(planted), 90, "%")
    target(
        "audit false alarms on clean corrections",
        100 * false_alarms / len(clean),
        2,
        "%",
        higher_is_better=False,
    )
    target(
        "planted texts active",
        sum(1 for i in by_id.values() if i.status == "active" and i.rule in planted),
        0,
        "",
        higher_is_better=False,
    )
    print()


# -- the write cost -----------------------------------------------------------------------


def _words(seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(5000)]


def _fill(ws: Workspace, count: int, skills: int, seed: int) -> None:
    """``count`` distinct active learnings with embeddings, inserted in bulk, spread
    over ``skills`` skills (made-up words: no two say the same thing)."""
    import sqlalchemy as sa

    from amelio import db
    from amelio.db.schema import learnings as table
    from amelio.db.schema import utcnow
    from amelio.workspace.projects import ensure_project

    rng = random.Random(seed)
    words = _words(seed)
    rules: set[str] = set()
    while len(rules) < count:
        rules.add(
            f"When handling {rng.choice(words)} use {rng.choice(words)} for {rng.choice(words)}"
        )
    ordered = sorted(rules)
    vectors = embed_matrix(load_embedder("wordllama"), ordered)
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = ensure_project(conn, "default")
        conn.execute(
            sa.insert(table),
            [
                {
                    "project_id": pid,
                    "skill": f"skill-{n % skills}",
                    "rule": rule,
                    "rule_key": learnings._key(rule),
                    "source": "fixit",
                    "status": "active",
                    "helpful": 0,
                    "harmful": 0,
                    "occurrences": 1,
                    "created_at": now,
                    "last_seen_at": now,
                    "updated_at": now,
                    "sources": [],
                    "embedding": vectors[n].astype("<f4").tobytes(),
                }
                for n, rule in enumerate(ordered)
            ],
        )
    learnings._write_file(ws, "default")


def _raw_insert_ms(ws: Workspace, writes: int) -> list[float]:
    """The raw database's own cost of storing one learning row: one INSERT in one
    write transaction, through SQLAlchemy, no comparison and no mirror."""
    from amelio import db
    from amelio.db.schema import learnings as table
    from amelio.db.schema import utcnow

    now = utcnow()
    samples = []
    for n in range(writes):
        start = time.perf_counter()
        with db.transaction(ws.engine) as conn:
            conn.execute(
                table.insert().values(
                    project_id=1, skill="skill-0", rule=f"raw {n}", rule_key=f"raw{n}",
                    source="fixit", status="active", helpful=0, harmful=0, occurrences=1,
                    created_at=now, last_seen_at=now, updated_at=now, sources=[],
                )
            )  # fmt: skip
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def write_cost(writes: int, seed: int) -> None:
    """Corrections as the fixture deals them (the 20 facts taught first), one in 20
    a brand-new rule, written into a project that already holds 10,000 learnings."""
    data = load()
    stream = [c for c in corrections(data, seed) if c["fact"] is not None]
    words = _words(seed + 1)
    rng = random.Random(seed)
    print(f"Writing one learning into a project that holds 10,000 ({writes} writes per case):")
    print(f"{'case':<42} {'writes':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    p95 = {}
    p95_new = {}
    for label, skills in (("10,000 over 50 skills", 50), ("10,000 in one skill (worst case)", 1)):
        with tempfile.TemporaryDirectory() as tmp:
            ws, _ = init_workspace(Path(tmp) / "ws")
            try:
                _fill(ws, 10_000, skills, seed)
                for fact in data["facts"]:  # taught once, so later corrections repeat them
                    learnings.add_learning(ws, fact["rule"], source="fixit", skill="skill-0")
                by_outcome: dict[str, list[float]] = {}
                for n in range(writes):
                    if n % 20 == 19:
                        text = f"Prefer {rng.choice(words)} over {rng.choice(words)} in reports"
                    else:
                        text = stream[n % len(stream)]["text"]
                    start = time.perf_counter()
                    _, outcome = learnings.add_learning(ws, text, source="fixit", skill="skill-0")
                    by_outcome.setdefault(outcome, []).append((time.perf_counter() - start) * 1000)
                raw = _raw_insert_ms(ws, writes)
            finally:
                ws.dispose()
        every = [x for xs in by_outcome.values() for x in xs]
        p95[label] = percentile(every, 95)
        p95_new[label] = percentile(by_outcome.get("added", [float("nan")]), 95)
        rows = [(label, every), *((f"  of which {k}", v) for k, v in sorted(by_outcome.items()))]
        rows.append(("  raw one-row INSERT, same database", raw))
        for name, xs in rows:
            print(
                f"{name:<42} {len(xs):>6} {percentile(xs, 50):>8.2f} "
                f"{percentile(xs, 95):>8.2f} {max(xs):>8.2f}"
            )
    target(
        "write p95, 10,000 learnings over 50 skills",
        p95["10,000 over 50 skills"],
        20,
        "ms",
        higher_is_better=False,
    )
    target(
        "write p95 of new rules only, 10,000 learnings over 50 skills",
        p95_new["10,000 over 50 skills"],
        20,
        "ms",
        higher_is_better=False,
    )
    print(
        "Each write reads the embeddings of its skill's learnings and the general ones: "
        "with all 10,000 in one skill that read is most of the time (docs/performance.md)."
    )
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--writes", type=int, default=200)
    args = parser.parse_args()
    sweep(load())
    quality(args.seed)
    write_cost(args.writes, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
