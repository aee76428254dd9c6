"""Connection settings of the Prometheus / Loki backends: service labels tried
in turn, bearer tokens and extra headers against a loopback HTTP server that refuses requests
without them, the start-up identity check, and per-tool health during an outage.

Basic auth and the CA file are tested against a real Prometheus in
tests/integration/test_prometheus_connection.py."""

from __future__ import annotations

import logging
import socket

import pytest
from grpc_health.v1 import health, health_pb2
from pydantic import ValidationError

from services.executor.tools.backend_factory import backend_health, build_backends, http_connection
from services.executor.tools.backend_readiness import BackendHealth, WrongBackendError
from services.executor.tools.backends import ToolBackends
from services.executor.tools.http_api import ConnectionConfigError, HttpConnection, Secret
from services.executor.tools.loki_backend import LokiLogsBackend
from services.executor.tools.prometheus_backend import PrometheusMetricsBackend
from services.executor.tools.registry import ToolBackendError, build_default_registry
from shared.config import ExecutorSettings
from tests.monitoring_api_server import END, PROM_BUILDINFO, START, TENANT, TOKEN, Guarded


@pytest.fixture()
def guarded():
    server = Guarded()
    yield server
    server.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _settings(monkeypatch, **env: str) -> ExecutorSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return ExecutorSettings(_env_file=None)  # type: ignore[call-arg]


# --- settings -----------------------------------------------------------------------------------


def test_settings_read_label_lists_headers_and_secrets_without_showing_them(monkeypatch) -> None:
    settings = _settings(
        monkeypatch, ATTEST_PROMETHEUS_URL="http://prom:9090", ATTEST_PROMETHEUS_SERVICE_LABELS="service, job,app",
        ATTEST_PROMETHEUS_BEARER_TOKEN=TOKEN, ATTEST_PROMETHEUS_STEP_SECONDS="15",
        ATTEST_LOKI_URL="http://loki:3100", ATTEST_LOKI_HEADERS=f"X-Scope-OrgID={TENANT}, X-Extra=a=b",
        ATTEST_LOKI_BASIC_AUTH_USER="attest", ATTEST_LOKI_BASIC_AUTH_PASSWORD_FILE="/run/secrets/loki",
    )
    assert settings.prometheus_service_labels == ["service", "job", "app"]
    assert settings.loki_service_labels == ["service"]
    assert settings.prometheus_step_seconds == 15
    assert {k: v.get_secret_value() for k, v in settings.loki_headers.items()} == {"X-Scope-OrgID": TENANT, "X-Extra": "a=b"}
    assert TOKEN not in repr(settings) and TENANT not in repr(settings)
    connection = http_connection(settings, "loki")
    assert connection.basic_auth_password == Secret(file="/run/secrets/loki")
    assert TENANT not in repr(connection)


@pytest.mark.parametrize(("env", "fragment"), [
    ({"ATTEST_PROMETHEUS_SERVICE_LABELS": "service,not-a-label"}, "not a label name"),
    ({"ATTEST_PROMETHEUS_SERVICE_LABELS": " , "}, "at least one label name"),
    ({"ATTEST_LOKI_HEADERS": f"X-Scope-OrgID {TENANT}"}, "NAME=VALUE"),
    ({"ATTEST_PROMETHEUS_STEP_SECONDS": "0"}, "prometheus_step_seconds"),
])
def test_bad_settings_stop_with_a_message_that_never_echoes_a_value(monkeypatch, env, fragment) -> None:
    with pytest.raises(ValidationError) as error:
        _settings(monkeypatch, **env)
    assert fragment in str(error.value)
    assert TENANT not in str(error.value)


@pytest.mark.parametrize(("env", "fragment"), [
    ({"ATTEST_PROMETHEUS_BEARER_TOKEN": "t", "ATTEST_PROMETHEUS_BASIC_AUTH_USER": "u",
      "ATTEST_PROMETHEUS_BASIC_AUTH_PASSWORD": "p"}, "not both"),
    ({"ATTEST_PROMETHEUS_BEARER_TOKEN": "t", "ATTEST_PROMETHEUS_BEARER_TOKEN_FILE": "/f"}, "_FILE, not both"),
    ({"ATTEST_PROMETHEUS_BASIC_AUTH_USER": "u"}, "needs both a user and a password"),
    ({"ATTEST_PROMETHEUS_CA_FILE": "/nonexistent/ca.pem"}, "CA file not found"),
])
def test_contradictory_connection_settings_are_refused(monkeypatch, env, fragment) -> None:
    settings = _settings(monkeypatch, ATTEST_PROMETHEUS_URL="http://prom:9090", **env)
    with pytest.raises(ConnectionConfigError, match=fragment):
        http_connection(settings, "prometheus")


def test_a_password_in_the_url_is_kept_out_of_the_source_name() -> None:
    backend = PrometheusMetricsBackend("https://attest:hunter2@prom.example:9090/")
    assert backend.source_name == "prometheus:https://prom.example:9090"


# --- bearer token and extra headers against a server that refuses requests without them ---------


def test_bearer_token_and_tenant_header_reach_prometheus_and_the_service_labels_are_tried_in_turn(guarded, monkeypatch) -> None:
    settings = _settings(
        monkeypatch, ATTEST_PROMETHEUS_URL=guarded.url, ATTEST_PROMETHEUS_BEARER_TOKEN=TOKEN,
        ATTEST_PROMETHEUS_HEADERS=f"X-Scope-OrgID={TENANT}", ATTEST_PROMETHEUS_SERVICE_LABELS="service,job",
        ATTEST_PROMETHEUS_STEP_SECONDS="120",
    )
    backend = PrometheusMetricsBackend(http_connection(settings, "prometheus"),
                                       service_labels=settings.prometheus_service_labels, min_step_seconds=120)
    readiness = backend.readiness()
    assert readiness.ok and "2.42.0" in readiness.detail
    assert backend.service_names() == ["pay-svc"]
    series = backend.query_range("pay-svc", None, START, END, 60)
    assert [s.metric for s in series] == ["cpu_usage_percent"]
    listed = [r for r in guarded.requests if r["path"] == "/api/v1/series"]
    assert [r["match[]"] for r in listed] == ['{service="pay-svc"}', '{job="pay-svc"}']  # service first, then job
    ranges = [r for r in guarded.requests if r["path"] == "/api/v1/query_range"]
    assert [r["query"] for r in ranges] == ['max(cpu_usage_percent{job="pay-svc"})']
    assert {r["step"] for r in ranges} == {"120s"}  # never finer than the configured step
    assert all(r["authorization"] == f"Bearer {TOKEN}" and r["tenant"] == TENANT for r in guarded.requests)


def test_bearer_token_file_is_read_at_each_request(guarded, tmp_path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    backend = PrometheusMetricsBackend(HttpConnection(
        guarded.url, 5, bearer_token=Secret(file=str(token_file)), headers={"X-Scope-OrgID": TENANT}))
    assert backend.readiness().ok
    guarded.token = "rotated-token"
    token_file.write_text("rotated-token")
    assert backend.readiness().ok


def test_without_the_token_the_start_up_check_refuses_and_names_the_url(guarded) -> None:
    backend = PrometheusMetricsBackend(HttpConnection(guarded.url, 5, headers={"X-Scope-OrgID": TENANT}))
    with pytest.raises(WrongBackendError, match="refused our credentials") as error:
        backend.readiness()
    assert guarded.url in str(error.value) and "HTTP 401" in str(error.value)


def test_loki_gets_the_token_and_tenant_header_and_tries_its_labels_in_turn(guarded) -> None:
    backend = LokiLogsBackend(HttpConnection(guarded.url, 5, bearer_token=Secret(TOKEN), headers={"X-Scope-OrgID": TENANT}),
                              service_labels=("service", "job"))
    assert backend.readiness().ok
    assert backend.service_names() == ["pay-svc"]
    without_tenant = LokiLogsBackend(HttpConnection(guarded.url, 5, bearer_token=Secret(TOKEN)))
    with pytest.raises(WrongBackendError, match="not a Loki API.*HTTP 400"):
        without_tenant.readiness()


# --- identity and readiness at start-up ---------------------------------------------------------


def test_a_url_that_answers_but_is_not_prometheus_or_loki_is_refused() -> None:
    server = Guarded(page=b"<html><title>Grafana</title>Welcome</html>")
    try:
        for backend, name in ((PrometheusMetricsBackend(server.url, 5), "Prometheus"), (LokiLogsBackend(server.url, 5), "Loki")):
            with pytest.raises(WrongBackendError) as error:
                backend.readiness()
            message = str(error.value)
            assert f"{name} at {server.url} is not a {name} API" in message
            assert "answered HTTP 200" in message and "Grafana" in message
    finally:
        server.close()


def test_prometheus_is_not_taken_for_loki(guarded) -> None:
    connection = HttpConnection(guarded.url, 5, bearer_token=Secret(TOKEN), headers={"X-Scope-OrgID": TENANT})
    guarded.answer = lambda path, params: (  # type: ignore[method-assign]
        (200, PROM_BUILDINFO) if path == "/api/v1/status/buildinfo" else (404, b"404 page not found\n"))
    with pytest.raises(WrongBackendError, match="not a Loki API"):
        LokiLogsBackend(connection).readiness()


def test_unreachable_or_not_ready_is_an_outage_not_a_refusal(guarded) -> None:
    down = PrometheusMetricsBackend(f"http://127.0.0.1:{_free_port()}", timeout_seconds=2).readiness()
    assert not down.ok and "unreachable" in down.detail and "Prometheus at http://127.0.0.1:" in down.detail
    guarded.ready = False
    starting = PrometheusMetricsBackend(HttpConnection(guarded.url, 5, bearer_token=Secret(TOKEN),
                                                       headers={"X-Scope-OrgID": TENANT})).readiness()
    assert not starting.ok and "not ready: HTTP 503" in starting.detail


# --- health during an outage, and the run's tool call ---------------------------------------------


def _status(servicer: health.HealthServicer, name: str) -> int:
    return servicer.Check(health_pb2.HealthCheckRequest(service=name), None).status


def test_an_unreachable_prometheus_is_not_serving_until_it_answers_and_calls_name_it(monkeypatch, tmp_path, caplog) -> None:
    port = _free_port()
    settings = _settings(
        monkeypatch, ATTEST_PROMETHEUS_URL=f"http://127.0.0.1:{port}", ATTEST_PROMETHEUS_BEARER_TOKEN=TOKEN,
        ATTEST_PROMETHEUS_HEADERS=f"X-Scope-OrgID={TENANT}", ATTEST_PROMETHEUS_SERVICE_LABELS="job",
        ATTEST_ESTATE_DATABASE_URL=f"sqlite:///{tmp_path / 'estate.db'}", ATTEST_BACKEND_TIMEOUT_SECONDS="2",
    )
    backends = build_backends(settings)
    monitor = backend_health(backends, settings)
    servicer = health.HealthServicer()
    name = BackendHealth.health_name("query_metrics")
    with caplog.at_level(logging.INFO):
        state = monitor.check_at_startup()  # no exception: the executor starts
        assert not state["query_metrics"].ok
        monitor.attach(servicer)
        assert _status(servicer, name) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert "query_logs" not in state  # the estate's logs are not probed

        registry = build_default_registry(ToolBackends(metrics=backends.metrics, logs=backends.logs))
        with pytest.raises(ToolBackendError, match="prometheus .*request failed"):
            registry.invoke("query_metrics", {"service": "pay-svc", "start": START.isoformat(), "end": END.isoformat()})

        server = Guarded(port=port)  # the outage ends: the next probe serves again
        try:
            monitor.recheck()
            assert _status(servicer, name) == health_pb2.HealthCheckResponse.SERVING
            result = registry.invoke("query_metrics", {"service": "pay-svc", "start": START.isoformat(), "end": END.isoformat()})
            assert result is not None
        finally:
            monitor.stop()
            server.close()
    assert "unavailable" in caplog.text and "is ready" in caplog.text
    assert TOKEN not in caplog.text and TENANT not in caplog.text
