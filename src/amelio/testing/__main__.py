"""``python -m amelio.testing fake-llm``: the fake LLM server as a command.

It lets a person try every path of Amelio that needs an LLM (chat, streaming,
reflect, Sage, the benchmark judge) with no model, no key and no bill: the
server speaks the OpenAI and Anthropic APIs as the tests' :class:`FakeLLMServer`
does, answers the scripted ``--reply`` texts in order and then echoes the last
user message (with ``--follow``: repeats its system prompt's "Always…"/"Never…"
lines, see :func:`~amelio.testing.llm_server.follow_instructions`), and runs
until Ctrl-C or SIGTERM. A kit for trying things, not a
command of ``amelio``: argparse, and nothing it prints is meant to be parsed
but the ``export`` lines.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from amelio.testing.llm_server import FakeLLMServer, FakeRequest, follow_instructions

DEFAULT_PORT = 8149
#: The key the Anthropic line sets when ``--api-key`` is not given: that SDK and
#: Amelio's provider refuse to start without one, and the server takes any.
ANY_KEY = "fake-key"


def echo(request: FakeRequest) -> str:
    """The default answer: the last user message, so that what the model was asked
    shows in the answer (``OK`` when there is none)."""
    return request.prompt or "OK"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m amelio.testing", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fake = commands.add_parser(
        "fake-llm",
        help="serve a fake LLM (OpenAI and Anthropic APIs) until stopped",
        description="Serve a fake LLM speaking the OpenAI Chat Completions and Anthropic "
        "Messages APIs until Ctrl-C or SIGTERM, and print the settings that point "
        "Amelio at it.",
    )
    fake.add_argument("--host", default="127.0.0.1", help="interface (default: %(default)s)")
    fake.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port, 0 for a free one (default: %(default)s)",
    )
    fake.add_argument(
        "--reply",
        action="append",
        default=[],
        metavar="TEXT",
        help="an answer, given once, in order (repeatable); then the last user message is echoed",
    )
    fake.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help="a model it lists (repeatable; default: fake-model); the first is the one to set",
    )
    fake.add_argument(
        "--follow",
        action="store_true",
        help="instruction-following mode: answer with the Always/Never lines of the "
        "system prompt instead of echoing the user",
    )
    fake.add_argument("--api-key", help="the only key accepted (default: any key)")
    fake.add_argument(
        "--token-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="pause before each streamed word, to watch a stream arrive (default: 0)",
    )
    return parser


def settings_lines(server: FakeLLMServer) -> list[str]:
    """The ``export`` lines that point Amelio's ``openai`` and ``anthropic`` providers
    at ``server``."""
    model = server.models[0] if server.models else "fake-model"
    openai = {
        "AMELIO_LLM_PROVIDER": "openai",
        "AMELIO_LLM_BASE_URL": server.openai_base_url,
        "AMELIO_LLM_MODEL": model,
    }
    if server.api_key:  # a local server needs no key unless this one demands it
        openai["AMELIO_LLM_API_KEY"] = server.api_key
    anthropic = {
        "AMELIO_LLM_PROVIDER": "anthropic",
        "AMELIO_LLM_BASE_URL": server.anthropic_base_url,
        "AMELIO_LLM_API_KEY": server.api_key or ANY_KEY,
    }

    def export(values: dict[str, str]) -> str:
        return "  export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())

    return [
        "OpenAI-compatible provider:",
        export(openai),
        "Anthropic provider:",
        export(anthropic),
    ]


def fake_llm(args: argparse.Namespace) -> int:
    """Serve until a signal asks to stop; 0 then, 1 when the port cannot be had."""
    server = FakeLLMServer(
        args.reply,
        default=follow_instructions if args.follow else echo,
        token_delay=args.token_delay,
        api_key=args.api_key,
        models=args.model or ("fake-model",),
        host=args.host,
        port=args.port,
    )
    try:
        server.start()
    except RuntimeError:
        print(
            f"Could not listen on {args.host}:{args.port} (in use?): "
            "pass another --port, or --port 0 for a free one.",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        replies = f"{len(args.reply)} scripted, then" if args.reply else "it"
        print(f"Fake LLM on {server.url} (Ctrl-C or SIGTERM stops it).")
        then = (
            "repeats the Always/Never lines of the system prompt"
            if args.follow
            else "echoes the last user message"
        )
        print(f"Answers: {replies} {then}.")
        print("\n".join(settings_lines(server)), flush=True)
        while not stop.wait(0.5):  # a timed wait: signals are handled between waits
            pass
    finally:
        server.stop()
    print("Fake LLM stopped.", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return fake_llm(args)  # the only command


if __name__ == "__main__":
    sys.exit(main())
