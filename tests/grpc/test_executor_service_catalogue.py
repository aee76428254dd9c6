"""The catalogue of services behind the executor's real gRPC server: names are resolved against the backends'
catalogue before any step runs, in ExecutePlan (embedded and model engines) and RunAgent. No
invocation is ever persisted for a service the catalogue does not know, or for one named beyond
the per-question limit. The estate is the demo estate (the tests may know it; the code does not)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.executor.v1 import executor_pb2
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.service_catalogue import catalogue_of
from services.executor.servicer import ExecutorServicer, build_engine
from services.executor.tools.registry import build_default_registry
from shared.config import ExecutorSettings, ModelSettings
from shared.core.contracts import ServiceCoverage
from shared.core.embedded_planner import EmbeddedPlanner
from shared.model_client import OpenAIChatClient
from shared.proto_convert import message_to_model, plain_to_message, spec_value
from tests.scripted_model_server import completion, tool_call

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)  # the demo estate's "now" (conftest.DEMO_ANCHOR)
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
CALL_TIMEOUT = 30


@pytest.fixture()
def executor(demo_backends, stores, serve_role):
    """`executor(engine_settings=None, limit=10)` → (stub, new_run)."""
    runs, invocations = stores
    registry = build_default_registry(demo_backends)

    def start(engine_settings: ModelSettings | None = None, limit: int = 10):
        settings = engine_settings or ModelSettings()
        client = OpenAIChatClient(settings) if settings.provider == "openai" else None
        servicer = ExecutorServicer(
            invocations, registry, build_engine(settings, registry, client),
            react_agent=EmbeddedReactAgent(clock=lambda: ANCHOR),
            catalogue=catalogue_of(demo_backends), max_services_per_question=limit,
        )
        stub = serve_role("executor", servicer, ExecutorSettings(port=0))

        def new_run(query: str, mode: str = "MULTI_AGENT") -> str:
            return runs.create_run(runs.create_session("test"), query, mode)

        return stub, new_run

    return start


def _execute(stub, run_id: str, query: str) -> executor_pb2.ExecutePlanResponse:
    plan = EmbeddedPlanner().plan(query, ANCHOR)
    request = executor_pb2.ExecutePlanRequest(run_id=run_id, query=query,
                                              plan=plain_to_message(plan, evidence_pb2.Plan))
    return stub.ExecutePlan(request, timeout=CALL_TIMEOUT)


def _coverage(response) -> ServiceCoverage:
    return message_to_model(response.service_coverage, ServiceCoverage)


def _services(invocations) -> set[str]:
    return {inv.request["service"] for inv in invocations if inv.request.get("service")}


def test_execute_plan_runs_nothing_when_every_named_service_is_unknown(executor, stores):
    stub, new_run = executor()
    query = "为什么 paymnet-service 的 CPU 这么高？"
    run_id = new_run(query)
    response = _execute(stub, run_id, query)
    coverage = _coverage(response)
    assert coverage.nothing_known and [(u.name, u.suggestions) for u in coverage.unknown] == [
        ("paymnet-service", ["payment-service"])]
    assert stores[1].list_for_run(run_id) == [] and list(response.invocation_ids) == []
    assert spec_value(enums_pb2.ParseStatus.DESCRIPTOR, response.parse_status) == "missing"


def test_execute_plan_checks_the_known_services_only(executor, stores):
    stub, new_run = executor()
    query = "payment-service 和 paymnet-gateway-x 最近一小时报错多吗？"
    run_id = new_run(query)
    response = _execute(stub, run_id, query)
    coverage = _coverage(response)
    assert coverage.checked == ["payment-service"] and [u.name for u in coverage.unknown] == ["paymnet-gateway-x"]
    assert _services(stores[1].list_for_run(run_id)) == {"payment-service"}
    assert "paymnet-gateway-x" not in response.output_text, "the executor states nothing about it"


def test_execute_plan_applies_the_per_question_limit(executor, stores):
    stub, new_run = executor(limit=1)
    query = "payment-service 和 order-service 最近一小时报错多吗？"
    run_id = new_run(query)
    coverage = _coverage(_execute(stub, run_id, query))
    assert coverage.checked == ["payment-service"] and coverage.unchecked == ["order-service"] and coverage.limit == 1
    assert _services(stores[1].list_for_run(run_id)) == {"payment-service"}


def test_a_model_executor_cannot_call_a_tool_for_an_unknown_service(executor, stores, model_server, scripted_settings):
    def unknown_call(body):
        return completion(None, tool_calls=[
            tool_call("query_logs", {"service": "paymnet-service", "start": START, "end": END}, "call_unknown"),
            tool_call("query_logs", {"service": "PAYMENT-SERVICE", "start": START, "end": END}, "call_known"),
        ])

    model_server.add(unknown_call, lambda body: completion("{}"))
    stub, new_run = executor(scripted_settings())
    query = "payment-service 为什么报错这么多？"
    run_id = new_run(query)
    _execute(stub, run_id, query)
    persisted = stores[1].list_for_run(run_id)
    assert _services(persisted) == {"payment-service"}, "the known one in the catalogue's spelling, nothing else"
    assert {inv.tool_call_id for inv in persisted} >= {"call_known"} and "call_unknown" not in {
        inv.tool_call_id for inv in persisted}
    refused = next(m for m in model_server.requests[1]["messages"] if m.get("tool_call_id") == "call_unknown")
    assert "could not be run" in json.loads(refused["content"])["error"]


def test_run_agent_does_not_run_when_every_named_service_is_unknown(executor, stores):
    stub, new_run = executor()
    query = "为什么 paymnet-service 的 CPU 这么高？"
    run_id = new_run(query, "SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=query), timeout=CALL_TIMEOUT)
    assert not response.HasField("draft") and list(response.tool_call_ids) == []
    assert _coverage(response).nothing_known
    assert stores[1].list_for_run(run_id) == []


def test_run_agent_checks_the_known_services_up_to_the_limit(executor, stores):
    stub, new_run = executor(limit=1)
    query = "payment-service、paymnet-gateway-x 和 order-service 最近一小时报错多吗？"
    run_id = new_run(query, "SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=query), timeout=CALL_TIMEOUT)
    coverage = _coverage(response)
    assert coverage.checked == ["payment-service"] and coverage.unchecked == ["order-service"]
    assert [u.name for u in coverage.unknown] == ["paymnet-gateway-x"]
    assert _services(stores[1].list_for_run(run_id)) == {"payment-service"}
    assert response.HasField("draft")
