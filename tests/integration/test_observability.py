"""What an operator sees of one diagnosis in Jaeger and on a dashboard, through a real OTLP/gRPC
receiver: one trace across the six processes, a span per tool invocation, SQL spans, model-call
spans with token usage, and the gateway's metrics."""

from __future__ import annotations

import json
import re

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.proto_convert import spec_value
from tests.integration.conftest import start_cluster
from tests.scripted_model_server import ScriptedModelServer, completion, tool_call

pytestmark = pytest.mark.integration
SERVICES = {"gateway", "planner", "executor", "gatekeeper", "verifier", "composer"}
DOWNSTREAM_NODES = SERVICES - {"gateway"}
QUERY = "payment-service 最近一小时 CPU 为什么这么高？"


def _diagnose(addr: str, auth_metadata, query: str = QUERY) -> gateway_pb2.DiagnoseResponse:
    with grpc.insecure_channel(addr) as channel:
        return gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query=query), timeout=90, metadata=auth_metadata)


def _trace(receiver, trace_id: str, predicate) -> list[dict]:
    """The spans of `trace_id` once `predicate(spans)` holds (spans arrive in batches)."""
    def ready(spans):
        mine = [s for s in spans if s["trace_id"] == trace_id]
        return mine if mine and predicate(mine) else None
    return receiver.wait_for(ready, timeout=20)


def _linked(spans: list[dict]) -> bool:
    """Every parent named is a span of the trace (nothing still in an exporter's batch)."""
    ids = {s["span_id"] for s in spans}
    return all(not s["parent_span_id"] or s["parent_span_id"] in ids for s in spans)


def _complete(spans: list[dict]) -> bool:
    """All six services reported, and every parent named is a span of the trace."""
    return {s["service_name"] for s in spans} >= SERVICES and _linked(spans)


@pytest.fixture(scope="module")
def diagnosis(cluster, auth_metadata):
    return _diagnose(cluster.gateway_addr, auth_metadata)


@pytest.fixture(scope="module")
def trace_spans(diagnosis, otlp_receiver):
    assert diagnosis.trace_id
    return _trace(otlp_receiver, diagnosis.trace_id, _complete)


def test_one_trace_holds_spans_from_all_six_services(trace_spans):
    assert {s["service_name"] for s in trace_spans} >= SERVICES
    roots = [s for s in trace_spans if not s["parent_span_id"]]
    assert len(roots) == 1, [(s["service_name"], s["name"]) for s in roots]
    root = roots[0]
    assert (root["service_name"], root["kind"]) == ("gateway", "SPAN_KIND_SERVER")
    assert root["name"].endswith("GatewayService/Diagnose")


def test_parent_child_links_cross_processes(trace_spans):
    by_id = {s["span_id"]: s for s in trace_spans}
    for service in DOWNSTREAM_NODES:
        servers = [s for s in trace_spans if s["service_name"] == service and s["kind"] == "SPAN_KIND_SERVER"]
        assert servers, f"{service} has a server span in the trace"
        for server in servers:
            parent = by_id[server["parent_span_id"]]
            # The caller's client span for the same method, in the gateway's process.
            assert (parent["service_name"], parent["kind"]) == ("gateway", "SPAN_KIND_CLIENT")
            assert parent["name"] == server["name"]


def _ancestors(span: dict, by_id: dict[str, dict]) -> list[dict]:
    chain = []
    while span["parent_span_id"]:
        span = by_id[span["parent_span_id"]]
        chain.append(span)
    return chain


def _ancestor_services(span: dict, by_id: dict[str, dict]) -> list[tuple[str, str]]:
    return [(s["service_name"], s["kind"]) for s in _ancestors(span, by_id)]


def test_every_tool_invocation_has_a_span_carrying_its_invocation_id(diagnosis, trace_spans, cluster):
    persisted = InvocationStore(make_session_factory(make_engine(cluster.database_url))).list_for_run(diagnosis.run_id)
    assert persisted, "the diagnosis called tools"
    tool_spans = {s["attributes"].get("attest.invocation_id"): s for s in trace_spans
                  if "attest.tool.name" in s["attributes"]}
    assert set(tool_spans) == {inv.invocation_id for inv in persisted}
    by_id = {s["span_id"]: s for s in trace_spans}
    for invocation in persisted:
        span = tool_spans[invocation.invocation_id]
        assert span["service_name"] == "executor"
        assert span["attributes"]["attest.tool.name"] == invocation.tool_name
        assert span["attributes"]["attest.evidence_status"] == (invocation.evidence_status or "")
        assert span["attributes"]["attest.run_id"] == diagnosis.run_id
        assert ("executor", "SPAN_KIND_SERVER") in _ancestor_services(span, by_id)


def test_sql_statements_are_spans_of_the_trace(trace_spans):
    sql = [s for s in trace_spans if "db.statement" in s["attributes"]]
    assert sql, "the audit store's statements are traced"
    services = {s["service_name"] for s in sql}
    assert {"gateway", "executor", "gatekeeper"} <= services, services
    # The executor's estate queries (the tools' own SQL, and the catalogue of services read before
    # any tool runs) are traced too, inside a tool span or the catalogue's span.
    by_id = {s["span_id"]: s for s in trace_spans}
    estate = [s for s in sql if s["service_name"] == "executor" and "estate.db" in s["name"]]
    assert estate, sorted({s["name"] for s in sql if s["service_name"] == "executor"})
    assert all(any(ancestor["name"].startswith(("tool ", "service catalogue")) for ancestor in _ancestors(s, by_id))
               for s in estate)
    assert any(any(ancestor["name"].startswith("tool ") for ancestor in _ancestors(s, by_id)) for s in estate)


def test_gateway_span_carries_the_run_outcome(diagnosis, trace_spans):
    root = next(s for s in trace_spans if not s["parent_span_id"])
    attributes = root["attributes"]
    assert attributes["attest.run_id"] == diagnosis.run_id
    assert attributes["attest.mode"] == "MULTI_AGENT"
    assert attributes["attest.rounds"] == diagnosis.rounds
    assert attributes["attest.effective_verdict"] == spec_value(enums_pb2.Verdict.DESCRIPTOR, diagnosis.effective_verdict)
    assert attributes["attest.model_verdict"]
    assert attributes["attest.verdict_ceiling"]
    rules = next(s for s in trace_spans if s["name"] == "gatekeeper.rules")
    assert rules["attributes"]["attest.run_id"] == diagnosis.run_id


def test_log_lines_of_the_diagnosis_carry_its_trace_and_span_ids(diagnosis, trace_spans, cluster):
    span_ids = {s["span_id"] for s in trace_spans}
    entries = [json.loads(line) for log in cluster.log_dir.glob("*.log")
               for line in log.read_text(errors="replace").splitlines() if line.startswith("{")]
    about_run = [e for e in entries if e.get("run_id") == diagnosis.run_id]
    assert about_run, "the gateway logs the end of the run"
    assert all(e.get("trace_id") == diagnosis.trace_id for e in about_run), about_run
    in_trace = [e for e in entries if e.get("trace_id") == diagnosis.trace_id]
    assert {e["service"] for e in in_trace} >= {"gateway"}
    assert all(e.get("span_id") in span_ids for e in in_trace), in_trace


def _latest(points: list[dict], name: str, **attributes) -> list[dict]:
    return [p for p in points if p["name"] == name and p["service_name"] == "gateway"
            and all(p["attributes"].get(k) == v for k, v in attributes.items())]


def test_metrics_count_diagnoses_by_verdict_and_time_each_hop(diagnosis, otlp_receiver):
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, diagnosis.effective_verdict)
    counted = otlp_receiver.wait_for_metrics(lambda points: _latest(
        points, "attest.diagnoses", effective_verdict=verdict, status=diagnosis.status, mode="MULTI_AGENT"))
    assert all(p["kind"] == "sum" and p["value"] >= 1 for p in counted)
    assert counted[-1]["attributes"]["fallback_type"] == "NONE"

    def every_hop(points):
        hops = [p for p in _latest(points, "attest.hop.duration") if p["attributes"].get("grpc_status") == "OK"]
        return hops if {p["attributes"]["node"] for p in hops} >= DOWNSTREAM_NODES else None

    hops = otlp_receiver.wait_for_metrics(every_hop)
    assert all(p["kind"] == "histogram" and p["count"] >= 1 and p["sum"] > 0 for p in hops)
    assert all(p["unit"] == "s" for p in hops)


# --- a scripted executor model: the model-call spans --------------------------------------------


def _script(body: dict):
    """First turn: one query_metrics call as the planner suggested; then a plain-text answer."""
    if not any(m["role"] == "tool" for m in body["messages"]):
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        suggested = re.search(r"\d+\. query_metrics (\{.*\})", user)
        arguments = json.loads(suggested.group(1)) if suggested else {}
        return completion(tool_calls=[tool_call("query_metrics", arguments)], prompt_tokens=120, completion_tokens=9)
    return completion("payment-service 的 CPU 很高。", prompt_tokens=240, completion_tokens=17)


@pytest.fixture(scope="module")
def scripted_cluster(tmp_path_factory, otlp_receiver, new_database):
    with ScriptedModelServer([_script], repeat_last=True) as server:
        root = tmp_path_factory.mktemp("observability")
        running = start_cluster(root, otlp_receiver.endpoint, {
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": server.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-executor",
            "ATTEST_EXECUTOR_MODEL_API_KEY": "test-key",
        }, database_url=new_database(root))
        try:
            yield running
        finally:
            running.stop()


def test_model_calls_are_spans_with_genai_attributes_and_token_usage(scripted_cluster, auth_metadata, otlp_receiver):
    response = _diagnose(scripted_cluster.gateway_addr, auth_metadata)

    def two_model_calls(spans):
        return _linked(spans) and len([s for s in spans if "gen_ai.system" in s["attributes"]]) >= 2

    spans = _trace(otlp_receiver, response.trace_id, two_model_calls)
    calls = sorted((s for s in spans if "gen_ai.system" in s["attributes"]), key=lambda s: s["start_time_unix_nano"])
    usage = [(c["attributes"]["gen_ai.usage.input_tokens"], c["attributes"]["gen_ai.usage.output_tokens"]) for c in calls]
    assert usage == [(120, 9), (240, 17)]
    by_id = {s["span_id"]: s for s in spans}
    for call in calls:
        assert call["service_name"] == "executor" and call["kind"] == "SPAN_KIND_CLIENT"
        assert call["attributes"]["gen_ai.system"] == "openai"
        assert call["attributes"]["gen_ai.request.model"] == "scripted-executor"
        assert ("executor", "SPAN_KIND_SERVER") in _ancestor_services(call, by_id)
        assert not any("prompt" in key or "content" in key for key in call["attributes"]), "no prompt text"
    # The answer was prose, not the contract: the executor's output fails, the diagnosis falls back.
    assert response.status == "FALLBACK"
    fallbacks = otlp_receiver.wait_for_metrics(lambda points: _latest(
        points, "attest.diagnoses", status="FALLBACK", fallback_type="PRE_VERIFICATION"))
    assert fallbacks[-1]["attributes"]["effective_verdict"] == "NONE"
