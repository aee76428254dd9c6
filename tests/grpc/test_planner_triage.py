"""Triage questions at the planner's real gRPC server, for the embedded and the model engine: a
question that names no service and asks which are abnormal gets a plan marked `triage` (no service
missing, no service step: the executor picks the catalogue's services); a question without a
service that is no triage still misses one."""

from __future__ import annotations

import json

import pytest

from attest.planner.v1 import planner_pb2
from services.planner.servicer import PlannerServicer
from shared.config import PlannerSettings
from shared.core.contracts import Plan
from shared.proto_convert import message_to_model
from tests.scripted_model_server import completion

NOW = "2026-11-29T11:00:00+00:00"
CALL_TIMEOUT = 30


def _plan(stub, query: str) -> Plan:
    response = stub.CreatePlan(planner_pb2.CreatePlanRequest(query=query, now=NOW), timeout=CALL_TIMEOUT)
    return message_to_model(response.plan, Plan)


@pytest.mark.parametrize("query", ["现在线上哪个服务有问题？", "which service is broken right now"])
def test_the_embedded_planner_marks_a_triage(serve_role, query):
    plan = _plan(serve_role("planner", PlannerServicer(), PlannerSettings(port=0)), query)
    assert plan.triage and plan.intent.kind == "health"
    assert plan.services == [] and plan.missing_context == [] and plan.window is not None


def test_the_embedded_planner_still_refuses_a_question_without_a_service(serve_role):
    plan = _plan(serve_role("planner", PlannerServicer(), PlannerSettings(port=0)), "为什么报错？")
    assert not plan.triage and plan.missing_context == ["service"] and plan.steps == []


def test_a_model_plan_of_a_triage_may_have_no_step_and_is_marked(planner, model_server):
    model_server.add(completion(json.dumps({"services": [], "symptoms": [], "window": None, "steps": [],
                                            "missing_context": [], "rationale": "triage"})))
    plan = _plan(planner(), "现在线上哪个服务有问题？")
    assert plan.triage and plan.services == [] and plan.steps == []
    sent = json.loads(model_server.requests[0]["messages"][1]["content"])
    assert sent["triage"] is True, "the model is told"


def test_a_model_that_asks_for_a_service_on_a_triage_is_overruled(planner, model_server):
    """Models are told to name none; one that puts `service` in missing_context is still a triage."""
    model_server.add(completion(json.dumps({"services": [], "symptoms": [], "window": None,
                                            "steps": [], "missing_context": ["service"], "rationale": "no service"})))
    plan = _plan(planner(), "哪些服务不正常")
    assert plan.triage and plan.missing_context == []
