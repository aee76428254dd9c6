"""Domain errors reach the caller as their status: a used-up limit is RESOURCE_EXHAUSTED and, when
the limit frees up with time, carries `google.rpc.RetryInfo` saying when to try again (issue 20);
a known caller that may not call the method is PERMISSION_DENIED."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from shared.errors import PermissionDenied, ResourceExhausted
from shared.interceptors import ErrorMappingInterceptor

ERRORS = {
    "quota": ResourceExhausted("3 diagnoses in flight for alice; the limit is 3", retry_after_seconds=2.5),
    "budget": ResourceExhausted("the run's evidence budget is used up"),
    "denied": PermissionDenied("only the gateway may call ExecutePlan"),
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


def test_a_quota_says_when_to_try_again(stub) -> None:
    error = _fail(stub, "quota")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "3 diagnoses in flight for alice; the limit is 3"
    status = rpc_status.from_call(error)
    assert status is not None and len(status.details) == 1
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    assert info.retry_delay.ToNanoseconds() == 2_500_000_000


def test_a_budget_without_a_retry_time_has_no_retry_info(stub) -> None:
    error = _fail(stub, "budget")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "the run's evidence budget is used up"
    assert rpc_status.from_call(error) is None


def test_permission_denied_keeps_its_message(stub) -> None:
    error = _fail(stub, "denied")
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "only the gateway may call ExecutePlan"
