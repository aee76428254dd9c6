"""What every role says of its model calls, and the time it gives them.

- `ModelCallAudit`: the audit every role's run record embeds (ComposeRun, PlanRun, EngineRun,
  AgentRun, RepairRun, VerifierRun, GuardRun) — the prompt sent (name and version), the provider
  and model, the HTTP attempts made and the tokens they cost. An embedded engine records itself
  as provider "embedded", one attempt, no tokens.
- `model_call_info` / `prompt_ref_info`: that audit as the protobuf every response carries, built
  here only.
- `ModelEngine`: what every model-backed engine says of itself (provider, prompt sent).
- `deadline_budget`: the caller's remaining gRPC deadline less the headroom the response needs to
  reach it — the `time_remaining` every servicer hands its engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import grpc

from attest.common.v1 import audit_pb2
from shared.core.contracts import PromptRef, TokenUsage
from shared.model_client import ModelCallTally, ModelClient, TimeRemaining
from shared.prompt_files import Prompt

EMBEDDED_PROVIDER = "embedded"
# Time kept back from the caller's deadline so that the response (a fallback included) still reaches it.
DEADLINE_HEADROOM_SECONDS = 0.5


@dataclass
class ModelCallAudit:
    prompt: PromptRef
    provider: str
    model: str
    attempts: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)

    @classmethod
    def embedded(cls, prompt: PromptRef, attempts: int = 1) -> ModelCallAudit:
        """An embedded engine's run: no model (the prompt's name stands for it), no tokens."""
        return cls(prompt, EMBEDDED_PROVIDER, prompt.name, attempts=attempts)

    @classmethod
    def of_calls(cls, prompt: PromptRef, client: ModelClient, tally: ModelCallTally) -> ModelCallAudit:
        """The model calls `tally` counted, made through `client` with `prompt`."""
        return cls(prompt, client.provider, client.model, attempts=tally.attempts, usage=tally.usage)


class ModelEngine:
    """An engine that asks a model with one prompt file: the provider it names and the prompt it
    sends. A subclass sets ROLE and keeps its client and prompt as `_client` and `_prompt`."""

    ROLE: ClassVar[str]
    _client: ModelClient
    _prompt: Prompt

    @property
    def provider(self) -> str:
        return self._client.provider

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt this engine sends (name and version), for DescribePrompts."""
        return self._prompt.ref(self.ROLE)


def prompt_ref_info(prompt: PromptRef) -> audit_pb2.PromptRef:
    return audit_pb2.PromptRef(role=prompt.role, name=prompt.name, version=prompt.version)


def model_call_info(audit: ModelCallAudit) -> audit_pb2.ModelCallInfo:
    """The audit as `ModelCallInfo`. Its role is the prompt's: every role sends prompts of its own
    (the SemanticGuard's are "semantic_guard", though the verifier service runs it)."""
    usage = audit.usage
    return audit_pb2.ModelCallInfo(
        role=audit.prompt.role,
        provider=audit.provider,
        model=audit.model,
        attempts=audit.attempts,
        token_usage=audit_pb2.TokenUsage(
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens, total_tokens=usage.total_tokens
        ),
    )


def deadline_budget(context: grpc.ServicerContext | None) -> TimeRemaining:
    """Seconds the handler may still spend: the caller's deadline less DEADLINE_HEADROOM_SECONDS
    (None without a deadline, or without a context when a test calls a servicer directly)."""

    def time_remaining() -> float | None:
        value = context.time_remaining() if context is not None else None
        return None if value is None else value - DEADLINE_HEADROOM_SECONDS

    return time_remaining
