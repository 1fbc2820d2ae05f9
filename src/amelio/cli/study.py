"""``amelio study``: the efficacy harness (docs/efficacy.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from amelio.cli._common import handle_errors, json_option, main, print_json


@main.command("study")
@click.argument("suite", type=click.Path(path_type=Path))
@click.option("--rounds", type=int, default=3, show_default=True, help="Feedback cycles.")
@click.option(
    "--arms",
    default="bare,skills,told,learnings,loop",
    show_default=True,
    help="Comma-separated arms to run.",
)
@click.option(
    "--approve",
    type=click.Choice(["gated", "all", "none"]),
    default="gated",
    show_default=True,
    help="Which proposals the loop approves: those whose benchmark PASSED, all, none.",
)
@click.option(
    "--sage/--no-sage", default=True, show_default=True, help="Sage proposes in the loop arm."
)
@click.option(
    "--fixit-rate",
    type=float,
    default=0.5,
    show_default=True,
    help="Chance a user who gives 👎 also gives a Fix-It naming the first failing rule.",
)
@click.option(
    "--up-rate",
    type=float,
    default=0.3,
    show_default=True,
    help="Chance a user whose answer passed every rule gives 👍.",
)
@click.option(
    "--plant-harmful",
    "plant_harmful",
    type=float,
    default=0.0,
    show_default=True,
    metavar="RATE",
    help="Chance, per skill and loop round, of a planted harmful proposal (a rule "
    "deleted or contradicted, evidence copied): does the gate stop it?",
)
@click.option(
    "--learnings-ordering",
    type=click.Choice(["relevant", "newest", "helpful"]),
    default=None,
    help="Order of the learnings block in every arm (default: the setting "
    "learnings_ordering): compare relevance-ranked with newest-first.",
)
@click.option(
    "--llm-cache",
    "llm_cache",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SQLite file that keeps the LLM's answers between studies: a re-run with one "
    "setting changed sends only the requests that changed.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("study"),
    show_default=True,
    help="Folder for study.json, .md, .png, answers.jsonl and one workspace per arm.",
)
@json_option
@click.pass_context
@handle_errors
def study_command(
    ctx: click.Context,
    suite: Path,
    rounds: int,
    arms: str,
    approve: str,
    sage: bool,
    fixit_rate: float,
    up_rate: float,
    plant_harmful: float,
    learnings_ordering: str | None,
    llm_cache: Path | None,
    seed: int,
    out: Path,
    as_json: bool,
) -> None:
    """Measure whether the skill loop makes the assistant better, on SUITE's held-out tasks.

    Each arm runs in a workspace of its own under --out, with this workspace's LLM
    settings (or AMELIO_* alone outside one); nothing is written to this workspace.
    Exit 1 when an LLM call fails: the rounds done so far are still written.
    """
    from amelio.errors import WorkspaceNotFound
    from amelio.llm import get_provider
    from amelio.study import StudyLLM, StudyOptions, load_suite, run_study, total_steps
    from amelio.study.llm import AnswerStore
    from amelio.study.report import to_dict, to_markdown, write_report
    from amelio.workspace.config import Settings, load_settings

    options = StudyOptions(
        rounds=rounds,
        arms=tuple(a.strip() for a in arms.split(",") if a.strip()),
        approve=approve,
        sage=sage,
        fixit_rate=fixit_rate,
        up_rate=up_rate,
        plant_harmful=plant_harmful,
        learnings_ordering=learnings_ordering,
        seed=seed,
    )
    loaded = load_suite(suite)
    try:
        settings = load_settings(ctx.obj.get("workspace"))
    except WorkspaceNotFound:
        settings = Settings(workspace=out.resolve())
    store = AnswerStore(llm_cache) if llm_cache is not None else None
    llm = StudyLLM(get_provider(settings, purpose="The study"), store)
    try:
        with click.progressbar(
            length=total_steps(loaded, options), label="answers", file=sys.stderr
        ) as bar:
            result = run_study(
                loaded,
                options,
                settings=settings,
                llm=llm,
                out=out,
                progress=lambda n, label: bar.update(n),
                recorded=lambda so_far: write_report(so_far, out),
            )
    finally:
        if store is not None:
            store.close()
    files = write_report(result, out)
    if as_json:
        print_json(to_dict(result))
    else:
        click.echo(to_markdown(to_dict(result)).rstrip())
        for path in files:
            click.echo(f"Wrote {path}", err=True)
    if result.error:
        click.echo(f"Error: the study stopped: {result.error}", err=True)
        sys.exit(1)
