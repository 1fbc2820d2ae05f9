"""Logging: quiet by default, INFO with -v, JSON lines with --log-format json."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amelio.ops.logs import LOG_FORMATS, configure_logging, uvicorn_log_config


def amelio(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AMELIO_")}
    return subprocess.run(
        [sys.executable, "-m", "amelio", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=base | (env or {}),
    )


def test_a_command_says_nothing_on_stderr_by_default(tmp_path: Path) -> None:
    done = amelio("init", str(tmp_path / "ws"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the migrations ran, and did not chatter


def test_verbose_json_logs_are_one_object_per_line(tmp_path: Path) -> None:
    done = amelio("-v", "--log-format", "json", "init", str(tmp_path / "ws"))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(
        r["logger"] == "alembic.runtime.migration"
        and r["level"] == "INFO"
        and "0014_routing_examples" in r["message"]
        for r in records
    )
    # The environment variable chooses the same, for a service's unit file.
    again = amelio("-v", "init", str(tmp_path / "ws2"), env={"AMELIO_LOG_FORMAT": "json"})
    assert json.loads(again.stderr.splitlines()[0])["level"] == "INFO"


def test_configure_logging_levels(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    try:
        configure_logging(2, "json")  # pytest's handlers are there: left alone
        assert root.handlers == saved[1]
        configure_logging(0, "text", force=True)
        logging.getLogger("amelio.test").info("hidden")
        logging.getLogger("amelio.test").warning("shown")
        configure_logging(2, "json", force=True)
        logging.getLogger("amelio.test").debug("debug %s", "too")
        err = capsys.readouterr().err.splitlines()
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
    assert "hidden" not in "".join(err)
    assert err[0].endswith("WARNING amelio.test: shown")
    assert json.loads(err[1])["message"] == "debug too"


@pytest.mark.parametrize("fmt", LOG_FORMATS)
def test_access_lines_never_carry_a_query_key(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """amelio.js sends a client key as ?key= with sendBeacon: the access log, which
    log shippers keep for months, must not hold it."""
    logging.config.dictConfig(uvicorn_log_config(fmt))
    secret = "amk_live_s3cr3t"
    try:
        access = logging.getLogger("uvicorn.access")
        for path in (
            f"/v1/feedback/events?key={secret}",
            f"/v1/feedback/events?sessionId=s1&KEY={secret}&x=1",
            "/v1/search?monkey=banana",
        ):
            access.info(
                '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "POST", path, "1.1", 202
            )  # as uvicorn's httptools and h11 protocols log
    finally:
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).filters.clear()
    out = capsys.readouterr().out
    assert out.count("POST /v1/feedback/events?") == 2
    assert secret not in out
    assert "key=[redacted]" in out and "KEY=[redacted]&x=1" in out
    assert "monkey=banana" in out


def test_uvicorn_logs_json_with_its_own_levels() -> None:
    config = uvicorn_log_config("json")
    assert config is not None
    logging.config.dictConfig(config)
    try:
        handler = logging.getLogger("uvicorn.access").handlers[0]
        record = logging.LogRecord(
            "uvicorn.access",
            logging.INFO,
            __file__,
            1,
            '%s - "%s %s HTTP/%s" %d',
            ("127.0.0.1:5", "GET", "/v1/health", "1.1", 200),
            None,
        )
        record.color_message = "\x1b[36mthe same, in colour\x1b[0m"  # as uvicorn adds
        line = json.loads(handler.format(record))
    finally:
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).handlers.clear()
    assert line["logger"] == "uvicorn.access" and "GET /v1/health" in line["message"]
    assert "color_message" not in line
