"""The model planner behind the real PlannerService, a scripted model over real HTTP: a usable
plan is used; unusable replies and failed calls are retried up to the attempt bound, then the
embedded plan is used and the response says so (attempts, tokens, the plan's rationale)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from attest.common.v1 import enums_pb2, verifier_types_pb2
from attest.planner.v1 import planner_pb2
from shared.core.contracts import EvidenceGap, Plan, RetryContext
from shared.core.embedded_planner import EmbeddedPlanner
from shared.proto_convert import enum_number, message_to_model, plain_to_message
from tests.scripted_model_server import Status, completion

NOW = "2026-11-29T11:00:00Z"
NOW_DT = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
QUERY = "order-service 最近半小时报错很多，是数据库连接池的问题吗？"
CALL_TIMEOUT = 30


def _plan(stub, **fields) -> planner_pb2.CreatePlanResponse:
    return stub.CreatePlan(planner_pb2.CreatePlanRequest(query=QUERY, now=NOW, **fields), timeout=CALL_TIMEOUT)


def _model_plan_text() -> str:
    start = "2026-11-29T10:30:00Z"
    return json.dumps({
        "services": ["order-service"], "symptoms": ["db_pool", "errors"], "window": {"start": start, "end": NOW},
        "steps": [{"tool_name": "query_logs", "arguments": {"service": "order-service", "start": start, "end": NOW,
                                                           "contains": "pool"}, "purpose": "pool errors"}],
        "rationale": "check the pool",
    })


def test_a_usable_model_plan_is_used(planner, model_server):
    model_server.add(completion(_model_plan_text()))
    response = _plan(planner())
    plan = message_to_model(response.plan, Plan)
    assert [(s.tool_name, s.arguments["contains"]) for s in plan.steps] == [("query_logs", "pool")]
    assert plan.rationale == "check the pool"
    assert (response.prompt.name, response.prompt.version) == ("planner", "4")
    assert (response.model_call.provider, response.model_call.attempts) == ("openai", 1)


def test_unusable_replies_are_retried_then_the_embedded_plan_is_used(planner, model_server):
    invented = json.loads(_model_plan_text())
    invented["steps"][0]["tool_name"] = "restart_service"
    model_server.add(completion("I think the database is fine."), completion(json.dumps(invented)))
    response = _plan(planner())

    first, second = model_server.requests
    assert first["messages"] == second["messages"] and first["response_format"] == second["response_format"]
    plan = message_to_model(response.plan, Plan)
    embedded = EmbeddedPlanner().plan(QUERY, NOW_DT)
    assert plan.steps == embedded.steps and plan.services == embedded.services
    assert plan.rationale.startswith("embedded plan (model plan not used: model reply is not a usable plan:")
    assert "restart_service" in plan.rationale
    # The audit stays truthful: the prompt was sent, two attempts were made and cost tokens.
    assert (response.prompt.name, response.prompt.version) == ("planner", "4")
    call = response.model_call
    assert (call.provider, call.model, call.attempts) == ("openai", "scripted-model", 2)
    assert call.token_usage.prompt_tokens == 22


def test_transport_failures_use_the_attempt_bound_and_a_refusal_ends_at_once(planner, model_server):
    model_server.add(Status(503), Status(503), Status(400))
    stub = planner(max_attempts=2)
    response = _plan(stub)
    assert response.model_call.attempts == 2 and response.model_call.token_usage.total_tokens == 0
    assert "ModelTransportError" in response.plan.rationale and response.plan.steps

    response = _plan(stub)  # HTTP 400: repeating the request cannot help
    assert response.model_call.attempts == 1 and "ModelRequestError" in response.plan.rationale
    assert len(model_server.requests) == 3


def test_the_retry_round_shows_the_model_its_gaps(planner, model_server):
    model_server.add(completion("no"), completion("no"))
    gap = EvidenceGap(claim_id="c2", claim_text="order-service 连接池耗尽", verification="unsupported",
                      services=["order-service"], tool_names=["query_logs"])
    response = _plan(planner(), mode=enum_number(enums_pb2.PlannerMode.DESCRIPTOR, "EVIDENCE_GAP_ONLY"),
                     retry_context=plain_to_message(RetryContext(evidence_retry_count=1, gaps=[gap]),
                                                    verifier_types_pb2.RetryContext))
    user = json.loads(model_server.requests[0]["messages"][1]["content"])
    assert user["mode"] == "EVIDENCE_GAP_ONLY"
    assert user["tools"] == ["query_metrics", "query_logs", "query_changes"]
    assert user["gaps"] == [{"claim_text": gap.claim_text, "services": ["order-service"], "tool_names": ["query_logs"]}]
    # The fallback is the embedded gap plan: only the gap's tool for the gap's service.
    assert {s.tool_name for s in response.plan.steps} == {"query_logs"}
