"""No run is left RUNNING, a replay cannot get round the quotas, and no secret typed into a
question is kept.

Over real processes (six services, a scripted slow executor model, two principals with at most
two runs in flight each, a reap bound of 3 s):
- a replay of a running run's request_id answers ABORTED at once with the run id in its
  ErrorInfo, and counts against the in-flight quota (the other principal is unaffected);
- a gateway killed mid-diagnosis (SIGKILL) leaves its run to the next gateway's reaper: FALLBACK
  RUN_INTERRUPTED, its log closed by a terminal FALLBACK event, its PROJECTING invocation closed,
  and a replay of its request_id returns that outcome at once;
- a gateway stopped with SIGTERM ends every run in flight before it exits;
- a secret in a question is in neither the stored run, the answer nor what a model was sent.
In process, over a real SQLite file or PostgreSQL database and a real gRPC server: an audit store
that turns read-only or full mid-run makes the gateway NOT_SERVING with a clear error, and once it
takes writes again the run is ended and the gateway serves again. Two replicas reaping the same run end it once.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict, MessageToJson
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine, event, text

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import events_pb2, gateway_pb2, gateway_pb2_grpc
from gateway import progress_events
from gateway.audit import RunAudit
from gateway.cli import ask_and_print
from gateway.run_reaper import RunKeeper
from gateway.servicer import GatewayServicer
from shared.config import GatewaySettings
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.models import utcnow
from shared.db.run_store import RunStore
from shared.error_details import error_details
from shared.interceptors import BearerAuthInterceptor
from shared.readiness import ReadinessMonitor
from shared.server import build_server
from tests.integration.conftest import as_principal, principal_token, start_cluster, write_tokens_file
from tests.integration.test_graph_routes import Script, faithful
from tests.scripted_model_server import ScriptedModelServer
from tests.unit.test_db_stores import engine, postgresql_engine, sqlite_engine  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration

QUERY = "payment-service 最近一小时 CPU 为什么这么高？"
QUICK_QUERY = "系统最近是不是有点慢？"  # no service named: a fast safe fallback, no executor call
SLOW_SECONDS = 25.0
REAP_AFTER_SECONDS = 3.0
as_ = as_principal


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory, otlp_receiver) -> Iterator[Any]:
    script = Script()
    script.answers = [faithful]
    with ScriptedModelServer([script], repeat_last=True) as server:
        root = tmp_path_factory.mktemp("run-lifecycle")
        tokens = write_tokens_file(root, ("alice", "bob"))
        running = start_cluster(root, otlp_receiver.endpoint, {
            "ATTEST_AUTH_TOKENS_FILE": str(tokens),
            "ATTEST_MAX_RUNS_IN_FLIGHT_PER_PRINCIPAL": "2",
            "ATTEST_MAX_RUNS_PER_MINUTE_PER_PRINCIPAL": "1000",
            "ATTEST_RUN_REAP_AFTER_SECONDS": str(REAP_AFTER_SECONDS),
            "ATTEST_RUN_HEARTBEAT_SECONDS": "0.5",
            "ATTEST_SHUTDOWN_GRACE_SECONDS": "2",
            "ATTEST_EXECUTOR_MODEL_PROVIDER": "openai",
            "ATTEST_EXECUTOR_MODEL_BASE_URL": server.base_url,
            "ATTEST_EXECUTOR_MODEL_MODEL": "scripted-executor",
            "ATTEST_EXECUTOR_MODEL_API_KEY": "test-key",
        })
        running.script, running.model_server = script, server
        running.runs = RunStore(make_session_factory(make_engine(running.database_url)))
        try:
            yield running
        finally:
            script.first_turn_delay = 0.0
            running.stop()


@pytest.fixture()
def stub(lifecycle) -> Iterator[gateway_pb2_grpc.GatewayServiceStub]:
    with grpc.insecure_channel(lifecycle.gateway_addr) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value


def started_run(stub, principal: str, request_id: str = "", query: str = QUERY) -> tuple[Any, str]:
    """A streamed diagnosis under way, and its run id (from its first event)."""
    stream = stub.DiagnoseStream(gateway_pb2.DiagnoseStreamRequest(query=query, request_id=request_id),
                                 timeout=90, metadata=as_(principal))
    first = next(stream)
    assert first.HasField("event")
    return stream, first.event.run_id


def wait_until(predicate: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds:g} s: {what}")


def ended(runs: RunStore, run_id: str, seconds: float = 30.0) -> dict[str, Any]:
    return wait_until(lambda: (run := runs.get_run(run_id)) and run["status"] != "RUNNING" and run,
                      seconds, f"run {run_id} ends")


def assert_interrupted(run: dict[str, Any]) -> None:
    assert (run["status"], run["fallback_type"], run["effective_verdict"]) == ("FALLBACK", "RUN_INTERRUPTED", None)
    assert run["self_evaluation"]["verifier_evaluation"]["failure_reason"]
    last = run["events"][-1]
    assert (last["node"], last["phase"], last["payload"]["fallback_type"]) == ("fallback", "INFO", "RUN_INTERRUPTED")
    assert all(i["lifecycle"] != "PROJECTING" for i in run["invocations"])


def test_a_replay_of_a_running_run_is_aborted_at_once_and_counts_against_the_quota(lifecycle, stub, capsys):
    lifecycle.script.first_turn_delay = SLOW_SECONDS
    first, run_id = started_run(stub, "alice", "alice-slow")
    second = None
    try:
        # Within 5 s, while the run needs 25: the replay never waits for it.
        aborted = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-slow"),
                          timeout=5, metadata=as_("alice"))
        assert aborted.code() == grpc.StatusCode.ABORTED, aborted.details()
        details = error_details(aborted)
        assert details["reason"] == "REQUEST_ID_RUN_RUNNING" and details["metadata"]["run_id"] == run_id
        followed = stub.GetRun(gateway_pb2.GetRunRequest(run_id=details["metadata"]["run_id"]), timeout=10,
                               metadata=as_("alice"))
        assert followed.status == "RUNNING"
        # `attest ask --request-id` says the run is still going and how to follow it.
        assert ask_and_print(lifecycle.gateway_addr, QUERY, token=principal_token("alice"), request_id="alice-slow",
                             timeout=5) == 1
        assert f"仍在进行（run {run_id}）" in capsys.readouterr().err.replace("\n", "")  # as wrapped
        # Alice at her limit of two: her replay is refused by the quota like a new diagnosis.
        second, _ = started_run(stub, "alice")
        exhausted = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-slow"),
                            timeout=5, metadata=as_("alice"))
        assert exhausted.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exhausted.details()
        assert error_details(exhausted)["reason"] == "QUOTA_RUNS_IN_FLIGHT"
        # Bob is not held up by alice's replays.
        assert stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUICK_QUERY), timeout=30,
                             metadata=as_("bob")).status == "FALLBACK"
        # Past the reap bound, a run its gateway still serves is kept alive by its heartbeat.
        time.sleep(REAP_AFTER_SECONDS + 1.5)
        assert lifecycle.runs.run_status(run_id) == "RUNNING"
    finally:
        lifecycle.script.first_turn_delay = 0.0
        first.cancel()
        if second is not None:
            second.cancel()
    ended(lifecycle.runs, run_id)


def test_a_killed_gateway_s_run_is_reaped_by_the_next_one(lifecycle, stub):
    lifecycle.script.first_turn_delay = SLOW_SECONDS
    stream, run_id = started_run(stub, "alice", "alice-killed")
    # The executor handling it is lost mid-call too: its invocation stays PROJECTING.
    invocations = InvocationStore(make_session_factory(make_engine(lifecycle.database_url)))
    invocation_id = invocations.begin(run_id, "lost-call", "query_metrics", 0, {"service": "payment-service"})
    gateway = lifecycle.processes["gateway"].process
    gateway.send_signal(signal.SIGKILL)
    gateway.wait(10)
    lifecycle.script.first_turn_delay = 0.0
    with pytest.raises(grpc.RpcError):
        list(stream)
    assert lifecycle.runs.run_status(run_id) == "RUNNING"  # nothing else ended it

    lifecycle.restart("gateway")
    run = ended(lifecycle.runs, run_id, REAP_AFTER_SECONDS + 20)
    assert_interrupted(run)
    assert "heartbeat" in run["self_evaluation"]["verifier_evaluation"]["failure_reason"]
    (lost,) = [i for i in run["invocations"] if i["invocation_id"] == invocation_id]
    assert lost["lifecycle"] == "ERROR" and lost["error"]

    shown = stub.GetRun(gateway_pb2.GetRunRequest(run_id=run_id), timeout=10, metadata=as_("alice"))
    assert shown.status == "FALLBACK"
    assert shown.events[-1].event_kind == events_pb2.PROGRESS_EVENT_KIND_FALLBACK
    replayed = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUERY, request_id="alice-killed"), timeout=5,
                             metadata=as_("alice"))
    assert (replayed.run_id, replayed.status, replayed.retryable) == (run_id, "FALLBACK", True)
    assert replayed.fallback_type == enums_pb2.FALLBACK_TYPE_RUN_INTERRUPTED
    assert "中断" in replayed.answer


def test_sigterm_ends_every_run_in_flight_before_the_gateway_exits(lifecycle, stub):
    lifecycle.script.first_turn_delay = SLOW_SECONDS
    streams = [started_run(stub, principal) for principal in ("alice", "bob")]
    gateway = lifecycle.processes["gateway"].process
    try:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(30) == 0
    finally:
        lifecycle.script.first_turn_delay = 0.0
    for stream, run_id in streams:
        # Read at once after the exit: no reaper has had a chance, the gateway ended them itself.
        run = lifecycle.runs.get_run(run_id)
        assert run["status"] != "RUNNING", run_id
        assert_interrupted(run)
        try:
            result = [m for m in stream if m.HasField("result")]
        except grpc.RpcError:
            result = []
        if result:  # the caller was told, when the connection lasted
            assert result[0].result.status == "FALLBACK" and "中断" in result[0].result.answer
    lifecycle.restart("gateway")


def test_a_secret_in_a_question_is_not_kept_or_shown(lifecycle, stub):
    secrets = ("hunter2-Secret", "AKIAIOSFODNN7EXAMPLE")
    question = f"{QUERY} 连接用 password=hunter2-Secret，密钥 AKIAIOSFODNN7EXAMPLE"
    sent_before = len(lifecycle.model_server.requests)
    response = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=question), timeout=60, metadata=as_("alice"))
    shown = stub.GetRun(gateway_pb2.GetRunRequest(run_id=response.run_id), timeout=10, metadata=as_("alice"))
    stored = lifecycle.runs.get_run(response.run_id)
    assert "[REDACTED]" in stored["query"]
    kept = [MessageToJson(response), MessageToJson(shown), json.dumps(stored, ensure_ascii=False, default=str),
            json.dumps(lifecycle.model_server.requests[sent_before:], ensure_ascii=False)]
    for secret in secrets:
        assert all(secret not in text for text in kept), secret


# -- the audit store refusing writes, in process ------------------------------------------------


class _StoreFailsMidRun:
    """A graph whose run writes its first event, then finds the store refusing writes."""

    def __init__(self, runs: RunStore, fail: Callable[[], None]) -> None:
        self._runs = runs
        self._fail = fail

    def run(self, run_id: str, query: str, deadline: Any, is_active: Any, emit: Any, mode: str = "MULTI_AGENT",
            inherited: Any = None, stopping: Any = None) -> Any:
        audit = RunAudit(self._runs, run_id, emit, new_run=True)
        audit.event("gateway", "INFO", "STARTED", mode, typed=progress_events.started(mode), kind="started", round_=0)
        audit.flush_events()
        self._fail()
        # Large enough to need new pages: a full store cannot take it.
        audit.finish_run(status="FALLBACK", fallback_type="PRE_VERIFICATION", answer="不应写入" * 50_000)
        raise AssertionError("the store took the write")


def _refuse_writes(store: Engine, failure: dict[str, str | None]) -> None:
    """Every connection handed out while `failure` names one is read-only or full."""

    @event.listens_for(store, "checkout")
    def apply(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            if store.dialect.name == "postgresql":
                if failure["mode"] == "read-only":  # the transaction the checkout begins
                    cursor.execute("SET TRANSACTION READ ONLY")
                return
            if failure["mode"] == "read-only":
                cursor.execute("PRAGMA query_only=ON")
            else:
                cursor.execute("PRAGMA query_only=OFF")
            if failure["mode"] == "full":
                pages = cursor.execute("PRAGMA page_count").fetchone()[0]
                cursor.execute(f"PRAGMA max_page_count={pages}")
            else:
                cursor.execute("PRAGMA max_page_count=1073741823")
        finally:
            cursor.close()


@pytest.mark.parametrize(("database", "mode"), [("sqlite", "read-only"), ("sqlite", "full"),
                                                ("postgresql", "read-only")])
def test_a_store_that_refuses_writes_makes_the_gateway_not_serving_and_leaves_no_run_running(
        request, database, mode):
    store = request.getfixturevalue(f"{database}_engine")
    failure: dict[str, str | None] = {"mode": None}
    _refuse_writes(store, failure)
    runs = RunStore(make_session_factory(store))
    settings = GatewaySettings(port=0, health_port=0, auth_token="t0k3n-for-tests")
    keeper = RunKeeper(runs, reap_after_seconds=REAP_AFTER_SECONDS, heartbeat_seconds=0.2)

    def fail() -> None:
        failure["mode"] = mode

    servicer = GatewayServicer(_StoreFailsMidRun(runs, fail), runs, settings, keeper=keeper)  # type: ignore[arg-type]
    name = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name
    running = build_server(service_name="gateway", settings=settings, service_names=[name],
                           register=lambda server: gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server),
                           extra_interceptors=[BearerAuthInterceptor("t0k3n-for-tests")])
    monitor = ReadinessMonitor({"audit store writes": keeper.readiness_check}, running.health, [name], 60)
    monitor.start()
    keeper.on_store_change = monitor.check_now
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            metadata = [("authorization", "Bearer t0k3n-for-tests")]
            error = refused(stub.Diagnose, gateway_pb2.DiagnoseRequest(query=QUERY), timeout=30, metadata=metadata)
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            assert error_details(error)["reason"] == "AUDIT_STORE_UNWRITABLE"
            assert ("read-only" if mode == "read-only" else "out of space") in error.details()
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING
            # The store takes writes again; the keeper's next beat finds it so.
            failure["mode"] = None
            keeper.tick()
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
            with store.connect() as connection:
                (run_id,) = connection.execute(text("SELECT run_id FROM diagnosis_run")).scalars().all()
            run = runs.get_run(run_id)
            assert_interrupted(run)
            assert MessageToDict(stub.GetRun(gateway_pb2.GetRunRequest(run_id=run["run_id"]), timeout=10,
                                             metadata=metadata))["status"] == "FALLBACK"
    finally:
        keeper.stop()
        monitor.stop()
        running.stop(None)


def test_two_replicas_reaping_one_run_end_it_once(engine):  # noqa: F811
    runs = RunStore(make_session_factory(engine))
    _, run_id = runs.start_run(None, QUERY, "MULTI_AGENT", gateway_instance="lost-gateway")
    runs.record_event(run_id, "gateway", "INFO", "STARTED")
    later = lambda: utcnow() + timedelta(seconds=60)  # noqa: E731 - the replicas' clock, past the bound
    keepers = [RunKeeper(runs, reap_after_seconds=30, heartbeat_seconds=10, clock=later) for _ in range(4)]
    counts: list[int] = []
    threads = [threading.Thread(target=lambda k=k: counts.append(k.reap())) for k in keepers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counts) == [0, 0, 0, 1]
    run = runs.get_run(run_id)
    assert_interrupted(run)
    assert [e["seq"] for e in run["events"]] == [1, 2]


class _ReapedMidRun:
    """A graph whose gateway stalls past the reap bound: another replica ends its run, then the
    graph tries to write its answer."""

    def __init__(self, runs: RunStore, other_replica: RunKeeper) -> None:
        self._runs = runs
        self._other = other_replica

    def run(self, run_id: str, query: str, deadline: Any, is_active: Any, emit: Any, mode: str = "MULTI_AGENT",
            inherited: Any = None, stopping: Any = None) -> Any:
        audit = RunAudit(self._runs, run_id, emit, new_run=True)
        audit.event("gateway", "INFO", "STARTED", mode, typed=progress_events.started(mode), kind="started", round_=0)
        audit.flush_events()
        assert self._other.reap() == 1
        audit.event("composer", "EXIT", "OK", typed=progress_events.answer_released(), kind="answer")
        audit.finish_run(status="COMPLETED", effective_verdict="PASS", answer="迟到的结论")
        raise AssertionError("a reaped run took its late answer")


def test_a_run_reaped_while_its_gateway_stalled_keeps_the_reaper_s_outcome(sqlite_engine):  # noqa: F811
    runs = RunStore(make_session_factory(sqlite_engine))
    later = lambda: utcnow() + timedelta(seconds=60)  # noqa: E731 - the other replica's clock, past the bound
    other = RunKeeper(runs, reap_after_seconds=30, heartbeat_seconds=10, clock=later)
    settings = GatewaySettings(port=0, health_port=0, auth_token="t0k3n-for-tests")
    servicer = GatewayServicer(_ReapedMidRun(runs, other), runs, settings)  # type: ignore[arg-type]
    name = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name
    running = build_server(service_name="gateway", settings=settings, service_names=[name],
                           register=lambda server: gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server),
                           extra_interceptors=[BearerAuthInterceptor("t0k3n-for-tests")])
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
                gateway_pb2.DiagnoseRequest(query=QUERY), timeout=30,
                metadata=[("authorization", "Bearer t0k3n-for-tests")])
    finally:
        running.stop(None)
    assert (response.status, response.fallback_type) == ("FALLBACK", enums_pb2.FALLBACK_TYPE_RUN_INTERRUPTED)
    run = runs.get_run(response.run_id)
    assert_interrupted(run)
    assert "迟到的结论" not in json.dumps(run, ensure_ascii=False, default=str)
