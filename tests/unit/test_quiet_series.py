"""A metric stated as quiet is checked against its cited summary's numbers:
confirmed only when no baseline can make the peak a rise, contradicted when the summary shows one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.executor.tools.backends import MetricSeries
from services.executor.tools.metrics_tool import query_metrics
from shared.core.contracts import RefFacts, RetrievalDetails, StatedValue, ToolInvocation
from shared.core.evidence_facts import ref_facts
from shared.core.grounding.quiet_series import (
    CHECK_ID,
    check_quiet_series,
    quiet_series_findings,
    read_quiet,
    summary_state,
)
from shared.core.metric_anomaly import assess_series, read_series
from shared.core.tool_catalogue import QueryMetricsArguments

QUIET_CLAIM = "cart-api 的 {metric} 在 T0 至 T1 期间最高为 {high}，中位数 {mid}，未见明显升高。"


def summary(metric: str, low: float, mid: float, high: float, unit: str = "") -> RefFacts:
    return RefFacts(
        kind="metric_summary", subject="cart-api", metric=metric,
        window_start="2026-11-30T10:00:00Z", window_end="2026-11-30T11:00:00Z",
        values=[StatedValue(name="min", value=low, unit=unit), StatedValue(name="median", value=mid, unit=unit),
                StatedValue(name="max", value=high, unit=unit, at="2026-11-30T10:30:00Z")],
        item_count=60,
    )


def claim(metric: str, facts: RefFacts) -> str:
    values = {v.name: v.value for v in facts.values}
    return QUIET_CLAIM.format(metric=metric, high=values["max"], mid=values["median"])


@pytest.mark.parametrize(
    ("text", "quiet", "normal"),
    [
        ("cart-api 的 heap_used_bytes 最高为 1.15GiB，中位数 1.12GiB，未见明显升高。", True, True),
        ("cart-api 的 http_server_error_ratio 最高为 0 ratio，未见明显升高。", True, True),
        ("cart-api 的 CPU 使用率平稳。", True, True),
        ("cpu showed no significant increase", True, True),
        ("cart-api 在 T0 至 T1 期间没有 ERROR/WARN 日志（0 matching lines）。", False, True),
        ("cart-api 没有出现异常，但 CPU 明显上升。", False, False),
        ("cart-api 的 error_count 没有上升，但有 12 条 ERROR 日志。", False, False),
        ("cart-api 多次出现 ERROR 日志：「OSError: No space left on device」。", False, False),
        ("cart-api 的 cpu_usage 在 T2 达到 95%。", False, False),
    ],
)
def test_a_quiet_claim_is_read_from_its_own_words(text, quiet, normal):
    reading = read_quiet(text)
    assert (reading.quiet, reading.normal) == (quiet, normal)


def test_a_narrow_range_below_the_level_is_shown_quiet():
    facts = summary("process_cpu_usage", 18, 20, 24, "%")
    verdict = check_quiet_series(claim("process_cpu_usage", facts), [facts])
    assert verdict is not None and verdict.verification == "direct_observation" and verdict.check_id == CHECK_ID


def test_bytes_are_judged_in_megabytes():
    # 1.10 to 1.15 GiB of heap: 50 MB apart, under the 64 MiB a rise of bytes needs.
    facts = summary("heap_used_bytes", 1126.4, 1146.9, 1177.6, "MB")
    assert check_quiet_series(claim("heap_used_bytes", facts), [facts]).verification == "direct_observation"


def test_a_zero_error_ratio_is_quiet():
    facts = summary("http_server_error_ratio", 0, 0, 0, "%")
    assert check_quiet_series(claim("http_server_error_ratio", facts), [facts]).verification == "direct_observation"


def test_a_lying_no_rise_over_a_summary_that_rose_is_contradicted():
    # The model says "no rise" of a series whose peak is four times its median.
    facts = summary("request_latency_ms", 110, 120, 480, "ms")
    verdict = check_quiet_series(claim("request_latency_ms", facts), [facts])
    assert verdict.verification == "contradicted"
    assert "shows one" in verdict.detail
    [finding] = quiet_series_findings(claim("request_latency_ms", facts), [facts])
    assert (finding.check_id, finding.verification) == (CHECK_ID, "contradicted")


def test_a_peak_at_the_absolute_level_is_a_rise_whatever_the_median():
    facts = summary("process_cpu_usage", 84, 88, 91, "%")  # utilisation at 85% or more
    assert check_quiet_series(claim("process_cpu_usage", facts), [facts]).verification == "contradicted"


def test_a_wide_range_without_a_clear_rise_is_only_an_inference():
    # 40 to 84 around a median of 60: no rise over the median, but the summary cannot show that
    # the first third of the window was not at 40.
    facts = summary("job_queue_depth", 40, 60, 84)
    verdict = check_quiet_series(claim("job_queue_depth", facts), [facts])
    assert verdict.verification == "reasonable_inference"
    [finding] = quiet_series_findings(claim("job_queue_depth", facts), [facts])
    assert finding.verification == "reasonable_inference"


def test_not_this_checks_business():
    facts = summary("process_cpu_usage", 18, 20, 24, "%")
    assert check_quiet_series("cart-api 的 process_cpu_usage 在 T2 达到 24%。", [facts]) is None
    assert check_quiet_series("cart-api 的 process_cpu_usage 未见明显升高。", [None]) is None
    # A quiet claim about another metric than the one cited is left to the name checks.
    assert check_quiet_series("cart-api 的 heap_used_bytes 未见明显升高。", [facts]) is None
    assert quiet_series_findings("cart-api 的 process_cpu_usage 未见明显升高。", [facts]) == []


def test_only_the_named_metrics_summaries_count():
    quiet = summary("process_cpu_usage", 18, 20, 24, "%")
    rose = summary("request_latency_ms", 110, 120, 480, "ms")
    assert check_quiet_series(claim("process_cpu_usage", quiet), [quiet, rose]).verification == "direct_observation"
    text = "cart-api 的 process_cpu_usage 和 request_latency_ms 均未见明显升高。"
    assert check_quiet_series(text, [quiet, rose]).verification == "contradicted"


@pytest.mark.parametrize(
    ("values", "unit", "metric"),
    [
        ([20, 21, 19, 20, 22, 21, 20, 23, 21, 22, 20, 21], "percent", "process_cpu_usage"),
        ([120, 118, 125, 122, 119, 121, 124, 123, 120, 126, 122, 121], "ms", "request_latency_ms"),
        ([5, 6, 5, 5, 6, 5, 5, 6, 5, 6, 5, 5], "", "job_queue_depth"),
    ],
)
def test_a_series_shown_quiet_is_one_the_detector_does_not_flag(values, unit, metric):
    """Soundness against the executor's detector: whatever its baseline, `quiet` implies no anomaly."""
    facts = summary(metric, min(values), sorted(values)[len(values) // 2], max(values),
                    {"percent": "%", "ms": "ms", "": ""}[unit])
    assert summary_state(facts).state == "quiet"
    assert assess_series(metric, unit, [float(v) for v in values]).anomaly is None


def test_a_series_the_detector_flags_is_never_shown_quiet():
    values = [20.0] * 30 + [60.0] * 30  # a step up half-way: the whole-window median is 40
    facts = summary("process_cpu_usage", 20, 40, 60, "%")
    assert assess_series("process_cpu_usage", "percent", values).anomaly is not None
    assert summary_state(facts).state != "quiet"


class _OneSeries:
    """A metrics backend with one series of given values, a point a minute (names are the test's)."""

    source_name = "test:one-series"

    def __init__(self, metric: str, unit: str, values: list[float]) -> None:
        self.series = (metric, unit, values)

    def query_range(self, service, metric, start, end, step_seconds):
        name, unit, values = self.series
        at = [datetime(2026, 11, 29, 10, 0, tzinfo=UTC) + timedelta(minutes=k) for k in range(len(values))]
        return [MetricSeries(name, unit, list(zip(at, values)))]


def _summary_facts(metric: str, unit: str, values: list[float]) -> RefFacts:
    args = QueryMetricsArguments(service="svc-q", start="2026-11-29T10:00:00Z", end="2026-11-29T11:00:00Z")
    result = query_metrics(_OneSeries(metric, unit, values), args)
    invocation = ToolInvocation(
        invocation_id=1, run_id="r", tool_call_id="c", tool_name=result.tool_name, lifecycle="READY",
        evidence_status=result.evidence_status, request={"service": "svc-q"}, agent_result=result.agent_result,
        retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()))
    facts = ref_facts(invocation, "series[0].summary")
    assert facts is not None
    return facts


def test_a_summary_read_with_its_series_is_read_by_the_executors_own_rule():
    """One blip in a flat series: the detector (the executor's rule) calls it quiet, although its
    min/median/max alone look like a rise; the verifier reads the series the same way, so a quiet
    claim the executor makes over it is confirmed, not doubted."""
    values = [20.0] * 20 + [55.0] + [20.0] * 19
    facts = _summary_facts("worker_busy_percent", "percent", values)
    assert read_series("worker_busy_percent", "percent", values).state == "quiet"
    assert facts.series_state == "quiet" and summary_state(facts).state == "quiet"
    alone = facts.model_copy(update={"series_state": ""})  # the same numbers without the series
    assert summary_state(alone).state == "rise"
    text = "svc-q 的 worker_busy_percent 在窗口内未见明显升高。"
    assert check_quiet_series(text, [facts]).verification == "direct_observation"


def test_a_step_the_detector_flags_is_a_rise_by_the_same_rule():
    values = [20.0] * 20 + [60.0] * 20
    facts = _summary_facts("worker_busy_percent", "percent", values)
    assert facts.series_state == "rise" == read_series("worker_busy_percent", "percent", values).state
    text = "svc-q 的 worker_busy_percent 在窗口内未见明显升高。"
    assert check_quiet_series(text, [facts]).verification == "contradicted"
