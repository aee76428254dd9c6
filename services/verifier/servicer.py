"""VerifierService: claim checks on the verified-only payload, then the deterministic verdict."""

from __future__ import annotations

import logging

import grpc

from attest.common.v1 import audit_pb2, enums_pb2, verifier_types_pb2
from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from services.verifier.embedded_verifier import EmbeddedVerifier
from shared.contracts import VerifierInput
from shared.effective_verdict import compute_effective_verdict
from shared.errors import InvalidInput
from shared.proto_convert import enum_number, message_to_model, plain_to_message

log = logging.getLogger(__name__)
PROMPT = audit_pb2.PromptRef(role="verifier", name="verifier.embedded", version="1")
TECHNICAL_ATTEMPTS = 2


class VerifierServicer(verifier_pb2_grpc.VerifierServiceServicer):
    def __init__(self, verifier: EmbeddedVerifier) -> None:
        self._verifier = verifier

    def VerifyClaims(self, request: verifier_pb2.VerifyClaimsRequest, context: grpc.ServicerContext):
        if not request.HasField("input"):
            raise InvalidInput("input is required")
        verifier_input = message_to_model(request.input, VerifierInput)
        failure = ""
        for attempt in range(1, TECHNICAL_ATTEMPTS + 1):
            try:
                output = self._verifier.verify(verifier_input)
            except Exception as exc:  # technical failure: retried once on the identical input
                log.warning("verifier attempt %d failed: %s", attempt, exc)
                failure = f"{type(exc).__name__}: {exc}"
                continue
            effective = compute_effective_verdict(
                verifier_input.verified_executor_output.claims,
                output.claim_checks,
                output.verdict,
                verifier_input.verdict_ceiling,
            )
            return verifier_pb2.VerifyClaimsResponse(
                verifier_status=enum_number(enums_pb2.VerifierStatus.DESCRIPTOR, "COMPLETED"),
                output=plain_to_message(output, verifier_types_pb2.VerifierOutput),
                effective=plain_to_message(effective, verifier_types_pb2.EffectiveVerdict),
                attempts=attempt,
                prompt=PROMPT,
                model_call=audit_pb2.ModelCallInfo(role="verifier", provider="embedded", model="verifier.embedded", attempts=attempt),
            )
        return verifier_pb2.VerifyClaimsResponse(
            verifier_status=enum_number(enums_pb2.VerifierStatus.DESCRIPTOR, "FAILED"),
            attempts=TECHNICAL_ATTEMPTS,
            failure_reason=failure,
            prompt=PROMPT,
        )
