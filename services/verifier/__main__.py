"""Verifier process: wiring only."""

from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.servicer import VerifierServicer
from shared.config import VerifierSettings
from shared.server import run_service

if __name__ == "__main__":
    run_service(
        service_name="verifier",
        settings=VerifierSettings(),
        service=verifier_pb2.DESCRIPTOR.services_by_name["VerifierService"],
        add_servicer=verifier_pb2_grpc.add_VerifierServiceServicer_to_server,
        build_servicer=lambda tracer_provider: VerifierServicer(EmbeddedVerifier()),
    )
