"""No silent demo data, through the six real processes.

The executor's Prometheus URL points at a loopback fake of the Prometheus HTTP API
(`tests/monitoring_api_server.py`: bearer token and tenant header required, one service `pay-svc`
under the `job` label with a CPU series). No Loki, no changes database, the shipped knowledge
directory: so logs, changes and knowledge have no backend of their own and are disabled.

Asserted, in both modes: no call of a disabled tool is ever made (none is stored); the answer
cites nothing from the demo estate or the demo knowledge, names every unconfigured source in its
scope and the Prometheus source of its facts; the verdict is not capped for them (no failed call,
no cap in the audit); health has no entry for a disabled tool and SERVING for Prometheus' tool.
With `ATTEST_DEMO_TOOLS=query_logs` the demo logs come back, labelled as the demo estate.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.proto_convert import enum_number, spec_value
from tests.integration.conftest import start_cluster
from tests.monitoring_api_server import TOKEN, Guarded, prometheus_env

pytestmark = pytest.mark.integration

SERVICE = "pay-svc"
# The fake serves its series at 2026-11-30 11:50-11:52 UTC, whatever window is asked.
QUESTIONS = (f"{SERVICE} 2026-11-30 11:50 到 12:00 CPU 为什么这么高？", f"{SERVICE} 2026-11-30 11:50 到 12:00 正常吗？")
MODES = ("MULTI_AGENT", "SINGLE_REACT")
UNCONFIGURED = ("未配置日志源（query_logs 未启用）", "未配置变更记录源（query_changes 未启用）",
                "未配置知识库（lookup_knowledge 未启用）")
DEMO_WORDS = ("estate", "演示", "demo")


@dataclass
class PromCluster:
    running: Any
    runs: RunStore
    invocations: InvocationStore


def _prometheus_only(tmp_path_factory, otlp_receiver, new_database, name: str,
                     **extra: str) -> Iterator[PromCluster]:
    fake = Guarded()
    root = tmp_path_factory.mktemp(name)
    running = start_cluster(root, otlp_receiver.endpoint, {**prometheus_env(fake), **extra},
                            database_url=new_database(root))
    sessions = make_session_factory(make_engine(running.database_url))
    try:
        yield PromCluster(running, RunStore(sessions), InvocationStore(sessions))
    finally:
        running.stop()
        fake.close()


@pytest.fixture(scope="module")
def prometheus_only(tmp_path_factory, otlp_receiver, new_database) -> Iterator[PromCluster]:
    yield from _prometheus_only(tmp_path_factory, otlp_receiver, new_database, "prometheus-only")


@pytest.fixture(scope="module")
def demo_logs_chosen(tmp_path_factory, otlp_receiver, new_database) -> Iterator[PromCluster]:
    yield from _prometheus_only(tmp_path_factory, otlp_receiver, new_database, "demo-logs",
                                ATTEST_DEMO_TOOLS="query_logs")


def _diagnose(cluster: PromCluster, query: str, metadata, mode: str):
    request = gateway_pb2.DiagnoseRequest(query=query, mode=enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, mode))
    with grpc.insecure_channel(cluster.running.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(request, timeout=120, metadata=metadata)
    return response, cluster.invocations.list_for_run(response.run_id), cluster.runs.get_run(response.run_id)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", QUESTIONS)
def test_with_only_prometheus_no_demo_source_is_used_and_each_is_named(prometheus_only, query, mode, auth_metadata):
    response, invocations, run = _diagnose(prometheus_only, query, auth_metadata, mode)
    answer = response.answer

    # Never called: no stored invocation of a disabled tool; the metrics were read from Prometheus.
    tools = {i.tool_name for i in invocations}
    assert tools & {"query_logs", "query_changes", "lookup_knowledge"} == set(), (tools, answer)
    assert "query_metrics" in tools, answer
    metrics = [i for i in invocations if i.tool_name == "query_metrics" and i.lifecycle == "READY"]
    assert metrics and all(ref.source.startswith("prometheus:") for i in metrics
                           for ref in evidence_view(i).refs()), answer

    # The answer: every unconfigured source named in its scope, nothing from the demo material,
    # the Prometheus source named, no credential and no URL.
    for line in UNCONFIGURED:
        assert line in answer, answer
    assert "【检查范围】" in answer
    assert not any(word in answer for word in DEMO_WORDS), answer
    assert "来源 Prometheus" in answer or "来源：Prometheus" in answer, answer
    assert TOKEN not in answer and "127.0.0.1" not in answer and "http" not in answer, answer

    # Not a failure: nothing failed, nothing capped, the answer has no 【查询失败】.
    assert "【查询失败】" not in answer and "查询失败" not in answer, answer
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert not evaluation.get("failed_call_cap"), evaluation.get("failed_call_cap")
    assert not evaluation.get("gatekeeper_result", {}).get("failed_calls"), answer
    if response.status == "COMPLETED" and mode == "MULTI_AGENT":
        # A verdict over the metrics alone: the disabled tools lowered nothing.
        assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) != "REJECT", answer

    # Three points of 42 % are too few for a trend, but their level is the answer an SRE wants:
    # stated, cited, and read as no rise; the question gets a direct answer, not a fallback.
    assert response.status == "COMPLETED", answer
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) == "PASS", answer
    assert "共 3 个数据点，最高为 42.0%" in answer and "无法判断趋势" in answer, answer
    assert "在所查范围内未发现异常" in answer, answer


def test_a_disabled_tool_has_no_health_entry_and_is_not_reported_broken(prometheus_only):
    with prometheus_only.running.channel("executor") as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        def status(service: str) -> Any:
            return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status

        assert status("attest.executor.tools.query_metrics") == health_pb2.HealthCheckResponse.SERVING
        assert status("") == health_pb2.HealthCheckResponse.SERVING
        for tool in ("query_logs", "query_changes", "lookup_knowledge"):
            with pytest.raises(grpc.RpcError) as caught:
                status(f"attest.executor.tools.{tool}")
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND, tool


@pytest.mark.parametrize("mode", MODES)
def test_choosing_the_demo_logs_brings_them_back_labelled_as_demo(demo_logs_chosen, mode, auth_metadata):
    response, invocations, _ = _diagnose(demo_logs_chosen, QUESTIONS[0], auth_metadata, mode)
    answer = response.answer
    logs = [i for i in invocations if i.tool_name == "query_logs"]
    assert logs, answer
    assert all(ref.source.startswith("estate-sql:") for i in logs for ref in evidence_view(i).refs())
    assert "来源 演示数据 estate" in answer and "不是真实环境的数据" in answer, answer
    assert "未配置日志源" not in answer, answer
    # The others are still disabled.
    assert {i.tool_name for i in invocations} & {"query_changes", "lookup_knowledge"} == set()
    assert UNCONFIGURED[1] in answer and UNCONFIGURED[2] in answer, answer
