"""A fake ``claude`` command line: ``claude -p PROMPT --output-format json``, logged."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path
from typing import Any

# -- fake `claude` command line ---------------------------------------------------

_CLAUDE_SCRIPT = '''\
#!{python}
"""Fake `claude` CLI written by amelio.testing.write_fake_claude_cli (a test double)."""
import json
import os
import sys
import time
import uuid

CONFIG = json.loads({config!r})
# Options of the real CLI that take a value; any other option is a flag.
VALUE_OPTIONS = {{
    "--output-format", "--input-format", "--model", "--fallback-model", "--system-prompt",
    "--append-system-prompt", "--max-turns", "--allowedTools", "--allowed-tools",
    "--disallowedTools", "--disallowed-tools", "--permission-mode", "--session-id",
    "--resume", "-r", "--mcp-config", "--settings", "--add-dir", "--agents",
    "--permission-prompt-tool", "--setting-sources",
}}


def main():
    started = time.monotonic()
    args = sys.argv[1:]
    positional, options, i = [], {{}}, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional.extend(args[i + 1:])
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in VALUE_OPTIONS and not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            options[name] = value if (eq or name in VALUE_OPTIONS) else True
        else:
            positional.append(arg)
        i += 1
    from_stdin = not positional
    prompt = " ".join(positional) if positional else (
        "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read())
    here = os.path.dirname(os.path.abspath(__file__))
    call = {{"argv": args, "prompt": prompt, "prompt_from_stdin": from_stdin,
            "options": options, "cwd": os.getcwd()}}
    with open(os.path.join(here, "calls.jsonl"), "a", encoding="utf-8") as log:
        log.write(json.dumps(call) + "\\n")
    time.sleep(CONFIG["delay"])
    if CONFIG["stderr"]:
        sys.stderr.write(CONFIG["stderr"])
        sys.stderr.flush()
    if CONFIG["exit_code"]:
        return CONFIG["exit_code"]
    reply = CONFIG["reply"]
    session_id = options.get("--session-id") or str(uuid.uuid4())
    usage = {{"input_tokens": len(prompt.split()), "output_tokens": len(reply.split()),
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
    elapsed = int((time.monotonic() - started) * 1000)
    result = {{"type": "result", "subtype": "success", "is_error": False,
              "duration_ms": elapsed, "duration_api_ms": elapsed, "num_turns": 1,
              "result": reply, "session_id": session_id,
              "total_cost_usd": round(1e-6 * (usage["input_tokens"] + usage["output_tokens"]), 6),
              "usage": usage}}
    print(json.dumps(result) if options.get("--output-format") == "json" else reply)
    return 0


sys.exit(main())
'''


def write_fake_claude_cli(
    directory: Path,
    *,
    reply: str = "OK",
    exit_code: int = 0,
    stderr: str = "",
    delay: float = 0.0,
) -> Path:
    """Write an executable ``claude`` into ``directory`` and return its path.

    It answers like ``claude -p PROMPT --output-format json`` (the bare reply for the
    default ``text`` format), reading the prompt from its arguments or else from
    stdin, and appends each call (``argv``, ``prompt``, ``options``, ``cwd``) to
    ``calls.jsonl`` beside it — see :func:`read_fake_claude_calls`. It writes
    ``stderr`` (if any) to stderr; with ``exit_code`` other than 0 it then exits with
    that code and prints nothing, as the real CLI does on failure. ``delay`` seconds
    pass before it answers, to test a caller's timeout. Put ``directory`` first on
    ``PATH``, or run the returned path, to use it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    if not python or re.search(r"\s", python) or len(python) > 120:
        python = "/usr/bin/env python3"  # a shebang cannot hold spaces or long paths
    config = json.dumps({"reply": reply, "exit_code": exit_code, "stderr": stderr, "delay": delay})
    script = directory / "claude"
    script.write_text(_CLAUDE_SCRIPT.format(python=python, config=config), encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def read_fake_claude_calls(path: Path) -> list[dict[str, Any]]:
    """The calls a fake ``claude`` recorded, oldest first (``path``: its script or folder)."""
    log = (path.parent if path.is_file() else path) / "calls.jsonl"
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
