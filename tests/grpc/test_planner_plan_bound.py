"""The plan bound from the planner's side, over the planner's and the executor's real gRPC
servers: the executor refuses a plan of more than ATTEST_MAX_PLAN_STEPS steps, so the planner cuts
every plan it makes (embedded or a model's) to that many. A question naming many services is
therefore answered, never refused: the services that lost their steps are named as not checked."""

from __future__ import annotations

import json

from attest.common.v1 import enums_pb2
from attest.executor.v1 import executor_pb2
from attest.planner.v1 import planner_pb2
from services.executor import __main__ as executor_main
from services.planner.servicer import PlannerServicer, build_planner
from shared.config import DEFAULT_MAX_PLAN_STEPS, ExecutorSettings, ModelSettings, PlannerSettings
from shared.core.contracts import Plan
from shared.db.migrate import upgrade
from shared.model_client import OpenAIChatClient
from shared.proto_convert import message_to_model, spec_value
from tests.scripted_model_server import completion

NOW = "2026-11-29T11:00:00+00:00"  # the demo estate's "now"
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
SERVICES = [f"shop{n}-service" for n in range(12)]
MANY = f"{'、'.join(SERVICES)} 最近一小时 CPU 很高、报错很多，怎么了？"
CALL_TIMEOUT = 30


def _plan(stub, query: str) -> planner_pb2.CreatePlanResponse:
    return stub.CreatePlan(planner_pb2.CreatePlanRequest(query=query, now=NOW), timeout=CALL_TIMEOUT)


def test_a_question_naming_many_services_gets_a_plan_the_executor_accepts(serve_role, stores, tmp_path,
                                                                          demo_backends):
    planner = serve_role("planner", PlannerServicer(), PlannerSettings(port=0))
    response = _plan(planner, MANY)
    plan = message_to_model(response.plan, Plan)
    assert len(plan.steps) == DEFAULT_MAX_PLAN_STEPS == ExecutorSettings().max_plan_steps
    stepped = {str(step.arguments.get("service")) for step in plan.steps}
    assert plan.unchecked_services and not stepped & set(plan.unchecked_services)
    assert set(plan.services) | set(plan.unchecked_services) >= set(SERVICES)
    assert f"plan cut to its first {DEFAULT_MAX_PLAN_STEPS} of" in plan.rationale
    assert "not checked: " + ", ".join(plan.unchecked_services) in plan.rationale

    # The executor, wired as its process wires it, runs the plan instead of refusing it.
    runs, _ = stores
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    settings = ExecutorSettings(port=0, database_url=url)
    executor = serve_role("executor", executor_main.build_servicer(settings, ModelSettings(), None,
                                                                   backends=demo_backends), settings)
    run_id = runs.create_run(runs.create_session("plan-bound"), MANY, "MULTI_AGENT")
    answer = executor.ExecutePlan(executor_pb2.ExecutePlanRequest(run_id=run_id, query=MANY, plan=response.plan),
                                  timeout=CALL_TIMEOUT)
    assert spec_value(enums_pb2.ParseStatus.DESCRIPTOR, answer.parse_status)  # answered, not refused
    named = set(answer.service_coverage.unchecked) | {u.name for u in answer.service_coverage.unknown}
    assert named >= set(plan.unchecked_services)  # the cut services are reported, never silently dropped


def test_a_model_plan_longer_than_the_limit_keeps_its_first_steps(serve_role, model_server, scripted_settings):
    steps = [{"tool_name": "query_metrics", "purpose": "look",
              "arguments": {"service": "payment-service", "start": START, "end": END, "step_seconds": 10 + n}}
             for n in range(12)]
    model_server.add(completion(json.dumps({"services": ["payment-service"], "symptoms": ["cpu"],
                                            "window": {"start": START, "end": END}, "steps": steps,
                                            "rationale": "look closely"})))
    settings = scripted_settings()
    planner = serve_role("planner", PlannerServicer(build_planner(settings, OpenAIChatClient(settings)),
                                                    max_plan_steps=8), PlannerSettings(port=0))
    response = _plan(planner, "为什么 payment-service 的 CPU 这么高？")
    plan = message_to_model(response.plan, Plan)
    assert [step.arguments["step_seconds"] for step in plan.steps] == [10 + n for n in range(8)]
    assert plan.services == ["payment-service"] and plan.unchecked_services == []
    assert plan.rationale == "look closely; plan cut to its first 8 of 12 steps (the executor's limit)"
