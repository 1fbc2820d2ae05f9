"""Before changing models: what shadow traffic costs the live path.

``respond()`` answers with an in-process model that replies at once, so the time
measured is Amelio's own; the shadow model is served by a local fake
OpenAI-compatible server that takes 50 ms per answer (a real candidate is slower
still). The same messages go through ``respond()`` with ``shadow_rate`` 0 and 1,
interleaved, on one SQLite workspace: the p95 the shadow adds to the live answer
(target: at most 5 ms), how many shadow answers were stored, and how many were
dropped because :data:`amelio.improve.shadow.MAX_PENDING` were already waiting
(the live path never waits for one).

The check across the study's development suite with the two local models is
``python benchmarks/efficacy.py``'s job once a model check runs there; see
docs/rollouts.md.

    python benchmarks/model_check.py [--messages 600]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from benchlib import Clock, percentile, target

from amelio import skills
from amelio.assistant.respond import respond
from amelio.db.schema import shadow_answers
from amelio.improve import shadow
from amelio.llm.fake import ScriptedProvider
from amelio.testing import FakeLLMServer, FakeRequest
from amelio.workspace.folder import init_workspace

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [
    "please review this pull request before I merge it",
    "git push rejected after rebase, what now",
    "deploy the api to production tonight",
    "draft release notes for version 2.4.0",
]
ANSWER = "Run git pull --rebase then git push --force-with-lease. Verify with a smoke test."


def slow(request: FakeRequest) -> str:
    time.sleep(0.05)
    return ANSWER


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=600)
    args = parser.parse_args()
    model = ScriptedProvider(default=ANSWER)
    with FakeLLMServer(default=slow) as server, tempfile.TemporaryDirectory() as tmp:
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            skills.import_skills(ws.engine, ROOT / "examples" / "skills")
            settings = ws.settings.model_copy(
                update={
                    "llm_provider": "openai",
                    "llm_base_url": server.openai_base_url,
                    "llm_model": "live-model",
                    "shadow_model": "candidate-model",
                }
            )
            off = dataclasses.replace(ws, settings=settings.model_copy(update={"shadow_rate": 0}))
            on = dataclasses.replace(ws, settings=settings.model_copy(update={"shadow_rate": 1}))
            for i in range(40):  # warm: routing snapshot, compiled rules, connections
                respond(off, MESSAGES[i % len(MESSAGES)], provider=model)
            times: dict[str, list[float]] = {"shadow_rate 0": [], "shadow_rate 1": []}
            with Clock() as clock:
                for i in range(args.messages):
                    for name, space in (("shadow_rate 0", off), ("shadow_rate 1", on)):
                        start = time.perf_counter()
                        respond(space, MESSAGES[i % len(MESSAGES)], user=f"u{i}", provider=model)
                        times[name].append((time.perf_counter() - start) * 1000)
            shadow.wait_idle(120)
            with ws.engine.connect() as conn:
                stored = conn.scalar(sa.select(sa.func.count()).select_from(shadow_answers))
                failed = conn.scalar(
                    sa.select(sa.func.count())
                    .select_from(shadow_answers)
                    .where(shadow_answers.c.error.is_not(None))
                )
            print(f"{args.messages} live answers each way ({clock})")
            print(f"{'respond()':<16} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
            for name, values in times.items():
                print(
                    f"{name:<16} {percentile(values, 50):>8.3f} {percentile(values, 95):>8.3f} "
                    f"{percentile(values, 99):>8.3f}"
                )
            print(
                f"shadow answers stored: {stored} ({failed} with an error); dropped (more than "
                f"{shadow.MAX_PENDING} waiting): {shadow.dropped()}"
            )
            added = percentile(times["shadow_rate 1"], 95) - percentile(times["shadow_rate 0"], 95)
            target("p95 shadow traffic adds to a live answer", added, 5.0, "ms",
                   higher_is_better=False)  # fmt: skip
        finally:
            ws.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
