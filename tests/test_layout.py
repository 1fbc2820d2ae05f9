"""The house rules that keep the layout readable: few loose modules at the top of the
package, the repository's test kit out of the wheel, and the import contract's own
cycle finder doing what it says (``lint-imports`` runs the contracts in ``make test``)."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import grimp
import pytest

from support.import_contracts import cycles

SRC = Path(__file__).resolve().parent.parent / "src" / "amelio"
#: Modules that may sit at the top of src/amelio/ besides __init__ and __main__; the rest
#: live in the package of the loop (or the face) they belong to.
MAX_LOOSE_MODULES = 8


def test_at_most_eight_loose_modules_at_the_top() -> None:
    loose = sorted(p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_the_installed_package_imports_no_test_kit() -> None:
    """``tests/fakes`` and ``tests/support`` are repository plumbing: a module of the
    wheel that imported them would fail for every user."""
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n.split(".")[0] in {"fakes", "support", "tests"} for n in names):
                offenders.append(str(path.relative_to(SRC)))
    assert offenders == []


def _graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    return graph


@pytest.mark.parametrize(
    ("imports", "expected"),
    [
        ((("p.a", "p.b"), ("p.b", "p.c")), []),
        ((("p.a", "p.b"), ("p.b", "p.a")), [["p.a", "p.b"]]),
        (
            (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e")),
            [["p.a", "p.b", "p.c"]],
        ),
        (
            (("p.a", "p.b"), ("p.b", "p.a"), ("p.c", "p.d"), ("p.d", "p.c"), ("p.b", "p.c")),
            [["p.a", "p.b"], ["p.c", "p.d"]],
        ),
    ],
)
def test_the_cycle_finder_reports_each_cycle_once(
    imports: tuple[tuple[str, str], ...], expected: list[list[str]]
) -> None:
    graph = _graph(*imports)
    assert cycles(graph, set(graph.modules)) == expected


def test_the_cycle_finder_handles_a_long_chain_without_recursion() -> None:
    chain = [f"p.m{i}" for i in range(5000)]
    graph = _graph(*itertools.pairwise(chain), (chain[-1], chain[0]))
    assert cycles(graph, set(graph.modules)) == [sorted(chain)]


def test_every_part_of_the_package_has_a_layer() -> None:
    """The layers contract names what it constrains: a new package (or a new module of
    ``ops/``, whose modules sit in different layers) left out of it would escape it."""
    import tomllib

    config = tomllib.loads((SRC.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    named = {m.strip() for layer in layers for m in re.split(r"[|:]", layer)}
    parts = {
        f"amelio.{p.stem if p.is_file() else p.name}"
        for p in SRC.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists() and p.name != "ops")
        or (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
    } | {f"amelio.ops.{p.stem}" for p in (SRC / "ops").glob("*.py") if p.stem != "__init__"}
    # the plugin authors' kit stands beside the layers: nothing of Amelio's imports it
    assert parts - named - {"amelio.testing"} == set()
