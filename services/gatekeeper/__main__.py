"""Gatekeeper process: wiring only. Deterministic; never calls a model."""

from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from services.gatekeeper.rule_catalog import load_rule_catalog
from services.gatekeeper.servicer import GatekeeperServicer
from shared.config import GatekeeperSettings
from shared.db.engine import traced_session_factory
from shared.db.invocation_store import InvocationStore
from shared.server import run_service

if __name__ == "__main__":
    settings = GatekeeperSettings()
    run_service(
        service_name="gatekeeper",
        settings=settings,
        service=gatekeeper_pb2.DESCRIPTOR.services_by_name["GatekeeperService"],
        add_servicer=gatekeeper_pb2_grpc.add_GatekeeperServiceServicer_to_server,
        build_servicer=lambda tracer_provider, meter_provider: GatekeeperServicer(
            InvocationStore(traced_session_factory(settings.database_url, tracer_provider)),
            load_rule_catalog(),
            meter_provider=meter_provider,
        ),
        databases=[settings.database_url],
    )
