"""Gateway process: wiring only."""

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.clients import DownstreamClients
from gateway.graph import DiagnosisGraph
from gateway.servicer import GatewayServicer
from shared.channels import ChannelPool
from shared.config import GatewaySettings
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.interceptors import BearerAuthInterceptor
from shared.logging_setup import configure_logging
from shared.server import serve
from shared.telemetry import init_telemetry, instrument_engine

SERVICE = "gateway"


def main() -> None:
    settings = GatewaySettings()
    configure_logging(SERVICE, settings.log_level)
    tracer_provider = init_telemetry(SERVICE, settings.otlp_endpoint)
    engine = make_engine(settings.database_url)
    instrument_engine(engine, tracer_provider)
    runs = RunStore(make_session_factory(engine))
    pool = ChannelPool(tracer_provider=tracer_provider, max_message_bytes=settings.max_message_bytes)
    clients = DownstreamClients(
        pool,
        planner=settings.planner_addr,
        executor=settings.executor_addr,
        gatekeeper=settings.gatekeeper_addr,
        verifier=settings.verifier_addr,
        composer=settings.composer_addr,
    )
    servicer = GatewayServicer(DiagnosisGraph(clients, runs), runs, settings)
    serve(
        service_name=SERVICE,
        settings=settings,
        register=lambda server: gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server),
        service_names=[gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name],
        tracer_provider=tracer_provider,
        extra_interceptors=[BearerAuthInterceptor(settings.auth_token)] if settings.auth_token else [],
    )


if __name__ == "__main__":
    main()
