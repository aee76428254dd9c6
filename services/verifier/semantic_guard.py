"""SemanticGuard: is a verified Draft supported by its verified evidence snapshot?

SemanticGuard spec, "Isolated single-turn SemanticGuard" and "Semantic model budgets timeout
cancellation and retry".

The review sees only the query, the user-visible Draft without tool call ids and the snapshot
(`review_input_bytes`: canonical JSON, so both attempts send the same bytes). Two engines:

- `EmbeddedSemanticGuard`: the deterministic review of `embedded_semantic_guard.py`.
- `ModelSemanticGuard`: one fresh single-turn chat call per attempt (system: the versioned
  prompt `prompts/semantic_guard.v<N>.md`; user: the review input) — no tools, no history, no
  memory. The reply must be exactly `{"verdict": "SUPPORTED"|"UNSUPPORTED", "reason": "…"}`
  (`parse_semantic_verdict`); it cannot carry a corrected report.

Limits (`SemanticGuardSettings`): an input over `max_input_bytes` is not sent (FAILED, no call);
a reply over `max_output_bytes` is a schema failure; each attempt's timeout is the smallest of
the attempt timeout, what is left of the total timeout and what is left of the caller's
deadline; the run budgets (bytes in and out, model calls, tokens) are checked before every
attempt. Technical failures (timeout, transport, parse, schema) get one more attempt on the same
bytes; a valid UNSUPPORTED is final after one attempt. When every permitted attempt fails, the
run has no review and a `failure` (the servicer answers FAILED; the gateway releases
SEMANTIC_UNAVAILABLE). A cancelled caller gets `shared.errors.Cancelled`: no review at all.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from services.verifier.embedded_semantic_guard import SemanticReview, review_draft
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from shared.core.contracts import PromptRef
from shared.core.strict_json import NotOneObject, one_json_object
from shared.draft_contract import Draft, VerifiedSnapshot
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

ROLE = "semantic_guard"
SEMANTIC_VERDICTS = ("SUPPORTED", "UNSUPPORTED")
MAX_REASON_CHARS = 1000
EMBEDDED_PROMPT = PromptRef(role=ROLE, name="semantic_guard.embedded", version="1")


class SemanticProtocolError(ValueError):
    """The guard's reply is not the strict verdict object (a retryable parse/schema failure)."""


@dataclass
class GuardRun:
    """One ReviewDraft: `review` when an attempt produced a verdict, else `failure` says why."""

    review: SemanticReview | None
    audit: ModelCallAudit
    failure: str = ""


class SemanticGuardEngine(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def review(
        self,
        query: str,
        draft: Draft,
        snapshot: VerifiedSnapshot,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> GuardRun: ...


def review_input(query: str, draft: Draft, snapshot: VerifiedSnapshot) -> dict[str, Any]:
    """What the guard may see: the query, every user-visible Draft section and the snapshot."""
    conclusion = draft.conclusion
    return {
        "query": query,
        "draft": {
            "conclusion": None if conclusion is None else {"text": conclusion.text, "analysis_refs": conclusion.analysis_refs},
            # Tool call ids are left out on purpose: the guard never sees them.
            "analyses": [{"analysis_id": a.analysis_id, "kind": a.kind, "text": a.text} for a in draft.analyses],
            "action_plan": [
                {"text": i.text, "analysis_refs": i.analysis_refs, "requires_human_confirmation": i.requires_human_confirmation}
                for i in draft.action_plan
            ],
            "recommendations": [{"text": r.text, "analysis_refs": r.analysis_refs} for r in draft.recommendations],
            "limitations": list(draft.limitations),
            "missing_context": list(draft.missing_context),
        },
        "verified_evidence": snapshot.model_dump(mode="json", exclude_none=True),
    }


def review_input_bytes(query: str, draft: Draft, snapshot: VerifiedSnapshot) -> bytes:
    """Canonical JSON of the review input: sorted keys, no whitespace, UTF-8."""
    data = review_input(query, draft, snapshot)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def parse_semantic_verdict(text: str, max_output_bytes: int) -> SemanticReview:
    """Exactly one JSON object with exactly `verdict` and a non-blank `reason`."""
    size = len(text.encode("utf-8"))
    if size > max_output_bytes:
        raise SemanticProtocolError(f"reply is {size} bytes, over the {max_output_bytes}-byte limit")
    try:
        data = one_json_object(text)
    except NotOneObject as exc:
        raise SemanticProtocolError(str(exc)) from None
    if set(data) != {"verdict", "reason"}:
        raise SemanticProtocolError("reply must have exactly the fields verdict and reason")
    if data["verdict"] not in SEMANTIC_VERDICTS:
        raise SemanticProtocolError(f"verdict {str(data['verdict'])[:40]!r} is not SUPPORTED or UNSUPPORTED")
    reason = data["reason"]
    if not isinstance(reason, str) or not reason.strip():
        raise SemanticProtocolError("reason must be a non-blank string")
    return SemanticReview(data["verdict"], " ".join(reason.split())[:MAX_REASON_CHARS])


class EmbeddedSemanticGuard:
    """The deterministic guard: no model, one attempt, the same review for the same input."""

    provider = "embedded"
    prompt_ref = EMBEDDED_PROMPT

    def review(
        self,
        query: str,
        draft: Draft,
        snapshot: VerifiedSnapshot,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> GuardRun:
        return GuardRun(review_draft(draft, snapshot), ModelCallAudit.embedded(EMBEDDED_PROMPT))


@dataclass
class _Spend:
    calls: int = 0
    bytes: int = 0


class ModelSemanticGuard(ModelEngine):
    """The single-turn model guard; one instance per process, safe across threads."""

    ROLE = ROLE

    def __init__(self, client: ModelClient, prompt: Prompt, settings: SemanticGuardSettings, *,
                 json_schema_format: bool = False) -> None:
        self._client = client
        self._prompt = prompt
        self._settings = settings
        self._json_schema_format = json_schema_format

    def response_format(self) -> dict[str, Any]:
        if not self._json_schema_format:
            return {"type": "json_object"}
        schema = {
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": list(SEMANTIC_VERDICTS)},
                "reason": {"type": "string", "minLength": 1, "maxLength": 400},
            },
            "required": ["verdict", "reason"],
            "additionalProperties": False,
        }
        return {"type": "json_object", "schema": schema}

    def review(
        self,
        query: str,
        draft: Draft,
        snapshot: VerifiedSnapshot,
        *,
        time_remaining: TimeRemaining | None = None,
        is_active: IsActive | None = None,
    ) -> GuardRun:
        limits = self._settings
        tally, spend = ModelCallTally(), _Spend()
        started = time.monotonic()

        def run(review: SemanticReview | None = None, failure: str = "") -> GuardRun:
            return GuardRun(review, ModelCallAudit.of_calls(self.prompt_ref, self._client, tally), failure=failure)

        payload = review_input_bytes(query, draft, snapshot)
        if len(payload) > limits.max_input_bytes:
            return run(failure=f"review input is {len(payload)} bytes, over the {limits.max_input_bytes}-byte limit")
        messages = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": payload.decode("utf-8")},
        ]

        def attempt_budget() -> float:
            left = limits.total_timeout_seconds - (time.monotonic() - started)
            caller = time_remaining() if time_remaining is not None else None
            return min(limits.attempt_timeout_seconds, left, caller if caller is not None else left)

        def gate() -> str | None:
            if spend.calls >= limits.run_max_model_calls:
                return f"model call budget of {limits.run_max_model_calls} spent"
            if tally.total_tokens >= limits.run_max_tokens:
                return f"token budget of {limits.run_max_tokens} spent"
            if spend.bytes + len(payload) > limits.run_max_bytes:
                return f"byte budget of {limits.run_max_bytes} spent"
            spend.calls += 1
            spend.bytes += len(payload)
            return None

        def parse(reply: ModelReply) -> SemanticReview:
            text = reply.content or ""
            spend.bytes += len(text.encode("utf-8"))
            return parse_semantic_verdict(text, limits.max_output_bytes)

        try:
            review = run_attempts(
                self._client, messages, parse,
                tally=tally,
                max_attempts=limits.max_attempts,
                time_remaining=attempt_budget,
                rejects=(SemanticProtocolError,),
                response_format=self.response_format(),
                is_active=is_active,
                gate=gate,
            )
        except ModelAttemptsFailed as failed:
            return run(failure=failed.reason)
        return run(review)
