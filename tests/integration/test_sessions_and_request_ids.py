"""Sessions and request ids, over the six real processes with two
principals (alice, bob; started as in test_callers_own_runs.py):

- a follow-up without a service inherits the session's last service and window, says so in its
  plan and its events, and cites only its own run's invocations; a shift moves the window;
- ListRuns pages a session newest first and answers another principal NOT_FOUND, exactly as an
  unknown session; without a session it lists the caller's own runs;
- the same request_id twice is one run (unary, streamed and concurrent: while it runs, the others
  are ABORTED with its run id), another question with it is INVALID_ARGUMENT, and after its run
  was cancelled the id starts a new run.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.error_details import error_details
from tests.integration.conftest import as_principal, start_cluster, write_tokens_file

pytestmark = pytest.mark.integration

QUERY = "checkout-api 最近一小时 5xx 多吗？"
QUICK_QUERY = "系统最近是不是有点慢？"  # no service named: a fast safe fallback, still a run


as_ = as_principal


@pytest.fixture(scope="module")
def sessions_cluster(tmp_path_factory, otlp_receiver, new_database):
    root = tmp_path_factory.mktemp("sessions")
    tokens = write_tokens_file(root, ("alice", "bob"))
    running = start_cluster(root, otlp_receiver.endpoint, {"ATTEST_AUTH_TOKENS_FILE": str(tokens)},
                            database_url=new_database(root))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def stub(sessions_cluster):
    with grpc.insecure_channel(sessions_cluster.gateway_addr) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


@pytest.fixture(scope="module")
def first(stub) -> gateway_pb2.DiagnoseResponse:
    return stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUERY), timeout=60, metadata=as_("alice"))


def audit_of(stub, run_id: str, principal: str = "alice") -> dict:
    return MessageToDict(stub.GetRun(gateway_pb2.GetRunRequest(run_id=run_id), timeout=10,
                                     metadata=as_(principal)).audit)


def planned(audit: dict) -> dict:
    return next(e["payload"] for e in audit["events"]
                if e["node"] == "planner" and e["phase"] == "EXIT" and e["payload"]["round"] == 0)


def refused(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        result = call(*args, **kwargs)
        if not isinstance(result, gateway_pb2.DiagnoseResponse | gateway_pb2.ListRunsResponse):
            list(result)
    return info.value


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_follow_up_inherits_service_and_window_and_cites_only_its_own_run(stub, first):
    follow_up = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="那它的内存呢？", session_id=first.session_id),
                              timeout=60, metadata=as_("alice"))
    assert follow_up.session_id == first.session_id and follow_up.run_id != first.run_id
    assert follow_up.fallback_type != 0 or follow_up.effective_verdict != 0
    before, after = audit_of(stub, first.run_id), audit_of(stub, follow_up.run_id)
    assert planned(after)["services"] == ["checkout-api"] and planned(after)["window"] == planned(before)["window"]
    (note,) = [e for e in after["events"] if e["status"] == "FOLLOW_UP"]
    assert note["payload"]["from_run_id"] == first.run_id and note["payload"]["services"] == ["checkout-api"]
    assert note["reason"].startswith("沿用上一轮：checkout-api，窗口 ")
    # The answer is about what was asked: its first line reads the memory, not the 5xx of before.
    conclusion = follow_up.answer.split("【结论】", 1)[1].strip().splitlines()[0]
    assert "checkout-api" in conclusion and "memory" in conclusion and "5xx" not in conclusion, follow_up.answer
    # Evidence is fetched afresh: the run made its own calls over the inherited window, and every
    # verified citation names one of them.
    own = {i["invocation_id"] for i in after["invocations"]}
    window = planned(before)["window"]
    metrics = [i["request"] for i in after["invocations"] if i["tool_name"] == "query_metrics"]
    assert metrics and all(r["service"] == "checkout-api" and (r["start"], r["end"]) == (window["start"], window["end"])
                           for r in metrics)
    assert not own & {i["invocation_id"] for i in before["invocations"]}
    cited = {e["source_invocation_id"] for e in
             after["self_evaluation"]["verifier_evaluation"].get("verified_evidence", [])}
    assert cited <= own

    shifted = stub.Diagnose(gateway_pb2.DiagnoseRequest(query="再往前看一小时", session_id=first.session_id),
                            timeout=60, metadata=as_("alice"))
    moved = planned(audit_of(stub, shifted.run_id))
    assert moved["services"] == ["checkout-api"]
    assert moment(moved["window"]["start"]) == moment(window["start"]) - timedelta(hours=1)
    assert moment(moved["window"]["end"]) == moment(window["end"]) - timedelta(hours=1)
    assert moved["follow_up"]["shift_phrase"] == "再往前看一小时"


def test_another_principal_cannot_follow_up_or_list_a_session(stub, first):
    absent = "e" * 32
    for call, request in [
        (stub.Diagnose, lambda sid: gateway_pb2.DiagnoseRequest(query="那它的内存呢？", session_id=sid)),
        (stub.ListRuns, lambda sid: gateway_pb2.ListRunsRequest(session_id=sid)),
    ]:
        others = refused(call, request(first.session_id), timeout=30, metadata=as_("bob"))
        missing = refused(call, request(absent), timeout=30, metadata=as_("bob"))
        assert others.code() == missing.code() == grpc.StatusCode.NOT_FOUND
        assert others.details().replace(first.session_id, "ID") == missing.details().replace(absent, "ID")


def test_list_runs_pages_a_session_newest_first(stub):
    session_id = ""
    asked = []
    for n in range(3):
        response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=f"{QUICK_QUERY} #{n}", session_id=session_id),
                                 timeout=60, metadata=as_("alice"))
        session_id = response.session_id
        asked.append(response.run_id)
    pages = [stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=session_id, page_size=2), timeout=10,
                           metadata=as_("alice"))]
    while pages[-1].next_page_token:
        pages.append(stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=session_id, page_size=2,
                                                               page_token=pages[-1].next_page_token),
                                   timeout=10, metadata=as_("alice")))
    assert [len(p.runs) for p in pages] == [2, 1]
    listed = [run for page in pages for run in page.runs]
    assert [run.run_id for run in listed] == asked[::-1]
    newest = listed[0]
    assert newest.query == f"{QUICK_QUERY} #2" and newest.status == "FALLBACK" and newest.fallback_type != 0
    assert newest.created_at and newest.finished_at and newest.answer_line
    assert not newest.answer_line.startswith(("可信度", "【", "- ")), newest.answer_line  # the answer, not a header
    # Without a session: the caller's runs across its sessions, these three the newest of them.
    own = stub.ListRuns(gateway_pb2.ListRunsRequest(page_size=3), timeout=10, metadata=as_("alice")).runs
    assert [run.run_id for run in own] == asked[::-1]
    assert all(run.run_id not in asked for run in
               stub.ListRuns(gateway_pb2.ListRunsRequest(), timeout=10, metadata=as_("bob")).runs)
    for bad, field in [(gateway_pb2.ListRunsRequest(session_id=session_id, page_token="bm90LWEtdG9rZW4"), "page_token"),
                       (gateway_pb2.ListRunsRequest(session_id=session_id, page_size=-1), "page_size"),
                       (gateway_pb2.ListRunsRequest(session_id=session_id + "\u202e"), "session_id")]:
        error = refused(stub.ListRuns, bad, timeout=10, metadata=as_("alice"))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field in error.details()


def test_the_same_request_id_returns_the_same_run(stub):
    request = gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-req-1")
    once = stub.Diagnose(request, timeout=60, metadata=as_("alice"))
    again = stub.Diagnose(request, timeout=60, metadata=as_("alice"))
    assert again == once, "the replay is the same response, rebuilt from the persisted run"
    in_session = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-req-1",
                                                           session_id=once.session_id),
                               timeout=60, metadata=as_("alice"))
    assert in_session.run_id == once.run_id
    streamed = list(stub.DiagnoseStream(gateway_pb2.DiagnoseStreamRequest(query=QUERY, request_id="alice-req-1"),
                                        timeout=60, metadata=as_("alice")))
    # A repeated stream replays the run's persisted events (as GetRun has them), then its result.
    replayed = [m.event for m in streamed[:-1]]
    assert streamed[-1].result == once
    assert [e.seq for e in replayed] == list(range(1, len(replayed) + 1)) and replayed[0].code == "RUN_STARTED"
    assert all(e.run_id == once.run_id for e in replayed)
    persisted = stub.GetRun(gateway_pb2.GetRunRequest(run_id=once.run_id), timeout=10, metadata=as_("alice")).events
    assert [(e.seq, e.code) for e in replayed] == [(e.seq, e.code) for e in persisted]
    # The id is alice's: bob's request with it is his own run.
    assert stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY, request_id="alice-req-1"), timeout=60,
                         metadata=as_("bob")).run_id != once.run_id
    for other in (gateway_pb2.DiagnoseRequest(query="checkout-api 的内存呢？", request_id="alice-req-1"),
                  gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-req-1", mode=2)):
        error = refused(stub.Diagnose, other, timeout=30, metadata=as_("alice"))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "request_id" in error.details()
    for bad in ("x" * 129, "id\x00"):
        error = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUERY, request_id=bad), timeout=30,
                        metadata=as_("alice"))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "request_id" in error.details()
    runs = stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=once.session_id), timeout=10, metadata=as_("alice"))
    assert [run.run_id for run in runs.runs] == [once.run_id] and runs.runs[0].request_id == "alice-req-1"


def test_concurrent_requests_with_one_id_make_one_run(stub):
    request = gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-race")

    def attempt(_: int) -> gateway_pb2.DiagnoseResponse | str:
        """The answer, or (the run still going) the run id the ABORTED status names."""
        try:
            return stub.Diagnose(request, timeout=90, metadata=as_("alice"))
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.ABORTED, error.details()
            return error_details(error)["metadata"]["run_id"]

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(attempt, range(4)))
    responses = [o for o in outcomes if isinstance(o, gateway_pb2.DiagnoseResponse)]
    assert responses and len({o if isinstance(o, str) else o.run_id for o in outcomes}) == 1
    assert stub.Diagnose(request, timeout=60, metadata=as_("alice")) == responses[0]
    runs = stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=responses[0].session_id), timeout=10,
                         metadata=as_("alice"))
    assert len(runs.runs) == 1


def test_a_cancelled_runs_id_starts_a_new_run(stub):
    session_id = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=60,
                               metadata=as_("alice")).session_id
    stream = stub.DiagnoseStream(gateway_pb2.DiagnoseStreamRequest(query=QUERY, session_id=session_id,
                                                                   request_id="alice-cancel"),
                                 timeout=60, metadata=as_("alice"))
    assert next(stream).HasField("event"), "the run is under way"
    stream.cancel()
    # While the cancelled run winds down its id answers ABORTED; once it ends CANCELLED the id
    # starts a new run.
    request = gateway_pb2.DiagnoseRequest(query=QUERY, session_id=session_id, request_id="alice-cancel")
    for _ in range(100):
        try:
            response = stub.Diagnose(request, timeout=90, metadata=as_("alice"))
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.ABORTED, error.details()
            time.sleep(0.2)
    listed = stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=session_id), timeout=10, metadata=as_("alice")).runs
    assert len(listed) == 3, [(run.query, run.status) for run in listed]
    new, cancelled = listed[0], listed[1]
    assert cancelled.status == "CANCELLED" and cancelled.request_id == "alice-cancel"
    assert new.run_id == response.run_id != cancelled.run_id and response.status != "CANCELLED"
    assert stub.Diagnose(request, timeout=60, metadata=as_("alice")) == response


def test_a_single_react_run_is_replayed_as_it_was_answered(stub):
    request = gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-react", mode=2)
    once = stub.Diagnose(request, timeout=90, metadata=as_("alice"))
    assert stub.Diagnose(request, timeout=60, metadata=as_("alice")) == once
