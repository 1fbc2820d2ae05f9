"""Prometheus metrics: what an operator graphs and alerts on.

Two kinds, because they come from two places:

* **Counted as it happens**, in this process: HTTP requests (latency histogram by
  route template and status), feedback events by outcome, the search cache's hits
  and misses, LLM calls, tokens and errors by provider and model. These live in
  :data:`REGISTRY`; ``amelio serve --workers N`` points ``PROMETHEUS_MULTIPROC_DIR``
  at a folder so that a scrape of any worker sums them over all workers.
* **Read from the database at scrape time** (:class:`DatabaseCollector`): knowledge
  queue depths, how far the search signals lag the events and impressions,
  proposals by status, benchmark verdicts, and the scheduled jobs' last outcome.
  They are the same whichever replica is scraped, and survive restarts.

Metric names follow Prometheus' conventions (``amelio_`` prefix, ``_total`` for
counters, base units). Label values are bounded: route templates (not paths),
schema field names (not free-text reasons), provider names, and the configured
model names (any other model is ``other``).
"""

from __future__ import annotations

import collections
import os
import re
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from amelio.db.schema import (
    benchmark_runs,
    feedback_events,
    knowledge_queue,
    projects,
    proposals,
    scheduled_jobs,
    search_impressions,
    search_state,
)

if TYPE_CHECKING:
    from amelio.workspace.folder import Workspace

__all__ = [
    "CONTENT_TYPE_LATEST",
    "REGISTRY",
    "DatabaseCollector",
    "MetricsMiddleware",
    "exposition",
    "observe_request",
    "record_feedback",
    "record_search_cache",
    "serve_separately",
]

#: This process's counters (not prometheus_client's global registry: an application
#: that embeds Amelio keeps its own metrics apart).
REGISTRY = CollectorRegistry(auto_describe=True)
_POSITION = re.compile(r"\.\d+(?=\.|$)")

HTTP_SECONDS = Histogram(
    "amelio_http_request_duration_seconds",
    "Time to answer an HTTP request.",
    ["method", "route", "status"],
    registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
FEEDBACK_EVENTS = Counter(
    "amelio_feedback_events_total",
    "Feedback events received, by outcome (accepted, "
    "duplicate, rejected, dropped, rate_limited) and, when rejected, the field at fault.",
    ["outcome", "field"],
    registry=REGISTRY,
)
SEARCH_CACHE = Counter(
    "amelio_search_cache_requests_total",
    "Rankings asked of the search cache: hit or miss.",
    ["result"],
    registry=REGISTRY,
)
LLM_CALLS = Counter(
    "amelio_llm_calls_total",
    "LLM calls, by provider, model and outcome (ok, error).",
    ["provider", "model", "outcome"],
    registry=REGISTRY,
)
LLM_TOKENS = Counter(
    "amelio_llm_tokens_total",
    "LLM tokens, by provider, model and direction (input, output).",
    ["provider", "model", "direction"],
    registry=REGISTRY,
)
LLM_SECONDS = Histogram(
    "amelio_llm_call_duration_seconds",
    "Time an LLM call took.",
    ["provider", "model"],
    registry=REGISTRY,
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 120),
)


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    HTTP_SECONDS.labels(method, route, str(status)).observe(seconds)


def record_feedback(outcomes: Iterable[tuple[str, str | None]]) -> None:
    """Count a batch's outcomes: (status, field) per event; list positions in a field's
    path become ``*``, so that the label's values stay the schema's fields. A batch
    holds few distinct outcomes: each is looked up and incremented once, by its count
    (a lookup and a locked increment per event took about a tenth of ingestion)."""
    for (outcome, field), count in collections.Counter(outcomes).items():
        FEEDBACK_EVENTS.labels(outcome, _POSITION.sub(".*", field or "")).inc(count)


def record_search_cache(hit: bool) -> None:
    SEARCH_CACHE.labels("hit" if hit else "miss").inc()


class DatabaseCollector(Collector):
    """Gauges read from the workspace's database when Prometheus scrapes."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.ws.engine.connect() as conn:
            queue = GaugeMetricFamily(
                "amelio_knowledge_queue_jobs",
                "Knowledge sync jobs waiting (pending) or given up (dead).",
                labels=["state"],
            )
            found: dict[str, int] = dict(
                conn.execute(
                    sa.select(knowledge_queue.c.status, sa.func.count()).group_by(
                        knowledge_queue.c.status
                    )
                ).all()
            )
            for kind in ("pending", "dead"):
                queue.add_metric([kind], found.get(kind, 0))
            yield queue

            done = conn.execute(
                sa.select(search_state.c.event_seq, search_state.c.impression_id)
            ).first()
            newest_event = conn.scalar(sa.select(sa.func.max(feedback_events.c.seq))) or 0
            newest_impression = conn.scalar(sa.select(sa.func.max(search_impressions.c.id))) or 0
            lag = GaugeMetricFamily(
                "amelio_signals_lag",
                "Feedback events and search "
                "impressions stored but not yet aggregated into the "
                "signals.",
                labels=["source"],
            )
            lag.add_metric(["events"], max(0, newest_event - (done.event_seq if done else 0)))
            lag.add_metric(
                ["impressions"], max(0, newest_impression - (done.impression_id if done else 0))
            )
            yield lag

            by_status = GaugeMetricFamily(
                "amelio_proposals", "Proposals by status.", labels=["status"]
            )
            for status, count in conn.execute(
                sa.select(proposals.c.status, sa.func.count()).group_by(proposals.c.status)
            ):
                by_status.add_metric([status], count)
            yield by_status

            verdicts = GaugeMetricFamily(
                "amelio_benchmark_runs",
                "Benchmark runs by status and verdict.",
                labels=["status", "verdict"],
            )
            for status, verdict, count in conn.execute(
                sa.select(
                    benchmark_runs.c.status, benchmark_runs.c.verdict, sa.func.count()
                ).group_by(benchmark_runs.c.status, benchmark_runs.c.verdict)
            ):
                verdicts.add_metric([status, verdict or ""], count)
            yield verdicts

            yield from _judge_agreement(conn)

            runs = GaugeMetricFamily(
                "amelio_scheduled_job_runs",
                "Runs of each scheduled job (amelio improve, signals) since it was first seen.",
                labels=["job"],
            )
            last_ok = GaugeMetricFamily(
                "amelio_scheduled_job_last_success",
                "1 when the job's last run succeeded, 0 when it failed or was interrupted.",
                labels=["job"],
            )
            finished = GaugeMetricFamily(
                "amelio_scheduled_job_last_finished_timestamp_seconds",
                "When the job's last run finished (Unix time).",
                labels=["job"],
            )
            for row in conn.execute(sa.select(scheduled_jobs)):
                runs.add_metric([row.name], row.runs)
                if row.outcome in ("ok", "error"):
                    last_ok.add_metric([row.name], 1 if row.outcome == "ok" else 0)
                if row.finished_at is not None:
                    finished.add_metric([row.name], row.finished_at.timestamp())
            yield runs
            yield last_ok
            yield finished


def _judge_agreement(conn: sa.Connection) -> Iterator[GaugeMetricFamily]:
    """Per skill, the judge's agreement with people as its newest benchmark measured it
    (amelio.improve.agreement): the pairs, and Cohen's κ once they are enough."""
    kappa = GaugeMetricFamily(
        "amelio_judge_kappa",
        "Cohen's kappa of the benchmark judge against people's votes and decisions, per "
        "skill (newest benchmark; absent below bench_min_judge_pairs pairs).",
        labels=["project", "skill"],
    )
    pairs = GaugeMetricFamily(
        "amelio_judge_agreement_pairs",
        "Pairs (voted answers, decided proposals) behind amelio_judge_kappa, per skill.",
        labels=["project", "skill"],
    )
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for project, skill, summary in conn.execute(
        sa.select(projects.c.name, proposals.c.skill_name, benchmark_runs.c.summary)
        .join(proposals, proposals.c.id == benchmark_runs.c.proposal_id)
        .join(projects, projects.c.id == proposals.c.project_id)
        .where(benchmark_runs.c.status == "done")
        .order_by(benchmark_runs.c.id.desc())
        .limit(1000)
    ):
        found = (summary or {}).get("judgeAgreement")
        if found and (project, skill) not in newest:
            newest[(project, skill)] = found
    for (project, skill), found in sorted(newest.items()):
        pairs.add_metric([project, skill], found["pairs"])
        if found.get("kappa") is not None and found["pairs"] >= found.get("minPairs", 0):
            kappa.add_metric([project, skill], found["kappa"])
    yield kappa
    yield pairs


def exposition(ws: Workspace) -> bytes:
    """The text Prometheus scrapes: this process's counters (all workers' when
    ``PROMETHEUS_MULTIPROC_DIR`` is set) and the database's gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        out = generate_latest(registry)
    else:
        out = generate_latest(REGISTRY)
    database = CollectorRegistry(auto_describe=False)
    database.register(DatabaseCollector(ws))
    return out + generate_latest(database)


class _Everything(Collector):
    """What :func:`exposition` gives, as one collector for a separate metrics port."""

    def __init__(self, ws: Workspace) -> None:
        self.database = DatabaseCollector(ws)

    def collect(self) -> Iterator[Any]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry(auto_describe=False)
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            yield from registry.collect()
        else:
            yield from REGISTRY.collect()
        yield from self.database.collect()


def serve_separately(ws: Workspace, host: str, port: int) -> Any:
    """Serve the metrics, without authentication, on ``host:port`` (for a scraper on
    a private network); returns the server, whose ``shutdown()`` stops it."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Everything(ws))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


class MetricsMiddleware:
    """Times every HTTP request by its route template (``/v1/skills/{name}``, never the
    path itself, so label values stay few) and status."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            observe_request(
                scope.get("method", ""), template, status, time.perf_counter() - started
            )
