"""Many outputs checked in one run: ``amelio eval --batch outputs.jsonl``.

A CI job that gates on eval rules checks hundreds or thousands of outputs; one
process per output pays the start-up every time, while the checks themselves
take microseconds. A batch is read whole and checked before anything is
reported, so a malformed line stops the run (exit 2) with its line number
instead of gating on half a file.

Two inputs are read:

* JSON lines, one output each: ``{"id", "text", "skill" | "rules", "project"}``;
  ``skill`` names a skill whose rules apply, ``rules`` is a list of rules (the
  seed's format); without either, the command's ``--skill`` or ``--rules`` apply;
* promptfoo's output JSON (``promptfoo eval -o out.json``): every result's
  ``response.output``, checked against the command's ``--skill`` or ``--rules``.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amelio import evals
from amelio.errors import InvalidInput

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

__all__ = [
    "BatchItem",
    "BatchResult",
    "check_batch",
    "junit_suite",
    "parse_batch",
    "render_junit",
    "render_markdown",
]

#: The most outputs one batch takes (a larger file is refused, not half-read).
MAX_OUTPUTS = 100_000
Rules = tuple[evals.EvalRule, ...]


@dataclass(frozen=True)
class BatchItem:
    """One output to check: ``skill`` or ``rules`` when the line names its own."""

    id: str
    text: str
    where: str
    skill: str | None = None
    project: str | None = None
    rules: Rules | None = None


@dataclass(frozen=True)
class BatchResult:
    item: BatchItem
    report: evals.EvalReport
    suite: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.item.id,
            "suite": self.suite,
            "success": self.report.success,
            "passed": self.report.passed_count,
            "failed": len(self.report.failed),
            "failures": [r.to_dict() for r in self.report.failed],
        }


def _promptfoo_outputs(data: dict[str, Any], name: str) -> list[BatchItem]:
    results = data.get("results")
    rows = results.get("results") if isinstance(results, dict) else results
    if not isinstance(rows, list):
        raise InvalidInput(f"{name}: a promptfoo output file has results.results, a list.")
    items = []
    for n, row in enumerate(rows):
        response = row.get("response") if isinstance(row, dict) else None
        output = response.get("output") if isinstance(response, dict) else None
        if not isinstance(output, str):
            raise InvalidInput(f"{name}: results[{n}] has no response.output text.")
        test = row.get("testIdx", n) if isinstance(row, dict) else n
        prompt = row.get("promptIdx", 0) if isinstance(row, dict) else 0
        items.append(BatchItem(f"test-{test}-prompt-{prompt}", output, f"{name} results[{n}]"))
    return items


def parse_batch(text: str, name: str, *, max_chars: int) -> list[BatchItem]:
    """The outputs of a batch file (JSON lines, or promptfoo's output JSON), or
    :class:`InvalidInput` naming the first bad line."""
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n" in stripped.rstrip():
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # JSON lines whose first line is an object: read as lines
        if isinstance(whole, dict) and "results" in whole:
            return _promptfoo_outputs(whole, name)
    items: list[BatchItem] = []
    # Lines usually repeat the same rules (promptfoo's defaultTest, one gate's rules):
    # each distinct list is validated and compiled once.
    parsed: dict[bytes, tuple[evals.EvalRule, ...]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where}: not valid JSON ({exc.msg}).") from exc
        if not isinstance(record, dict):
            raise InvalidInput(f"{where}: an output is a JSON object with id and text.")
        output = record.get("text")
        if not isinstance(output, str):
            raise InvalidInput(
                f'{where}: "text" (the output to check) must be a string.', field="text"
            )
        if len(output) > max_chars:
            raise InvalidInput(
                f"{where}: the text is over {max_chars:,} characters (AMELIO_MAX_TEXT_CHARS).",
                field="text",
            )
        skill, project, raw_rules = record.get("skill"), record.get("project"), record.get("rules")
        if skill is not None and raw_rules is not None:
            raise InvalidInput(f'{where}: give "skill" or "rules", not both.')
        for key, value in (("skill", skill), ("project", project)):
            if value is not None and not isinstance(value, str):
                raise InvalidInput(f'{where}: "{key}" must be a string.', field=key)
        rules: Rules | None = None
        if raw_rules is not None:
            if not isinstance(raw_rules, list):
                raise InvalidInput(f'{where}: "rules" must be a list of rules.', field="rules")
            # marshal is exact (True, 1 and 1.0 differ) and ~7x cheaper than a JSON dump.
            rules_key = marshal.dumps(raw_rules)
            rules = parsed.get(rules_key)
            if rules is None:
                rules = parsed[rules_key] = evals.parse_rules(raw_rules, source=where)
        items.append(BatchItem(str(record.get("id", number)), output, where, skill, project, rules))
        if len(items) > MAX_OUTPUTS:
            raise InvalidInput(f"{name}: over {MAX_OUTPUTS:,} outputs; split the file.")
    if not items:
        raise InvalidInput(f"{name}: no outputs to check.")
    return items


def check_batch(
    items: list[BatchItem], rules_for: Callable[[BatchItem], tuple[Rules, str]], *, max_chars: int
) -> list[BatchResult]:
    """Every output checked against its rules; ``rules_for`` resolves (and caches)
    the rules of an item that does not carry its own."""
    results = []
    for item in items:
        rules, suite = (item.rules, item.where) if item.rules is not None else rules_for(item)
        results.append(
            BatchResult(item, evals.evaluate(item.text, rules, max_chars=max_chars), suite)
        )
    return results


def junit_suite(
    parent: ET.Element | None, name: str, classname: str, report: evals.EvalReport
) -> ET.Element:
    """One JUnit test suite for a report, a case per rule: failed warnings are
    failures, rules that could not be checked errors, failed infos pass with a
    note, so a CI dashboard matches the exit code."""
    import xml.etree.ElementTree as ET

    attributes = {
        "name": name,
        "tests": str(len(report.results)),
        "failures": str(sum(1 for r in report.failed if r.severity == "warning" and not r.error)),
        "errors": str(sum(1 for r in report.failed if r.severity == "warning" and r.error)),
    }
    suite = (
        ET.Element("testsuite", attributes)
        if parent is None
        else ET.SubElement(parent, "testsuite", attributes)
    )
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=classname, name=f"{r.rule_id}: {r.name}")
        if r.passed:
            continue
        if r.severity != "warning":
            ET.SubElement(case, "system-out").text = f"info rule failed: {r.detail}"
        elif r.error:
            ET.SubElement(case, "error", message=r.detail, type=r.type)
        else:
            ET.SubElement(case, "failure", message=r.detail, type=r.type)
    return suite


def render_json(results: list[BatchResult], max_failures: int = 0) -> str:
    """The batch as one JSON object: the totals, then one result per line. Per-line
    (not indented) results keep a 1,000-output report readable and let the C encoder
    write it; an indented dump is written by Python's slow path."""
    failed = sum(not r.report.success for r in results)
    head = {
        "outputs": len(results),
        "failedOutputs": failed,
        "checks": sum(len(r.report.results) for r in results),
        "maxFailures": max_failures,
        "success": failed <= max_failures,
    }
    encode = json.JSONEncoder(ensure_ascii=False, default=str).encode  # one, not one a line
    lines = ",\n".join(f"    {encode(r.to_dict())}" for r in results)
    return json.dumps(head, ensure_ascii=False)[:-1] + (
        f', "results": [\n{lines}\n]}}' if results else ', "results": []}'
    )


def render_junit(results: list[BatchResult]) -> str:
    """One test suite per output (see :func:`junit_suite`)."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", tests=str(sum(len(r.report.results) for r in results)))
    for result in results:
        junit_suite(root, result.item.id, result.suite, result.report)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def render_markdown(results: list[BatchResult]) -> str:
    """A summary a CI job can post as a comment: the counts, then each failure."""
    failed = [r for r in results if not r.report.success]
    checks = sum(len(r.report.results) for r in results)
    lines = [
        f"**{len(results) - len(failed)} of {len(results)} outputs pass** ({checks:,} checks).",
        "",
    ]
    if failed:
        lines += ["| output | rule | detail |", "|---|---|---|"]
        for result in failed:
            for r in result.report.failed:
                if r.severity == "warning":
                    detail = r.detail.replace("|", "\\|").replace("\n", " ")
                    lines.append(f"| {result.item.id} | {r.rule_id}: {r.name} | {detail} |")
    return "\n".join(lines)
