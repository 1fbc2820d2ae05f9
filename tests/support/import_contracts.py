"""An import-linter contract that no module takes part in an import cycle.

import-linter's own ``acyclic_siblings`` contract works at the level of packages: it
adds up every import between two sibling packages, so it would refuse a skill loop
where ``skills`` (the Agent Skills sync files proposals) and ``improve`` (approving a
proposal writes a skill) each use the other, although no *module* of one imports a
module that imports it back. What keeps code readable and importable in any order is
the module-level property, so that is what this contract checks: the modules under
``root_packages`` form no strongly connected component of more than one module, with
imports at any level that runs counted (inside functions too; the ``TYPE_CHECKING``
blocks are left out by the configuration, since they never run).

Registered in ``pyproject.toml`` as the ``acyclic_modules`` contract type.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

__all__ = ["AcyclicModulesContract", "cycles"]


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Every group of two or more ``modules`` that import one another, directly or
    through each other (Tarjan's strongly connected components, iteratively, so a deep
    graph needs no recursion); each group sorted, the groups sorted."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


class AcyclicModulesContract(Contract):
    """No module under ``packages`` imports, at any level, a module that imports it back,
    directly or through others."""

    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        modules: set[str] = set()
        for package in self.packages:  # type: ignore[attr-defined]
            modules |= {package, *graph.find_descendants(package)}
        found = cycles(graph, modules)
        return ContractCheck(kept=not found, metadata={"cycles": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for group in check.metadata["cycles"]:
            output.print_error(f"Import cycle among {len(group)} modules:", bold=True)
            for module in group:
                output.indent_cursor()
                output.print_error(module)
            output.new_line()

    def __repr__(self) -> str:
        packages: Any = self.packages  # type: ignore[attr-defined]
        return f"<AcyclicModulesContract {packages}>"
