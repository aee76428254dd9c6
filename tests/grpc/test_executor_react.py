"""RunAgent and RepairDraft behind the executor's real gRPC server: the embedded agent over the
loaded demo estate, and the model-backed agent and repair driven by a scripted model over real
HTTP through the real `openai` client. Every call lands in a real SQLite audit database and the
Drafts are checked by the real EvidenceGuard."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import grpc
import pytest

from attest.common.v1 import question_pb2, single_react_pb2
from attest.executor.v1 import executor_pb2
from services.executor.progress_protocol import INVALID_PROGRESS_PROTOCOL
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.servicer import ExecutorServicer, build_draft_repair, build_engine, build_react_agent
from services.gatekeeper.evidence_guard import guard_draft
from shared.config import ExecutorSettings, ModelSettings
from shared.core.agent_stop_reasons import PROGRESS_PROTOCOL_VIOLATED, STEP_BUDGET_EXHAUSTED
from shared.draft_contract import Draft, GuardViolation
from shared.draft_semantics import repair_changes_semantics
from shared.model_client import OpenAIChatClient
from shared.proto_convert import message_to_model, plain_to_message
from tests.scripted_model_server import Delay, Status, completion, tool_call

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)  # the demo estate's "now" (conftest.DEMO_ANCHOR)
START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
INCIDENT_QUERY = "为什么 payment-service 的 CPU 这么高？"
CALL_TIMEOUT = 30


@pytest.fixture()
def executor(demo_registry, stores, scripted_settings, serve_role):
    """`executor(provider, **model_settings)` → (stub, new_run): an executor on an ephemeral port
    whose single-ReAct agent and repair are embedded, or talk to the scripted model."""
    runs, invocations = stores

    def start(provider: str = "embedded", **overrides):
        if provider == "openai":
            settings = scripted_settings(**overrides)
            client = OpenAIChatClient(settings)
            react_agent = build_react_agent(settings, demo_registry, client)
            repair = build_draft_repair(settings, client)
        else:
            settings = ModelSettings()
            react_agent, repair = EmbeddedReactAgent(clock=lambda: ANCHOR), build_draft_repair(settings)
        servicer = ExecutorServicer(invocations, demo_registry, build_engine(ModelSettings(), demo_registry),
                                    react_agent=react_agent, draft_repair=repair)
        stub = serve_role("executor", servicer, ExecutorSettings(port=0))

        def new_run(query: str = INCIDENT_QUERY) -> str:
            return runs.create_run(runs.create_session("test"), query, "SINGLE_REACT")

        return stub, new_run

    return start


def _run_agent(stub, run_id: str, query: str = INCIDENT_QUERY, max_steps: int = 0) -> executor_pb2.RunAgentResponse:
    return stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=query, max_steps=max_steps), timeout=CALL_TIMEOUT)


def _draft(response) -> Draft:
    assert response.HasField("draft")
    return message_to_model(response.draft, Draft)


# --- the embedded agent ---------------------------------------------------------------------------


def test_embedded_run_agent_returns_a_draft_that_passes_evidence_guard(executor, stores):
    stub, new_run = executor()
    run_id = new_run()
    response = _run_agent(stub, run_id)

    assert response.stop_reason == "" and response.draft_parse_detail == ""
    draft = _draft(response)
    assert draft.conclusion is not None
    persisted = stores[1].list_for_run(run_id)
    assert list(response.tool_call_ids) == [inv.tool_call_id for inv in persisted]
    assert guard_draft(run_id, draft, persisted).passed
    assert response.progress.completed_checks == len(persisted)
    assert response.progress.observed_facts and all("payment-service" in f or "知识库" in f for f in response.progress.observed_facts)
    assert (response.prompt.role, response.prompt.name, response.prompt.version) == ("executor", "react_agent.embedded", "1")
    assert (response.model_call.provider, response.model_call.attempts) == ("embedded", 1)


def test_embedded_run_agent_without_a_service_makes_no_call(executor, stores):
    stub, new_run = executor()
    run_id = new_run("为什么 CPU 这么高？")
    response = _run_agent(stub, run_id, "为什么 CPU 这么高？")

    assert not response.draft.HasField("conclusion")
    assert list(response.draft.missing_context) and not response.draft.analyses
    assert list(response.tool_call_ids) == [] and stores[1].list_for_run(run_id) == []
    assert response.progress.completed_checks == 0 and response.stop_reason == ""


def test_embedded_run_agent_step_bound_is_a_controlled_stop(executor, stores):
    stub, new_run = executor()
    run_id = new_run()
    response = _run_agent(stub, run_id, max_steps=1)
    assert response.stop_reason == STEP_BUDGET_EXHAUSTED
    assert not response.HasField("draft")
    assert len(stores[1].list_for_run(run_id)) == 1 and len(response.progress.observed_facts) == 1


@pytest.mark.parametrize(
    "request_fields",
    [{"query": INCIDENT_QUERY}, {"run_id": "r", "query": "  "}, {"run_id": "r", "query": INCIDENT_QUERY, "max_steps": 51},
     {"run_id": "r", "query": INCIDENT_QUERY, "max_steps": -1},
     {"run_id": "r", "query": INCIDENT_QUERY, "intent": question_pb2.QuestionIntent(kind="maybe")}],
    ids=["no-run-id", "blank-query", "too-many-steps", "negative-steps", "unknown-question-kind"],
)
def test_run_agent_refuses_invalid_requests(executor, request_fields):
    stub, _ = executor()
    with pytest.raises(grpc.RpcError) as caught:
        stub.RunAgent(executor_pb2.RunAgentRequest(**request_fields), timeout=CALL_TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_embedded_repair_draft_fixes_references_and_runs_no_tool(executor, stores):
    stub, new_run = executor()
    run_id = new_run()
    original = _draft(_run_agent(stub, run_id))
    persisted = stores[1].list_for_run(run_id)

    broken = original.model_copy(deep=True)
    first = broken.analyses[0]  # (a cause analysis cites several calls: mangle the first only)
    first.tool_call_ids = [first.tool_call_ids[0].upper(), *first.tool_call_ids[1:]]
    broken.conclusion.analysis_refs = [ref.upper() for ref in broken.conclusion.analysis_refs]
    guard = guard_draft(run_id, broken, persisted)
    assert not guard.passed

    response = stub.RepairDraft(executor_pb2.RepairDraftRequest(
        run_id=run_id, draft=plain_to_message(broken, single_react_pb2.Draft),
        violations=[plain_to_message(v, single_react_pb2.GuardViolation) for v in guard.violations],
    ), timeout=CALL_TIMEOUT)

    repaired = _draft(response)
    assert repaired == original
    assert repair_changes_semantics(broken, repaired) is None
    assert guard_draft(run_id, repaired, persisted).passed
    assert stores[1].list_for_run(run_id) == persisted  # no tool ran
    assert (response.prompt.name, response.model_call.provider) == ("draft_repair.embedded", "embedded")

    unchanged = stub.RepairDraft(executor_pb2.RepairDraftRequest(
        run_id=run_id, draft=plain_to_message(broken, single_react_pb2.Draft)), timeout=CALL_TIMEOUT)
    assert _draft(unchanged) == broken  # without violations nothing is touched


# --- the model-backed agent -----------------------------------------------------------------------


def _logs_call(call_id: str, level: str = "ERROR") -> dict:
    return tool_call("query_logs", {"service": "payment-service", "start": START, "end": END, "level": level, "limit": 20}, call_id)


def _tool_contents(body: dict) -> list[dict]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def _record_last_step(body: dict, **overrides) -> dict:
    """A record_progress call for the latest observed step, built from what the model was shown."""
    observed = [c for c in _tool_contents(body) if "invocation_id" in c]
    step = max(c["step"] for c in observed)
    calls = [c for c in observed if c["step"] == step]
    status = "EVIDENCE_FOUND" if any(c.get("evidence_status") == "EVIDENCE_FOUND" for c in calls) else "NO_EVIDENCE"
    record = {"step": step, "tool_call_ids": [c["tool_call_id"] for c in calls],
              "observation_summary": "查询到相关日志", "status": status, **overrides}
    return tool_call("record_progress", {k: v for k, v in record.items() if v is not None})


def _draft_citing(tool_call_id: str) -> str:
    return json.dumps({
        "conclusion": {"text": "payment-service 在查询窗口内有 ERROR 日志。", "analysis_refs": ["a1"]},
        "analyses": [{"analysis_id": "a1", "kind": "NORMAL", "text": "payment-service 在查询窗口内有 ERROR 日志。",
                      "tool_call_ids": [tool_call_id]}],
        "action_plan": [{"text": "检查报错接口的调用链。", "analysis_refs": ["a1"], "requires_human_confirmation": False}],
        "recommendations": [], "limitations": ["根因尚未确认。"], "missing_context": [],
    }, ensure_ascii=False)


def test_model_agent_following_the_protocol_gives_a_draft_that_passes_evidence_guard(executor, model_server, stores):
    model_server.add(
        completion(None, tool_calls=[_logs_call("call_logs")]),
        lambda body: completion(None, tool_calls=[_record_last_step(body)]),
        completion(_draft_citing("call_logs")),
    )
    stub, new_run = executor("openai")
    run_id = new_run()
    response = _run_agent(stub, run_id)

    assert response.stop_reason == "" and response.draft_parse_detail == ""
    [invocation] = stores[1].list_for_run(run_id)
    assert invocation.tool_call_id == "call_logs" and invocation.lifecycle == "READY"
    assert guard_draft(run_id, _draft(response), [invocation]).passed
    assert list(response.tool_call_ids) == ["call_logs"]
    assert response.progress.completed_checks == 1 and len(response.progress.observed_facts) == 1
    assert "ERROR 日志" in response.progress.observed_facts[0]
    assert (response.prompt.name, response.prompt.version) == ("react_agent", "4")
    assert (response.model_call.provider, response.model_call.attempts) == ("openai", 3)

    first, second, third = model_server.requests
    assert "record_progress" in {t["function"]["name"] for t in first["tools"]}
    assert "payment-service" in first["messages"][1]["content"]
    [observation] = _tool_contents(second)
    assert observation["tool_call_id"] == "call_logs" and observation["step"] == 1
    assert observation["invocation_id"] == invocation.invocation_id
    assert _tool_contents(third)[-1] == {"status": "RECORDED", "step": 1}


def test_invalid_progress_records_come_back_as_repairable_observations_then_saturate(executor, model_server, stores):
    model_server.add(
        completion(None, tool_calls=[_logs_call("call_a")]),
        # Step 1 recorded correctly, step 2 started.
        lambda body: completion(None, tool_calls=[_record_last_step(body), _logs_call("call_b", "WARN")]),
        # Violation 1: a record citing a call that was never made.
        lambda body: completion(None, tool_calls=[_record_last_step(body, tool_call_ids=["call_b", "call_invented"])]),
        # Violation 2: a record without its summary and status; the new tool call is not run.
        lambda body: completion(None, tool_calls=[
            _record_last_step(body, observation_summary=None, status=None), _logs_call("call_c", "INFO"),
        ]),
        # Violation 3: the final answer while step 2 is unrecorded.
        completion(_draft_citing("call_a")),
    )
    stub, new_run = executor("openai")
    run_id = new_run()
    response = _run_agent(stub, run_id)

    assert response.stop_reason == PROGRESS_PROTOCOL_VIOLATED
    assert not response.HasField("draft")
    assert len(model_server.requests) == 5
    persisted = stores[1].list_for_run(run_id)
    assert [inv.tool_call_id for inv in persisted] == ["call_a", "call_b"]  # call_c was never run
    assert list(response.tool_call_ids) == ["call_a", "call_b"]
    # Only the recorded, verified step 1 reaches the snapshot.
    assert response.progress.completed_checks == 1 and len(response.progress.observed_facts) == 1

    first_invalid = _tool_contents(model_server.requests[3])[-1]
    assert first_invalid["error"] == INVALID_PROGRESS_PROTOCOL
    assert any("call_invented" in p for p in first_invalid["problems"])
    assert first_invalid["expected"]["step"] == 2 and first_invalid["expected"]["tool_call_ids"] == ["call_b"]
    assert first_invalid["violations"] == 1
    second_invalid = _tool_contents(model_server.requests[4])[-2:]
    assert all(c["error"] == INVALID_PROGRESS_PROTOCOL and c["violations"] == 2 for c in second_invalid)
    assert any("missing field(s): observation_summary, status" in p for p in second_invalid[0]["problems"])
    assert "not run" in second_invalid[1]["problems"][0]


def test_a_repaired_progress_record_lets_the_run_finish(executor, model_server, stores):
    model_server.add(
        completion(None, tool_calls=[_logs_call("call_a")]),
        lambda body: completion(None, tool_calls=[_record_last_step(body, step=7)]),
        lambda body: completion(None, tool_calls=[_record_last_step(body)]),
        completion(_draft_citing("call_a")),
    )
    stub, new_run = executor("openai")
    run_id = new_run()
    response = _run_agent(stub, run_id)

    assert response.stop_reason == "" and response.HasField("draft")
    invalid = _tool_contents(model_server.requests[2])[-1]
    assert invalid["error"] == INVALID_PROGRESS_PROTOCOL and "record step 1" in invalid["problems"][0]
    assert guard_draft(run_id, _draft(response), stores[1].list_for_run(run_id)).passed


def test_a_final_answer_that_is_not_json_leaves_the_draft_absent_with_the_progress(executor, model_server):
    model_server.add(
        completion(None, tool_calls=[_logs_call("call_a")]),
        lambda body: completion(None, tool_calls=[_record_last_step(body)]),
        completion("payment-service 的错误是数据库连接池耗尽导致的，建议重启。"),
    )
    stub, new_run = executor("openai")
    response = _run_agent(stub, new_run())

    assert not response.HasField("draft")
    assert response.stop_reason == ""
    assert "not one JSON object" in response.draft_parse_detail
    assert response.progress.completed_checks == 1 and response.progress.observed_facts
    assert all("连接池" not in fact for fact in response.progress.observed_facts)  # nothing of the invalid Draft


def test_model_agent_step_bound_is_a_controlled_stop(executor, model_server, stores):
    counter = iter(range(1, 100))

    def keep_going(body: dict) -> dict:
        calls = [_logs_call(f"call_{next(counter)}")]
        if any("invocation_id" in c for c in _tool_contents(body)):
            calls.insert(0, _record_last_step(body))
        return completion(None, tool_calls=calls)

    model_server.add(keep_going)
    model_server.repeat_last = True
    stub, new_run = executor("openai")
    run_id = new_run()
    response = _run_agent(stub, run_id, max_steps=3)

    assert response.stop_reason == STEP_BUDGET_EXHAUSTED and not response.HasField("draft")
    assert len(model_server.requests) == 3
    assert len(stores[1].list_for_run(run_id)) == 3
    assert response.progress.completed_checks == 2  # the third step was never recorded


def test_reused_or_blank_model_ids_are_made_unique_in_the_run(executor, model_server, stores):
    model_server.add(
        completion(None, tool_calls=[_logs_call("dup")]),
        lambda body: completion(None, tool_calls=[_record_last_step(body), _logs_call("dup", "WARN"), _logs_call("", "INFO")]),
        lambda body: completion(None, tool_calls=[_record_last_step(body)]),
        completion(json.dumps({"conclusion": None, "analyses": []})),
    )
    stub, new_run = executor("openai")
    run_id = new_run()
    response = _run_agent(stub, run_id)

    ids = [inv.tool_call_id for inv in stores[1].list_for_run(run_id)]
    assert len(ids) == 3 and len(set(ids)) == 3 and ids[0] == "dup" and all(ids)
    assert list(response.tool_call_ids) == ids
    assert response.HasField("draft") and response.progress.completed_checks == 3


def test_model_unavailable_is_a_controlled_stop(executor, model_server):
    model_server.add(Status(400, {"error": {"message": "bad request", "type": "invalid_request_error"}}))
    stub, new_run = executor("openai")
    response = _run_agent(stub, new_run())
    assert response.stop_reason == "MODEL_UNAVAILABLE" and not response.HasField("draft")
    assert "ModelRequestError" in response.draft_parse_detail


# --- the model repair -----------------------------------------------------------------------------


def _broken_draft() -> Draft:
    return Draft.model_validate(json.loads(_draft_citing("CALL_A")))


def test_model_repair_is_one_direct_call_without_tools(executor, model_server, stores):
    model_server.add(completion(_draft_citing("call_a")))
    stub, new_run = executor("openai")
    run_id = new_run()
    violations = [GuardViolation(code="tool_ref.not_found", analysis_id="a1", tool_call_id="CALL_A")]
    response = stub.RepairDraft(executor_pb2.RepairDraftRequest(
        run_id=run_id, draft=plain_to_message(_broken_draft(), single_react_pb2.Draft),
        violations=[plain_to_message(v, single_react_pb2.GuardViolation) for v in violations],
    ), timeout=CALL_TIMEOUT)

    repaired = _draft(response)
    assert repaired.analyses[0].tool_call_ids == ["call_a"]
    assert repair_changes_semantics(_broken_draft(), repaired) is None
    [request] = model_server.requests
    assert "tools" not in request
    assert request["messages"][0]["role"] == "system" and "identifiers" in request["messages"][0]["content"]
    sent = json.loads(request["messages"][1]["content"])
    assert sent["violations"][0]["code"] == "tool_ref.not_found" and sent["draft"]["analyses"][0]["tool_call_ids"] == ["CALL_A"]
    assert (response.prompt.name, response.prompt.version, response.model_call.attempts) == ("draft_repair", "1", 1)
    assert stores[1].list_for_run(run_id) == []


@pytest.mark.parametrize("reply", [completion("已修复。"), Status(503)], ids=["prose", "server-error"])
def test_model_repair_without_a_usable_reply_returns_no_draft_and_is_not_retried(executor, model_server, reply):
    model_server.add(reply, completion(_draft_citing("call_a")))
    stub, new_run = executor("openai", max_attempts=3)
    response = stub.RepairDraft(executor_pb2.RepairDraftRequest(
        run_id=new_run(), draft=plain_to_message(_broken_draft(), single_react_pb2.Draft)), timeout=CALL_TIMEOUT)
    assert not response.HasField("draft")
    assert len(model_server.requests) == 1


def test_a_schema_capable_server_is_asked_for_the_final_draft_in_schema_form(executor, model_server):
    model_server.add(
        completion(None, tool_calls=[_logs_call("call_a")]),
        lambda body: completion(None, tool_calls=[_record_last_step(body)]),
        completion("I have seen enough."),
        completion(_draft_citing("call_a")),
    )
    stub, new_run = executor("openai", json_schema_format=True)
    response = _run_agent(stub, new_run())

    assert response.HasField("draft") and response.stop_reason == ""
    final = model_server.requests[-1]
    assert "tools" not in final and final["messages"][-1]["role"] == "user"
    schema = final["response_format"]["schema"]
    assert final["response_format"]["type"] == "json_object"
    assert schema["properties"]["analyses"]["items"]["properties"]["kind"]["enum"] == ["NORMAL", "NEGATIVE_OBSERVATION"]
    assert all("response_format" not in body for body in model_server.requests[:-1])


def test_a_cancelled_run_agent_stops_its_work(executor, model_server, stores):
    """The client cancels while the model is thinking about step 2: the step's tool call is never
    run and the model is not asked again."""
    second_turn_started = threading.Event()

    def slow_second_turn(body: dict):
        second_turn_started.set()
        return Delay(1.0, completion(None, tool_calls=[_record_last_step(body), _logs_call("call_b", "WARN")]))

    model_server.add(completion(None, tool_calls=[_logs_call("call_a")]), slow_second_turn, completion(_draft_citing("call_a")))
    stub, new_run = executor("openai")
    run_id = new_run()
    future = stub.RunAgent.future(executor_pb2.RunAgentRequest(run_id=run_id, query=INCIDENT_QUERY), timeout=CALL_TIMEOUT)
    assert second_turn_started.wait(CALL_TIMEOUT)
    future.cancel()
    with pytest.raises(grpc.FutureCancelledError):
        future.result()

    time.sleep(2.0)  # let the delayed model reply arrive at the (cancelled) handler
    assert [inv.tool_call_id for inv in stores[1].list_for_run(run_id)] == ["call_a"]
    assert len(model_server.requests) == 2
