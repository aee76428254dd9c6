"""Loki through the six real services, against recorded answers in Loki's documented format
(no Loki server is installable here; tests/monitoring_api_server.py serves
`/loki/api/v1/query_range` streams and the `count_over_time` vector the adapter asks for).

The same rules as for Prometheus: what Loki returned is quoted and named as Loki's, with the
demo estate nowhere (logs and metrics have real backends; changes and runbooks are disabled), and
a Loki that fails once it passed the start-up check is named in an answer that is never PASS and
denies nothing.

Every level is read, whatever the streams look like: the recorded Loki applies the LogQL the
adapter sends, so streams without a level label (a default Kubernetes collector), FATAL lines and
a single ERROR line are found only if the queries find them; and an error's first line is dated
from the oldest line in the window even when more lines match than a call returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from attest.common.v1 import enums_pb2
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.local_time import DEFAULT_TIME_ZONE
from shared.proto_convert import spec_value
from tests.integration.conftest import running_cluster
from tests.integration.failed_call_answers import MODES, check_failure_named, diagnose
from tests.monitoring_api_server import LOKI_LINES, Guarded, backends_env, loki_entries
from tests.recorded_loki import Entry

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
    with running_cluster(root, otlp_receiver.endpoint, new_database(root), backends_env(prometheus, loki),
                         (prometheus, loki)) as running:
        yield Lab(loki, running.gateway_addr, InvocationStore(make_session_factory(make_engine(running.database_url))))


@pytest.fixture()
def record(lab) -> Iterator:
    """Replaces the recorded Loki's entries for one test (the default ones back afterwards)."""
    default = list(lab.loki.loki.entries)

    def set_entries(entries: list[Entry]) -> None:
        lab.loki.loki.entries = entries

    try:
        yield set_entries
    finally:
        lab.loki.loki.entries = default


def _logs(lab: Lab, run_id: str) -> list[dict]:
    """The stored results of the run's query_logs calls that answered."""
    return [json.loads(i.agent_result or "{}") for i in lab.invocations.list_for_run(run_id, "query_logs")
            if i.lifecycle == "READY"]


INFO_NOISE = [(3000 - k * 120, None, f"ts=2031 level=info msg=\"settled batch {k}\" route=/v1/settle") for k in range(20)]


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


@BOTH_MODES
def test_errors_on_streams_without_a_level_label_are_found_and_quoted(lab, record, auth_metadata, mode) -> None:
    # A default Kubernetes collector: no level label on any stream; the level is in the line.
    record(loki_entries([
        *INFO_NOISE,
        (900, None, '{"level":"error","msg":"settlement call failed: upstream ledger-gw returned 503","trace":"4f1c"}'),
        (600, None, '{"level":"error","msg":"settlement call failed: upstream ledger-gw returned 503","trace":"77aa"}'),
        (300, None, '{"level":"error","msg":"settlement call failed: upstream ledger-gw returned 503","trace":"9a2e"}'),
        (200, None, "2031-03-04T08:00:00Z WARN retry budget 80% used"),
    ]))
    response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES[mode])
    answer = response.answer
    assert "upstream ledger-gw returned 503" in answer, answer
    assert "当前证据未显示异常" not in answer and "未发现异常" not in answer, answer
    assert "no ERROR" not in answer and "没有 ERROR" not in answer, answer
    logs = _logs(lab, response.run_id)
    errors = [h for result in logs for h in result.get("hits", []) if "ledger-gw" in h["message"]]
    assert errors and all(h["level"] == "ERROR" for h in errors), logs
    assert any(r.get("window_lines") == 24 for r in logs), logs  # every line of the window counted


@BOTH_MODES
def test_a_fatal_line_is_reported(lab, record, auth_metadata, mode) -> None:
    record([
        *loki_entries(INFO_NOISE),
        *loki_entries([(420, "critical", "journal volume unmountable: input/output error on /dev/xvdf")], pod="pay-svc-1"),
    ])
    response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES[mode])
    assert "journal volume unmountable" in response.answer, response.answer
    assert "当前证据未显示异常" not in response.answer, response.answer
    fatal = [h for r in _logs(lab, response.run_id) for h in r.get("hits", []) if "journal volume" in h["message"]]
    assert fatal and {h["level"] for h in fatal} == {"FATAL"}


@BOTH_MODES
def test_a_single_error_line_is_evidence(lab, record, auth_metadata, mode) -> None:
    record(loki_entries([*INFO_NOISE, (500, None, "2031-03-04 10:00:00,123 - settle - ERROR - ledger-gw handshake refused")]))
    response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES[mode])
    assert "ledger-gw handshake refused" in response.answer, response.answer
    assert "当前证据未显示异常" not in response.answer, response.answer


def test_an_errors_first_line_is_dated_from_the_oldest_line_in_the_window(lab, record, auth_metadata) -> None:
    # 260 errors over the last 52 minutes: more than a call returns (200), so the first line is
    # only known from the oldest-first read.
    lines = [(3120 - k * 12, "error", f'level=error msg="settlement call failed: upstream ledger-gw returned 503" n={k}')
             for k in range(260)]
    record(loki_entries(lines))
    response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES["multi_agent"])
    leveled = [r for r in _logs(lab, response.run_id) if r.get("level")]
    assert leveled, "the logs were read with a level filter"
    result = leveled[0]
    assert result["total_matches"] == 260 and result["returned"] == 200
    assert result["first_ts"] == result["hits"][0]["ts"] and result["last_ts"] == result["hits"][-1]["ts"]
    assert "n=0" in result["hits"][0]["message"] and "n=259" in result["hits"][-1]["message"]
    assert "; 100 oldest and 100 newest returned; " in result["summary"], result["summary"]
    # The answer dates the errors from their first line (times in the default zone).
    first = datetime.fromisoformat(result["first_ts"].replace("Z", "+00:00")).astimezone(ZoneInfo(DEFAULT_TIME_ZONE))
    assert first.strftime("%Y-%m-%d %H:%M:%S") in response.answer, (first, response.answer)
    assert "仅返回最近" not in response.answer, response.answer


@BOTH_MODES
def test_logs_whose_level_cannot_be_read_are_never_read_as_health(lab, record, auth_metadata, mode) -> None:
    # Plain lines on streams without a level label and without any level word: nothing says
    # whether they are errors, so finding no error among them proves nothing.
    record(loki_entries([(3000 - k * 100, None, f"settle batch {k} handed to ledger-gw in {40 + k} ms")
                         for k in range(25)]))
    response = diagnose(lab.gateway_addr, QUERY, auth_metadata, MODES[mode])
    answer = response.answer
    assert "可信度：高" not in answer and "未发现异常" not in answer and "当前证据未显示异常" not in answer, answer
    assert "无法确认" in answer and "无法识别级别" in answer, answer
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict) != "PASS", answer
    assert any(r.get("unclassified_lines") == 25 and r.get("window_lines") == 25 for r in _logs(lab, response.run_id))
