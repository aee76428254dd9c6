"""Executor process: wiring only."""

import sys
import threading

from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from services.executor.plan_limits import PlanLimits
from services.executor.service_catalogue import catalogue_of
from services.executor.servicer import ExecutorServicer, build_draft_repair, build_engine, build_react_agent
from services.executor.tools.backend_factory import backend_health, build_backends
from services.executor.tools.backend_readiness import BackendHealth, WrongBackendError
from services.executor.tools.backends import ToolBackends
from services.executor.tools.http_api import ConnectionConfigError
from services.executor.tools.registry import build_default_registry
from shared.config import ExecutorSettings, ModelSettings, model_settings_for
from shared.db.engine import traced_session_factory
from shared.db.invocation_store import InvocationStore, RunBudget
from shared.model_client import client_for
from shared.redaction import RedactionPatternError
from shared.server import RunningServer, run_service


def build_servicer(
    settings: ExecutorSettings, model_settings: ModelSettings, tracer_provider: TracerProvider | None,
    backends: ToolBackends | None = None,
) -> ExecutorServicer:
    backends = backends if backends is not None else build_backends(settings, tracer_provider)
    prebuild = getattr(backends.knowledge, "prebuild", None)
    if prebuild is not None:  # in the background: the service is ready while the index builds
        threading.Thread(target=prebuild, name="knowledge-prebuild", daemon=True).start()
    registry = build_default_registry(backends)
    client = client_for(model_settings, tracer_provider)
    return ExecutorServicer(
        InvocationStore(traced_session_factory(settings.database_url, tracer_provider), run_budget(settings)),
        registry,
        build_engine(model_settings, registry, client),
        react_agent=build_react_agent(model_settings, registry, client),
        draft_repair=build_draft_repair(model_settings, client),
        catalogue=catalogue_of(backends),
        max_services_per_question=settings.max_services_per_question,
        triage_max_services=settings.triage_max_services,
        plan_limits=PlanLimits.from_settings(settings),
    )


def run_budget(settings: ExecutorSettings) -> RunBudget:
    """What one run may hold."""
    return RunBudget(max_invocations=settings.max_run_invocations, max_evidence_bytes=settings.max_run_evidence_bytes)


def checked_backends(settings: ExecutorSettings, tracer_provider: TracerProvider | None) -> tuple[ToolBackends, BackendHealth]:
    """The backends after the start-up check: a URL that answers but is not Prometheus/Loki (or
    refuses our credentials), or unusable connection settings, end the process with one line on
    stderr; an unreachable backend only marks its tool NOT_SERVING (backend_readiness.py)."""
    try:
        backends = build_backends(settings, tracer_provider)
        health = backend_health(backends, settings)
        health.check_at_startup()
    except (WrongBackendError, ConnectionConfigError, RedactionPatternError) as exc:
        print(f"error: executor: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    return backends, health


def attach_all(monitors: list[BackendHealth], running: RunningServer) -> None:
    """Each backend monitor reports into the serving server's health service."""
    for monitor in monitors:
        monitor.attach(running.health)


if __name__ == "__main__":
    settings = ExecutorSettings()
    model_settings = model_settings_for("executor")
    monitors: list[BackendHealth] = []

    def build(tracer_provider: TracerProvider, _meter_provider: MeterProvider) -> ExecutorServicer:
        backends, health = checked_backends(settings, tracer_provider)
        monitors.append(health)
        return build_servicer(settings, model_settings, tracer_provider, backends)

    run_service(
        service_name="executor",
        settings=settings,
        service=executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"],
        add_servicer=executor_pb2_grpc.add_ExecutorServiceServicer_to_server,
        build_servicer=build,
        databases=[settings.database_url, settings.estate_database_url],
        on_serving=lambda running: attach_all(monitors, running),
    )
