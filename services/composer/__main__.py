"""Composer process: wiring only."""

from opentelemetry.trace import TracerProvider

from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from services.composer.servicer import ComposerServicer, build_composer
from shared.config import ComposerSettings, ModelSettings, model_settings_for
from shared.model_client import client_for
from shared.server import run_service


def build_servicer(model_settings: ModelSettings, tracer_provider: TracerProvider | None) -> ComposerServicer:
    client = client_for(model_settings, tracer_provider)
    return ComposerServicer(build_composer(model_settings, client))


if __name__ == "__main__":
    model_settings = model_settings_for("composer")
    run_service(
        service_name="composer",
        settings=ComposerSettings(),
        service=composer_pb2.DESCRIPTOR.services_by_name["ComposerService"],
        add_servicer=composer_pb2_grpc.add_ComposerServiceServicer_to_server,
        build_servicer=lambda tracer_provider, _meter_provider: build_servicer(model_settings, tracer_provider),
    )
