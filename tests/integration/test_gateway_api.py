"""The gateway's public API as a chat frontend and a person at the CLI use it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.launcher import REPO_ROOT
from shared.core.contracts import ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.error_details import error_details
from shared.proto_convert import spec_value

pytestmark = pytest.mark.integration


@pytest.fixture()
def stub(gateway_channel):
    return gateway_pb2_grpc.GatewayServiceStub(gateway_channel)


def test_stream_reports_progress_then_the_result(stub, auth_metadata):
    messages = list(stub.DiagnoseStream(
        gateway_pb2.DiagnoseStreamRequest(query="payment-service 的 CPU 为什么这么高？"),
        timeout=60, metadata=auth_metadata,
    ))
    events = [m.event for m in messages if m.HasField("event")]
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["started", "planning"]  # the run's ids come first
    assert {"tool_call", "gatekeeper", "verdict", "answer"} <= set(kinds)
    tool_events = [e for e in events if e.kind == "tool_call" and "tool_name" in e.details]
    assert {e.details["tool_name"] for e in tool_events} >= {"query_metrics", "query_logs"}, "one event per tool call"
    assert messages[-1].HasField("result"), "the last message carries the answer"
    result = messages[-1].result
    assert result.run_id and result.answer
    assert sum(m.HasField("result") for m in messages) == 1


def test_question_without_a_service_gets_a_safe_fallback_and_no_verdict(stub, auth_metadata, run_store):
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="系统最近是不是有点慢？"),
                             timeout=60, metadata=auth_metadata)
    assert response.status == "FALLBACK"
    assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "MISSING_REQUIRED_CONTEXT"
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) is None
    assert "请补充要排查的服务名称" in response.answer
    assert run_store.get_run(response.run_id)["invocations"] == []
    evaluation = run_store.get_run(response.run_id)["self_evaluation"]["verifier_evaluation"]
    assert "effective_verdict" not in evaluation and "model_verdict" not in evaluation
    assert evaluation["failure_reason"]
    assert evaluation["prompt_audit"]["prompts"], "prompt audit is kept on fallback paths"


def test_get_run_returns_the_audit_only_within_its_session(stub, auth_metadata):
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="checkout-api 最近一小时 5xx 多吗？"),
                             timeout=60, metadata=auth_metadata)
    own = stub.GetRun(gateway_pb2.GetRunRequest(run_id=response.run_id, session_id=response.session_id),
                      timeout=10, metadata=auth_metadata)
    assert own.run_id == response.run_id and own.status == response.status
    nodes = {event["node"] for event in own.audit["events"]}
    assert {"planner", "executor", "gatekeeper", "verifier", "composer"} <= nodes
    with pytest.raises(grpc.RpcError) as info:
        stub.GetRun(gateway_pb2.GetRunRequest(run_id=response.run_id, session_id="another-session"),
                    timeout=10, metadata=auth_metadata)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def _cli(cluster, *args: str, token: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ATTEST_GATEWAY_ADDR": cluster.gateway_addr}
    env.pop("ATTEST_AUTH_TOKEN", None)
    if token:
        env["ATTEST_AUTH_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_ask_prints_answer_verdict_run_and_trace_ids(cluster, auth_metadata):
    token = auth_metadata[0][1].removeprefix("Bearer ")
    result = _cli(cluster, "ask", "--verbose", "order-service 最近半小时报错多吗？", token=token)
    assert result.returncode == 0, result.stderr
    assert "可信度：" in result.stdout
    assert "run id: " in result.stdout and "trace id: " in result.stdout
    assert "· #1 网关: 开始诊断：多智能体模式" in result.stdout, "each event's seq and Chinese message"
    assert re.search(r"· #\d+ 取证: 取证完成：query_logs，找到证据 \d+ 条", result.stdout), result.stdout

    as_json = _cli(cluster, "ask", "--json", "order-service 最近半小时报错多吗？", token=token)
    assert as_json.returncode == 0, as_json.stderr
    payload = json.loads(as_json.stdout)
    assert payload["run_id"] and payload["answer"] and payload["trace_id"]


def test_cli_follows_up_in_a_session_and_lists_its_runs(cluster, auth_metadata):
    token = auth_metadata[0][1].removeprefix("Bearer ")
    first = _cli(cluster, "ask", "--json", "payment-service 最近一小时 CPU 高吗？", token=token)
    assert first.returncode == 0, first.stderr
    session_id = json.loads(first.stdout)["session_id"]
    follow_up = _cli(cluster, "ask", "--session", session_id, "那它的内存呢？", token=token)
    assert follow_up.returncode == 0, follow_up.stderr
    # The question names no service: it inherits payment-service from the session's last run.
    assert "沿用上一轮" in follow_up.stdout and "payment-service" in follow_up.stdout, follow_up.stdout
    assert f"session id: {session_id}" in follow_up.stdout
    runs = _cli(cluster, "runs", "--session", session_id, token=token)
    assert runs.returncode == 0, runs.stderr
    assert runs.stdout.index("那它的内") < runs.stdout.index("CPU 高吗"), runs.stdout  # newest first


def test_cli_runs_without_a_session_then_run_show_of_an_id_as_printed(cluster, auth_metadata, stub):
    asked = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="payment-service 最近一小时 CPU 高吗？"),
                          timeout=60, metadata=auth_metadata)
    token = auth_metadata[0][1].removeprefix("Bearer ")
    runs = _cli(cluster, "runs", token=token)
    assert runs.returncode == 0, runs.stderr
    lines = runs.stdout.splitlines()
    assert lines[0] == "你最近的诊断（新的在前）"
    newest = lines[2].split()
    assert newest[0] == asked.run_id, runs.stdout  # the full id, first on its line
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", " ".join(newest[1:3])), runs.stdout
    assert "时间均为 Asia/Shanghai 时间" in runs.stdout and f"会话：{asked.session_id}" in runs.stdout
    assert all(len(line) <= 80 for line in lines), runs.stdout

    shown = _cli(cluster, "run-show", newest[0], token=token)
    assert shown.returncode == 0, shown.stderr
    assert f"run {asked.run_id}" in shown.stdout and "核验的结论" in shown.stdout
    assert "payment-service" in shown.stdout.split("核验的结论", 1)[1], "claims by their text"
    assert not re.search(r"\d+\.0 次取证调用", shown.stdout), shown.stdout
    bounded = _cli(cluster, "run-show", "--json", newest[0], token=token)
    full = _cli(cluster, "run-show", "--json", "--full", newest[0], token=token)
    assert bounded.returncode == full.returncode == 0
    assert json.loads(bounded.stdout)["run_id"] == json.loads(full.stdout)["run_id"] == asked.run_id
    assert len(bounded.stdout) < len(full.stdout) and "--full 显示全部" in bounded.stdout


def test_cli_without_token_fails_with_one_clear_line(cluster):
    result = _cli(cluster, "ask", "order-service 怎么了？", token=None)
    assert result.returncode != 0
    assert "UNAUTHENTICATED" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_run_show_prints_the_audit_readably(cluster, auth_metadata, stub):
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="payment-service 最近一小时 CPU 怎么样？"),
                             timeout=60, metadata=auth_metadata)
    token = auth_metadata[0][1].removeprefix("Bearer ")
    result = _cli(cluster, "run-show", response.run_id, token=token)
    assert result.returncode == 0, result.stderr
    assert response.run_id in result.stdout and "核验的结论" in result.stdout
    assert "证据统计" in result.stdout and "路径: planner" in result.stdout
    missing = _cli(cluster, "run-show", "0" * 32, token=token)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_every_run_has_rule_evaluation_from_its_invocations(stub, auth_metadata, run_store):
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="order-service 最近半小时报错多吗？"),
                             timeout=60, metadata=auth_metadata)
    run = run_store.get_run(response.run_id)
    rules = run["self_evaluation"]["rule_evaluation"]
    evidence_calls = [i for i in run["invocations"] if i["tool_name"] != "get_current_time"]
    assert rules["evidence_calls"] == len(evidence_calls)
    assert rules["hits"] == sum(i["evidence_status"] == "EVIDENCE_FOUND" for i in evidence_calls
                                if not (i["retrieval_details"] or {}).get("deduped"))
    assert rules["hits"] + rules["no_hits"] + rules["failures"] + rules["deduped"] == rules["evidence_calls"]
    assert rules["evidence_refs"] == sum(evidence_view(ToolInvocation.model_validate(i)).count() for i in evidence_calls
                                         if i["evidence_status"] == "EVIDENCE_FOUND"
                                         and not i["retrieval_details"]["deduped"]) > 0
    assert "verifier_evaluation" in run["self_evaluation"]


def test_no_claim_is_both_confirmed_and_in_the_rejection_ledger(cluster, auth_metadata, run_store):
    """The ledger's contents per route are asserted in test_graph_routes; this is the invariant."""
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query="payment-service 的 CPU 告警是真的吗？"), timeout=60,
            metadata=auth_metadata)
    evaluation = run_store.get_run(response.run_id)["self_evaluation"]["verifier_evaluation"]
    assert isinstance(evaluation["rejection_ledger"], list)
    cut = {entry["claim_id"] for entry in evaluation["rejection_ledger"]}
    confirmed = {check["claim_id"] for check in evaluation["claim_checks"]
                 if check["verification"] in ("direct_observation", "reasonable_inference")}
    assert not (cut & confirmed), "a claim cannot be both confirmed and cut"


def test_oversized_query_is_invalid_argument(stub, auth_metadata):
    with pytest.raises(grpc.RpcError) as info:
        stub.Diagnose(gateway_pb2.DiagnoseRequest(query="payment-service " + "慢" * 5000),
                      timeout=10, metadata=auth_metadata)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "limit" in info.value.details()
    found = error_details(info.value)
    assert (found["reason"], found["domain"]) == ("QUERY_TOO_LONG", "attest.dev")
    assert found["field_violations"] == [{"field": "query", "description": info.value.details()}]
    assert found["metadata"]["limit"] == "4000" and "retry_after_seconds" not in found


@pytest.mark.parametrize("mode", [99, -1])
def test_unknown_mode_is_invalid_argument_naming_the_allowed_values(stub, auth_metadata, mode):
    for call, request in [(stub.Diagnose, gateway_pb2.DiagnoseRequest(query="payment-service 怎么了？", mode=mode)),
                          (stub.DiagnoseStream, gateway_pb2.DiagnoseStreamRequest(query="payment-service 怎么了？",
                                                                                 mode=mode))]:
        with pytest.raises(grpc.RpcError) as info:
            result = call(request, timeout=10, metadata=auth_metadata)
            if call is stub.DiagnoseStream:
                list(result)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details().startswith(f"mode {mode} is not a DiagnosisMode; allowed values: ")
        assert "DIAGNOSIS_MODE_MULTI_AGENT (1)" in info.value.details()
        assert error_details(info.value)["reason"] == "UNKNOWN_ENUM_VALUE"
        assert error_details(info.value)["field_violations"][0]["field"] == "mode"
    with pytest.raises(grpc.RpcError) as view:
        stub.GetRun(gateway_pb2.GetRunRequest(run_id="0" * 32, view=mode), timeout=10, metadata=auth_metadata)
    assert view.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "RunView" in view.value.details()


@pytest.mark.parametrize("field, char", [("query", "\u202e"), ("query", "\u200b"), ("session_id", "\u2066"),
                                         ("client_label", "\u202e")])
def test_bidi_and_invisible_characters_are_refused_with_which_and_where(stub, auth_metadata, field, char):
    values = {"query": "payment-service 怎么了？", "session_id": "" if field != "session_id" else "abcdef", "client_label": "web"}
    values[field] = values[field][:3] + char + values[field][3:]
    with pytest.raises(grpc.RpcError) as info:
        stub.Diagnose(gateway_pb2.DiagnoseRequest(**values), timeout=10, metadata=auth_metadata)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details()
    assert details.startswith(f"{field} contains the invisible format character U+{ord(char):04X} (")
    assert "at position 4" in details
    found = error_details(info.value)
    assert found["reason"] == "HIDDEN_CHARACTER" and found["field_violations"][0]["field"] == field
    assert found["metadata"] == {"field": field, "character": f"U+{ord(char):04X}", "position": "4"}
