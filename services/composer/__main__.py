"""Composer process: wiring only."""

from attest.composer.v1 import composer_pb2, composer_pb2_grpc
from services.composer.servicer import ComposerServicer
from shared.config import ComposerSettings
from shared.server import run_service

if __name__ == "__main__":
    run_service(
        service_name="composer",
        settings=ComposerSettings(),
        service=composer_pb2.DESCRIPTOR.services_by_name["ComposerService"],
        add_servicer=composer_pb2_grpc.add_ComposerServiceServicer_to_server,
        build_servicer=lambda tracer_provider: ComposerServicer(),
    )
