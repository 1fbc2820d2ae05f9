"""How Amelio's processes log: quiet by default, JSON lines on request.

A command prints its results on stdout and says nothing else unless something is
wrong: library loggers stay at WARNING (so migrations, model loading and HTTP
clients do not chatter into `amelio simulate`'s table). ``-v`` shows INFO and
``-vv`` DEBUG. ``--log-format json`` (or ``AMELIO_LOG_FORMAT=json``) writes each
record as one JSON object per line on stderr (python-json-logger), for log
shippers; ``amelio serve`` passes the same choice to uvicorn, so its startup and
access lines are JSON too.

Access lines never carry an API key: amelio.js may send a client key as ``?key=``
(``sendBeacon`` sets no header), and :class:`RedactQueryKeys` blanks its value
before uvicorn's access logger writes the path, in either format.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

__all__ = ["LOG_FORMATS", "RedactQueryKeys", "configure_logging", "uvicorn_log_config"]

LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The JSON fields of every record, renamed as below, plus ``time`` (ISO 8601, UTC).
_JSON = "%(levelname)s %(name)s %(message)s"
_RENAMED = {"levelname": "level", "name": "logger"}


_QUERY_KEY = re.compile(r"(?<=[?&])(key=)[^&#\s]*", re.IGNORECASE)
REDACTED = "[redacted]"


class RedactQueryKeys(logging.Filter):
    """Blanks ``key=`` query values in uvicorn's access records (whose arguments are
    client, method, path with query, HTTP version and status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], _QUERY_KEY.sub(rf"\1{REDACTED}", args[2]), *args[3:])
        return True


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


def uvicorn_log_config(fmt: str) -> dict[str, Any]:
    """uvicorn's ``log_config`` for ``fmt``: its loggers and levels, its access lines
    without API keys, and for JSON a JSON formatter on every handler."""
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = {**LOGGING_CONFIG, "disable_existing_loggers": False}
    config["filters"] = {"redact_query_keys": {"()": f"{__name__}.RedactQueryKeys"}}
    config["loggers"] = {
        **LOGGING_CONFIG["loggers"],
        "uvicorn.access": {
            **LOGGING_CONFIG["loggers"]["uvicorn.access"],
            "filters": ["redact_query_keys"],
        },
    }
    if fmt != "json":
        return config
    json_formatter = {
        "()": "pythonjsonlogger.json.JsonFormatter",
        "fmt": _JSON,
        "rename_fields": _RENAMED,
        "timestamp": "time",
        "reserved_attrs": _reserved(),
    }
    config["formatters"] = dict.fromkeys(LOGGING_CONFIG["formatters"], json_formatter)
    return config
