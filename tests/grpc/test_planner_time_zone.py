"""The model planner behind the real PlannerService, a scripted model over real HTTP:
the prompt gives now in the user's zone and the zone's name; when the question names a
window, the deterministic reading of it is the plan's window whatever the model wrote."""

from __future__ import annotations

import json

import pytest

from attest.planner.v1 import planner_pb2
from shared.core.contracts import Plan
from shared.proto_convert import message_to_model
from tests.scripted_model_server import completion

NOW = "2026-11-30T06:00:00Z"  # 14:00 in Shanghai
QUERY = "order-service 昨天下午三点报错很多，是数据库连接池的问题吗？"
CALL_TIMEOUT = 30


@pytest.fixture()
def planner_stub(model_server, planner):
    return model_server, planner()


def test_a_model_that_reads_the_users_time_as_utc_is_overruled(planner_stub, monkeypatch):
    monkeypatch.delenv("ATTEST_TIME_ZONE", raising=False)
    model_server, stub = planner_stub
    # The model took 「昨天下午三点」 as 15:00 UTC (23:00 in Shanghai).
    start, end = "2026-11-29T14:30:00Z", "2026-11-29T15:30:00Z"
    model_server.add(completion(json.dumps({
        "services": ["order-service"], "symptoms": ["db_pool"], "window": {"start": start, "end": end},
        "steps": [{"tool_name": "query_logs", "arguments": {"service": "order-service", "start": start, "end": end,
                                                           "contains": "pool"}, "purpose": "pool errors"}],
        "rationale": "check the pool",
    })))
    response = stub.CreatePlan(planner_pb2.CreatePlanRequest(query=QUERY, now=NOW), timeout=CALL_TIMEOUT)

    [body] = model_server.requests
    user = json.loads(body["messages"][1]["content"])
    assert (user["time_zone"], user["now_local"]) == ("Asia/Shanghai", "2026-11-30T14:00:00+08:00")
    assert user["question_window"] == {"start": "2026-11-29T06:30:00Z", "end": "2026-11-29T07:30:00Z"}
    assert "time_zone" in body["messages"][0]["content"]  # the prompt explains the zone

    plan = message_to_model(response.plan, Plan)
    assert (plan.window.start, plan.window.end) == ("2026-11-29T06:30:00Z", "2026-11-29T07:30:00Z")
    [step] = plan.steps
    assert step.arguments == {"service": "order-service", "start": "2026-11-29T06:30:00Z",
                              "end": "2026-11-29T07:30:00Z", "contains": "pool"}  # the model's filter stays
    assert "window from the question ('昨天下午三点' in Asia/Shanghai)" in plan.rationale
    assert (response.prompt.name, response.prompt.version) == ("planner", "4")
