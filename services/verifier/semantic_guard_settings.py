"""Limits of the model SemanticGuard, read from `ATTEST_SEMANTIC_GUARD_*` (SemanticGuard spec,
"Semantic model budgets timeout cancellation and retry").

The release policy reviews a Run's Draft once, so one ReviewDraft call is the Run's semantic
review: the run budgets bound everything that call may spend over its attempts.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SemanticGuardSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ATTEST_SEMANTIC_GUARD_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # The serialised review input (query, Draft without tool call ids, snapshot); larger -> FAILED.
    max_input_bytes: int = Field(default=64 * 1024, gt=0)
    # One reply's content; larger -> a schema failure of that attempt.
    max_output_bytes: int = Field(default=4 * 1024, gt=0)
    # `max_tokens` of each guard request (never above the verifier model's own max_tokens).
    max_output_tokens: int = Field(default=512, gt=0)
    # Each attempt, and all attempts together; both also bounded by the caller's gRPC deadline.
    attempt_timeout_seconds: float = Field(default=30.0, gt=0.0)
    total_timeout_seconds: float = Field(default=60.0, gt=0.0)
    # The Run's budgets: input plus output bytes, model calls and tokens over all attempts.
    run_max_bytes: int = Field(default=256 * 1024, gt=0)
    run_max_model_calls: int = Field(default=2, ge=1, le=5)
    run_max_tokens: int = Field(default=40_000, gt=0)
    # Technical attempts (timeout, transport, parse, schema); UNSUPPORTED is never retried.
    max_attempts: int = Field(default=2, ge=1, le=5)
