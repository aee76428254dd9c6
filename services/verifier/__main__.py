"""Verifier process: wiring only."""

import threading

from opentelemetry.trace import TracerProvider

from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from services.verifier.servicer import (
    VerifierServicer,
    build_semantic_guard,
    build_verifier_engine,
    guard_model_settings,
)
from shared.config import ModelSettings, VerifierSettings, model_settings_for
from shared.core.grounding import key_terms
from shared.model_client import client_for
from shared.server import run_service


def build_servicer(model_settings: ModelSettings, guard_settings: SemanticGuardSettings, tracer_provider: TracerProvider | None) -> VerifierServicer:
    verifier_client = client_for(model_settings, tracer_provider)
    guard_client = client_for(guard_model_settings(model_settings, guard_settings), tracer_provider)
    return VerifierServicer(
        build_verifier_engine(model_settings, verifier_client),
        build_semantic_guard(model_settings, guard_settings, guard_client),
    )


if __name__ == "__main__":
    # The claim checks segment Chinese text: load the segmenter while the server starts, not on
    # the first question (the service is ready meanwhile; a question that comes first waits for it).
    threading.Thread(target=key_terms.warm_up, name="segmenter-warm-up", daemon=True).start()
    model_settings = model_settings_for("verifier")
    guard_settings = SemanticGuardSettings()
    run_service(
        service_name="verifier",
        settings=VerifierSettings(),
        service=verifier_pb2.DESCRIPTOR.services_by_name["VerifierService"],
        add_servicer=verifier_pb2_grpc.add_VerifierServiceServicer_to_server,
        build_servicer=lambda tracer_provider, _meter_provider: build_servicer(model_settings, guard_settings, tracer_provider),
    )
