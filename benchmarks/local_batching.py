"""Would answering several requests at once make a CPU study faster? Measured.

``amelio study`` on the development suite needs about 540 distinct answers of ~200
tokens; at the ~25–33 tokens a second that one 0.5B model writes on 2 cores that is
most of an hour. GPU servers answer many requests in one batch because decoding one
sequence leaves the GPU waiting on memory; whether a CPU has the same slack decides
whether a batching local provider (and a study that asks in parallel) is worth
building. This script answers that: the same 8 chat prompts, greedy, up to
``--max-tokens`` tokens each,

* one after the other through Amelio's ``local`` provider itself, and
* all at once, one llama.cpp sequence each, decoded step by step in one batch
  (``llama_decode`` with ``n_seq_max`` sequences): continuous batching at its best,
  every sequence in every step. Its prompts are the provider's, token for token:
  the chat template in the model's own GGUF metadata, applied as llama-cpp-python's
  ``create_chat_completion`` applies it.

It prints tokens written per second for both, and the ratio. Nothing is cached
between the two: each prompt is read once by each way. Needs the model
(``python benchmarks/local_model.py fetch qwen``) and llama-cpp-python; without
them it says so and exits 0.

    python benchmarks/local_batching.py [--sequences 8] [--max-tokens 128] [--model PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchlib import Clock
from local_model import runnable
from local_model import target as model_target

from amelio.llm.base import LLMRequest
from amelio.llm.local import LocalProvider
from amelio.workspace.config import Settings

QUESTIONS = (
    "How do I undo my last git commit but keep the changes?",
    "Write a Python function that counts the words in a file.",
    "Explain what an SQL index is and when to add one.",
    "Give a bash one-liner to find the 10 largest files under /var.",
    "Write release notes for version 2.4.0 with three new features.",
    "Turn 'Invoice 42 due March 3 2025 for ACME' into JSON.",
    "How do I rename a git branch locally and on the remote?",
    "Refactor a Python loop that sums squares into a comprehension.",
)


SYSTEM = "You are a helpful assistant."


def one_by_one(provider: LocalProvider, questions: list[str], max_tokens: int) -> tuple[int, float]:
    with Clock() as clock:
        written = 0
        for question in questions:
            request = LLMRequest.single(SYSTEM, question, max_tokens=max_tokens, temperature=0.0)
            written += provider.complete(request).output_tokens or 0
    return written, clock.wall


def chat_tokens(llm: Any, question: str) -> list[int]:
    """The tokens ``create_chat_completion`` sends for ``question`` (what the provider
    calls): the model's own chat template, with its own end and start tokens."""
    from llama_cpp import llama_chat_format  # type: ignore[import-not-found,unused-ignore]

    template = llm.metadata.get("tokenizer.chat_template")
    if llm.chat_format != "chat_template.default" or template is None:
        raise SystemExit(
            f"The model's chat format is {llm.chat_format!r}: this benchmark reads the "
            "chat template in the model's GGUF metadata, and this model has none."
        )

    def text(token: int) -> str:
        return str(llm._model.token_get_text(token)) if token != -1 else ""

    formatted = llama_chat_format.Jinja2ChatFormatter(
        template=template, eos_token=text(llm.token_eos()), bos_token=text(llm.token_bos())
    )(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
    return list(
        llm.tokenize(
            formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True
        )
    )


def batched(llm: Any, questions: list[str], max_tokens: int, threads: int) -> tuple[int, float]:
    import llama_cpp  # type: ignore[import-not-found,unused-ignore]
    import numpy as np

    n = len(questions)
    model = llm._model.model  # the provider's weights: no second copy
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 1024 * n, 512, 512
    params.n_seq_max, params.n_threads, params.n_threads_batch = n, threads, threads
    ctx = llama_cpp.llama_init_from_model(model, params)
    batch = llama_cpp.llama_batch_init(512, 0, n)
    tokens = [chat_tokens(llm, q) for q in questions]

    def add(token: int, pos: int, seq: int, logits: bool) -> None:
        i = batch.n_tokens
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
        batch.seq_id[i][0] = seq
        batch.n_tokens += 1

    def best(i: int) -> int:
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,))
        return int(row.argmax())

    try:
        with Clock() as clock:
            out: list[list[int]] = []
            for seq, prompt in enumerate(tokens):  # each prompt read in one batch
                batch.n_tokens = 0
                for pos, token in enumerate(prompt):
                    add(token, pos, seq, pos == len(prompt) - 1)
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed on a prompt")
                out.append([best(-1)])
            active = [s for s in range(n) if not llama_cpp.llama_vocab_is_eog(vocab, out[s][0])]
            while active:  # every unfinished sequence advances one token per decode
                batch.n_tokens = 0
                for seq in active:
                    add(out[seq][-1], len(tokens[seq]) + len(out[seq]) - 1, seq, True)
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed on a step")
                still = []
                for i, seq in enumerate(active):
                    token = best(i)
                    if llama_cpp.llama_vocab_is_eog(vocab, token):
                        continue
                    out[seq].append(token)
                    if len(out[seq]) < max_tokens:
                        still.append(seq)
                active = still
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return sum(len(o) for o in out), clock.wall


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sequences", type=int, default=8, choices=range(1, len(QUESTIONS) + 1))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: qwen)")
    args = parser.parse_args()
    model = args.model or model_target("qwen")
    if not runnable({"qwen": model}):
        return 0
    provider = LocalProvider(
        Settings(
            llm_provider="local",
            llm_model_path=str(model),
            llm_threads=args.threads,
            llm_context_tokens=2048,
        )
    )
    questions = list(QUESTIONS[: args.sequences])
    llm = provider._llama  # the weights the provider loaded: no second copy
    rows = [
        ("one after the other", *one_by_one(provider, questions, args.max_tokens)),
        (f"{len(questions)} in one batch", *batched(llm, questions, args.max_tokens, args.threads)),
    ]
    base = rows[0][1] / rows[0][2]
    print(
        f"{len(questions)} prompts, greedy, up to {args.max_tokens} tokens, {args.threads} threads"
    )
    print("| way | tokens written | seconds | tokens/s | × one after the other |")
    print("|---|---|---|---|---|")
    for name, written, seconds in rows:
        rate = written / seconds
        print(f"| {name} | {written} | {seconds:.1f} | {rate:.1f} | {rate / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
