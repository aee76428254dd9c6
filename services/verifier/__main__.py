"""Verifier process: wiring only."""

from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.servicer import VerifierServicer
from shared.config import VerifierSettings
from shared.logging_setup import configure_logging
from shared.server import serve
from shared.telemetry import init_telemetry

SERVICE = "verifier"


def main() -> None:
    settings = VerifierSettings()
    configure_logging(SERVICE, settings.log_level)
    tracer_provider = init_telemetry(SERVICE, settings.otlp_endpoint)
    servicer = VerifierServicer(EmbeddedVerifier())
    serve(
        service_name=SERVICE,
        settings=settings,
        register=lambda server: verifier_pb2_grpc.add_VerifierServiceServicer_to_server(servicer, server),
        service_names=[verifier_pb2.DESCRIPTOR.services_by_name["VerifierService"].full_name],
        tracer_provider=tracer_provider,
    )


if __name__ == "__main__":
    main()
