"""Loki through the six real services, against recorded answers in Loki's documented format
(issue 16, point 7: no Loki server is installable here; tests/monitoring_api_server.py serves
`/loki/api/v1/query_range` streams and the `count_over_time` vector the adapter asks for).

The same rules as for Prometheus: what Loki returned is quoted and named as Loki's, with the
demo estate nowhere (logs and metrics have real backends; changes and runbooks are disabled), and
a Loki that fails once it passed the start-up check is named in an answer that is never PASS and
denies nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from tests.integration.conftest import start_cluster
from tests.integration.failed_call_answers import MODES, check_failure_named, diagnose
from tests.monitoring_api_server import LOKI_LINES, TENANT, TOKEN, Guarded

pytestmark = pytest.mark.integration

QUERY = "pay-svc 最近一小时有错误日志吗？"
BOTH_MODES = pytest.mark.parametrize("mode", list(MODES))


@dataclass
class Lab:
    loki: Guarded
    gateway_addr: str
    invocations: InvocationStore


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    prometheus, loki = Guarded(), Guarded()
    root = tmp_path_factory.mktemp("loki-recorded")
    env: dict[str, str] = {"ATTEST_BACKEND_TIMEOUT_SECONDS": "2", "ATTEST_BACKEND_RECHECK_SECONDS": "0.5"}
    for kind, server in (("PROMETHEUS", prometheus), ("LOKI", loki)):
        env |= {
            f"ATTEST_{kind}_URL": server.url,
            f"ATTEST_{kind}_BEARER_TOKEN": TOKEN,
            f"ATTEST_{kind}_HEADERS": f"X-Scope-OrgID={TENANT}",
            f"ATTEST_{kind}_SERVICE_LABELS": "service,job",
        }
    running = start_cluster(root, otlp_receiver.endpoint, env, database_url=new_database(root))
    sessions = make_session_factory(make_engine(running.database_url))
    try:
        yield Lab(loki, running.gateway_addr, InvocationStore(sessions))
    finally:
        running.stop()
        prometheus.close()
        loki.close()


@BOTH_MODES
def test_lokis_lines_are_quoted_and_named_as_lokis(lab, auth_metadata, mode) -> None:
    lab.loki.failure = None
    response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES[mode])
    answer = response.answer
    assert "settlement call failed: upstream ledger-gw returned 503" in answer, answer
    assert "来源：Loki" in answer or "来源 Loki" in answer, answer
    assert "演示" not in answer and "estate" not in answer, answer  # no demo material anywhere
    logs = [i for i in lab.invocations.list_for_run(response.run_id, "query_logs") if i.lifecycle == "READY"]
    assert logs and all(ref.source.startswith("loki:") for i in logs for ref in evidence_view(i).refs())
    assert {i.tool_name for i in lab.invocations.list_for_run(response.run_id)} <= {"query_metrics", "query_logs"}
    errors = sum(1 for _, level, _ in LOKI_LINES if level == "ERROR")
    assert any(f"{errors} " in line or "多次" in line for line in answer.splitlines() if "ledger-gw" in line), answer


@BOTH_MODES
def test_a_loki_answering_http_500_is_named_and_never_denied(lab, auth_metadata, mode) -> None:
    lab.loki.failure = "http_500"
    try:
        response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES[mode])
    finally:
        lab.loki.failure = None
    check_failure_named(response, "query_logs", "pay-svc", "http_error")
    assert "ledger-gw" not in response.answer, "nothing from Loki was read"
