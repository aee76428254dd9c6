"""Callers own their runs, over the six real processes: a token file names
several principals; one cannot read or continue another's runs (NOT_FOUND, exactly as for what
does not exist); each has quotas answered with RESOURCE_EXHAUSTED and RetryInfo; GetRun's summary
is bounded and its pages return every event and invocation exactly once, even for a run larger
than a client's 4 MB message limit.

A test starts its own principals this way: write `PRINCIPAL sha256:<hex>` lines (`attest
hash-token`, or `shared.principals.token_file_line`) to a file and start the cluster with
`ATTEST_AUTH_TOKENS_FILE` pointing at it (`Cluster(env={...})`, here through `start_cluster`);
`ATTEST_AUTH_TOKEN` (TEST_TOKEN) stays the principal `default`.
"""

from __future__ import annotations

import time

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy import insert

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.models import ToolInvocationRow
from shared.db.run_store import RunStore
from shared.error_details import error_details
from tests.integration.conftest import TEST_TOKEN, as_principal, start_cluster, write_tokens_file

pytestmark = pytest.mark.integration

PRINCIPALS = ("alice", "bob", "carol", "dave", "erin")
PER_MINUTE = 3
PAGE_BYTES = 10_000
CLIENT_LIMIT = 4 * 1024 * 1024
QUICK_QUERY = "系统最近是不是有点慢？"  # no service named: a fast safe fallback, still a run
QUERY = "checkout-api 最近一小时 5xx 多吗？"


as_ = as_principal


@pytest.fixture(scope="module")
def owners_cluster(tmp_path_factory, otlp_receiver, new_database):
    root = tmp_path_factory.mktemp("owners")
    tokens = write_tokens_file(root, PRINCIPALS)
    running = start_cluster(root, otlp_receiver.endpoint, {
        "ATTEST_AUTH_TOKENS_FILE": str(tokens),
        "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL": "1",
        "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL": str(PER_MINUTE),
        "ATTEST_GET_RUN_MAX_PAGE_BYTES": str(PAGE_BYTES),
    }, database_url=new_database(root))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def stub(owners_cluster):
    with grpc.insecure_channel(owners_cluster.gateway_addr) as channel:  # the default 4 MB receive limit
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


@pytest.fixture(scope="module")
def alice_run(stub) -> gateway_pb2.DiagnoseResponse:
    return stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUERY), timeout=60, metadata=as_("alice"))


def refused(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        result = call(*args, **kwargs)
        if not isinstance(result, gateway_pb2.DiagnoseResponse | gateway_pb2.GetRunResponse):
            list(result)  # a stream: the status comes with its first read
    return info.value


def test_each_token_is_its_own_principal_recorded_in_the_run_and_on_the_span(stub, alice_run, otlp_receiver):
    own = stub.GetRun(gateway_pb2.GetRunRequest(run_id=alice_run.run_id), timeout=10, metadata=as_("alice"))
    assert own.audit["principal"] == "alice"
    assert own.audit["invocations"], "the whole audit, as before, by default"
    default = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=60,
                            metadata=[("authorization", f"Bearer {TEST_TOKEN}")])
    shown = stub.GetRun(gateway_pb2.GetRunRequest(run_id=default.run_id), timeout=10,
                        metadata=[("authorization", f"Bearer {TEST_TOKEN}")])
    assert shown.audit["principal"] == "default", "ATTEST_AUTH_TOKEN keeps working beside the file"

    def gateway_span(spans):
        return next((s for s in spans if s["service_name"] == "gateway" and not s["parent_span_id"]
                     and s["trace_id"] == alice_run.trace_id), None)

    span = otlp_receiver.wait_for(gateway_span)
    assert span["attributes"]["attest.principal"] == "alice"
    assert refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUERY), timeout=10,
                   metadata=[("authorization", "Bearer alice-token")]).code() == grpc.StatusCode.UNAUTHENTICATED
    unknown = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=alice_run.run_id), timeout=10,
                      metadata=[("authorization", "Bearer alice-token")])
    assert error_details(unknown)["reason"] == "UNAUTHENTICATED"


def test_another_principal_cannot_read_a_run_even_without_a_session_id(stub, alice_run):
    absent = "0" * 32
    for view, page_size in [(gateway_pb2.RUN_VIEW_UNSPECIFIED, 0), (gateway_pb2.RUN_VIEW_FULL, 5),
                            (gateway_pb2.RUN_VIEW_SUMMARY, 0)]:
        others = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=alice_run.run_id, view=view,
                                                                page_size=page_size),
                         timeout=10, metadata=as_("bob"))
        missing = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=absent, view=view, page_size=page_size),
                          timeout=10, metadata=as_("bob"))
        assert others.code() == missing.code() == grpc.StatusCode.NOT_FOUND
        # Nothing tells bob that the run exists: the answer differs only by the id he asked for.
        assert others.details().replace(alice_run.run_id, "ID") == missing.details().replace(absent, "ID")
        # The same ErrorInfo, and no BadRequest or RetryInfo (the trailer's Status repeats the text).
        assert error_details(others) == error_details(missing) == {
            "reason": "RUN_NOT_FOUND", "domain": "attest.dev", "metadata": {"field": "run_id"}}
        assert [(k, v) for k, v in others.trailing_metadata() if k != "grpc-status-details-bin"] == \
            [(k, v) for k, v in missing.trailing_metadata() if k != "grpc-status-details-bin"]
    session = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=alice_run.run_id, session_id=alice_run.session_id),
                      timeout=10, metadata=as_("bob"))
    assert session.code() == grpc.StatusCode.NOT_FOUND


def test_another_principal_cannot_continue_a_session(stub, alice_run):
    absent = "f" * 32
    for call, request_type in [(stub.Diagnose, gateway_pb2.DiagnoseRequest),
                               (stub.DiagnoseStream, gateway_pb2.DiagnoseStreamRequest)]:
        others = refused(call, request_type(query=QUICK_QUERY, session_id=alice_run.session_id), timeout=30,
                         metadata=as_("bob"))
        missing = refused(call, request_type(query=QUICK_QUERY, session_id=absent), timeout=30, metadata=as_("bob"))
        assert others.code() == missing.code() == grpc.StatusCode.NOT_FOUND
        assert others.details().replace(alice_run.session_id, "ID") == missing.details().replace(absent, "ID")
        assert error_details(others) == error_details(missing) == {
            "reason": "SESSION_NOT_FOUND", "domain": "attest.dev", "metadata": {"field": "session_id"}}
    follow_up = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY, session_id=alice_run.session_id),
                              timeout=60, metadata=as_("alice"))
    assert follow_up.session_id == alice_run.session_id, "the owner continues her session"


def _retry_delay(error: grpc.RpcError) -> float:
    status = rpc_status.from_call(error)
    assert status is not None, "the refusal carries a google.rpc.Status"
    for detail in status.details:
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return info.retry_delay.ToNanoseconds() / 1e9
    raise AssertionError("no RetryInfo in the status details")


def test_runs_per_minute_are_limited_per_principal_with_retry_info(stub):
    for _ in range(PER_MINUTE):
        stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=60, metadata=as_("carol"))
    over = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=10, metadata=as_("carol"))
    assert over.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"at most {PER_MINUTE} per minute" in over.details()
    assert 0 < _retry_delay(over) <= 60
    assert error_details(over)["reason"] == "QUOTA_RUNS_PER_MINUTE"
    assert error_details(over)["metadata"] == {"limit": str(PER_MINUTE),
                                               "setting": "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL"}
    streamed = refused(stub.DiagnoseStream, gateway_pb2.DiagnoseStreamRequest(query=QUICK_QUERY), timeout=10,
                       metadata=as_("carol"))
    assert streamed.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Another caller is not held back by carol's runs.
    assert stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=60, metadata=as_("erin")).run_id


def test_runs_in_flight_are_limited_and_a_cancelled_run_gives_its_slot_back(stub):
    first = stub.DiagnoseStream(gateway_pb2.DiagnoseStreamRequest(query=QUERY), timeout=60, metadata=as_("dave"))
    assert next(first).HasField("event"), "the first run is under way"
    busy = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=10, metadata=as_("dave"))
    assert busy.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 1 at once" in busy.details() and _retry_delay(busy) > 0
    assert error_details(busy)["reason"] == "QUOTA_RUNS_IN_FLIGHT"
    first.cancel()
    deadline = time.monotonic() + 30
    while True:
        try:
            response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=60, metadata=as_("dave"))
            break
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "at once" in exc.details(), exc.details()
            assert time.monotonic() < deadline, "the cancelled run still holds dave's slot"
            time.sleep(0.2)
    assert response.run_id


def test_summary_is_bounded_and_pages_return_every_event_and_invocation_once(stub, alice_run):
    full = MessageToDict(stub.GetRun(gateway_pb2.GetRunRequest(run_id=alice_run.run_id), timeout=10,
                                     metadata=as_("alice")).audit)
    summary = MessageToDict(stub.GetRun(gateway_pb2.GetRunRequest(run_id=alice_run.run_id,
                                                                  view=gateway_pb2.RUN_VIEW_SUMMARY),
                                        timeout=10, metadata=as_("alice")).audit)
    assert summary["answer"] == full["answer"] and summary["status"] == full["status"]
    assert summary["principal"] == "alice" and summary["verdicts"]["effective_verdict"] == full["effective_verdict"]
    assert summary["counts"]["invocations"] == len(full["invocations"]) > 0
    assert summary["counts"]["events"] == len(full["events"])
    assert not {"events", "invocations", "self_evaluation"} & set(summary.keys())
    raw = [i["agent_result"] for i in full["invocations"] if i.get("agent_result")]
    assert raw and not any(text in str(summary) for text in raw), "no tool result in the summary"

    pages = _all_pages(stub, alice_run.run_id, "alice", page_size=2)
    assert all(len(p.audit["events"]) + len(p.audit["invocations"]) <= 2 for p in pages)
    assert [e["seq"] for p in pages for e in p.audit["events"]] == [e["seq"] for e in full["events"]]
    assert [i["invocation_id"] for p in pages for i in p.audit["invocations"]] == \
        [i["invocation_id"] for i in full["invocations"]]
    assert "self_evaluation" in pages[0].audit and not any("self_evaluation" in p.audit for p in pages[1:])
    assert MessageToDict(pages[0].audit)["self_evaluation"] == full["self_evaluation"]


def _all_pages(stub, run_id: str, principal: str, page_size: int) -> list[gateway_pb2.GetRunResponse]:
    pages = [stub.GetRun(gateway_pb2.GetRunRequest(run_id=run_id, page_size=page_size), timeout=10,
                         metadata=as_(principal))]
    while pages[-1].next_page_token:
        assert len(pages) < 1000, "paging does not end"
        pages.append(stub.GetRun(gateway_pb2.GetRunRequest(run_id=run_id, page_size=page_size,
                                                           page_token=pages[-1].next_page_token),
                                 timeout=10, metadata=as_(principal)))
    return pages


def test_a_run_larger_than_the_client_limit_is_read_whole_in_pages(stub, owners_cluster):
    store = RunStore(make_session_factory(make_engine(owners_cluster.database_url)))
    _, run_id = store.start_run(None, "payment-service 怎么了？", "MULTI_AGENT", principal="alice")
    store.record_events(run_id, [{"node": "executor", "phase": "INFO", "reason": f"step {n}"} for n in range(40)])
    chunk = "x" * 40_000
    with store._sessions() as session:  # a run as big as an unbounded plan could once make one
        session.execute(insert(ToolInvocationRow.__table__), [
            {"run_id": run_id, "tool_call_id": f"c{n}", "tool_name": "query_logs", "round": 0, "lifecycle": "READY",
             "evidence_status": "EVIDENCE_FOUND", "request": {}, "agent_result": f"{n}:{chunk}", "error": ""}
            for n in range(120)
        ])
        session.commit()

    too_big = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=run_id), timeout=30, metadata=as_("alice"))
    assert too_big.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, "the whole audit is past the client's limit"

    pages = _all_pages(stub, run_id, "alice", page_size=50)
    assert all(p.ByteSize() < CLIENT_LIMIT for p in pages)
    small = [p for p in pages if len(p.audit["events"]) + len(p.audit["invocations"]) > 1]
    assert small and all(p.ByteSize() <= PAGE_BYTES * 2 for p in small), "a page stops at the byte budget"
    results = [i["agent_result"] for p in pages for i in p.audit["invocations"]]
    assert [r.split(":", 1)[0] for r in results] == [str(n) for n in range(120)], "each invocation exactly once"
    assert len([e for p in pages for e in p.audit["events"]]) == 40

    summary = stub.GetRun(gateway_pb2.GetRunRequest(run_id=run_id, view=gateway_pb2.RUN_VIEW_SUMMARY), timeout=10,
                          metadata=as_("alice"))
    assert summary.ByteSize() < 20_000 and summary.audit["counts"]["invocations"] == 120

    wrong_run = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=run_id, page_token="bm90LWEtdG9rZW4"),
                        timeout=10, metadata=as_("alice"))
    assert wrong_run.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in wrong_run.details()
    summary_paged = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=run_id, view=gateway_pb2.RUN_VIEW_SUMMARY,
                                                                   page_size=3), timeout=10, metadata=as_("alice"))
    assert summary_paged.code() == grpc.StatusCode.INVALID_ARGUMENT
