"""Every request the README and docs/ show runs, as written, against a live service.

How: each ```` ```bash ````, ```` ```console ```` or ```` ```sh ```` block of README.md
and docs/*.md is read for its ``curl`` commands (a ``$ `` prompt dropped, backslash
continuations joined, a quoted body that spans lines kept whole). The variable
assignments of the same block (``NAME=…``, as a reader runs them first) and the command
then go to a real ``bash`` with a ``curl`` function that prints its arguments, so that
quoting, ``$VARIABLES`` and ``$(…)`` come out exactly as a reader's shell makes them; a
substitution that fails, or a tool the machine lacks, fails the test. The arguments are
then sent by the real ``curl`` binary when the machine has one (the ``curl_binary``
fixture), else parsed here and sent with httpx: method, headers, body, URL.

The service is a real server on loopback (:class:`amelio.testing.ThreadedServer`) over
a temporary workspace holding the example skills and one logged interaction. The
documents' ``http://127.0.0.1:8000`` becomes the server's address, and their keys real
ones: ``amk_…`` and ``$KEY`` / ``$AMELIO_BOT_KEY`` a bot key, ``$AMELIO_ADMIN_KEY`` an
admin one, ``$INTERACTION_ID`` the logged interaction. Each request must succeed (2xx).
Where a console block shows the output under the command, the live output must match
it: JSON compared as data, anything else line by line (with a pipe into ``jq``, the
whole pipeline runs when jq is installed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from markdown_it import MarkdownIt

from amelio import skills
from amelio.assistant.respond import log_exchange
from amelio.server import create_app
from amelio.testing import FakeLLMServer, ThreadedServer
from amelio.workspace import keys
from amelio.workspace.config import load_settings
from amelio.workspace.folder import init_workspace, open_workspace

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED_BASE = "http://127.0.0.1:8000"
SHELLS = {"bash", "console", "sh", "shell"}
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class Curl:
    """One curl command of a document, with what the block shows it printing."""

    document: str
    line: int
    command: str  # one shell line: continuations joined
    setup: tuple[str, ...]  # the block's variable assignments before it
    expected: tuple[str, ...]  # the output lines a console block shows under it

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def _logical_lines(code: str, prompted: bool) -> Iterator[tuple[int, str]]:
    """(offset of the first line, the whole command): backslash continuations joined,
    and lines added while a quote is open (a JSON body over several lines). In a
    console block (PROMPTED) only ``$ `` lines are commands: an apostrophe in the
    output shown under one opens nothing."""
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        command = not prompted or text.startswith("$ ")
        while command and (text.endswith("\\") or _open_quote(text)):
            i += 1
            if i >= len(lines):
                break
            text = (
                text[:-1].rstrip() + " " + lines[i].strip()
                if text.endswith("\\")
                else text + "\n" + lines[i]
            )
        yield start, text
        i += 1


def _open_quote(text: str) -> bool:
    """Whether a single- or double-quoted string is still open at the end of TEXT."""
    return _scan(text)[0] is not None


def _request_part(command: str) -> tuple[str, str]:
    """The command before its first unquoted ``|``, and the pipeline after it."""
    at = _scan(command)[1]
    return command[:at], command[at:]


def _scan(text: str) -> tuple[str | None, int]:
    """The quote still open at the end of TEXT (or None), and where its first unquoted
    ``|`` is (else its length)."""
    quote = None
    escaped = False
    pipe = len(text)
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote is None and ch in "'\"":
            quote = ch
        elif ch == quote:
            quote = None
        elif quote is None and ch == "#" and (i == 0 or text[i - 1].isspace()):
            break  # a comment: its quotes open nothing
        elif quote is None and ch == "|" and pipe == len(text):
            pipe = i
    return quote, pipe


def curls(document: Path) -> list[Curl]:
    found: list[Curl] = []
    text = document.read_text(encoding="utf-8")
    for token in MarkdownIt().parse(text):
        if token.type != "fence" or not token.map or token.info.split()[:1] == []:
            continue
        if token.info.split()[0] not in SHELLS:
            continue
        prompted = token.info.split()[0] == "console"
        entries = list(_logical_lines(token.content, prompted))
        setup: list[str] = []
        for n, (offset, line) in enumerate(entries):
            command = line.removeprefix("$ ").strip() if line.startswith("$ ") else line.strip()
            if prompted and not line.startswith("$ "):
                continue  # output
            if _ASSIGNMENT.match(command):
                setup.append(command)
            elif command.startswith("curl "):
                expected: list[str] = []
                for _, after in entries[n + 1 :]:
                    if not prompted or after.startswith("$ "):
                        break
                    expected.append(after)
                found.append(
                    Curl(
                        _name(document),
                        token.map[0] + 2 + offset,
                        command,
                        tuple(setup),
                        tuple(expected),
                    )
                )
    return found


def _name(document: Path) -> str:
    return document.relative_to(ROOT).as_posix() if document.is_relative_to(ROOT) else document.name


ALL_CURLS = [c for document in DOCUMENTS for c in curls(document)]


# -- the live service ----------------------------------------------------------------------


class Service(NamedTuple):
    url: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("docs-curl") / "ws"
    init_workspace(root)[0].dispose()
    upstream = FakeLLMServer(default="Run git pull --rebase, then push.").start()
    ws = open_workspace(
        root,
        settings=load_settings(
            root,
            llm_provider="openai",
            llm_base_url=upstream.openai_base_url,
            llm_api_key="x",
            llm_model="fake-model",
        ),
    )
    skills.import_skills(ws.engine, ROOT / "examples" / "skills")
    bot = keys.create_key(ws.engine, name="docs bot", role="bot")[1]
    admin = keys.create_key(ws.engine, name="docs admin", role="admin")[1]
    logged = log_exchange(ws, "git push rejected", "Pull, then push.", project="default")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path_factory.mktemp("home")),
        "KEY": bot,
        "AMELIO_BOT_KEY": bot,
        "AMELIO_ADMIN_KEY": admin,
        "AMELIO_KEY": bot,
        "INTERACTION_ID": str(logged.interaction_id),
    }
    try:
        with ThreadedServer(create_app(ws)) as server:
            yield Service(server.url, env)
    finally:
        ws.dispose()
        upstream.stop()


@pytest.fixture(scope="module")
def curl_binary() -> str | None:
    return shutil.which("curl")


def _localized(curl: Curl, service: Service) -> str:
    """The command aimed at the live service, with a real key for the placeholder."""
    assert DOCUMENTED_BASE in curl.command, f"{curl}: a request the test cannot aim"
    return curl.command.replace(DOCUMENTED_BASE, service.url).replace(
        "amk_…", service.env["AMELIO_BOT_KEY"]
    )


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )


def _arguments(curl: Curl, service: Service) -> list[str]:
    """The command's arguments as the reader's shell passes them to curl."""
    command = _request_part(_localized(curl, service))[0]  # the request; pipes run below
    script = "\n".join([*curl.setup, "curl() { printf '%s\\0' \"$@\"; }", command])
    done = _bash(script, service.env)
    assert done.returncode == 0, f"{curl}: the shell failed: {done.stderr.decode()}"
    return done.stdout.decode().split("\0")[:-1]


class Request(NamedTuple):
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: str | None


def parse(arguments: list[str]) -> Request:
    """What curl would send for ARGUMENTS (the options the documents use)."""
    method, url, body = None, None, None
    headers: list[tuple[str, str]] = []
    args = iter(arguments)
    for arg in args:
        if arg in {"-X", "--request"}:
            method = next(args)
        elif arg in {"-H", "--header"}:
            name, _, value = next(args).partition(":")
            if value.strip():  # curl drops a header whose value is empty
                headers.append((name.strip(), value.strip()))
        elif arg in {"-d", "--data", "--data-raw", "--data-binary"}:
            body = next(args)
        elif arg in {"-s", "--silent", "-S", "--show-error", "-f", "--fail"}:
            continue
        elif arg.startswith("-"):
            raise AssertionError(f"curl option {arg} is not handled by this test's parser")
        else:
            url = arg
    assert url is not None, arguments
    return Request(method or ("POST" if body is not None else "GET"), url, headers, body)


# -- the tests -----------------------------------------------------------------------------


def test_the_documents_hold_curl_commands() -> None:
    """The parametrized tests below would pass vacuously if the parser found nothing."""
    documents = {c.document for c in ALL_CURLS}
    assert {"README.md", "docs/integrate.md", "docs/api.md"} <= documents
    assert any("/feedback" in c.command for c in ALL_CURLS)


@pytest.mark.parametrize("curl", ALL_CURLS, ids=str)
def test_a_body_goes_with_its_content_type(curl: Curl, service: Service) -> None:
    request = parse(_arguments(curl, service))
    if request.body is not None:
        assert ("Content-Type", "application/json") in request.headers, curl
        json.loads(request.body)  # and it is JSON


@pytest.mark.parametrize("curl", ALL_CURLS, ids=str)
def test_every_header_shown_is_sent(curl: Curl, service: Service) -> None:
    """A header the document writes must leave with a value: curl silently drops
    `-H "Idempotency-Key: "` when the tool meant to make the key is missing."""
    shown = re.findall(r"-H\s+[\"']([\w-]+):", curl.command)
    sent = [name for name, _ in parse(_arguments(curl, service)).headers]
    assert sorted(shown) == sorted(sent), curl


@pytest.mark.parametrize("curl", ALL_CURLS, ids=str)
def test_the_request_succeeds_and_prints_what_the_document_shows(
    curl: Curl, service: Service, curl_binary: str | None
) -> None:
    arguments = _arguments(curl, service)
    if curl_binary is not None:
        done = subprocess.run(
            [curl_binary, *arguments, "-w", "\n%{http_code}"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        output, _, status = done.stdout.decode().rpartition("\n")
    else:
        request = parse(arguments)
        response = httpx.request(
            request.method,
            request.url,
            headers=request.headers,
            content=request.body.encode() if request.body is not None else None,
            timeout=60,
        )
        output, status = response.text, str(response.status_code)
    assert status.startswith("2"), f"{curl}: {status} {output}"
    if not curl.expected:
        return
    pipeline = _request_part(curl.command)[1]
    if pipeline:
        tools = re.findall(r"\|\s*(\S+)", pipeline)
        missing = [tool for tool in tools if not shutil.which(tool)]
        if missing:  # skipped on a laptop without them; CI installs them (.ci/run)
            if os.environ.get("CI"):
                pytest.fail(f"CI must run this pipeline: install {', '.join(missing)}")
            pytest.skip(f"the pipeline needs {', '.join(missing)}")
        script = "\n".join([*curl.setup, _localized(curl, service)])
        done_pipe = _bash(script, service.env)
        assert done_pipe.returncode == 0, done_pipe.stderr
        output = done_pipe.stdout.decode()
    assert _shown(output) == _shown("\n".join(curl.expected)), curl


def python_examples() -> list[tuple[str, str]]:
    """(where, code) of the Python blocks that call the service: README.md and
    docs/integrate.md show how an app talks to it."""
    found = []
    for document in (ROOT / "README.md", ROOT / "docs" / "integrate.md"):
        for token in MarkdownIt().parse(document.read_text(encoding="utf-8")):
            shown = token.type == "fence" and token.info.split()[:1] == ["python"]
            if shown and token.map and DOCUMENTED_BASE in token.content:
                found.append((f"{_name(document)}:{token.map[0] + 1}", token.content))
    return found


def test_the_feedback_examples_are_shown() -> None:
    feedback = [where for where, code in python_examples() if "/feedback" in code]
    assert {where.split(":")[0] for where in feedback} == {"README.md", "docs/integrate.md"}


@pytest.mark.parametrize(
    ("where", "code"), python_examples(), ids=[w for w, _ in python_examples()]
)
def test_the_python_example_runs_against_the_service(
    where: str, code: str, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    """The OpenAI SDK and httpx, as the example uses them, with a fake LLM upstream."""
    bot = service.env["AMELIO_BOT_KEY"]
    code = code.replace(DOCUMENTED_BASE, service.url).replace("amk_…", bot)
    exec(compile(code, where, "exec"), {"__name__": "__main__", "AMELIO_BOT_KEY": bot})
    if "/feedback" in code and "print(" in code:
        assert capsys.readouterr().out.strip() == "Never suggest a plain force push"


def _shown(text: str) -> object:
    """Output as a document shows it: JSON as data, other text as its lines."""
    try:
        return json.loads(text)
    except ValueError:
        return [line.rstrip() for line in text.strip().splitlines()]


def test_the_parser_reads_curl_as_curl_does() -> None:
    request = parse(
        ["-s", "-X", "PUT", "-H", "A: 1", "-H", "Empty: ", "-d", '{"x": 1}', "http://h/p"]
    )
    assert request == Request("PUT", "http://h/p", [("A", "1")], '{"x": 1}')
    assert parse(["-d", "{}", "http://h/p"]).method == "POST"
    assert parse(["http://h/p"]).method == "GET"


def test_commands_are_read_whole_from_a_block(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "```console\n"
        "$ curl -s http://127.0.0.1:8000/v1/health\n"
        "it's ok\n"
        "$ echo next\n"
        "```\n\n"
        "```bash\n"
        "K=$(python3 -c 'print(1)')\n"
        "curl -s -X POST http://127.0.0.1:8000/v1/x \\\n"
        '  -H "K: $K" \\\n'
        '  -d \'{"a": 1,\n'
        '       "b": 2}\'\n'
        "```\n",
        encoding="utf-8",
    )
    assert _request_part("""curl -d '{"k": "up|down"}' URL | jq .x""") == (
        """curl -d '{"k": "up|down"}' URL """,
        "| jq .x",
    )
    found = curls(doc)
    assert [c.expected for c in found] == [("it's ok",), ()]
    assert found[1].setup == ("K=$(python3 -c 'print(1)')",)
    assert found[1].command.endswith('-d \'{"a": 1,\n       "b": 2}\'')
    assert found[1].line == 9
