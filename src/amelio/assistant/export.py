"""``amelio learnings export``: active learnings as a section of AGENTS.md or CLAUDE.md.

Coding agents read a Markdown file of house rules (AGENTS.md; CLAUDE.md for
Claude Code). What Amelio's users corrected is worth as much to those agents, so
the export writes the active learnings, grouped by skill, as one section between
two marker comments. Re-running it replaces only that section and leaves the
rest of the file, written by people, alone.

The section is stable from run to run: learnings in id order, no timestamps,
so a diff of the file shows only what was learned or retired since.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from amelio.assistant import learnings as L
from amelio.errors import InvalidInput

__all__ = ["BEGIN", "END", "FORMATS", "Format", "render_section", "write_section"]

Format = Literal["agents", "claude"]
FORMATS: tuple[Format, ...] = ("agents", "claude")
BEGIN = "<!-- amelio:learnings:begin -->"
END = "<!-- amelio:learnings:end -->"
_INTRO = {
    "agents": "Rules people taught the assistant by correcting it, kept by Amelio. "
    "Follow them when working on this project.",
    "claude": "Rules people taught the assistant by correcting it, kept by Amelio. "
    "Claude: follow them when working on this project.",
}
_SECTION = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", re.DOTALL)


def _sources(item: L.Learning) -> str:
    feedback = sorted({s["feedbackId"] for s in item.sources if s.get("feedbackId")})
    ids = f"learning {item.id}"
    if feedback:
        ids += "; feedback " + ", ".join(str(f) for f in feedback[:10])
        if len(feedback) > 10:
            ids += f" and {len(feedback) - 10} more"
    return f"×{item.occurrences}; {ids}"


def render_section(items: Sequence[L.Learning], *, fmt: Format, project: str) -> str:
    """The section, markers included (active learnings only)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"Unknown format {fmt!r}: use agents or claude.", field="format")
    active = sorted((i for i in items if i.status == "active"), key=lambda i: i.id)
    lines = [BEGIN, "## Learnings", "", _INTRO[fmt], f"Project `{project}`.", ""]
    groups: dict[str | None, list[L.Learning]] = {}
    for item in active:
        groups.setdefault(item.skill, []).append(item)
    if not active:
        lines += ["_No active learnings._", ""]
    for skill in sorted(groups, key=lambda s: (s is not None, s or "")):
        lines += [f"### {'All skills' if skill is None else f'Skill: {skill}'}", ""]
        lines += [f"- {i.rule} ({_sources(i)})" for i in groups[skill]]
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_section(path: Path, section: str) -> bool:
    """Put ``section`` into the file at ``path`` (created if missing): in place of
    the previous one, or at the end. Atomic; returns whether the file changed."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if _SECTION.search(old):
        new = _SECTION.sub(lambda _: section, old, count=1)
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "")
        new += section
    if new == old:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(new)
    os.chmod(tmp, mode)  # mkstemp's 0600 would hide a shared file from its readers
    os.replace(tmp, path)
    return True
