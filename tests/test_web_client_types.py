"""amelio.js's hand-written type declarations (``.d.ts``) against its JSDoc.

The browser client is ES modules with no build step, so nothing generates its ``.d.ts``
files; instead this test reads both sides and fails when they drift: the exported names,
each JSDoc ``@typedef`` and its ``@property`` names (optional or not), and each exported
function's, class member's and object method's parameters (names, optional or not). Types
themselves are not compared: that would need TypeScript's compiler in ``make test``, and
the names and shapes are what a page's code breaks on.

The JavaScript is read by its layout (``export`` at the start of a line, class members
indented by two spaces, a class or object closed by a ``}`` or ``};`` alone on its
line), which the modules keep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parent.parent / "src" / "amelio" / "web" / "static"

#: Each declaration file, and the modules it types: the module the page imports first
#: (its exports are the declared values), then those that define what it re-exports.
DECLARATIONS: dict[str, list[str]] = {
    "amelio.d.ts": ["amelio.js", "amelio/feedback.js"],
    "amelio/compute.d.ts": ["amelio/compute.js"],
    "amelio/panel.d.ts": ["amelio/panel.js"],
}

#: Members a declaration may type for a class although the JavaScript inherits them.
INHERITED = {"EventTarget": {"addEventListener", "removeEventListener", "dispatchEvent"}}

IDENT = r"[A-Za-z_$][\w$]*"


@dataclass(frozen=True)
class Param:
    name: str
    optional: bool


#: A method's or function's parameters; None for a property (or a getter).
Signature = tuple[Param, ...] | None


@dataclass
class Api:
    """What one side declares."""

    values: set[str] = field(default_factory=set)
    #: type name -> its properties (name, optional) when it is an object type, else None
    types: dict[str, frozenset[tuple[str, bool]] | None] = field(default_factory=dict)
    #: types only imported from another module (JSDoc ``@typedef {import(…).X} X``)
    aliases: set[str] = field(default_factory=set)
    functions: dict[str, Signature] = field(default_factory=dict)
    #: class or exported object literal -> member -> signature
    members: dict[str, dict[str, Signature]] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)


# -- reading both sides ----------------------------------------------------------------


def _closing(text: str, start: int) -> int:
    """The index just past the bracket that closes the one at ``start``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[start]]]
    i = start + 1
    while stack:
        ch = text[i]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")}]":
            assert ch == stack.pop(), f"unbalanced {ch!r} at {i}: {text[start : i + 1]!r}"
        i += 1
    return i


def _split(text: str, sep: str) -> list[str]:
    """``text`` cut at each ``sep`` outside brackets, the pieces stripped, empty ones
    dropped."""
    pieces, depth, last = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == sep and depth == 0:
            pieces.append(text[last:i])
            last = i + 1
    pieces.append(text[last:])
    return [p.strip() for p in pieces if p.strip()]


def _jsdoc_optional(doc: str) -> set[str]:
    """The parameters a JSDoc block marks optional (``@param {T} [name]``)."""
    found = set()
    for m in re.finditer(r"@param\s+\{", doc):
        rest = doc[_closing(doc, m.end() - 1) :]
        if opt := re.match(rf"\s*\[({IDENT})", rest):
            found.add(opt.group(1))
    return found


def _js_params(text: str, doc: str) -> tuple[Param, ...]:
    optional = _jsdoc_optional(doc)
    params = []
    for piece in _split(text, ","):
        m = re.match(rf"(\.\.\.)?({IDENT})\s*(=)?", piece)
        assert m, f"a parameter this test cannot read: {piece!r}"
        name = m.group(2)
        params.append(Param(name, bool(m.group(1) or m.group(3)) or name in optional))
    return tuple(params)


def _doc_before(text: str, at: int) -> str:
    """The JSDoc block that ends just before ``at`` (whitespace between), or ''."""
    before = text[:at].rstrip()
    if not before.endswith("*/"):
        return ""
    return before[before.rindex("/**") :]


def _js_typedefs(source: str, api: Api) -> None:
    for block in re.findall(r"/\*\*.*?\*/", source, re.S):
        m = re.search(r"@typedef\s+\{", block)
        if not m:
            continue
        end = _closing(block, m.end() - 1)
        kind = block[m.end() : end - 1].strip()
        name = re.match(rf"\s*({IDENT})", block[end:])
        assert name, f"a typedef without a name: {block!r}"
        if kind.startswith("import("):
            api.aliases.add(name.group(1))
            continue
        props = None
        if kind in {"Object", "object"}:
            found = set()
            for p in re.finditer(r"@property\s+\{", block):
                rest = block[_closing(block, p.end() - 1) :]
                prop = re.match(rf"\s*(\[)?({IDENT})([.\w]*)", rest)
                assert prop, f"a property this test cannot read: {rest[:40]!r}"
                if not prop.group(3):  # `options.x` documents a part of a property
                    found.add((prop.group(2), bool(prop.group(1))))
            props = frozenset(found)
        api.types[name.group(1)] = props


def _js_body_members(source: str, start: int, end: int) -> dict[str, Signature]:
    """Public members of the class or object body ``source[start:end]``: methods and
    getters at two spaces' indent, and properties assigned as ``this.name =`` (not
    ``_name`` or ``#name``)."""
    body = source[start:end]
    members: dict[str, Signature] = {}
    member = re.compile(
        rf"^  (?:static\s+)?(?:async\s+)?(?:(get|set)\s+)?({IDENT}|#{IDENT})\s*(\(|,|:)", re.M
    )
    for m in member.finditer(body):
        name = m.group(2)
        if name.startswith(("_", "#")):
            continue
        if m.group(3) != "(" or m.group(1):
            members[name] = None
            continue
        opening = m.end() - 1
        doc = _doc_before(source, start + m.start())
        members[name] = _js_params(body[opening + 1 : _closing(body, opening) - 1], doc)
    for m in re.finditer(rf"\bthis\.({IDENT})\s*=(?!=)", body):
        if not m.group(1).startswith("_"):
            members.setdefault(m.group(1), None)
    return members


def read_js(sources: list[str]) -> Api:
    """The API of modules: the first one's exports, every one's typedefs, and the
    functions, classes and objects behind those exports."""
    api = Api()
    entry = sources[0]
    for m in re.finditer(
        rf"^export\s+(?:async\s+)?(?:const|function|class)\s+({IDENT})", entry, re.M
    ):
        api.values.add(m.group(1))
    for m in re.finditer(r"^export\s*\{(.*?)\}", entry, re.M | re.S):
        api.values.update(n.split(" as ")[-1].strip() for n in _split(m.group(1), ","))
    if re.search(r"^export default ", entry, re.M):
        api.values.add("default")
    for source in sources:
        _js_typedefs(source, api)
        for m in re.finditer(rf"^export\s+(?:async\s+)?function\s+({IDENT})\s*\(", source, re.M):
            start = m.end() - 1
            params = source[start + 1 : _closing(source, start) - 1]
            api.functions[m.group(1)] = _js_params(params, _doc_before(source, m.start()))
        heads = re.finditer(
            rf"^export\s+(?:class\s+({IDENT})(?:\s+extends\s+({IDENT}))?|const\s+({IDENT})\s*=)"
            r"\s*\{\n",
            source,
            re.M,
        )
        for m in heads:
            name = m.group(1) or m.group(3)
            end = re.compile(r"^\};?$", re.M).search(source, m.end())
            assert end, f"{name}: no closing brace alone on its line"
            api.members[name] = _js_body_members(source, m.end(), end.start())
            if m.group(2):
                api.bases[name] = m.group(2)
    api.functions = {k: v for k, v in api.functions.items() if k in api.values}
    api.members = {k: v for k, v in api.members.items() if k in api.values}
    return api


def _dts_params(text: str) -> tuple[Param, ...]:
    params = []
    for piece in _split(text, ","):
        m = re.match(rf"(\.\.\.)?({IDENT})(\?)?\s*:", piece)
        assert m, f"a parameter this test cannot read: {piece!r}"
        params.append(Param(m.group(2), bool(m.group(1) or m.group(3))))
    return tuple(params)


def _dts_members(body: str) -> dict[str, Signature]:
    members: dict[str, Signature] = {}
    for piece in _split(body, ";"):
        if piece.startswith("["):  # an index signature
            continue
        m = re.match(rf"(?:readonly\s+)?(?:static\s+)?({IDENT})(\?)?\s*([(:])", piece)
        assert m, f"a member this test cannot read: {piece!r}"
        if m.group(3) == ":":
            members[m.group(1)] = None
        else:
            start = m.end() - 1
            members[m.group(1)] = _dts_params(piece[start + 1 : _closing(piece, start) - 1])
    return members


def read_dts(source: str) -> Api:
    api = Api()
    text = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    for m in re.finditer(rf"^export\s+interface\s+({IDENT})[^{{]*\{{", text, re.M):
        body = text[m.end() : _closing(text, m.end() - 1) - 1]
        api.types[m.group(1)] = _interface_props(body)
    for m in re.finditer(rf"^export\s+type\s+({IDENT})\s*=", text, re.M):
        api.types[m.group(1)] = None
    for m in re.finditer(r"^export\s+type\s*\{(.*?)\}", text, re.M | re.S):
        for name in _split(m.group(1), ","):
            api.types[name] = None
    for m in re.finditer(
        rf"^export\s+(?:declare\s+)?(?:const|function|class)\s+({IDENT})", text, re.M
    ):
        api.values.add(m.group(1))
    if re.search(r"^export default ", text, re.M):
        api.values.add("default")
    for m in re.finditer(rf"^export\s+(?:declare\s+)?function\s+({IDENT})\s*\(", text, re.M):
        start = m.end() - 1
        api.functions[m.group(1)] = _dts_params(text[start + 1 : _closing(text, start) - 1])
    heads = re.finditer(
        rf"^export\s+(?:declare\s+)?(?:class\s+({IDENT})(?:\s+extends\s+({IDENT}))?|"
        rf"const\s+({IDENT})\s*:)\s*\{{",
        text,
        re.M,
    )
    for m in heads:
        name = m.group(1) or m.group(3)
        api.members[name] = _dts_members(text[m.end() : _closing(text, m.end() - 1) - 1])
        if m.group(2):
            api.bases[name] = m.group(2)
    return api


def _interface_props(body: str) -> frozenset[tuple[str, bool]]:
    """An interface's members, each with whether it is optional (``name?:``)."""
    optional = {
        m.group(1)
        for piece in _split(body, ";")
        if (m := re.match(rf"(?:readonly\s+)?({IDENT})\?", piece))
    }
    return frozenset((name, name in optional) for name in _dts_members(body))


# -- comparing them ----------------------------------------------------------------------


def _show(sig: Signature) -> str:
    if sig is None:
        return "a property"
    return "(" + ", ".join(p.name + ("?" if p.optional else "") for p in sig) + ")"


def drift(js: Api, dts: Api) -> list[str]:
    """What the declarations say that the JavaScript does not, and the reverse."""
    problems = []
    for name in sorted(js.values - dts.values):
        problems.append(f"{name}: exported by the module, not declared")
    for name in sorted(dts.values - js.values):
        problems.append(f"{name}: declared, not exported by the module")
    for name, props in sorted(js.types.items()):
        if name not in dts.types:
            problems.append(f"type {name}: a JSDoc typedef, not declared")
        elif props is not None and dts.types[name] != props:
            missing = sorted(props - (dts.types[name] or frozenset()))
            extra = sorted((dts.types[name] or frozenset()) - props)
            problems.append(f"type {name}: JSDoc only {missing}, declared only {extra}")
    for name in sorted(set(dts.types) - set(js.types) - js.aliases):
        problems.append(f"type {name}: declared, no JSDoc typedef")
    for name, sig in sorted(js.functions.items()):
        if name in dts.values and dts.functions.get(name, "") != sig:
            problems.append(f"{name}{_show(sig)} is declared {_show(dts.functions.get(name))}")
    for owner, members in sorted(js.members.items()):
        declared = dict(dts.members.get(owner, {}))
        for inherited in INHERITED.get(js.bases.get(owner, ""), set()):
            declared.pop(inherited, None)
        for name in sorted(set(members) | set(declared)):
            if name not in declared:
                problems.append(f"{owner}.{name}: in the module, not declared")
            elif name not in members:
                problems.append(f"{owner}.{name}: declared, not in the module")
            elif members[name] != declared[name]:
                problems.append(
                    f"{owner}.{name}{_show(members[name])} is declared {_show(declared[name])}"
                )
    return problems


def sides(dts: str) -> tuple[Api, Api]:
    modules = [(STATIC / m).read_text(encoding="utf-8") for m in DECLARATIONS[dts]]
    return read_js(modules), read_dts((STATIC / dts).read_text(encoding="utf-8"))


# -- the tests ---------------------------------------------------------------------------


def test_every_declaration_file_is_checked() -> None:
    found = {p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*.d.ts")}
    assert found == set(DECLARATIONS)


@pytest.mark.parametrize("dts", sorted(DECLARATIONS))
def test_the_declarations_match_the_jsdoc(dts: str) -> None:
    js, declared = sides(dts)
    assert drift(js, declared) == []


def test_drift_is_seen_on_either_side() -> None:
    """The check reads what it must: each kind of drift, made on purpose, is reported."""
    dts_text = (STATIC / "amelio.d.ts").read_text(encoding="utf-8")
    feedback = (STATIC / "amelio" / "feedback.js").read_text(encoding="utf-8")
    entry = (STATIC / "amelio.js").read_text(encoding="utf-8")

    def problems(dts: str = dts_text, js: str = feedback, first: str = entry) -> list[str]:
        return drift(read_js([first, js]), read_dts(dts))

    def edited(text: str, old: str, new: str) -> str:
        assert text.count(old) == 1, old
        return text.replace(old, new)

    assert problems() == []
    cases = [
        (  # a method no longer declared
            {"dts": edited(dts_text, "  loadCompute(): Promise<ComputeController>;\n", "")},
            "AmelioClient.loadCompute: in the module, not declared",
        ),
        (  # a property made required in the declaration only
            {"dts": edited(dts_text, "  maxBatch?: number;", "  maxBatch: number;")},
            "type InitOptions: JSDoc only [('maxBatch', True)], declared only "
            "[('maxBatch', False)]",
        ),
        (  # a parameter renamed in the module
            {"js": edited(feedback, "  pin(docId, options = {}) {", "  pin(id, options = {}) {")},
            "AmelioClient.pin(id, options?) is declared (docId, options?)",
        ),
        (  # an optional parameter that the JSDoc marks so, made required there
            {"js": edited(feedback, "   * @param {string} [reason]\n", "")},
            "AmelioClient.hide(docId, reason, options?) is declared (docId, reason?, options?)",
        ),
        (  # a new export of the entry module
            {"first": entry + "\nexport const LATER = 1;\n"},
            "LATER: exported by the module, not declared",
        ),
        (  # a typedef property the declaration lacks
            {"js": edited(feedback, " * @property {number} beacons\n", "")},
            "type AmelioStats: JSDoc only [], declared only [('beacons', False)]",
        ),
        (  # a new getter
            {"js": edited(feedback, "  get pending() {", "  get waiting() {")},
            "AmelioClient.pending: declared, not in the module",
        ),
        (  # an exported function's parameters
            {
                "js": edited(
                    feedback,
                    "export function similarity(a, b) {",
                    "export function similarity(a) {",
                )
            },
            "similarity(a) is declared (a, b)",
        ),
    ]
    for change, says in cases:
        assert says in problems(**change), (says, problems(**change))
