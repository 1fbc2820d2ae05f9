"""Judgment lists and offline relevance evaluation: ``amelio judgments build``,
``import``, ``list``, ``show``, ``compare`` and ``delete``; ``amelio relevance eval``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from amelio.cli._common import (
    cli_user,
    handle_errors,
    json_option,
    main,
    print_json,
    short,
    table,
    workspace,
)
from amelio.search import judgment_lists as store
from amelio.search import judgments as jl
from amelio.search.evaluation import METRICS, evaluate
from amelio.stats import Interval

if TYPE_CHECKING:
    from amelio.search.service import Searcher
    from amelio.workspace.folder import Workspace


@main.group("judgments")
def judgments_group() -> None:
    """Judgment lists: graded (query, document) pairs from clicks, an LLM or people.

    Build one, then measure rank profiles against it with `amelio relevance eval`."""


def _searcher(ws: Workspace) -> Searcher:
    from amelio.contributions.policy import browsers_embed
    from amelio.search import Searcher

    return Searcher(
        ws, background_aggregation=False, defer_missing_vectors=browsers_embed(ws.settings)
    )


def _queries(n: int) -> str:
    return f"{n} query" if n == 1 else f"{n} queries"


def _grades(item: store.JudgmentList) -> str:
    return " ".join(f"{g}:{item.histogram.get(g, 0)}" for g in store.GRADES)


@judgments_group.command("build")
@click.argument("name")
@click.option(
    "--from",
    "source",
    type=click.Choice(store.SOURCES),
    required=True,
    help="clicks: grades from the click model; llm: the configured LLM grades the pool; "
    "human: the pool ungraded, for people to grade on the dashboard.",
)
@click.option(
    "--queries",
    "queries_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The queries to judge: one per line, or JSON lines with query or text "
    "(default: clicks, those with signals; llm and human, the most searched).",
)
@click.option(
    "--depth",
    type=click.IntRange(1, jl.MAX_DEPTH),
    default=jl.DEFAULT_DEPTH,
    show_default=True,
    help="How many of each query's top documents the pool takes (llm, human).",
)
@click.option(
    "--profile",
    default="bm25",
    show_default=True,
    help="The ranking the pool comes from, NAME[:key=value,...] (llm, human).",
)
@click.option(
    "--max-queries",
    type=click.IntRange(1, None),
    default=None,
    help=f"At most this many queries, the most searched first (default: llm and human "
    f"{jl.DEFAULT_MAX_QUERIES}, clicks all).",
)
@json_option
@click.pass_context
@handle_errors
def build_command(
    ctx: click.Context,
    name: str,
    source: str,
    queries_file: Path | None,
    depth: int,
    profile: str,
    max_queries: int | None,
    as_json: bool,
) -> None:
    """Build judgment list NAME from clicks, an LLM or (ungraded) for people."""
    ws = workspace(ctx)
    report = jl.build(
        ws,
        name,
        source,
        queries=None if queries_file is None else jl.read_queries(queries_file),
        depth=depth,
        profile=profile,
        max_queries=max_queries,
        created_by=cli_user(),
        searcher=None if source == "clicks" else _searcher(ws),
    )
    if as_json:
        print_json(report.to_dict())
        return
    item = report.list
    click.echo(
        f"Judgment list {item.name} ({item.source}): {item.pairs} pair(s) over "
        f"{_queries(item.queries)}, {item.graded} graded ({_grades(item)})."
    )
    if report.too_little:
        click.echo(
            f"{report.too_little} pair(s) left out: under {jl.MIN_EXAMINATIONS:g} "
            "examinations, too little evidence to grade."
        )
    if report.unparsed or report.failed:
        click.echo(
            f"{report.unparsed} LLM reply(s) had no grade and {report.failed} call(s) "
            "failed: those pairs stay ungraded (`amelio judgments show NAME --pairs N`)."
        )
    if item.source == "human":
        click.echo(f"Grade them on the dashboard: /judgments/{item.name}")


@judgments_group.command("import")
@click.argument("name")
@click.argument("qrels", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--queries",
    "queries_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="The queries.jsonl the qrels' query ids refer to (_id, text).",
)
@json_option
@click.pass_context
@handle_errors
def import_command(
    ctx: click.Context, name: str, qrels: Path, queries_file: Path, as_json: bool
) -> None:
    """Import a BEIR qrels file (query-id, corpus-id, score) as human list NAME; grades
    above 3 become 3, below 0 become 0, and every document must be in the corpus."""
    ws = workspace(ctx)
    report = jl.import_qrels(
        ws, name, qrels, queries_file, created_by=cli_user(), searcher=_searcher(ws)
    )
    if as_json:
        print_json(report.to_dict())
        return
    item = report.list
    click.echo(
        f"Judgment list {item.name}: {item.pairs} pair(s) over {_queries(item.queries)} "
        f"imported ({_grades(item)})."
    )


@judgments_group.command("list")
@json_option
@click.pass_context
@handle_errors
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Judgment lists, newest first, with their counts."""
    found = store.list_lists(workspace(ctx))
    if as_json:
        print_json([item.to_dict() for item in found])
        return
    if not found:
        click.echo("No judgment lists: `amelio judgments build NAME --from clicks` makes one.")
        return
    table(
        ["name", "source", "queries", "pairs", "graded", "grades 0:1:2:3", "by"],
        [(i.name, i.source, i.queries, i.pairs, i.graded, _grades(i), i.created_by) for i in found],
    )


@judgments_group.command("show")
@click.argument("name")
@click.option(
    "--pairs", "shown", type=click.IntRange(0, None), default=0, help="Also the first N pairs."
)
@json_option
@click.pass_context
@handle_errors
def show_command(ctx: click.Context, name: str, shown: int, as_json: bool) -> None:
    """A judgment list: how it was built, its pairs, how many are graded, per grade."""
    ws = workspace(ctx)
    item = store.get_list(ws, name)
    pairs = store.pairs_of(ws, name, limit=shown) if shown else []
    if as_json:
        print_json(item.to_dict() | ({"judgments": [p.to_dict() for p in pairs]} if shown else {}))
        return
    click.echo(
        f"Judgment list {item.name} ({item.source}), by {item.created_by}: {item.pairs} "
        f"pair(s) over {_queries(item.queries)}; {item.graded} graded, "
        f"{item.pairs - item.graded} not yet."
    )
    for g in store.GRADES:
        click.echo(f"  grade {g}: {item.histogram.get(g, 0)}")
    for key, value in item.meta.items():
        if key != "rubric":  # long, and the same for every list of one rubric version
            click.echo(f"  {key}: {value}")
    if pairs:
        table(
            ["query", "doc", "grade", "by"],
            [
                (short(p.query, 50), p.doc_id, "-" if p.grade is None else p.grade, p.graded_by)
                for p in pairs
            ],
        )


@judgments_group.command("compare")
@click.argument("a")
@click.argument("b")
@json_option
@click.pass_context
@handle_errors
def compare_command(ctx: click.Context, a: str, b: str, as_json: bool) -> None:
    """How lists A and B agree on the pairs both graded: weighted κ, Spearman's ρ and
    the confusion table."""
    found = jl.compare(workspace(ctx), a, b)
    if as_json:
        print_json(found.to_dict())
        return

    def fmt(x: float | None) -> str:
        return "undefined" if x is None else f"{x:.3f}"

    click.echo(
        f"{found.pairs} shared graded pair(s); {found.exact} graded the same "
        f"({found.exact / found.pairs:.0%}). Weighted κ (quadratic) {fmt(found.kappa)}, "
        f"Spearman's ρ {fmt(found.rho)}."
    )
    table(
        [f"{short(a, 20)} \\ {short(b, 20)}", *map(str, store.GRADES)],
        [(g, *row) for g, row in zip(store.GRADES, found.confusion, strict=True)],
    )


@judgments_group.command("delete")
@click.argument("name")
@click.pass_context
@handle_errors
def delete_command(ctx: click.Context, name: str) -> None:
    """Delete judgment list NAME and its pairs."""
    store.delete_list(workspace(ctx), name)
    click.echo(f"Deleted judgment list {name}.")


@main.group("relevance")
def relevance_group() -> None:
    """Measure rank profiles offline against a judgment list (NDCG@10, MRR, P@5)."""


def _interval(i: Interval, signed: bool = False) -> tuple[str, str]:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f.format(i.value), f"{f.format(i.low)} to {f.format(i.high)}"


@relevance_group.command("eval")
@click.option(
    "--judgments", "judgments_name", metavar="NAME", required=True, help="The judgment list."
)
@click.option(
    "--profile",
    "profiles",
    metavar="PROFILE",
    multiple=True,
    required=True,
    help="A rank profile, NAME[:key=value,...]; repeat to compare (the first is the baseline).",
)
@click.option(
    "--relevant",
    type=click.IntRange(1, 3),
    default=1,
    show_default=True,
    help="The lowest grade that counts as relevant (MRR, P@5).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The bootstrap's seed.")
@json_option
@click.pass_context
@handle_errors
def eval_command(
    ctx: click.Context,
    judgments_name: str,
    profiles: tuple[str, ...],
    relevant: int,
    seed: int,
    as_json: bool,
) -> None:
    """NDCG@10, MRR and P@5 of each profile on a judgment list, with 95 % bootstrap
    intervals; with several profiles, each one's paired difference to the first and
    the queries that changed most. Unjudged documents count as grade 0."""
    ws = workspace(ctx)
    result = evaluate(
        ws, judgments_name, list(profiles), seed=seed, relevant=relevant, searcher=_searcher(ws)
    )
    if as_json:
        print_json(result.to_dict())
        return
    click.echo(
        f"Judgment list {result.judgments}: {_queries(result.queries)} with a document "
        f"graded {result.relevant} or more"
        + (f" ({result.left_out} without one left out)" if result.left_out else "")
        + f"; 95 % bootstrap intervals over queries, seed {result.seed}."
    )
    table(
        ["profile", "metric", "value", "interval"],
        [(p.profile, m, *_interval(p.metrics[m])) for p in result.profiles for m in METRICS],
    )
    if result.differences:
        click.echo(f"\nPaired differences to {result.differences[0].baseline}:")
        table(
            ["profile", "metric", "difference", "interval"],
            [
                (d.profile, m, *_interval(d.metrics[m], signed=True))
                for d in result.differences
                for m in METRICS
            ],
        )
    if result.changed:
        a, b = result.profiles[0].profile, result.profiles[1].profile
        click.echo(f"\nQueries that changed most (NDCG@10, {a} → {b}):")
        table(
            ["query", a, b, "difference"],
            [
                (short(c.query, 50), f"{c.a:.3f}", f"{c.b:.3f}", f"{c.diff:+.3f}")
                for c in result.changed
            ],
        )
