"""A downstream role that is gone: the gateway answers with a typed fallback, never an error, and
never invents a verdict. (test_faults.py extends this to every role, mid-diagnosis, with restarts.)"""

from __future__ import annotations

import signal

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.answer_structure_checks import sections_of, structure_problems
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster_without_verifier(tmp_path_factory, otlp_receiver, new_database):
    root = tmp_path_factory.mktemp("faults")
    running = start_cluster(root, otlp_receiver.endpoint, database_url=new_database(root))
    verifier = running.processes["verifier"].process
    verifier.send_signal(signal.SIGKILL)
    verifier.wait(timeout=10)
    try:
        yield running
    finally:
        running.stop()


def test_verifier_gone_is_a_pre_verification_fallback_without_a_verdict(cluster_without_verifier, auth_metadata):
    with grpc.insecure_channel(cluster_without_verifier.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query="payment-service 最近一小时 CPU 为什么这么高？"),
            timeout=60, metadata=auth_metadata)
    assert response.status == "FALLBACK"
    assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "PRE_VERIFICATION"
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) is None
    assert "技术故障" in response.answer and "可以稍后重试" in response.answer, "a retry may help, and it says so"
    # The structure says it too: retryable, a FALLBACK, the text rendered from the structure.
    assert (response.retryable, response.outcome_status) == (True, answer_pb2.OUTCOME_STATUS_FALLBACK)
    assert structure_problems(response, []) == [] and sections_of(response)[0] == "EXPLANATION"
    run = RunStore(make_session_factory(make_engine(cluster_without_verifier.database_url))).get_run(response.run_id)
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert evaluation["failure_reason"].startswith("verifier failed")
    assert "model_verdict" not in evaluation and "effective_verdict" not in evaluation
    assert evaluation["gatekeeper_result"]["status"] in {"pass", "warn"}, "what was known is kept"
    assert run["status"] == "FALLBACK"


def test_wrong_token_is_unauthenticated(cluster_without_verifier):
    with grpc.insecure_channel(cluster_without_verifier.gateway_addr) as channel:
        with pytest.raises(grpc.RpcError) as info:
            gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
                gateway_pb2.DiagnoseRequest(query="payment-service 怎么了"), timeout=10,
                metadata=[("authorization", "Bearer not-the-token")])
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
