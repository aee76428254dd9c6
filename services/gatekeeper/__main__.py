"""Gatekeeper process: wiring only. Deterministic; never calls a model."""

from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from services.gatekeeper.rule_catalog import load_rule_catalog
from services.gatekeeper.servicer import GatekeeperServicer
from shared.config import GatekeeperSettings
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.logging_setup import configure_logging
from shared.server import serve
from shared.telemetry import init_telemetry, instrument_engine

SERVICE = "gatekeeper"


def main() -> None:
    settings = GatekeeperSettings()
    configure_logging(SERVICE, settings.log_level)
    tracer_provider = init_telemetry(SERVICE, settings.otlp_endpoint)
    engine = make_engine(settings.database_url)
    instrument_engine(engine, tracer_provider)
    servicer = GatekeeperServicer(InvocationStore(make_session_factory(engine)), load_rule_catalog())
    serve(
        service_name=SERVICE,
        settings=settings,
        register=lambda server: gatekeeper_pb2_grpc.add_GatekeeperServiceServicer_to_server(servicer, server),
        service_names=[gatekeeper_pb2.DESCRIPTOR.services_by_name["GatekeeperService"].full_name],
        tracer_provider=tracer_provider,
    )


if __name__ == "__main__":
    main()
