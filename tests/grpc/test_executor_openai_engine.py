"""The executor's OpenAI-compatible engine behind its real gRPC servicer, driven by a scripted
model over real HTTP through the real `openai` client, with a real SQLite audit database and the
real tool registry over the loaded demo estate."""

from __future__ import annotations

import json
import sqlite3

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.executor.v1 import executor_pb2
from services.executor.servicer import ExecutorServicer, build_engine
from services.gatekeeper.engine import check_executor_output
from shared.config import ExecutorSettings, ModelSettings
from shared.core.contracts import Plan, PlannedToolCall, TimeWindow
from shared.core.evidence_view import evidence_view
from shared.core.strict_json import loads_strict_json
from shared.model_client import OpenAIChatClient
from shared.proto_convert import plain_to_message, spec_value
from tests.scripted_model_server import Delay, Status, completion, tool_call

START, END = "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"
QUERY = "payment-service 为什么报错这么多？"
PROMPT_TOKENS, COMPLETION_TOKENS = 11, 7  # the scripted server's usage per completion
CALL_TIMEOUT = 30


@pytest.fixture()
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture()
def executor(demo_registry, stores, spans, scripted_settings, serve_role):
    """`executor(**model_settings)` → (stub, run_id): an executor servicer on an ephemeral port
    whose engine talks to the scripted model."""
    runs, invocations = stores
    provider, _ = spans

    def start(**overrides):
        settings = scripted_settings(**overrides)
        engine = build_engine(settings, demo_registry, OpenAIChatClient(settings, tracer_provider=provider))
        stub = serve_role("executor", ExecutorServicer(invocations, demo_registry, engine), ExecutorSettings(port=0))
        run_id = runs.create_run(runs.create_session("test"), QUERY, "MULTI_AGENT")
        return stub, run_id

    return start


def _plan() -> Plan:
    return Plan(
        services=["payment-service"],
        symptoms=["errors"],
        window=TimeWindow(start=START, end=END),
        steps=[PlannedToolCall(
            tool_name="query_logs",
            arguments={"service": "payment-service", "start": START, "end": END, "level": ["ERROR"], "limit": 50},
            purpose="ERROR log lines of payment-service",
        )],
    )


def _execute(stub, run_id: str, round_: int = 0) -> executor_pb2.ExecutePlanResponse:
    request = executor_pb2.ExecutePlanRequest(
        run_id=run_id, query=QUERY, plan=plain_to_message(_plan(), evidence_pb2.Plan), round=round_,
    )
    return stub.ExecutePlan(request, timeout=CALL_TIMEOUT)


def _parse_status(response) -> str:
    return spec_value(enums_pb2.ParseStatus.DESCRIPTOR, response.parse_status)


def _logs_call(call_id: str = "call_logs") -> dict:
    return tool_call("query_logs", {"service": "payment-service", "start": START, "end": END, "level": "ERROR", "limit": 20}, call_id)


def _tool_messages(request_body: dict) -> list[dict]:
    return [m for m in request_body["messages"] if m["role"] == "tool"]


def _answer_citing_first_ref(request_body: dict) -> dict:
    """A well-formed final answer built, like a careful model would, from the tool observation."""
    observation = json.loads(_tool_messages(request_body)[-1]["content"])
    ref = next(r for r in observation["evidence_refs"] if r["raw_path"].startswith("hits["))
    excerpt = ref["text"].split(" host=")[1].split(" ", 1)[1][:60]  # part of the message, verbatim
    answer = {
        "answer_version": "executor_evidence_v2",
        "claims": [{
            "claim_id": "c1", "claim_type": "observation", "claim_text": "payment-service 在窗口内有 ERROR 日志。",
            "support_level": "direct",
            "evidence_bindings": [{
                "source_type": "logs", "tool_name": observation["tool_name"],
                "source_invocation_id": observation["invocation_id"],
                "source_invocation_ids": [observation["invocation_id"]],
                "raw_path": ref["raw_path"], "evidence_excerpt": excerpt,
            }],
        }],
        "hypotheses": [], "recommended_actions": [], "missing_info": [],
    }
    return completion(json.dumps(answer, ensure_ascii=False))


def test_well_formed_final_answer_is_valid_and_cites_what_was_persisted(executor, model_server, stores, spans):
    model_server.add(completion(None, tool_calls=[_logs_call()]), _answer_citing_first_ref)
    stub, run_id = executor()
    response = _execute(stub, run_id)

    assert _parse_status(response) == "valid", response.parse_detail
    persisted = stores[1].list_for_run(run_id)
    assert [inv.invocation_id for inv in persisted] == list(response.invocation_ids)
    [invocation] = persisted
    assert invocation.tool_name == "query_logs" and invocation.lifecycle == "READY"
    assert invocation.tool_call_id == "call_logs"  # the model's id of the call
    assert invocation.evidence_status == "EVIDENCE_FOUND"

    # The requests: tools offered, the system prompt and the plan as suggestions; the tool result
    # shown to the model carries the persisted invocation id and raw_paths with their texts.
    first, second = model_server.requests
    assert first["model"] == "scripted-model"
    assert {t["function"]["name"] for t in first["tools"]} >= {"query_metrics", "query_logs", "get_current_time"}
    assert first["messages"][0]["role"] == "system" and "executor_evidence_v2" in first["messages"][0]["content"]
    assert QUERY in first["messages"][1]["content"] and "query_logs" in first["messages"][1]["content"]
    assert "response_format" not in first
    [tool_message] = _tool_messages(second)
    assert tool_message["tool_call_id"] == "call_logs"
    observation = json.loads(tool_message["content"])
    assert observation["invocation_id"] == invocation.invocation_id
    assert observation["evidence_status"] == "EVIDENCE_FOUND"
    persisted_refs = {ref.raw_path: ref.text for ref in evidence_view(invocation).refs()}
    assert observation["evidence_refs"]
    for ref in observation["evidence_refs"]:
        assert persisted_refs[ref["raw_path"]] == ref["text"]

    # The citation holds against the persisted rows: the gatekeeper passes it.
    check = check_executor_output(run_id, response.output_text, persisted)
    assert check.gatekeeper_result.status == "pass", check.gatekeeper_result

    # Audit: prompt name/version and the model call, truthfully.
    assert (response.prompt.role, response.prompt.name, response.prompt.version) == ("executor", "executor_v2", "4")
    call = response.model_call
    assert (call.provider, call.model, call.attempts) == ("openai", "scripted-model", 2)
    assert call.token_usage.prompt_tokens == 2 * PROMPT_TOKENS
    assert call.token_usage.completion_tokens == 2 * COMPLETION_TOKENS
    assert call.token_usage.total_tokens == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)
    [entry] = response.tool_trace_summary
    assert list(entry.source_invocation_ids) == [invocation.invocation_id] and entry.success

    # One GenAI span per model call, with usage and no prompt text.
    model_spans = [s for s in spans[1].get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(model_spans) == 2
    for span in model_spans:
        assert span.name == "chat scripted-model"
        assert span.attributes["gen_ai.system"] == "openai"
        assert span.attributes["gen_ai.request.model"] == "scripted-model"
        assert span.attributes["gen_ai.usage.input_tokens"] == PROMPT_TOKENS
        assert span.attributes["gen_ai.usage.output_tokens"] == COMPLETION_TOKENS
        assert not any(QUERY in str(value) or "executor_evidence_v2" in str(value) for value in span.attributes.values())


def test_prose_final_answer_is_missing(executor, model_server):
    model_server.add(completion("payment-service 的错误主要来自数据库连接池耗尽，建议扩容。"))
    stub, run_id = executor()
    response = _execute(stub, run_id)
    assert _parse_status(response) == "missing"
    assert response.output_text.startswith("payment-service")
    assert not response.HasField("structured")


@pytest.mark.parametrize(
    "final_text",
    [
        '{"answer_version": "executor_evidence_v2", "claims": [',
        json.dumps({"answer_version": "executor_evidence_v1", "claims": [], "hypotheses": [],
                    "recommended_actions": [], "missing_info": []}),
    ],
    ids=["broken-json", "wrong-answer-version"],
)
def test_broken_json_and_wrong_answer_version_are_malformed(executor, model_server, final_text):
    model_server.add(completion(None, tool_calls=[_logs_call()]), completion(final_text))
    stub, run_id = executor()
    response = _execute(stub, run_id)
    assert _parse_status(response) == "malformed", response.parse_detail
    assert response.output_text == final_text  # kept as produced, never repaired


def test_runaway_tool_loop_stops_at_the_step_bound(executor, model_server, stores):
    def endless(body: dict) -> dict:
        if "tools" not in body:  # the final turn, offered no tools
            return completion("still thinking")
        return completion(None, tool_calls=[tool_call("get_current_time", {})])

    model_server.add(endless)
    model_server.repeat_last = True
    stub, run_id = executor(max_tool_steps=3)
    response = _execute(stub, run_id)

    assert len(model_server.requests) == 4  # three tool-calling turns, then one final turn
    assert all("tools" in body for body in model_server.requests[:3])
    final = model_server.requests[3]
    assert "tools" not in final
    assert final["messages"][-1]["role"] == "user" and "do not call any tool" in final["messages"][-1]["content"]
    assert len(stores[1].list_for_run(run_id)) == 3
    assert response.model_call.attempts == 4
    assert _parse_status(response) == "missing"
    assert list(response.tool_trace_summary) == []  # the helper tool is never evidence


def test_bad_tool_arguments_come_back_as_error_observations_and_are_persisted(executor, model_server, stores):
    model_server.add(
        completion(None, tool_calls=[
            tool_call("query_logs", '{"service": "payment-service", "start": ', "call_broken"),
            tool_call("query_metrics", {"service": "payment-service", "start": "yesterday", "end": END}, "call_bad_value"),
            tool_call("drop_tables", {}, "call_unknown"),
        ]),
        completion("{}"),
    )
    stub, run_id = executor()
    response = _execute(stub, run_id)

    persisted = stores[1].list_for_run(run_id)
    assert [inv.lifecycle for inv in persisted] == ["ERROR", "ERROR", "ERROR"]
    assert all(inv.evidence_status == "ERROR" for inv in persisted)
    observations = {m["tool_call_id"]: json.loads(m["content"]) for m in _tool_messages(model_server.requests[1])}
    assert "not valid JSON" in observations["call_broken"]["error"]
    assert "start" in observations["call_bad_value"]["error"] and "yesterday" in observations["call_bad_value"]["error"]
    assert "unknown tool" in observations["call_unknown"]["error"]
    assert {o["invocation_id"] for o in observations.values()} == {inv.invocation_id for inv in persisted}
    # Failed evidence calls stay visible as gaps.
    gaps = [e for e in response.tool_trace_summary if not e.success]
    assert {tuple(e.source_invocation_ids) for e in gaps} >= {(persisted[0].invocation_id,), (persisted[1].invocation_id,)}



def test_a_nan_argument_is_persisted_as_json_the_string_nan(executor, model_server, stores, tmp_path):
    # The model's arguments are read by json.loads, which accepts NaN; the stored request must still
    # be JSON that PostgreSQL takes (it once refused the whole write).
    arguments = f'{{"service": "payment-service", "start": "{START}", "end": "{END}", "limit": NaN}}'
    model_server.add(completion(None, tool_calls=[tool_call("query_logs", arguments, "call_nan")]), completion("{}"))
    stub, run_id = executor()
    _execute(stub, run_id)

    (persisted,) = stores[1].list_for_run(run_id)
    assert persisted.tool_call_id == "call_nan" and persisted.request["limit"] == "NaN"
    with sqlite3.connect(tmp_path / "attest.db") as connection:
        (stored,) = connection.execute("SELECT request FROM tool_invocation").fetchone()
    assert loads_strict_json(stored)["limit"] == "NaN"

def test_schema_response_format_is_requested_for_the_final_answer_when_the_server_supports_it(executor, model_server):
    model_server.add(completion("I have looked enough."), completion('{"answer_version": "executor_evidence_v2", "claims": []}'))
    stub, run_id = executor(json_schema_format=True)
    response = _execute(stub, run_id)
    assert _parse_status(response) == "valid"
    first, final = model_server.requests
    assert "response_format" not in first and "tools" in first
    assert "tools" not in final
    assert final["response_format"]["type"] == "json_object"
    schema = final["response_format"]["schema"]
    assert schema["properties"]["answer_version"]["enum"] == ["executor_evidence_v2"]
    assert schema["properties"]["claims"]["maxItems"] > 0


def test_server_error_then_timeout_is_retried_then_reported_as_a_model_failure(executor, model_server):
    model_server.add(Status(500), Delay(3.0, completion("late")))
    stub, run_id = executor(timeout_seconds=0.5, max_attempts=2)
    response = _execute(stub, run_id)
    assert len(model_server.requests) == 2  # retried once, then given up
    assert _parse_status(response) == "missing"
    assert "ModelTimeoutError" in response.parse_detail
    assert response.model_call.attempts == 2 and response.model_call.token_usage.total_tokens == 0


def test_a_refused_request_is_not_retried(executor, model_server):
    model_server.add(Status(400, {"error": {"message": "bad request", "type": "invalid_request_error"}}))
    stub, run_id = executor(max_attempts=3)
    response = _execute(stub, run_id)
    assert len(model_server.requests) == 1
    assert "ModelRequestError" in response.parse_detail
    assert _parse_status(response) == "missing"


def test_embedded_engine_stays_the_default(demo_registry, stores, serve_role):
    runs, invocations = stores
    engine = build_engine(ModelSettings(), demo_registry)
    stub = serve_role("executor", ExecutorServicer(invocations, demo_registry, engine), ExecutorSettings(port=0))
    response = _execute(stub, runs.create_run(runs.create_session("test"), QUERY, "MULTI_AGENT"))
    assert _parse_status(response) == "valid"
    assert (response.prompt.name, response.model_call.provider, response.model_call.attempts) == (
        "executor.embedded", "embedded", 1)


def test_a_repeated_knowledge_hit_is_persisted_as_deduped_no_new_evidence(executor, model_server, stores):
    lookup = {"query": "数据库连接池耗尽 排查", "top_k": 3}
    model_server.add(
        completion(None, tool_calls=[tool_call("lookup_knowledge", lookup, "call_k1")]),
        completion(None, tool_calls=[tool_call("lookup_knowledge", lookup, "call_k2")]),
        completion('{"answer_version": "executor_evidence_v2", "claims": []}'),
    )
    stub, run_id = executor()
    response = _execute(stub, run_id)

    first, second = stores[1].list_for_run(run_id)
    assert first.evidence_status == "EVIDENCE_FOUND" and not first.retrieval_details.deduped
    assert second.evidence_status == "NO_EVIDENCE" and second.retrieval_details.deduped
    observation = json.loads(_tool_messages(model_server.requests[2])[-1]["content"])
    assert observation["invocation_id"] == second.invocation_id and observation["deduped"] is True
    [entry] = response.tool_trace_summary  # one topic, one round: compacted
    assert list(entry.source_invocation_ids) == [first.invocation_id, second.invocation_id]
    assert "有效命中 1" in entry.output_summary and "重复 1" in entry.output_summary


def test_citations_the_gatekeeper_would_refuse_are_repaired_or_dropped_before_the_output_leaves(
        executor, model_server, stores):
    """The servicer checks the model's bindings with the gatekeeper's matcher. A good one
    is kept, a wrong excerpt is replaced by a verbatim piece of its own ref, a raw_path the
    invocation does not have is dropped with its claim; the audit detail says so."""
    def answer(request_body: dict) -> dict:
        observation = json.loads(_tool_messages(request_body)[-1]["content"])
        hits = [r for r in observation["evidence_refs"] if r["raw_path"].startswith("hits[")]

        def binding(raw_path: str, excerpt: str) -> dict:
            return {"source_type": "logs", "tool_name": "query_logs", "source_invocation_id": observation["invocation_id"],
                    "raw_path": raw_path, "evidence_excerpt": excerpt}

        claims = [
            ("c1", binding(hits[0]["raw_path"], hits[0]["text"])),
            ("c2", binding(hits[1]["raw_path"], "payment-service timeout=99999ms")),  # not what the line says
            ("c3", binding("hits[99999]", hits[0]["text"])),  # no such ref
        ]
        return completion(json.dumps({
            "answer_version": "executor_evidence_v2",
            "claims": [{"claim_id": claim_id, "claim_type": "observation", "claim_text": "payment-service 有 ERROR 日志。",
                        "support_level": "direct", "evidence_bindings": [b]} for claim_id, b in claims],
            "hypotheses": [], "recommended_actions": [], "missing_info": [],
        }, ensure_ascii=False))

    model_server.add(completion(None, tool_calls=[_logs_call()]), answer)
    stub, run_id = executor()
    response = _execute(stub, run_id)

    assert _parse_status(response) == "valid", response.parse_detail
    assert response.parse_detail == "citation self-check: 1 excerpt(s) repaired, 1 binding(s) dropped, 1 claim(s) dropped"
    output = json.loads(response.output_text)
    assert [c["claim_id"] for c in output["claims"]] == ["c1", "c2"]
    assert [c.claim_id for c in response.structured.claims] == ["c1", "c2"]
    persisted = stores[1].list_for_run(run_id)
    refs = {ref.raw_path: ref.text for ref in evidence_view(persisted[0]).refs()}
    repaired = output["claims"][1]["evidence_bindings"][0]
    assert repaired["evidence_excerpt"] != "payment-service timeout=99999ms"
    assert repaired["evidence_excerpt"] in refs[repaired["raw_path"]]  # verbatim, from the same ref
    check = check_executor_output(run_id, response.output_text, persisted)
    assert check.gatekeeper_result.failed_rules == [], check.gatekeeper_result.errors
