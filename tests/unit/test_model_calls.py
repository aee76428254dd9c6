"""One audit of model calls and one deadline budget for every role: what the
run records embed, what the responses carry, and the time a servicer gives its engine."""

from __future__ import annotations

import pytest

from attest.common.v1 import composer_types_pb2, single_react_pb2, verifier_types_pb2
from attest.composer.v1 import composer_pb2
from attest.executor.v1 import executor_pb2
from attest.planner.v1 import planner_pb2
from attest.verifier.v1 import verifier_pb2
from services.composer.engine import TemplateComposer
from services.composer.servicer import ComposerServicer
from services.executor.draft_repair import EmbeddedDraftRepair
from services.executor.engine import EmbeddedEngine
from services.executor.servicer import ExecutorServicer
from services.executor.tools.registry import ToolRegistry
from services.planner.engine import EmbeddedPlanEngine
from services.planner.servicer import PlannerServicer
from services.verifier.engine import EmbeddedVerifierEngine
from services.verifier.servicer import VerifierServicer
from shared.core.contracts import ComposerInput, PromptRef, TokenUsage
from shared.model_calls import (
    DEADLINE_HEADROOM_SECONDS,
    ModelCallAudit,
    deadline_budget,
    model_call_info,
    prompt_ref_info,
)
from shared.model_client import ModelCallTally, ModelReply
from shared.proto_convert import plain_to_message
from tests.unit.test_semantic_guard import QUERY, draft
from tests.unit.test_verifier_composer_scenarios import CPU, TIMEOUT, make_input

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


class Deadline:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


def test_the_deadline_budget_keeps_headroom_and_follows_the_deadline():
    context = Deadline(4.0)
    budget = deadline_budget(context)
    assert budget() == pytest.approx(4.0 - DEADLINE_HEADROOM_SECONDS)
    context.remaining = 1.0  # asked again before each attempt: the time left now
    assert budget() == pytest.approx(1.0 - DEADLINE_HEADROOM_SECONDS)


def test_no_deadline_and_no_context_mean_no_bound():
    assert deadline_budget(Deadline(None))() is None
    assert deadline_budget(None)() is None


# --- the four servicers hand their engines the deadline budget and report the engine's audit ---------


budgets: list[float | None] = []  # what each engine saw of time_remaining()


class Context:
    """The part of grpc.ServicerContext the servicers use: a caller with 5 s left."""

    def time_remaining(self) -> float:
        return 5.0

    def is_active(self) -> bool:
        return True


class Composer(TemplateComposer):
    def compose(self, inp, *, time_remaining=None, is_active=None):
        budgets.append(time_remaining())
        return super().compose(inp)


class Planner(EmbeddedPlanEngine):
    def create_plan(self, query, now, mode="NORMAL", retry_context=None, *, time_remaining=None, intent=None):
        budgets.append(time_remaining())
        return super().create_plan(query, now, mode, retry_context, intent=intent)


class Verifier(EmbeddedVerifierEngine):
    def verify(self, inp, *, time_remaining=None, is_active=None):
        budgets.append(time_remaining())
        return super().verify(inp)


class Repair(EmbeddedDraftRepair):
    def repair(self, draft, violations, invocations, *, time_remaining=None):
        budgets.append(time_remaining())
        return super().repair(draft, violations, invocations)


class NoInvocations:
    """An open run without invocations."""

    def require_open(self, run_id, planned_calls=None):
        return None

    def list_for_run(self, run_id, tool_name=None):
        return []


def compose_answer(context):
    request = composer_pb2.ComposeAnswerRequest(
        input=plain_to_message(ComposerInput(query=QUERY), composer_types_pb2.ComposerInput))
    return ComposerServicer(Composer()).ComposeAnswer(request, context)


def create_plan(context):
    return PlannerServicer(Planner()).CreatePlan(planner_pb2.CreatePlanRequest(query=QUERY), context)


def verify_claims(context):
    request = verifier_pb2.VerifyClaimsRequest(
        input=plain_to_message(make_input([CPU, TIMEOUT]), verifier_types_pb2.VerifierInput))
    return VerifierServicer(Verifier()).VerifyClaims(request, context)


def repair_draft(context):
    servicer = ExecutorServicer(NoInvocations(), ToolRegistry(), EmbeddedEngine(None), draft_repair=Repair())
    request = executor_pb2.RepairDraftRequest(run_id="run-1", draft=plain_to_message(draft(), single_react_pb2.Draft))
    return servicer.RepairDraft(request, context)


@pytest.mark.parametrize(("call", "role", "prompt"), [
    (compose_answer, "composer", "composer.templates"),
    (create_plan, "planner", "planner.embedded"),
    (verify_claims, "verifier", "verifier.embedded"),
    (repair_draft, "executor", "draft_repair.embedded"),
], ids=lambda value: value.__name__ if callable(value) else None)
def test_every_servicer_gives_its_engine_the_deadline_budget_and_reports_its_audit(call, role, prompt):
    budgets.clear()
    response = call(Context())
    assert budgets == [pytest.approx(5.0 - DEADLINE_HEADROOM_SECONDS)]
    info = response.model_call
    assert (info.role, info.provider, info.model, info.attempts) == (role, "embedded", prompt, 1)
    assert (response.prompt.role, response.prompt.name) == (role, prompt)
