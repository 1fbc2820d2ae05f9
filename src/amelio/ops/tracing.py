"""OpenTelemetry traces (``amelio[otel]``): where a slow or failed answer spent its time.

With ``tracing`` set, :func:`instrument` instruments the service's FastAPI app, its
SQLAlchemy engine and httpx (which the LLM SDKs, the webhook notifier and the Vespa
client use), and Amelio's own code adds spans of its steps: ``amelio.route``,
``amelio.prompt``, the LLM call as the GenAI semantic conventions name it
(``chat {model}``, with ``gen_ai.*`` attributes: provider, models, token usage)
and ``amelio.evals``. A chat request is then one trace: the HTTP server span, and
under it those steps, the SQL statements and the provider's HTTP call.

``tracing`` says where spans go: ``otlp`` exports them over OTLP/HTTP, configured
by the standard ``OTEL_EXPORTER_OTLP_*`` variables (default
``http://localhost:4318``); ``console`` prints them (to see what is traced);
``global`` only instruments, and leaves the spans to the tracer provider the
process already has (an application embedding Amelio, ``opentelemetry-instrument``,
a test's in-memory exporter).

Without the extra, :func:`span` costs one check and the library runs unchanged.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from amelio._version import __version__

if TYPE_CHECKING:
    from fastapi import FastAPI

    from amelio.workspace.folder import Workspace

__all__ = ["available", "instrument", "span"]

log = logging.getLogger(__name__)
_api: Any = None  # the opentelemetry.trace module, once imported; False when absent


def available() -> bool:
    """Whether the OpenTelemetry API is installed (``amelio[otel]``)."""
    return importlib.util.find_spec("opentelemetry") is not None


def _trace() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _api = False
        else:
            _api = trace
    return _api


@contextmanager
def span(
    name: str, attributes: Mapping[str, Any] | None = None, *, client: bool = False
) -> Iterator[Any]:
    """A span around a step, a child of the current one; None without OpenTelemetry.
    An exception ends it as an error, with the exception recorded."""
    trace = _trace()
    # No tracer provider set (the API alone, or the extra unused): nothing would record
    # the span, so none is made; this keeps respond() within its overhead budget.
    if not trace or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        yield None
        return
    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
    tracer = trace.get_tracer("amelio", __version__)
    with tracer.start_as_current_span(
        name, kind=kind, attributes=dict(attributes or {})
    ) as current:
        yield current


def instrument(app: FastAPI, ws: Workspace) -> None:
    """Instrument ``app``, the workspace's engine and httpx as ``tracing`` says."""
    mode = ws.settings.tracing
    if mode == "off":
        return
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    except ImportError:
        from amelio.errors import ConfigError

        raise ConfigError(
            f"AMELIO_TRACING is {mode!r}, but OpenTelemetry is not installed: "
            "pip install 'amelio[otel]'."
        ) from None
    if mode in ("otlp", "console"):
        _set_provider(mode)
    provider = trace.get_tracer_provider()
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=provider, excluded_urls="/v1/health,/metrics"
    )
    # Both are process-wide: the first call also traces every engine and httpx client
    # made after it; a second would only log that it is a second.
    database = SQLAlchemyInstrumentor()
    if not database.is_instrumented_by_opentelemetry:
        # The instrumentation names SQLAlchemy < 2.1 as its range, but the engine
        # events it listens to are the same in 2.1 (tests/test_ops_tracing.py sees the spans).
        database.instrument(engine=ws.engine, tracer_provider=provider, skip_dep_check=True)
    clients = HTTPXClientInstrumentor()
    if not clients.is_instrumented_by_opentelemetry:
        clients.instrument(tracer_provider=provider)


def _set_provider(mode: str) -> None:
    """A tracer provider that exports as ``mode`` says, unless the process has one."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        log.info("tracing: the process already has a tracer provider; spans go there")
        return
    provider = TracerProvider(
        resource=Resource.create({"service.name": "amelio", "service.version": __version__})
    )
    if mode == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
