"""What each model-calling role sends to an OpenAI-compatible server, pinned down against the
scripted server over real HTTP through the real `openai` client and each role's real gRPC
servicer: the system prompt is the role's versioned prompt file, the user content has the role's
shape, `response_format` is a JSON object (with a bounded schema only when the server accepts
one), tools are offered by the executor only, and model name, max_tokens and temperature come
from the role's settings. A regression here would otherwise show up only against a real model
(`make e2e-llm`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from attest.common.v1 import composer_types_pb2, enums_pb2, evidence_pb2, single_react_pb2, verifier_types_pb2
from attest.composer.v1 import composer_pb2
from attest.executor.v1 import executor_pb2
from attest.planner.v1 import planner_pb2
from attest.verifier.v1 import verifier_pb2
from services.composer.prompts import load_prompt as load_composer_prompt
from services.composer.servicer import ComposerServicer, build_composer
from services.executor.prompts import load_prompt as load_executor_prompt
from services.executor.servicer import ExecutorServicer, build_engine
from services.planner.prompts import load_prompt as load_planner_prompt
from services.planner.servicer import PlannerServicer, build_planner
from services.verifier.prompts import SEMANTIC_GUARD_PROMPT, VERIFIER_PROMPT
from services.verifier.prompts import load_prompt as load_verifier_prompt
from services.verifier.protocol import canonical_input_bytes
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from services.verifier.servicer import (
    VerifierServicer,
    build_semantic_guard,
    build_verifier_engine,
    guard_model_settings,
)
from shared.config import (
    ComposerSettings,
    ExecutorSettings,
    PlannerSettings,
    VerifierSettings,
)
from shared.core.embedded_planner import EmbeddedPlanner
from shared.model_client import OpenAIChatClient
from shared.proto_convert import plain_to_message
from tests.grpc.test_composer_openai import _input as composer_input
from tests.grpc.test_composer_openai import rephrase
from tests.grpc.test_executor_openai_engine import QUERY as EXECUTOR_QUERY
from tests.grpc.test_executor_openai_engine import _plan as executor_plan
from tests.scripted_model_server import completion
from tests.unit.test_semantic_guard import QUERY as GUARD_QUERY
from tests.unit.test_semantic_guard import draft, snapshot
from tests.unit.test_verifier_protocol import make_input, model_output

MODEL, MAX_TOKENS, TEMPERATURE = "shape-model", 333, 0.25
CALL_TIMEOUT = 30
NOW = "2026-11-29T11:00:00Z"
PLANNER_QUERY = "为什么 payment-service 的 CPU 这么高？过去 2 小时"
EXECUTOR_TOOLS = {"query_metrics", "query_logs", "lookup_knowledge", "query_changes", "get_current_time"}


@pytest.fixture()
def shape_settings(scripted_settings):
    """`shape_settings(json_schema_format)` -> the scripted model's settings with this module's model
    name, max_tokens and temperature."""
    return lambda json_schema_format: scripted_settings(
        model=MODEL, max_tokens=MAX_TOKENS, temperature=TEMPERATURE, json_schema_format=json_schema_format,
    )


def _assert_common(body: dict, *, max_tokens: int = MAX_TOKENS) -> None:
    assert body["model"] == MODEL
    assert body["max_tokens"] == max_tokens
    assert body["temperature"] == TEMPERATURE


def _assert_json_object_format(body: dict, json_schema_format: bool) -> dict | None:
    """`{"type": "json_object"}`, plus a bounded object schema only when the server accepts one."""
    response_format = body["response_format"]
    assert response_format["type"] == "json_object"  # never the OpenAI-style json_schema format
    if not json_schema_format:
        assert response_format == {"type": "json_object"}
        return None
    schema = response_format["schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    return schema


def _roles(body: dict) -> list[str]:
    return [message["role"] for message in body["messages"]]


# --- planner -------------------------------------------------------------------------------------


@pytest.mark.parametrize("json_schema_format", [False, True])
def test_planner_request_shape(model_server, shape_settings, serve_role, json_schema_format):
    now = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
    plan = EmbeddedPlanner().plan(PLANNER_QUERY, now)
    model_server.add(completion(json.dumps(plan.model_dump(exclude={"mode", "unchecked_services"}), ensure_ascii=False)))
    settings = shape_settings(json_schema_format)
    stub = serve_role("planner", PlannerServicer(build_planner(settings, OpenAIChatClient(settings))),
                      PlannerSettings(port=0))
    response = stub.CreatePlan(planner_pb2.CreatePlanRequest(query=PLANNER_QUERY, now=NOW), timeout=CALL_TIMEOUT)

    [body] = model_server.requests
    _assert_common(body)
    assert "tools" not in body
    assert _roles(body) == ["system", "user"]
    assert body["messages"][0]["content"] == load_planner_prompt().text
    user = json.loads(body["messages"][1]["content"])
    # now in UTC and in the user's zone; 过去 2 小时 is a window the question names.
    assert set(user) == {"query", "now", "time_zone", "now_local", "mode", "tools", "symptoms", "question_window"}
    assert (user["query"], user["now"], user["mode"]) == (PLANNER_QUERY, NOW, "NORMAL")
    assert (user["time_zone"], user["now_local"]) == ("Asia/Shanghai", "2026-11-29T19:00:00+08:00")
    assert user["question_window"] == {"start": "2026-11-29T09:00:00Z", "end": NOW}
    assert set(user["tools"]) == {"query_metrics", "query_logs", "lookup_knowledge", "query_changes"}
    schema = _assert_json_object_format(body, json_schema_format)
    if schema is not None:
        step = schema["properties"]["steps"]["items"]
        assert set(step["properties"]["tool_name"]["enum"]) == set(user["tools"])
        assert schema["properties"]["steps"]["maxItems"] >= len(plan.steps)

    # The model's plan was used, and the response says which prompt and model produced it.
    assert [step.tool_name for step in response.plan.steps] == [step.tool_name for step in plan.steps]
    assert (response.prompt.role, response.prompt.name, response.prompt.version) == ("planner", "planner", "4")
    call = response.model_call
    assert (call.role, call.provider, call.model, call.attempts) == ("planner", "openai", MODEL, 1)
    assert call.token_usage.total_tokens == 18


# --- executor ------------------------------------------------------------------------------------


@pytest.mark.parametrize("json_schema_format", [False, True])
def test_executor_request_shape(model_server, shape_settings, serve_role, demo_registry, stores, json_schema_format):
    runs, invocations = stores
    answer = json.dumps({"answer_version": "executor_evidence_v2", "claims": [], "hypotheses": [],
                         "recommended_actions": [], "missing_info": ["nothing observed"]})
    model_server.add(*[completion(answer)] * (2 if json_schema_format else 1))
    settings = shape_settings(json_schema_format)
    engine = build_engine(settings, demo_registry, OpenAIChatClient(settings))
    stub = serve_role("executor", ExecutorServicer(invocations, demo_registry, engine), ExecutorSettings(port=0))
    run_id = runs.create_run(runs.create_session("test"), EXECUTOR_QUERY, "MULTI_AGENT")
    stub.ExecutePlan(executor_pb2.ExecutePlanRequest(
        run_id=run_id, query=EXECUTOR_QUERY, plan=plain_to_message(executor_plan(), evidence_pb2.Plan),
    ), timeout=CALL_TIMEOUT)

    first = model_server.requests[0]
    _assert_common(first)
    assert _roles(first) == ["system", "user"]
    assert first["messages"][0]["content"] == load_executor_prompt().text
    assert EXECUTOR_QUERY in first["messages"][1]["content"] and "query_logs" in first["messages"][1]["content"]
    # The executor is the one role that offers tools, as OpenAI function tools.
    assert {tool["type"] for tool in first["tools"]} == {"function"}
    assert {tool["function"]["name"] for tool in first["tools"]} == EXECUTOR_TOOLS
    assert all(tool["function"]["parameters"]["type"] == "object" for tool in first["tools"])
    # A tool turn is never format-constrained (it must be free to call tools) ...
    assert "response_format" not in first
    if json_schema_format:
        # ... and where the server takes a schema the answer is asked for again without tools.
        final = model_server.requests[1]
        _assert_common(final)
        assert "tools" not in final
        assert _roles(final)[:2] == ["system", "user"] and _roles(final)[-2:] == ["assistant", "user"]
        schema = _assert_json_object_format(final, True)
        assert "claims" in schema["properties"]
    else:
        assert len(model_server.requests) == 1


# --- verifier ------------------------------------------------------------------------------------


def _verifier_stub(serve_role, shape_settings, json_schema_format):
    settings = shape_settings(json_schema_format)
    guard = SemanticGuardSettings()
    servicer = VerifierServicer(
        build_verifier_engine(settings, OpenAIChatClient(settings)),
        build_semantic_guard(settings, guard, OpenAIChatClient(guard_model_settings(settings, guard))),
    )
    stub = serve_role("verifier", servicer, VerifierSettings(port=0, max_workers=4))
    return stub, guard


@pytest.mark.parametrize("json_schema_format", [False, True])
def test_verifier_verify_claims_request_shape(model_server, shape_settings, serve_role, json_schema_format):
    model_server.add(completion(json.dumps(model_output())))
    stub, _ = _verifier_stub(serve_role, shape_settings, json_schema_format)
    response = stub.VerifyClaims(verifier_pb2.VerifyClaimsRequest(
        input=plain_to_message(make_input(), verifier_types_pb2.VerifierInput)), timeout=CALL_TIMEOUT)

    [body] = model_server.requests
    _assert_common(body)
    assert "tools" not in body
    assert _roles(body) == ["system", "user"]
    assert body["messages"][0]["content"] == load_verifier_prompt(VERIFIER_PROMPT).text
    assert body["messages"][1]["content"].encode("utf-8") == canonical_input_bytes(make_input())
    schema = _assert_json_object_format(body, json_schema_format)
    if schema is not None:
        assert "claim_checks" in schema["properties"]
    assert response.verifier_status == enums_pb2.VERIFIER_STATUS_COMPLETED
    assert (response.model_call.provider, response.model_call.model) == ("openai", MODEL)


@pytest.mark.parametrize("json_schema_format", [False, True])
def test_verifier_review_draft_request_shape(model_server, shape_settings, serve_role, json_schema_format):
    model_server.add(completion('{"verdict": "SUPPORTED", "reason": "every value occurs in its evidence"}'))
    stub, guard = _verifier_stub(serve_role, shape_settings, json_schema_format)
    response = stub.ReviewDraft(verifier_pb2.ReviewDraftRequest(
        query=GUARD_QUERY,
        draft=plain_to_message(draft(), single_react_pb2.Draft),
        snapshot=plain_to_message(snapshot(), single_react_pb2.VerifiedSnapshot),
    ), timeout=CALL_TIMEOUT)

    [body] = model_server.requests
    # The guard's output bound caps max_tokens; the rest is the verifier's model settings.
    _assert_common(body, max_tokens=min(MAX_TOKENS, guard.max_output_tokens))
    assert "tools" not in body
    assert _roles(body) == ["system", "user"]
    assert body["messages"][0]["content"] == load_verifier_prompt(SEMANTIC_GUARD_PROMPT).text
    assert GUARD_QUERY in body["messages"][1]["content"]
    schema = _assert_json_object_format(body, json_schema_format)
    if schema is not None:
        assert set(schema["properties"]["verdict"]["enum"]) >= {"SUPPORTED", "UNSUPPORTED"}
    assert response.verifier_status == enums_pb2.VERIFIER_STATUS_COMPLETED
    assert (response.model_call.provider, response.model_call.model) == ("openai", MODEL)


# --- composer ------------------------------------------------------------------------------------


@pytest.mark.parametrize("json_schema_format", [False, True])
def test_composer_request_shape(model_server, shape_settings, serve_role, json_schema_format):
    model_server.add(rephrase())
    settings = shape_settings(json_schema_format)
    stub = serve_role("composer", ComposerServicer(build_composer(settings, OpenAIChatClient(settings))),
                      ComposerSettings(port=0))
    inp = composer_input()
    response = stub.ComposeAnswer(composer_pb2.ComposeAnswerRequest(
        input=plain_to_message(inp, composer_types_pb2.ComposerInput)), timeout=CALL_TIMEOUT)

    [body] = model_server.requests
    _assert_common(body)
    assert "tools" not in body
    assert _roles(body) == ["system", "user"]
    assert body["messages"][0]["content"] == load_composer_prompt().text
    user = json.loads(body["messages"][1]["content"])
    assert set(user) == {"query", "verdict", "sections"} and user["query"] == inp.query
    schema = _assert_json_object_format(body, json_schema_format)
    if schema is not None:
        titles = schema["properties"]["sections"]["items"]["properties"]["title"]["enum"]
        assert titles == [section["title"] for section in user["sections"]]
    assert not response.output.used_fallback_template, response.output.fallback_reason
    assert (response.model_call.provider, response.model_call.model) == ("openai", MODEL)
