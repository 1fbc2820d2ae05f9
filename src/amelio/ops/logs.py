"""How Amelio's processes log: quiet by default, JSON lines on request.

A command prints its results on stdout and says nothing else unless something is
wrong: library loggers stay at WARNING (so migrations, model loading and HTTP
clients do not chatter into `amelio simulate`'s table). ``-v`` shows INFO and
``-vv`` DEBUG. ``--log-format json`` (or ``AMELIO_LOG_FORMAT=json``) writes each
record as one JSON object per line on stderr (python-json-logger), for log
shippers; ``amelio serve`` passes the same choice to uvicorn, so its startup and
access lines are JSON too.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["LOG_FORMATS", "configure_logging", "uvicorn_log_config"]

LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The JSON fields of every record, renamed as below, plus ``time`` (ISO 8601, UTC).
_JSON = "%(levelname)s %(name)s %(message)s"
_RENAMED = {"levelname": "level", "name": "logger"}


def _reserved() -> list[str]:
    """Record attributes left out of the JSON: the standard ones python-json-logger
    leaves out, and uvicorn's ``color_message`` (the message again, with ANSI codes)."""
    from pythonjsonlogger.core import RESERVED_ATTRS

    return [*RESERVED_ATTRS, "color_message"]


def level_for(verbosity: int) -> int:
    return logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(
            _JSON, rename_fields=_RENAMED, timestamp="time", reserved_attrs=_reserved()
        )
    return logging.Formatter(_TEXT)


def configure_logging(verbosity: int = 0, fmt: str = "text", *, force: bool = False) -> None:
    """One stderr handler on the root logger, at the level ``verbosity`` asks for.

    A process whose logging is already configured (an application that calls
    ``amelio.cli.main`` in-process, a test runner) keeps its own unless ``force``."""
    root = logging.getLogger()
    if root.handlers and not force:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root.handlers[:] = [handler]
    root.setLevel(level_for(verbosity))


def uvicorn_log_config(fmt: str) -> dict[str, Any] | None:
    """uvicorn's ``log_config`` for ``fmt``: None keeps uvicorn's own (text) config;
    for JSON, its loggers and their levels with a JSON formatter on every handler."""
    if fmt != "json":
        return None
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = {**LOGGING_CONFIG, "disable_existing_loggers": False}
    json_formatter = {
        "()": "pythonjsonlogger.json.JsonFormatter",
        "fmt": _JSON,
        "rename_fields": _RENAMED,
        "timestamp": "time",
        "reserved_attrs": _reserved(),
    }
    config["formatters"] = dict.fromkeys(LOGGING_CONFIG["formatters"], json_formatter)
    return config
