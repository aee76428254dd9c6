"""Three executor replicas under load, one killed with SIGKILL mid-load: no diagnosis is lost,
through the six services' real processes (mutual TLS on).

The executor reads metrics from a loopback Prometheus API (`tests/monitoring_api_server.py`)
whose queries can be held at a gate: with the gate closed, every diagnosis of a batch waits inside
`ExecutePlan`, the gateway's round robin having handed two of six calls to each replica. One
replica is then killed and the gate opened. Asserted: calls spread over all three replicas (each
one's server spans, told apart by `service.instance.id`); every diagnosis of the batch ends as the
same question does without the kill; a call lost with its replica was retried once on another
replica (a `REPLICA_LOST` event), the lost attempt's invocations are kept in the audit flagged
`abandoned` and never cited, and no invocation appears twice among the run's live ones; later
calls only reach the two replicas left, and none fails.
"""

from __future__ import annotations

import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from tests.integration.conftest import start_cluster
from tests.monitoring_api_server import Guarded, prometheus_env

pytestmark = pytest.mark.integration

# The fake serves one service's CPU series at 2026-11-30 11:50-11:52 UTC, whatever window is asked.
QUESTION = "pay-svc 2026-11-30 11:50 到 12:00 CPU 为什么这么高？"
REPLICAS = 3
BATCH = 2 * REPLICAS  # round robin: two ExecutePlan calls on each replica
CITATION = re.compile(r"#(\d+)")


@dataclass
class Replicated:
    running: Any
    fake: Guarded
    runs: RunStore

    def diagnose(self, metadata) -> gateway_pb2.DiagnoseResponse:
        with grpc.insecure_channel(self.running.gateway_addr) as channel:
            return gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
                gateway_pb2.DiagnoseRequest(query=QUESTION), timeout=120, metadata=metadata)

    def instances(self) -> dict[str, str]:
        """service.instance.id -> replica name, for the executor's replicas."""
        return {f"{socket.gethostname()}-{p.process.pid}": p.name for p in self.running.replicas("executor")}


@pytest.fixture(scope="module")
def replicated(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Replicated]:
    fake = Guarded()
    root = tmp_path_factory.mktemp("replicas")
    running = start_cluster(root, otlp_receiver.endpoint, prometheus_env(fake), database_url=new_database(root),
                            replicas={"executor": REPLICAS})
    try:
        yield Replicated(running, fake, RunStore(make_session_factory(make_engine(running.database_url))))
    finally:
        running.stop()
        fake.close()


def _execute_plan_calls(otlp_receiver, replicated: Replicated, run_ids: set[str]) -> Counter[str]:
    """ExecutePlan server spans of `run_ids`' traces, by executor replica."""
    instances = replicated.instances()
    traces = {replicated.runs.get_run(run_id)["trace_id"] for run_id in run_ids}

    def calls(spans: list[dict[str, Any]]) -> list[str]:
        return [instances.get(s["service_instance"], s["service_instance"]) for s in spans
                if s["trace_id"] in traces and s["kind"] == "SPAN_KIND_SERVER" and s["service_name"] == "executor"
                and s["name"].endswith("/ExecutePlan")]

    otlp_receiver.wait_for(lambda spans: len(calls(spans)) >= len(run_ids), timeout=20)
    return Counter(calls(otlp_receiver.spans()))


def _live_and_abandoned(run: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    live = [i for i in run["invocations"] if not i.get("abandoned")]
    return live, [i for i in run["invocations"] if i.get("abandoned")]


def _fingerprint(invocation: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two invocations the same call: tool, round and request."""
    return invocation["tool_name"], invocation["round"], repr(sorted(invocation["request"].items()))


def test_losing_a_replica_mid_load_loses_no_diagnosis(replicated, otlp_receiver, auth_metadata) -> None:
    # Steady state: calls spread over every replica, call by call.
    warm = [replicated.diagnose(auth_metadata) for _ in range(3 * REPLICAS)]
    expected = {(r.status, r.effective_verdict, r.fallback_type) for r in warm}
    # The fake's three points lead to no verified claim: the answer names the verified sources
    # (`query_metrics #N`), which is what is compared below; the outcome is the same every time.
    assert len(expected) == 1 and warm[0].answer, expected
    spread = _execute_plan_calls(otlp_receiver, replicated, {r.run_id for r in warm})
    assert set(spread) == {"executor", "executor-2", "executor-3"}, spread
    assert min(spread.values()) >= 2, spread
    live, _ = _live_and_abandoned(replicated.runs.get_run(warm[0].run_id))
    calls_per_run = Counter(_fingerprint(i) for i in live)

    # A batch held inside ExecutePlan on all three replicas; one replica is killed.
    replicated.fake.gate = threading.Event()
    with ThreadPoolExecutor(BATCH) as pool:
        batch = [pool.submit(replicated.diagnose, auth_metadata) for _ in range(BATCH)]
        deadline = time.monotonic() + 30
        while replicated.fake.waiting < BATCH and time.monotonic() < deadline:
            time.sleep(0.05)
        assert replicated.fake.waiting >= BATCH, "the batch never reached the executor's tool calls"
        time.sleep(0.5)  # every ExecutePlan of the batch dispatched
        victim = replicated.running.processes["executor-2"].process
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        time.sleep(0.3)
        replicated.fake.gate.set()
        replicated.fake.gate = None
        answers = [future.result(timeout=120) for future in batch]  # none raises: nothing lost

    assert {(r.status, r.effective_verdict, r.fallback_type) for r in answers} == expected
    lost = 0
    for answer in answers:
        run = replicated.runs.get_run(answer.run_id)
        retries = [e for e in run["events"] if e["node"] == "executor" and e["status"] == "REPLICA_LOST"]
        assert len(retries) <= 1, retries
        live, abandoned = _live_and_abandoned(run)
        # Each call once among the live invocations, as in a run that lost nothing.
        assert Counter(_fingerprint(i) for i in live) == calls_per_run, (answer.run_id, live)
        cited = {int(n) for n in CITATION.findall(answer.answer)}
        assert cited and cited <= {i["invocation_id"] for i in live}, answer.answer
        if retries:
            lost += 1
            assert abandoned, "the lost attempt's invocations are kept in the audit, flagged"
            assert {i["attempt"] for i in abandoned} == {0} and {i["attempt"] for i in live} == {1}
        else:
            assert not abandoned
    assert lost >= 1, "no ExecutePlan was in flight on the killed replica"

    # Afterwards: the two replicas left take every call; none fails.
    with ThreadPoolExecutor(BATCH) as pool:
        after = list(pool.map(lambda _i: replicated.diagnose(auth_metadata), range(BATCH)))
    assert {(r.status, r.effective_verdict, r.fallback_type) for r in after} == expected
    spread_after = _execute_plan_calls(otlp_receiver, replicated, {r.run_id for r in after})
    assert set(spread_after) == {"executor", "executor-3"}, spread_after
