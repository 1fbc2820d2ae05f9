"""The public API, settings, hooks and commands are all documented; the generated
reference tables match the code; the docs' links hold; and no docstring points into
a document its reader does not have."""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import click
import pytest
from markdown_it import MarkdownIt
from pydantic import BaseModel, Field, SecretStr

import amelio
from amelio import hookspecs
from amelio.cli import main
from amelio.cli._docs import (
    cell,
    command_table,
    help_line,
    leaf_commands,
    settings_table,
    synopsis,
)
from amelio.workspace.config import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_public_api_is_curated() -> None:
    assert sorted(amelio.__all__) == amelio.__all__, "keep __all__ sorted"
    for name in amelio.__all__:
        assert hasattr(amelio, name), name
    public = {n for n in dir(amelio) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(amelio, n)).__name__ == "module"}
    assert public - modules == set(amelio.__all__) - {"__version__"}


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    for name in Settings.model_fields:
        assert f"`{name}`" in text, name
        assert f"`AMELIO_{name.upper()}`" in text, name


def _signature(hook: Callable[..., object]) -> str:
    """The hook as its spec declares it, annotations as written."""

    def written(annotation: object) -> str:
        return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)

    signature = inspect.signature(hook)
    params = ", ".join(f"{p.name}: {written(p.annotation)}" for p in signature.parameters.values())
    return f"{hook.__name__}({params}) -> {written(signature.return_annotation)}"


def test_every_hook_is_documented_with_its_signature() -> None:
    """Plugin authors write their hooks from the docs, so each heading is the spec's
    whole signature: what ``register`` takes included."""
    text = (DOCS / "plugins.md").read_text()
    hooks = [getattr(hookspecs, n) for n in dir(hookspecs) if n.startswith("register_")]
    assert hooks
    for hook in hooks:
        assert f"### `{_signature(hook)}`" in text, _signature(hook)


def test_every_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()

    def walk(cmd: click.Command | None, path: list[str]) -> list[str]:
        assert cmd is not None, path
        if isinstance(cmd, click.Group):  # the root group imports its commands on demand
            ctx = click.Context(cmd)
            return [
                p
                for name in cmd.list_commands(ctx)
                for p in walk(cmd.get_command(ctx, name), [*path, name])
            ]
        return [" ".join(path)]

    for command in walk(main, []):
        assert f"amelio {command}" in text, command


# -- the generated reference tables ---------------------------------------------------------


def test_every_command_is_in_exactly_one_generated_table() -> None:
    """A new command must be placed in a section of cli.md (a cog block naming it),
    and the row there must be the one its click definition generates now."""
    text = (DOCS / "cli.md").read_text()
    for path, command in leaf_commands():
        row = f"| `{cell(synopsis(command, ['amelio', *path]))}` |"
        assert text.count(row) == 1, f"amelio {' '.join(path)}: {text.count(row)} rows"


def test_a_table_naming_an_unknown_command_fails() -> None:
    with pytest.raises(ValueError, match="no command `amelio skills nope`"):
        command_table("skills nope")


def test_a_synopsis_shows_arguments_then_required_then_optional_options() -> None:
    @click.command()
    @click.argument("files", nargs=-1, required=True)
    @click.argument("target", required=False)
    @click.option("--limit", type=int, default=5)
    @click.option("--notebook", required=True)
    @click.option("--format", type=click.Choice(["table", "json"]))
    @click.option("--skill", "skills", multiple=True)
    @click.option("--swap/--no-swap", default=True)
    @click.option("--out", type=click.Path(file_okay=False))
    @click.option("--map", metavar="ACTION=TYPE")
    @click.option("--json", "as_json", is_flag=True)
    @click.option("--secret", hidden=True)
    def cmd(**_: object) -> None:
        """Do it.

        \b
        Exit 1 on failure.\f
        Not for users."""

    assert synopsis(cmd, ["amelio", "x"]) == (
        "amelio x FILES… [TARGET] --notebook NOTEBOOK [--limit N] [--format table|json] "
        "[--skill SKILLS]… [--swap/--no-swap] [--out DIR] [--map ACTION=TYPE] [--json]"
    )
    assert help_line(cmd) == "Do it. Exit 1 on failure."


def test_a_cell_escapes_pipes_everywhere_and_tags_outside_code() -> None:
    assert cell("a | b <dir> `x|y <z>`\n  c") == "a \\| b &lt;dir> `x\\|y <z>` c"


def test_the_settings_table_reads_types_bounds_and_defaults() -> None:
    class Demo(BaseModel):
        profile: Literal["bm25", "hybrid"] = Field(default="bm25", description="Rank | profile.")
        enabled: bool = Field(default=False, description="On or off.")
        key: SecretStr = Field(default=SecretStr(""), description="A key.")
        share: float = Field(default=0.1, ge=0, le=0.5, description="A share.")
        confidence: float = Field(default=0.95, gt=0.5, lt=1, description="Sure.")
        batch: int = Field(default=64, ge=1, description="Per task.")
        threshold: float | None = Field(default=None, description="Learned when unset.")
        url: str = Field(default="", description="Empty means <workspace>.")

    rows = settings_table(Demo).splitlines()[2:]
    assert rows == [
        "| `profile` | `AMELIO_PROFILE` | `bm25` | `bm25`, `hybrid` | Rank \\| profile. |",
        "| `enabled` | `AMELIO_ENABLED` | `false` | `true`, `false` | On or off. |",
        "| `key` | `AMELIO_KEY` | empty | text, masked | A key. |",
        "| `share` | `AMELIO_SHARE` | `0.1` | number, 0 to 0.5 | A share. |",
        "| `confidence` | `AMELIO_CONFIDENCE` | `0.95` | number, > 0.5 and &lt; 1 | Sure. |",
        "| `batch` | `AMELIO_BATCH` | `64` | integer, ≥ 1 | Per task. |",
        "| `threshold` | `AMELIO_THRESHOLD` | unset | number, or unset | Learned when unset. |",
        "| `url` | `AMELIO_URL` | empty | text | Empty means &lt;workspace>. |",
    ]


# -- the docs hold together -----------------------------------------------------------------


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings_and_links(path: Path) -> tuple[set[str], list[str]]:
    headings: set[str] = set()
    links: list[str] = []
    tokens = MarkdownIt().parse(path.read_text(encoding="utf-8"))
    for previous, token in zip([None, *tokens], tokens, strict=False):
        if token.type == "inline" and previous is not None and previous.type == "heading_open":
            headings.add(_slug("".join(child.content for child in token.children or [])))
        for child in token.children or []:
            if child.type == "link_open":
                links.append(str(child.attrs["href"]))
    return headings, links


def test_every_relative_link_in_the_docs_resolves() -> None:
    """A renamed heading or page breaks the links to it; this says which."""
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    anchors = {page.resolve(): _headings_and_links(page)[0] for page in pages}
    broken = []
    for page in pages:
        for href in _headings_and_links(page)[1]:
            if re.match(r"[a-z][a-z0-9+.-]*:|/", href):  # another site, or the service's
                continue
            path, _, anchor = href.partition("#")
            target = (page.parent / path).resolve() if path else page.resolve()
            if not target.exists():
                broken.append(f"{page.name}: {href} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors.get(target, set()):
                broken.append(f"{page.name}: {href} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_lists_every_doc_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listing = readme[readme.index("**Docs:**") :].split("\n\n")[0]
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"(docs/{p.name})" not in listing]
    assert not missing, f"add {missing} to the docs list at the top of README.md"


# -- docstrings say what a thing means, not where it was specified --------------------------

#: The forms a pointer into a source document or the issue tracker takes (a seed's
#: pillar or document number, a section sign, an issue number): a reader of the code
#: does not have those documents. A public standard's section ("RFC 4648" and a
#: section sign) is a reference anyone can follow, so it is allowed.
CITATION = re.compile(r"\bseed (?:pillar|\d{3})|\bpillar \d|§|\bissue #?\d|\(#\d+\)", re.I)
STANDARD = re.compile(r"\bRFC \d+ §")


def _citations(path: Path) -> list[tuple[int, str]]:
    """(line, citation) for each docstring or comment of PATH that cites one."""
    source = path.read_text(encoding="utf-8")
    texts: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                texts.append((node.body[0].lineno, doc))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            texts.append((token.start[0], token.string))
    return sorted(
        (line, m.group()) for line, text in texts if (m := CITATION.search(STANDARD.sub("", text)))
    )


def test_no_docstring_or_comment_cites_a_source_document_or_an_issue() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {citation!r}"
        for folder in ("src", "tests", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, citation in _citations(path)
    ]
    assert not found, "say what it means instead:\n" + "\n".join(found)


def test_the_citation_check_reads_docstrings_and_comments_only(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Routing (seed pillar 2)."""\n'
        "# Search (issue 9).\n"
        "def f():\n"
        '    """Shape of §3.2; see RFC 4648 §4."""\n'
        '    return "ticket #12 (#19) is data, not a citation"  # fixed in (#19)\n'
    )
    assert _citations(module) == [(1, "seed pillar"), (2, "issue 9"), (4, "§"), (5, "(#19)")]


def test_readme_shows_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text
    assert "make test" in text
