"""The gatekeeper process, fed citations that must not pass: another run's invocation, and an
excerpt whose number was changed (92% -> 29%). Invocations are real rows in the shared store."""

from __future__ import annotations

import json

import pytest

from attest.common.v1 import enums_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from shared.core.contracts import EvidenceRef
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.proto_convert import spec_value

pytestmark = pytest.mark.integration
REF_TEXT = "checkout-api cpu_usage_percent=92% at 2026-11-29T10:42:00Z"


def _output(invocation_id: int, excerpt: str) -> str:
    return json.dumps({
        "answer_version": "executor_evidence_v2",
        "claims": [{
            "claim_id": "c1",
            "claim_type": "symptom",
            "claim_text": "checkout-api 的 CPU 使用率达到 92%",
            "support_level": "direct",
            "evidence_bindings": [{
                "source_type": "metrics",
                "tool_name": "query_metrics",
                "source_invocation_id": invocation_id,
                "raw_path": "series[0].points[0]",
                "evidence_excerpt": excerpt,
            }],
        }],
        "hypotheses": [], "recommended_actions": [], "missing_info": [],
    }, ensure_ascii=False)


@pytest.fixture(scope="module")
def two_runs(cluster, run_store):
    store = InvocationStore(make_session_factory(make_engine(cluster.database_url)))
    session_id = run_store.create_session(client_label="gatekeeper-test")
    runs = {}
    for name in ("current", "other"):
        run_id = run_store.create_run(session_id, f"{name} run", "MULTI_AGENT")
        invocation_id = store.begin(run_id, "call-1", "query_metrics", 0, {"service": "checkout-api"})
        store.complete(invocation_id, evidence_status="EVIDENCE_FOUND", agent_result='{"series": 1}',
                       evidence_refs=[EvidenceRef(raw_path="series[0].points[0]", text=REF_TEXT)])
        runs[name] = (run_id, invocation_id)
    return runs


def _check(cluster, run_id: str, text: str) -> gatekeeper_pb2.CheckEvidenceResponse:
    with cluster.channel("gatekeeper") as channel:
        stub = gatekeeper_pb2_grpc.GatekeeperServiceStub(channel)
        return stub.CheckEvidence(
            gatekeeper_pb2.CheckEvidenceRequest(run_id=run_id, executor_output_text=text), timeout=10
        )


def test_genuine_citation_passes(cluster, two_runs):
    run_id, invocation_id = two_runs["current"]
    response = _check(cluster, run_id, _output(invocation_id, "cpu_usage_percent=92%"))
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.verdict_ceiling) == "PASS"
    assert list(response.gatekeeper_result.failed_rules) == []
    assert [e.source_invocation_id for e in response.verified_evidence] == [invocation_id]


def test_another_runs_invocation_never_reaches_pass(cluster, two_runs):
    run_id, _ = two_runs["current"]
    _, foreign_id = two_runs["other"]
    response = _check(cluster, run_id, _output(foreign_id, "cpu_usage_percent=92%"))
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.verdict_ceiling) != "PASS"
    assert "evidence.invocation_ref" in response.gatekeeper_result.failed_rules
    assert len(response.verified_evidence) == 0
    assert spec_value(enums_pb2.GatekeeperRoute.DESCRIPTOR, response.route) == "PRE_VERIFICATION_FALLBACK"


def test_changed_number_in_excerpt_never_reaches_pass(cluster, two_runs):
    run_id, invocation_id = two_runs["current"]
    response = _check(cluster, run_id, _output(invocation_id, "cpu_usage_percent=29%"))
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.verdict_ceiling) != "PASS"
    assert "evidence.excerpt_mismatch" in response.gatekeeper_result.failed_rules
    assert len(response.verified_evidence) == 0
