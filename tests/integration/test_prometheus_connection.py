"""Connection settings against a real Prometheus 2.42: basic auth and the CA
file through Prometheus' own `--web.config.file` (TLS with a certificate made here, bcrypt
users), and the executor process's start-up check: a URL that is not Prometheus stops it with a
message naming the URL; an unreachable one starts it with that tool NOT_SERVING until it answers.

Prometheus is started by the test on a free loopback port with its own TSDB directory; the Debian
package's service plays no part. CI installs the package (.ci/run): a missing binary fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.launcher import REPO_ROOT
from services.executor.estate import load_estate
from services.executor.tools.backend_readiness import WrongBackendError
from services.executor.tools.backends import BackendError, utc_now
from services.executor.tools.http_api import HttpConnection, Secret
from services.executor.tools.prometheus_backend import PrometheusMetricsBackend
from shared.db.migrate import upgrade
from tests.monitoring_api_server import Guarded
from tests.prometheus_history import PrometheusProcess, free_port, stop_process

pytestmark = pytest.mark.integration

USER = "attest"
PASSWORD = "attest-test-password"
# bcrypt (cost 10) of PASSWORD, made once with Python 3.11's `crypt.crypt(PASSWORD,
# crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2**10))`: neither `bcrypt` nor `htpasswd` is
# installed here, and Prometheus' web config accepts only bcrypt hashes.
PASSWORD_BCRYPT = "$2b$10$HS4y9aQLwoPGNkZV38Z8oO34vtbW7Nc9HCUZnRtZLkSXv2Fj.9u4S"
SERVICE = "self-prometheus"


def _make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl CLI)."""
    ca_key, ca_cert = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca_cert),
            "-days", "2", "-subj", "/CN=attest-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(cert), "-days", "2", "-extfile", str(ext))
    return ca_cert, cert, key


@dataclass
class RealPrometheus:
    url: str
    ca_file: Path

    def connection(self, password: str = PASSWORD, ca_file: Path | None = None, timeout: float = 5.0) -> HttpConnection:
        return HttpConnection(self.url, timeout, basic_auth_user=USER, basic_auth_password=Secret(password),
                              ca_file=str(ca_file or self.ca_file))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[RealPrometheus]:
    root = tmp_path_factory.mktemp("prometheus")
    ca_cert, cert, key = _make_tls(root)
    port = free_port()
    (root / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  {USER}: '{PASSWORD_BCRYPT}'\n"
    )
    # It scrapes itself through the same TLS and basic auth, labelled as a service.
    (root / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: self\n    scheme: https\n"
        f"    tls_config:\n      ca_file: {ca_cert}\n"
        f"    basic_auth:\n      username: {USER}\n      password: {PASSWORD}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n        labels:\n          service: {SERVICE}\n"
    )
    running = RealPrometheus(url=f"https://127.0.0.1:{port}", ca_file=ca_cert)
    backend = PrometheusMetricsBackend(running.connection())

    def ready() -> bool:  # ready, and a scraped series carries the service label
        try:
            return backend.readiness().ok and SERVICE in backend.service_names()
        except (BackendError, WrongBackendError):
            return False  # still starting

    process = PrometheusProcess(
        root, port,
        [f"--config.file={root / 'prometheus.yml'}", f"--web.config.file={root / 'web.yml'}",
         f"--storage.tsdb.path={root / 'data'}"],
        ready,
    )
    process.start()
    try:
        yield running
    finally:
        process.stop()


def test_basic_auth_and_the_ca_file_reach_a_real_prometheus(prometheus) -> None:
    backend = PrometheusMetricsBackend(prometheus.connection(), service_labels=("service",))
    readiness = backend.readiness()
    assert readiness.ok and "version 2." in readiness.detail
    assert SERVICE in backend.service_names()
    end = utc_now()
    series = backend.query_range(SERVICE, "up", end - timedelta(minutes=2), end, 10)
    # `up` is read as the number of targets down: the one target, scraped through TLS, is up.
    assert [s.metric for s in series] == ["up:targets_down"] and series[0].points[-1][1] == 0.0


def test_a_wrong_password_is_refused_at_start_up(prometheus) -> None:
    with pytest.raises(WrongBackendError, match=r"refused our credentials .*HTTP 401") as error:
        PrometheusMetricsBackend(prometheus.connection(password="wrong")).readiness()
    assert "wrong" not in str(error.value) and PASSWORD not in str(error.value)


def test_a_certificate_from_another_ca_is_not_trusted(prometheus, tmp_path) -> None:
    other_ca, _, _ = _make_tls(tmp_path)
    readiness = PrometheusMetricsBackend(prometheus.connection(ca_file=other_ca)).readiness()
    assert not readiness.ok and "CERTIFICATE_VERIFY_FAILED" in readiness.detail


# --- the executor process ---------------------------------------------------------------------


def _executor_env(root: Path, **extra: str) -> dict[str, str]:
    database_url, estate_url = f"sqlite:///{root / 'attest.db'}", f"sqlite:///{root / 'estate.db'}"
    upgrade(database_url)
    load_estate(estate_url, REPO_ROOT / "demo" / "estate")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTEST_", "OTEL_"))}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")]),
        "ATTEST_DATABASE_URL": database_url, "ATTEST_ESTATE_DATABASE_URL": estate_url,
        "ATTEST_EXECUTOR_PORT": "0", "ATTEST_BACKEND_TIMEOUT_SECONDS": "2",
        "ATTEST_INSECURE": "1",  # a lone executor probed in plaintext: these tests are about Prometheus
        **extra,
    })
    return env


def _start_executor(env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-m", "services.executor"], env=env, cwd=REPO_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        parts = line.split()
        if parts[:2] == ["READY", "executor"]:
            return process, int(parts[2])
    process.wait(10)
    pytest.fail(f"executor exited {process.returncode} before READY: {process.stderr.read() if process.stderr else ''}")


def _health(port: int, service: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_the_executor_refuses_to_start_on_a_url_that_is_not_prometheus(tmp_path) -> None:
    page = Guarded(page=b"<!doctype html><title>Grafana</title>")
    try:
        env = _executor_env(tmp_path, ATTEST_PROMETHEUS_URL=page.url)
        done = subprocess.run([sys.executable, "-m", "services.executor"], env=env, cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        page.close()
    assert done.returncode == 1
    assert "READY" not in done.stdout
    assert f"Prometheus at {page.url} is not a Prometheus API" in done.stderr
    assert "answered HTTP 200" in done.stderr and "Traceback" not in done.stderr


def test_the_executor_starts_with_its_settings_against_the_real_prometheus(prometheus, tmp_path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    env = _executor_env(
        tmp_path, ATTEST_PROMETHEUS_URL=prometheus.url, ATTEST_PROMETHEUS_BASIC_AUTH_USER=USER,
        ATTEST_PROMETHEUS_BASIC_AUTH_PASSWORD_FILE=str(password_file), ATTEST_PROMETHEUS_CA_FILE=str(prometheus.ca_file),
    )
    process, port = _start_executor(env)
    try:
        assert _health(port, "attest.executor.tools.query_metrics") == health_pb2.HealthCheckResponse.SERVING
    finally:
        stop_process(process, 15)
    assert PASSWORD not in (process.stderr.read() if process.stderr else "")


def test_an_unreachable_prometheus_starts_not_serving_for_its_tool_and_recovers(tmp_path) -> None:
    port = free_port()
    env = _executor_env(tmp_path, ATTEST_PROMETHEUS_URL=f"http://127.0.0.1:{port}",
                        ATTEST_PROMETHEUS_BEARER_TOKEN="s3cret-token-value",
                        ATTEST_PROMETHEUS_HEADERS="X-Scope-OrgID=tenant-a", ATTEST_BACKEND_RECHECK_SECONDS="0.5")
    process, grpc_port = _start_executor(env)
    server = None
    try:
        assert _health(grpc_port, "attest.executor.tools.query_metrics") == health_pb2.HealthCheckResponse.NOT_SERVING
        # The executor itself serves: the other tools work, and the failed one is named per run.
        assert _health(grpc_port, "") == health_pb2.HealthCheckResponse.SERVING
        assert _health(grpc_port, "attest.executor.v1.ExecutorService") == health_pb2.HealthCheckResponse.SERVING
        server = Guarded(port=port)  # the outage ends; no restart needed
        deadline = time.monotonic() + 20
        while _health(grpc_port, "attest.executor.tools.query_metrics") != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "the tool never came back to SERVING"
            time.sleep(0.2)
    finally:
        stop_process(process, 15)
        if server is not None:
            server.close()
    stderr = process.stderr.read() if process.stderr else ""
    assert "query_metrics is unavailable" in stderr and f"127.0.0.1:{port}" in stderr
    assert "s3cret-token-value" not in stderr and "tenant-a" not in stderr
