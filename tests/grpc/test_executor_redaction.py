"""Secrets never stored, the executor's servicer called in process (grpcio-testing): the error
lines of the asked service carry a database password in a connection URL. ExecutePlan (embedded
planner and engine) and RunAgent (the embedded single-ReAct agent) cite those lines; the password
is in nothing the executor returns nor in any row it wrote, the citations quote the redacted line,
and the gatekeeper's excerpt check passes them against the stored rows.

The estate is made up here; the password is in its log template, as a real service would log it."""

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
from services.gatekeeper.engine import check_executor_output
from services.gatekeeper.evidence_guard import guard_draft
from shared.config import ExecutorSettings, ModelSettings
from shared.core.embedded_planner import EmbeddedPlanner
from shared.proto_convert import message_to_plain, plain_to_message, spec_value

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
CALL_TIMEOUT = 30
SERVICE = "ledger-api"
QUERY = f"{SERVICE} 为什么报错这么多？"
PASSWORD = "Tr0ub4dor-xyzzy-42"
REDACTED_URL = "postgres://ledger:[REDACTED]@ledger-db:5432/ledger"

ESTATE = {
    "history_minutes": 120,
    "metrics": {"http_server_error_ratio": {"unit": "ratio", "decimals": 4, "max": 1}},
    "services": [
        {"name": SERVICE, "hosts": ["la-1", "la-2"],
         "metrics": {"http_server_error_ratio": {"baseline": 0.002, "noise": 0.0005}},
         "logs": [{"level": "INFO", "rate_per_min": 2, "template": "GET /v1/entries 200 rt=0.0{int:1:9}"}]},
    ],
    "incidents": [{
        "id": "SYN-SECRET-1", "service": SERVICE, "kind": "database_unreachable",
        "start_offset_minutes": 30, "duration_minutes": 60,
        "metrics": [{"metric": "http_server_error_ratio", "shape": "ramp", "target": 0.4, "ramp_minutes": 2}],
        "logs": [{"level": "ERROR", "rate_per_min": 3,
                  "template": "[pool-{int:1:9}] HikariPool-1 - Exception during pool initialization: connection to "
                              f"postgres://ledger:{PASSWORD}@ledger-db:5432/ledger refused"}],
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
    runs, invocations = stores
    registry = build_default_registry(backends)
    servicer = ExecutorServicer(invocations, registry, build_engine(ModelSettings(), registry),
                                react_agent=EmbeddedReactAgent(clock=lambda: ANCHOR), catalogue=catalogue_of(backends))
    stub = in_process("executor", servicer)

    def new_run(mode: str) -> str:
        return runs.create_run(runs.create_session("test"), QUERY, mode)

    return stub, new_run


def _no_password_stored(invocations) -> None:
    assert invocations
    for invocation in invocations:
        assert PASSWORD not in invocation.model_dump_json()


def test_execute_plan_cites_the_redacted_line_and_the_gatekeeper_passes_it(executor, stores):
    stub, new_run = executor
    run_id = new_run("MULTI_AGENT")
    plan = EmbeddedPlanner().plan(QUERY, ANCHOR)
    response = stub.ExecutePlan(executor_pb2.ExecutePlanRequest(
        run_id=run_id, query=QUERY, plan=plain_to_message(plan, evidence_pb2.Plan)), timeout=CALL_TIMEOUT)

    assert PASSWORD.encode() not in response.SerializeToString()
    persisted = stores[1].list_for_run(run_id)
    _no_password_stored(persisted)
    assert any(REDACTED_URL in invocation.agent_result for invocation in persisted if invocation.tool_name == "query_logs")

    assert spec_value(enums_pb2.ParseStatus.DESCRIPTOR, response.parse_status) == "valid"
    excerpts = [binding["evidence_excerpt"] for claim in json.loads(response.output_text)["claims"]
                for binding in claim["evidence_bindings"]]
    assert any("[REDACTED]" in excerpt for excerpt in excerpts), excerpts
    check = check_executor_output(run_id, response.output_text, persisted)
    assert (check.route, check.verdict_ceiling) == ("VERIFIER", "PASS"), check.gatekeeper_result.failed_rules


def test_run_agent_drafts_from_the_redacted_line_and_the_evidence_guard_passes_it(executor, stores):
    stub, new_run = executor
    run_id = new_run("SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY, max_steps=12),
                             timeout=CALL_TIMEOUT)

    assert PASSWORD.encode() not in response.SerializeToString()
    persisted = stores[1].list_for_run(run_id)
    _no_password_stored(persisted)
    assert response.HasField("draft")
    result = guard_draft(run_id, message_to_plain(response.draft), persisted)
    assert result.passed, result.violations
    assert "[REDACTED]" in result.snapshot.model_dump_json()
