"""What of a backup's ``amelio.toml`` a restore keeps.

A backup may come from someone else, and its ``amelio.toml`` says where this
workspace will send things and whom it will trust: the LLM server and its key,
the Telegram bot's token, the webhook that receives every improve report, the
origins that may call the API, the program run as the Claude CLI. A restore
keeps none of those unless asked (``amelio restore --with-config``), and says
which it left out. ``database_url`` is never kept: the restored database is the
workspace's own ``.amelio/amelio.db``, whatever the backup's settings said.

The other settings are written back as they were, one ``key = value`` line each;
when nothing is left out, the file is restored byte for byte.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from amelio.errors import ConfigError
from amelio.workspace.config import Settings
from amelio.workspace.discovery import CONFIG_FILE

__all__ = ["NEVER_KEPT", "RestoredConfig", "is_sensitive", "restored_config"]

#: Left out even with ``--with-config``: the database is the workspace's own file.
NEVER_KEPT = frozenset({"database_url"})
#: Not URLs or secrets, but they say who may call in, or what runs.
_TRUST = frozenset({"claude_cli_path", "cors_origins", "telegram_allowed_chats"})


def is_sensitive(name: str) -> bool:
    """A setting a restore leaves out unless ``--with-config``: a secret, an address
    this workspace would send to, or one of :data:`_TRUST`."""
    field = Settings.model_fields.get(name)
    secret = field is not None and field.annotation is SecretStr
    return secret or name.endswith("_url") or name in _TRUST


@dataclass(frozen=True)
class RestoredConfig:
    """The ``amelio.toml`` a restore writes, and the settings it left out."""

    text: bytes
    dropped: tuple[str, ...]


def restored_config(raw: bytes, *, with_config: bool = False) -> RestoredConfig:
    """The backup's ``amelio.toml`` (``raw``) as a restore writes it."""
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"The backup's {CONFIG_FILE} cannot be read: {exc}") from exc
    dropped = tuple(
        sorted(k for k in data if k in NEVER_KEPT or (not with_config and is_sensitive(k)))
    )
    if not dropped:
        return RestoredConfig(raw, ())
    kept = {k: v for k, v in data.items() if k not in dropped}
    lines = [
        f"# Restored by `amelio restore`, which left out {', '.join(dropped)}",
        "# (addresses, secrets and who may call in come from the backup's author:",
        "# `amelio restore --with-config` keeps them; the database is always",
        "# .amelio/amelio.db). Every key can be overridden by AMELIO_<KEY>.",
        "",
        *(f"{key} = {_toml_value(key, value)}" for key, value in kept.items()),
    ]
    return RestoredConfig(("\n".join(lines) + "\n").encode("utf-8"), dropped)


def _toml_value(key: str, value: Any) -> str:
    """``value`` as TOML; settings are scalars (anything else would not load)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        # JSON's escapes are TOML's, but for DEL, which TOML wants escaped too.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    raise ConfigError(
        f"The backup's {CONFIG_FILE} sets {key} to a {type(value).__name__}, which no "
        "Amelio setting takes: the restored workspace would not open."
    )
