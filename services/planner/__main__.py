"""Planner process: wiring only."""

from opentelemetry.trace import TracerProvider

from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from services.planner.servicer import PlannerServicer, build_planner
from shared.config import ModelSettings, PlannerSettings, model_settings_for
from shared.model_client import client_for
from shared.server import run_service


def build_servicer(model_settings: ModelSettings, tracer_provider: TracerProvider | None, settings: PlannerSettings | None = None) -> PlannerServicer:
    client = client_for(model_settings, tracer_provider)
    settings = settings if settings is not None else PlannerSettings()
    return PlannerServicer(build_planner(model_settings, client), max_plan_steps=settings.max_plan_steps)


if __name__ == "__main__":
    model_settings = model_settings_for("planner")
    settings = PlannerSettings()
    run_service(
        service_name="planner",
        settings=settings,
        service=planner_pb2.DESCRIPTOR.services_by_name["PlannerService"],
        add_servicer=planner_pb2_grpc.add_PlannerServiceServicer_to_server,
        build_servicer=lambda tracer_provider, _meter_provider: build_servicer(model_settings, tracer_provider,
                                                                               settings),
    )
