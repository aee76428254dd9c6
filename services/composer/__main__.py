"""Composer process: wiring only."""

from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from services.composer.servicer import ComposerServicer
from shared.config import ComposerSettings
from shared.logging_setup import configure_logging
from shared.server import serve
from shared.telemetry import init_telemetry

SERVICE = "composer"


def main() -> None:
    settings = ComposerSettings()
    configure_logging(SERVICE, settings.log_level)
    tracer_provider = init_telemetry(SERVICE, settings.otlp_endpoint)
    servicer = ComposerServicer()
    serve(
        service_name=SERVICE,
        settings=settings,
        register=lambda server: composer_pb2_grpc.add_ComposerServiceServicer_to_server(servicer, server),
        service_names=[composer_pb2.DESCRIPTOR.services_by_name["ComposerService"].full_name],
        tracer_provider=tracer_provider,
    )


if __name__ == "__main__":
    main()
