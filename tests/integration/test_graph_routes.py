"""Every route of the multi-agent graph, through six real processes.

The executor's model is a scripted OpenAI-compatible server (real HTTP, the real `openai` client):
a real model cannot be made to misbehave on cue, so this is the one boundary replaced here. The
scripted answers are built from the tool observations the executor really showed it (real
invocation ids, raw paths and texts), then bent the way each scenario needs. Tools, gatekeeper,
verifier and composer are the real ones.
"""

from __future__ import annotations

import json
import re
import time

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import events_pb2, gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.conftest import start_cluster
from tests.scripted_model_server import Delay, ScriptedModelServer, completion, tool_call

pytestmark = pytest.mark.integration
QUERY = "payment-service 最近一小时 CPU 为什么这么高？"


class Script:
    """The scripted executor model: first turn calls query_metrics as planned, then answers."""

    def __init__(self) -> None:
        self.answers: list = []  # one per executor round: a callable(observation) -> str
        self.first_turn_delay = 0.0

    def __call__(self, body: dict):
        tool_messages = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_messages:
            user = next(m["content"] for m in body["messages"] if m["role"] == "user")
            suggested = re.search(r"\d+\. query_metrics (\{.*\})", user)
            arguments = json.loads(suggested.group(1)) if suggested else {}
            reply = completion(tool_calls=[tool_call("query_metrics", arguments)])
            return Delay(self.first_turn_delay, reply) if self.first_turn_delay else reply
        observation = json.loads(tool_messages[-1]["content"])
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return completion(answer(observation))


def _peak(observation: dict) -> dict:
    """The ref with the largest percentage value: the kind of point a model would cite."""
    refs = [r for r in observation["evidence_refs"] if ".points[" in r["raw_path"]]
    return max(refs, key=lambda r: float(re.search(r"=([\d.]+)", r["text"]).group(1)))


def _contract(*claims: dict) -> str:
    return json.dumps({"answer_version": "executor_evidence_v2", "claims": list(claims), "hypotheses": [],
                       "recommended_actions": [], "missing_info": []}, ensure_ascii=False)


def _claim(observation: dict, ref: dict, text: str, *, excerpt: str | None = None, extra_bindings=()) -> dict:
    binding = {"source_type": "metrics", "tool_name": "query_metrics",
               "source_invocation_id": observation["invocation_id"], "raw_path": ref["raw_path"],
               "evidence_excerpt": excerpt if excerpt is not None else ref["text"]}
    return {"claim_id": "c1", "claim_type": "symptom", "claim_text": text, "support_level": "direct",
            "evidence_bindings": [binding, *extra_bindings]}


def faithful(observation: dict) -> str:
    ref = _peak(observation)
    return _contract(_claim(observation, ref, f"监控显示 {ref['text']}"))


def fabricated_entity(observation: dict) -> str:
    ref = _peak(observation)
    return _contract(_claim(observation, ref, f"{ref['text']}，由 redis-cluster-7 的故障引起"))


def unseen_detail(observation: dict) -> str:
    """A lesser detail the evidence lacks (a noun phrase outside any cause): an evidence gap."""
    ref = _peak(observation)
    return _contract(_claim(observation, ref, f"监控显示 {ref['text']}，集中在结算线程池"))


def changed_number(observation: dict) -> str:
    ref = _peak(observation)
    value = re.search(r"=([\d.]+)", ref["text"]).group(1)
    return _contract(_claim(observation, ref, ref["text"].replace(value, "3.5")))


def foreign_invocation(observation: dict) -> str:
    ref = _peak(observation)
    claim = _claim(observation, ref, f"监控显示 {ref['text']}")
    claim["evidence_bindings"][0]["source_invocation_id"] = 987654321
    return _contract(claim)


def missing_raw_path_on_second_binding(observation: dict) -> str:
    ref = _peak(observation)
    imprecise = {"source_type": "metrics", "tool_name": "query_metrics",
                 "source_invocation_id": observation["invocation_id"], "evidence_excerpt": ref["text"]}
    return _contract(_claim(observation, ref, f"监控显示 {ref['text']}", extra_bindings=[imprecise]))


def only_an_imprecise_binding(observation: dict) -> str:
    """The claim's one binding lacks its raw_path: a LOW_CONFID ceiling with nothing passed."""
    ref = _peak(observation)
    claim = _claim(observation, ref, f"监控显示 {ref['text']}，由流量上涨引起")
    del claim["evidence_bindings"][0]["raw_path"]
    return _contract(claim)


def prose(observation: dict) -> str:
    return "payment-service 的 CPU 很高，可能是流量上涨导致的。"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory, otlp_receiver, new_database):
    script = Script()
    with ScriptedModelServer([script], repeat_last=True) as server:
        root = tmp_path_factory.mktemp("routes")
        running = start_cluster(root, otlp_receiver.endpoint, {
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": server.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-executor",
            "ATTEST_EXECUTOR_MODEL_API_KEY": "test-key",
        }, database_url=new_database(root))
        running.model_server = server
        try:
            yield running, script
        finally:
            running.stop()


def _diagnose(scripted, auth_metadata, *answers):
    running, script = scripted
    script.answers = list(answers)
    with grpc.insecure_channel(running.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query=QUERY), timeout=90, metadata=auth_metadata)
    run = RunStore(make_session_factory(make_engine(running.database_url))).get_run(response.run_id)
    return response, run


def _verdict(value: int) -> str | None:
    return spec_value(enums_pb2.Verdict.DESCRIPTOR, value)


def _nodes(run: dict) -> set[str]:
    return {event["node"] for event in run["events"]}


def test_pass_routes_to_composer(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, faithful)
    assert _verdict(response.effective_verdict) == "PASS" and response.rounds == 1, \
        run["self_evaluation"]["verifier_evaluation"].get("claim_checks")
    assert "composer" in _nodes(run)
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert evaluation["rejection_ledger"] == []
    executor_calls = evaluation["model_calls"]["executor"]
    assert (executor_calls["provider"], executor_calls["model"]) == ("openai", "scripted-executor")
    assert executor_calls["token_usage"]["total_tokens"] > 0
    assert evaluation["model_calls"]["verifier"]["provider"] == "embedded"


def test_invalid_output_goes_to_fallback_without_gatekeeper_or_verifier(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, prose)
    assert response.status == "FALLBACK" and _verdict(response.effective_verdict) is None
    assert not ({"gatekeeper", "verifier", "composer"} & _nodes(run))
    evaluation = run["self_evaluation"]["verifier_evaluation"]
    assert evaluation["executor_output_parse_status"] == "missing"
    assert "model_verdict" not in evaluation and "effective_verdict" not in evaluation
    assert evaluation["rejection_ledger"][0]["stage"] == "executor_contract"
    assert "流量上涨" not in response.answer, "nothing the executor said reaches the user unverified"
    assert "不符合约定的证据格式" in response.answer, "the answer says what happened"


def test_gatekeeper_reject_bypasses_the_verifier(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, foreign_invocation)
    assert response.status == "FALLBACK" and _verdict(response.verdict_ceiling) == "REJECT"
    assert "verifier" not in _nodes(run)
    ledger = run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]
    assert {(e["stage"], e["rule"]) for e in ledger} >= {("gatekeeper", "evidence.invocation_ref")}
    # Our text says what happened, names the rule, and does not send the user to retry in vain.
    assert "未能通过引用核验" in response.answer and "（evidence.invocation_ref）" in response.answer
    assert "无济于事" in response.answer and "稍后重试" not in response.answer
    assert "987654321" not in response.answer, "nothing of the model's output is shown"


def test_low_confid_ceiling_prevents_pass_and_retry(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, missing_raw_path_on_second_binding)
    assert _verdict(response.verdict_ceiling) == "LOW_CONFID"
    assert _verdict(response.effective_verdict) == "LOW_CONFID"
    assert response.rounds == 1, "a LOW_CONFID ceiling never qualifies for the evidence retry"
    ledger = run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]
    assert any(e["rule"] == "evidence.raw_path" and not e["claim_removed"] for e in ledger)


def test_a_low_confid_ceiling_with_nothing_verified_names_the_rule_and_the_verified_sources(scripted, auth_metadata):
    """Never an empty answer without a reason."""
    response, run = _diagnose(scripted, auth_metadata, only_an_imprecise_binding)
    assert response.status == "FALLBACK" and _verdict(response.verdict_ceiling) == "LOW_CONFID"
    assert "verifier" not in _nodes(run)
    assert "没有一条通过引用核验" in response.answer
    assert "（evidence.raw_path）" in response.answer, response.answer
    invocations = [e for e in run["events"] if e["node"] == "executor" and e["phase"] == "EXIT"][0]
    invocation_id = invocations["payload"]["invocation_ids"][0]
    assert "【已核实的数据来源】" in response.answer
    assert f"query_metrics #{invocation_id}（服务 payment-service，" in response.answer, response.answer
    assert "流量上涨" not in response.answer, "nothing of the model's output is shown"
    fallback = [e for e in run["events"] if e["node"] == "fallback"][0]
    assert fallback["payload"]["fallback_cause"] == "NO_VERIFIED_CLAIM"


def test_low_confid_with_a_critical_gap_retries_once_then_passes(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, unseen_detail, faithful)
    assert response.rounds == 2
    assert _verdict(response.effective_verdict) == "PASS"
    retry_events = [e for e in run["events"] if e["status"] == "low_confid_qualifies_for_evidence_retry"]
    assert len(retry_events) == 1
    planner_rounds = sorted({e["payload"]["round"] for e in run["events"] if e["node"] == "planner"})
    assert planner_rounds == [0, 1]
    assert {inv["round"] for inv in run["invocations"]} == {0, 1}


def test_a_gap_that_persists_gets_no_second_retry(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, unseen_detail, unseen_detail)
    assert response.rounds == 2 and _verdict(response.effective_verdict) == "LOW_CONFID"
    assert "线程池" not in response.answer, "an unsupported detail is never stated as fact"


def test_a_fabricated_key_entity_is_rejected_without_a_retry(scripted, auth_metadata):
    # Ruling 2026-11-30: a critical claim naming a dependency its evidence lacks is a fabrication.
    response, run = _diagnose(scripted, auth_metadata, fabricated_entity, faithful)
    assert _verdict(response.effective_verdict) == "REJECT" and response.rounds == 1
    assert "redis-cluster-7" not in response.answer, "a fabricated entity is never stated"
    ledger = run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]
    assert any(e["check"] == "key_term.absent" and e["fabricated_key"] for e in ledger)


def test_reject_has_no_retry_and_no_root_cause(scripted, auth_metadata):
    response, run = _diagnose(scripted, auth_metadata, changed_number)
    assert _verdict(response.effective_verdict) == "REJECT" and response.rounds == 1
    assert "根因" not in response.answer and "3.5" not in response.answer
    ledger = run["self_evaluation"]["verifier_evaluation"]["rejection_ledger"]
    assert {(e["stage"], e["rule"]) for e in ledger} >= {("verifier", "contradicted")}


def test_client_cancel_during_the_executor_stops_its_work_and_releases_nothing(scripted, auth_metadata):
    running, script = scripted
    script.answers = [faithful]
    script.first_turn_delay = 3.0
    server = running.model_server
    requests_before = len(server.requests)
    sessions = make_session_factory(make_engine(running.database_url))
    store = RunStore(sessions)
    session_id = store.create_session(client_label="cancel-test")
    try:
        with grpc.insecure_channel(running.gateway_addr) as channel:
            future = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose.future(
                gateway_pb2.DiagnoseRequest(query=QUERY, session_id=session_id), timeout=60, metadata=auth_metadata)
            deadline = time.monotonic() + 20
            while len(server.requests) == requests_before:  # the executor is now waiting on its model
                assert time.monotonic() < deadline, "the executor never called its model"
                time.sleep(0.05)
            future.cancel()
            with pytest.raises(grpc.FutureCancelledError):
                future.result()
        run = _wait_for_terminal_run(sessions, store, session_id)
        assert run["status"] == "CANCELLED" and not run["answer"]
        time.sleep(script.first_turn_delay + 1.0)  # the model's late reply has arrived by now
        assert store.get_run(run["run_id"])["invocations"] == [], "no tool ran after the cancel"
        assert len(server.requests) == requests_before + 1, "the executor made no further model call"
        assert "composer" not in _nodes(store.get_run(run["run_id"]))
    finally:
        script.first_turn_delay = 0.0


@pytest.mark.parametrize("mode", ["MULTI_AGENT", "SINGLE_REACT"])
def test_a_dropped_stream_cancels_its_run_and_get_run_replays_what_was_sent(scripted, auth_metadata, mode):
    """The client that lost its stream finds the run by the id of the first event, and
    GetRun replays the events it saw, then the cancellation it could not see."""
    running, script = scripted
    script.answers = [faithful]
    script.first_turn_delay = 3.0
    server = running.model_server
    requests_before = len(server.requests)
    try:
        with grpc.insecure_channel(running.gateway_addr) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            call = stub.DiagnoseStream(gateway_pb2.DiagnoseStreamRequest(
                query=QUERY, mode=enums_pb2.DiagnosisMode.Value(f"DIAGNOSIS_MODE_{mode}")),
                timeout=60, metadata=auth_metadata)
            seen = []
            for message in call:
                seen.append(message.event)
                if message.event.code in ("EXECUTOR_ENTER", "AGENT_ENTER"):
                    break
            deadline = time.monotonic() + 20
            while len(server.requests) == requests_before:  # the executor is now waiting on its model
                assert time.monotonic() < deadline, "the executor never called its model"
                time.sleep(0.05)
            call.cancel()
            run_id = seen[0].run_id
            request = gateway_pb2.GetRunRequest(run_id=run_id)
            while (run := stub.GetRun(request, timeout=10, metadata=auth_metadata)).status == "RUNNING":
                assert time.monotonic() < deadline + 20, "the dropped stream's run was never closed"
                time.sleep(0.1)
        assert run.status == "CANCELLED"
        replay = list(run.events)
        assert [(e.seq, e.code, e.event_kind) for e in replay[:len(seen)]] == [(e.seq, e.code, e.event_kind) for e in seen]
        assert replay[:len(seen)] == seen, "what was streamed is replayed unchanged"
        assert (replay[-1].code, replay[-1].event_kind) == ("RUN_CANCELLED", events_pb2.PROGRESS_EVENT_KIND_CANCELLED)
        assert [e.seq for e in replay] == list(range(1, len(replay) + 1))
        assert not {e.event_kind for e in replay} & {events_pb2.PROGRESS_EVENT_KIND_ANSWER,
                                                     events_pb2.PROGRESS_EVENT_KIND_FALLBACK}
    finally:
        script.first_turn_delay = 0.0


def _wait_for_terminal_run(sessions, store: RunStore, session_id: str) -> dict:
    """The session's one run, once it has left RUNNING (the client never learnt its id)."""
    from sqlalchemy import select

    from shared.db.models import RunRow

    deadline = time.monotonic() + 20
    while True:
        with sessions() as session:
            run_id = session.scalars(select(RunRow.run_id).where(RunRow.session_id == session_id)).one()
        run = store.get_run(run_id)
        if run["status"] != "RUNNING":
            return run
        assert time.monotonic() < deadline, "the cancelled run was never closed"
        time.sleep(0.1)
