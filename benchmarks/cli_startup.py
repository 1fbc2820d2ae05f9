"""CLI start-up: what `amelio` imports before it does anything (target ≤ 150 ms).

Each command runs in a fresh process, from an empty folder (no workspace), under
``python -X importtime``; its import time is the sum of the top-level cumulative
entries, that is everything the process imported, interpreter start-up included
(``importlib.import_module``, which the lazy command group and the plugins use, is
routed through the import statement there, since ``-X importtime`` logs only that).
Every figure is the median of several runs; wall-clock is measured in separate
runs without ``-X importtime`` (which slows imports a little). The outside floor:
``python -c pass`` and ``python -c "import click"``, the least any click command
can cost. ``tests/test_cli_startup.py`` keeps the heavy libraries out of these
commands; this script says what they cost in milliseconds on this machine.
The last rows route a message on a real workspace (150 CLINC150 skills from
``../shared/data/routing-clinc150``, imported once): that is the DB layer
(SQLAlchemy) and, unless ``router_embedding_model`` is empty, the WordLlama model,
loaded by every process. They are reported beside the target, not under it: a
message routed by a running service (``/v1/route``) or in-process costs
microseconds; see docs/router.md.
Run: ``python benchmarks/cli_startup.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import median_of, target

from amelio.testing import IMPORT_PROBE, import_time

#: The issue's target for `amelio --help`, `amelio eval` and `amelio route`.
TARGET_MS = 150.0
SKILLS = Path(__file__).resolve().parents[2] / "shared" / "data" / "routing-clinc150" / "skills"
ANSWER = "## Verdict\n\nApprove: the retry loop is right.\n"
RULES = [{"id": "verdict", "type": "string_contains", "value": "Verdict"},
         {"id": "short", "type": "max_length", "value": 2000}]
#: ``python -m amelio ARGS``, counting what ``importlib.import_module`` loads.
RUN_AMELIO = IMPORT_PROBE


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def measure(argv: list[str], cwd: Path, env: dict[str, str], runs: int
            ) -> tuple[float, float, int]:
    """Median import ms, median wall ms, and how many modules one run imports."""
    imports, walls, count = [], [], 0
    logged = ["-c", RUN_AMELIO, *argv[2:]] if argv[:2] == ["-m", "amelio"] else argv
    for _ in range(runs):
        done = _run([sys.executable, "-X", "importtime", *logged], cwd, env)
        ms, modules = import_time(done.stderr)
        imports.append(ms)
        count = len(modules)
        started = time.perf_counter()
        _run([sys.executable, *argv], cwd, env)
        walls.append((time.perf_counter() - started) * 1000)
    return median_of(imports), median_of(walls), count


def route_cases(folder: Path, env: dict[str, str]
                ) -> list[tuple[str, list[str], dict[str, str]]]:
    """`amelio route MESSAGE` on a workspace holding the CLINC150 skills, semantic and
    lexical; none when the shared data is missing (said)."""
    if not SKILLS.is_dir():
        print(f"(no {SKILLS}: the `amelio route MESSAGE` rows are skipped)")
        return []
    workspace = folder / "ws"
    for argv in (["init", str(workspace)], ["-w", str(workspace), "skills", "import", str(SKILLS)]):
        done = _run([sys.executable, "-m", "amelio", *argv], folder, env)
        if done.returncode:
            raise SystemExit(f"amelio {' '.join(argv)} failed: {done.stderr}")
    route = ["-m", "amelio", "-w", str(workspace), "route", "how do i freeze my bank account"]
    lexical = env | {"AMELIO_ROUTER_EMBEDDING_MODEL": ""}
    return [("amelio route MESSAGE (150 skills)", route, env),
            ("  the same, lexical", route, lexical)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "AMELIO_WORKSPACE"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "rules.json").write_text(json.dumps(RULES), encoding="utf-8")
        (folder / "answer.md").write_text(ANSWER, encoding="utf-8")
        (folder / "batch.jsonl").write_text("".join(
            json.dumps({"id": f"o{i}", "text": ANSWER, "rules": RULES}) + "\n"
            for i in range(20)), encoding="utf-8")
        cases = [
            ("python -c pass (floor)", ["-c", "pass"]),
            ('python -c "import click" (floor)', ["-c", "import click"]),
            ("amelio --help", ["-m", "amelio", "--help"]),
            ("amelio route --help", ["-m", "amelio", "route", "--help"]),
            ("amelio eval --rules", ["-m", "amelio", "eval", "--rules", "rules.json",
                                     "answer.md"]),
            ("amelio eval --batch", ["-m", "amelio", "eval", "--batch", "batch.jsonl"]),
        ]
        print(f"median of {args.runs} runs each, from an empty folder (no workspace)")
        if sys.flags.dont_write_bytecode and not sys.pycache_prefix:
            print("PYTHONDONTWRITEBYTECODE is set: modules without a cached .pyc (an editable "
                  "install's) are compiled on every start, so these figures are high")
        print(f"{'command':<34} {'import ms':>10} {'wall ms':>9} {'modules':>8}")
        slowest = 0.0
        for label, argv in cases:
            imported, wall, count = measure(argv, folder, env, args.runs)
            if label.startswith("amelio"):
                slowest = max(slowest, imported)
            print(f"{label:<34} {imported:>10.1f} {wall:>9.1f} {count:>8}")
        routed = route_cases(folder, env)
        for label, argv, case_env in routed:
            imported, wall, count = measure(argv, folder, case_env, args.runs)
            print(f"{label:<34} {imported:>10.1f} {wall:>9.1f} {count:>8}  (not under the target)")
    target("import time of the slowest of these commands (median)", slowest, TARGET_MS, "ms",
           higher_is_better=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
