"""Which backend serves each tool, chosen by the executor's settings: Prometheus and Loki when
their URLs are set (with the connection settings `ATTEST_PROMETHEUS_*` / `ATTEST_LOKI_*`), the
estate database otherwise; change records from `changes_database_url` or the estate database;
knowledge from the Markdown directory `knowledge_dir`.

No silent demo data. With no real backend configured (no Prometheus, no Loki:
the embedded default, `make demo`) every tool is served as above and the demo estate is labelled
as such in the answers. Once Prometheus or Loki is configured, a tool with no backend of its own
is DISABLED rather than served from the demo estate: metrics without Prometheus, logs without
Loki, changes without `changes_database_url`, knowledge while `knowledge_dir` is the shipped demo
directory (a directory of one's own is its own backend). `ATTEST_DEMO_TOOLS` names the tools whose
demo source is chosen explicitly (`query_logs,query_changes`, or `all`).

A disabled tool is not registered as callable (the registry refuses it before anything is
persisted), never planned, named in the answer's scope and not a failure, so it does not cap the
verdict. Health: it has no `attest.executor.tools.<tool>` entry at all (a health check of that
name answers NOT_FOUND, as for any service the server does not serve): NOT_SERVING would say a
configured backend is down, which is not the case; nothing is down, the tool is not offered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from opentelemetry.sdk.trace import TracerProvider

from services.executor.estate import create_estate_engine
from services.executor.tools.backend_readiness import BackendHealth
from services.executor.tools.backends import (
    ChangesBackend,
    KnowledgeBackend,
    LogsBackend,
    MetricsBackend,
    ToolBackends,
    Unconfigured,
)
from services.executor.tools.changes_backend import build_changes_backend
from services.executor.tools.http_api import ConnectionConfigError, HttpConnection, Secret
from services.executor.tools.knowledge_backend import MarkdownKnowledgeBase
from services.executor.tools.loki_backend import LokiLogsBackend
from services.executor.tools.prometheus_backend import PrometheusMetricsBackend
from services.executor.tools.prometheus_signals import SeriesReading
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend
from shared.config import ExecutorSettings
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.redaction import Redactor
from shared.telemetry import instrument_engine

REPO_ROOT = Path(__file__).resolve().parents[3]
# The shipped demo knowledge directory (ExecutorSettings.knowledge_dir's default).
DEMO_KNOWLEDGE_DIR = REPO_ROOT / "demo" / "knowledge"
# Source names of the demo material that is not already named as the estate's (shared/evidence_source.py).
ESTATE_CHANGES_SOURCE = "estate-sql:change_record"
DEMO_KNOWLEDGE_SOURCE_PREFIX = "demo-knowledge:"


def resolve_knowledge_dir(configured: str) -> Path:
    """An absolute path as given; a relative one from the working directory, or else from the
    repository root (so the shipped default works from any working directory)."""
    path = Path(configured).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return REPO_ROOT / path


def is_demo_knowledge_dir(configured: str) -> bool:
    """The shipped demo directory, however it is spelt (its past-incident notes are invented)."""
    try:
        return resolve_knowledge_dir(configured).resolve() == DEMO_KNOWLEDGE_DIR.resolve()
    except OSError:
        return False


def disabled_tools(settings: ExecutorSettings) -> frozenset[str]:
    """The evidence tools that are disabled (see the module docstring): none while no real
    backend is configured; otherwise each tool without a backend of its own and not chosen in
    `demo_tools`."""
    if not settings.prometheus_url and not settings.loki_url:
        return frozenset()
    own = {
        QUERY_METRICS: bool(settings.prometheus_url),
        QUERY_LOGS: bool(settings.loki_url),
        QUERY_CHANGES: bool(settings.changes_database_url),
        LOOKUP_KNOWLEDGE: not is_demo_knowledge_dir(settings.knowledge_dir),
    }
    return frozenset(tool for tool, has_own in own.items() if not has_own and tool not in settings.demo_tools)


def build_backends(settings: ExecutorSettings, tracer_provider: TracerProvider | None = None) -> ToolBackends:
    """The backends; with a tracer provider, every SQL statement they run becomes a span. A
    disabled tool gets an `Unconfigured` stand-in and is listed in `ToolBackends.disabled`."""
    # First: a configured pattern that does not compile stops the start-up before anything opens.
    redactor = Redactor(settings.redaction_patterns, builtins=settings.redaction_builtins)
    timeout = settings.backend_timeout_seconds
    disabled = disabled_tools(settings)
    estate_engine = None
    if (not settings.prometheus_url and QUERY_METRICS not in disabled) or (
            not settings.loki_url and QUERY_LOGS not in disabled):
        estate_engine = create_estate_engine(settings.estate_database_url)
        if tracer_provider is not None:
            instrument_engine(estate_engine, tracer_provider)
    changes: ChangesBackend
    if QUERY_CHANGES in disabled:
        changes = Unconfigured("changes")
    else:
        built = build_changes_backend(settings.changes_database_url or settings.estate_database_url, timeout)
        if not settings.changes_database_url:
            # The demo estate's change records: named as the estate's in every ref.
            built.source_name = ESTATE_CHANGES_SOURCE
        if tracer_provider is not None:
            instrument_engine(built.engine, tracer_provider)
        changes = built
    metrics: MetricsBackend
    if settings.prometheus_url:
        metrics = PrometheusMetricsBackend(
            http_connection(settings, "prometheus"), service_labels=settings.prometheus_service_labels,
            min_step_seconds=settings.prometheus_step_seconds,
            reading=prometheus_reading(settings),
        )
    elif QUERY_METRICS in disabled:
        metrics = Unconfigured("metrics")
    else:
        assert estate_engine is not None  # opened above for the estate's metrics
        metrics = SqlMetricsBackend(estate_engine)
    logs: LogsBackend
    if settings.loki_url:
        logs = LokiLogsBackend(http_connection(settings, "loki"), service_labels=settings.loki_service_labels,
                               level_label=settings.loki_level_label)
    elif QUERY_LOGS in disabled:
        logs = Unconfigured("logs")
    else:
        assert estate_engine is not None  # opened above for the estate's logs
        logs = SqlLogsBackend(estate_engine)
    knowledge: KnowledgeBackend
    if LOOKUP_KNOWLEDGE in disabled:
        knowledge = Unconfigured("knowledge")
    else:
        base = MarkdownKnowledgeBase(resolve_knowledge_dir(settings.knowledge_dir))
        if is_demo_knowledge_dir(settings.knowledge_dir):
            base.source_name = f"{DEMO_KNOWLEDGE_SOURCE_PREFIX}{base.directory.name}"
        knowledge = base
    return ToolBackends(metrics=metrics, logs=logs, changes=changes, knowledge=knowledge, disabled=disabled,
                        redactor=redactor)


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
        tool: backend for tool, backend in ((QUERY_METRICS, backends.metrics), (QUERY_LOGS, backends.logs))
        if isinstance(backend, (PrometheusMetricsBackend, LokiLogsBackend))
    }
    return BackendHealth(probed, recheck_seconds=settings.backend_recheck_seconds)
