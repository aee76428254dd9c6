"""Executor process: wiring only."""

from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.servicer import ExecutorServicer
from services.executor.tools.registry import build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from shared.config import ExecutorSettings
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.logging_setup import configure_logging
from shared.server import serve
from shared.telemetry import init_telemetry, instrument_engine

SERVICE = "executor"


def main() -> None:
    settings = ExecutorSettings()
    configure_logging(SERVICE, settings.log_level)
    tracer_provider = init_telemetry(SERVICE, settings.otlp_endpoint)
    engine = make_engine(settings.database_url)
    instrument_engine(engine, tracer_provider)
    registry = build_default_registry(build_sql_backends(settings.estate_database_url))
    servicer = ExecutorServicer(
        InvocationStore(make_session_factory(engine)), registry, EmbeddedExecutorAgent()
    )
    serve(
        service_name=SERVICE,
        settings=settings,
        register=lambda server: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(servicer, server),
        service_names=[executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name],
        tracer_provider=tracer_provider,
    )


if __name__ == "__main__":
    main()
