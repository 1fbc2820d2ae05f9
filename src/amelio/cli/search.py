"""``amelio corpus``, ``amelio search``, ``amelio signals`` and ``amelio simulate``."""

from __future__ import annotations

import time
from pathlib import Path

import click

from amelio.cli._common import (
    handle_errors,
    json_option,
    main,
    print_json,
    project_option,
    short,
    table,
    workspace,
)
from amelio.contributions.policy import browsers_embed, import_embedder
from amelio.embeddings import search_embedder
from amelio.errors import InvalidInput
from amelio.search import PROFILES, Searcher, aggregate, rebuild
from amelio.search.counts import signals_for
from amelio.search.engines.registry import workspace_corpus
from amelio.search.service import query_key
from amelio.search.simulate import USER_MODELS, simulate


@main.group("corpus")
def corpus_group() -> None:
    """The search corpus: the workspace's documents and their index (search_backend)."""


@corpus_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@click.pass_context
@handle_errors
def import_command(ctx: click.Context, file: Path, as_json: bool) -> None:
    """Import BEIR JSONL (_id, title, text) or NDJSON (docId, title, body); a known id is
    replaced, a line with "deleted": true deletes its document. With amelio[semantic]
    installed, documents are embedded for the semantic profiles as they are imported,
    unless contributions are on: browsers embed them then (`amelio corpus embed` does
    it here)."""
    ws = workspace(ctx)
    report = workspace_corpus(ws.settings).import_file(file, embedder=import_embedder(ws.settings))
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"{report.upserted} document(s) imported, {report.deleted} deleted; "
        f"{report.total} in the corpus."
    )
    if browsers_embed(ws.settings) and report.upserted:
        click.echo(
            "Not embedded: contributions are on, so browsers running amelio.js embed "
            "them (`amelio corpus embed` does it here)."
        )


@corpus_group.command("embed")
@json_option
@click.pass_context
@handle_errors
def embed_command(ctx: click.Context, as_json: bool) -> None:
    """Embed here the documents that have no vector yet for search_embedding_model:
    those left to browsers (contributions on), or imported without amelio[semantic]."""
    ws = workspace(ctx)
    started = time.perf_counter()
    count = workspace_corpus(ws.settings).embed_missing(search_embedder(ws.settings))
    seconds = time.perf_counter() - started
    if as_json:
        print_json({"embedded": count, "seconds": round(seconds, 3)})
        return
    click.echo(f"{count} document(s) embedded in {seconds:.1f} s.")


@corpus_group.command("reindex")
@json_option
@click.pass_context
@handle_errors
def reindex_command(ctx: click.Context, as_json: bool) -> None:
    """Build the search index again from the stored documents: after changing
    search_backend (e.g. from fts5 to the default tantivy), or to start an index
    afresh. Searches rebuild a stale index themselves; this does it ahead of time."""
    ws = workspace(ctx)
    corpus = workspace_corpus(ws.settings)
    started = time.perf_counter()
    count = corpus.reindex()
    seconds = time.perf_counter() - started
    if as_json:
        print_json({"engine": corpus.name, "documents": count, "seconds": round(seconds, 3)})
        return
    click.echo(f"{count} document(s) indexed by {corpus.name} in {seconds:.1f} s.")


@main.command("search")
@click.argument("query")
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default=None,
    help="Rank profile (default: search_profile).",
)
@click.option("--alpha", type=float, default=None, help="Semantic weight, 0 to 1.")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click.option(
    "--session",
    default=None,
    help="Session id, as feedback events send it (stored hashed): one session's "
    "repeated searches count once per document.",
)
@click.option("--user", default=None, help="User id, as feedback events send it (stored hashed).")
@project_option
@json_option
@click.pass_context
@handle_errors
def search_command(
    ctx: click.Context,
    query: str,
    profile: str | None,
    alpha: float | None,
    limit: int,
    session: str | None,
    user: str | None,
    project: str | None,
    as_json: bool,
) -> None:
    """Search the corpus, as POST /v1/search does (the impression is logged)."""
    ws = workspace(ctx)
    response = Searcher(
        ws,
        background_aggregation=False,
        defer_missing_vectors=browsers_embed(ws.settings),
    ).search(
        query,
        project=project or "default",
        profile=profile,
        alpha=alpha,
        limit=limit,
        session=session,
        user=user,
    )
    if as_json:
        print_json(response.to_dict())
        return
    if not response.results:
        click.echo("No results.")
        return
    table(
        ["rank", "doc", "score", "feedback", "title"],
        [
            (
                r["rank"],
                r["docId"],
                f"{r['score']:.3f}",
                f"{r['feedbackScore']:+.3f}",
                short(r["title"], 60),
            )
            for r in response.to_dict()["results"]
        ],
    )
    click.echo(f"queryId {response.query_id} ({response.profile}, alpha {response.alpha})")


@main.group("signals")
def signals_group() -> None:
    """Per (query, document) signals learned from impressions and feedback events."""


@signals_group.command("update")
@json_option
@click.pass_context
@handle_errors
def update_command(ctx: click.Context, as_json: bool) -> None:
    """Fold new impressions and events into the signals (run from cron; idempotent)."""
    report = aggregate(workspace(ctx))
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"{report.impressions} impression(s), {report.events} event(s) folded in; "
        f"{report.rows} signal row(s) changed; version {report.version}."
    )


@signals_group.command("rebuild")
@json_option
@click.pass_context
@handle_errors
def rebuild_command(ctx: click.Context, as_json: bool) -> None:
    """Recompute every signal from the stored impressions and events."""
    report = rebuild(workspace(ctx))
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(
        f"Rebuilt from {report.impressions} impression(s) and {report.events} "
        f"event(s): {report.rows} signal row(s); version {report.version}."
    )


@signals_group.command("show")
@click.argument("query")
@json_option
@click.pass_context
@handle_errors
def show_command(ctx: click.Context, query: str, as_json: bool) -> None:
    """The signals of one query, per document."""
    ws = workspace(ctx)
    rows = signals_for(ws.engine, query_key(ws.settings, query))  # as searches store it
    if as_json:
        print_json({d: r.to_dict() for d, r in rows.items()})
        return
    table(
        ["doc", "impressions", "clicks", "dwell+", "pins", "hides", "votes"],
        [
            (
                d,
                r.impressions,
                r.clicks,
                r.dwell_clicks,
                r.pins,
                r.hides,
                f"+{r.votes_up}/-{r.votes_down}",
            )
            for d, r in sorted(rows.items(), key=lambda x: -x[1].impressions)
        ],
    )


@main.command("simulate")
@click.option(
    "--dataset",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="A BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/).",
)
@click.option("--sessions-per-query", type=int, default=100, show_default=True)
@click.option("--click-model", type=click.Choice(USER_MODELS), default="pbm", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--rounds",
    type=int,
    default=10,
    show_default=True,
    help="Checkpoints at which signals are measured.",
)
@click.option(
    "--eval-sessions",
    type=int,
    default=20,
    show_default=True,
    help="Fresh sessions per query that measure CTR@3.",
)
@click.option(
    "--alpha",
    type=float,
    default=0.0,
    show_default=True,
    help="Semantic weight of the learning profile (above 0 needs amelio[semantic]).",
)
@click.option(
    "--explore",
    type=float,
    default=None,
    help="Share of training responses that explore by Thompson sampling "
    "(default: search_thompson).",
)
@click.option(
    "--engine",
    default=None,
    help="Embedded engine that indexes the data set: embedded, tantivy or fts5 "
    "(default: search_backend).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("simulation"),
    show_default=True,
    help="Folder for simulation.csv, .json and .png.",
)
@click.option(
    "--interleave",
    default=None,
    metavar="A,B",
    help="Compare two rankers instead (PROFILE[:key=value...] each, e.g. "
    "bm25,hybrid_with_feedback:beta=0.5): the sessions interleaving and an A/B test "
    "each need to detect the difference.",
)
@click.option(
    "--method",
    type=click.Choice(("team-draft", "balanced")),
    default="team-draft",
    show_default=True,
    help="With --interleave: how the two lists are merged.",
)
@click.option(
    "--train-sessions",
    type=int,
    default=0,
    show_default=True,
    help="With --interleave: sessions per query of feedback learning first (for a "
    "ranker that uses feedback).",
)
@json_option
@handle_errors
def simulate_command(
    dataset: Path,
    sessions_per_query: int,
    click_model: str,
    seed: int,
    rounds: int,
    eval_sessions: int,
    alpha: float,
    explore: float | None,
    engine: str | None,
    out: Path,
    interleave: str | None,
    method: str,
    train_sessions: int,
    as_json: bool,
) -> None:
    """Simulated users click on search results; report NDCG@10 and CTR@3 per profile."""
    if interleave is not None:
        _simulate_interleaving(
            dataset,
            interleave,
            method=method,
            sessions_per_query=sessions_per_query,
            train_sessions=train_sessions,
            click_model=click_model,
            seed=seed,
            engine=engine,
            as_json=as_json,
        )
        return
    result = simulate(
        dataset,
        sessions_per_query=sessions_per_query,
        user_model=click_model,
        seed=seed,
        rounds=rounds,
        eval_sessions=eval_sessions,
        alpha=alpha,
        thompson=explore,
        engine=engine,
        progress=None if as_json else click.echo,
    )
    files = result.write(out)
    if as_json:
        print_json(result.to_dict())
        return
    last = max(r["round"] for r in result.rows)
    learners = ("hybrid_with_feedback", "naive_ctr")
    table(
        ["profile", "NDCG@10", "CTR@3", "gap closed (NDCG)", "CTR@3 while learning"],
        [
            (
                r["profile"],
                f"{r['ndcg10']:.3f}",
                f"{r['ctr3']:.3f}",
                f"{result.gap_closed(r['profile']):.0%}" if r["profile"] in learners else "",
                f"{result.training_ctr(r['profile']):.3f}" if r["profile"] in learners else "",
            )
            for r in result.rows
            if r["round"] == last
        ],
    )
    click.echo("Wrote " + ", ".join(str(f) for f in files))
    if not any(f.suffix == ".png" for f in files):
        click.echo(
            "No plot: matplotlib is not installed (pip install matplotlib, then run "
            "again, or plot simulation.csv: NDCG@10 by sessions per profile)."
        )


def _simulate_interleaving(
    dataset: Path,
    pair: str,
    *,
    method: str,
    sessions_per_query: int,
    train_sessions: int,
    click_model: str,
    seed: int,
    engine: str | None,
    as_json: bool,
) -> None:
    from amelio.search.interleaving_simulation import simulate_interleaving
    from amelio.search.profiles import parse_profile

    sides: list[str] = []
    # A spec holds commas of its own (beta=1,exploration=0): split where B's name starts.
    for i, char in enumerate(pair):
        if char == "," and pair[i + 1 :].split(":", 1)[0].strip() in PROFILES:
            sides = [pair[:i].strip(), pair[i + 1 :].strip()]
            break
    if len(sides) != 2:
        raise InvalidInput(
            f"--interleave takes two rankers, A,B (bm25,hybrid:alpha=0.3), not {pair!r}.",
            field="interleave",
        )
    found = simulate_interleaving(
        dataset,
        parse_profile(sides[0], field="a"),
        parse_profile(sides[1], field="b"),
        sessions_per_query=sessions_per_query,
        method=method,
        user_model=click_model,
        seed=seed,
        train_sessions=train_sessions,
        engine=engine,
        progress=None if as_json else click.echo,
    )
    if as_json:
        print_json(found.to_dict())
        return
    il, ab = found.interleaving, found.ab
    table(
        ["method", "sessions needed (80 % power)", "measured power there"],
        [
            (
                f"interleaving ({method})",
                il["sessionsNeeded"] or "over 8× simulated",
                il["powerThere"],
            ),
            ("A/B test", ab["sessionsNeeded"] or "no difference", ab["powerThere"]),
        ],
    )
    p = il["preference"]
    click.echo(
        f"Interleaving prefers {il['prefers']} (margin {p['margin']:+.3f} over "
        f"{p['sessions']} sessions with a credited click; "
        f"{'agrees' if il['agreesWithNdcg'] else 'disagrees'} with NDCG@10)."
    )
    if found.ratio != float("inf"):
        click.echo(f"Interleaving needs {found.ratio:.1%} of the A/B test's sessions.")
