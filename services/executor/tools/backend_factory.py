"""Which backend serves each tool, chosen by the executor's settings: Prometheus and Loki when
their URLs are set, the estate database otherwise; change records from `changes_database_url`
or the estate database; knowledge from the Markdown directory `knowledge_dir`."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from services.executor.estate import create_estate_engine
from services.executor.tools.backends import LogsBackend, MetricsBackend, ToolBackends
from services.executor.tools.changes_backend import build_changes_backend
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase
from services.executor.tools.loki_backend import LokiLogsBackend
from services.executor.tools.prometheus_backend import PrometheusMetricsBackend
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend
from shared.config import ExecutorSettings
from shared.telemetry import instrument_engine

REPO_ROOT = Path(__file__).resolve().parents[3]


def resolve_knowledge_dir(configured: str) -> Path:
    """An absolute path as given; a relative one from the working directory, or else from the
    repository root (so the shipped default works from any working directory)."""
    path = Path(configured).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return REPO_ROOT / path


def build_backends(settings: ExecutorSettings, tracer_provider: TracerProvider | None = None) -> ToolBackends:
    """The backends; with a tracer provider, every SQL statement they run becomes a span."""
    timeout = settings.backend_timeout_seconds
    estate_engine = None
    if not settings.prometheus_url or not settings.loki_url:
        estate_engine = create_estate_engine(settings.estate_database_url)
        if tracer_provider is not None:
            instrument_engine(estate_engine, tracer_provider)
    changes = build_changes_backend(settings.changes_database_url or settings.estate_database_url, timeout)
    if tracer_provider is not None:
        instrument_engine(changes.engine, tracer_provider)
    metrics: MetricsBackend = (
        PrometheusMetricsBackend(settings.prometheus_url, timeout) if settings.prometheus_url
        else SqlMetricsBackend(estate_engine)
    )
    logs: LogsBackend = (
        LokiLogsBackend(settings.loki_url, timeout) if settings.loki_url
        else SqlLogsBackend(estate_engine)
    )
    return ToolBackends(
        metrics=metrics,
        logs=logs,
        changes=changes,
        knowledge=MarkdownKnowledgeBase(resolve_knowledge_dir(settings.knowledge_dir)),
    )
