"""Streams nobody authenticated cannot starve a diagnosis; ports are never shared; `make run`
survives a crashed role, restarts one on request, and keeps its keys to itself.

Real processes throughout: the session's TLS cluster (conftest.py) for the stream limits at their
defaults, and `python -m gateway.launcher` itself (as `make run` starts it) with a short idle
timeout and a fixed executor port for the rest.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from attest.gateway.v1 import gateway_pb2
from gateway.launcher import REPO_ROOT, TLS_PARENT
from services.executor.estate import load_estate
from shared.config import CommonSettings, ServiceSettings
from shared.db.migrate import upgrade
from shared.server import build_server
from shared.stream_limits import FIRST_REQUEST_SECONDS
from tests.security import attacks
from tests.security.conftest import identity_channel, token

pytestmark = pytest.mark.integration

DEFAULTS = CommonSettings.model_construct()
PER_PEER = DEFAULTS.stream_max_per_peer
# More streams than a server has workers: before the limits, these held every one of them.
ATTACK_STREAMS = DEFAULTS.max_workers + 2
IDLE_TIMEOUT = 2.0
# Generous: a diagnosis of the demo estate takes seconds.
DIAGNOSIS_DEADLINE = 60.0


class OpenStream:
    """One stream opened and left idle; a thread records how it ended, if it did."""

    def __init__(self, call: grpc.Call, kind: str) -> None:
        self.call = call
        self.kind = kind
        self.first_message = threading.Event()
        self.ended = threading.Event()
        self.code: grpc.StatusCode | None = None
        self.details = ""
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            for _ in self.call:  # type: ignore[attr-defined]
                self.first_message.set()
            self.code = grpc.StatusCode.OK
        except grpc.RpcError as error:
            self.code, self.details = error.code(), error.details() or ""
        finally:
            self.ended.set()


def _idle_requests(stop: threading.Event) -> Iterator[reflection_pb2.ServerReflectionRequest]:
    """A reflection client that opens the stream and never asks anything."""
    stop.wait()
    return
    yield  # a generator


@dataclass
class Streams:
    channel: grpc.Channel
    opened: list[OpenStream] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def watch(self, count: int) -> None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        for _ in range(count):
            self.opened.append(OpenStream(stub.Watch(health_pb2.HealthCheckRequest(service="")), "watch"))

    def reflection(self, count: int) -> None:
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        for _ in range(count):
            self.opened.append(OpenStream(stub.ServerReflectionInfo(_idle_requests(self._stop)), "reflection"))

    def refused(self) -> list[OpenStream]:
        return [s for s in self.opened if s.ended.is_set() and s.code == grpc.StatusCode.RESOURCE_EXHAUSTED]

    def still_open(self) -> list[OpenStream]:
        return [s for s in self.opened if not s.ended.is_set()]

    def wait_refused(self, count: int, timeout: float = 30.0) -> list[OpenStream]:
        deadline = time.monotonic() + timeout
        while len(self.refused()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.refused()

    def close(self) -> None:
        self._stop.set()
        for stream in self.opened:
            stream.call.cancel()
        self.channel.close()


def _attack(channel: grpc.Channel) -> Streams:
    """Two idle reflection streams, then health watches up to ATTACK_STREAMS, from one peer."""
    streams = Streams(channel)
    streams.reflection(2)
    time.sleep(0.5)  # the reflection streams first, so that the watches are the surplus
    streams.watch(ATTACK_STREAMS - 2)
    return streams


def _assert_limited(streams: Streams) -> None:
    refused = streams.wait_refused(ATTACK_STREAMS - PER_PEER)
    assert len(refused) == ATTACK_STREAMS - PER_PEER, (
        f"{len(refused)} of {ATTACK_STREAMS} idle streams from one peer refused; expected all beyond {PER_PEER}")
    assert all("too many open streams from this peer" in s.details for s in refused)
    assert len(streams.still_open()) == PER_PEER
    assert {s.kind for s in streams.still_open()} == {"watch", "reflection"}


# --- 1. streams ---------------------------------------------------------------------------------

def _assert_a_diagnosis_completes(cluster, principal: str) -> None:
    """A diagnosis through the gateway is answered, within its normal deadline, and the gateway
    still says SERVING."""
    with grpc.insecure_channel(cluster.gateway_addr) as front:
        outcome, answered = attacks.call(
            attacks.gateway(front).Diagnose,
            gateway_pb2.DiagnoseRequest(query="checkout-api 现在正常吗？"),
            token(principal), timeout=DIAGNOSIS_DEADLINE)
        assert outcome.code == grpc.StatusCode.OK, outcome
        # The roles answered the gateway: no fallback for want of one.
        assert answered is not None and answered.status == "COMPLETED", answered
        assert attacks.gateway_health(front) == health_pb2.HealthCheckResponse.SERVING


def test_idle_streams_without_a_token_do_not_stop_a_diagnosis(secure_cluster) -> None:
    streams = _attack(grpc.insecure_channel(secure_cluster.gateway_addr))
    try:
        _assert_a_diagnosis_completes(secure_cluster, "alice")
        _assert_limited(streams)
    finally:
        streams.close()


@contextmanager
def _bodiless_calls(channel: grpc.Channel, method: str, count: int = ATTACK_STREAMS) -> Iterator[list[OpenStream]]:
    """`count` calls of a unary method that send their headers (no token) and never the request
    body, held open for the block: a unary method's worker waits for the body before any handler
    code runs. The channel is closed and every call cancelled after it."""
    stop = threading.Event()
    with channel:
        call = channel.stream_unary(method, request_serializer=lambda message: message,
                                    response_deserializer=lambda data: data)
        held = [OpenStream(_FutureCall(call.future(_idle_requests(stop))), "bodiless") for _ in range(count)]
        try:
            yield held
        finally:
            stop.set()
            for opened in held:
                opened.call.cancel()


class _FutureCall:
    """A unary response future read like a stream of one message, for OpenStream."""

    def __init__(self, future: grpc.Future) -> None:
        self._future = future

    def __iter__(self) -> Iterator[object]:
        yield self._future.result()

    def cancel(self) -> None:
        self._future.cancel()


def test_diagnoses_that_never_send_a_body_without_a_token_hold_no_worker(secure_cluster) -> None:
    with _bodiless_calls(grpc.insecure_channel(secure_cluster.gateway_addr),
                         "/attest.gateway.v1.GatewayService/Diagnose") as held:
        _assert_a_diagnosis_completes(secure_cluster, "alice")
        # Each was refused at once, without waiting for the body it never sent.
        for call in held:
            assert call.ended.wait(10), "a bodiless call without a token is still open"
            assert call.code == grpc.StatusCode.UNAUTHENTICATED, (call.code, call.details)


def test_health_checks_that_never_send_a_body_hold_no_worker_and_are_cut(secure_cluster) -> None:
    """Health answers without a token, so a bodiless Check cannot be refused for want of one: it
    waits for its request apart from the application's workers, and is cancelled beyond the
    per-peer limit within seconds, and in any case once its request is overdue."""
    with _bodiless_calls(grpc.insecure_channel(secure_cluster.gateway_addr), "/grpc.health.v1.Health/Check") as held:
        _assert_a_diagnosis_completes(secure_cluster, "alice")
        deadline = time.monotonic() + 10
        while sum(not call.ended.is_set() for call in held) > PER_PEER and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(not call.ended.is_set() for call in held) <= PER_PEER
        for call in held:
            assert call.ended.wait(FIRST_REQUEST_SECONDS + 10), "a bodiless health check is still open"
            assert call.code == grpc.StatusCode.CANCELLED, (call.code, call.details)


def test_an_intruders_calls_that_never_send_a_body_hold_no_executor_worker(secure_cluster) -> None:
    """A CA-signed certificate that is not the gateway's is refused before the request is read."""
    with _bodiless_calls(identity_channel(secure_cluster, "executor", "intruder"),
                         "/attest.executor.v1.ExecutorService/ExecutePlan") as held:
        _assert_a_diagnosis_completes(secure_cluster, "bob")
        for call in held:
            assert call.ended.wait(10), "an intruder's bodiless call is still open"
            assert call.code == grpc.StatusCode.PERMISSION_DENIED, (call.code, call.details)


def test_a_certified_intruder_cannot_hold_the_executors_workers(secure_cluster) -> None:
    streams = _attack(identity_channel(secure_cluster, "executor", "intruder"))
    try:
        _assert_a_diagnosis_completes(secure_cluster, "bob")
        _assert_limited(streams)
    finally:
        streams.close()


def test_the_total_limit_holds_across_peers_and_unary_calls_keep_their_workers() -> None:
    """A server as every role builds it, with two workers and room for three streams in all."""
    settings = ServiceSettings(port=0, max_workers=2, stream_max_per_peer=10, stream_max_total=3)
    running = build_server(service_name="planner", settings=settings, register=lambda server: None,
                           service_names=[])
    streams = Streams(grpc.insecure_channel(f"127.0.0.1:{running.port}"))
    try:
        streams.watch(5)
        refused = streams.wait_refused(2)
        assert len(refused) == 2 and all("on this server" in s.details for s in refused)
        assert len(streams.still_open()) == 3
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            for _ in range(4):  # more calls than workers, one after another, each answered
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        streams.close()
        running.stop(0)


# --- the launcher, as `make run` starts it ------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@dataclass
class Launched:
    process: subprocess.Popen[str]
    env: dict[str, str]
    state_file: Path
    executor_port: int
    gateway_addr: str = ""
    tls_dir: Path | None = None
    lines: list[str] = field(default_factory=list)

    def state(self) -> dict[str, dict[str, int]]:
        return dict(json.loads(self.state_file.read_text(encoding="utf-8"))["processes"])

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, predicate, timeout: float = 90.0) -> bool:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return True
            except (OSError, ValueError, KeyError, grpc.RpcError):
                pass
            time.sleep(0.2)
        return False


def _launcher_env(root: Path) -> dict[str, str]:
    database_url, estate_url = f"sqlite:///{root / 'attest.db'}", f"sqlite:///{root / 'estate.db'}"
    upgrade(database_url)
    load_estate(estate_url, REPO_ROOT / "demo" / "estate")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")]),
            "ATTEST_DATABASE_URL": database_url, "ATTEST_ESTATE_DATABASE_URL": estate_url,
            "ATTEST_AUTH_TOKEN": "launcher-test-token", "ATTEST_STREAM_IDLE_TIMEOUT_SECONDS": str(IDLE_TIMEOUT)}


@pytest.fixture(scope="module")
def stale_tls_dir() -> Iterator[Path]:
    TLS_PARENT.mkdir(parents=True, exist_ok=True)
    stale = TLS_PARENT / f"{_dead_pid()}-left-by-a-killed-run"
    stale.mkdir()
    (stale / "gateway-key.pem").write_text("not a real key", encoding="utf-8")
    yield stale
    if stale.exists():
        subprocess.run(["rm", "-rf", str(stale)], check=False)


@pytest.fixture(scope="module")
def launched(tmp_path_factory, stale_tls_dir) -> Iterator[Launched]:
    root = tmp_path_factory.mktemp("launcher")
    executor_port = _free_port()
    env = _launcher_env(root) | {"ATTEST_EXECUTOR_PORT": str(executor_port)}
    state_file = root / "launcher.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.launcher", "--log-dir", str(root / "logs"), "--state-file", str(state_file)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    running = Launched(process=process, env=env, state_file=state_file, executor_port=executor_port)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            running.lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        assert running.wait_for(lambda: state_file.exists(), 120), running.output()
        up = next(line for line in running.lines if line.startswith("Attest is up"))
        running.gateway_addr = re.search(r"gateway on (\S+) ", up).group(1)  # type: ignore[union-attr]
        running.tls_dir = Path(re.search(r"certificates in (\S+)\)", up).group(1))  # type: ignore[union-attr]
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_launcher_honours_a_roles_port_from_the_environment(launched) -> None:
    assert launched.state()["executor"]["port"] == launched.executor_port
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(launched.tls_dir / "ca.pem").read_bytes(),
        private_key=(launched.tls_dir / "intruder-key.pem").read_bytes(),
        certificate_chain=(launched.tls_dir / "intruder.pem").read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{launched.executor_port}", credentials) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_key_directories_are_private_and_a_killed_runs_are_removed(launched, stale_tls_dir) -> None:
    assert launched.tls_dir is not None and launched.tls_dir.parent == TLS_PARENT
    assert launched.tls_dir.stat().st_mode & 0o777 == 0o700
    keys = list(launched.tls_dir.glob("*-key.pem"))
    assert keys and all(key.stat().st_mode & 0o777 == 0o600 for key in keys)
    assert not stale_tls_dir.exists(), "the key directory of a launcher that is gone was left behind"


def test_pki_written_for_compose_is_private(tmp_path) -> None:
    target = tmp_path / "tls"
    subprocess.run([sys.executable, "-m", "shared.tls", str(target), "gateway"], cwd=REPO_ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "gen")])},
                   capture_output=True)
    assert target.stat().st_mode & 0o777 == 0o700
    assert (target / "gateway-key.pem").stat().st_mode & 0o777 == 0o600


def test_idle_streams_are_closed_after_the_idle_timeout(launched) -> None:
    streams = Streams(grpc.insecure_channel(launched.gateway_addr))
    try:
        streams.watch(PER_PEER)
        assert all(s.first_message.wait(10) for s in streams.opened)
        assert all(s.ended.wait(IDLE_TIMEOUT + 30) for s in streams.opened), "idle streams were never closed"
        # The capacity is back: as many new streams are accepted again.
        again = Streams(grpc.insecure_channel(launched.gateway_addr))
        try:
            again.watch(PER_PEER)
            assert all(s.first_message.wait(10) for s in again.opened)
            assert not again.refused()
        finally:
            again.close()
    finally:
        streams.close()


def test_a_second_process_on_a_bound_port_exits_naming_port_and_role(launched, tmp_path) -> None:
    env = {**launched.env, "ATTEST_INSECURE": "1", "ATTEST_EXECUTOR_PORT": str(launched.executor_port)}
    second = subprocess.run([sys.executable, "-m", "services.executor"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "READY" not in second.stdout
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith("error: executor") and str(launched.executor_port) in last and "in use" in last, last
    assert "Traceback" not in second.stderr


def test_a_second_launcher_on_the_same_ports_fails_at_start(launched, tmp_path) -> None:
    env = {**launched.env, "ATTEST_EXECUTOR_PORT": str(launched.executor_port)}
    second = subprocess.run(
        [sys.executable, "-m", "gateway.launcher", "--log-dir", str(tmp_path / "logs"),
         "--state-file", str(tmp_path / "state.json")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 1, second.stdout
    assert "Attest is up" not in second.stdout
    assert f"executor cannot listen on port {launched.executor_port}" in second.stderr, second.stderr
    assert launched.process.poll() is None


def test_make_run_on_a_taken_port_stops_before_touching_any_database(launched, tmp_path) -> None:
    """A second `make run` would reload the estate under the cluster already serving: it must stop
    at the port check, naming the role and the port, before migrating or loading anything."""
    audit, estate = tmp_path / "attest.db", tmp_path / "estate.db"
    env = {**os.environ, "ATTEST_EXECUTOR_PORT": str(launched.executor_port),
           "ATTEST_DATABASE_URL": f"sqlite:///{audit}", "ATTEST_ESTATE_DATABASE_URL": f"sqlite:///{estate}"}
    second = subprocess.run(["make", "--no-print-directory", "run"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert second.returncode != 0, second.stdout
    assert f"executor cannot listen on port {launched.executor_port}" in second.stderr, second.stderr
    assert not audit.exists() and not estate.exists()
    assert launched.process.poll() is None


def test_a_killed_role_is_restarted_and_the_others_keep_running(launched) -> None:
    before = launched.state()
    os.kill(before["executor"]["pid"], signal.SIGKILL)
    assert launched.wait_for(lambda: launched.state()["executor"]["pid"] != before["executor"]["pid"]), \
        launched.output()
    after = launched.state()
    assert launched.process.poll() is None, launched.output()
    assert after["executor"]["port"] == launched.executor_port
    assert {name: entry["pid"] for name, entry in after.items() if name != "executor"} == \
        {name: entry["pid"] for name, entry in before.items() if name != "executor"}
    assert any("executor" in line and "restarting" in line for line in launched.lines)
    # A diagnosis works again through the restarted executor.
    with grpc.insecure_channel(launched.gateway_addr) as front:
        assert launched.wait_for(lambda: attacks.gateway_health(front) == health_pb2.HealthCheckResponse.SERVING, 60)
        outcome, answered = attacks.call(
            attacks.gateway(front).Diagnose, gateway_pb2.DiagnoseRequest(query="checkout-api 现在正常吗？"),
            [("authorization", "Bearer launcher-test-token")], timeout=DIAGNOSIS_DEADLINE)
    assert outcome.code == grpc.StatusCode.OK and answered is not None and answered.status == "COMPLETED", outcome


def test_one_role_is_restarted_on_request(launched) -> None:
    before = launched.state()
    command = subprocess.run(
        [sys.executable, "-m", "gateway.launcher", "--state-file", str(launched.state_file), "restart", "planner"],
        cwd=REPO_ROOT, env=launched.env, capture_output=True, text=True, timeout=120)
    assert command.returncode == 0, command.stdout + command.stderr
    assert "planner restarted" in command.stdout
    after = launched.state()
    assert after["planner"]["pid"] != before["planner"]["pid"]
    assert after["planner"]["port"] == before["planner"]["port"]
    assert after["gateway"]["pid"] == before["gateway"]["pid"]
    unknown = subprocess.run(
        [sys.executable, "-m", "gateway.launcher", "--state-file", str(launched.state_file), "restart", "nobody"],
        cwd=REPO_ROOT, env=launched.env, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "no process named 'nobody'" in unknown.stderr
