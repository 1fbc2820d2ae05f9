"""What a skill is: a Markdown rulebook with routing hints and eval rules."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Skill", "SkillSpec", "SkillVersion"]


@dataclass(frozen=True)
class SkillSpec:
    """A skill as a file describes it: no identity, no history.

    ``evals`` holds the rules as seed-format dicts (already validated), or None
    when the skill has no evals file; an empty tuple is a file with no rules.
    ``extra`` keeps front-matter keys Amelio does not use (``license``,
    ``allowed-tools``, ``metadata``…) so an export writes them back unchanged.
    """

    name: str
    description: str = ""
    triggers: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    content: str = ""
    evals: tuple[Mapping[str, Any], ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)

    @property
    def examples(self) -> tuple[str, ...]:
        """Messages this skill is for (front matter ``examples:``): the learned router
        learns from them before the skill has served anyone."""
        found = self.extra.get("examples")
        if not isinstance(found, list):
            return ()
        return tuple(e for e in found if isinstance(e, str) and e.strip())

    def content_hash(self) -> str:
        """Identifies the skill's substance; re-importing the same files is a no-op."""
        payload = {
            "description": self.description,
            "triggers": list(self.triggers),
            "keywords": list(self.keywords),
            "content": self.content,
            "evals": None if self.evals is None else [dict(r) for r in self.evals],
            "extra": dict(self.extra),
        }
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SkillVersion:
    """One entry of a skill's history; version 1 is the first import."""

    version: int
    spec: SkillSpec
    author: str
    reason: str
    created_at: datetime

    def to_dict(self, *, with_content: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.version,
            "author": self.author,
            "reason": self.reason,
            "createdAt": self.created_at.isoformat(),
            "contentHash": self.spec.content_hash(),
        }
        if with_content:
            data["content"] = self.spec.content
            data["evals"] = None if self.spec.evals is None else [dict(r) for r in self.spec.evals]
        return data


@dataclass(frozen=True)
class Skill:
    """The current state of a skill in one scope: global or a project's fork."""

    id: int
    spec: SkillSpec
    project: str | None
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def scope(self) -> str:
        return "global" if self.project is None else "project"

    def to_dict(self, *, with_content: bool = True) -> dict[str, Any]:
        spec = self.spec
        data: dict[str, Any] = {
            "name": spec.name,
            "description": spec.description,
            "triggers": list(spec.triggers),
            "keywords": list(spec.keywords),
            "scope": self.scope,
            "project": self.project,
            "version": self.version,
            "ruleCount": 0 if spec.evals is None else len(spec.evals),
            "createdAt": self.created_at.isoformat(),
            "updatedAt": self.updated_at.isoformat(),
        }
        if with_content:
            data["content"] = spec.content
            data["evals"] = None if spec.evals is None else [dict(r) for r in spec.evals]
            data["extra"] = dict(spec.extra)
        return data
