"""Which backend serves each tool, chosen by the executor's settings: Prometheus and Loki when
their URLs are set (with the connection settings `ATTEST_PROMETHEUS_*` / `ATTEST_LOKI_*`), the estate database otherwise; change records from `changes_database_url`
or the estate database; knowledge from the Markdown directory `knowledge_dir`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from opentelemetry.sdk.trace import TracerProvider

from services.executor.estate import create_estate_engine
from services.executor.tools.backends import LogsBackend, MetricsBackend, ToolBackends
from services.executor.tools.backend_readiness import BackendHealth
from services.executor.tools.changes_backend import build_changes_backend
from services.executor.tools.http_api import ConnectionConfigError, HttpConnection, Secret
from services.executor.tools import logs_tool, metrics_tool
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase
from services.executor.tools.loki_backend import LokiLogsBackend
from services.executor.tools.prometheus_backend import PrometheusMetricsBackend
from services.executor.tools.prometheus_signals import SeriesReading
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
        PrometheusMetricsBackend(
            http_connection(settings, "prometheus"), service_labels=settings.prometheus_service_labels,
            min_step_seconds=settings.prometheus_step_seconds,
            reading=prometheus_reading(settings),
        ) if settings.prometheus_url
        else SqlMetricsBackend(estate_engine)
    )
    logs: LogsBackend = (
        LokiLogsBackend(http_connection(settings, "loki"), service_labels=settings.loki_service_labels)
        if settings.loki_url
        else SqlLogsBackend(estate_engine)
    )
    return ToolBackends(
        metrics=metrics,
        logs=logs,
        changes=changes,
        knowledge=MarkdownKnowledgeBase(resolve_knowledge_dir(settings.knowledge_dir)),
    )


def prometheus_reading(settings: ExecutorSettings) -> SeriesReading:
    """How the Prometheus backend turns raw series into signals (ATTEST_PROMETHEUS_*)."""
    return SeriesReading(
        instance_labels=tuple(settings.prometheus_instance_labels),
        status_labels=tuple(settings.prometheus_status_labels),
        error_status_pattern=settings.prometheus_error_status_pattern,
        signals={name: (signal.query, signal.unit) for name, signal in settings.prometheus_signals.items()},
    )


def _secret(settings: ExecutorSettings, field: str) -> Secret | None:
    value, file = getattr(settings, field), getattr(settings, f"{field}_file")
    if value is not None and file is not None:
        raise ConnectionConfigError(f"set ATTEST_{field.upper()} or ATTEST_{field.upper()}_FILE, not both")
    if file is not None:
        return Secret(file=file)
    return Secret(value=value.get_secret_value()) if value is not None else None


def http_connection(settings: ExecutorSettings, kind: Literal["prometheus", "loki"]) -> HttpConnection:
    """The connection settings `ATTEST_<KIND>_*` of one HTTP backend."""
    url = getattr(settings, f"{kind}_url")
    if not url:
        raise ConnectionConfigError(f"ATTEST_{kind.upper()}_URL is not set")
    return HttpConnection(
        base_url=url,
        timeout_seconds=settings.backend_timeout_seconds,
        bearer_token=_secret(settings, f"{kind}_bearer_token"),
        basic_auth_user=getattr(settings, f"{kind}_basic_auth_user"),
        basic_auth_password=_secret(settings, f"{kind}_basic_auth_password"),
        ca_file=getattr(settings, f"{kind}_ca_file"),
        headers={name: value.get_secret_value() for name, value in getattr(settings, f"{kind}_headers").items()},
    )


def backend_health(backends: ToolBackends, settings: ExecutorSettings) -> BackendHealth:
    """The readiness monitor of the tools served over HTTP (Prometheus, Loki)."""
    probed = {
        tool: backend for tool, backend in ((metrics_tool.TOOL_NAME, backends.metrics), (logs_tool.TOOL_NAME, backends.logs))
        if isinstance(backend, (PrometheusMetricsBackend, LokiLogsBackend))
    }
    return BackendHealth(probed, recheck_seconds=settings.backend_recheck_seconds)
