"""Typed progress events, through six real processes: what DiagnoseStream
sends, in both modes, and that GetRun replays exactly that."""

from __future__ import annotations

import re

import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import events_pb2, gateway_pb2, gateway_pb2_grpc
from shared.proto_convert import enum_number

pytestmark = pytest.mark.integration
QUERY = "为什么 payment-service 的 CPU 这么高？"
CHINESE = re.compile(r"[\u4e00-\u9fff]")
ENTER, EXIT = events_pb2.PROGRESS_EVENT_PHASE_ENTER, events_pb2.PROGRESS_EVENT_PHASE_EXIT


@pytest.fixture()
def stub(gateway_channel):
    return gateway_pb2_grpc.GatewayServiceStub(gateway_channel)


def _stream(stub, auth_metadata, mode: str):
    messages = list(stub.DiagnoseStream(
        gateway_pb2.DiagnoseStreamRequest(query=QUERY, mode=enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, mode)),
        timeout=90, metadata=auth_metadata))
    assert messages[-1].HasField("result")
    return [m.event for m in messages[:-1]], messages[-1].result


def _enter_exit(events, kind):
    """The first ENTER of a kind and the EXIT that follows it."""
    of_kind = [e for e in events if e.event_kind == kind and e.phase in (ENTER, EXIT)]
    assert [e.phase for e in of_kind[:2]] == [ENTER, EXIT], [e.code for e in of_kind]
    return of_kind[0], of_kind[1]


@pytest.mark.parametrize("mode", ["MULTI_AGENT", "SINGLE_REACT"])
def test_the_stream_is_typed_and_get_run_replays_it(stub, auth_metadata, mode):
    events, result = _stream(stub, auth_metadata, mode)

    first = events[0]
    assert (first.event_kind, first.code) == (events_pb2.PROGRESS_EVENT_KIND_STARTED, "RUN_STARTED")
    assert first.run_id == result.run_id and first.session_id == result.session_id
    assert first.trace_id == result.trace_id and first.trace_id
    assert first.started.mode == enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, mode)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    times = [e.create_time.ToDatetime() for e in events]
    assert all(e.HasField("create_time") for e in events) and times == sorted(times)
    for event in events:
        assert event.event_kind != events_pb2.PROGRESS_EVENT_KIND_UNSPECIFIED and event.code, event
        assert CHINESE.search(event.message_zh), event
        assert event.WhichOneof("typed_details"), event
        assert QUERY not in event.message_zh and "payment-service 的 CPU" not in event.message_zh
    assert events[-1].event_kind == events_pb2.PROGRESS_EVENT_KIND_ANSWER
    assert events[-1].code == ("ANSWER_COMPOSED" if mode == "MULTI_AGENT" else "ANSWER_RELEASED")

    gate_in, gate_out = _enter_exit(events, events_pb2.PROGRESS_EVENT_KIND_GATEKEEPER)
    assert gate_in.code == "GATEKEEPER_ENTER" and gate_in.gatekeeper.check
    assert gate_out.code == "GATEKEEPER_EXIT_PASS" and gate_out.gatekeeper.passed
    check_in, check_out = _enter_exit(events, events_pb2.PROGRESS_EVENT_KIND_VERIFIER)
    assert check_in.code == "VERIFIER_ENTER" and check_out.code == "VERIFIER_EXIT_OK"
    if mode == "MULTI_AGENT":
        assert gate_out.gatekeeper.verdict_ceiling == enums_pb2.VERDICT_PASS
        assert re.fullmatch(r"引用核验：上限 PASS，未通过规则 \d+ 条", gate_out.message_zh)
        last_verdict = [e for e in events if e.code == "VERIFIER_EXIT_OK"][-1].verifier
        assert last_verdict.effective_verdict != enums_pb2.VERDICT_UNSPECIFIED
        assert last_verdict.groundedness_score == pytest.approx(result.groundedness_score) or result.rounds == 2
        assert re.fullmatch(r"核验结论：(PASS|LOW_CONFID|REJECT)，得分 \d\.\d\d", check_out.message_zh)
    else:
        assert check_out.verifier.semantic_verdict == enums_pb2.SEMANTIC_VERDICT_SUPPORTED

    replay = stub.GetRun(gateway_pb2.GetRunRequest(run_id=result.run_id), timeout=10, metadata=auth_metadata)
    assert list(replay.events) == events, "GetRun replays the stream, seq for seq"

    tool_calls = [e for e in events if e.WhichOneof("typed_details") == "tool_call"]
    assert {e.tool_call.tool_name for e in tool_calls} >= {"query_metrics"}
    stored = {inv["invocation_id"]: inv for inv in replay.audit["invocations"]}
    found = [e for e in tool_calls if e.code == "TOOL_CALL_EVIDENCE_FOUND"]
    assert found, [e.code for e in tool_calls]
    for event in found:
        details = event.tool_call
        assert details.evidence_status == enums_pb2.EVIDENCE_STATUS_EVIDENCE_FOUND and details.arguments_summary
        refs = sum(int(stored[i]["retrieval_details"]["ref_count"]) for i in details.invocation_ids)
        assert details.ref_count == refs > 0
        assert event.message_zh == f"取证完成：{details.tool_name}，找到证据 {refs} 条"
