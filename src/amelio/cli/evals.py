"""``amelio eval`` (a CI gate) and ``amelio evals`` (rule management).

``amelio eval --rules`` (and ``--batch`` with rules given inline or by ``--rules``)
runs without a workspace, so it imports no database, settings or YAML library
unless it finds a workspace or needs one: CI pays the start-up on every call.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

import click

from amelio import evals, skills
from amelio.cli._common import (
    cli_user,
    handle_errors,
    main,
    print_json,
    project_option,
    table,
    workspace,
)
from amelio.errors import (
    AmelioError,
    EvalRuleError,
    InputTooLarge,
    InvalidInput,
    SkillFileError,
    WorkspaceNotFound,
)
from amelio.workspace import projects
from amelio.workspace.discovery import ENV_PREFIX, find_workspace


def _read_limited(stream: IO[str], limit: int, name: str) -> str:
    """Read at most ``limit`` chars: a huge input is refused without loading it whole."""
    text = stream.read(limit + 1)
    if len(text) > limit:
        raise InputTooLarge(
            f"{name} is over the {limit:,}-character limit (AMELIO_MAX_TEXT_CHARS).", limit=limit
        )
    return text


def _rules_from_file(path: Path) -> tuple[evals.EvalRule, ...]:
    """A seed-format evals file, or a bare JSON list of rules."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillFileError(f"cannot read: {exc}", file=str(path)) from exc
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EvalRuleError(
                f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=str(path)
            ) from exc
        return evals.parse_rules(data, source=str(path))
    return evals.parse_eval_file(text, source=str(path)).rules


def _junit(report: evals.EvalReport, suite: str) -> str:
    import xml.etree.ElementTree as ET

    from amelio.evals.batch import junit_suite

    root = junit_suite(None, suite, suite, report)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _print_report(report: evals.EvalReport) -> None:
    def status(r: evals.EvalResult) -> str:
        return "ERROR" if r.error else ("pass" if r.passed else "FAIL")

    table(
        ["result", "severity", "rule", "type", "name", "detail"],
        [(status(r), r.severity, r.rule_id, r.type, r.name, r.detail) for r in report.results],
    )
    failed_warnings = sum(1 for r in report.failed if r.severity == "warning")
    click.echo("")
    click.echo(
        f"{len(report.results)} rules: {report.passed_count} passed, "
        f"{len(report.failed)} failed ({failed_warnings} warning). "
        f"{'Success.' if report.success else 'Failure: a warning rule failed.'}"
    )
    for note in evals.render_footnotes(report):
        click.echo(note)


def _text_limit(ctx: click.Context) -> int:
    """``max_text_chars`` of the workspace, or without one of the environment and
    defaults: checking against a rules file needs no workspace. Without a workspace
    and without AMELIO_MAX_TEXT_CHARS it is the default, and the settings are not
    loaded at all."""
    try:
        root = find_workspace(ctx.obj.get("workspace"))
    except WorkspaceNotFound:
        if f"{ENV_PREFIX}MAX_TEXT_CHARS" not in os.environ:
            return evals.MAX_TEXT_CHARS
        from amelio.workspace.config import Settings

        return Settings().max_text_chars
    from amelio.workspace.config import load_settings

    return load_settings(root).max_text_chars


def _check(
    ctx: click.Context,
    file: IO[str],
    skill: str | None,
    rules_path: Path | None,
    project: str | None,
) -> tuple[evals.EvalReport, str]:
    if rules_path is not None:
        limit = _text_limit(ctx)
        rules, suite = _rules_from_file(rules_path), rules_path.stem
    else:
        assert skill is not None
        ws = workspace(ctx)
        limit = ws.settings.max_text_chars
        found = skills.get_skill(ws.engine, skill, project or projects.DEFAULT_PROJECT)
        rules, suite = evals.parse_rules(list(found.spec.evals or ())), skill
        if not rules:
            click.echo(f"Skill {skill!r} has no eval rules; nothing to check.", err=True)
    return evals.evaluate(_read_limited(file, limit, file.name), rules, max_chars=limit), suite


@main.command("eval")
@click.argument("file", type=click.File("r", encoding="utf-8"), default="-")
@click.option("--skill", default=None, help="Check against this skill's rules (needs a workspace).")
@click.option(
    "--rules",
    "rules_path",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Check against a rules file; no workspace needed.",
)
@project_option
@click.option(
    "--batch",
    is_flag=True,
    help="FILE holds many outputs: JSON lines {id, text, skill | rules, project} "
    "or promptfoo's output JSON; --skill/--rules apply to those that name "
    "no rules.",
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="With --batch: outputs that may fail before the exit code is 1.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "junit", "markdown"]),
    default="table",
    show_default=True,
)
@click.pass_context
def eval_command(
    ctx: click.Context,
    file: IO[str],
    skill: str | None,
    rules_path: Path | None,
    project: str | None,
    batch: bool,
    max_failures: int,
    fmt: str,
) -> None:
    """Check the text in FILE (default: stdin) against eval rules.

    Exit code 0 when no warning rule fails (with --batch: when at most
    --max-failures outputs fail), 1 otherwise, 2 when the check cannot run (bad
    rules, unknown skill, unreadable input, a malformed line), so it can gate CI.
    """
    if batch:
        _eval_batch(ctx, file, skill, rules_path, project, max_failures, fmt)
        return
    if (skill is None) == (rules_path is None):
        raise click.UsageError("Give exactly one of --skill NAME or --rules RULES.json.")
    if fmt == "markdown":
        raise click.UsageError("--format markdown summarizes a --batch run.")
    try:
        report, suite = _check(ctx, file, skill, rules_path, project)
    except (AmelioError, OSError, UnicodeDecodeError) as exc:
        if isinstance(exc, AmelioError):
            message = exc.message
        elif isinstance(exc, UnicodeDecodeError):
            message = f"{file.name}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        else:
            message = str(exc)
        click.echo(f"Error: {message}", err=True)
        ctx.exit(2)
    if fmt == "json":
        print_json(report.to_dict() | {"footnotes": evals.render_footnotes(report)})
    elif fmt == "junit":
        click.echo(_junit(report, suite))
    else:
        _print_report(report)
    ctx.exit(0 if report.success else 1)


def _eval_batch(
    ctx: click.Context,
    file: IO[str],
    skill: str | None,
    rules_path: Path | None,
    project: str | None,
    max_failures: int,
    fmt: str,
) -> None:
    from amelio.evals import batch as eval_batch

    if skill is not None and rules_path is not None:
        raise click.UsageError("Give at most one of --skill NAME or --rules RULES.json.")
    limit = _text_limit(ctx)
    cache: dict[tuple[str | None, str | None], tuple[tuple[evals.EvalRule, ...], str]] = {}

    def rules_for(item: eval_batch.BatchItem) -> tuple[tuple[evals.EvalRule, ...], str]:
        name = item.skill or skill
        key = (name, item.project or project) if name else (None, None)
        if key not in cache:
            if name is not None:
                ws = workspace(ctx)
                found = skills.get_skill(ws.engine, name, key[1] or projects.DEFAULT_PROJECT)
                cache[key] = (evals.parse_rules(list(found.spec.evals or ())), name)
            elif rules_path is not None:
                cache[key] = (_rules_from_file(rules_path), rules_path.stem)
            else:
                raise InvalidInput(
                    f"{item.where}: no rules for this output: give the line "
                    "a skill or rules, or the command --skill or --rules."
                )
        return cache[key]

    try:
        items = eval_batch.parse_batch(file.read(), file.name, max_chars=limit)
        results = eval_batch.check_batch(items, rules_for, max_chars=limit)
    except (AmelioError, OSError, UnicodeDecodeError) as exc:
        if isinstance(exc, AmelioError):
            message = exc.message
        elif isinstance(exc, UnicodeDecodeError):
            message = f"{file.name}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        else:
            message = str(exc)
        click.echo(f"Error: {message}", err=True)
        ctx.exit(2)
    failed = [r for r in results if not r.report.success]
    if fmt == "json":
        click.echo(eval_batch.render_json(results, max_failures))
    elif fmt == "junit":
        click.echo(eval_batch.render_junit(results))
    elif fmt == "markdown":
        click.echo(eval_batch.render_markdown(results))
    else:
        table(
            ["output", "result", "failed rules"],
            [
                (
                    r.item.id,
                    "pass" if r.report.success else "FAIL",
                    ", ".join(f.rule_id for f in r.report.failed if f.severity == "warning"),
                )
                for r in failed
            ]
            or [("(all)", "pass", "")],
        )
        click.echo(
            f"{len(results) - len(failed)} of {len(results)} outputs pass "
            f"({sum(len(r.report.results) for r in results):,} checks); "
            f"{len(failed)} failed, {max_failures} allowed."
        )
    ctx.exit(0 if len(failed) <= max_failures else 1)


@main.group("evals")
def evals_group() -> None:
    """Manage eval rules."""


def _merge(
    existing: tuple[evals.EvalRule, ...], new: tuple[evals.EvalRule, ...]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Existing rules plus the new ones that check something not checked yet, with
    ids renumbered past any clash; returns (all rules, added rules)."""

    def key(rule: evals.EvalRule) -> str:
        return json.dumps([rule.type, dict(rule.params)], sort_keys=True, default=str)

    merged = [r.to_dict() for r in existing]
    ids = {r.id for r in existing}
    known = {key(r) for r in existing}
    added: list[dict[str, Any]] = []
    counter = 1
    for rule in new:
        if key(rule) in known:
            continue
        data = rule.to_dict()
        while data["id"] in ids:
            data["id"] = f"pf-{counter:03d}"
            counter += 1
        ids.add(data["id"])
        known.add(key(rule))
        merged.append(data)
        added.append(data)
    return merged, added


@evals_group.command("import-promptfoo")
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--skill", required=True, help="Skill whose rules receive the assertions.")
@project_option
@click.option("--dry-run", is_flag=True, help="Show what would be imported; change nothing.")
@click.pass_context
@handle_errors
def import_promptfoo_command(
    ctx: click.Context, config_file: Path, skill: str, project: str | None, dry_run: bool
) -> None:
    """Map a promptfoo config's deterministic assertions into a skill's rules.

    Assertions without an equivalent (llm-rubric, similar, javascript, …) are
    listed, one line each, and left out.
    """
    from amelio.evals.promptfoo import import_promptfoo

    result = import_promptfoo(config_file.read_text(encoding="utf-8"), source=str(config_file))
    ws = workspace(ctx)
    current = skills.get_skill(ws.engine, skill, project or projects.DEFAULT_PROJECT)
    existing = evals.parse_rules(list(current.spec.evals or ()))
    merged, added = _merge(existing, result.rules)
    for rule in added:
        click.echo(f"  + {rule['id']:8} {rule['type']:20} {rule['name']}")
    for line in result.unmapped:
        click.echo(f"  not mapped: {line}")
    if not added:
        click.echo(f"No new rules for {skill}.")
        return
    if dry_run:
        click.echo(f"Dry run: {len(added)} rules would be added to {skill}.")
        return
    # --project changes that project's own version (forking the global skill first),
    # never the global skill.
    updated = skills.update_project_skill(
        ws.engine,
        skill,
        project,
        rules=merged,
        author=cli_user(),
        reason=f"imported {len(added)} rules from {config_file.name}",
        expected_version=current.version,
    )
    click.echo(
        f"Added {len(added)} rules to {skill} (now v{updated.version}); "
        f"{len(result.unmapped)} assertions not mapped."
    )
