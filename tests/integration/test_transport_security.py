"""Mutual TLS and honest health over the six real processes the launcher starts:
only the gateway's certificate opens a role; health follows databases and roles."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from gateway.launcher import INTRUDER, REPO_ROOT, Cluster
from shared.tls import channel_credentials
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# The audit store is a SQLite file here whatever ATTEST_TEST_DATABASE says: the test takes it away.
FAST_READINESS = {"ATTEST_READINESS_INTERVAL_SECONDS": "0.3", "ATTEST_READINESS_TIMEOUT_SECONDS": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, otlp_receiver) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("transport")
    running = start_cluster(root, otlp_receiver.endpoint, FAST_READINESS)
    running.root = root
    try:
        yield running
    finally:
        running.stop()


def _health(channel: grpc.Channel, service: str = "") -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def _eventually(read: Callable[[], int], expected: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    seen = read()
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = read()
    assert seen == expected, f"health stayed {health_pb2.HealthCheckResponse.ServingStatus.Name(seen)}"


def _execute(channel: grpc.Channel) -> executor_pb2.ExecutePlanResponse:
    return executor_pb2_grpc.ExecutorServiceStub(channel).ExecutePlan(
        executor_pb2.ExecutePlanRequest(run_id="run-of-someone-else", query="payment-service CPU"), timeout=10)


def test_certificates_are_throwaway_files_in_the_cluster_tls_dir(cluster):
    assert cluster.tls_dir is not None
    names = {path.name for path in cluster.tls_dir.iterdir()}
    for identity in ("gateway", "planner", "executor", "gatekeeper", "verifier", "composer", INTRUDER):
        assert {f"{identity}.pem", f"{identity}-key.pem"} <= names
    assert "ca.pem" in names


def test_the_intruder_certificate_is_permission_denied_by_the_executor(cluster):
    with cluster.channel("executor", identity=INTRUDER) as channel:
        with pytest.raises(grpc.RpcError) as info:
            _execute(channel)
        assert _health(channel) == SERVING, "health stays open to authenticated peers"
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "intruder may not call the executor" in info.value.details()


@pytest.mark.parametrize("role", ["planner", "executor", "gatekeeper", "verifier", "composer"])
def test_a_role_refuses_a_client_without_a_certificate_and_one_without_tls(cluster, role):
    assert cluster.tls_dir is not None
    no_certificate = grpc.secure_channel(cluster.address(role), channel_credentials(cluster.tls_dir / "ca.pem"))
    for channel in (no_certificate, grpc.insecure_channel(cluster.address(role))):
        with channel, pytest.raises(grpc.RpcError) as info:
            _health(channel)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_gateway_certificate_is_admitted(cluster):
    with cluster.channel("gatekeeper") as channel:
        rules = gatekeeper_pb2_grpc.GatekeeperServiceStub(channel).ListRules(
            gatekeeper_pb2.ListRulesRequest(), timeout=10)
    assert rules.rules


def test_a_role_is_not_serving_while_its_database_is_gone_and_serving_again_after(cluster):
    database = cluster.root / "attest.db"
    away = cluster.root / "attest.db.away"
    with cluster.channel("gatekeeper") as gatekeeper:
        assert _health(gatekeeper) == SERVING
        shutil.move(database, away)
        try:
            _eventually(lambda: _health(gatekeeper), NOT_SERVING)
            assert _health(gatekeeper, "attest.gatekeeper.v1.GatekeeperService") == NOT_SERVING
            assert _health(gatekeeper, "liveness") == SERVING, "unready, not dead: no restart loop"
        finally:
            shutil.move(away, database)
        _eventually(lambda: _health(gatekeeper), SERVING)
    with cluster.channel("gateway") as gateway:
        _eventually(lambda: _health(gateway), SERVING)


def test_the_gateway_is_not_serving_while_the_verifier_is_dead_and_serving_after_a_restart(cluster):
    with cluster.channel("gateway") as gateway:
        _eventually(lambda: _health(gateway), SERVING)
        verifier = cluster.processes["verifier"].process
        verifier.send_signal(signal.SIGKILL)
        verifier.wait(timeout=10)
        _eventually(lambda: _health(gateway), NOT_SERVING)
        assert _health(gateway, "attest.gateway.v1.GatewayService") == NOT_SERVING
        cluster.restart("verifier")  # same port, same certificates
        _eventually(lambda: _health(gateway), SERVING)


def test_a_role_without_certificates_or_insecure_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTEST_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")])
    env["ATTEST_PLANNER_PORT"] = "0"
    done = subprocess.run([sys.executable, "-m", "services.planner"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "READY" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        "error: planner: no TLS certificate configured: set ATTEST_TLS_CA_FILE, ATTEST_TLS_CERT_FILE, "
        "ATTEST_TLS_KEY_FILE, or ATTEST_INSECURE=1 to run in plaintext (local development only)"
    ]


def test_insecure_starts_plaintext_without_certificates(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTEST_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")])
    env |= {"ATTEST_PLANNER_PORT": "0", "ATTEST_INSECURE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "services.planner"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        assert ready[:2] == ["READY", "planner"], ready
        with grpc.insecure_channel(f"127.0.0.1:{ready[2]}") as channel:
            assert _health(channel) == SERVING
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_the_launcher_makes_no_certificates_with_insecure():
    assert Cluster({"ATTEST_INSECURE": "1"}).insecure
    assert not Cluster({"ATTEST_INSECURE": "0"}).insecure

