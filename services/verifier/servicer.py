"""VerifierService: claim checks on the verified-only payload, then the deterministic verdict;
and ReviewDraft, the single-ReAct SemanticGuard.

Thin: proto in -> engine -> proto out. The engines (embedded or OpenAI-compatible, chosen by
`model_settings_for("verifier")`) own the technical attempts; the servicer reports them with the
prompt reference and the model call (provider, model, attempts, token usage).

- VerifyClaims: COMPLETED with the model output and the effective verdict, or FAILED with a
  failure_reason and no output (the gateway then falls back without a verdict).
- ReviewDraft: COMPLETED with SUPPORTED / UNSUPPORTED and an audit reason, or FAILED with the
  technical failure as reason and no verdict (the gateway releases SEMANTIC_UNAVAILABLE).
- Both honour the caller's deadline, and a cancelled caller gets CANCELLED and no result.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from attest.common.v1 import enums_pb2, single_react_pb2, verifier_types_pb2
from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
from services.verifier.draft_grounding import combine_review, ground_draft
from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.engine import EmbeddedVerifierEngine, VerifierEngine, VerifierRun
from services.verifier.grounding_overlay import apply_grounding
from services.verifier.model_verifier import ModelVerifier
from services.verifier.prompts import SEMANTIC_GUARD_PROMPT, VERIFIER_PROMPT, load_prompt
from services.verifier.semantic_guard import EmbeddedSemanticGuard, GuardRun, ModelSemanticGuard, SemanticGuardEngine
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from shared.config import ModelSettings
from shared.core.contracts import VerifierInput
from shared.core.effective_verdict import compute_effective_verdict
from shared.draft_contract import Draft, VerifiedSnapshot, for_semantic_guard
from shared.errors import InvalidInput, Reason
from shared.model_calls import ModelCallAudit, deadline_budget, model_call_info, prompt_ref_info
from shared.model_client import ModelClient
from shared.proto_convert import enum_member, message_to_model, plain_to_message, spec_value

log = logging.getLogger(__name__)


def build_verifier_engine(settings: ModelSettings, client: ModelClient | None = None) -> VerifierEngine:
    """The engine the verifier's model settings name: embedded (default) or the model verifier."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai verifier needs a model client")
        return ModelVerifier(
            client, load_prompt(VERIFIER_PROMPT),
            attempt_timeout_seconds=settings.timeout_seconds,
            json_schema_format=settings.json_schema_format,
        )
    return EmbeddedVerifierEngine()


def guard_model_settings(settings: ModelSettings, guard: SemanticGuardSettings) -> ModelSettings:
    """The verifier's model settings with the guard's output bound as `max_tokens`."""
    return settings.model_copy(update={"max_tokens": min(settings.max_tokens, guard.max_output_tokens)})


def build_semantic_guard(
    settings: ModelSettings, guard: SemanticGuardSettings, client: ModelClient | None = None
) -> SemanticGuardEngine:
    """SemanticGuard reuses the verifier's model (spec: the system ChatModel), embedded by default."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai SemanticGuard needs a model client")
        return ModelSemanticGuard(
            client, load_prompt(SEMANTIC_GUARD_PROMPT), guard, json_schema_format=settings.json_schema_format
        )
    return EmbeddedSemanticGuard()


def _audit_fields(audit: ModelCallAudit) -> dict[str, Any]:
    """The fields both responses carry about the engine's model calls."""
    return {"attempts": audit.attempts, "prompt": prompt_ref_info(audit.prompt), "model_call": model_call_info(audit)}


class VerifierServicer(verifier_pb2_grpc.VerifierServiceServicer):
    def __init__(self, verifier: VerifierEngine | EmbeddedVerifier | Any, guard: SemanticGuardEngine | None = None) -> None:
        # A bare EmbeddedVerifier (`verify(inp)` only) is wrapped in the embedded engine.
        self._verifier: VerifierEngine = (
            EmbeddedVerifierEngine(verifier) if isinstance(verifier, EmbeddedVerifier) else verifier
        )
        self._guard: SemanticGuardEngine = guard if guard is not None else EmbeddedSemanticGuard()

    def VerifyClaims(
        self, request: verifier_pb2.VerifyClaimsRequest, context: grpc.ServicerContext
    ) -> verifier_pb2.VerifyClaimsResponse:
        if not request.HasField("input"):
            raise InvalidInput("input is required", reason=Reason.FIELD_REQUIRED, field="input")
        verifier_input = message_to_model(request.input, VerifierInput)
        run: VerifierRun = self._verifier.verify(
            verifier_input, time_remaining=deadline_budget(context), is_active=context.is_active
        )
        common = _audit_fields(run.audit)
        if run.output is None:
            log.warning("verifier failed after %d attempt(s): %s", run.audit.attempts, run.failure)
            return verifier_pb2.VerifyClaimsResponse(
                verifier_status=enum_member(enums_pb2.VerifierStatus, "FAILED"),
                failure_reason=run.failure or "the verifier produced no output",
                **common,
            )
        # Whatever engine ran, the deterministic grounding checks run too; the lower wins.
        output = apply_grounding(verifier_input, run.output, run.grounding)
        effective = compute_effective_verdict(
            verifier_input.verified_executor_output.claims,
            output.claim_checks,
            output.verdict,
            verifier_input.verdict_ceiling,
        )
        return verifier_pb2.VerifyClaimsResponse(
            verifier_status=enum_member(enums_pb2.VerifierStatus, "COMPLETED"),
            output=plain_to_message(output, verifier_types_pb2.VerifierOutput),
            effective=plain_to_message(effective, verifier_types_pb2.EffectiveVerdict),
            **common,
        )

    def ReviewDraft(
        self, request: verifier_pb2.ReviewDraftRequest, context: grpc.ServicerContext
    ) -> verifier_pb2.ReviewDraftResponse:
        if not request.HasField("draft") or not request.draft.HasField("conclusion"):
            raise InvalidInput("draft with a conclusion is required: SemanticGuard reviews concluded Drafts only",
                               reason=Reason.FIELD_REQUIRED,
                               field="draft.conclusion" if request.HasField("draft") else "draft")
        draft = message_to_model(request.draft, Draft)
        # The guard never sees tool call ids, even when the caller sent them.
        draft = for_semantic_guard(draft)
        snapshot = message_to_model(request.snapshot, VerifiedSnapshot)
        run: GuardRun = self._guard.review(
            request.query, draft, snapshot, time_remaining=deadline_budget(context), is_active=context.is_active
        )
        common = _audit_fields(run.audit)
        if run.review is None:
            log.warning("SemanticGuard failed after %d attempt(s): %s", run.audit.attempts, run.failure)
            return verifier_pb2.ReviewDraftResponse(
                verifier_status=enum_member(enums_pb2.VerifierStatus, "FAILED"),
                reason=run.failure or "the SemanticGuard produced no verdict",
                **common,
            )
        # Whatever engine reviewed the Draft, the deterministic grounding checks run too.
        verdict, reason, findings = combine_review(run.review, ground_draft(request.query, draft, snapshot))
        return verifier_pb2.ReviewDraftResponse(
            verifier_status=enum_member(enums_pb2.VerifierStatus, "COMPLETED"),
            verdict=enum_member(enums_pb2.SemanticVerdict, verdict),
            reason=reason,
            findings=[plain_to_message(f, single_react_pb2.SemanticFinding) for f in findings],
            **common,
        )

    def DescribePrompts(
        self, request: verifier_pb2.DescribePromptsRequest, context: grpc.ServicerContext
    ) -> verifier_pb2.DescribePromptsResponse:
        """The VerifyClaims prompt in multi-agent mode, the ReviewDraft (SemanticGuard) prompt in
        single-ReAct mode, of the configured engines."""
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        engine = self._guard if mode == "SINGLE_REACT" else self._verifier
        return verifier_pb2.DescribePromptsResponse(provider=engine.provider, prompts=[prompt_ref_info(engine.prompt_ref)])
