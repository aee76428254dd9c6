"""The planner's engines behind one interface: the embedded planner (default, offline) and the
OpenAI-compatible model planner (`model_planner.py`), which falls back to the embedded plan when
the model's plan cannot be used. The servicer only sees `PlanRun`: the plan plus the audit of its
model calls (`shared.model_calls.ModelCallAudit`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shared.core.contracts import Plan, PromptRef, QuestionIntent, RetryContext
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.follow_up import FollowUpReading
from shared.model_calls import ModelCallAudit
from shared.model_client import TimeRemaining

EMBEDDED_PROMPT = PromptRef(role="planner", name="planner.embedded", version="1")


@dataclass
class PlanRun:
    plan: Plan
    audit: ModelCallAudit
    # Why the model's plan was not used (empty when it was, or when no model was asked).
    fallback_reason: str = ""


class PlanEngine(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def create_plan(
        self,
        query: str,
        now: datetime,
        mode: str = "NORMAL",
        retry_context: RetryContext | None = None,
        *,
        time_remaining: TimeRemaining | None = None,
        follow_up: FollowUpReading | None = None,
        intent: QuestionIntent | None = None,
    ) -> PlanRun: ...


class EmbeddedPlanEngine:
    """The embedded planner as a `PlanEngine`: no model, one attempt."""

    provider = "embedded"
    prompt_ref = EMBEDDED_PROMPT

    def __init__(self, planner: EmbeddedPlanner | None = None) -> None:
        self.planner = planner or EmbeddedPlanner()

    def create_plan(
        self,
        query: str,
        now: datetime,
        mode: str = "NORMAL",
        retry_context: RetryContext | None = None,
        *,
        time_remaining: TimeRemaining | None = None,
        follow_up: FollowUpReading | None = None,
        intent: QuestionIntent | None = None,
    ) -> PlanRun:
        plan = self.planner.plan(query, now, mode, retry_context, follow_up=follow_up, intent=intent)
        return PlanRun(plan, ModelCallAudit.embedded(EMBEDDED_PROMPT))
