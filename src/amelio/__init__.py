"""Amelio: assistants and search that improve from their own use.

This module is the public API; everything not listed in ``__all__`` is private
and may change between releases.

The names are resolved lazily (PEP 562): ``import amelio`` costs next to nothing,
and ``amelio.Workspace`` imports the database layer the first time it is used, so
a command that only checks eval rules never loads SQLAlchemy.
"""

import typing as _typing

from amelio._lazy import lazy_namespace as _lazy_namespace
from amelio._version import __version__

if _typing.TYPE_CHECKING:
    from amelio.errors import (
        AmelioError,
        AuthError,
        ConfigError,
        Conflict,
        DatabaseError,
        EvalRuleError,
        Forbidden,
        InputTooLarge,
        InvalidInput,
        NotFound,
        NotMigrated,
        ProjectNotFound,
        SkillFileError,
        SkillNotFound,
        WorkspaceNotFound,
    )
    from amelio.evals import (
        EvalReport,
        EvalResult,
        EvalRule,
        EvalSpec,
        RuleType,
        Verdict,
        append_footnotes,
        evaluate,
        parse_eval_file,
        parse_rules,
        render_footnotes,
    )
    from amelio.hookspecs import hookimpl
    from amelio.skills import (
        ImportReport,
        Skill,
        SkillSpec,
        SkillVersion,
        export_skills,
        fork_skill,
        get_skill,
        import_skills,
        list_skills,
        list_versions,
        read_skills,
        rollback_skill,
        update_skill,
    )
    from amelio.workspace.config import Settings, load_settings
    from amelio.workspace.discovery import find_workspace
    from amelio.workspace.folder import Workspace, init_workspace, open_workspace

__all__ = [
    "AmelioError",
    "AuthError",
    "ConfigError",
    "Conflict",
    "DatabaseError",
    "EvalReport",
    "EvalResult",
    "EvalRule",
    "EvalRuleError",
    "EvalSpec",
    "Forbidden",
    "ImportReport",
    "InputTooLarge",
    "InvalidInput",
    "NotFound",
    "NotMigrated",
    "ProjectNotFound",
    "RuleType",
    "Settings",
    "Skill",
    "SkillFileError",
    "SkillNotFound",
    "SkillSpec",
    "SkillVersion",
    "Verdict",
    "Workspace",
    "WorkspaceNotFound",
    "__version__",
    "append_footnotes",
    "evaluate",
    "export_skills",
    "find_workspace",
    "fork_skill",
    "get_skill",
    "hookimpl",
    "import_skills",
    "init_workspace",
    "list_skills",
    "list_versions",
    "load_settings",
    "open_workspace",
    "parse_eval_file",
    "parse_rules",
    "read_skills",
    "render_footnotes",
    "rollback_skill",
    "update_skill",
]

#: Where each public name lives; the module is imported on first use.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("Settings", "load_settings"), "amelio.workspace.config"),
    "find_workspace": "amelio.workspace.discovery",
    **dict.fromkeys(
        (
            "AmelioError",
            "AuthError",
            "ConfigError",
            "Conflict",
            "DatabaseError",
            "EvalRuleError",
            "Forbidden",
            "InputTooLarge",
            "InvalidInput",
            "NotFound",
            "NotMigrated",
            "ProjectNotFound",
            "SkillFileError",
            "SkillNotFound",
            "WorkspaceNotFound",
        ),
        "amelio.errors",
    ),
    **dict.fromkeys(
        (
            "EvalReport",
            "EvalResult",
            "EvalRule",
            "EvalSpec",
            "RuleType",
            "Verdict",
            "append_footnotes",
            "evaluate",
            "parse_eval_file",
            "parse_rules",
            "render_footnotes",
        ),
        "amelio.evals",
    ),
    "hookimpl": "amelio.hookspecs",
    **dict.fromkeys(
        (
            "ImportReport",
            "Skill",
            "SkillSpec",
            "SkillVersion",
            "export_skills",
            "fork_skill",
            "get_skill",
            "import_skills",
            "list_skills",
            "list_versions",
            "read_skills",
            "rollback_skill",
            "update_skill",
        ),
        "amelio.skills",
    ),
    **dict.fromkeys(("Workspace", "init_workspace", "open_workspace"), "amelio.workspace.folder"),
}


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag typos
    __getattr__, __dir__ = _lazy_namespace("amelio", _LAZY, globals(), __all__)
