"""Findings: do planted failure modes come out as separate findings, does each come
with a rule that catches it, and how long does grouping take at scale?

The fixture is built here, with a seed. **Assistant:** five failure modes, 20
interactions each, whose answers share the mode's fault (a plain force push, no
verdict, far too long, the familiar "tu", sudo in a deploy script). Their Fix-It
comments are paraphrased: a wording of the mode, with a random lead-in, tail and
letter case. Among them, 500 clean interactions of the same skills and 30 vague
complaints that belong to no mode ("not helpful", "wrong answer"): noise that
must not be pulled into a mode's finding. Written straight into a fresh SQLite
workspace. **Search:** two failure modes, 20 people each, through the real
:class:`~amelio.search.Searcher` and feedback collector on a small corpus: a
question the corpus cannot answer (paraphrased queries, no results), and a word
the corpus does not use (people search "stop …", find nothing useful, search
"unsubscribe …" and click), among 200 searches that find and click. Then
``amelio findings update`` once, with the shipped embedding model.

Targets (issue): at least 4 of the 5 assistant modes come out as separate
findings, each with purity at least 0.8 (the share of its evidence from its main
mode; noise counts against it); the two search modes come out too, each with
its fix (the corpus-lacks note, the synonym); each finding's mined rule fires on
at least 90 % of its evidence and at most 5 % of clean answers; a closed finding
reopens within one run after 3 new matching failures; ``update`` over 100,000
interactions (20 % failing) takes at most 60 s on 2 cores, and the report gives
its peak memory.

``--sweep`` also runs the quality fixture at several ``findings_match_cosine``
values over three seeds: how the default was chosen.

    python benchmarks/findings.py [--seed 7] [--scale 100000] [--sweep]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchlib import Clock, target

from amelio import db
from amelio.db.schema import feedback, interactions, utcnow
from amelio.improve import findings
from amelio.workspace.folder import Workspace, init_workspace
from amelio.workspace.projects import ensure_project

MODES: dict[str, dict[str, Any]] = {
    "force-push": {
        "skill": "git-help",
        "messages": ["git push rejected", "my push was refused", "cannot push to main"],
        "comments": [
            "Never suggest a plain force push",
            "Do not tell people to force push",
            "Force pushing is dangerous, use --force-with-lease",
            "No git push --force please, it rewrites history",
            "Stop recommending git push --force",
        ],
        "bad": "Just run git push --force and it will go through.",
    },
    "no-verdict": {
        "skill": "sql-review",
        "messages": ["review this query", "is this SQL ok?", "check my migration script"],
        "comments": [
            "You forgot the verdict line",
            "Where is the verdict? Start with Verdict: OK or NEEDS CHANGES",
            "The review must begin with a verdict",
            "Missing the Verdict: line at the top",
        ],
        "bad": "The query scans the whole table; add an index on user_id.",
    },
    "too-long": {
        "skill": "writing",
        "messages": ["summarize this email", "shorten my paragraph", "rewrite this intro"],
        "comments": [
            "The answer is way too long",
            "Answer is too long, be brief",
            "Far too long, the answer should be two lines",
            "Much too long, I asked for a short summary",
        ],
        "bad": "Here is a detailed rewrite. " + "It covers every point at great length. " * 30,
    },
    "tutoiement": {
        "skill": "support-fr",
        "messages": ["réponds au client", "rédige la réponse au ticket", "écris au client"],
        "comments": [
            "Never use tu with customers, always vous",
            "Do not tutoie the customer",
            "Use vous, not tu, when writing to a client",
            "The reply says tu to the customer: use vous",
        ],
        "bad": "Bonjour, tu peux redémarrer ton routeur et tu nous dis si ça marche.",
    },
    "sudo": {
        "skill": "deployment",
        "messages": ["write the deploy script", "how do I deploy the api", "script to restart"],
        "comments": [
            "No sudo in deployment scripts",
            "Never put sudo in the deploy script",
            "Remove sudo, the deploy user has the rights",
            "Deployment scripts must not call sudo",
        ],
        "bad": "#!/bin/sh\nsudo systemctl restart api\nsudo cp build/* /srv/api/",
    },
}
#: Complaints that name no fault: noise the grouping must keep out of the modes.
VAGUE = [
    "not helpful",
    "wrong answer",
    "this is useless",
    "bad",
    "meh, try again",
    "That did not help me at all",
    "incorrect",
    "no",
]
LEADS = ["", "", "Please: ", "Again, ", "hmm. ", "Important - ", "Note: "]
TAILS = ["", "", ".", "!", " thanks", " (again)", " as I said before"]


def paraphrase(rng: random.Random, wording: str) -> str:
    """A wording with a random lead-in, tail and letter case, as people write it."""
    text = f"{rng.choice(LEADS)}{wording}{rng.choice(TAILS)}"
    return rng.choice([text, text.lower(), text[0].upper() + text[1:]])


CLEAN = {
    "git-help": "Run git pull --rebase, then git push; if it still fails, git push "
    "--force-with-lease.",
    "sql-review": "Verdict: OK. The query uses the index on user_id.",
    "writing": "Short version: the meeting moves to Tuesday.",
    "support-fr": "Bonjour, vous pouvez redémarrer votre routeur et nous dire si cela marche.",
    "deployment": "#!/bin/sh\nsystemctl --user restart api\ncp build/* /srv/api/",
}


def _row(pid: int, skill: str, message: str, answer: str, ok: bool, at: Any) -> dict[str, Any]:
    return {
        "project_id": pid,
        "message": message,
        "hinted": [skill],
        "applied_skill": skill,
        "prompt_hash": "0" * 64,
        "learning_ids": [],
        "answer": answer,
        "success": ok,
        "provider": "fixture",
        "model": "fixture",
        "llm_ms": 0.0,
        "total_ms": 0.0,
        "created_at": at,
    }


def plant(
    ws: Workspace, seed: int, *, per_mode: int = 20, clean: int = 500, vague: int = 30
) -> dict[str, str]:
    """Write the assistant fixture; returns each evidence ref's mode (noise: ``vague``)."""
    rng = random.Random(seed)
    now = utcnow()
    truth: dict[str, str] = {}
    with db.transaction(ws.engine) as conn:
        pid = ensure_project(conn, "default")
        skills = sorted(CLEAN)
        conn.execute(
            interactions.insert(),
            [
                _row(pid, s := rng.choice(skills), f"question {n} about {s}", CLEAN[s], True, now)
                for n in range(clean)
            ],
        )
        for name, mode in MODES.items():
            for n in range(per_mode):
                message = f"{rng.choice(mode['messages'])} ({n})"
                done = conn.execute(
                    interactions.insert().values(
                        **_row(pid, mode["skill"], message, mode["bad"], True, now)
                    )
                )
                assert done.inserted_primary_key is not None
                iid = int(done.inserted_primary_key[0])
                made = conn.execute(
                    feedback.insert().values(
                        interaction_id=iid,
                        user_ref=f"user{n}",
                        channel="fixit",
                        kind="fixit",
                        comment=paraphrase(rng, rng.choice(mode["comments"])),
                        created_at=now,
                        updated_at=now,
                    )
                )
                assert made.inserted_primary_key is not None
                truth[f"feedback:{made.inserted_primary_key[0]}"] = name
        for n in range(vague):
            skill = rng.choice(skills)
            done = conn.execute(
                interactions.insert().values(
                    **_row(pid, skill, f"question {n} about {skill}", CLEAN[skill], True, now)
                )
            )
            assert done.inserted_primary_key is not None
            made = conn.execute(
                feedback.insert().values(
                    interaction_id=int(done.inserted_primary_key[0]),
                    user_ref=f"vague{n}",
                    channel="web",
                    kind="down",
                    comment=paraphrase(rng, rng.choice(VAGUE)),
                    created_at=now,
                    updated_at=now,
                )
            )
            assert made.inserted_primary_key is not None
            truth[f"feedback:{made.inserted_primary_key[0]}"] = "vague"
    return truth


SEARCH_DOCS = [
    ("unsubscribe", "Unsubscribe from the newsletter", "Unsubscribe from newsletter emails and "
     "marketing mails with the link at the bottom of any newsletter."),
    ("invoice", "Download an invoice", "Invoices are under billing; download them as PDF."),
    ("password", "Reset your password", "Open settings, then security, and reset the password."),
    ("email", "Change your email address", "Your email address is under profile settings."),
    ("billing", "Update the billing address", "The billing address is under billing settings."),
    ("export", "Export your data", "Settings, then privacy: export all your data as a file."),
]  # fmt: skip
#: Searches that find what they want: (query, the document clicked).
FOUND = [
    ("download invoice", "invoice"),
    ("invoice pdf", "invoice"),
    ("reset password", "password"),
    ("forgot my password", "password"),
    ("change email address", "email"),
    ("update billing address", "billing"),
    ("export my data", "export"),
]
#: A question the corpus cannot answer: none of these words is in it.
LACKING = [
    "warranty claim",
    "how to claim the warranty",
    "warranty repair request",
    "is my device under warranty",
    "warranty length",
]
#: A word the corpus does not use, then the one it does: (first query, second query).
RENAMED = [
    ("stop newsletter", "unsubscribe newsletter"),
    ("stop the newsletter", "unsubscribe the newsletter"),
    ("stop newsletter emails", "unsubscribe newsletter emails"),
    ("stop marketing mails", "unsubscribe marketing mails"),
]


def plant_search(
    ws: Workspace, seed: int, *, per_mode: int = 20, found: int = 200
) -> dict[str, str]:
    """Search the small corpus as people would (the real searcher and collector); returns
    each failing search's query id and its mode."""
    import json

    from amelio.feedback import Collector
    from amelio.search import Searcher
    from amelio.search.engines.registry import workspace_corpus
    from amelio.search.simulate import result_event

    def now_ms() -> int:
        return int(time.time() * 1000)

    rng = random.Random(seed)
    corpus = workspace_corpus(ws.settings)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for doc_id, title, text in SEARCH_DOCS:
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    corpus.import_file(Path(f.name))
    Path(f.name).unlink()
    searcher = Searcher(ws, engine=corpus, background_aggregation=False, rng=rng)
    searcher.settings = ws.settings.model_copy(
        update={"search_thompson": 0.0, "search_exploration": 0.0}
    )
    truth: dict[str, str] = {}
    events: list[dict[str, Any]] = []
    sessions = [("found", n) for n in range(found)] + [
        (mode, n) for mode in ("lacking", "renamed") for n in range(per_mode)
    ]
    rng.shuffle(sessions)
    for mode, n in sessions:
        session = f"{mode}-{n}"

        def search(query: str) -> Any:
            return searcher.search(query, profile="bm25", session=session)  # noqa: B023

        if mode == "found":
            query, doc = rng.choice(FOUND)
            events.append(result_event(search(query), doc, "result_clicked", session, now_ms()))
        elif mode == "lacking":
            truth[search(rng.choice(LACKING)).query_id] = mode
        else:
            first, second = rng.choice(RENAMED)
            truth[search(first).query_id] = mode
            then = search(second)
            truth[then.query_id] = mode
            events.append(result_event(then, "unsubscribe", "result_clicked", session, now_ms()))
    ingested = Collector(ws).ingest(events, rate_limit=False)
    assert ingested.count("accepted") == len(events), ingested
    return truth


def _search_modes(ws: Workspace, by_query: dict[str, str]) -> dict[int, str]:
    """Impression ids of the planted failing searches, with their mode."""
    import sqlalchemy as sa

    from amelio.db.schema import search_impressions

    with ws.engine.connect() as conn:
        rows = conn.execute(sa.select(search_impressions.c.id, search_impressions.c.query_id))
        return {r.id: by_query[r.query_id] for r in rows if r.query_id in by_query}


def _score(
    found: list[findings.Finding], truth: dict[str, str], searched: dict[int, str]
) -> list[tuple[findings.Finding, str, float]]:
    """Each finding with its main planted mode and its purity (noise and unplanted
    evidence count against it)."""
    scored = []
    for f in found:
        modes = Counter(
            searched.get(int(e.ref.rsplit(":", 1)[1]), "?")
            if e.ref.startswith("search:")
            else truth.get(e.ref, "?")
            for e in f.evidence
        )
        main, count = modes.most_common(1)[0]
        scored.append((f, main, count / len(f.evidence)))
    return scored


def _run(seed: int, cosine: float | None) -> tuple[Workspace, dict[str, Any]]:
    """Plant both fixtures in a fresh workspace and update once; the workspace (the
    caller disposes of it) and what came out."""
    tmp = tempfile.mkdtemp()
    ws, _ = init_workspace(Path(tmp) / "ws")
    if cosine is not None:
        ws = dataclasses.replace(
            ws, settings=ws.settings.model_copy(update={"findings_match_cosine": cosine})
        )
    truth = plant(ws, seed)
    searched = _search_modes(ws, plant_search(ws, seed))
    with Clock() as clock:
        report = findings.update_findings(ws, file_fixes=False)
    found = [findings.get_finding(ws, f.id) for f in findings.list_findings(ws)]
    scored = _score(found, truth, searched)
    best: dict[str, tuple[float, findings.Finding]] = {}
    for f, main, purity in scored:
        if purity > best.get(main, (0.0, f))[0]:
            best[main] = (purity, f)
    return ws, {
        "tmp": tmp,
        "clock": clock,
        "report": report,
        "scored": scored,
        "best": best,
        "planted": len(truth),
        "modes_out": sum(1 for m in MODES if best.get(m, (0.0,))[0] >= 0.8),
        # Findings beyond one per planted mode: a mode cut in two.
        "extra": sum(1 for _, main, _ in scored if main in MODES) - len(MODES),
        "noise_pulled": sum(
            1
            for f, main, _ in scored
            for e in f.evidence
            if main in MODES and truth.get(e.ref) == "vague"
        ),
    }


def _done(ws: Workspace, out: dict[str, Any]) -> None:
    ws.dispose()
    shutil.rmtree(out["tmp"], ignore_errors=True)


def _search_fix_ok(best: dict[str, tuple[float, findings.Finding]], mode: str) -> bool:
    purity, finding = best.get(mode, (0.0, None))
    fix = (finding.fix if finding else None) or {}
    if purity < 0.8 or finding is None or finding.kind != "search":
        return False
    if mode == "lacking":
        return bool(fix.get("corpusLacks"))
    return any(s["from"] == "stop" and s["to"] == "unsubscribe" for s in fix.get("synonyms", ()))


def quality(seed: int) -> None:
    ws, out = _run(seed, None)
    try:
        report = out["report"]
        print(
            f"update over {out['planted']} planted failures among 630 answers, "
            f"{report.search_evidence} failing searches among 280: {out['clock']}"
        )
        print(f"{'finding':<8} {'kind':<9} {'main mode':<12} {'purity':>7} {'size':>5} "
              f"{'rule fires: evidence':>21} {'clean':>6}  title / fix")  # fmt: skip
        rule_ok = rules = 0
        for f, main, purity in out["scored"]:
            fix = f.fix or {}
            on_ev, on_clean = fix.get("firesOnEvidence"), fix.get("firesOnClean")
            if main in MODES:  # vague complaints on clean answers have no fault to mine
                rules += 1
                rule_ok += bool(fix) and on_ev >= 0.9 and on_clean <= 0.05  # type: ignore[operator]
            print(
                f"#{f.id:<7} {f.kind:<9} {main:<12} {purity:>7.2f} {len(f.evidence):>5} "
                f"{'-' if on_ev is None else f'{on_ev:.0%}':>21} "
                f"{'-' if on_clean is None else f'{on_clean:.0%}':>6}  {f.title}"
            )
            for line in findings.describe_fix(fix if f.kind == "search" else None):
                print(f"{'':>72}{line}")
        print(
            f"waiting (groups too small): {report.waiting}; vague complaints pulled into a "
            f"mode's finding: {out['noise_pulled']} of 30"
        )
        target("failure modes out as separate findings (purity ≥ 0.8)", out["modes_out"], 4, "of 5")
        target(
            "search modes out with their fix (corpus lacks, synonym)",
            sum(_search_fix_ok(out["best"], m) for m in ("lacking", "renamed")),
            2,
            "of 2",
        )
        target("planted-mode findings whose mined rule meets the rates", rule_ok, rules, "")
        # Reopening: close the force-push finding, three new failures, one run.
        force = out["best"]["force-push"][1]
        findings.close_finding(ws, force.id, actor="bench")
        plant_more(ws, seed + 1, "force-push", 3)
        again = findings.update_findings(ws, file_fixes=False)
        target("closed finding reopened after 3 new failures", force.id in again.reopened, 1, "")
    finally:
        _done(ws, out)


def sweep() -> None:
    """The quality fixture at several findings_match_cosine values, three seeds each."""
    print(f"\n{'match cosine':>12} {'modes out (of 5)':>17} {'search (of 2)':>14} "
          f"{'mean purity':>12} {'noise pulled':>13} {'modes split':>12} "
          f"{'waiting':>8}")  # fmt: skip
    for cosine in (0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6):
        rows = []
        for seed in (7, 8, 9):
            ws, out = _run(seed, cosine)
            _done(ws, out)
            purities = [out["best"].get(m, (0.0,))[0] for m in MODES]
            rows.append(
                (
                    out["modes_out"],
                    sum(_search_fix_ok(out["best"], m) for m in ("lacking", "renamed")),
                    sum(purities) / max(len(purities), 1),
                    out["noise_pulled"],
                    out["extra"],
                    out["report"].waiting,
                )
            )
        mean = [sum(col) / len(rows) for col in zip(*rows, strict=True)]
        # mean purity: of each assistant mode's purest finding (0 when it has none)
        print(
            f"{cosine:>12.2f} {mean[0]:>17.1f} {mean[1]:>14.1f} {mean[2]:>12.2f} "
            f"{mean[3]:>13.1f} {mean[4]:>12.1f} {mean[5]:>8.1f}"
        )


def plant_more(ws: Workspace, seed: int, name: str, count: int) -> None:
    rng = random.Random(seed)
    mode = MODES[name]
    now = utcnow()
    with db.transaction(ws.engine) as conn:
        pid = ensure_project(conn, "default")
        for n in range(count):
            done = conn.execute(
                interactions.insert().values(
                    **_row(pid, mode["skill"], rng.choice(mode["messages"]), mode["bad"], True, now)
                )
            )
            assert done.inserted_primary_key is not None
            conn.execute(
                feedback.insert().values(
                    interaction_id=int(done.inserted_primary_key[0]),
                    user_ref=f"late{n}",
                    channel="fixit",
                    kind="fixit",
                    comment=paraphrase(rng, rng.choice(mode["comments"])),
                    created_at=now,
                    updated_at=now,
                )
            )


def scale(total: int, seed: int) -> None:
    """``total`` interactions, 20 % of them failures with a comment (the five modes'
    paraphrases), then one update: wall time and the process's peak memory."""
    per_mode = total // 5 // len(MODES)
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            start = time.perf_counter()
            plant(ws, seed, per_mode=per_mode, clean=total - per_mode * len(MODES))
            print(f"\nplanted {total:,} interactions in {time.perf_counter() - start:.1f} s")
            with Clock() as clock:
                report = findings.update_findings(ws)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"update: {clock}; {report.evidence:,} failures, {len(report.created)} findings, "
                f"{report.waiting:,} waiting; peak memory of the process {peak:,.0f} MB"
            )
            target(
                f"update over {total:,} interactions", clock.wall, 60, "s", higher_is_better=False
            )
        finally:
            ws.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--sweep", action="store_true", help="also sweep findings_match_cosine")
    args = parser.parse_args()
    quality(args.seed)
    if args.sweep:
        sweep()
    scale(args.scale, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
