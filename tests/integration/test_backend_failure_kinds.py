"""Each way a backend fails after it passed the start-up check reaches the user,
through the six real processes.

The executor's Prometheus is a loopback fake of its HTTP API (`tests/monitoring_api_server.py`)
that answers the start-up probe (build info, readiness) and then, per test, fails every query: HTTP
500 with Prometheus' error body, a 200 web page that is no API answer, no answer within
ATTEST_BACKEND_TIMEOUT_SECONDS, or it dies on the first query of the run (the connection dropped
unanswered, the port closed). Logs, changes and runbooks come from the demo estate, so the answer
still has what was verified. One cluster serves the module; the fake's failure is switched per test.

For each kind, in both modes: never PASS, never a denial (未发现异常 / 未显示异常 / 证据不支持 or
a paraphrase), the failed query named with its class; the stored invocation is an ERROR of that
class. Single-ReAct releases its Draft (no fallback), opening 「无法确认：指标查询失败…」 for a
service whose remaining checks show nothing abnormal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.failed_calls import failed_calls
from tests.integration.conftest import start_cluster
from tests.integration.failed_call_answers import (
    MODES,
    check_failure_named,
    check_single_react_answer,
    diagnose,
)
from tests.monitoring_api_server import TENANT, TOKEN, Guarded

pytestmark = pytest.mark.integration

TOOL = "query_metrics"
HEALTH_NAME = f"attest.executor.tools.{TOOL}"
TIMEOUT_SECONDS = 1.0
# failure of the fake -> the class the run records
KINDS = {"http_500": "http_error", "not_json": "not_backend_response", "hang": "timeout", "die": "unreachable"}
# A service the demo estate shows nothing wrong with: with its metrics unread, the answer cannot tell.
QUIET_QUERY = "user-service 最近一小时正常吗？"


@dataclass
class Lab:
    prometheus: Guarded
    port: int
    gateway_addr: str
    executor_channel: Callable[[], grpc.Channel]  # to the executor, as the gateway (mutual TLS)
    runs: RunStore
    invocations: InvocationStore


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    prometheus = Guarded()
    root = tmp_path_factory.mktemp("failure-kinds")
    running = start_cluster(root, otlp_receiver.endpoint, {
        "ATTEST_PROMETHEUS_URL": prometheus.url,
        "ATTEST_PROMETHEUS_BEARER_TOKEN": TOKEN,
        "ATTEST_PROMETHEUS_HEADERS": f"X-Scope-OrgID={TENANT}",
        "ATTEST_BACKEND_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
        "ATTEST_BACKEND_RECHECK_SECONDS": "0.5",
        # The other tools from the demo estate, chosen explicitly.
        "ATTEST_DEMO_TOOLS": "query_logs,query_changes,lookup_knowledge",
    }, database_url=new_database(root))
    sessions = make_session_factory(make_engine(running.database_url))
    lab = Lab(prometheus, int(prometheus.url.rsplit(":", 1)[1]), running.gateway_addr, lambda: running.channel("executor"),
              RunStore(sessions), InvocationStore(sessions))
    try:
        yield lab
    finally:
        running.stop()
        lab.prometheus.close()


def _metrics_tool_health(lab: Lab) -> int:
    with lab.executor_channel() as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=HEALTH_NAME), timeout=5).status


@pytest.fixture()
def failing(lab: Lab, request) -> Iterator[str]:
    """For one test the fake fails every query this way, after the executor's probe found it
    serving; then it serves again (a new one on the same port when it died or held requests)."""
    kind = request.param
    deadline = time.monotonic() + 20
    while _metrics_tool_health(lab) != health_pb2.HealthCheckResponse.SERVING:
        assert time.monotonic() < deadline, "the executor never found the fake Prometheus serving"
        time.sleep(0.2)
    lab.prometheus.failure = kind
    try:
        yield kind
    finally:
        lab.prometheus.failure = None
        if kind in ("hang", "die"):
            lab.prometheus.close()  # releases held requests; a dead one is closed already
            lab.prometheus = Guarded(port=lab.port)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("failing", list(KINDS), indirect=True)
def test_a_backend_failing_after_start_up_is_named_with_its_class_and_never_denied(lab, failing, mode,
                                                                                    auth_metadata):
    response = diagnose(lab.gateway_addr, QUIET_QUERY, auth_metadata, MODES[mode])
    run = lab.runs.get_run(response.run_id)
    stored = lab.invocations.list_for_run(response.run_id)
    error_class = KINDS[failing]

    # The run's metrics calls failed, each recorded as that class (our vocabulary, from the store).
    failures = [call for call in failed_calls(stored) if call.tool_name == TOOL]
    assert failures and {call.error_class for call in failures} == {error_class}, failures
    assert all(call.http_status == (500 if failing == "http_500" else 0) for call in failures)
    if failing == "die":
        assert lab.prometheus.dead.is_set(), "the fake died during the run, after the probe found it serving"

    check_failure_named(response, TOOL, "user-service", error_class)
    if mode == "single_react":
        first = check_single_react_answer(response, run, QUIET_QUERY, TOOL)
        assert first.startswith("无法确认：指标查询失败"), response.answer
        # What was verified is still shown: the checks that completed, each as an analysis.
        assert "已完成的检查（逐项见分析）：user-service：" in response.answer, response.answer
        assert "【分析】" in response.answer
