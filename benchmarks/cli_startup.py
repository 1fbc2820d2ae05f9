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
The last rows route a message on a real workspace: the 150 CLINC150 skills from
``../shared/data/routing-clinc150``, imported once, with 10 routing examples a skill
(1,500, from its queries file). ``amelio route`` saves a routing snapshot
(``.amelio/cache/``, :mod:`amelio.routing.snapshot`) and later runs route from it while
nothing changed; those rows are under the target. The snapshot is made by one run
before the measured ones, and it is a cache of the router's *inputs*: each run still
reads the database's routing generation, loads the model, rebuilds the index and
embeds the message. The row "no snapshot" deletes the file before every run, as
after a change to a skill or an example: the full path (settings, SQLAlchemy, the
skills store), reported beside the target, not under it.
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
from collections.abc import Callable
from pathlib import Path

from benchlib import median_of, target

from support.processes import IMPORT_PROBE, import_time

#: The issue's target for `amelio --help`, `amelio eval` and `amelio route`.
TARGET_MS = 150.0
SKILLS = Path(__file__).resolve().parents[2] / "shared" / "data" / "routing-clinc150" / "skills"
ANSWER = "## Verdict\n\nApprove: the retry loop is right.\n"
RULES = [
    {"id": "verdict", "type": "string_contains", "value": "Verdict"},
    {"id": "short", "type": "max_length", "value": 2000},
]
#: ``python -m amelio ARGS``, counting what ``importlib.import_module`` loads.
RUN_AMELIO = IMPORT_PROBE


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def measure(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    runs: int,
    before: Callable[[], None] = lambda: None,
) -> tuple[float, float, int]:
    """Median import ms, median wall ms, and how many modules one run imports;
    ``before`` runs ahead of every process."""
    imports, walls, count = [], [], 0
    logged = ["-c", RUN_AMELIO, *argv[2:]] if argv[:2] == ["-m", "amelio"] else argv
    before()
    _run([sys.executable, *logged], cwd, env)  # untimed: writes the bytecode cache
    for _ in range(runs):
        before()
        done = _run([sys.executable, "-X", "importtime", *logged], cwd, env)
        if done.returncode:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
        ms, modules = import_time(done.stderr)
        imports.append(ms)
        count = len(modules)
        before()
        started = time.perf_counter()
        _run([sys.executable, *argv], cwd, env)
        walls.append((time.perf_counter() - started) * 1000)
    return median_of(imports), median_of(walls), count


def _examples(workspace: Path, per_skill: int = 10) -> int:
    """The first ``per_skill`` queries of each skill, added as routing examples."""
    from amelio.routing import examples as routing_examples
    from amelio.workspace.folder import open_workspace

    chosen: dict[str, list[str]] = {}
    with (SKILLS.parent / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            query = json.loads(line)
            if query["skill"] and len(chosen.setdefault(query["skill"], [])) < per_skill:
                chosen[query["skill"]].append(query["text"])
    ws = open_workspace(workspace)
    try:
        for skill, texts in chosen.items():
            for text in texts:
                routing_examples.add_example(ws, skill, text)
    finally:
        ws.dispose()
    return sum(len(t) for t in chosen.values())


def route_cases(
    folder: Path, env: dict[str, str]
) -> list[tuple[str, list[str], dict[str, str], Callable[[], None], bool]]:
    """`amelio route MESSAGE` on a workspace holding the CLINC150 skills and examples:
    (label, argv, environment, what runs before each process, under the target); none
    when the shared data is missing (said)."""
    if not SKILLS.is_dir():
        print(f"(no {SKILLS}: the `amelio route MESSAGE` rows are skipped)")
        return []
    workspace = folder / "ws"
    for argv in (["init", str(workspace)], ["-w", str(workspace), "skills", "import", str(SKILLS)]):
        done = _run([sys.executable, "-m", "amelio", *argv], folder, env)
        if done.returncode:
            raise SystemExit(f"amelio {' '.join(argv)} failed: {done.stderr}")
    print(f"routing workspace: 150 skills, {_examples(workspace)} routing examples")
    route = ["-m", "amelio", "-w", str(workspace), "route", "how do i freeze my bank account"]
    lexical = env | {"AMELIO_ROUTER_EMBEDDING_MODEL": ""}
    cache = workspace / ".amelio" / "cache"

    def no_snapshot() -> None:
        for path in cache.glob("route-*.snapshot"):
            path.unlink()

    def snapshot_of(case_env: dict[str, str]) -> Callable[[], None]:
        def make() -> None:  # one run saves it; the measured runs use it
            if not any(cache.glob("route-*.snapshot")):
                _run([sys.executable, *route], folder, case_env)

        return make

    return [
        ("amelio route, snapshot current", route, env, snapshot_of(env), True),
        ("  the same, lexical", route, lexical, snapshot_of(lexical), True),
        ("amelio route, no snapshot", route, env, no_snapshot, False),
        ("  the same, lexical", route, lexical, no_snapshot, False),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # Bytecode as an installed package has it (pip compiles at install), kept in a
    # prefix of this run's own: an editable install under PYTHONDONTWRITEBYTECODE
    # would otherwise compile every module at every start.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AMELIO_WORKSPACE", "PYTHONDONTWRITEBYTECODE")
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        (folder / "rules.json").write_text(json.dumps(RULES), encoding="utf-8")
        (folder / "answer.md").write_text(ANSWER, encoding="utf-8")
        (folder / "batch.jsonl").write_text(
            "".join(
                json.dumps({"id": f"o{i}", "text": ANSWER, "rules": RULES}) + "\n"
                for i in range(20)
            ),
            encoding="utf-8",
        )
        cases = [
            ("python -c pass (floor)", ["-c", "pass"]),
            ('python -c "import click" (floor)', ["-c", "import click"]),
            ("amelio --help", ["-m", "amelio", "--help"]),
            ("amelio route --help", ["-m", "amelio", "route", "--help"]),
            ("amelio eval --rules", ["-m", "amelio", "eval", "--rules", "rules.json", "answer.md"]),
            ("amelio eval --batch", ["-m", "amelio", "eval", "--batch", "batch.jsonl"]),
        ]
        print(f"median of {args.runs} runs each, from an empty folder (no workspace)")
        print("bytecode cached (PYTHONPYCACHEPREFIX in this run's folder), as installed")
        print(f"{'command':<34} {'import ms':>10} {'wall ms':>9} {'modules':>8}")
        slowest = 0.0
        for label, argv in cases:
            imported, wall, count = measure(argv, folder, env, args.runs)
            if label.startswith("amelio"):
                slowest = max(slowest, imported)
            print(f"{label:<34} {imported:>10.1f} {wall:>9.1f} {count:>8}")
        for label, argv, case_env, before, under in route_cases(folder, env):
            before()
            imported, wall, count = measure(argv, folder, case_env, args.runs, before)
            if under:
                slowest = max(slowest, imported)
            note = "" if under else "  (not under the target)"
            print(f"{label:<34} {imported:>10.1f} {wall:>9.1f} {count:>8}{note}")
    target(
        "import time of the slowest of these commands (median)",
        slowest,
        TARGET_MS,
        "ms",
        higher_is_better=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
