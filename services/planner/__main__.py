"""Planner process: wiring only."""

from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from services.planner.embedded_planner import EmbeddedPlanner
from services.planner.servicer import PlannerServicer
from shared.config import PlannerSettings
from shared.logging_setup import configure_logging
from shared.server import serve
from shared.telemetry import init_telemetry

SERVICE = "planner"


def main() -> None:
    settings = PlannerSettings()
    configure_logging(SERVICE, settings.log_level)
    tracer_provider = init_telemetry(SERVICE, settings.otlp_endpoint)
    servicer = PlannerServicer(EmbeddedPlanner())
    serve(
        service_name=SERVICE,
        settings=settings,
        register=lambda server: planner_pb2_grpc.add_PlannerServiceServicer_to_server(servicer, server),
        service_names=[planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name],
        tracer_provider=tracer_provider,
    )


if __name__ == "__main__":
    main()
