"""The built-in eval rule types, registered through the same hook as any plugin.

Each type is a factory: it validates a rule's parameters once (raising
:class:`~amelio.evals.RuleParamError` naming the field) and returns the check
that :func:`amelio.evals.engine.evaluate` calls on every answer.

``re2`` is imported when a pattern is first compiled, and ``jsonschema`` and
``referencing`` when a ``json_schema`` rule is: checking other rules (``amelio
eval``) does not pay for them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from amelio.evals.rules import (
    REGEX_MAX_MEM,
    REGEX_MAX_PATTERN_CHARS,
    REGEX_MAX_PROGRAM,
    REGEX_MAX_WORK,
    STRUCTURAL_MAX_CHARS,
    Check,
    RuleParamError,
    RuleType,
    Verdict,
    charge,
    json_kind,
)
from amelio.hookspecs import hookimpl

# --------------------------------------------------------------------------- parameters


def _clip(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _show(value: str) -> str:
    return repr(_clip(value))


def _show_all(values: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(_show(v) for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def _text(params: Mapping[str, Any], name: str, *, allow_empty: bool = False) -> str:
    value = params[name]
    if not isinstance(value, str):
        raise RuleParamError(name, f"must be a string, not {json_kind(value)}")
    if not value and not allow_empty:
        raise RuleParamError(name, "must not be empty (an empty string is in every answer)")
    return value


def _texts(params: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = params[name]
    if not isinstance(values, list | tuple) or not values:
        raise RuleParamError(name, f"must be a non-empty array of strings, not {json_kind(values)}")
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value:
            raise RuleParamError(
                name, f"item {i} must be a non-empty string, not {json_kind(value)}"
            )
    return tuple(values)


def _count(params: Mapping[str, Any], name: str) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleParamError(name, f"must be a whole number like 2000, not {json_kind(value)}")
    if value < 0:
        raise RuleParamError(name, f"must be 0 or more, not {value}")
    return value


def _flag(params: Mapping[str, Any], name: str, default: bool) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise RuleParamError(name, f"must be true or false, not {json_kind(value)}")
    return value


# --------------------------------------------------------------------------- built-in types


def _contains(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    yes = Verdict(True, f"answer contains {_show(value)}")
    no = Verdict(False, f"answer does not contain {_show(value)}")
    return lambda text: yes if value in text else no


def _not_contains(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    ok = Verdict(True, f"answer does not contain {_show(value)}")

    def check(text: str) -> Verdict:
        at = text.find(value)
        return (
            ok
            if at < 0
            else Verdict(False, f"answer contains {_show(value)} at character {at + 1:,}")
        )

    return check


def _icontains(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    needle = value.casefold()
    yes = Verdict(True, f"answer contains {_show(value)} (ignoring case)")
    no = Verdict(False, f"answer does not contain {_show(value)}, even ignoring case")
    return lambda text: yes if needle in text.casefold() else no


def _contains_any(params: Mapping[str, Any]) -> Check:
    values = _texts(params, "values")
    exact = _flag(params, "case_sensitive", True)
    pairs = [
        (v if exact else v.casefold(), Verdict(True, f"answer contains {_show(v)}")) for v in values
    ]
    no = Verdict(False, f"answer contains none of {_show_all(values)}")

    def check(text: str) -> Verdict:
        haystack = text if exact else text.casefold()
        for needle, yes in pairs:
            if needle in haystack:
                return yes
        return no

    return check


def _contains_all(params: Mapping[str, Any]) -> Check:
    values = _texts(params, "values")
    exact = _flag(params, "case_sensitive", True)
    needles = [(v if exact else v.casefold(), v) for v in values]
    yes = Verdict(True, f"answer contains all of {_show_all(values)}")

    def check(text: str) -> Verdict:
        haystack = text if exact else text.casefold()
        missing = [shown for needle, shown in needles if needle not in haystack]
        return Verdict(False, f"answer is missing {_show_all(missing)}") if missing else yes

    return check


def _starts_with(params: Mapping[str, Any]) -> Check:
    value = _text(params, "value")
    yes = Verdict(True, f"answer starts with {_show(value)}")

    def check(text: str) -> Verdict:
        body = text.lstrip()
        if body.startswith(value):
            return yes
        return Verdict(False, f"answer starts with {_show(body[: len(value)])}, not {_show(value)}")

    return check


def _equals(params: Mapping[str, Any]) -> Check:
    expected = _text(params, "value", allow_empty=True).strip()
    yes = Verdict(True, "answer equals the expected text")

    def check(text: str) -> Verdict:
        actual = text.strip()
        if actual == expected:
            return yes
        same = next(
            (i for i, (a, b) in enumerate(zip(actual, expected, strict=False)) if a != b),
            min(len(actual), len(expected)),
        )
        return Verdict(
            False,
            f"answer ({len(actual):,} chars) differs from the expected text "
            f"({len(expected):,} chars) from character {same + 1:,}",
        )

    return check


def _length(longest: bool) -> Callable[[Mapping[str, Any]], Check]:
    """max_length and min_length: length in characters (code points), as people count."""
    good, bad, bound = (
        ("within", "over", "maximum") if longest else ("at least", "under", "minimum")
    )

    def compile_length(params: Mapping[str, Any]) -> Check:
        limit = _count(params, "value")

        def check(text: str) -> Verdict:
            size = len(text)
            ok = size <= limit if longest else size >= limit
            return Verdict(
                ok, f"answer is {size:,} chars, {good if ok else bad} the {bound} of {limit:,}"
            )

        return check

    return compile_length


def _word_count(params: Mapping[str, Any]) -> Check:
    low = _count(params, "min") if "min" in params else None
    high = _count(params, "max") if "max" in params else None
    if low is None and high is None:
        raise RuleParamError("min", "a word_count rule needs min, max or both")
    if low is not None and high is not None and low > high:
        raise RuleParamError("max", f"must be at least min ({low}), not {high}")

    def check(text: str) -> Verdict:
        words = len(text.split())
        if low is not None and words < low:
            return Verdict(False, f"answer has {words:,} words, under the minimum of {low:,}")
        if high is not None and words > high:
            return Verdict(False, f"answer has {words:,} words, over the maximum of {high:,}")
        return Verdict(True, f"answer has {words:,} words, within bounds")

    return check


def _not_empty(params: Mapping[str, Any]) -> Check:
    yes = Verdict(True, "answer is not empty")
    no = Verdict(False, "answer is empty or only whitespace")
    return lambda text: no if not text or text.isspace() else yes


# -- regex


def _compile_pattern(params: Mapping[str, Any]) -> tuple[Any, str]:
    pattern = _text(params, "pattern")
    flags = params.get("flags", "")
    if not isinstance(flags, str) or set(flags) - set("ims") or len(set(flags)) != len(flags):
        raise RuleParamError("flags", f"must be letters among i, m, s (each once), not {flags!r}")
    if len(pattern) > REGEX_MAX_PATTERN_CHARS:
        raise RuleParamError(
            "pattern", f"is {len(pattern):,} chars, over the limit of {REGEX_MAX_PATTERN_CHARS:,}"
        )
    try:
        regex = _re2(f"(?{flags}){pattern}" if flags else pattern)
    except ValueError as exc:
        raise RuleParamError("pattern", str(exc)) from None
    if regex.programsize > REGEX_MAX_PROGRAM:
        raise RuleParamError(
            "pattern",
            f"is too complex for the regex engine (program size "
            f"{regex.programsize:,}, limit {REGEX_MAX_PROGRAM:,}); "
            "use smaller repetition counts like {1,50}",
        )
    return regex, pattern


class RegexTooCostly(Exception):
    """A regex check refused because this text would make it slow; recorded as an
    errored (failed) result, never a hang."""


def _search(regex: Any, data: bytes) -> Any:
    work = regex.programsize * len(data)
    if work > REGEX_MAX_WORK:
        raise RegexTooCostly(
            f"pattern too complex for a text of {len(data):,} bytes (program "
            f"size {regex.programsize:,}); simplify it or shorten the text"
        )
    charge(work // 1000 + 1)  # about a nanosecond per unit: budget units are microseconds
    return regex.search(data)


@functools.lru_cache(maxsize=512)
def _re2(pattern: str) -> Any:
    """Compile for RE2 under a memory cap. Patterns are compiled as UTF-8 bytes and
    answers encoded once per check: that keeps RE2's UTF-8 semantics (``.`` is one
    character) without the wrapper's per-match offset bookkeeping."""
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.max_mem = REGEX_MAX_MEM
    options.log_errors = False
    try:
        return re2.compile(pattern.encode("utf-8"), options)
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode text") from None
    except re2.error as exc:
        reason = exc.args[0] if exc.args else ""
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        if "too large" in reason:
            raise ValueError(
                f"is too large for the regex engine's {REGEX_MAX_MEM >> 20} MiB budget; simplify it"
            ) from None
        raise ValueError(
            f"RE2 cannot compile it ({reason}); patterns use RE2 syntax: no "
            "backreferences like \\1 and no lookaround like (?=…) or (?<!…)"
        ) from None


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _regex_match(params: Mapping[str, Any]) -> Check:
    regex, pattern = _compile_pattern(params)
    yes = Verdict(True, f"answer matches /{_clip(pattern)}/")
    no = Verdict(False, f"answer does not match /{_clip(pattern)}/")
    return lambda text: no if _search(regex, _encode(text)) is None else yes


def _regex_not_match(params: Mapping[str, Any]) -> Check:
    regex, pattern = _compile_pattern(params)
    ok = Verdict(True, f"answer does not match /{_clip(pattern)}/")

    def check(text: str) -> Verdict:
        data = _encode(text)
        found = _search(regex, data)
        if found is None:
            return ok
        # The matched text is not echoed: these rules often guard against leaked secrets.
        at = len(data[: found.start()].decode("utf-8", "surrogatepass"))
        return Verdict(False, f"answer matches /{_clip(pattern)}/ at character {at + 1:,}")

    return check


# -- JSON


def _json_payload(text: str) -> str:
    """The answer, or the inside of the single fenced block it consists of: models
    asked for JSON often wrap it in ```json … ```, and that is still a JSON answer."""
    body = text.strip()
    if len(body) >= 6 and body.startswith("```") and body.endswith("```"):
        newline = body.find("\n")
        if newline > 0 and body[3:newline].strip().lower() in ("", "json"):
            return body[newline + 1 : -3]
    return body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class AnswerTooLarge(Exception):
    """An answer over the structural rules' size limit; recorded as an errored result."""


#: Largest schema, as JSON characters, a json_schema rule may hold (checked at load).
SCHEMA_MAX_CHARS = 64_000
#: Budget units per JSON Schema keyword applied to one value (measured 2-5 µs).
_KEYWORD_COST = 5


def _load_json(text: str) -> tuple[Any, str | None]:
    if len(text) > STRUCTURAL_MAX_CHARS:
        raise AnswerTooLarge(
            f"answer is {len(text):,} characters; structural rules parse at "
            f"most {STRUCTURAL_MAX_CHARS:,}"
        )
    charge(len(text) // 100 + 1)  # json.loads: about 10 ns a character
    try:
        return json.loads(_json_payload(text), parse_constant=_reject_constant), None
    except json.JSONDecodeError as exc:
        return None, f"answer is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    except (ValueError, RecursionError) as exc:
        return None, f"answer is not valid JSON: {exc}"


def _is_json(params: Mapping[str, Any]) -> Check:
    yes = Verdict(True, "answer is valid JSON")

    def check(text: str) -> Verdict:
        problem = _load_json(text)[1]
        return yes if problem is None else Verdict(False, problem)

    return check


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's ``pattern`` keyword on RE2 instead of Python's backtracking ``re``."""
    if validator.is_type(instance, "string") and _search(_re2(pattern), _encode(instance)) is None:
        import jsonschema  # type: ignore[import-untyped]

        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _canonical(value: Any) -> Any:
    """JSON Schema equality: 1 and 1.0 are equal, true and 1 are not."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``uniqueItems`` in linear time: jsonschema compares every pair, which a long
    answer turns into minutes."""
    if not unique or not validator.is_type(instance, "array"):
        return
    charge(len(instance))  # one canonical dump per item: about a microsecond each
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_canonical(item), sort_keys=True)
        if key in seen:
            import jsonschema

            yield jsonschema.ValidationError(f"array has non-unique elements ({key[:60]})")
            return
        seen.add(key)


_RE2_VALIDATORS: dict[Any, Any] = {}


def _charged(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """``keyword`` charging the work budget each time it is applied to a value: a
    schema's cost is its keywords times the values they reach, which only the walk
    itself can count."""

    def apply(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        charge(_KEYWORD_COST)
        return keyword(validator, value, instance, schema)

    return apply


def _validator_class(base: Any) -> Any:
    """``base`` with RE2 patterns, linear ``uniqueItems`` and every keyword charged."""
    if base not in _RE2_VALIDATORS:
        import jsonschema

        keywords = dict(base.VALIDATORS) | {"pattern": _re2_pattern, "uniqueItems": _unique_items}
        _RE2_VALIDATORS[base] = jsonschema.validators.extend(
            base, {name: _charged(fn) for name, fn in keywords.items()}
        )
    return _RE2_VALIDATORS[base]


def _schema_patterns(node: Any, path: str = "schema") -> Iterator[tuple[str, str]]:
    """Every ``pattern`` in a schema, so RE2 can reject bad ones at load time. Refuses
    ``patternProperties``: jsonschema would match it with Python's ``re``, which a
    hostile answer could make backtrack for hours."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("const", "enum", "examples", "default"):
                continue
            if key == "patternProperties":
                raise RuleParamError(
                    "schema",
                    f"{path}.patternProperties is not supported "
                    "(it would run on a backtracking regex engine)",
                )
            if key == "pattern" and isinstance(value, str):
                yield f"{path}.pattern", value
            else:
                yield from _schema_patterns(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _schema_patterns(item, f"{path}[{i}]")


def _refs(node: Any, path: str = "schema") -> Iterator[tuple[str, str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("const", "enum", "examples", "default"):
                continue
            if key == "$ref" and isinstance(value, str):
                yield path, value
            else:
                yield from _refs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _refs(item, f"{path}[{i}]")


def _check_refs(schema: Mapping[str, Any], base: Any) -> None:
    """Every ``$ref`` must resolve inside the schema now: nothing is fetched over the
    network, and a dangling reference would otherwise fail every later check."""
    refs = list(_refs(schema))
    if not refs:
        return
    import referencing
    import referencing.exceptions
    import referencing.jsonschema

    dialect = (
        schema.get("$schema") or base.META_SCHEMA.get("$schema") or base.META_SCHEMA.get("$id")
    )
    spec = referencing.jsonschema.specification_with(
        dialect, default=referencing.jsonschema.DRAFT202012
    )
    resolver = (
        referencing.Registry()
        .with_resource("urn:amelio:schema", spec.create_resource(dict(schema)))
        .resolver("urn:amelio:schema")
    )
    for where, ref in refs:
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            raise RuleParamError(
                "schema",
                f"{where}.$ref {ref!r} does not resolve inside the "
                "schema (remote references are not fetched)",
            ) from None


def _json_schema(params: Mapping[str, Any]) -> Check:
    import jsonschema
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

    schema = params["schema"]
    if not isinstance(schema, Mapping):
        raise RuleParamError("schema", f"must be a JSON Schema object, not {json_kind(schema)}")
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        raise RuleParamError(
            "schema", "must be plain JSON (objects, arrays, strings, numbers)"
        ) from None
    if size > SCHEMA_MAX_CHARS:
        raise RuleParamError(
            "schema",
            f"is {size:,} characters of JSON; a rule's schema is at most {SCHEMA_MAX_CHARS:,}",
        )
    latest = jsonschema.Draft202012Validator
    if "$schema" in schema and jsonschema.validators.validator_for(schema, default=None) is None:
        raise RuleParamError(
            "schema",
            f"unknown $schema {schema['$schema']!r}; use a JSON "
            "Schema draft jsonschema knows, or leave $schema out",
        )
    base = jsonschema.validators.validator_for(schema, default=latest)
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise RuleParamError(
            "schema", f"is not a valid JSON Schema at '{where}': {exc.message}"
        ) from None
    for where, pattern in _schema_patterns(schema):
        try:
            compiled = _re2(pattern)
        except ValueError as exc:
            raise RuleParamError("schema", f"{where} {exc}") from None
        if compiled.programsize > REGEX_MAX_PROGRAM:
            raise RuleParamError("schema", f"{where} is too complex for the regex engine")
    _check_refs(schema, base)
    validator = _validator_class(base)(dict(schema))
    yes = Verdict(True, "answer JSON matches the schema")

    def check(text: str) -> Verdict:
        data, problem = _load_json(text)
        if problem is not None:
            return Verdict(False, problem)
        error = best_match(validator.iter_errors(data))
        if error is None:
            return yes
        return Verdict(
            False,
            f"answer JSON does not match the schema at {error.json_path}: {error.message[:200]}",
        )

    return check


_BUILTIN_TYPES = (
    RuleType("string_contains", _contains, ("value",), description="contains a literal string"),
    RuleType(
        "string_not_contains",
        _not_contains,
        ("value",),
        description="does not contain a literal string",
    ),
    RuleType("icontains", _icontains, ("value",), description="contains a string, any case"),
    RuleType(
        "contains_any",
        _contains_any,
        ("values",),
        ("case_sensitive",),
        description="contains at least one of the strings",
    ),
    RuleType(
        "contains_all",
        _contains_all,
        ("values",),
        ("case_sensitive",),
        description="contains every one of the strings",
    ),
    RuleType(
        "starts_with",
        _starts_with,
        ("value",),
        description="starts with a string, leading whitespace ignored",
    ),
    RuleType(
        "equals", _equals, ("value",), description="equals a string, surrounding whitespace ignored"
    ),
    RuleType(
        "regex_match",
        _regex_match,
        ("pattern",),
        ("flags",),
        description="matches an RE2 regex somewhere",
    ),
    RuleType(
        "regex_not_match",
        _regex_not_match,
        ("pattern",),
        ("flags",),
        description="matches an RE2 regex nowhere",
    ),
    RuleType(
        "max_length",
        _length(longest=True),
        ("value",),
        description="at most N characters (code points, not bytes)",
    ),
    RuleType(
        "min_length",
        _length(longest=False),
        ("value",),
        description="at least N characters (code points, not bytes)",
    ),
    RuleType(
        "word_count",
        _word_count,
        (),
        ("min", "max"),
        description="whitespace-separated word count within min and/or max",
    ),
    RuleType("not_empty", _not_empty, description="has something besides whitespace"),
    RuleType("is_json", _is_json, description="is JSON, or a single ```json fenced block of it"),
    RuleType(
        "json_schema", _json_schema, ("schema",), description="its JSON satisfies a JSON Schema"
    ),
)


#: The built-in types by name. A plugin cannot take one of these names (built-ins
#: register first), so rules that use only these need no plugin discovery.
BUILTIN_RULE_TYPES: dict[str, RuleType] = {t.name: t for t in _BUILTIN_TYPES}


@hookimpl
def register_rule_types(register: Callable[[RuleType], None]) -> None:
    """The built-ins go through the same hook as any plugin, so plugins are first-class."""
    for rule_type in _BUILTIN_TYPES:
        register(rule_type)
