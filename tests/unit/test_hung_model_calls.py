"""Every role's model call goes through the one attempts policy: against a real
HTTP server that answers each request with headers and then a byte every 0.1 s — never a timeout
for httpx, which bounds each read, not the call — each role gives the call up, records the
attempt, and ends the way it ends on any failed model call (a fallback, a failure, a stop)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.composer.model_composer import ModelComposer
from services.composer.prompts import load_prompt as composer_prompt
from services.executor.draft_repair import ModelDraftRepair
from services.executor.openai_agent import OpenAIExecutorAgent
from services.executor.prompts import DRAFT_REPAIR_PROMPT, REACT_AGENT_PROMPT
from services.executor.prompts import load_prompt as executor_prompt
from services.executor.react_model_agent import OpenAIReactAgent
from services.executor.tools.registry import ToolRegistry
from services.planner.model_planner import ModelPlanner
from services.planner.prompts import load_prompt as planner_prompt
from services.verifier.model_verifier import ModelVerifier
from services.verifier.prompts import SEMANTIC_GUARD_PROMPT, VERIFIER_PROMPT
from services.verifier.prompts import load_prompt as verifier_prompt
from services.verifier.semantic_guard import ModelSemanticGuard
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from shared.core.agent_stop_reasons import MODEL_UNAVAILABLE
from shared.core.contracts import ComposerInput, ExecutorEvidenceV2, Plan
from tests.unit.test_model_attempts import HangingServer, http_client
from tests.unit.test_semantic_guard import QUERY, draft, snapshot
from tests.unit.test_verifier_composer_scenarios import CPU, TIMEOUT, make_input, verify

TIMEOUT_SECONDS = 0.3


def no_tool(*args, **kwargs):
    raise AssertionError("no tool runs: the model never answered")


def compose(client):
    inp = make_input([CPU, TIMEOUT])
    composer_input = ComposerInput(
        query=QUERY, effective_verdict="PASS", claim_checks=verify(inp).claim_checks,
        verified_executor_output=ExecutorEvidenceV2(claims=inp.verified_executor_output.claims),
    )
    run = ModelComposer(client, composer_prompt(), max_attempts=1).compose(composer_input)
    assert run.output.used_fallback_template and "ModelTimeoutError" in run.output.fallback_reason
    return run.audit


def plan(client):
    run = ModelPlanner(client, planner_prompt(), max_attempts=1).create_plan(QUERY, datetime(2026, 11, 29, 11, tzinfo=UTC))
    assert "ModelTimeoutError" in run.fallback_reason and run.plan.steps  # the embedded plan
    return run.audit


def verify_claims(client):
    run = ModelVerifier(client, verifier_prompt(VERIFIER_PROMPT), attempt_timeout_seconds=10, max_attempts=1).verify(
        make_input([CPU, TIMEOUT]))
    assert run.output is None and "ModelTimeoutError" in run.failure
    return run.audit


def review(client):
    guard = ModelSemanticGuard(client, verifier_prompt(SEMANTIC_GUARD_PROMPT), SemanticGuardSettings(max_attempts=1))
    run = guard.review(QUERY, draft(), snapshot())
    assert run.review is None and "ModelTimeoutError" in run.failure
    return run.audit


def execute(client):
    agent = OpenAIExecutorAgent(client, ToolRegistry(), executor_prompt(), max_tool_steps=2, max_attempts=1)
    run = agent.execute(Plan(), no_tool, QUERY)
    assert run.stop_reason == "model_error" and "ModelTimeoutError" in run.failure
    return run.audit


def run_agent(client):
    agent = OpenAIReactAgent(client, ToolRegistry(), executor_prompt(REACT_AGENT_PROMPT), max_attempts=1)
    run = agent.run(QUERY, no_tool, max_steps=3)
    assert run.stop_reason == MODEL_UNAVAILABLE and run.draft is None
    return run.audit


def repair(client):
    run = ModelDraftRepair(client, executor_prompt(DRAFT_REPAIR_PROMPT)).repair(draft(), [], [])
    assert run.draft is None
    return run.audit


@pytest.mark.parametrize("role", [compose, plan, verify_claims, review, execute, run_agent, repair],
                         ids=lambda role: role.__name__)
def test_a_hung_model_call_is_abandoned_by_every_role(role):
    with HangingServer(trickle=True) as server:
        audit = role(http_client(server.base_url, TIMEOUT_SECONDS))
        assert server.open_calls == 1  # given up while the server still held it
    assert (audit.provider, audit.model, audit.attempts) == ("openai", "m", 1)
    assert audit.usage.total_tokens == 0
