"""Fault injection against the six real processes: a role killed with SIGKILL in the
middle of a diagnosis, a role that hangs, a database that is not there at start, a model endpoint
that answers 500 and then garbage. In every case the gateway answers within its deadline with a
typed fallback, records why, and the system recovers once the role is back.

Each kill is made deterministic by stopping the role (SIGSTOP) before the diagnosis starts: the
gateway's call to it is then in flight and blocked when the SIGKILL lands, so the failure is a
connection lost mid-call rather than a refused connection.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.launcher import REPO_ROOT
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.conftest import start_cluster
from tests.scripted_model_server import ScriptedModelServer, Status, completion

pytestmark = pytest.mark.integration

DIAGNOSIS_DEADLINE_S = 8.0
# Slack for the answer to travel back and for a loaded 2-core machine; far below the client's own
# timeout, so "answered within the deadline" is what the assertion checks.
ANSWER_SLACK_S = 4.0
CLIENT_TIMEOUT_S = 40.0
QUERY = "payment-service 最近一小时 CPU 为什么这么高？"


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory, otlp_receiver):
    root = tmp_path_factory.mktemp("fault-injection")
    running = start_cluster(root, otlp_receiver.endpoint,
                            {"ATTEST_DIAGNOSIS_TIMEOUT_SECONDS": str(DIAGNOSIS_DEADLINE_S)})
    running.run_store = RunStore(make_session_factory(make_engine(running.database_url)))
    try:
        yield running
    finally:
        for service in running.processes.values():
            if service.process.poll() is None:
                os.kill(service.process.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
        running.stop()


@pytest.fixture(scope="module")
def healthy_outcome(fault_cluster, auth_metadata):
    """What this query gives while every role is up: what 'succeeds again' is compared with."""
    response = _diagnose(fault_cluster, auth_metadata)
    assert response.status in {"COMPLETED", "FALLBACK"}
    run = fault_cluster.run_store.get_run(response.run_id)
    assert "failure_reason" not in run["self_evaluation"]["verifier_evaluation"]
    return response


def _diagnose(cluster, metadata, query: str = QUERY) -> gateway_pb2.DiagnoseResponse:
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        return gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query=query), timeout=CLIENT_TIMEOUT_S, metadata=metadata)


def _diagnose_in_background(cluster, metadata) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def work() -> None:
        started = time.monotonic()
        try:
            result["response"] = _diagnose(cluster, metadata)
        except grpc.RpcError as exc:  # asserted on below: must not happen
            result["error"] = exc
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, result


def _assert_same_success(response, healthy, run_store) -> None:
    assert (response.status, response.effective_verdict, response.fallback_type) == (
        healthy.status, healthy.effective_verdict, healthy.fallback_type)
    evaluation = run_store.get_run(response.run_id)["self_evaluation"]["verifier_evaluation"]
    assert "failure_reason" not in evaluation
    assert not evaluation.get("composer_output", {}).get("fallback_reason")


@pytest.mark.parametrize("role", ["planner", "executor", "gatekeeper", "verifier", "composer"])
def test_role_killed_mid_diagnosis_falls_back_then_recovers_after_restart(
        role, fault_cluster, healthy_outcome, auth_metadata):
    process = fault_cluster.processes[role].process
    os.kill(process.pid, signal.SIGSTOP)
    thread, result = _diagnose_in_background(fault_cluster, auth_metadata)
    time.sleep(1.0)  # the earlier hops take tens of milliseconds: the call to `role` is now blocked
    assert thread.is_alive(), "the diagnosis must still be waiting on the stopped role"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    thread.join(DIAGNOSIS_DEADLINE_S + ANSWER_SLACK_S)
    assert not thread.is_alive(), "the gateway did not answer within the diagnosis deadline"
    assert "error" not in result, f"the gateway failed the call: {result.get('error')!r}"
    response = result["response"]
    run = fault_cluster.run_store.get_run(response.run_id)
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    if role not in ("planner", "executor"):  # tools ran: their rule evaluation is kept too
        assert run["self_evaluation"]["rule_evaluation"]["evidence_calls"] > 0

    if role == "composer":
        # A composer that is gone is handled by the gateway's fixed template over the same
        # verified material: the verdict stands, the template says why.
        assert response.status == healthy_outcome.status
        assert response.effective_verdict == healthy_outcome.effective_verdict
        assert evaluation["composer_output"]["used_fallback_template"] is True
        assert evaluation["composer_output"]["fallback_reason"] == "composer unavailable: UNAVAILABLE"
        assert response.answer
    else:
        assert response.status == "FALLBACK"
        assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "PRE_VERIFICATION"
        assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) is None
        assert evaluation["failure_reason"] == f"{role} failed: UNAVAILABLE"
        assert run["status"] == "FALLBACK" and run["fallback_type"] == "PRE_VERIFICATION"
        assert response.answer

    port = fault_cluster.processes[role].port
    assert fault_cluster.restart(role) == port
    _assert_same_success(_diagnose(fault_cluster, auth_metadata), healthy_outcome, fault_cluster.run_store)


def test_hanging_role_hits_the_deadline_and_falls_back(fault_cluster, healthy_outcome, auth_metadata):
    process = fault_cluster.processes["verifier"].process
    os.kill(process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        response = _diagnose(fault_cluster, auth_metadata)
        elapsed = time.monotonic() - started
    finally:
        os.kill(process.pid, signal.SIGCONT)
    assert elapsed < DIAGNOSIS_DEADLINE_S + ANSWER_SLACK_S
    assert response.status == "FALLBACK"
    assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "PRE_VERIFICATION"
    run = fault_cluster.run_store.get_run(response.run_id)
    assert run["self_evaluation"]["verifier_evaluation"]["failure_reason"] == "verifier failed: DEADLINE_EXCEEDED"
    # Resumed, the same process serves again (its late answer to the abandoned call is dropped).
    _assert_same_success(_diagnose(fault_cluster, auth_metadata), healthy_outcome, fault_cluster.run_store)


@pytest.mark.parametrize("module", ["gateway", "services.executor", "services.gatekeeper"])
def test_unreachable_database_at_start_is_one_line_and_exit_1(module, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")]),
        "ATTEST_DATABASE_URL": "postgresql+psycopg://attest@127.0.0.1:1/attest",
        "ATTEST_ESTATE_DATABASE_URL": f"sqlite:///{tmp_path / 'estate.db'}",
        "ATTEST_GATEWAY_PORT": "0", "ATTEST_EXECUTOR_PORT": "0", "ATTEST_GATEKEEPER_PORT": "0",
        "ATTEST_INSECURE": "1",  # the database is what this test takes away, not the certificates
    }
    done = subprocess.run([sys.executable, "-m", module], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "READY" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert "cannot use database postgresql+psycopg://attest@127.0.0.1:1/attest" in errors[0]
    assert "Connection refused" in errors[0] or "connection failed" in errors[0]
    assert "Traceback" not in done.stderr


def test_model_500_is_retried_then_garbage_is_a_typed_fallback(tmp_path_factory, otlp_receiver, auth_metadata):
    # First attempt: HTTP 500 (retryable); the technical retry gets text that is no JSON at all,
    # and every later turn gets garbage too.
    script = [Status(500, {"error": {"message": "scripted outage", "type": "server_error"}}),
              completion("%%% <garbage> ]]] not json {{{")]
    with ScriptedModelServer(script, repeat_last=True) as model:
        root = tmp_path_factory.mktemp("faulty-model")
        running = start_cluster(root, otlp_receiver.endpoint, {
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": model.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-faulty",
            "ATTEST_EXECUTOR_MODEL_API_KEY": "test-key",
            "ATTEST_EXECUTOR_MODEL_TIMEOUT_SECONDS": "5",
            "ATTEST_DIAGNOSIS_TIMEOUT_SECONDS": "30",
        })
        try:
            response = _diagnose(running, auth_metadata)
            run = RunStore(make_session_factory(make_engine(running.database_url))).get_run(response.run_id)
        finally:
            running.stop()
        calls = len(model.requests)
    assert calls >= 2, "the 500 must have been retried"
    assert response.status == "FALLBACK"
    assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "PRE_VERIFICATION"
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert evaluation["failure_reason"].startswith("INVALID_OUTPUT (")
    assert evaluation["executor_output_parse_status"] in {"missing", "malformed"}
    assert "model_verdict" not in evaluation
