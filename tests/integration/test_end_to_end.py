"""One diagnosis through six real processes: answer, persistence, citations and one trace."""

from __future__ import annotations

import json
import re

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.launcher import REPO_ROOT
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.proto_convert import spec_value
from tests.integration.answer_structure_checks import run_invocations, sections_of, structure_problems

pytestmark = pytest.mark.integration
CJK = re.compile(r"[\u4e00-\u9fff]")
SERVICE_NAMES = {
    "gateway": "attest.gateway.v1.GatewayService",
    "planner": "attest.planner.v1.PlannerService",
    "executor": "attest.executor.v1.ExecutorService",
    "gatekeeper": "attest.gatekeeper.v1.GatekeeperService",
    "verifier": "attest.verifier.v1.VerifierService",
    "composer": "attest.composer.v1.ComposerService",
}


def _incident_service() -> str:
    """A service the demo estate has an incident on (test data may know the data)."""
    incident_files = sorted((REPO_ROOT / "demo" / "estate" / "incidents").glob("*.json"))
    return json.loads(incident_files[0].read_text(encoding="utf-8"))["service"]


@pytest.fixture(scope="module")
def diagnosis(cluster, auth_metadata, otlp_receiver):
    service = _incident_service()
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        response = stub.Diagnose(
            gateway_pb2.DiagnoseRequest(query=f"{service} 最近一小时有什么异常？"),
            timeout=60,
            metadata=auth_metadata,
        )
    return response


def test_answer_is_chinese_with_verdict_and_run_id(diagnosis):
    assert diagnosis.run_id
    assert len(CJK.findall(diagnosis.answer)) >= 10, diagnosis.answer
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, diagnosis.effective_verdict) in {"PASS", "LOW_CONFID", "REJECT"}
    assert diagnosis.status == "COMPLETED"
    assert "{" not in diagnosis.answer, "raw JSON must never reach the answer"


def test_run_and_verifier_evaluation_are_persisted(diagnosis, run_store):
    run = run_store.get_run(diagnosis.run_id)
    assert run is not None and run["status"] == "COMPLETED"
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert evaluation["effective_verdict"] == spec_value(enums_pb2.Verdict.DESCRIPTOR, diagnosis.effective_verdict)
    assert evaluation["claim_checks"], "the verifier's claim checks are persisted"
    assert {p["role"] for p in evaluation["prompt_audit"]["prompts"]} >= {"planner", "executor", "verifier", "composer"}
    assert run["trace_id"] == diagnosis.trace_id


def test_cited_invocations_are_persisted_rows_of_this_run(diagnosis, cluster, run_store):
    store = InvocationStore(make_session_factory(make_engine(cluster.database_url)))
    invocations = {inv.invocation_id: inv for inv in store.list_for_run(diagnosis.run_id)}
    assert invocations, "every tool call is persisted"
    assert {inv.tool_name for inv in invocations.values()} >= {"query_metrics", "query_logs"}
    assert all(inv.lifecycle in {"READY", "ERROR"} for inv in invocations.values())
    evaluation = run_store.get_run(diagnosis.run_id)["self_evaluation"]["verifier_evaluation"]
    cited = [
        (binding["source_invocation_id"], binding["raw_path"], binding["evidence_excerpt"])
        for claim in evaluation["verified_executor_output"]["claims"]
        for binding in claim["evidence_bindings"]
    ]
    assert cited, "the answer rests on at least one verified citation"
    for invocation_id, raw_path, excerpt in cited:
        invocation = invocations[invocation_id]  # KeyError = a cited id that is not this run's row
        paths = {ref.raw_path: ref.text for ref in evidence_view(invocation).refs()}
        assert raw_path in paths
        assert excerpt.strip() and excerpt.split("…")[0].strip().lower() in paths[raw_path].lower()


def test_one_trace_spans_all_six_services(diagnosis, otlp_receiver):
    trace_id = diagnosis.trace_id
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id)

    def server_spans_of_all_services(spans):
        names = {s["service_name"] for s in spans if s["trace_id"] == trace_id and s["kind"] == "SPAN_KIND_SERVER"}
        return spans if names >= set(SERVICE_NAMES) else None

    spans = otlp_receiver.wait_for(server_spans_of_all_services, timeout=30)
    in_trace = [s for s in spans if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in in_trace}
    for service in ("planner", "executor", "gatekeeper", "verifier", "composer"):
        server_spans = [s for s in in_trace if s["service_name"] == service and s["kind"] == "SPAN_KIND_SERVER"]
        assert server_spans, f"no server span from {service}"
        for span in server_spans:
            parent = by_id.get(span["parent_span_id"])
            assert parent is not None, f"{service} server span has no parent in the trace"
            assert parent["kind"] == "SPAN_KIND_CLIENT" and parent["service_name"] == "gateway", (
                f"{service}'s server span must be a child of the gateway's client span"
            )
    gateway_server = [s for s in in_trace if s["service_name"] == "gateway" and s["kind"] == "SPAN_KIND_SERVER"]
    assert len(gateway_server) == 1 and gateway_server[0]["parent_span_id"] == ""


@pytest.mark.parametrize("service", sorted(SERVICE_NAMES))
def test_every_service_reports_serving(cluster, service):
    with cluster.channel(service) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE_NAMES[service]):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_gateway_refuses_calls_without_the_token(cluster):
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Diagnose(gateway_pb2.DiagnoseRequest(query="payment-service 怎么了"), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_empty_query_is_invalid_argument(cluster, auth_metadata):
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Diagnose(gateway_pb2.DiagnoseRequest(query="   "), timeout=10, metadata=auth_metadata)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_answer_arrives_as_a_structure_whose_citations_are_this_runs_verified_evidence(diagnosis, cluster):
    invocations = run_invocations(cluster.database_url, diagnosis.run_id)
    assert structure_problems(diagnosis, invocations) == []
    kinds = sections_of(diagnosis)
    assert kinds[:2] == ["CONFIDENCE", "CONCLUSION"] and "EVIDENCE" in kinds
    cited = [c for s in diagnosis.structured_answer.sections for i in s.items for c in i.citations]
    assert cited, "a composed answer cites its verified evidence"
    series = [c.series for c in cited if c.HasField("series")]
    assert series and all(0 < len(w.points) <= 60 for w in series), "an incident's metric facts carry their series"
    # Each names its call's scope, in the answer's time zone, and the kind of source it read.
    assert all(c.scope.startswith("服务 ") and c.source == "演示数据 estate" for c in cited), cited
    assert not [c.scope for c in cited if "T" in c.scope.split("，")[-1]], "the window shown as local time, not ISO"
    assert diagnosis.outcome_status == answer_pb2.OUTCOME_STATUS_COMPLETED
    assert diagnosis.retryable is False
