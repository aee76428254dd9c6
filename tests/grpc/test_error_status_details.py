"""Every error carries a `google.rpc.Status` in its trailer: an `ErrorInfo`
with a stable reason in the domain `attest.dev`, a `BadRequest` naming the field for bad input, and
a `RetryInfo` only where waiting helps (the per-caller quotas); a budget of a run, an
unknown run or a bad field carries none. The human-readable details stay as they were.

First the mapping on a bare probe server, then the gateway's own refusals on its real server
(GatewayServicer behind the auth and error interceptors, a SQLite run store). No request below
reaches the diagnosis graph except the quota test's, which holds one run open."""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2
from gateway.cli import ask_and_print
from gateway.graph import DiagnosisOutcome
from gateway.servicer import GatewayServicer
from shared.config import GatewaySettings
from shared.error_details import describe, error_details
from shared.errors import ERROR_DOMAIN, PermissionDenied, Reason, ResourceExhausted
from shared.interceptors import ErrorMappingInterceptor

ERRORS = {
    "quota": ResourceExhausted("3 diagnoses in flight for alice; the limit is 3", retry_after_seconds=2.5,
                               reason=Reason.QUOTA_RUNS_IN_FLIGHT, metadata={"limit": 3}),
    "budget": ResourceExhausted("the run's evidence budget is used up", reason=Reason.RUN_EVIDENCE_BUDGET),
    "denied": PermissionDenied("only the gateway may call ExecutePlan", metadata={"service": "executor"}),
    "bug": RuntimeError("SELECT secret FROM internals"),
}


def _identity(data: bytes) -> bytes:
    return data


def _handler(request: bytes, context: grpc.ServicerContext) -> bytes:
    raise ERRORS[request.decode()]


@pytest.fixture()
def stub():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[ErrorMappingInterceptor()])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("attest.test.v1.Probe", {
        "Run": grpc.unary_unary_rpc_method_handler(_handler, request_deserializer=_identity,
                                                   response_serializer=_identity),
    })])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel.unary_unary("/attest.test.v1.Probe/Run", request_serializer=_identity,
                                  response_deserializer=_identity)
    finally:
        channel.close()
        server.stop(None)


def _fail(stub, key: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        stub(key.encode(), timeout=5)
    return raised.value


def _detail_types(error: grpc.RpcError) -> list[str]:
    status = rpc_status.from_call(error)
    assert status is not None, "every error carries a google.rpc.Status"
    return [detail.TypeName() for detail in status.details]


def test_a_quota_says_when_to_try_again(stub) -> None:
    error = _fail(stub, "quota")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "3 diagnoses in flight for alice; the limit is 3"
    status = rpc_status.from_call(error)
    info = error_details_pb2.RetryInfo()
    assert status is not None and status.details[-1].Unpack(info)
    assert info.retry_delay.ToNanoseconds() == 2_500_000_000
    assert error_details(error) == {"reason": "QUOTA_RUNS_IN_FLIGHT", "domain": ERROR_DOMAIN,
                                    "metadata": {"limit": "3"}, "retry_after_seconds": 2.5}


def test_a_budget_without_a_retry_time_has_no_retry_info(stub) -> None:
    error = _fail(stub, "budget")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "the run's evidence budget is used up"
    assert _detail_types(error) == ["google.rpc.ErrorInfo"], "waiting does not refill a run's budget"
    assert error_details(error)["reason"] == "RUN_EVIDENCE_BUDGET"


def test_permission_denied_keeps_its_message(stub) -> None:
    error = _fail(stub, "denied")
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "only the gateway may call ExecutePlan"
    assert error_details(error) == {"reason": "CALLER_NOT_ALLOWED", "domain": ERROR_DOMAIN,
                                    "metadata": {"service": "executor"}}


def test_an_internal_error_says_internal_and_nothing_of_its_text(stub) -> None:
    error = _fail(stub, "bug")
    assert (error.code(), error.details()) == (grpc.StatusCode.INTERNAL, "internal error")
    assert error_details(error) == {"reason": "INTERNAL", "domain": ERROR_DOMAIN, "metadata": {}}
    assert b"SELECT" not in rpc_status.from_call(error).SerializeToString()


# -- the gateway's refusals ------------------------------------------------------------------------

TOKENS = {"alice": "alice-token-3f9d2a", "bob": "bob-token-81c4e0"}


class _HeldGraph:
    """Stands in for the diagnosis graph: only the quota test gets this far, and its run is held
    until released, so the run stays in flight."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.addr = ""

    def run(self, run_id: str, *_args: Any, **_kwargs: Any) -> DiagnosisOutcome:
        self.entered.set()
        assert self.release.wait(10)
        return DiagnosisOutcome(run_id=run_id, status="FALLBACK")


@pytest.fixture()
def gateway(stores, gateway_server):
    runs, _ = stores
    settings = GatewaySettings(port=0, bind_host="127.0.0.1", max_query_chars=50,
                               max_runs_in_flight_per_principal=1, quota_busy_retry_seconds=3)
    graph = _HeldGraph()
    servicer = GatewayServicer(graph, runs, settings)  # type: ignore[arg-type]
    with gateway_server(servicer, settings, TOKENS) as (stub, port):
        try:
            graph.addr = f"127.0.0.1:{port}"
            yield stub, runs, graph
        finally:
            graph.release.set()


def as_(principal: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[principal]}")]


def refused(call, request, principal: str = "alice") -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        result = call(request, timeout=10, metadata=as_(principal) if principal else ())
        if not isinstance(result, gateway_pb2.DiagnoseResponse | gateway_pb2.GetRunResponse):
            list(result)  # a stream: the status comes with its first read
    return raised.value


def assert_bad_field(error: grpc.RpcError, reason: Reason, field: str, **metadata: str) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = error_details(error)
    assert (found["reason"], found["domain"]) == (reason.value, ERROR_DOMAIN), found
    assert found["metadata"] == {"field": field, **metadata}
    assert found["field_violations"] == [{"field": field, "description": error.details()}]
    assert "retry_after_seconds" not in found, "the same request fails again: no RetryInfo"
    assert describe(error) == f"INVALID_ARGUMENT: {error.details()} [{reason.value}; field {field}]"  # attest ask's line


BAD_DIAGNOSES = [
    pytest.param({"query": "x" * 51}, Reason.QUERY_TOO_LONG, "query", {"limit": "50", "length": "51"},
                 "query is 51 characters; the limit is 50", id="too-long-query"),
    pytest.param({"query": "   "}, Reason.QUERY_EMPTY, "query", {}, "query is empty", id="empty-query"),
    pytest.param({"query": "checkout-api \u202e5xx?"}, Reason.HIDDEN_CHARACTER, "query",
                 {"character": "U+202E", "position": "14"}, None, id="bidi-in-query"),
    pytest.param({"query": "ok?", "session_id": "s\x00"}, Reason.HIDDEN_CHARACTER, "session_id",
                 {"character": "U+0000", "position": "2"}, None, id="nul-in-session-id"),
    pytest.param({"query": "ok?", "client_label": "l" * 201}, Reason.IDENTIFIER_TOO_LONG, "client_label",
                 {"limit": "200", "length": "201"}, None, id="too-long-label"),
    pytest.param({"query": "ok?", "mode": 99}, Reason.UNKNOWN_ENUM_VALUE, "mode",
                 {"enum": "attest.common.v1.DiagnosisMode", "value": "99"}, None, id="unknown-mode"),
]


@pytest.mark.parametrize(("fields", "reason", "field", "metadata", "message"), BAD_DIAGNOSES)
@pytest.mark.parametrize("streamed", [False, True], ids=["Diagnose", "DiagnoseStream"])
def test_bad_input_to_diagnose_names_its_reason_and_field(gateway, fields, reason, field, metadata, message,
                                                          streamed) -> None:
    stub, _, graph = gateway
    call, request_type = ((stub.DiagnoseStream, gateway_pb2.DiagnoseStreamRequest) if streamed
                          else (stub.Diagnose, gateway_pb2.DiagnoseRequest))
    error = refused(call, request_type(**fields))
    assert_bad_field(error, reason, field, **metadata)
    if message is not None:
        assert error.details() == message, "the human-readable text is as before"
    assert not graph.entered.is_set(), "refused before any work starts"


BAD_GET_RUNS = [
    pytest.param({"run_id": ""}, Reason.FIELD_REQUIRED, "run_id", {}, id="no-run-id"),
    pytest.param({"run_id": "r" * 129}, Reason.IDENTIFIER_TOO_LONG, "run_id", {"limit": "128", "length": "129"},
                 id="too-long-run-id"),
    pytest.param({"run_id": "r1", "view": 7}, Reason.UNKNOWN_ENUM_VALUE, "view",
                 {"enum": "attest.gateway.v1.RunView", "value": "7"}, id="unknown-view"),
    pytest.param({"run_id": "r1", "view": gateway_pb2.RUN_VIEW_FULL, "page_size": -1}, Reason.INVALID_PAGE_SIZE,
                 "page_size", {}, id="negative-page-size"),
    pytest.param({"run_id": "r1", "view": gateway_pb2.RUN_VIEW_SUMMARY, "page_size": 5},
                 Reason.PAGING_NEEDS_FULL_VIEW, "page_size", {}, id="page-size-on-summary"),
]


@pytest.mark.parametrize(("fields", "reason", "field", "metadata"), BAD_GET_RUNS)
def test_bad_input_to_get_run_names_its_reason_and_field(gateway, fields, reason, field, metadata) -> None:
    stub, _, _ = gateway
    assert_bad_field(refused(stub.GetRun, gateway_pb2.GetRunRequest(**fields)), reason, field, **metadata)


def test_a_page_token_not_of_this_run_is_named(gateway) -> None:
    stub, runs, _ = gateway
    _, run_id = runs.start_run(None, "q", "MULTI_AGENT", principal="alice")
    error = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=run_id, view=gateway_pb2.RUN_VIEW_FULL,
                                                           page_token="bm90LWEtdG9rZW4"))
    assert_bad_field(error, Reason.INVALID_PAGE_TOKEN, "page_token")


def test_another_principals_run_is_answered_like_an_unknown_one(gateway) -> None:
    stub, runs, _ = gateway
    session_id, run_id = runs.start_run(None, "q", "MULTI_AGENT", principal="alice")
    others = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id=run_id), "bob")
    missing = refused(stub.GetRun, gateway_pb2.GetRunRequest(run_id="0" * len(run_id)), "bob")
    assert others.code() == missing.code() == grpc.StatusCode.NOT_FOUND
    expected = {"reason": "RUN_NOT_FOUND", "domain": ERROR_DOMAIN, "metadata": {"field": "run_id"}}
    assert error_details(others) == error_details(missing) == expected, "no BadRequest, no RetryInfo, no id"
    assert _detail_types(others) == ["google.rpc.ErrorInfo"]
    session = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query="ok?", session_id=session_id), "bob")
    assert session.code() == grpc.StatusCode.NOT_FOUND
    assert error_details(session) == {"reason": "SESSION_NOT_FOUND", "domain": ERROR_DOMAIN,
                                      "metadata": {"field": "session_id"}}


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer not-a-token"),),
                                      (("authorization", f"Basic {TOKENS['alice']}"),)],
                         ids=["no-token", "unknown-token", "wrong-scheme"])
def test_unauthenticated_carries_error_info_and_nothing_of_the_token(gateway, metadata) -> None:
    stub, _, _ = gateway
    with pytest.raises(grpc.RpcError) as raised:
        stub.Diagnose(gateway_pb2.DiagnoseRequest(query="ok?"), timeout=10, metadata=metadata)
    error = raised.value
    assert (error.code(), error.details()) == (grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")
    assert error_details(error) == {"reason": "UNAUTHENTICATED", "domain": ERROR_DOMAIN,
                                    "metadata": {"scheme": "Bearer"}}
    trailer = rpc_status.from_call(error).SerializeToString()
    assert b"token-" not in trailer and b"not-a-token" not in trailer


def test_runs_in_flight_quota_carries_its_reason_and_retry_info(gateway) -> None:
    stub, _, graph = gateway
    held = stub.Diagnose.future(gateway_pb2.DiagnoseRequest(query="ok?", mode=enums_pb2.DIAGNOSIS_MODE_MULTI_AGENT),
                                timeout=10, metadata=as_("alice"))
    assert graph.entered.wait(10)
    error = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query="ok?"))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_details(error) == {
        "reason": "QUOTA_RUNS_IN_FLIGHT", "domain": ERROR_DOMAIN, "retry_after_seconds": 3.0,
        "metadata": {"limit": "1", "setting": "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL"},
    }
    assert describe(error) == (f"RESOURCE_EXHAUSTED: {error.details()} [QUOTA_RUNS_IN_FLIGHT; retry in 3 s]")
    graph.release.set()
    assert held.result(timeout=10).status == "FALLBACK"


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "streamed"])
def test_attest_ask_prints_the_reason_and_the_field(gateway, capsys, as_json) -> None:
    _, _, graph = gateway
    code = ask_and_print(graph.addr, "x" * 51, token=TOKENS["alice"], as_json=as_json, timeout=10)
    assert code == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert ("error: INVALID_ARGUMENT: query is 51 characters; the limit is 50 [QUERY_TOO_LONG; field query] "
            f"(gateway {graph.addr})") in printed
