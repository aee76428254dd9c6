"""The shared server runtime on real gRPC servers (ephemeral ports) and a real OTLP receiver."""

from __future__ import annotations

import io
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from shared.channels import ChannelPool, child_timeout, wait_until_ready
from shared.config import ServiceSettings
from shared.errors import FailedPrecondition, InvalidInput, NotFound, Unauthenticated
from shared.interceptors import BearerAuthInterceptor
from shared.logging_setup import JsonLineFormatter
from shared.server import RunningServer, build_server
from shared.telemetry import init_telemetry, shutdown_telemetry
from tests.otlp_receiver import OtlpReceiver

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE = "attest.test.v1.EchoService"
TOKEN = "s3cret-token"
CALL_TIMEOUT = 5.0

DOMAIN_ERRORS = {
    "InvalidInput": (InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    "NotFound": (NotFound, grpc.StatusCode.NOT_FOUND),
    "Unauthenticated": (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    "FailedPrecondition": (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
}


# --- a tiny application service with str (de)serializers --------------------------------------
# If an interceptor dropped the method's (de)serializers, Echo would see bytes and answer
# "echo:b'...'" (or fail to serialize a str): the tests would notice.


def echo(request: str, context: grpc.ServicerContext) -> str:
    return f"echo:{request}"


def fail(request: str, context: grpc.ServicerContext) -> str:
    raise RuntimeError("connection to postgres://admin:hunter2@db failed")


def raise_domain_error(request: str, context: grpc.ServicerContext) -> str:
    error_type, _ = DOMAIN_ERRORS[request]
    raise error_type(f"{request} says no")


def deny(request: str, context: grpc.ServicerContext) -> str:
    context.abort(grpc.StatusCode.PERMISSION_DENIED, "not yours")


def count(request: str, context: grpc.ServicerContext) -> Iterator[str]:
    for index in range(int(request)):
        yield str(index)


def count_then_fail(request: str, context: grpc.ServicerContext) -> Iterator[str]:
    yield "0"
    raise RuntimeError("stream broke")


def remaining_budget(request: str, context: grpc.ServicerContext) -> str:
    return repr(child_timeout(context, default=7.0))


def register_echo(server: grpc.Server) -> None:
    codec = {"request_deserializer": bytes.decode, "response_serializer": str.encode}
    unary = {
        name: grpc.unary_unary_rpc_method_handler(behavior, **codec)
        for name, behavior in {
            "Echo": echo,
            "Fail": fail,
            "RaiseDomainError": raise_domain_error,
            "Deny": deny,
            "RemainingBudget": remaining_budget,
        }.items()
    }
    stream = {
        name: grpc.unary_stream_rpc_method_handler(behavior, **codec)
        for name, behavior in {"Count": count, "CountThenFail": count_then_fail}.items()
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {**unary, **stream}),)
    )


def settings() -> ServiceSettings:
    return ServiceSettings(port=0, max_workers=4, shutdown_grace_seconds=1.0)


@pytest.fixture()
def start_server():
    started: list[RunningServer] = []

    def start(**kwargs) -> RunningServer:
        running = build_server(
            service_name="echo",
            settings=settings(),
            register=register_echo,
            service_names=[SERVICE],
            **kwargs,
        )
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop(None)


@pytest.fixture()
def pool():
    channels = ChannelPool()
    yield channels
    channels.close()


def unary(channel: grpc.Channel, method: str):
    return channel.unary_unary(f"/{SERVICE}/{method}")


def stream(channel: grpc.Channel, method: str):
    return channel.unary_stream(f"/{SERVICE}/{method}")


def health_status(channel: grpc.Channel, service: str = "", metadata=None) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(
        health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT, metadata=metadata
    ).status


# --- health, reflection, shutdown -----------------------------------------------------------


def test_health_reports_serving_then_not_serving_on_stop(start_server, pool):
    running = start_server()
    assert running.port > 0
    channel = pool.get(f"127.0.0.1:{running.port}")
    assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
    assert health_status(channel, SERVICE) == health_pb2.HealthCheckResponse.SERVING

    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=SERVICE), timeout=30
    )
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    stopper = threading.Thread(target=running.stop, args=(1.0,))
    stopper.start()
    try:
        # Load balancers must see NOT_SERVING before the server goes away.
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        stopper.join()
    with pytest.raises(grpc.RpcError) as refused:
        unary(channel, "Echo")(b"late", timeout=CALL_TIMEOUT)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_reflection_lists_the_application_and_health_services(start_server, pool):
    running = start_server(extra_interceptors=[BearerAuthInterceptor(TOKEN)])
    channel = pool.get(f"127.0.0.1:{running.port}")
    responses = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=CALL_TIMEOUT
    )
    names = {service.name for service in next(responses).list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names


# --- bearer authentication ----------------------------------------------------------------------


def test_bearer_token_required_for_application_calls_only(start_server, pool):
    running = start_server(extra_interceptors=[BearerAuthInterceptor(TOKEN)])
    channel = pool.get(f"127.0.0.1:{running.port}")

    # Health probes carry no token (Kubernetes cannot send one).
    assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING

    for metadata in (None, [("authorization", "Bearer wrong")], [("authorization", TOKEN)]):
        with pytest.raises(grpc.RpcError) as denied:
            unary(channel, "Echo")(b"hi", timeout=CALL_TIMEOUT, metadata=metadata)
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as denied_stream:
            list(stream(channel, "Count")(b"3", timeout=CALL_TIMEOUT, metadata=metadata))
        assert denied_stream.value.code() == grpc.StatusCode.UNAUTHENTICATED

    good = [("authorization", f"Bearer {TOKEN}")]
    assert unary(channel, "Echo")(b"hi", timeout=CALL_TIMEOUT, metadata=good) == b"echo:hi"
    assert list(stream(channel, "Count")(b"3", timeout=CALL_TIMEOUT, metadata=good)) == [
        b"0",
        b"1",
        b"2",
    ]


def test_no_token_configured_means_no_authentication(start_server, pool):
    running = start_server(extra_interceptors=[BearerAuthInterceptor(None)])
    channel = pool.get(f"127.0.0.1:{running.port}")
    assert unary(channel, "Echo")(b"hi", timeout=CALL_TIMEOUT) == b"echo:hi"


# --- error mapping --------------------------------------------------------------------------------


def test_unhandled_exception_becomes_internal_without_leaking_details(start_server, pool, caplog):
    running = start_server()
    channel = pool.get(f"127.0.0.1:{running.port}")
    with caplog.at_level(logging.ERROR, logger="shared.interceptors"):
        with pytest.raises(grpc.RpcError) as failed:
            unary(channel, "Fail")(b"x", timeout=CALL_TIMEOUT)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "hunter2" not in failed.value.details()
    assert len(failed.value.details()) < 80
    logged = [r for r in caplog.records if r.exc_info and f"/{SERVICE}/Fail" in r.getMessage()]
    assert logged, "the unhandled error was not logged"
    assert "hunter2" in str(logged[0].exc_info[1])


@pytest.mark.parametrize("error_name", sorted(DOMAIN_ERRORS))
def test_domain_errors_map_to_their_status_with_message(start_server, pool, error_name):
    running = start_server()
    channel = pool.get(f"127.0.0.1:{running.port}")
    with pytest.raises(grpc.RpcError) as failed:
        unary(channel, "RaiseDomainError")(error_name.encode(), timeout=CALL_TIMEOUT)
    assert failed.value.code() == DOMAIN_ERRORS[error_name][1]
    assert failed.value.details() == f"{error_name} says no"


def test_explicit_abort_keeps_its_status(start_server, pool):
    running = start_server()
    channel = pool.get(f"127.0.0.1:{running.port}")
    with pytest.raises(grpc.RpcError) as failed:
        unary(channel, "Deny")(b"x", timeout=CALL_TIMEOUT)
    assert failed.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert failed.value.details() == "not yours"


def test_exception_in_a_stream_becomes_internal_after_the_sent_items(start_server, pool):
    running = start_server()
    channel = pool.get(f"127.0.0.1:{running.port}")
    received = []
    with pytest.raises(grpc.RpcError) as failed:
        for item in stream(channel, "CountThenFail")(b"x", timeout=CALL_TIMEOUT):
            received.append(item)
    assert received == [b"0"]
    assert failed.value.code() == grpc.StatusCode.INTERNAL


# --- channels and deadlines -------------------------------------------------------------------


def test_channel_pool_caches_per_address(pool):
    assert pool.get("127.0.0.1:1") is pool.get("127.0.0.1:1")
    assert pool.get("127.0.0.1:1") is not pool.get("127.0.0.1:2")


def test_child_timeout_follows_the_incoming_deadline(start_server, pool):
    running = start_server()
    channel = pool.get(f"127.0.0.1:{running.port}")
    wait_until_ready(channel, timeout=CALL_TIMEOUT)
    with_deadline = float(unary(channel, "RemainingBudget")(b"", timeout=2.0))
    # The caller's 2 s budget, not the 7 s default (gRPC may round the deadline up slightly).
    assert 0.05 <= with_deadline < 3.0
    without_deadline = float(unary(channel, "RemainingBudget")(b""))
    assert without_deadline == 7.0
    assert child_timeout(None, default=0.0) == 0.05


def test_wait_until_ready_gives_up_on_a_dead_address(pool):
    with pytest.raises(TimeoutError):
        wait_until_ready(pool.get("127.0.0.1:1"), timeout=0.3)


# --- tracing and logs -----------------------------------------------------------------------------


def test_one_trace_from_client_span_to_server_span_and_log_line():
    with OtlpReceiver() as receiver:
        server_telemetry = init_telemetry("echo-server", receiver.endpoint)
        server_tp = server_telemetry.tracer_provider
        client_telemetry = init_telemetry("echo-client", receiver.endpoint)
        client_tp = client_telemetry.tracer_provider
        log_stream = io.StringIO()
        log_handler = logging.StreamHandler(log_stream)
        log_handler.setFormatter(JsonLineFormatter("echo-server"))
        interceptor_log = logging.getLogger("shared.interceptors")
        interceptor_log.addHandler(log_handler)
        running = build_server(
            service_name="echo",
            settings=settings(),
            register=register_echo,
            service_names=[SERVICE],
            tracer_provider=server_tp,
        )
        pool = ChannelPool(tracer_provider=client_tp)
        try:
            channel = pool.get(f"127.0.0.1:{running.port}")
            assert unary(channel, "Echo")(b"traced", timeout=CALL_TIMEOUT) == b"echo:traced"
            with pytest.raises(grpc.RpcError):
                unary(channel, "Fail")(b"x", timeout=CALL_TIMEOUT)
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        finally:
            interceptor_log.removeHandler(log_handler)
            pool.close()
            running.stop(None)
            shutdown_telemetry(client_telemetry)
            shutdown_telemetry(server_telemetry)

        def of(spans, kind, method):
            return [s for s in spans if s["kind"] == kind and s["name"] == f"/{SERVICE}/{method}"]

        def echo_pair(spans):
            clients = of(spans, "SPAN_KIND_CLIENT", "Echo")
            servers = of(spans, "SPAN_KIND_SERVER", "Echo")
            return (clients[0], servers[0]) if clients and servers else None

        client_span, server_span = receiver.wait_for(echo_pair, timeout=10)
        assert client_span["service_name"] == "echo-client"
        assert server_span["service_name"] == "echo-server"
        assert server_span["trace_id"] == client_span["trace_id"]
        assert server_span["parent_span_id"] == client_span["span_id"]

        fail_server = receiver.wait_for(lambda spans: of(spans, "SPAN_KIND_SERVER", "Fail"))[0]
        assert fail_server["status_code"] == "STATUS_CODE_ERROR"
        # Health probes are deliberately not traced.
        assert not [s for s in receiver.spans() if "grpc.health" in s["name"]]

    # The error log line written while serving Fail joins that server span.
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    error_lines = [line for line in lines if line["level"] == "ERROR"]
    assert error_lines, log_stream.getvalue()
    assert error_lines[0]["trace_id"] == fail_server["trace_id"]
    assert error_lines[0]["span_id"] == fail_server["span_id"]
    assert error_lines[0]["service"] == "echo-server"


# --- serve(): the process entry point ---------------------------------------------------------

SERVE_SCRIPT = """
from shared.config import ServiceSettings
from shared.logging_setup import configure_logging
from shared.server import serve

configure_logging("probe", "INFO")
serve(
    service_name="probe",
    settings=ServiceSettings(port=0, shutdown_grace_seconds=1.0),
    register=lambda server: None,
    service_names=[],
)
"""


def read_line(process: subprocess.Popen, timeout: float) -> str:
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=deadline - time.monotonic()):
            return process.stdout.readline()
    raise AssertionError(f"no output within {timeout}s")


def test_serve_announces_ready_and_stops_on_sigterm(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTEST_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = read_line(process, timeout=30).split()
        assert ready[:2] == ["READY", "probe"], ready
        port = int(ready[2])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log_lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(
        line["message"] == f"serving probe on 127.0.0.1:{port}" and line["service"] == "probe"
        for line in log_lines
    ), stderr
