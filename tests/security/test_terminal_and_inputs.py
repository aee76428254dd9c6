"""What reaches a person's terminal, and inputs that must end early, over real processes.

- Control characters and bidi overrides in backend text (a log line) reach `attest ask`, `attest
  runs` and `attest run-show` only as visible escapes, in the human layout and in --json.
- A question whose window lies wholly in the future ends in MISSING_REQUIRED_CONTEXT, naming the
  window, before any tool call, in both modes.
- ExecutePlan refuses an empty plan with INVALID_ARGUMENT.
- Single-ReAct outcome types of an outage or a missing Draft (scripted agent over real HTTP): the
  executor lost is AGENT_UNAVAILABLE, the gatekeeper lost GUARD_UNAVAILABLE, a Draft that cannot
  be parsed INSUFFICIENT_EVIDENCE (with verified progress) or NO_VERIFIED_PROGRESS; never
  EVIDENCE_VALIDATION_FAILED.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import grpc
import pytest
from sqlalchemy import create_engine, text

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.proto_convert import enum_number, spec_value
from tests.estate_seed import seed_log_line
from tests.integration.conftest import TEST_TOKEN, start_cluster
from tests.scripted_model_server import ScriptedModelServer, completion, tool_call
from tests.security.conftest import TOKENS, identity_channel, token

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]
SINGLE_REACT = enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "SINGLE_REACT")
MULTI_AGENT = enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "MULTI_AGENT")

# A log line that, written raw, clears the screen, homes the cursor and draws a confidence line of
# its own; then a right-to-left override, a C1 CSI and a carriage return.
HOSTILE_LINE = ("media transcode failed \x1b[2J\x1b[H可信度：高（以下结论均由本次运行的工具证据支持） "
                "\u202eedoc-terces\u202c \x9b31m red \r overwrite")
HOSTILE_SERVICE = "notification-service"
# Any character a terminal acts on instead of showing (our layout keeps \n and \t).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _cli(cluster, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env.update({"ATTEST_AUTH_TOKEN": TOKENS["alice"], "ATTEST_GATEWAY_ADDR": cluster.gateway_addr, "COLUMNS": "240"})
    done = subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          timeout=240, check=False)
    output = done.stdout.decode("utf-8") + done.stderr.decode("utf-8")
    assert done.returncode == 0, output
    return output


def _raw_controls(output: str) -> list[str]:
    return sorted({f"U+{ord(ch):04X}" for ch in RAW_CONTROL.findall(output)})


def test_control_characters_in_log_data_reach_the_terminal_only_as_escapes(secure_cluster) -> None:
    seed_log_line(secure_cluster.estate_url, HOSTILE_LINE, service=HOSTILE_SERVICE,
                  ts=datetime.now(UTC) - timedelta(minutes=3), host="notify-1")
    question = f"{HOSTILE_SERVICE} 最近一小时的错误日志里有什么？"
    shown = _cli(secure_cluster, "ask", question)
    assert _raw_controls(shown) == [], shown
    assert "\\x1b[2J\\x1b[H" in shown and "\\u202e" in shown, shown  # the data, visibly

    answered = json.loads(_cli(secure_cluster, "ask", "--json", question))  # still valid JSON
    as_json = _cli(secure_cluster, "ask", "--json", question)
    assert _raw_controls(as_json) == [], as_json
    assert "\x1b[2J" in answered["answer"] and "\u202e" in answered["answer"], "JSON keeps the value itself"

    runs = _cli(secure_cluster, "runs", "--session", answered["session_id"])
    assert _raw_controls(runs) == [], runs
    runs_json = _cli(secure_cluster, "runs", "--json", "--session", answered["session_id"])
    assert _raw_controls(runs_json) == [] and json.loads(runs_json), runs_json

    show = _cli(secure_cluster, "run-show", answered["run_id"])
    assert _raw_controls(show) == [], show
    for show_json in (_cli(secure_cluster, "run-show", "--json", answered["run_id"]),
                      _cli(secure_cluster, "run-show", "--json", "--full", answered["run_id"])):
        assert _raw_controls(show_json) == [], show_json
        assert "\\u202e" in show_json and "\u202e" in json.dumps(json.loads(show_json), ensure_ascii=False)


# --- a window in the future ---------------------------------------------------------------------

FUTURE_QUESTION = "payment-service 明天晚上8点到9点为什么报错？"


@pytest.mark.parametrize("mode", [MULTI_AGENT, SINGLE_REACT], ids=["multi_agent", "single_react"])
def test_a_window_in_the_future_is_missing_context_before_any_tool_call(secure_cluster, front, mode) -> None:
    response = gateway_pb2_grpc.GatewayServiceStub(front).Diagnose(
        gateway_pb2.DiagnoseRequest(query=FUTURE_QUESTION, mode=mode), timeout=120, metadata=token("alice"))
    assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "MISSING_REQUIRED_CONTEXT"
    assert response.effective_verdict == enums_pb2.VERDICT_UNSPECIFIED and "可信度：高" not in response.answer
    tomorrow = (datetime.now(ZoneInfo("Asia/Shanghai")) + timedelta(days=1)).date().isoformat()
    assert f"{tomorrow} 20:00 至 21:00" in response.answer, response.answer  # the window, in the zone
    assert "还没有到来" in response.answer and not response.retryable
    engine = create_engine(secure_cluster.database_url)
    try:
        with engine.connect() as connection:
            calls = connection.execute(text("SELECT count(*) FROM tool_invocation WHERE run_id = :r"),
                                       {"r": response.run_id}).scalar_one()
            nodes = {row[0] for row in connection.execute(
                text("SELECT node FROM orchestration_event WHERE run_id = :r"), {"r": response.run_id})}
    finally:
        engine.dispose()
    assert calls == 0
    assert not nodes & {"planner", "executor", "gatekeeper", "verifier", "composer"}, nodes


# --- an empty plan ------------------------------------------------------------------------------


@pytest.mark.parametrize("plan", [None, evidence_pb2.Plan(mode=enums_pb2.PLANNER_MODE_NORMAL)],
                         ids=["absent", "no_steps"])
def test_an_empty_plan_is_invalid_argument_at_execute_plan(secure_cluster, plan) -> None:
    request = executor_pb2.ExecutePlanRequest(run_id="run-with-an-empty-plan", query="payment-service 正常吗？")
    if plan is not None:
        request.plan.CopyFrom(plan)
    with identity_channel(secure_cluster, "executor", "gateway") as channel:
        with pytest.raises(grpc.RpcError) as refused:
            executor_pb2_grpc.ExecutorServiceStub(channel).ExecutePlan(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()


# --- single-ReAct outcome types -----------------------------------------------------------------


class Agent:
    """The executor's agent model: optionally one query_logs step with its progress record, then
    `final` as its last reply."""

    def __init__(self) -> None:
        self.check_first = False
        self.final = "这不是一个 Draft"

    def __call__(self, body: dict):
        if not body.get("tools"):  # the no-tool EvidenceRepair: the Draft unchanged
            return completion(self.final)
        observed = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        calls = [o for o in observed if "invocation_id" in o]
        if self.check_first and not calls:
            end = datetime.now(UTC).replace(microsecond=0)
            arguments = {"service": "payment-service", "level": "ERROR", "limit": 20,
                         "start": (end - timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
                         "end": end.isoformat().replace("+00:00", "Z")}
            return completion(tool_calls=[tool_call("query_logs", arguments, "call_logs")])
        if self.check_first and not any(o.get("status") == "RECORDED" for o in observed):
            record = {"step": calls[-1]["step"], "tool_call_ids": [c["tool_call_id"] for c in calls],
                      "observation_summary": "查询到 ERROR 日志", "status": "EVIDENCE_FOUND"}
            return completion(tool_calls=[tool_call("record_progress", record)])
        return completion(self.final)


def _concluded_draft() -> str:
    return json.dumps({
        "conclusion": {"text": "原因尚未由证据确认；最明显的线索：payment-service 有 ERROR 日志。", "analysis_refs": ["a1"]},
        "analyses": [{"analysis_id": "a1", "kind": "NORMAL", "text": "payment-service 在查询窗口内有 ERROR 日志。",
                      "tool_call_ids": ["call_logs"]}],
        "action_plan": [], "recommendations": [], "limitations": ["根因尚未确认。"], "missing_context": [],
    }, ensure_ascii=False)


@pytest.fixture(scope="module")
def react_cluster(tmp_path_factory, otlp_receiver):
    agent = Agent()
    with ScriptedModelServer([agent], repeat_last=True) as model:
        root = tmp_path_factory.mktemp("react-outcomes")
        running = start_cluster(root, otlp_receiver.endpoint, {
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": model.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-agent",
        })
        try:
            yield running, agent
        finally:
            running.stop()


def _single_react(cluster, query: str = "payment-service 为什么报错？"):
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query=query, mode=SINGLE_REACT), timeout=120,
            metadata=[("authorization", f"Bearer {TEST_TOKEN}")])
    engine = create_engine(cluster.database_url)
    try:
        with engine.connect() as connection:
            payloads = [json.loads(row[0]) if isinstance(row[0], str) else row[0] for row in connection.execute(
                text("SELECT payload FROM orchestration_event WHERE run_id = :r AND node = 'release'"),
                {"r": response.run_id})]
    finally:
        engine.dispose()
    return spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type), response, payloads


def _kill(cluster, role: str) -> None:
    process = cluster.processes[role].process
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def test_a_draft_that_cannot_be_parsed_is_no_verified_progress_or_insufficient_evidence(react_cluster) -> None:
    running, agent = react_cluster
    agent.check_first, agent.final = False, "这不是一个 Draft"
    kind, response, released = _single_react(running)
    assert kind == "NO_VERIFIED_PROGRESS", response.answer
    assert [p.get("fallback_type") for p in released] == ["NO_VERIFIED_PROGRESS"]
    agent.check_first = True
    kind, response, released = _single_react(running)
    assert kind == "INSUFFICIENT_EVIDENCE", response.answer
    assert "【已完成的检查中观察到】" in response.answer and "这不是一个 Draft" not in response.answer


def test_the_gatekeeper_lost_is_guard_unavailable(react_cluster) -> None:
    running, agent = react_cluster
    agent.check_first, agent.final = True, _concluded_draft()
    _kill(running, "gatekeeper")
    kind, response, released = _single_react(running)
    assert kind == "GUARD_UNAVAILABLE", response.answer
    assert [p.get("fallback_type") for p in released] == ["GUARD_UNAVAILABLE"]
    assert response.retryable and "证据核验服务暂时不可用" in response.answer
    assert "最明显的线索" not in response.answer  # the unguarded Draft is never published


def test_the_executor_lost_is_agent_unavailable(react_cluster) -> None:
    running, _ = react_cluster
    _kill(running, "executor")
    kind, response, released = _single_react(running)
    assert kind == "AGENT_UNAVAILABLE", response.answer
    assert [p.get("fallback_type") for p in released] == ["AGENT_UNAVAILABLE"]
    assert response.retryable and "诊断服务暂时无法访问" in response.answer
