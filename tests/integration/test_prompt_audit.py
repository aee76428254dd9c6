"""The prompt audit of runs through the real gateway and roles: every role is
named with the prompts it reports for its configured engine (here the shipped embedded ones), in
the run's mode, also when the run never reached it. (The model-configured verifier on a
gatekeeper reject is `test_graph_spec_scenarios.py`'s.)"""

from __future__ import annotations

import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc

pytestmark = pytest.mark.integration


def _prompts(run_store, run_id: str) -> list[tuple[str, str, str]]:
    evaluation = run_store.get_run(run_id)["self_evaluation"]["verifier_evaluation"]
    return [(p["role"], p["name"], p["version"]) for p in evaluation["prompt_audit"]["prompts"]]


def test_a_run_that_reached_no_role_names_every_role_s_engine(gateway_channel, auth_metadata, run_store):
    stub = gateway_pb2_grpc.GatewayServiceStub(gateway_channel)
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="系统最近是不是有点慢？"),
                             timeout=60, metadata=auth_metadata)
    assert run_store.get_run(response.run_id)["invocations"] == []  # MISSING_REQUIRED_CONTEXT: no role ran a tool
    assert _prompts(run_store, response.run_id) == [
        ("planner", "planner.embedded", "1"), ("executor", "executor.embedded", "1"),
        ("verifier", "verifier.embedded", "1"), ("composer", "composer.templates", "1"),
    ]


def test_single_react_names_the_agent_its_repair_the_guard_and_the_roles_it_does_not_call(
        gateway_channel, auth_metadata, run_store):
    stub = gateway_pb2_grpc.GatewayServiceStub(gateway_channel)
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="payment-service 的 CPU 为什么这么高？",
                                                         mode=enums_pb2.DIAGNOSIS_MODE_SINGLE_REACT),
                             timeout=60, metadata=auth_metadata)
    assert _prompts(run_store, response.run_id) == [
        ("planner", "unused", "-"),
        ("executor", "react_agent.embedded", "1"), ("executor", "draft_repair.embedded", "1"),
        ("semantic_guard", "semantic_guard.embedded", "1"),
        ("composer", "unused", "-"),
    ]
