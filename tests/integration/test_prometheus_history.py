"""The Prometheus history fixture against the real Prometheus 2.42 it starts:
what a test built on it relies on — the fault where the ground truth says, only on the faulty
service and on the burning pod, the healthy control flat through a counter reset, metadata only
for the live target, and a Prometheus that can be stopped and started again mid-module."""

from __future__ import annotations

import dataclasses
import io
import re
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from tests.prometheus_history import (
    FAULTY_SERVICE,
    HEALTHY_SERVICE,
    HistoryPlan,
    PrometheusHistory,
    create_blocks,
    prometheus_history_fixture,  # noqa: F401 - provides the prometheus_history fixture
    write_openmetrics,
)

pytestmark = pytest.mark.integration

ERROR_RATIO = ('sum(rate(http_requests_total{{service="{service}",status=~"5.."}}[{window}]))'
               ' / sum(rate(http_requests_total{{service="{service}"}}[{window}]))')
P99 = 'histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{{service="{service}"}}[2m])))'
CPU = 'rate(process_cpu_seconds_total{{service="{service}"}}[2m])'
BACKFILLED_FAMILIES = ("http_requests", "http_request_duration_seconds", "process_cpu_seconds",
                       "http_requests_in_flight", "process_resident_memory_bytes", "process_start_time_seconds",
                       "db_query_duration_seconds", "app_build_info")


def _one(history: PrometheusHistory, expr: str, at: datetime) -> float:
    values = list(history.query(expr, at).values())
    assert len(values) == 1, (expr, values)
    return values[0]


def _by_pod(history: PrometheusHistory, expr: str, at: datetime) -> dict[str, float]:
    data = history.api("query", query=expr, time=f"{at.timestamp():.3f}")
    return {r["metric"]["pod"]: float(r["value"][1]) for r in data["result"]}


def _range(history: PrometheusHistory, expr: str, step: str = "60") -> list[float]:
    data = history.api("query_range", query=expr, start=f"{history.start.timestamp() + 180:.0f}",
                       end=f"{history.end.timestamp():.0f}", step=step)
    assert len(data["result"]) == 1, (expr, data["result"])
    return [float(v) for _, v in data["result"][0]["values"]]


def test_the_ground_truth_instants(prometheus_history) -> None:
    h = prometheus_history
    assert h.end - h.start == timedelta(hours=2) and h.interval == timedelta(seconds=15)
    assert h.fault_start == h.end - timedelta(minutes=70) and h.fault_end == h.end - timedelta(minutes=40)
    assert h.fault_start.tzinfo == UTC
    assert timedelta(0) < datetime.now(UTC) - h.end < timedelta(minutes=5)
    assert {h.faulty_service, h.healthy_service, h.live_service} == {"billing-gateway", "search-frontend",
                                                                       "ledger-worker"}


def test_the_5xx_ratio_rises_from_0_2_to_about_20_percent_inside_the_fault(prometheus_history) -> None:
    h = prometheus_history
    ratio = ERROR_RATIO.format(service=FAULTY_SERVICE, window="2m")
    assert 0.001 < _one(h, ratio, h.fault_start - timedelta(minutes=10)) < 0.004
    assert 0.17 < _one(h, ratio, h.fault_start + timedelta(minutes=15)) < 0.27
    assert 0.001 < _one(h, ratio, h.fault_end + timedelta(minutes=10)) < 0.004


def test_the_fault_begins_and_ends_at_the_ground_truth_instants(prometheus_history) -> None:
    # A 20 s window holds exactly the two samples around one 15 s step.
    h, step = prometheus_history, prometheus_history.interval
    ratio = ERROR_RATIO.format(service=FAULTY_SERVICE, window="20s")
    assert _one(h, ratio, h.fault_start) < 0.01
    assert _one(h, ratio, h.fault_start + step) > 0.15
    assert _one(h, ratio, h.fault_end) > 0.15
    assert _one(h, ratio, h.fault_end + step) < 0.01


def test_the_p99_latency_rises_from_0_12_to_2_5_seconds(prometheus_history) -> None:
    h = prometheus_history
    p99 = P99.format(service=FAULTY_SERVICE)
    assert 0.10 < _one(h, p99, h.fault_start - timedelta(minutes=10)) < 0.15
    assert 2.2 < _one(h, p99, h.fault_start + timedelta(minutes=15)) < 2.8


def test_cpu_burns_on_one_pod_of_the_faulty_service_only(prometheus_history) -> None:
    h = prometheus_history
    inside = h.fault_start + timedelta(minutes=15)
    cpu = _by_pod(h, CPU.format(service=FAULTY_SERVICE), inside)
    assert set(cpu) == {p.name for p in h.plan.pods if p.service == FAULTY_SERVICE}
    burning = cpu.pop(h.plan.burning_pod)
    assert 0.8 < burning < 1.0
    assert all(0.03 < v < 0.07 for v in cpu.values()), cpu
    before = _by_pod(h, CPU.format(service=FAULTY_SERVICE), h.fault_start - timedelta(minutes=10))
    assert all(0.03 < v < 0.07 for v in before.values()), before


def test_in_flight_peaks_differ_by_pod_and_memory_stays_flat(prometheus_history) -> None:
    h = prometheus_history
    window = f"{int((h.fault_end - h.fault_start).total_seconds())}s"
    peaks = _by_pod(h, f'max_over_time(http_requests_in_flight{{service="{FAULTY_SERVICE}"}}[{window}])', h.fault_end)
    assert peaks == {pod: float(peak) for pod, peak in h.plan.in_flight_peaks.items()}
    before = _by_pod(h, f'max_over_time(http_requests_in_flight{{service="{FAULTY_SERVICE}"}}[30m])', h.fault_start)
    assert all(v <= 5 for v in before.values()), before
    memory = h.query("max_over_time(process_resident_memory_bytes[2h]) / min_over_time(process_resident_memory_bytes[2h])",
                     h.end)
    assert len(memory) == 4 and all(1.0 <= v < 1.01 for v in memory.values()), memory


def test_the_healthy_service_has_no_rise_through_its_counter_reset(prometheus_history) -> None:
    h = prometheus_history
    resets = _by_pod(h, "resets(process_cpu_seconds_total[2h])", h.end)
    assert resets == {p.name: float(p.name == h.plan.restarted_pod) for p in h.plan.pods}
    restarted = _by_pod(h, f'process_start_time_seconds{{pod="{h.plan.restarted_pod}"}}', h.end)
    assert restarted == {h.plan.restarted_pod: h.plan.restart_at.timestamp()}
    assert all(0.0005 < v < 0.005 for v in _range(h, ERROR_RATIO.format(service=HEALTHY_SERVICE, window="2m")))
    assert all(0.09 < v < 0.16 for v in _range(h, P99.format(service=HEALTHY_SERVICE)))
    assert all(0.07 < v < 0.13 for v in _range(h, f"sum({CPU.format(service=HEALTHY_SERVICE)})"))
    assert max(_range(h, ERROR_RATIO.format(service=FAULTY_SERVICE, window="2m"))) > 0.17  # the same query can fail


def test_the_last_two_hours_are_queryable_with_build_info(prometheus_history) -> None:
    h = prometheus_history
    now = time.time()
    data = h.api("query_range", query=f'sum(rate(http_requests_total{{service="{FAULTY_SERVICE}"}}[2m]))',
                 start=f"{now - 7200:.0f}", end=f"{now:.0f}", step="60")
    (series,) = data["result"]
    # rate() extrapolates less where its window runs past either end of the history: skip those.
    full = [float(v) for t, v in series["values"]
            if h.start.timestamp() + 120 <= t <= h.end.timestamp()]
    assert len(full) >= 110
    assert all(60 < v < 90 for v in full)  # 2 pods × 38 requests/s
    info = _by_pod(h, "app_build_info", h.end)
    assert info == {p.name: 1.0 for p in h.plan.pods}


def test_metadata_is_known_for_the_live_target_only(prometheus_history) -> None:
    h = prometheus_history
    metadata = h.api("metadata")
    assert {name: entries[0]["type"] for name, entries in metadata.items()} == h.live_metric_types
    assert h.live_metric_types == {"ledger_jobs_processed": "counter", "ledger_job_duration_seconds": "histogram",
                                   "ledger_queue_depth": "gauge"}
    for family in BACKFILLED_FAMILIES:
        for name in (family, f"{family}_total", f"{family}_bucket"):
            assert h.api("metadata", metric=name) == {}, name
    # The live target's series carry its service label from the scrape configuration.
    up = h.api("query", query=f'up{{service="{h.live_service}"}}')["result"]
    assert [float(r["value"][1]) for r in up] == [1.0]


def test_the_openmetrics_file_is_ordered_and_reproducible(prometheus_history) -> None:
    plan = prometheus_history.plan
    first, again = io.StringIO(), io.StringIO()
    write_openmetrics(plan, first)
    write_openmetrics(plan, again)
    assert first.getvalue() == again.getvalue()
    other = io.StringIO()
    write_openmetrics(dataclasses.replace(plan, seed=plan.seed + 1), other)
    assert other.getvalue() != first.getvalue()

    lines = first.getvalue().splitlines()
    assert lines[-1] == "# EOF" and lines.count("# EOF") == 1
    families = [line.split()[2] for line in lines if line.startswith("# TYPE ")]
    assert len(families) == len(set(families)) == len(BACKFILLED_FAMILIES)
    family, seen_families, last_time = None, set(), {}
    for line in lines[:-1]:
        if line.startswith("# TYPE "):
            family = line.split()[2]
            assert family not in seen_families
            seen_families.add(family)
            continue
        if line.startswith("#"):
            continue
        series, _, t = line.rsplit(" ", 2)
        assert re.match(rf"{family}(_total|_created|_bucket|_count|_sum)?{{", series), (family, line)
        assert last_time.get(series, -1) < int(t), line
        last_time[series] = int(t)


def test_promtool_complaints_fail_the_test_with_its_message(tmp_path) -> None:
    source = tmp_path / "broken.om"
    source.write_text('http_requests_total{service="x"} 1 1700000000\n')  # no "# EOF"
    with pytest.raises(pytest.fail.Exception, match="does not end with # EOF"):
        create_blocks(source, tmp_path / "data")
    # promtool itself drops a sample older than the one before it and exits 0; we do not.
    source.write_text('# TYPE c counter\nc_total 2 1700000015\nc_total 1 1700000000\n# EOF\n')
    with pytest.raises(pytest.fail.Exception, match="stored 1 of the 2 samples"):
        create_blocks(source, tmp_path / "data2")


def test_a_plan_is_fixed_by_its_end_instant() -> None:
    end = datetime(2026, 11, 30, 12, 0, 7, tzinfo=UTC)
    plan = HistoryPlan.ending_at(end)
    assert plan.end == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # aligned to the 15 s step
    assert plan.fault_start == datetime(2026, 11, 30, 10, 50, tzinfo=UTC)
    assert plan.fault_end == datetime(2026, 11, 30, 11, 20, tzinfo=UTC)
    assert len(plan.timestamps()) == 481


def test_prometheus_can_be_stopped_mid_test_and_started_again(prometheus_history) -> None:
    h = prometheus_history
    h.stop()
    try:
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{h.url}/-/ready", timeout=2)
    finally:
        h.restart()
    ratio = ERROR_RATIO.format(service=FAULTY_SERVICE, window="2m")
    assert 0.17 < _one(h, ratio, h.fault_start + timedelta(minutes=15)) < 0.27
