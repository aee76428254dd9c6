"""Executor process: wiring only."""

from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.servicer import ExecutorServicer
from services.executor.tools.registry import build_default_registry
from services.executor.tools.backend_factory import build_backends
from shared.config import ExecutorSettings
from shared.db.engine import traced_session_factory
from shared.db.invocation_store import InvocationStore
from shared.server import run_service


def build_servicer(settings: ExecutorSettings, tracer_provider) -> ExecutorServicer:
    return ExecutorServicer(
        InvocationStore(traced_session_factory(settings.database_url, tracer_provider)),
        build_default_registry(build_backends(settings)),
        EmbeddedExecutorAgent(),
    )


if __name__ == "__main__":
    settings = ExecutorSettings()
    run_service(
        service_name="executor",
        settings=settings,
        service=executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"],
        add_servicer=executor_pb2_grpc.add_ExecutorServiceServicer_to_server,
        build_servicer=lambda tracer_provider: build_servicer(settings, tracer_provider),
    )
