"""The Telegram bot's own latency per message (target: p95 under 20 ms).

A real python-telegram-bot client polls a local fake of the Bot API
(:class:`fakes.telegram_bot_api.FakeTelegramServer`, real HTTP on loopback). The fake
runs in a child process, as Telegram runs on another machine: its own work (HTTP,
validating MarkdownV2, keeping records) is not charged to the bot's process, and it
does the timing itself. The LLM answers instantly (an in-process scripted
provider), so what is measured is the bot: the long poll handing the update over,
the chat's link looked up, the respond pipeline (routing, prompt, evals, the
interaction stored on SQLite), the answer rendered to MarkdownV2 and sent with its
buttons. Each message is timed from the moment the fake queues the update to the
moment it has received the answer's sendMessage, one message at a time. "typing…"
is sent only for an answer not ready within 0.2 s, so an instant LLM has none.

Two rows put it in context, from the same run and the same kind of fake:

* **python-telegram-bot echo bot**: a bare ``Application`` polled by its own
  ``Updater``, whose handler sends the text back: the floor of any bot on this
  library and this fake (one poll, one send).
* **respond() in-process**: the pipeline alone, without Telegram.

Run: ``python benchmarks/telegram_overhead.py [--messages N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from benchlib import Clock, percentile, target
from respond_overhead import MESSAGES

from amelio import skills
from amelio.assistant.respond import respond
from amelio.llm.fake import ScriptedProvider
from amelio.telegram import links
from amelio.telegram.bot import BotThread
from amelio.workspace.folder import init_workspace
from fakes.telegram_bot_api import FakeTelegramServer

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "123456:BENCH-token"
CHAT = 4242
ANSWER = (
    "Run `git pull --rebase`, then `git push --force-with-lease`. Rollback: redeploy "
    "the previous tag. Verify with a smoke test. "
)
TARGET_MS = 20.0
WARM_UP = 20


# -- the child: the fake Bot API, which also times --------------------------------------


def serve_fake(count: int, amelio: bool) -> None:
    """Print the fake's URL, wait for "go [CODE]" on stdin, send ``count`` messages one
    at a time (after a warm-up) and print the milliseconds each took, as JSON."""
    with FakeTelegramServer(TOKEN) as server:
        print(server.url, flush=True)
        words = sys.stdin.readline().split()
        if len(words) > 1:  # link the chat first, as a person would
            server.user_message(CHAT, f"/start {words[1]}")
            server.wait_for_message(CHAT, timeout=30)

        def answered() -> int:
            return sum(1 for m in server.messages_to(CHAT) if m.reply_markup or not amelio)

        done = answered()
        samples = []
        for n in range(count + WARM_UP):
            started = time.perf_counter()
            server.user_message(CHAT, MESSAGES[n % len(MESSAGES)])
            server.wait_for(
                lambda want=done + n + 1: answered() >= want,
                timeout=30,
                what=f"the answer to message {n}",
            )
            if n >= WARM_UP:
                samples.append((time.perf_counter() - started) * 1000)
        print(json.dumps(samples), flush=True)


@contextmanager
def fake_process(count: int, amelio: bool) -> Iterator[tuple[str, Callable[[str], list[float]]]]:
    """The child running :func:`serve_fake`: its URL, and a function that starts the
    timed run and returns its samples."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-fake", str(count), "--amelio" if amelio else "--echo"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None
    assert stdout is not None
    try:
        url = stdout.readline().strip()

        def run(code: str = "") -> list[float]:
            stdin.write(f"go {code}\n")
            stdin.flush()
            return [float(x) for x in json.loads(stdout.readline())]

        yield url, run
    finally:
        child.kill()
        child.wait()


# -- the bots ---------------------------------------------------------------------------


class EchoBot:
    """python-telegram-bot's own minimal bot, polled by its Updater: the floor."""

    def __init__(self, url: str) -> None:
        from telegram import Update
        from telegram.ext import ApplicationBuilder, ContextTypes, MessageHandler, filters

        async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            assert update.effective_message is not None
            await update.effective_message.reply_text(update.effective_message.text or "")

        self.app = (
            ApplicationBuilder()
            .token(TOKEN)
            .base_url(f"{url}/bot")
            .concurrent_updates(True)
            .build()
        )
        self.app.add_handler(MessageHandler(filters.TEXT, echo))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with self.app:
            assert self.app.updater is not None
            await self.app.updater.start_polling(poll_interval=0, timeout=1)
            await self.app.start()
            self._ready.set()
            await self._stop.wait()
            await self.app.updater.stop()
            await self.app.stop()

    def __enter__(self) -> EchoBot:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--serve-fake", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--amelio", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        serve_fake(args.serve_fake, args.amelio)
        return 0

    rows: list[tuple[str, list[float], Clock | None]] = []
    with fake_process(args.messages, amelio=False) as (url, run):
        with Clock() as clock, EchoBot(url):
            samples = run()
        rows.append(("python-telegram-bot echo bot (floor)", samples, clock))

    provider = ScriptedProvider(default=ANSWER)
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_process(args.messages, amelio=True) as (url, run),
    ):
        os.environ.pop("AMELIO_DATABASE_URL", None)
        os.environ["AMELIO_TELEGRAM_TOKEN"] = TOKEN
        os.environ["AMELIO_TELEGRAM_API_URL"] = url
        ws, _ = init_workspace(Path(tmp) / "ws")
        try:
            skills.import_skills(ws.engine, ROOT / "examples" / "skills")
            _, code = links.create_invite(ws, project="default", role="user")
            with Clock() as clock, BotThread(ws, provider=provider):
                samples = run(code)
            rows.append(("Amelio bot, end to end", samples, clock))
            inproc = []
            with Clock() as clock:
                for n in range(args.messages):
                    started = time.perf_counter()
                    respond(ws, MESSAGES[n % len(MESSAGES)], provider=provider)
                    inproc.append((time.perf_counter() - started) * 1000)
            rows.append(("respond() in-process, no Telegram", inproc, clock))
        finally:
            ws.dispose()

    print(
        f"latency per message, {args.messages} messages one at a time (after {WARM_UP} "
        "warm-up); fake Bot API in its own process on loopback; instant LLM; SQLite; "
        "13 example skills. CPU: this process's (the bot's), not the fake's"
    )
    print(
        f"{'':40} {'mean ms':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'wall s':>7} "
        f"{'CPU s':>6}"
    )
    print("-" * 92)
    for name, samples, clock in rows:
        wall, cpu = (f"{clock.wall:7.2f}", f"{clock.cpu:6.2f}") if clock else ("", "")
        print(
            f"{name:40} {statistics.fmean(samples):8.2f} {percentile(samples, 50):8.2f} "
            f"{percentile(samples, 95):8.2f} {percentile(samples, 99):8.2f} {wall:>7} "
            f"{cpu:>6}"
        )
    target(
        "Telegram bot latency per message, p95",
        percentile(rows[1][1], 95),
        TARGET_MS,
        "ms",
        higher_is_better=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
