"""The OpenAI-compatible verifier: one single-turn model call per attempt, judged by the shared
protocol parser.

- System message: the versioned prompt `prompts/verifier_v2.v<N>.md`. User message: exactly
  `canonical_input_bytes(VerifierInput)` decoded, the verified-only payload and nothing else.
- JSON output: `response_format` `{"type": "json_object"}`, plus a bounded schema of the verifier
  output when the server accepts one (`json_schema_format`). The schema narrows shapes only; the
  reply is still parsed and policed by `parse_verifier_output`.
- Two technical attempts (`shared.model_client.run_attempts`) on timeout, transport, parse or
  schema failure, with the same message objects: the second request's input is byte-identical. A
  parsed reply is final, whatever its verdict.
"""

from __future__ import annotations

from typing import Any

from services.verifier.engine import TECHNICAL_ATTEMPTS, VerifierRun
from services.verifier.protocol import VerifierProtocolError, canonical_input_bytes, parse_verifier_output
from shared.core.contracts import EVIDENCE_TOOLS, VERDICT_ORDER, VERIFICATIONS, VerifierInput, VerifierOutput
from shared.model_calls import ModelCallAudit, ModelEngine
from shared.model_client import (
    IsActive,
    ModelAttemptsFailed,
    ModelCallTally,
    ModelClient,
    ModelReply,
    TimeRemaining,
    run_attempts,
)
from shared.prompt_files import Prompt

MAX_DETAIL = 300
MAX_RATIONALE = 600
MAX_REFS = 3


def _string(max_length: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def verifier_output_schema(inp: VerifierInput) -> dict[str, Any]:
    """A bounded schema of the verifier output for this input (claim ids and tools enumerated)."""
    claim_ids = [claim.claim_id for claim in inp.verified_executor_output.claims]
    claim_id: dict[str, Any] = {"type": "string", "enum": claim_ids} if claim_ids else _string(64)
    tools = sorted({item.tool_name for item in inp.verified_evidence} or EVIDENCE_TOOLS)
    ref = _object(
        {
            "tool_name": {"type": "string", "enum": tools},
            "source_invocation_ids": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": MAX_REFS},
            "raw_path": _string(120),
            "claim_id": claim_id,
        },
        ["tool_name", "source_invocation_ids", "raw_path"],
    )
    check = _object(
        {
            "claim_id": claim_id,
            "verification": {"type": "string", "enum": list(VERIFICATIONS)},
            "detail": _string(MAX_DETAIL),
            "evidence_refs": {"type": "array", "items": ref, "maxItems": MAX_REFS},
        },
        ["claim_id", "verification", "detail", "evidence_refs"],
    )
    return _object(
        {
            "verdict": {"type": "string", "enum": list(VERDICT_ORDER)},
            "groundedness_score": {"type": "number", "minimum": 0, "maximum": 1},
            "critical_fact_count": {"type": "integer", "minimum": 0, "maximum": max(1, len(claim_ids))},
            "claim_checks": {"type": "array", "items": check, "maxItems": max(1, len(claim_ids))},
            "rationale": _string(MAX_RATIONALE),
        },
        ["verdict", "groundedness_score", "critical_fact_count", "claim_checks", "rationale"],
    )


class ModelVerifier(ModelEngine):
    """`VerifierEngine` over a model client; one instance per process, safe across threads."""

    ROLE = "verifier"

    def __init__(
        self,
        client: ModelClient,
        prompt: Prompt,
        *,
        attempt_timeout_seconds: float,
        max_attempts: int = TECHNICAL_ATTEMPTS,
        json_schema_format: bool = False,
    ) -> None:
        self._client = client
        self._prompt = prompt
        self._attempt_timeout = attempt_timeout_seconds
        self._max_attempts = max_attempts
        self._json_schema_format = json_schema_format

    def messages(self, inp: VerifierInput) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": canonical_input_bytes(inp).decode("utf-8")},
        ]

    def response_format(self, inp: VerifierInput) -> dict[str, Any]:
        if self._json_schema_format:
            return {"type": "json_object", "schema": verifier_output_schema(inp)}
        return {"type": "json_object"}

    def verify(
        self,
        inp: VerifierInput,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> VerifierRun:
        tally = ModelCallTally()

        def attempt_budget() -> float:
            left = time_remaining() if time_remaining is not None else None
            return self._attempt_timeout if left is None else min(self._attempt_timeout, left)

        def parse(reply: ModelReply) -> VerifierOutput:
            return parse_verifier_output(reply.content or "", inp)

        def run(output: VerifierOutput | None = None, failure: str = "") -> VerifierRun:
            return VerifierRun(output, ModelCallAudit.of_calls(self.prompt_ref, self._client, tally), failure=failure)

        try:
            output = run_attempts(
                self._client,
                self.messages(inp),
                parse,
                tally=tally,
                max_attempts=self._max_attempts,
                time_remaining=attempt_budget,
                rejects=(VerifierProtocolError,),
                response_format=self.response_format(inp),
                is_active=is_active,
            )
        except ModelAttemptsFailed as failed:
            return run(failure=failed.reason)
        return run(output)
