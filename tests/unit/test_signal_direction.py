"""Which direction is bad is data: the signal semantics file, falls and ramps as anomalies, and the
question overriding the direction.

- The shipped file classifies by name tokens (a hit ratio's fall is bad, a latency's rise); an
  operator's file is merged over it, and a file that cannot be read stops the settings.
- `assess_series`: a fall is an anomaly with its own onset, the lowest point its clue; a slow
  ramp is one too; a flat noisy series is not.
- The metrics tool's `series[i].onset`/`.end` refs follow the bad direction (`falling from … to`).
- The embedded executor states a fall in Chinese (降至 … 低于窗口前段的 … 约自 … 起下降),
  cites the onset, never presents the healthy level as the clue, and reads the direction a
  question states (「延迟为什么降了」).
"""

from __future__ import annotations

import json
import random
import warnings
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.executor.checked_scope import quiet_series_statement
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.embedded_wording import moved_metrics
from services.executor.tools.backends import MetricSeries
from services.executor.tools.metrics_tool import query_metrics
from services.gatekeeper.engine import check_executor_output
from services.verifier.embedded_verifier import EmbeddedVerifier
from shared.config import CommonSettings
from shared.core.contracts import DiagnosisContext, Plan, RetrievalDetails, ToolInvocation, VerifierInput
from shared.core.evidence_facts import ref_facts
from shared.core.evidence_view import evidence_view
from shared.core.grounding.quiet_series import check_quiet_series
from shared.core.metric_anomaly import assess_series
from shared.core.signal_semantics import SignalSemanticsError, load_semantics, name_tokens, stated_directions
from shared.core.statement_render import render_statement
from shared.core.symptom_lexicon import metric_profile
from shared.core.tool_catalogue import QueryMetricsArguments
from shared.core.tool_results import MetricsResult, read_result

END = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
POINTS = 120


def _noisy(levels: list[float], sd: float, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0, sd) for level in levels]


def _ramp(start: float, end: float, n: int = POINTS) -> list[float]:
    return [start + (end - start) * k / (n - 1) for k in range(n)]


def _step(before: float, after: float, at: int, n: int = POINTS) -> list[float]:
    return [before if k < at else after for k in range(n)]


# --- the data file -------------------------------------------------------------------------------


@pytest.mark.parametrize(("metric", "kind", "bad"), [
    ("cache_hit_ratio", "hit_ratio", "down"),
    ("edgeCacheHitPercent", "hit_ratio", "down"),
    ("http_requests_total:error_ratio", "error_rate", "up"),
    ("http_request_duration_seconds:p99", "latency", "up"),
    ("jvm_heap_used_bytes", "utilisation", "up"),
    ("filesystem_free_bytes", "free_capacity", "down"),
    ("slo_availability_percent", "availability", "down"),
    ("checkout_success_rate", "success_rate", "down"),
    ("consumer_lag", "queue", "up"),
    ("up", "availability", "down"),
    ("up:targets_down", "restarts", "up"),
])
def test_the_shipped_file_classifies_by_name_tokens(metric: str, kind: str, bad: str) -> None:
    found = load_semantics().classify(metric)
    assert found is not None and (found.kind, found.bad) == (kind, bad)


def test_a_percent_is_no_longer_higher_is_worse_by_its_suffix() -> None:
    hit = metric_profile("cache_hit_percent", "percent")
    assert hit.bad_direction == "down" and hit.absolute_threshold is None  # 85 % is no alarm level here
    cpu = metric_profile("cpu_usage_percent", "percent")
    assert cpu.bad_direction == "up" and cpu.absolute_threshold == 85.0
    assert metric_profile("requests_total:rate", "per_second").bad_direction == "up"  # unknown: as before


def test_name_tokens_split_separators_and_camel_case() -> None:
    assert name_tokens("node_memory_MemAvailable_bytes") == ["node", "memory", "mem", "available", "bytes"]
    assert name_tokens("latency:p99") == ["latency", "p99"]


def test_an_operator_file_extends_and_overrides_the_shipped_one(tmp_path: Path) -> None:
    extra = tmp_path / "semantics.json"
    extra.write_text(json.dumps({"kinds": {
        "token_budget": {"bad": "down", "tokens": ["quota", "budget"], "question_words": ["配额"]},
        "cpu_credit": {"bad": "down", "tokens": ["credit", "cpu"]},
    }}), encoding="utf-8")
    semantics = load_semantics(str(extra))
    assert semantics.bad_direction("tenant_quota_units") == "down"
    assert semantics.classify("node_cpu_seconds").kind == "cpu_credit"  # the token was taken over
    assert semantics.classify("jvm_heap_used_bytes").kind == "utilisation"  # the rest of the kind stays
    assert load_semantics().classify("node_cpu_seconds").kind == "utilisation"  # the shipped table is untouched
    assert stated_directions("配额为什么掉了", semantics) == {"token_budget": "down"}


@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot be read"),
    ("{not json", "is not JSON"),
    (json.dumps({"kinds": {"x": {"bad": "sideways", "tokens": ["x"]}}}), "kinds.x.bad"),
    (json.dumps({"kinds": {"x": {"bad": "up", "tokens": ["Not A Token"]}}}), "kinds.x.tokens"),
    (json.dumps({"kinds": {"x": {"bad": "up", "tokens": ["x"], "colour": "red"}}}), "kinds.x.colour"),
])
def test_a_bad_file_is_a_clear_start_up_error(tmp_path: Path, monkeypatch, content: str | None, says: str) -> None:
    path = tmp_path / "semantics.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(SignalSemanticsError, match=says):
        load_semantics(str(path))
    monkeypatch.setenv("ATTEST_SIGNAL_SEMANTICS_FILE", str(path))
    with pytest.raises(ValidationError, match="signal semantics file"):
        CommonSettings()


# --- the question's direction --------------------------------------------------------------------


@pytest.mark.parametrize(("question", "expected"), [
    ("edge-cache 的命中率为什么降了？", {"hit_ratio": "down"}),
    ("为什么命中率下降、延迟升高？", {"hit_ratio": "down", "latency": "up"}),
    ("命中率和成功率都跌了", {"hit_ratio": "down", "success_rate": "down"}),
    ("延迟为什么越来越高", {"latency": "up"}),
    ("why did the hit ratio drop", {"hit_ratio": "down"}),
    ("版本升级后出了什么问题", {}),
    ("命中率有没有异常", {}),
])
def test_the_question_states_a_direction(question: str, expected: dict[str, str]) -> None:
    assert stated_directions(question, load_semantics()) == expected


# --- falls, ramps, flat noise --------------------------------------------------------------------


def test_a_falling_hit_ratio_is_an_anomaly_with_its_onset_and_the_low_as_the_clue() -> None:
    values = _noisy(_step(85.0, 25.0, 70), 1.5)
    assessment = assess_series("cache_hit_percent", "percent", values)
    anomaly = assessment.anomaly
    assert anomaly is not None and anomaly.direction == "down"
    assert values[anomaly.peak_index] < 30 and anomaly.peak_index >= 70  # the low, never the healthy 85 %
    assert anomaly.onset_index is not None and abs(anomaly.onset_index - 70) <= 1
    # The same fall of a latency is no anomaly (it got better)…
    assert assess_series("request_latency_seconds", "seconds", [v / 10 for v in values]).anomaly is None
    # …unless the question says that is what it asks about.
    asked = assess_series("request_latency_seconds", "seconds", [v / 10 for v in values], "down").anomaly
    assert asked is not None and asked.direction == "down"


def test_a_fall_near_a_full_share_counts_by_its_complement() -> None:
    values = _noisy(_step(99.9, 96.5, 80), 0.05)
    anomaly = assess_series("service_availability_percent", "percent", values).anomaly
    assert anomaly is not None and anomaly.direction == "down" and anomaly.relative


@pytest.mark.parametrize(("metric", "unit", "start", "end", "sd"), [
    ("upstream_latency_seconds", "seconds", 1.6, 6.0, 0.25),
    ("cpu_usage_percent", "percent", 36.0, 80.0, 2.5),
    ("jvm_heap_bytes", "bytes", 2.6e9, 4.3e9, 6e7),
    ("cache_hit_percent", "percent", 80.0, 50.0, 1.5),
])
def test_a_slow_ramp_is_an_anomaly(metric: str, unit: str, start: float, end: float, sd: float) -> None:
    for seed in range(5):
        anomaly = assess_series(metric, unit, _noisy(_ramp(start, end), sd, seed)).anomaly
        assert anomaly is not None, (metric, seed)
        assert anomaly.direction == ("up" if end > start else "down")


def test_the_heap_ramp_the_step_test_alone_misses_is_found_by_the_trend() -> None:
    anomaly = assess_series("jvm_heap_bytes", "bytes", _noisy(_ramp(2.6e9, 4.3e9), 6e7, 1)).anomaly
    assert anomaly is not None and anomaly.trend and not anomaly.relative


@pytest.mark.parametrize("n", [30, 60, 120, 240])
def test_flat_noisy_series_are_no_anomaly(n: int) -> None:
    series = [("cpu_usage_percent", "percent", 40.0, 5.0), ("upstream_latency_seconds", "seconds", 1.0, 0.1),
              ("cache_hit_percent", "percent", 85.0, 3.0), ("jvm_heap_bytes", "bytes", 2e9, 5e7)]
    flagged = []
    for seed in range(40):
        for metric, unit, level, sd in series:
            values = _noisy([level] * n, sd, seed * 1000 + n)
            if assess_series(metric, unit, values).anomaly is not None:
                flagged.append((metric, seed))
    assert not flagged


def test_a_slow_drift_within_the_noise_is_no_anomaly() -> None:
    for seed in range(40):
        values = _noisy(_ramp(40.0, 46.0), 3.0, seed)  # +15 % over the window: not material
        assert assess_series("cpu_usage_percent", "percent", values).anomaly is None, seed


def test_no_runtime_warning_on_odd_values() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for values in ([float("nan")] * 10, [float("inf"), 1.0] * 6, [1e200, -1e200] * 5, [0.0] * 8):
            assess_series("cache_hit_percent", "percent", values)
            assess_series("cpu_usage_percent", "percent", values)


# --- the tool's refs and the executor's words ----------------------------------------------------


class _OneSeries:
    source_name = "test-metrics"

    def __init__(self, service: str, metric: str, unit: str, values: list[float]) -> None:
        self.service, self.metric, self.unit, self.values = service, metric, unit, values

    def query_range(self, service: str, metric: str | None, start: datetime, end: datetime, step: int) -> list[MetricSeries]:
        first = END - timedelta(minutes=len(self.values) - 1)
        points = [(first + timedelta(minutes=k), value) for k, value in enumerate(self.values)]
        return [MetricSeries(self.metric, self.unit, points)] if service == self.service else []


def _metrics_call(service: str, metric: str, unit: str, values: list[float]) -> ToolInvocation:
    backend = _OneSeries(service, metric, unit, values)
    args = QueryMetricsArguments(service=service, start=END - timedelta(hours=2), end=END, step_seconds=60)
    result = query_metrics(backend, args)  # type: ignore[arg-type]
    return ToolInvocation(
        invocation_id=101, run_id="run-1", tool_name="query_metrics", lifecycle="READY",
        evidence_status=result.evidence_status, request=result.request_scope, agent_result=result.agent_result,
        retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()),
    )


def _refs(invocation: ToolInvocation) -> dict[str, str]:
    return {ref.raw_path: ref.text for ref in evidence_view(invocation).refs()}


def test_the_tools_onset_and_end_refs_follow_the_fall() -> None:
    values = _noisy([85.0] * 50 + [25.0] * 40 + [85.0] * 30, 1.0)
    invocation = _metrics_call("edge-cache", "cache_hit_percent", "percent", values)
    data = read_result("query_metrics", invocation.agent_result)
    assert isinstance(data, MetricsResult)
    series = data.series[0]
    assert series.onset is not None and series.onset.direction == "down" and abs(series.onset.index - 50) <= 1
    assert series.end is not None and abs(series.end.index - 90) <= 1
    refs = _refs(invocation)
    assert "onset at" in refs["series[0].onset"] and ": falling from 8" in refs["series[0].onset"]
    assert "back at" in refs["series[0].end"]


def _derive(query: str, invocation: ToolInvocation, service: str):
    plan = Plan(services=[service], symptoms=[])
    return EmbeddedExecutorAgent().derive(plan, [invocation], query)


def test_the_executor_states_a_fall_citing_its_onset() -> None:
    values = _noisy(_step(85.0, 25.0, 70), 1.0)
    invocation = _metrics_call("edge-cache", "cache_hit_percent", "percent", values)
    output = _derive("edge-cache 的命中率为什么降了？", invocation, "edge-cache")
    claim = next(c for c in output.claims if "cache_hit_percent" in c.claim_text)
    text = claim.claim_text
    assert "降至 2" in text and "低于窗口前段的 8" in text and "起下降" in text, text
    assert "达到" not in text and "升高" not in text, text
    paths = [b.raw_path for b in claim.evidence_bindings]
    assert paths[0].startswith("series[0].points[") and int(paths[0].split("[")[2].rstrip("]")) >= 70
    assert "series[0].onset" in paths
    refs = _refs(invocation)
    assert all(b.evidence_excerpt in refs[b.raw_path] for b in claim.evidence_bindings)


def test_the_question_overrides_the_direction_of_a_named_signal() -> None:
    values = _noisy(_step(2.4, 0.6, 70), 0.05)  # a latency that fell
    invocation = _metrics_call("edge-cache", "request_latency_seconds", "seconds", values)
    plain = _derive("edge-cache 最近两小时有什么异常？", invocation, "edge-cache")
    assert not any(c.claim_type == "symptom" for c in plain.claims), [c.claim_text for c in plain.claims]
    asked = _derive("edge-cache 的延迟为什么降了？", invocation, "edge-cache")
    fell = [c for c in asked.claims if "request_latency_seconds" in c.claim_text and "降至" in c.claim_text]
    assert fell, [c.claim_text for c in asked.claims]


def _quiet_text(invocation: ToolInvocation, data: MetricsResult) -> str:
    """The sentence Attest writes for the first series of `data` read as quiet."""
    statement = quiet_series_statement(invocation, 0, "edge-cache", data.series[0], data.start or "", data.end or "")
    assert statement is not None
    return render_statement(statement, None) + "。"


def test_a_quiet_hit_ratio_is_stated_by_its_lowest_value() -> None:
    values = _noisy([85.0] * 60, 0.5)
    invocation = _metrics_call("edge-cache", "cache_hit_percent", "percent", values)
    data = read_result("query_metrics", invocation.agent_result)
    assert isinstance(data, MetricsResult)
    text = _quiet_text(invocation, data)
    assert "最低为 8" in text and text.endswith("未见明显下降。") and "最高" not in text


# --- the gatekeeper and the verifier -------------------------------------------------------------


def _verified(output, invocation: ToolInvocation) -> dict[str, str]:
    """claim id -> the embedded verifier's verification, after the gatekeeper's checks."""
    check = check_executor_output("run-1", output.model_dump(mode="json", exclude_none=True), [invocation])
    assert check.gatekeeper_result.status == "pass", check.gatekeeper_result
    inp = VerifierInput(
        diagnosis_context=DiagnosisContext(query="q"), verified_executor_output=check.verified_executor_output,
        verified_evidence=check.verified_evidence, gatekeeper_audit=check.gatekeeper_result,
        verdict_ceiling=check.verdict_ceiling,
    )
    verified = EmbeddedVerifier().verify(inp)
    return {c.claim_id: c.verification for c in verified.claim_checks}


def test_a_true_fall_and_a_true_ramp_are_verified_and_a_fabricated_fall_is_not() -> None:
    for metric, values in (("cache_hit_percent", _noisy(_step(85.0, 25.0, 70), 1.0)),
                           ("upstream_latency_seconds", _noisy(_ramp(1.6, 6.0), 0.2))):
        invocation = _metrics_call("edge-cache", metric, "percent" if "percent" in metric else "seconds", values)
        output = _derive("edge-cache 最近两小时有什么异常？", invocation, "edge-cache")
        claim = next(c for c in output.claims if metric in c.claim_text)
        assert _verified(output, invocation)[claim.claim_id] in ("direct_observation", "reasonable_inference")
        if metric == "cache_hit_percent":
            # The claim is typed: its sentence is written from its statement, so the lie is a value.
            assert "降至" in claim.claim_text and claim.statement is not None and claim.statement.state == "fall"
            peak = next(q for q in claim.statement.quantities if q.role == "peak")
            claim.statement = claim.statement.model_copy(update={"quantities": [
                q.model_copy(update={"value": 5.0}) if q is peak else q for q in claim.statement.quantities]})
            assert _verified(output, invocation)[claim.claim_id] in ("contradicted", "external_unknown")


def test_a_quiet_claim_about_a_hit_ratio_that_fell_is_contradicted() -> None:
    values = _noisy(_step(85.0, 25.0, 40, 60), 1.0)
    invocation = _metrics_call("edge-cache", "cache_hit_percent", "percent", values)
    data = read_result("query_metrics", invocation.agent_result)
    assert isinstance(data, MetricsResult) and data.series[0].summary is not None
    facts = ref_facts(invocation, "series[0].summary")
    stats = data.series[0].summary
    lie = (f"edge-cache 的 cache_hit_percent 在 {data.start} 至 {data.end} 期间最低为 {stats.min:.1f}%，"
           f"中位数 {stats.median:.1f}%，未见明显下降。")
    verdict = check_quiet_series(lie, [facts])
    assert verdict is not None and verdict.verification == "contradicted"
    flat = _metrics_call("edge-cache", "cache_hit_percent", "percent", _noisy([85.0] * 60, 0.5))
    flat_data = read_result("query_metrics", flat.agent_result)
    assert isinstance(flat_data, MetricsResult)
    text = _quiet_text(flat, flat_data)
    verdict = check_quiet_series(text, [ref_facts(flat, "series[0].summary")])
    assert verdict is not None and verdict.verification == "direct_observation"


def test_a_fall_is_said_as_a_fall_where_anomalies_are_named_together() -> None:
    values = _noisy(_step(85.0, 25.0, 70), 1.0)
    invocation = _metrics_call("edge-cache", "cache_hit_percent", "percent", values)
    findings = EmbeddedExecutorAgent()._collect(Plan(services=["edge-cache"]), [invocation], "")
    anomaly = next(c for c in findings.candidates if c.kind == "anomaly")
    assert anomaly.moved == "下降"
    rise = replace(anomaly, metric="upstream_latency_seconds", moved="升高")
    assert moved_metrics([anomaly]) == "cache_hit_percent 下降"
    assert moved_metrics([anomaly, rise]) == "cache_hit_percent 下降、upstream_latency_seconds 升高"
