"""Planner process: wiring only."""

from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from services.planner.embedded_planner import EmbeddedPlanner
from services.planner.servicer import PlannerServicer
from shared.config import PlannerSettings
from shared.server import run_service

if __name__ == "__main__":
    run_service(
        service_name="planner",
        settings=PlannerSettings(),
        service=planner_pb2.DESCRIPTOR.services_by_name["PlannerService"],
        add_servicer=planner_pb2_grpc.add_PlannerServiceServicer_to_server,
        build_servicer=lambda tracer_provider: PlannerServicer(EmbeddedPlanner()),
    )
