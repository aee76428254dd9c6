"""Dependencies followed, the executor's servicer called in process (grpcio-testing): when the error lines of the asked
service name another service of the catalogue, the executor checks that service too (ExecutePlan
with the embedded engine, RunAgent with the embedded single-ReAct agent), the follow-up calls are
persisted like any other, the answer states what they found, and the coverage never reports the
followed service as unknown or unchecked. A name the catalogue does not know is never queried.

The estate is made up here (services that exist nowhere else)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.executor.v1 import executor_pb2
from services.executor.estate import load_estate
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.service_catalogue import catalogue_of
from services.executor.servicer import ExecutorServicer, build_engine
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.registry import build_default_registry
from shared.config import ExecutorSettings, ModelSettings
from shared.core.contracts import ServiceCoverage
from shared.core.embedded_planner import EmbeddedPlanner
from shared.proto_convert import message_to_model, plain_to_message, spec_value

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
CALL_TIMEOUT = 30
QUERY = "fare-gate 为什么报错这么多？"
CALLER, UPSTREAM, UNKNOWN = "fare-gate", "quota-keeper", "ghost-cache"

ESTATE = {
    "history_minutes": 120,
    "metrics": {
        "http_server_error_ratio": {"unit": "ratio", "decimals": 4, "max": 1},
        "request_duration_seconds_p99": {"unit": "seconds", "decimals": 3},
        "db_lock_waiters": {"unit": "count", "decimals": 0},
    },
    "services": [
        {"name": CALLER, "hosts": ["fg-a1", "fg-a2"],
         "metrics": {"http_server_error_ratio": {"baseline": 0.002, "noise": 0.0005},
                     "request_duration_seconds_p99": {"baseline": 0.2, "noise": 0.01}},
         "logs": [{"level": "INFO", "rate_per_min": 2, "template": "GET /v1/fares 200 rt=0.1{int:1:9}"}]},
        {"name": UPSTREAM, "hosts": ["qk-0", "qk-1"],
         "metrics": {"db_lock_waiters": {"baseline": 1, "noise": 0.3},
                     "request_duration_seconds_p99": {"baseline": 0.05, "noise": 0.005}},
         "logs": [{"level": "INFO", "rate_per_min": 2, "template": "quota granted bucket={int:1:99}"}]},
        {"name": "seat-ledger", "hosts": ["sl-0"],
         "metrics": {"request_duration_seconds_p99": {"baseline": 0.05, "noise": 0.005}}},
    ],
    "incidents": [{
        "id": "SYN-FOLLOW-1", "service": CALLER, "kind": "upstream_errors",
        "start_offset_minutes": 30, "duration_minutes": 60,
        "metrics": [
            {"metric": "http_server_error_ratio", "shape": "ramp", "target": 0.3, "ramp_minutes": 2},
            {"metric": "db_lock_waiters", "shape": "ramp", "target": 60, "ramp_minutes": 2, "service": UPSTREAM},
        ],
        "logs": [
            {"level": "ERROR", "rate_per_min": 3,
             "template": "POST /v1/fares 502 rt=5.0{int:1:9} upstream=quota-keeper:9090 upstream_status=504"},
            {"level": "ERROR", "rate_per_min": 1,
             "template": "fare cache refill failed: connect to ghost-cache:6379: connection refused"},
            {"level": "ERROR", "rate_per_min": 2, "service": UPSTREAM,
             "template": "lock wait timeout exceeded on table quota_buckets after 5000ms"},
        ],
    }],
}


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    estate_dir = tmp_path_factory.mktemp("estate-dir")
    (estate_dir / "services.json").write_text(json.dumps(ESTATE), encoding="utf-8")
    url = f"sqlite:///{tmp_path_factory.mktemp('estate') / 'estate.db'}"
    load_estate(url, estate_dir, anchor=ANCHOR)
    return build_backends(ExecutorSettings(estate_database_url=url))


@pytest.fixture()
def executor(backends, stores, in_process):
    """`executor(limit=10)` → (stub, new_run)."""
    runs, invocations = stores
    registry = build_default_registry(backends)

    def start(limit: int = 10):
        servicer = ExecutorServicer(
            invocations, registry, build_engine(ModelSettings(), registry),
            react_agent=EmbeddedReactAgent(clock=lambda: ANCHOR),
            catalogue=catalogue_of(backends), max_services_per_question=limit,
        )
        stub = in_process("executor", servicer)

        def new_run(mode: str = "MULTI_AGENT") -> str:
            return runs.create_run(runs.create_session("test"), QUERY, mode)

        return stub, new_run

    return start


def _execute(stub, run_id: str) -> executor_pb2.ExecutePlanResponse:
    plan = EmbeddedPlanner().plan(QUERY, ANCHOR)
    request = executor_pb2.ExecutePlanRequest(run_id=run_id, query=QUERY, plan=plain_to_message(plan, evidence_pb2.Plan))
    return stub.ExecutePlan(request, timeout=CALL_TIMEOUT)


def _calls(invocations) -> list[tuple[str, str]]:
    return [(inv.tool_name, str(inv.request.get("service", ""))) for inv in invocations]


def test_execute_plan_follows_the_upstream_its_error_lines_name_and_states_what_it_found(executor, stores):
    stub, new_run = executor()
    run_id = new_run()
    response = _execute(stub, run_id)
    persisted = stores[1].list_for_run(run_id)
    calls = _calls(persisted)
    assert ("query_metrics", UPSTREAM) in calls and ("query_logs", UPSTREAM) in calls
    assert not any(service == UNKNOWN for _, service in calls), "a name the catalogue does not know is never queried"
    assert {inv.invocation_id for inv in persisted} == set(response.invocation_ids), "recorded like any other call"
    follow_logs = next(inv for inv in persisted if (inv.tool_name, inv.request.get("service")) == ("query_logs", UPSTREAM))
    caller_logs = next(inv for inv in persisted if (inv.tool_name, inv.request.get("service")) == ("query_logs", CALLER))
    assert (follow_logs.request["start"], follow_logs.request["end"]) == (caller_logs.request["start"], caller_logs.request["end"])

    assert spec_value(enums_pb2.ParseStatus.DESCRIPTOR, response.parse_status) == "valid"
    output = json.loads(response.output_text)
    followed_ids = {inv.invocation_id for inv in persisted if inv.request.get("service") == UPSTREAM}
    about_upstream = [c for c in output["claims"] if c["claim_text"].startswith(UPSTREAM)
                      and any(b["source_invocation_id"] in followed_ids for b in c["evidence_bindings"])]
    assert about_upstream, "the answer states what the followed service's own evidence shows"
    assert any("db_lock_waiters" in c["claim_text"] or "lock wait timeout" in c["claim_text"] for c in about_upstream)
    assert not any(c["claim_text"].startswith(UNKNOWN) for c in output["claims"])

    coverage = message_to_model(response.service_coverage, ServiceCoverage)
    assert coverage.checked == [CALLER] and coverage.unknown == [] and coverage.unchecked == []
    assert not coverage.partial, "a followed service is neither unknown nor unchecked"


def test_execute_plan_keeps_within_the_per_question_limit_and_names_the_dependency_it_left(executor, stores):
    stub, new_run = executor(limit=1)
    run_id = new_run()
    response = _execute(stub, run_id)
    assert {service for _, service in _calls(stores[1].list_for_run(run_id))} == {CALLER, ""}
    missing = [m["text"] for m in json.loads(response.output_text)["missing_info"]]
    assert f"{CALLER} 的错误日志提到了 {UPSTREAM}；每个问题最多检查 1 个服务，本次未检查 {UPSTREAM}。" in missing


def test_run_agent_follows_the_upstream_in_recorded_steps_and_its_draft_says_what_it_found(executor, stores):
    stub, new_run = executor()
    run_id = new_run("SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY, max_steps=12), timeout=CALL_TIMEOUT)
    persisted = stores[1].list_for_run(run_id)
    calls = _calls(persisted)
    plan_steps = len(EmbeddedPlanner().plan(QUERY, ANCHOR).steps)
    # After the plan's steps: the followed service's metrics and logs (an event read of every
    # level around an onset may come after them).
    assert calls[plan_steps:plan_steps + 2] == [("query_metrics", UPSTREAM), ("query_logs", UPSTREAM)], calls
    assert all(tool == "query_logs" for tool, _ in calls[plan_steps + 2:]), calls
    assert not any(service == UNKNOWN for _, service in calls)
    assert list(response.tool_call_ids) == [inv.tool_call_id for inv in persisted]
    assert response.progress.completed_checks == len(persisted), "each follow-up call is a recorded step"
    assert response.stop_reason == "" and response.HasField("draft")
    followed_calls = {inv.tool_call_id for inv in persisted if inv.request.get("service") == UPSTREAM}
    about_upstream = [a for a in response.draft.analyses if UPSTREAM in a.text and set(a.tool_call_ids) & followed_calls]
    assert about_upstream, "the Draft states what the followed service's evidence shows"
    coverage = message_to_model(response.service_coverage, ServiceCoverage)
    assert coverage.checked == [CALLER] and not coverage.partial


def test_run_agent_never_spends_the_last_steps_on_a_dependency(executor, stores):
    stub, new_run = executor()
    run_id = new_run("SINGLE_REACT")
    plan_steps = len(EmbeddedPlanner().plan(QUERY, ANCHOR).steps)
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY, max_steps=plan_steps + 1),
                             timeout=CALL_TIMEOUT)
    assert response.stop_reason == "" and response.HasField("draft"), "the budget is not exhausted by following"
    assert UPSTREAM not in {inv.request.get("service") for inv in stores[1].list_for_run(run_id)}
    assert any(UPSTREAM in line and "剩余步骤不足" in line for line in response.draft.limitations)
