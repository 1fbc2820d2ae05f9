"""The skill file layout: read it, check it, write it back.

```
skills/
  _registry.json                 optional, legacy: triggers + keywords per skill
  <name>/SKILL.md                YAML front matter (name, description, triggers, keywords) + body
  <name>/<name>.evals.json       optional: {"version": 1, "skill": name, "rules": [...]}
```

Reading never touches the database and either returns every skill under a path
or raises one error naming the file and field, so an import can be all or
nothing. Writing is the inverse: ``read(write(x)) == x``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from amelio import evals
from amelio.errors import EvalRuleError, SkillFileError
from amelio.skills.model import SkillSpec

__all__ = [
    "REGISTRY_FILE",
    "SKILL_FILE",
    "check_skill_name",
    "parse_skill_md",
    "read_skills",
    "render_skill_md",
    "valid_skill_name",
    "write_skill",
    "write_skills",
]

SKILL_FILE = "SKILL.md"
REGISTRY_FILE = "_registry.json"
_LEGACY_SKILL_FILES = ("SKILL.md", "skill.md")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_KNOWN_KEYS = ("name", "description", "triggers", "keywords")
_MAX_FILE_BYTES = 1_000_000


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
        if len(data) > _MAX_FILE_BYTES:
            raise SkillFileError(f"file is over the {_MAX_FILE_BYTES:,}-byte limit", file=str(path))
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFileError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=str(path)
        ) from exc
    except OSError as exc:
        raise SkillFileError(f"cannot read: {exc.strerror}", file=str(path)) from exc


def valid_skill_name(name: object) -> bool:
    """Whether ``name`` can name a skill: it becomes a folder (``skills/<name>/``), so
    the whole of it must be the safe alphabet, with no separator, dot or newline."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_skill_name(name: object, *, file: str | None = None) -> str:
    """``name`` if it can name a skill (:func:`valid_skill_name`), else
    :class:`SkillFileError` naming it (and ``file``, where it was read)."""
    if not valid_skill_name(name):
        raise SkillFileError(
            f"{name!r} is not a valid skill name: 1-64 lowercase letters, digits or '-'",
            file=file,
            field="name",
        )
    assert isinstance(name, str)
    return name


#: Bounds of SKILL.md ``examples:``, the messages a skill is for (the learned router's).
MAX_EXAMPLES = 200
MAX_EXAMPLE_CHARS = 1000


def check_examples(value: Any, *, file: str) -> list[str]:
    """SKILL.md ``examples:`` as stored: distinct non-blank strings, within bounds."""
    examples = _string_list(value, file=file, field="examples")
    if len(examples) > MAX_EXAMPLES:
        raise SkillFileError(f"at most {MAX_EXAMPLES} examples", file=file, field="examples")
    if any(len(e) > MAX_EXAMPLE_CHARS for e in examples):
        raise SkillFileError(
            f"an example is at most {MAX_EXAMPLE_CHARS} characters", file=file, field="examples"
        )
    return list(examples)


def _string_list(value: Any, *, file: str, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SkillFileError("must be a list of strings", file=file, field=field)
    seen: dict[str, None] = {}
    for v in value:
        if v.strip():
            seen.setdefault(v.strip(), None)
    return tuple(seen)


class _FrontMatterLoader(yaml.SafeLoader):
    """Safe YAML, stricter: no aliases (a 1 KB alias chain expands to gigabytes),
    no duplicate keys (the last would silently win), and dates stay strings (the
    front matter is stored as JSON)."""

    yaml_implicit_resolvers = {  # noqa: RUF012 (PyYAML reads it from the class)
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_MAX_EXTRA_CHARS = 65_536


def _check_json(value: Any, *, file: str, field: str) -> None:
    """Extra front matter is stored as JSON: only JSON values may come through."""
    if value is None or isinstance(value, str | bool | int | float):
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item, file=file, field=field)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SkillFileError(
                    f"mapping keys must be strings, not {key!r}", file=file, field=field
                )
            _check_json(item, file=file, field=field)
        return
    raise SkillFileError(
        f"{type(value).__name__} values are not supported here; use "
        "strings, numbers, booleans, lists and mappings",
        file=file,
        field=field,
    )


def _split_front_matter(text: str, *, file: str) -> tuple[dict[str, Any] | None, str]:
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    if not text.startswith("---\n"):
        return None, text
    end = text.find("\n---", 3)
    while end != -1 and text[end + 4 : end + 5] not in ("\n", ""):
        end = text.find("\n---", end + 4)
    if end == -1:
        raise SkillFileError(
            "front matter starts with '---' but has no closing '---' line",
            file=file,
            field="front matter",
        )
    raw, body = text[4:end], text[end + 5 :]
    try:
        data = yaml.load(raw, Loader=_FrontMatterLoader) if raw.strip() else {}  # noqa: S506
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SkillFileError(
            f"invalid YAML{where}: {problem}", file=file, field="front matter"
        ) from exc
    if not isinstance(data, dict):
        raise SkillFileError(
            "front matter must be a YAML mapping (key: value lines)",
            file=file,
            field="front matter",
        )
    return data, body


def parse_skill_md(
    text: str,
    *,
    source: str,
    default_name: str | None = None,
    registry_entry: Mapping[str, Any] | None = None,
) -> SkillSpec:
    """A SKILL.md's text as a spec (without evals).

    A legacy file without front matter is accepted when the registry names it:
    its name comes from the folder and its routing hints from the registry.
    """
    if "\x00" in text:
        raise SkillFileError("contains a NUL character; skill files are text", file=source)
    meta, body = _split_front_matter(text, file=source)
    if meta is None:
        if registry_entry is None:
            raise SkillFileError(
                "missing front matter: start the file with '---', a 'name:' line and '---'",
                file=source,
                field="name",
            )
        meta = {}
    entry = dict(registry_entry or {})
    name = meta.get("name", default_name if not meta else None)
    if name is None:
        raise SkillFileError("missing", file=source, field="name")
    check_skill_name(name, file=source)
    if default_name is not None and name != default_name:
        raise SkillFileError(
            f"{name!r} does not match its folder {default_name!r}", file=source, field="name"
        )
    description = meta.get("description", entry.get("description", ""))
    if not isinstance(description, str):
        raise SkillFileError("must be a string", file=source, field="description")
    triggers = _string_list(
        meta.get("triggers", entry.get("triggers")), file=source, field="triggers"
    )
    keywords = _string_list(
        meta.get("keywords", entry.get("keywords")), file=source, field="keywords"
    )
    extra = {k: v for k, v in meta.items() if k not in _KNOWN_KEYS}
    if "examples" in extra:
        extra["examples"] = check_examples(extra["examples"], file=source)
    for key, value in extra.items():
        if not isinstance(key, str):
            raise SkillFileError(
                f"front matter keys must be strings, not {key!r}", file=source, field=str(key)
            )
        _check_json(value, file=source, field=key)
    if len(json.dumps(extra, ensure_ascii=False)) > _MAX_EXTRA_CHARS:
        raise SkillFileError(
            f"extra front matter is over {_MAX_EXTRA_CHARS:,} characters",
            file=source,
            field="front matter",
        )
    return SkillSpec(
        name=name,
        description=" ".join(description.split()),
        triggers=triggers,
        keywords=keywords,
        content=body.strip("\n") + "\n" if body.strip() else "",
        extra=extra,
        source=source,
    )


def _read_evals(path: Path, name: str) -> tuple[Mapping[str, Any], ...]:
    spec = evals.parse_eval_file(_read_text(path), source=str(path))
    if spec.skill is not None and spec.skill != name:
        raise EvalRuleError(
            f"says skill {spec.skill!r} but sits in the folder of {name!r}",
            file=str(path),
            field="skill",
        )
    return tuple(rule.to_dict() for rule in spec.rules)


def _read_registry(path: Path) -> dict[str, dict[str, Any]]:
    """The legacy registry in any of its shapes, as ``{name: {triggers, keywords, ...}}``."""
    file = str(path)
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise SkillFileError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=file
        ) from exc
    if isinstance(data, dict) and "skills" in data:
        data = data["skills"]
    entries: dict[str, dict[str, Any]] = {}
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = []
        for i, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise SkillFileError("each entry needs a 'name'", file=file, field=f"skills[{i}]")
            items.append((item["name"], item))
    else:
        raise SkillFileError("expected an object of skills or a list of skills", file=file)
    for name, entry in items:
        if not isinstance(entry, dict):
            raise SkillFileError(
                "entry must be an object with triggers and keywords", file=file, field=name
            )
        _string_list(entry.get("triggers"), file=file, field=f"{name}.triggers")
        _string_list(entry.get("keywords"), file=file, field=f"{name}.keywords")
        entries[name] = {k: v for k, v in entry.items() if k != "name"}
    return entries


def _skill_file(folder: Path) -> Path | None:
    for candidate in _LEGACY_SKILL_FILES:
        if (folder / candidate).is_file():
            return folder / candidate
    return None


def _read_one(folder: Path, registry_entry: Mapping[str, Any] | None) -> SkillSpec:
    skill_md = _skill_file(folder)
    assert skill_md is not None
    spec = parse_skill_md(
        _read_text(skill_md),
        source=str(skill_md),
        default_name=folder.name,
        registry_entry=registry_entry,
    )
    evals_path = folder / f"{spec.name}.evals.json"
    if evals_path.is_file():
        spec = SkillSpec(**{**_fields(spec), "evals": _read_evals(evals_path, spec.name)})
    return spec


def _fields(spec: SkillSpec) -> dict[str, Any]:
    return {f: getattr(spec, f) for f in spec.__dataclass_fields__}


def read_skills(path: str | Path) -> list[SkillSpec]:
    """Every skill under ``path``: a skills folder, one skill's folder or a SKILL.md."""
    root = Path(path)
    if not root.exists():
        raise SkillFileError("no such file or folder", file=str(root))
    if root.is_file():
        if root.name in _LEGACY_SKILL_FILES:
            return [_read_one(root.parent, None)]
        raise SkillFileError(f"expected a skills folder or a {SKILL_FILE}", file=str(root))
    if _skill_file(root) is not None:
        return [_read_one(root, None)]
    registry_path = root / REGISTRY_FILE
    registry = _read_registry(registry_path) if registry_path.is_file() else {}
    # A skill's name must equal its folder's, so two skills can never share a name.
    specs: list[SkillSpec] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if _skill_file(folder) is None:
            continue
        specs.append(_read_one(folder, registry.get(folder.name)))
    seen = {spec.name for spec in specs}
    for name in registry:
        if name not in seen:
            raise SkillFileError(
                f"lists skill {name!r} but there is no {name}/{SKILL_FILE}",
                file=str(registry_path),
                field=name,
            )
    if not specs:
        raise SkillFileError(
            f"no skills found (expected <name>/{SKILL_FILE} folders)", file=str(root)
        )
    return specs


def render_skill_md(spec: SkillSpec) -> str:
    """The SKILL.md text for a spec; :func:`parse_skill_md` reads it back equal."""
    meta: dict[str, Any] = {"name": spec.name, "description": spec.description}
    meta["triggers"] = list(spec.triggers)
    meta["keywords"] = list(spec.keywords)
    meta.update(spec.extra)
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{front}---\n\n{spec.content}"


def write_skill(spec: SkillSpec, folder: Path) -> list[Path]:
    """Write one skill's folder; returns the files written."""
    check_skill_name(spec.name)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / SKILL_FILE]
    (folder / SKILL_FILE).write_text(render_skill_md(spec), encoding="utf-8")
    evals_path = folder / f"{spec.name}.evals.json"
    if spec.evals is not None:
        doc = {"version": 1, "skill": spec.name, "rules": [dict(r) for r in spec.evals]}
        evals_path.write_text(
            json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        written.append(evals_path)
    elif evals_path.exists():
        evals_path.unlink()
    return written


def write_skills(specs: Iterable[SkillSpec], dest: str | Path) -> list[Path]:
    """Write each skill to ``dest/<name>/``; every name is checked before anything is
    written, so a bad one (a database restored from elsewhere) writes nothing."""
    root = Path(dest)
    specs = list(specs)
    for spec in specs:
        check_skill_name(spec.name)
    root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for spec in specs:
        written += write_skill(spec, root / spec.name)
    return written
