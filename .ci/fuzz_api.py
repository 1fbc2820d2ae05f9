"""Fuzz the running service against its own OpenAPI document with schemathesis.

CI runs this after the test suite: a fresh workspace with the example skills, a
small search corpus and a notebook, an admin key, a local fake LLM (so chat,
Sage and benchmarks answer instead of the 503 a missing LLM gives), then
`amelio serve` in its own process and `schemathesis run` against it over
loopback, for a bounded time. Passing means: no 5xx from any generated input,
every status and body as the OpenAPI document says.

    python .ci/fuzz_api.py [--max-time 180] [--postgres URL]

With ``--postgres`` (a server URL such as CI's AMELIO_TEST_POSTGRES_URL) the
service runs on a fresh PostgreSQL database, created here and dropped after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from amelio.testing import FakeLLMServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))  # the repository's test kit, which is not in the wheel
from support.processes import ServeProcess, postgres_database  # noqa: E402

BIN = Path(sys.executable).parent
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    )
)


def amelio(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(BIN / "amelio"), *args],
        env=env,
        input=stdin,
        text=True,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"amelio {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def prepare(workspace: Path, env: dict[str, str]) -> str:
    """A workspace with something behind every route, and an admin key."""
    amelio(env, "init", str(workspace))
    amelio(env, "skills", "import", str(ROOT / "examples" / "skills"))
    corpus = workspace / "corpus.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(
                {
                    "_id": f"d{i}",
                    "title": f"Article {i}",
                    "text": f"How to reset a password, step {i}.",
                }
            )
            for i in range(50)
        )
        + "\n",
        encoding="utf-8",
    )
    amelio(env, "corpus", "import", str(corpus))
    amelio(env, "knowledge", "create", "support")
    return json.loads(amelio(env, "keys", "create", "--role", "admin", "--name", "fuzz", "--json"))[
        "key"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-time", type=int, default=180, help="Seconds schemathesis may spend (default 180)."
    )
    parser.add_argument(
        "--postgres",
        default="",
        metavar="URL",
        help="Run on a fresh database of this PostgreSQL server.",
    )
    args = parser.parse_args()
    database = (
        postgres_database(args.postgres, prefix="amelio_fuzz") if args.postgres else nullcontext("")
    )
    with (
        tempfile.TemporaryDirectory(prefix="amelio-fuzz-") as tmp,
        database as database_url,
        FakeLLMServer(default="Use `git pull --rebase`, then push again.") as llm,
    ):
        workspace = Path(tmp) / "ws"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMELIO_")}
        env |= {
            "AMELIO_WORKSPACE": str(workspace),
            "AMELIO_LLM_PROVIDER": "openai",
            "AMELIO_LLM_BASE_URL": f"{llm.url}/v1",
            "AMELIO_LLM_API_KEY": "fake",
            "AMELIO_LLM_MODEL": "fake-model",
            "AMELIO_LLM_TIMEOUT": "5",
            # the fuzzer sends thousands of events from one key: rate limits are
            # tested elsewhere, here they would only hide the handlers
            "AMELIO_FEEDBACK_RATE_KEY": "0",
            "AMELIO_FEEDBACK_RATE_SESSION": "0",
        }
        if database_url:
            env["AMELIO_DATABASE_URL"] = database_url
        key = prepare(workspace, env)
        log = Path(tmp) / "serve.log"
        with ServeProcess(workspace, env=env, log=log) as server:
            run = subprocess.run(
                [
                    str(BIN / "schemathesis"),
                    "run",
                    f"{server.base}/openapi.json",
                    "--header",
                    f"Authorization: Bearer {key}",
                    "--checks",
                    CHECKS,
                    "--max-time",
                    str(args.max_time),
                    "--workers",
                    "1",  # ast.parse in hypothesis is not thread-safe on 3.11
                    "--request-timeout",
                    "30",
                    "--suppress-health-check",
                    "all",
                    "--seed",
                    "15",
                ],
                check=False,
                cwd=tmp,
            )  # its example database stays out of the checkout
        errors = [
            line
            for line in log.read_text().splitlines()
            if "Traceback" in line or "unhandled error" in line
        ]
        if errors:
            print(f"The server logged {len(errors)} unhandled error(s):", file=sys.stderr)
            print(log.read_text()[-20_000:], file=sys.stderr)
            return 1
        return run.returncode


if __name__ == "__main__":
    sys.exit(main())
