"""Amelio against promptfoo on the same job: 1,000 fixed LLM outputs × 10 deterministic
assertions, each tool run end to end the way a CI job runs it (a fresh process per
run), side by side. Targets: ``amelio eval --batch`` at least 30× faster than
promptfoo, and its peak memory no higher than promptfoo's.

What runs, per repeat (default 3), in this order:

* **promptfoo** (npm ``promptfoo``, pinned below, installed on first use into
  ``~/.cache/amelio-bench/promptfoo``, or ``--promptfoo PATH``):
  ``promptfoo eval -c promptfooconfig.yaml --no-cache --no-write --no-table
  --no-progress-bar --no-share -o results.json``. The config has one prompt,
  ``{{output}}``, the ``echo`` provider (its output is the rendered prompt, so each
  test's output is exactly its fixed text and no model is called: promptfoo's own
  ``--model-outputs`` mode builds the same config) and the 10 assertions in
  ``defaultTest``; 1,000 tests, one per output. Concurrency is promptfoo's default
  (``-j 4``, what a CI job runs unless told otherwise; ``--promptfoo-jobs N``
  changes it): with ``echo`` there is no I/O to overlap, and -j 1, 4 and 16 each
  took 5-6.5 CPU s on the 2-core machine this was written on, within the noise of
  one another.
  Environment: ``PROMPTFOO_DISABLE_TELEMETRY=1``, ``PROMPTFOO_DISABLE_UPDATE=1``,
  ``PROMPTFOO_DISABLE_SHARING=1``, ``PROMPTFOO_CACHE_ENABLED=false`` (besides
  ``--no-cache``) and ``PROMPTFOO_CONFIG_DIR`` set to a temporary folder, so no
  network call is made and ``~/.promptfoo`` is not touched. promptfoo exits 100
  when a test fails; that is expected here and checked.
* **amelio, JSON lines**: ``amelio eval --batch outputs.jsonl --format json``, one
  line per output ``{"id", "text", "rules"}`` carrying its 10 rules inline (every line
  parses its own rules: the dearer of Amelio's two ways; this row is the one
  measured against the target).
* **amelio, JSON lines + --rules**: the same outputs as ``{"id", "text"}`` lines and
  the rules once in a file, ``--rules rules.json``.
* **amelio, JSONL + a skill's**: ``amelio --workspace ws eval --batch skill.jsonl``, each
  line ``{"id", "text", "skill"}`` naming a skill whose eval rules are the same 10, in
  a workspace on SQLite: the form a team whose rules live in Amelio uses. It opens
  the workspace, so it pays for the database layer's imports (SQLAlchemy, alembic)
  and a query; no target, shown so that cost is known.
* **amelio, promptfoo's JSON**: ``amelio eval --batch results.json --rules rules.json
  --format json`` on the output file promptfoo wrote (the migration path: same
  outputs, read from promptfoo's results).

The Amelio rules are promptfoo's assertions translated by Amelio's own importer
(``amelio.evals.promptfoo.import_promptfoo``), only types both tools have: is-json,
starts-with, contains, contains-all, contains-any, regex, icontains, not-contains,
not-icontains, not-regex. The outputs are code-review verdicts in JSON (0.25-1 KB,
ASCII), generated from a fixed seed; 10% carry one realistic defect (prose before the
JSON, truncation, a TODO, no score, an unknown verdict, an "as an AI language model"
disclaimer, a leaked key, a bare refusal), so some rules fail. Every run is checked,
not only timed: promptfoo must report 1,000 results with 10 assertion results each
(10,000) and echo each text back unchanged, Amelio must report 10,000 checks and exit
1 (outputs failed), every defective output must fail, and for every output all
tools must fail exactly the same set of assertions; any disagreement fails the
benchmark (exit 1), as does a missed target.

Amelio runs as pip installs it, with its modules' compiled bytecode: its environment
drops ``PYTHONDONTWRITEBYTECODE`` (set on some CI machines and sandboxes), so the
warm-up run writes the ``.pyc`` files that ``pip install`` writes at install time;
otherwise every run would compile Amelio's sources anew (~30 ms). promptfoo's
environment is left as it is.

Wall time is from process start to exit (Python's ``perf_counter`` around the
child, reaped with ``os.wait4``; the GNU time launcher below adds about a
millisecond to each tool alike), the median of the repeats, with min-max beside it;
CPU is the child's user + system time from the same ``wait4``. Both tools get one
untimed warm-up run first (it fills the OS file cache for promptfoo's ~700 npm
packages and Amelio's modules, and creates promptfoo's database in its config
folder): a fresh CI runner would be colder, which costs promptfoo more.
Peak memory is the larger of two figures: the sum of the resident set sizes of the
whole process tree (the tool's process and all its descendants, found from
``/proc``), sampled every 10 ms, and the kernel's high-water mark (``ru_maxrss``) of
the tool's largest process, which catches a peak between samples. ``ru_maxrss`` is
read through GNU ``/usr/bin/time -f %M``, the launcher of each run: a process
forked from this benchmark would inherit this benchmark's own high-water mark across
exec and report at least its size. Without GNU time only the sampled figure is used
(said in the output). Node runs its worker threads inside one process, so their
memory is counted.

Run: ``python benchmarks/evals_vs_promptfoo.py [--repeats N] [--promptfoo PATH]``.
Without node/npm, or when promptfoo cannot be installed or run, it prints why the
benchmark was skipped and exits 0: no figure is made up.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import random
import shutil
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import load_line, median_of, target

from amelio.evals.promptfoo import import_promptfoo
from amelio.skills import import_skills
from amelio.workspace.folder import init_workspace

#: The newest promptfoo that supports Node 20 (0.122 and later need Node ≥ 22.22).
PROMPTFOO_VERSION = "0.121.20"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amelio-bench"
TARGET_SPEEDUP = 30.0
OUTPUTS = 1_000
FAILING_SHARE = 0.10
SEED = 20_240_611
SAMPLE_S = 0.010
PAGE = os.sysconf("SC_PAGE_SIZE")

#: The 10 assertions, in promptfoo's format: each output must be a JSON review verdict.
ASSERTIONS: list[dict[str, Any]] = [
    {"type": "is-json"},
    {"type": "starts-with", "value": "{"},
    {"type": "contains", "value": '"verdict"'},
    {"type": "contains-all", "value": ['"verdict"', '"summary"', '"score"']},
    {"type": "contains-any", "value": ["approve", "reject", "request changes"]},
    {"type": "regex", "value": r'"score":\s*(10|[1-9])\b'},
    {"type": "icontains", "value": '"risk"'},
    {"type": "not-contains", "value": "TODO"},
    {"type": "not-icontains", "value": "as an ai language model"},
    {"type": "not-regex", "value": r"sk-[A-Za-z0-9]{20,}"},
]

# -------------------------------------------------------------------- the outputs

_SENTENCES = (
    "The change moves the retry loop out of the request handler into the client.",
    "Error paths now close the connection before returning, which fixes the leak.",
    "The new cache key includes the tenant id, so entries no longer collide.",
    "Tests cover the timeout branch and the empty-response branch.",
    "The migration adds a nullable column and backfills it in batches of 500.",
    "Logging at debug level in the hot loop may be noisy under load.",
    "The public function keeps its signature, so callers are unaffected.",
    "Two helper functions duplicate the parsing logic and could share it.",
    "The benchmark numbers in the description match a local run.",
    "Input validation refuses negative page sizes with a clear message.",
    "The lock is held across a network call, which can stall other writers.",
    "Docs for the new flag are in the command help and the changelog.",
    "Renaming the config key needs a deprecation period for old files.",
    "The fix is small and well contained; the diff touches three files.",
)
_FILES = (
    "src/client.py",
    "src/cache.py",
    "src/handlers/orders.py",
    "src/db/migrate.py",
    "tests/test_client.py",
    "tests/test_cache.py",
    "docs/config.md",
    "cli/main.py",
)
_DEFECTS = (
    "prose_prefix",
    "truncated",
    "todo",
    "no_score",
    "bad_verdict",
    "disclaimer",
    "secret",
    "refusal",
)


def make_outputs(count: int, seed: int = SEED) -> list[str]:
    """``count`` review verdicts as JSON text; ``FAILING_SHARE`` of them, spread over
    the list, carry one defect each, every defect kind in turn."""
    rng = random.Random(seed)
    defective = sorted(rng.sample(range(count), round(count * FAILING_SHARE)))
    defect_of = {index: _DEFECTS[n % len(_DEFECTS)] for n, index in enumerate(defective)}
    return [_output(rng, defect_of.get(i)) for i in range(count)]


def _output(rng: random.Random, defect: str | None) -> str:
    if defect == "refusal":
        return "I cannot help with that."
    summary = " ".join(rng.sample(_SENTENCES, rng.randint(4, 12)))
    if defect == "todo":
        summary += " TODO: finish the review of the migration."
    elif defect == "disclaimer":
        summary = "As an AI language model, I cannot run the tests, but " + summary
    verdict: dict[str, Any] = {
        "verdict": "undecided"
        if defect == "bad_verdict"
        else rng.choice(["approve", "reject", "request changes"]),
        "summary": summary,
        "score": rng.randint(1, 10),
        "risk": rng.choice(["low", "medium", "high"]),
        "files": rng.sample(_FILES, rng.randint(1, 4)),
    }
    if defect == "no_score":
        del verdict["score"]
    if defect == "secret":
        key = "".join(rng.choices(string.ascii_letters + string.digits, k=32))
        verdict["notes"] = [f"The test fixture hard-codes an API key: sk-{key}"]
    text = json.dumps(verdict, indent=rng.choice([None, 2]))
    if defect == "prose_prefix":
        return "Here is my review of the pull request:\n" + text
    if defect == "truncated":
        return text[: len(text) * 2 // 3]
    return text


# ------------------------------------------------------------------ measuring a run


def _gnu_time() -> str | None:
    """GNU time (``/usr/bin/time``), the launcher :func:`measure` reads ``ru_maxrss`` from."""
    try:
        done = subprocess.run(
            ["/usr/bin/time", "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return "/usr/bin/time" if "GNU" in done.stdout + done.stderr else None


GNU_TIME = _gnu_time()


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    peak_bytes: int
    returncode: int


def _tree_rss(root: int, *, below: bool) -> int:
    """Resident bytes of every descendant of ``root`` now, and of ``root`` itself
    unless ``below`` (0 when they have gone)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    total = 0
    todo = list(children.get(root, ())) if below else [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
        todo.extend(children.get(pid, ()))
    return total


def measure(
    command: Sequence[str], *, cwd: Path, env: dict[str, str], stdout: Path, stderr: Path
) -> Run:
    """Run ``command`` once; wall-clock, CPU and peak memory of its process tree.

    The command is started through GNU time when there is one: a process's
    ``ru_maxrss`` starts from the high-water mark of the process it was forked from
    (the kernel carries it over exec), so a child of this benchmark would report at
    least this benchmark's own size; a child of the small ``time`` reports its own."""
    peak = [0]
    done = threading.Event()
    launcher = [GNU_TIME, "-f", "%M", "-o", str(stderr.with_suffix(".maxrss"))] if GNU_TIME else []

    def sample(pid: int) -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(pid, below=bool(launcher)))
            done.wait(SAMPLE_S)

    with stdout.open("wb") as out, stderr.open("wb") as err:
        started = time.perf_counter()
        child = subprocess.Popen(
            [*launcher, *command],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        sampler = threading.Thread(target=sample, args=(child.pid,), daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
    done.set()
    sampler.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    high_water = 0
    if launcher:
        kib = stderr.with_suffix(".maxrss").read_text(encoding="utf-8").split()
        high_water = int(kib[-1]) * 1024 if kib and kib[-1].isdigit() else 0
    return Run(wall, usage.ru_utime + usage.ru_stime, max(peak[0], high_water), child.returncode)


# -------------------------------------------------------------------- promptfoo


def _installed_version(prefix: Path) -> str | None:
    manifest = prefix / "node_modules" / "promptfoo" / "package.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, json.JSONDecodeError):
        return None
    return version if isinstance(version, str) else None


def find_promptfoo(explicit: str | None, version: str) -> tuple[Path | None, str]:
    """promptfoo's binary, installing the pinned version if needed; or None and why."""
    if explicit:
        path = Path(explicit).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            return None, f"--promptfoo {explicit}: not an executable file"
        return path, f"given with --promptfoo: {path}"
    if shutil.which("node") is None:
        return None, "node is not installed (promptfoo is an npm package)"
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm is not installed, so promptfoo cannot be installed"
    prefix = CACHE_DIR / "promptfoo"
    binary = prefix / "node_modules" / ".bin" / "promptfoo"
    if _installed_version(prefix) == version and binary.exists():
        return binary, f"cached in {prefix}"
    prefix.mkdir(parents=True, exist_ok=True)
    print(f"installing promptfoo@{version} into {prefix} (once; about a minute) ...", flush=True)
    try:
        done = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(prefix),
                f"promptfoo@{version}",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"npm install promptfoo@{version} failed: {exc}"
    if done.returncode != 0 or not binary.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return None, (
            f"npm install promptfoo@{version} failed (exit {done.returncode}): " + " / ".join(tail)
        )
    return binary, f"installed into {prefix}"


def _promptfoo_env(config_dir: Path) -> dict[str, str]:
    return os.environ | {
        "PROMPTFOO_DISABLE_TELEMETRY": "1",
        "PROMPTFOO_DISABLE_UPDATE": "1",
        "PROMPTFOO_DISABLE_SHARING": "1",
        "PROMPTFOO_CACHE_ENABLED": "false",
        "PROMPTFOO_CONFIG_DIR": str(config_dir),
    }


def _version_of(command: Sequence[str], env: dict[str, str]) -> str | None:
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, env=env, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1].strip() if done.returncode == 0 and lines else None


# ------------------------------------------------------------- reading the verdicts

#: Per output (by index): the indices of the assertions it failed.
Verdicts = dict[int, frozenset[int]]


class Disagreement(Exception):
    """A tool failed, or its results are incomplete or differ from the other tool's."""


def promptfoo_verdicts(path: Path, texts: Sequence[str]) -> tuple[Verdicts, int]:
    """The failed assertions per output in promptfoo's results file, and how many
    assertion results it holds; checks that every output was echoed unchanged."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data["results"]["results"]
    stats = data["results"]["stats"]
    if len(rows) != len(texts) or stats.get("errors"):
        raise Disagreement(
            f"promptfoo: {len(rows)} results for {len(texts)} outputs, {stats.get('errors')} errors"
        )
    verdicts: Verdicts = {}
    checks = 0
    for row in rows:
        index = row["testIdx"]
        if row["response"]["output"] != texts[index]:
            raise Disagreement(f"promptfoo: test {index} output differs from its fixed text")
        parts = row["gradingResult"]["componentResults"]
        kinds = [part["assertion"]["type"] for part in parts]
        if kinds != [a["type"] for a in ASSERTIONS]:
            raise Disagreement(f"promptfoo: test {index} ran assertions {kinds}")
        failed = frozenset(k for k, part in enumerate(parts) if not part["pass"])
        if bool(row["success"]) == bool(failed):
            raise Disagreement(
                f"promptfoo: test {index} success={row['success']} "
                f"with failed assertions {sorted(failed)}"
            )
        verdicts[index] = failed
        checks += len(parts)
    return verdicts, checks


def amelio_verdicts(
    path: Path, index_of: dict[str, int], rule_index: dict[str, int]
) -> tuple[Verdicts, int]:
    """The failed rules per output in ``amelio eval --batch --format json`` output."""
    data = json.loads(path.read_text(encoding="utf-8"))
    verdicts: Verdicts = {}
    for result in data["results"]:
        failed = frozenset(rule_index[f["ruleId"]] for f in result["failures"])
        if result["success"] == bool(failed) or result["passed"] + result["failed"] != len(
            ASSERTIONS
        ):
            raise Disagreement(f"amelio: output {result['id']} reports {result}")
        verdicts[index_of[result["id"]]] = failed
    if len(verdicts) != len(index_of) or data["outputs"] != len(index_of):
        raise Disagreement(f"amelio: {len(verdicts)} results for {len(index_of)} outputs")
    return verdicts, int(data["checks"])


def compare(name: str, theirs: Verdicts, ours: Verdicts) -> None:
    """Raise :class:`Disagreement` naming the first outputs the two tools judge apart."""
    apart = [i for i in sorted(theirs) if theirs[i] != ours.get(i)]
    if apart:
        shown = ", ".join(
            f"output {i}: promptfoo failed {sorted(theirs[i])}, "
            f"{name} failed {sorted(ours.get(i, ()))}"
            for i in apart[:5]
        )
        raise Disagreement(f"{len(apart)} outputs judged differently; {shown}")


# ------------------------------------------------------------------------- main


@dataclass(frozen=True)
class Row:
    tool: str
    command: list[str]
    stdout: str
    runs: list[Run]


def _fmt_row(row: Row, outputs: int, baseline: float | None) -> str:
    walls = [r.wall for r in row.runs]
    wall = median_of(walls)
    speedup = f"{baseline / wall:,.1f}×" if baseline else "1×"
    return (
        f"{row.tool:<28} {outputs:>7,} {outputs * len(ASSERTIONS):>7,} {wall:>7.2f} "
        f"{min(walls):>6.2f}–{max(walls):<6.2f} {median_of([r.cpu for r in row.runs]):>6.2f} "
        f"{outputs * len(ASSERTIONS) / wall:>10,.0f} "
        f"{max(r.peak_bytes for r in row.runs) / 2**20:>8.1f} {speedup:>9}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--outputs", type=int, default=OUTPUTS)
    parser.add_argument(
        "--promptfoo",
        metavar="PATH",
        help="an existing promptfoo binary (default: install the pinned "
        f"promptfoo@{PROMPTFOO_VERSION} into {CACHE_DIR / 'promptfoo'})",
    )
    parser.add_argument("--promptfoo-version", default=PROMPTFOO_VERSION)
    parser.add_argument(
        "--promptfoo-jobs",
        type=int,
        default=None,
        help="promptfoo -j (default: promptfoo's own default, 4)",
    )
    args = parser.parse_args()
    load_before = os.getloadavg()[0]

    binary, how = find_promptfoo(args.promptfoo, args.promptfoo_version)
    if binary is None:
        print(f"SKIPPED: promptfoo is not available ({how}); nothing was measured.")
        return 0
    amelio = Path(sys.executable).parent / "amelio"
    texts = make_outputs(args.outputs)
    defective = round(len(texts) * FAILING_SHARE)
    imported = import_promptfoo(
        json.dumps({"defaultTest": {"assert": ASSERTIONS}}), source="promptfoo assertions"
    )
    if imported.unmapped or len(imported.rules) != len(ASSERTIONS):
        print(f"error: the assertions did not all map to Amelio rules: {imported.unmapped}")
        return 1
    rules = [rule.to_dict() for rule in imported.rules]
    rule_index = {rule.id: k for k, rule in enumerate(imported.rules)}

    with tempfile.TemporaryDirectory(prefix="amelio-vs-promptfoo-") as tmp:
        work = Path(tmp)
        env = _promptfoo_env(work / "promptfoo-home")
        node_version = _version_of(["node", "--version"], env) or "unknown"
        promptfoo_version = _version_of([str(binary), "--version"], env)
        if promptfoo_version is None:
            print(
                f"SKIPPED: {binary} --version fails here (node {node_version}); "
                "nothing was measured."
            )
            return 0
        config = {
            "description": "amelio benchmark: fixed outputs, deterministic assertions",
            "prompts": ["{{output}}"],
            "providers": ["echo"],
            "defaultTest": {"assert": ASSERTIONS},
            "tests": [
                {"description": f"out-{i:04d}", "vars": {"output": text}}
                for i, text in enumerate(texts)
            ],
        }
        # JSON is YAML: promptfoo reads it as it reads any promptfooconfig.yaml.
        (work / "promptfooconfig.yaml").write_text(json.dumps(config, indent=1), encoding="utf-8")
        (work / "rules.json").write_text(json.dumps(rules), encoding="utf-8")
        ids = {f"out-{i:04d}": i for i in range(len(texts))}
        with (work / "inline.jsonl").open("w", encoding="utf-8") as f:
            for key, i in ids.items():
                f.write(json.dumps({"id": key, "text": texts[i], "rules": rules}) + "\n")
        with (work / "plain.jsonl").open("w", encoding="utf-8") as f:
            for key, i in ids.items():
                f.write(json.dumps({"id": key, "text": texts[i]}) + "\n")
        # The same rules as a skill's, in a workspace on SQLite (made before timing).
        skill_dir = work / "skills" / "review-verdict"
        skill_dir.mkdir(parents=True)
        (skill_dir / "SKILL.md").write_text(
            "---\nname: review-verdict\ndescription: Code "
            "review verdicts.\n---\n\nGive a verdict.\n",
            encoding="utf-8",
        )
        (skill_dir / "review-verdict.evals.json").write_text(
            json.dumps({"version": 1, "skill": "review-verdict", "rules": rules}), encoding="utf-8"
        )
        ws, _ = init_workspace(work / "ws")
        import_skills(ws.engine, work / "skills")
        ws.dispose()
        with (work / "skill.jsonl").open("w", encoding="utf-8") as f:
            for key, i in ids.items():
                f.write(json.dumps({"id": key, "text": texts[i], "skill": "review-verdict"}) + "\n")
        promptfoo_ids = {f"test-{i}-prompt-0": i for i in range(len(texts))}
        jobs = [] if args.promptfoo_jobs is None else ["-j", str(args.promptfoo_jobs)]
        rows = [
            Row(
                "promptfoo eval",
                [
                    str(binary),
                    "eval",
                    "-c",
                    "promptfooconfig.yaml",
                    "--no-cache",
                    "--no-write",
                    "--no-table",
                    "--no-progress-bar",
                    "--no-share",
                    "-o",
                    "results.json",
                    *jobs,
                ],
                "promptfoo.out",
                [],
            ),
            Row(
                "amelio, JSONL inline rules",
                [str(amelio), "eval", "--batch", "inline.jsonl", "--format", "json"],
                "inline.json",
                [],
            ),
            Row(
                "amelio, JSONL + --rules",
                [
                    str(amelio),
                    "eval",
                    "--batch",
                    "plain.jsonl",
                    "--rules",
                    "rules.json",
                    "--format",
                    "json",
                ],
                "plain.json",
                [],
            ),
            Row(
                "amelio, promptfoo's JSON",
                [
                    str(amelio),
                    "eval",
                    "--batch",
                    "results.json",
                    "--rules",
                    "rules.json",
                    "--format",
                    "json",
                ],
                "from-promptfoo.json",
                [],
            ),
            Row(
                "amelio, JSONL + a skill's",
                [
                    str(amelio),
                    "--workspace",
                    "ws",
                    "eval",
                    "--batch",
                    "skill.jsonl",
                    "--format",
                    "json",
                ],
                "skill.json",
                [],
            ),
        ]
        print(
            f"promptfoo {promptfoo_version} ({how}); node {node_version}; "
            f"amelio {importlib.metadata.version('amelio')} (Python "
            f"{sys.version.split()[0]}); {os.cpu_count()} CPUs"
        )
        print(
            f"{len(texts):,} outputs × {len(ASSERTIONS)} assertions; repeats: "
            f"{args.repeats} after one untimed warm-up; promptfoo concurrency: "
            f"{args.promptfoo_jobs or 'default (4)'}; peak memory: tree RSS every "
            f"{SAMPLE_S * 1000:.0f} ms"
            + (" and ru_maxrss via GNU time" if GNU_TIME else " only (no GNU time)")
        )
        amelio_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        failing = 0
        try:
            for repeat in range(args.repeats + 1):
                reference: Verdicts = {}
                for row in rows:
                    run = measure(
                        row.command,
                        cwd=work,
                        env=env if row is rows[0] else amelio_env,
                        stdout=work / row.stdout,
                        stderr=work / "stderr.txt",
                    )
                    err = (work / "stderr.txt").read_text(encoding="utf-8", errors="replace")
                    if run.returncode not in (0, 1, 100):
                        raise Disagreement(
                            f"{row.tool} exited {run.returncode}: {err.strip()[-2000:]}"
                        )
                    try:
                        if row is rows[0]:
                            reference, checks = promptfoo_verdicts(work / "results.json", texts)
                            failing = sum(1 for v in reference.values() if v)
                            expected_rc = 100 if failing else 0
                        else:
                            names = promptfoo_ids if "promptfoo" in row.tool else ids
                            verdicts, checks = amelio_verdicts(work / row.stdout, names, rule_index)
                            compare(row.tool, reference, verdicts)
                            expected_rc = 1 if failing else 0
                    except (OSError, KeyError, TypeError, ValueError) as exc:
                        raise Disagreement(
                            f"{row.tool} (exit {run.returncode}): its results "
                            f"could not be read ({exc!r}); stderr: "
                            f"{err.strip()[-2000:]}"
                        ) from exc
                    if failing != defective:
                        raise Disagreement(
                            f"promptfoo failed {failing} outputs; the fixture "
                            f"has {defective} with a defect"
                        )
                    if checks != len(texts) * len(ASSERTIONS) or run.returncode != expected_rc:
                        raise Disagreement(
                            f"{row.tool}: {checks:,} checks, exit "
                            f"{run.returncode} (expected {expected_rc})"
                        )
                    if repeat:  # the first round is the warm-up
                        row.runs.append(run)
        except Disagreement as exc:
            print(f"FAILED: {exc}")
            return 1

    print(
        f"verdicts agree on every output: {failing} of {len(texts):,} outputs fail at "
        f"least one assertion, in all {args.repeats} repeats and all three Amelio rows"
    )
    print(
        f"\n{'tool':<28} {'outputs':>7} {'checks':>7} {'wall s':>7} {'min–max':>13} "
        f"{'CPU s':>6} {'checks/s':>10} {'peak MiB':>8} {'speed-up':>9}"
    )
    baseline = median_of([r.wall for r in rows[0].runs])
    print(_fmt_row(rows[0], len(texts), None))
    for row in rows[1:]:
        print(_fmt_row(row, len(texts), baseline))
    print(
        "(wall s: median repeat, process start to exit; CPU s: the child's user + system, "
        "median; peak MiB: the highest repeat, whole process tree; speed-up: promptfoo's "
        "median wall / this row's)"
    )
    main_row = rows[1]
    ratio = baseline / median_of([r.wall for r in main_row.runs])
    promptfoo_peak = max(r.peak_bytes for r in rows[0].runs) / 2**20
    amelio_peak = max(r.peak_bytes for row in rows[1:] for r in row.runs) / 2**20
    print(load_line(load_before))
    met = [
        target("amelio eval --batch vs promptfoo speed-up", ratio, TARGET_SPEEDUP, "×"),
        target(
            "amelio eval --batch peak memory (highest Amelio row) vs promptfoo's",
            amelio_peak,
            promptfoo_peak,
            "MiB",
            higher_is_better=False,
        ),
    ]
    return 0 if all(t.met for t in met) else 1


if __name__ == "__main__":
    raise SystemExit(main())
