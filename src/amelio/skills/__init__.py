"""Skills: Markdown rulebooks with routing hints and eval rules, fully versioned."""

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
