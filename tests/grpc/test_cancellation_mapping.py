"""The one cancellation type: `shared.errors.Cancelled` escaping any handler is
CANCELLED, logged at INFO without a traceback, for every service alike (ExecutePlan used to answer
a client cancel with INTERNAL and a traceback); no `except Exception` on the way can swallow it."""

from __future__ import annotations

import logging
from concurrent import futures

import grpc
import pytest

from shared.errors import Cancelled
from shared.interceptors import ErrorMappingInterceptor

METHOD = "/attest.test.v1.Probe/Run"


def _identity(data: bytes) -> bytes:
    return data


def _handler(request: bytes, context: grpc.ServicerContext) -> bytes:
    try:
        raise Cancelled("the diagnosis was cancelled")
    except Exception:  # noqa: BLE001 - what a careless catch-all looks like: it must not swallow it
        return b"carried on"


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
        yield channel.unary_unary(METHOD, request_serializer=_identity, response_deserializer=_identity)
    finally:
        channel.close()
        server.stop(None)


def test_cancelled_is_cancelled_logged_at_info_and_never_swallowed(stub, caplog) -> None:
    caplog.set_level(logging.INFO, logger="shared.interceptors")
    with pytest.raises(grpc.RpcError) as raised:
        stub(b"", timeout=5)
    assert raised.value.code() == grpc.StatusCode.CANCELLED
    assert raised.value.details() == "the diagnosis was cancelled"
    records = [r for r in caplog.records if r.name == "shared.interceptors"]
    assert records and all(r.levelno == logging.INFO and r.exc_info is None for r in records), records
    assert "cancelled by the caller" in records[0].getMessage()


def test_cancelled_is_no_exception_a_catch_all_could_take() -> None:
    assert issubclass(Cancelled, BaseException) and not issubclass(Cancelled, Exception)
