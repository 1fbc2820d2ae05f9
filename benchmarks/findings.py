"""Findings: do planted failure modes come out as separate findings, does each come
with a rule that catches it, and how long does grouping take at scale?

The fixture is built here, with a seed: five failure modes of an assistant, 20
interactions each, whose messages and Fix-It comments are paraphrased from a few
wordings per mode and whose answers share the mode's fault (a plain force push,
no verdict, far too long, the familiar "tu", sudo in a deploy script), among 500
clean interactions of the same skills. Written straight into a fresh SQLite
workspace, then ``amelio findings update`` once, with the shipped embedding model.

Targets (issue): at least 4 of the 5 modes come out as separate findings, each
with purity at least 0.8 (the share of its evidence from its main mode); each
finding's mined rule fires on at least 90 % of its evidence and at most 5 % of
clean answers; a closed finding reopens within one run after 3 new matching
failures; ``update`` over 100,000 interactions (20 % failing) takes at most 60 s
on 2 cores, and the report gives its peak memory. The two planted search failure
modes the issue asks for are not measured: the search side is not built yet.

    python benchmarks/findings.py [--seed 7] [--scale 100000]
"""

from __future__ import annotations

import argparse
import random
import resource
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


def plant(ws: Workspace, seed: int, *, per_mode: int = 20, clean: int = 500) -> dict[str, str]:
    """Write the fixture; returns each evidence ref's mode."""
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
                        comment=rng.choice(mode["comments"]),
                        created_at=now,
                        updated_at=now,
                    )
                )
                assert made.inserted_primary_key is not None
                truth[f"feedback:{made.inserted_primary_key[0]}"] = name
    return truth


def quality(seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            truth = plant(ws, seed)
            with Clock() as clock:
                report = findings.update_findings(ws)
            found = [findings.get_finding(ws, f.id) for f in findings.list_findings(ws)]
            print(f"update over {len(truth)} planted failures among 600 answers: {clock}")
            print(f"{'finding':<8} {'main mode':<12} {'purity':>7} {'size':>5} "
                  f"{'rule fires: evidence':>21} {'clean':>6}  title")  # fmt: skip
            separate: dict[str, float] = {}
            rule_ok = 0
            for f in found:
                modes = Counter(truth.get(e.ref, "?") for e in f.evidence)
                main, count = modes.most_common(1)[0]
                purity = count / len(f.evidence)
                if purity > separate.get(main, 0):
                    separate[main] = purity
                fix = f.fix or {}
                on_ev, on_clean = fix.get("firesOnEvidence"), fix.get("firesOnClean")
                rule_ok += bool(fix) and on_ev >= 0.9 and on_clean <= 0.05  # type: ignore[operator]
                print(
                    f"#{f.id:<7} {main:<12} {purity:>7.2f} {len(f.evidence):>5} "
                    f"{'-' if on_ev is None else f'{on_ev:.0%}':>21} "
                    f"{'-' if on_clean is None else f'{on_clean:.0%}':>6}  {f.title}"
                )
            print(f"waiting (groups too small): {report.waiting}")
            modes_out = sum(1 for p in separate.values() if p >= 0.8)
            target("failure modes out as separate findings (purity ≥ 0.8)", modes_out, 4, "of 5")
            target("findings whose mined rule meets the rates", rule_ok, len(found), "")
            # Reopening: close the force-push finding, three new failures, one run.
            force = next(f for f in found if "force" in f.title or "push" in f.title)
            findings.close_finding(ws, force.id, actor="bench")
            plant_more(ws, seed + 1, "force-push", 3)
            again = findings.update_findings(ws)
            target(
                "closed finding reopened after 3 new failures", force.id in again.reopened, 1, ""
            )
        finally:
            ws.dispose()


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
                    comment=rng.choice(mode["comments"]),
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
    args = parser.parse_args()
    quality(args.seed)
    scale(args.scale, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
