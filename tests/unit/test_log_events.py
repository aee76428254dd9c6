"""Events are read: after the planned calls, the embedded executor reads every level around a
service's onset, and a line whose template is new or rare there (whatever its level or words) is a
candidate event citing its line; a frequent template is not. One ERROR line is a finding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.tools.backends import LogQueryResult, LogRecord, MetricSeries, ToolBackends
from services.executor.tools.registry import build_default_registry
from shared.core.contracts import ExecutorEvidenceV2
from shared.core.embedded_planner import EmbeddedPlanner
from tests.unit.test_embedded_agent import InMemoryInvocations, _assert_grounded

NOW = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
ONSET = NOW - timedelta(minutes=20)
SERVICE = "ledger-api"
RELOAD = "configuration reloaded from /etc/ledger/ledger.yaml (generation 42)"
ERROR = "settlement write failed: journal volume read-only"


class _RisingCpu:
    source_name = "prometheus:http://127.0.0.1:9090"

    def query_range(self, service, metric, start, end, step_seconds):
        stamps = [end - timedelta(minutes=59 - k) for k in range(60)]
        values = [38.0 + (k % 3) * 0.5 if stamp < ONSET else 94.0 + (k % 2) for k, stamp in enumerate(stamps)]
        return [MetricSeries("cpu_usage_percent", "percent", list(zip(stamps, values)), signal="cpu")]


def _lines() -> list[LogRecord]:
    lines = [LogRecord(NOW - timedelta(minutes=60 - k), "INFO", SERVICE, "ledger-0", f"served request {k} in {k % 9 + 3} ms")
             for k in range(61)]
    lines.append(LogRecord(ONSET - timedelta(minutes=3), "INFO", SERVICE, "ledger-0", RELOAD))
    lines.append(LogRecord(ONSET + timedelta(minutes=1, seconds=10), "ERROR", SERVICE, "ledger-0", ERROR))
    return sorted(lines, key=lambda line: line.ts)


class _Logs:
    """Lines of every level; a read selects by level and window, the newest `limit` returned."""

    source_name = "loki:http://127.0.0.1:3100"

    def __init__(self) -> None:
        self.reads: list[tuple[datetime, datetime, tuple[str, ...] | None]] = []

    def query_range(self, service, start, end, levels, contains, limit):
        self.reads.append((start, end, tuple(levels) if levels else None))
        found = [line for line in _lines() if start <= line.ts <= end and (not levels or line.level in levels)
                 and (not contains or contains.lower() in line.message.lower())]
        return LogQueryResult(total_matches=len(found), records=found[-limit:],
                              first_ts=found[0].ts if found else None, last_ts=found[-1].ts if found else None)


def _ask(query: str) -> tuple[ExecutorEvidenceV2, InMemoryInvocations, _Logs, EmbeddedExecutorAgent]:
    logs = _Logs()
    registry = build_default_registry(ToolBackends(
        metrics=_RisingCpu(), logs=logs, disabled=frozenset({"query_changes", "lookup_knowledge"}), clock=lambda: NOW))
    calls = InMemoryInvocations(registry)
    agent = EmbeddedExecutorAgent()
    text = agent.run(EmbeddedPlanner().plan(query, NOW), calls, query)
    return ExecutorEvidenceV2.model_validate_json(text), calls, logs, agent


def test_a_rare_info_line_before_the_onset_is_an_event_and_a_frequent_one_is_not() -> None:
    query = f"{SERVICE} 最近一小时 CPU 为什么高？"
    output, calls, logs, agent = _ask(query)
    _assert_grounded(output, calls)
    # One read of every level around the onset, after the planned reads.
    start, end, levels = logs.reads[-1]
    assert levels is None and start == ONSET - timedelta(minutes=15) and end == ONSET + timedelta(minutes=5)
    findings = agent._collect(EmbeddedPlanner().plan(query, NOW), list(calls.invocations.values()))
    events = [c for c in findings.candidates if c.kind == "event"]
    assert [RELOAD in c.text for c in events] == [True], [c.text for c in events]
    [event] = events
    assert event.first_ts == "2026-11-29T10:37:00Z" and event.level == "INFO" and event.template
    assert not any("served request" in c.text for c in findings.candidates)
    # Cited to its line in the event read, ranked below the anomaly and the error line.
    [binding] = event.bindings
    read = calls.invocations[binding.source_invocation_id]
    assert read.request.get("level") is None and binding.raw_path.startswith("hits[")
    anomaly = next(c for c in findings.candidates if c.kind == "anomaly")
    error = next(c for c in findings.candidates if c.kind == "log_cluster")
    assert event.score < error.score < anomaly.score
    claim = next(c for c in output.claims if RELOAD[:40] in c.claim_text)
    assert claim.claim_type == "observation" and claim.claim_text.startswith(f"{SERVICE} 在 2026-11-29T10:37:00Z 出现 INFO 日志")


def test_one_error_line_is_a_finding_and_is_not_repeated_by_the_event_read() -> None:
    output, _, _, _ = _ask(f"{SERVICE} 最近一小时有什么异常？")
    errors = [c for c in output.claims if ERROR in c.claim_text and "ERROR" in c.claim_text]
    assert errors, [c.claim_text for c in output.claims]
    assert not any(c.claim_type == "observation" and c.claim_text.startswith(f"{SERVICE} 在") and ERROR in c.claim_text
                   and "多次" in c.claim_text for c in output.claims)
    assert sum(1 for c in output.claims if c.claim_text.count(ERROR[:30]) and "出现 ERROR 日志" in c.claim_text) == 1


def test_a_confirmation_question_leaves_events_out() -> None:
    output, _, _, _ = _ask(f"{SERVICE} 最近一小时 CPU 是不是升高了？")
    assert not any(RELOAD[:40] in c.claim_text for c in output.claims), [c.claim_text for c in output.claims]


def test_the_event_read_stays_within_the_run_budget() -> None:
    """A call_tool whose budget is spent runs no event read (and the run still answers)."""
    logs = _Logs()
    registry = build_default_registry(ToolBackends(
        metrics=_RisingCpu(), logs=logs, disabled=frozenset({"query_changes", "lookup_knowledge"}), clock=lambda: NOW))
    calls = InMemoryInvocations(registry)
    calls.exhausted = RuntimeError("spent")  # what the ToolRunner sets once the budget is used up
    query = f"{SERVICE} 最近一小时 CPU 为什么高？"
    EmbeddedExecutorAgent().run(EmbeddedPlanner().plan(query, NOW), calls, query)
    assert all(levels is not None for _, _, levels in logs.reads), logs.reads
