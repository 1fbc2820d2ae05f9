"""The Python examples in the plugin and eval docs run, and do what the prose says.

Every ```python block of the documents in :data:`DOCUMENTS` is a test. A block whose
first line names a file (``# my_package/amelio_rules.py``) is a module of a plugin
package: it is written there, in a temporary folder on ``sys.path``, and imported,
as an installed plugin would be. Any other block runs as a script in a fresh
workspace (``AMELIO_WORKSPACE``); lines starting ``#>`` after it are what it must
print. A block that cannot run here says so in its info string, with the reason:
```` ```python {test="skip" reason="needs a running Vespa"} ````.

The custom rule type of evals.md is then installed the way the docs say, through
the entry point their ``pyproject.toml`` snippet declares, and checked against
what the prose promises.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from markdown_it import MarkdownIt

from amelio.errors import EvalRuleError
from amelio.evals import evaluate, parse_rules
from amelio.plugins import ENTRY_POINT_GROUPS, get_plugin_manager
from amelio.workspace.folder import init_workspace

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCUMENTS = ("plugins.md", "evals.md")

_MODULE_PATH = re.compile(r"#\s*([\w/]+\.py)\s*$")
_SKIP = re.compile(r'\{\s*test="skip"(?:\s+reason="(?P<reason>[^"]*)")?\s*\}')


@dataclass(frozen=True)
class Block:
    """One fenced block of a document."""

    document: str
    line: int  # of the opening fence, 1-based, as an editor shows it
    language: str
    info: str
    code: str

    @property
    def module_path(self) -> str | None:
        """``my_package/amelio_rules.py`` when the first line names the block's file."""
        match = _MODULE_PATH.fullmatch(self.code.splitlines()[0]) if self.code else None
        return match.group(1) if match else None

    @property
    def module_name(self) -> str | None:
        path = self.module_path
        return path.removesuffix(".py").replace("/", ".") if path else None

    def __str__(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(document: str) -> list[Block]:
    text = (DOCS / document).read_text(encoding="utf-8")
    return [
        Block(document, token.map[0] + 1, token.info.split()[0], token.info, token.content)
        for token in MarkdownIt().parse(text)
        if token.type == "fence" and token.info.split() and token.map
    ]


def python_blocks() -> list[Block]:
    return [b for doc in DOCUMENTS for b in blocks(doc) if b.language in ("python", "py")]


def _install(block: Block, root: Path) -> None:
    """Write a module block where its first line says, packages made on the way."""
    assert block.module_path is not None
    target = root / block.module_path
    target.parent.mkdir(parents=True, exist_ok=True)
    for folder in target.relative_to(root).parents:
        if folder != Path("."):
            (root / folder / "__init__.py").touch()
    target.write_text(block.code, encoding="utf-8")


@contextlib.contextmanager
def _on_path(root: Path, *packages: str) -> Iterator[None]:
    """ROOT on sys.path; the packages imported from it forgotten afterwards."""
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        importlib.invalidate_caches()
        for name in list(sys.modules):
            if name.split(".")[0] in packages:
                del sys.modules[name]


def _expected_output(code: str) -> list[str] | None:
    lines = [line.strip()[2:].strip() for line in code.splitlines() if line.strip()[:2] == "#>"]
    return lines or None


def test_the_documents_hold_examples() -> None:
    """The parametrized test below would pass vacuously if the parser found nothing."""
    found = python_blocks()
    assert found, "no ```python block found"
    assert any(b.module_path == "my_package/amelio_rules.py" for b in found)


@pytest.mark.parametrize("block", python_blocks(), ids=str)
def test_the_example_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    skip = _SKIP.search(block.info)
    if skip:
        assert skip.group("reason"), f'{block}: say why it is not run: reason="…"'
        pytest.skip(skip.group("reason"))
    if block.module_name:
        _install(block, tmp_path / "site")
        with _on_path(tmp_path / "site", block.module_name.split(".")[0]):
            module = importlib.import_module(block.module_name)
        assert isinstance(module, ModuleType)
        return
    ws, _ = init_workspace(tmp_path / "ws")
    ws.dispose()
    monkeypatch.setenv("AMELIO_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.chdir(tmp_path / "ws")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.code, str(block), "exec"), {"__name__": "__main__"})
    expected = _expected_output(block.code)
    if expected is not None:
        assert [line.rstrip() for line in out.getvalue().splitlines()] == expected, block


# -- the custom rule type of evals.md, installed as the docs say -------------------------


def _entry_points() -> dict[str, dict[str, str]]:
    """Every ``[project.entry-points.…]`` table of the documents' TOML blocks."""
    found: dict[str, dict[str, str]] = {}
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.language == "toml":
                tables = tomllib.loads(block.code).get("project", {}).get("entry-points", {})
                for group, names in tables.items():
                    found.setdefault(group, {}).update(names)
    return found


def test_the_entry_points_the_docs_declare_name_a_shown_module() -> None:
    modules = {b.module_name for b in python_blocks() if b.module_name}
    declared = _entry_points()
    assert declared
    for group, names in declared.items():
        assert group in ENTRY_POINT_GROUPS, group
        for name, target in names.items():
            assert target.split(":")[0] in modules, f"{group} {name} = {target!r}"


@pytest.fixture
def installed_rule_plugin(tmp_path: Path) -> Iterator[None]:
    """evals.md's module installed as a distribution with the entry point the docs
    declare, and a plugin manager built afresh, as a new process would."""
    (block,) = [b for b in blocks("evals.md") if b.module_name == "my_package.amelio_rules"]
    site = tmp_path / "site"
    _install(block, site)
    info = site / "my_package-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-package\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in names.items())
            for group, names in _entry_points().items()
        )
    )
    get_plugin_manager.cache_clear()
    try:
        with _on_path(site, "my_package"):
            yield
    finally:
        get_plugin_manager.cache_clear()


@pytest.mark.usefixtures("installed_rule_plugin")
def test_the_custom_rule_type_example_does_what_evals_md_says() -> None:
    rules = parse_rules([{"id": "calm", "name": "Calm", "type": "max_emoji", "max": 1}])
    assert evaluate("Merci 🎉", rules).success
    report = evaluate("Bravo 🎉🎉", rules)
    assert not report.success
    (failure,) = report.failed
    assert (failure.rule_id, failure.name) == ("calm", "Calm")
    assert "2 emoji" in failure.detail
    # A negated rule fails exactly when the check passes: the detail, which the check
    # writes either way, must still be true of the answer.
    negated = parse_rules([{"id": "n", "type": "max_emoji", "max": 1, "negate": True}])
    (failure,) = evaluate("Merci 🎉", negated).failed
    assert "1 emoji" in failure.detail
    assert "over" not in failure.detail
    # A bad value fails the load, naming the rule and the field, as built-in types do.
    with pytest.raises(EvalRuleError) as caught:
        parse_rules([{"id": "bad", "type": "max_emoji", "max": -1}])
    assert (caught.value.rule_id, caught.value.field) == ("bad", "max")
