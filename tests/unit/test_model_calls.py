"""One audit of model calls and one deadline budget for every role (issue 18, point 3): what the
run records embed, what the responses carry, and the time a servicer gives its engine."""

from __future__ import annotations

import pytest

from shared.contracts import PromptRef, TokenUsage
from shared.model_calls import (
    DEADLINE_HEADROOM_SECONDS,
    ModelCallAudit,
    deadline_budget,
    model_call_info,
    prompt_ref_info,
)
from shared.model_client import ModelCallTally, ModelReply

PROMPT = PromptRef(role="planner", name="planner", version="2")


class Client:
    provider, model, timeout_seconds = "openai", "scripted-model", 10.0


def test_an_embedded_engine_is_one_attempt_without_tokens_named_by_its_prompt():
    audit = ModelCallAudit.embedded(PromptRef(role="composer", name="composer.templates", version="1"))
    info = model_call_info(audit)
    assert (info.role, info.provider, info.model, info.attempts) == ("composer", "embedded", "composer.templates", 1)
    assert (info.token_usage.prompt_tokens, info.token_usage.total_tokens) == (0, 0)


def test_the_audit_of_model_calls_is_what_the_tally_counted():
    tally = ModelCallTally(attempts=2)
    tally.add(ModelReply(content="{}", usage=TokenUsage(prompt_tokens=11, completion_tokens=7, total_tokens=18)))
    tally.add(ModelReply(content="{}", usage=TokenUsage(prompt_tokens=11, completion_tokens=3, total_tokens=14)))
    info = model_call_info(ModelCallAudit.of_calls(PROMPT, Client(), tally))
    assert (info.role, info.provider, info.model, info.attempts) == ("planner", "openai", "scripted-model", 2)
    usage = info.token_usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (22, 10, 32)


def test_the_role_of_a_model_call_is_its_prompts():
    guard = PromptRef(role="semantic_guard", name="semantic_guard", version="1")
    assert model_call_info(ModelCallAudit.embedded(guard)).role == "semantic_guard"
    ref = prompt_ref_info(guard)
    assert (ref.role, ref.name, ref.version) == ("semantic_guard", "semantic_guard", "1")


class Context:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


def test_the_deadline_budget_keeps_headroom_and_follows_the_deadline():
    context = Context(4.0)
    budget = deadline_budget(context)
    assert budget() == pytest.approx(4.0 - DEADLINE_HEADROOM_SECONDS)
    context.remaining = 1.0  # asked again before each attempt: the time left now
    assert budget() == pytest.approx(1.0 - DEADLINE_HEADROOM_SECONDS)


def test_no_deadline_and_no_context_mean_no_bound():
    assert deadline_budget(Context(None))() is None
    assert deadline_budget(None)() is None
