"""Every failed backend reaches the user, through the six real processes.

The executor's Prometheus or Loki URL points at a loopback port nothing listens on, so every call
of that tool is refused by the kernel — a real connection failure, recorded by the executor as an
ERROR invocation. The verifier runs behind a scripted model server that answers what the embedded
verifier concludes, so the test reads the exact payload the verifier was given.

Asserted: the gatekeeper's audit lists the failed call; the verifier's input carries it; the one
evidence retry runs the call again (a round-1 invocation of the same tool and service); the answer
names the failed query (「日志查询失败：…」/「指标查询失败：…」) and never says 未发现异常 /
未显示异常; the effective verdict is at most LOW_CONFID — never PASS. Single-ReAct releases the
embedded agent's Draft (no fallback): it reports what the other backends show abnormal, or opens
「无法确认：<日志/指标>查询失败…」 — the answer checks are `failed_call_answers.py`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from attest.common.v1 import enums_pb2
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.conftest import start_cluster
from tests.integration.failed_call_answers import (
    SINGLE_REACT,
    check_failure_named,
    check_single_react_answer,
    diagnose,
    reports_anomaly,
)
from tests.integration.graph_spec_lab import VerifierModel, embedded_reply
from tests.scripted_model_server import ScriptedModelServer

pytestmark = pytest.mark.integration

SERVICE = "payment-service"
FAILED_WORDS = {"loki": "日志查询失败", "prometheus": "指标查询失败"}
FAILED_TOOL = {"loki": "query_logs", "prometheus": "query_metrics"}
QUESTIONS = (f"{SERVICE} 正常吗？", f"{SERVICE} 最近一小时 CPU 为什么这么高？", f"{SERVICE} 的错误率上升了吗？",
             "user-service 最近一小时正常吗？")
# Once a real backend is configured, the tools without one are served from the demo estate only
# when chosen: the other evidence tools still answer.
DEMO_TOOLS = {"loki": "query_metrics,query_changes,lookup_knowledge",
              "prometheus": "query_logs,query_changes,lookup_knowledge"}


def _refused_url() -> str:
    """A loopback URL nothing listens on (the port is bound, released, and left closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@dataclass
class FailingCluster:
    backend: str
    running: Any
    verifier: VerifierModel
    runs: RunStore
    invocations: InvocationStore


@pytest.fixture(scope="module", params=["loki", "prometheus"])
def failing(request, tmp_path_factory, otlp_receiver, new_database) -> Iterator[FailingCluster]:
    backend = request.param
    verifier = VerifierModel()
    with ScriptedModelServer([verifier], repeat_last=True) as verifier_server:
        root = tmp_path_factory.mktemp(f"failed-{backend}")
        running = start_cluster(root, otlp_receiver.endpoint, {
            f"ATTEST_{backend.upper()}_URL": _refused_url(),
            "ATTEST_DEMO_TOOLS": DEMO_TOOLS[backend],
            "ATTEST_VERIFIER_MODEL_PROVIDER": "openai",
            "ATTEST_VERIFIER_MODEL_BASE_URL": verifier_server.base_url,
            "ATTEST_VERIFIER_MODEL_MODEL": "scripted-verifier",
            "ATTEST_VERIFIER_MODEL_API_KEY": "test-key",
        }, database_url=new_database(root))
        sessions = make_session_factory(make_engine(running.database_url))
        try:
            yield FailingCluster(backend, running, verifier, RunStore(sessions), InvocationStore(sessions))
        finally:
            running.stop()


def _review_or_verify(payload: dict[str, Any]) -> str:
    """The SemanticGuard review of a single-ReAct Draft says SUPPORTED (the guard under test is
    the deterministic one before it); a multi-agent payload gets the embedded verifier's reply."""
    if "draft" in payload:
        return json.dumps({"verdict": "SUPPORTED", "reason": "scripted SUPPORTED"})
    return embedded_reply(payload)


def _diagnose(cluster: FailingCluster, query: str, metadata, mode: int = 0):
    cluster.verifier.begin([_review_or_verify] * 8)
    response = diagnose(cluster.running.gateway_addr, query, metadata, mode)
    return response, cluster.runs.get_run(response.run_id)


@pytest.mark.parametrize("query", QUESTIONS)
def test_a_refused_backend_is_named_never_denied_and_caps_the_verdict(failing, query, auth_metadata):
    response, run = _diagnose(failing, query, auth_metadata)
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    tool = FAILED_TOOL[failing.backend]
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)

    # The answer: never PASS, never a denial, the failed query named in our words.
    service = query.split()[0]
    check_failure_named(response, tool, service, "unreachable")
    if response.status == "COMPLETED":
        assert verdict in ("LOW_CONFID", "REJECT"), verdict
        assert "【查询失败】" in response.answer

    failed = [i for i in failing.invocations.list_for_run(response.run_id)
              if i.tool_name == tool and i.evidence_status == "ERROR"]
    assert failed and all(i.lifecycle == "ERROR" for i in failed)

    # The gatekeeper's audit records every failed call of its round (class, scope, id).
    recorded = evaluation["gatekeeper_result"].get("failed_calls", [])
    assert {c["invocation_id"] for c in recorded} <= {i.invocation_id for i in failed}
    assert recorded and all(c["tool_name"] == tool and c["error_class"] == "unreachable" for c in recorded)
    assert all(c["service"] == service for c in recorded)

    if response.status != "COMPLETED":
        return
    assert evaluation["effective_verdict"] == verdict, "the audit keeps the verdict the user got"
    if cap := evaluation.get("failed_call_cap"):
        assert cap["verdict"] == "LOW_CONFID" and cap["verdict_before_cap"] == "PASS"
        assert set(cap["invocation_ids"]) <= {i.invocation_id for i in failed}
    # The verifier was given the failure as part of its input.
    payloads = VerifierModel.payloads(failing.verifier.requests)
    assert payloads, "the verifier ran"
    seen = payloads[0]["gatekeeper_audit"].get("failed_calls", [])
    assert seen and seen[0]["tool_name"] == tool and seen[0]["error_class"] == "unreachable"
    assert "error" not in json.dumps(seen[0]).replace("error_class", ""), "our class, not the stored text"

    # The one evidence retry ran the failed call again, and it failed again.
    assert response.rounds == 2
    assert {i.round for i in failed} == {0, 1}, [(i.invocation_id, i.round) for i in failed]


@pytest.mark.parametrize("query", QUESTIONS)
def test_single_react_answers_over_a_refused_backend_naming_it_and_denying_nothing(failing, query, auth_metadata):
    """Single-ReAct: the embedded agent's Draft says what the other backends show and, where that
    is nothing abnormal, 「无法确认：<日志/指标>查询失败…」 — so it passes the answer guard and is
    released instead of a fallback; the release names the failed call in a line of ours."""
    response, run = _diagnose(failing, query, auth_metadata, mode=SINGLE_REACT)
    tool = FAILED_TOOL[failing.backend]
    service = query.split()[0]
    assert any(i.tool_name == tool and i.lifecycle == "ERROR"
               for i in failing.invocations.list_for_run(response.run_id)), "the backend call failed"
    check_failure_named(response, tool, service, "unreachable")
    assert f"【查询失败】\n- {FAILED_WORDS[failing.backend]}：服务 {service}" in response.answer, response.answer
    first = check_single_react_answer(response, run, query, tool)
    if service == "user-service":  # nothing abnormal in the demo estate: the failed query decides
        assert not reports_anomaly(first), first
        assert "已完成的检查（逐项见分析）：user-service：" in response.answer, response.answer


@pytest.mark.parametrize("failing", ["loki"], indirect=True)  # the reported case is Loki's
def test_the_answer_that_was_pass_with_loki_unreachable_is_capped(failing, auth_metadata):
    """The reported case: with Loki refused, 「payment-service 正常吗？」 was PASS on the metrics
    alone. The checks still confirm every claim (the model verdict stays PASS); the failed log
    query caps the effective verdict at LOW_CONFID, and the audit says why."""
    response, run = _diagnose(failing, f"{SERVICE} 正常吗？", auth_metadata)
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) == "LOW_CONFID"
    cap = evaluation["failed_call_cap"]
    assert (cap["verdict_before_cap"], cap["verdict"], cap["reason"]) == ("PASS", "LOW_CONFID", "failed evidence calls")
    failed = {i.invocation_id for i in failing.invocations.list_for_run(response.run_id) if i.lifecycle == "ERROR"}
    assert set(cap["invocation_ids"]) == failed and len(failed) == 2, "round 0's call and the retry's"
    capped = [e for e in run["events"] if e["node"] == "graph" and e["status"] == "FAILED_CALL_CAP"]
    assert [set(e["payload"]["invocation_ids"]) for e in capped] == [failed]
