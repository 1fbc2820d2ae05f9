"""Every error Amelio raises on purpose, in one tree.

```
AmelioError                      base; ``code`` is the stable machine name
├── ConfigError                  a setting or amelio.toml is wrong
│   └── WorkspaceNotFound        no --workspace, AMELIO_WORKSPACE or amelio.toml above cwd
├── DatabaseError                the database cannot be used as it is
│   └── NotMigrated              the schema is behind the code: run `amelio db upgrade`
├── NotFound                     a named thing does not exist
│   ├── SkillNotFound
│   └── ProjectNotFound
├── InvalidInput                 input was read but is not acceptable (HTTP 422)
│   ├── SkillFileError           a skill file is malformed (names file and field)
│   ├── EvalRuleError            an eval rule is malformed (names file, rule id and field)
│   └── InvalidToken             a signed token is forged, expired, or meant for another use
├── LLMError                     the LLM could not answer (HTTP 502)
│   ├── LLMNotConfigured         no provider, key or model: says which setting to set (HTTP 503)
│   └── LLMUnavailable           unreachable, timed out or out of retries (HTTP 503)
├── Conflict                     a concurrent change won; reload and retry (HTTP 409)
├── InputTooLarge                a payload is over a configured limit (HTTP 413)
├── RateLimited                  too many requests: retry after ``retry_after`` s (HTTP 429)
└── AuthError                    no valid API key (HTTP 401)
    └── Forbidden                a valid key without the needed role (HTTP 403)
```

Messages are written for the person who has to act on them: they say what is
wrong and, where there is one, the command or setting that fixes it. The server
turns any of these into ``{"error": {"code", "message", "details"}}`` with the
``http_status`` of the class; the CLI prints the message and exits 1.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AmelioError",
    "AuthError",
    "ConfigError",
    "Conflict",
    "DatabaseError",
    "EvalRuleError",
    "Forbidden",
    "InputTooLarge",
    "InvalidInput",
    "InvalidToken",
    "LLMError",
    "LLMNotConfigured",
    "LLMUnavailable",
    "NotFound",
    "NotMigrated",
    "ProjectNotFound",
    "RateLimited",
    "SkillFileError",
    "SkillNotFound",
    "WorkspaceNotFound",
]


class AmelioError(Exception):
    """Base of every error Amelio raises on purpose."""

    code: ClassVar[str] = "amelio_error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {k: v for k, v in details.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class ConfigError(AmelioError):
    code = "config_error"
    http_status = 500


class WorkspaceNotFound(ConfigError):
    code = "workspace_not_found"


class DatabaseError(AmelioError):
    code = "database_error"
    http_status = 503


class NotMigrated(DatabaseError):
    code = "not_migrated"


class NotFound(AmelioError):
    code = "not_found"
    http_status = 404


class SkillNotFound(NotFound):
    code = "skill_not_found"


class ProjectNotFound(NotFound):
    code = "project_not_found"


class InvalidInput(AmelioError):
    code = "invalid_input"
    http_status = 422


class SkillFileError(InvalidInput):
    """A skill file could not be read; ``file`` and ``field`` say where."""

    code = "skill_file_error"

    def __init__(
        self, message: str, *, file: str | None = None, field: str | None = None, **details: Any
    ) -> None:
        where = ", ".join(p for p in (file, f"field '{field}'" if field else None) if p)
        super().__init__(
            f"{where}: {message}" if where else message, file=file, field=field, **details
        )
        self.file = file
        self.field = field


class EvalRuleError(InvalidInput):
    """An eval rule is malformed; ``file``, ``rule_id`` and ``field`` say where."""

    code = "eval_rule_error"

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        rule_id: str | None = None,
        field: str | None = None,
        **details: Any,
    ) -> None:
        parts = [
            file,
            f"rule '{rule_id}'" if rule_id else None,
            f"field '{field}'" if field else None,
        ]
        where = ", ".join(p for p in parts if p)
        super().__init__(
            f"{where}: {message}" if where else message,
            file=file,
            rule_id=rule_id,
            field=field,
            **details,
        )
        self.file = file
        self.rule_id = rule_id
        self.field = field


class LLMError(AmelioError):
    code = "llm_error"
    http_status = 502


class LLMNotConfigured(LLMError):
    code = "llm_not_configured"
    http_status = 503


class LLMUnavailable(LLMError):
    code = "llm_unavailable"
    http_status = 503


class Conflict(AmelioError):
    code = "conflict"
    http_status = 409


class InputTooLarge(AmelioError):
    code = "input_too_large"
    http_status = 413


class InvalidToken(InvalidInput):
    """A signed token (a feedbackToken, most often) that is malformed, forged, expired,
    or signed for another purpose or query."""

    code = "invalid_feedback_token"


class RateLimited(AmelioError):
    """Over a rate limit; ``retry_after`` is the whole seconds until it would pass."""

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after: int, **details: Any) -> None:
        super().__init__(message, retryAfter=retry_after, **details)
        self.retry_after = retry_after


class AuthError(AmelioError):
    code = "unauthorized"
    http_status = 401


class Forbidden(AuthError):
    code = "forbidden"
    http_status = 403
