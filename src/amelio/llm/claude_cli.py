"""The Claude CLI (``claude -p PROMPT --output-format json``), as the seed's bots call it.

The CLI reports its own token usage and cost. It streams nothing useful in JSON
mode, so :meth:`stream` yields the whole answer as one delta.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from amelio.errors import LLMError, LLMNotConfigured, LLMUnavailable
from amelio.hookspecs import hookimpl
from amelio.llm.base import (
    Completion,
    LLMRequest,
    ProviderType,
    StreamEvent,
    Timer,
    whole_stream,
)

if TYPE_CHECKING:
    from amelio.workspace.config import Settings


class ClaudeCLIProvider:
    name = "claude-cli"

    def __init__(self, settings: Settings) -> None:
        path = shutil.which(settings.claude_cli_path)
        if path is None:
            raise LLMNotConfigured(
                f"The Claude CLI {settings.claude_cli_path!r} was not found: install Claude "
                "Code, or set AMELIO_CLAUDE_CLI_PATH to the `claude` executable."
            )
        self.path = path
        self.settings = settings
        self.model = settings.llm_model or "claude-cli-default"

    def _run_once(self, request: LLMRequest) -> dict[str, Any]:
        import subprocess  # here: the plugin manager imports this module to list providers

        argv = [self.path, "-p", "--output-format", "json"]
        if self.settings.llm_model:
            argv += ["--model", self.settings.llm_model]
        try:
            # The prompt goes on stdin: argv has a size limit and shows in `ps`.
            done = subprocess.run(  # noqa: S603 (argv is the configured CLI, no shell)
                argv,
                input=request.prompt_text,
                capture_output=True,
                text=True,
                timeout=self.settings.llm_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LLMUnavailable(
                f"The Claude CLI did not answer within "
                f"{self.settings.llm_timeout:g} s (AMELIO_LLM_TIMEOUT)."
            ) from exc
        if done.returncode != 0:
            raise LLMUnavailable(
                f"The Claude CLI exited with {done.returncode}: "
                f"{done.stderr.strip()[:500] or 'no error output'}"
            )
        try:
            data = json.loads(done.stdout)
        except json.JSONDecodeError as exc:
            raise LLMError(
                f"The Claude CLI printed something that is not JSON: {done.stdout[:200]!r}"
            ) from exc
        if not isinstance(data, dict) or data.get("is_error") or "result" not in data:
            raise LLMError(f"The Claude CLI reported an error: {str(data)[:500]}")
        return data

    def complete(self, request: LLMRequest) -> Completion:
        timer = Timer()
        attempts = self.settings.llm_max_retries + 1
        for attempt in range(attempts):
            try:
                data = self._run_once(request)
                break
            except LLMUnavailable:
                if attempt == attempts - 1:
                    raise
                time.sleep(min(0.5 * 2**attempt, 8.0))
        usage = data.get("usage") or {}
        cost = data.get("total_cost_usd")
        return Completion(
            str(data["result"]),
            self.model,
            self.name,
            usage.get("input_tokens"),
            usage.get("output_tokens"),
            timer.ms,
            float(cost) if isinstance(cost, int | float) else None,
            raw=data,
        )

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        yield from whole_stream(self.complete(request))


@hookimpl
def register_llm_providers(register: Callable[[ProviderType], None]) -> None:
    register(ProviderType("claude-cli", ClaudeCLIProvider, "the Claude CLI: claude -p"))
