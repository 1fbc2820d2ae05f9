"""Skills: Markdown rulebooks with routing hints and eval rules, fully versioned.

The names below resolve lazily (PEP 562): ``amelio.skills.model`` and
``amelio.skills.files`` stay cheap to import, and the SQLAlchemy-backed store
loads the first time one of its functions is used.
"""

import typing as _typing

from amelio._lazy import lazy_namespace as _lazy_namespace

if _typing.TYPE_CHECKING:
    from amelio.skills.files import parse_skill_md, read_skills, render_skill_md, write_skills
    from amelio.skills.model import Skill, SkillSpec, SkillVersion
    from amelio.skills.store import (
        ImportReport,
        export_skills,
        fork_skill,
        get_skill,
        import_skills,
        list_skills,
        list_versions,
        rollback_skill,
        save_skills,
        skill_log,
        update_project_skill,
        update_skill,
    )

__all__ = [
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
    "parse_skill_md",
    "read_skills",
    "render_skill_md",
    "rollback_skill",
    "save_skills",
    "skill_log",
    "update_project_skill",
    "update_skill",
    "write_skills",
]

#: Where each public name lives; the module is imported on first use.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("parse_skill_md", "read_skills", "render_skill_md", "write_skills"), "amelio.skills.files"
    ),
    **dict.fromkeys(("Skill", "SkillSpec", "SkillVersion"), "amelio.skills.model"),
    **dict.fromkeys(
        (
            "ImportReport",
            "export_skills",
            "fork_skill",
            "get_skill",
            "import_skills",
            "list_skills",
            "list_versions",
            "rollback_skill",
            "save_skills",
            "skill_log",
            "update_project_skill",
            "update_skill",
        ),
        "amelio.skills.store",
    ),
}


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and flag typos
    __getattr__, __dir__ = _lazy_namespace("amelio.skills", _LAZY, globals(), __all__)
