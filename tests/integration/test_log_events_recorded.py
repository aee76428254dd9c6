"""Events and single error lines through the six real services, in both modes, against a recorded
Loki (tests/recorded_loki.py, Loki's documented formats) and a recorded Prometheus whose CPU series
rises 20 minutes before the question's end.

pay-svc logs a request line every minute (a frequent INFO template), one configuration reload
(INFO) three minutes before the CPU rises, and one ERROR line a minute after. The answer states the
rise, the single ERROR line and the reload, each cited to a tool call of the run; the frequent
request line is no finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from tests.integration.conftest import running_cluster
from tests.integration.failed_call_answers import MODES, diagnose
from tests.monitoring_api_server import LOKI_SERVICE, Guarded, prometheus_env
from tests.recorded_loki import Entry

pytestmark = pytest.mark.integration

BOTH_MODES = pytest.mark.parametrize("mode", list(MODES))
# The data follows the wall clock: the question asks about the last hour.
NOW = datetime.now(UTC).replace(second=0, microsecond=0)
ONSET = NOW - timedelta(minutes=20)
RELOAD = "configuration reloaded from /etc/pay/settlement.yaml (generation 42)"
ERROR = "settlement journal write failed: volume is read-only"


def _entries() -> list[Entry]:
    def entry(at: datetime, level: str, line: str) -> Entry:
        return Entry(labels={"job": LOKI_SERVICE, "pod": "pay-svc-0", "level": level}, line=line, at=at)

    lines = [entry(NOW - timedelta(minutes=70 - k, seconds=30), "INFO", f"served settlement request {k} in {k % 7 + 3} ms")
             for k in range(72)]
    lines.append(entry(ONSET - timedelta(minutes=3), "INFO", RELOAD))
    lines.append(entry(ONSET + timedelta(minutes=1, seconds=10), "ERROR", ERROR))
    return lines


class _RisingCpu(Guarded):
    """The recorded Prometheus answers pay-svc's CPU over any asked window: about 38 % until ONSET,
    about 94 % from then on."""

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, object]:
        if path != "/api/v1/query_range" or 'job="pay-svc"' not in params.get("query", ""):
            return super().answer(path, params)
        start, end = float(params["start"]), float(params["end"])
        step = float(params.get("step", "60s").rstrip("s") or 60)
        values, at = [], start
        while at <= end:
            rising = at >= ONSET.timestamp()
            values.append([at, str((94.0 + (int(at) // 60) % 2) if rising else (38.0 + (int(at) // 60) % 3 * 0.5))])
            at += step
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": "cpu_usage_percent"}, "values": values}]}}


@dataclass
class Lab:
    server: _RisingCpu
    gateway_addr: str
    invocations: InvocationStore


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    server = _RisingCpu()
    server.loki.entries = _entries()
    root = tmp_path_factory.mktemp("log-events")
    # Loki's settings are Prometheus' (one server answers both APIs).
    metrics = prometheus_env(server)
    env = {**metrics, **{key.replace("PROMETHEUS", "LOKI"): value for key, value in metrics.items() if "PROMETHEUS" in key}}
    with running_cluster(root, otlp_receiver.endpoint, new_database(root), env, (server,)) as running:
        yield Lab(server, running.gateway_addr, InvocationStore(make_session_factory(make_engine(running.database_url))))


def _cited_lines(lab: Lab, run_id: str) -> dict[str, str]:
    """The texts of the run's log-line refs, by text."""
    return {ref.text: ref.raw_path for inv in lab.invocations.list_for_run(run_id, "query_logs") if inv.lifecycle == "READY"
            for ref in evidence_view(inv).refs() if ref.raw_path.startswith("hits[")}


@BOTH_MODES
def test_a_config_reload_before_the_onset_and_a_single_error_line_are_in_the_answer(lab, auth_metadata, mode) -> None:
    response = diagnose(lab.gateway_addr, "pay-svc 最近一小时 CPU 为什么升高了？", auth_metadata, MODES[mode])
    answer = response.answer
    assert "cpu_usage_percent" in answer, answer
    # The single ERROR line is a finding; the reload is an event; both quoted, each on a cited line.
    error_lines = [line for line in answer.splitlines() if ERROR in line]
    reload_lines = [line for line in answer.splitlines() if RELOAD in line]
    assert error_lines and reload_lines, answer
    assert any("[" in line and "]" in line for line in reload_lines), reload_lines  # its citation marker
    assert "served settlement request" not in answer, answer  # a frequent template is no event
    # The reload was read by a call of every level around the onset, and that call's line is cited.
    logs = [i for i in lab.invocations.list_for_run(response.run_id, "query_logs") if i.lifecycle == "READY"]
    every_level = [i for i in logs if not i.request.get("level")]
    assert every_level, [i.request for i in logs]
    assert any(RELOAD in text for text in _cited_lines(lab, response.run_id)), "the reload line is not a ref of the run"
    assert "演示" not in answer and "estate" not in answer, answer
