"""A falling signal and slow ramps, read from a real Prometheus through the six real services, in
both modes: which direction is bad comes from the signal's semantics, not from a `_percent` suffix.

A real Prometheus 2.42 holds two hours of backfilled history (written here as OpenMetrics and
turned into blocks by promtool, as tests/prometheus_history.py does):
- `edge-cache`: its `cache_hit_rate_percent` holds ~85 % and falls to ~25 % an hour before the end
  (`fall_at`, the ground truth), and stays there; its request latency is flat.
- `ledger-api`: its `backend_latency_p99_seconds` creeps from 1.6 s to 6 s over the two hours and
  its `jvm_memory_heap_used_bytes` from 2.6 GB to 4.3 GB; its CPU share is flat.

What a user reads is asserted: the fall is the anomaly, stated as a fall (降至 ~25 %, 低于窗口前段的
~85 %, 约自 <the truth> 起下降, its onset ref cited), and the healthy 85 % is never the clue; the
latency ramp is reported as a rise to ~6 s.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from attest.common.v1 import enums_pb2
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.proto_convert import enum_number
from tests.integration.conftest import start_cluster
from tests.integration.test_prometheus_reading import _ask, _first_line, _local, _outcome
from tests.prometheus_history import PrometheusProcess, _get, create_blocks, free_port

pytestmark = pytest.mark.integration

SINGLE_REACT = enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, "SINGLE_REACT")
MODES = pytest.mark.parametrize("mode", [0, SINGLE_REACT], ids=["multi_agent", "single_react"])
INTERVAL = timedelta(seconds=15)
HISTORY = timedelta(hours=2)
STEP = timedelta(seconds=60)  # the step the metrics tool asks a two-hour window at
LOCAL_TIME = r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
CACHE, LEDGER = "edge-cache", "ledger-api"
HIT, LATENCY, HEAP, CPU = ("cache_hit_rate_percent", "backend_latency_p99_seconds", "jvm_memory_heap_used_bytes",
                           "process_cpu_usage_percent")


@dataclass
class Estate:
    gateway: str
    invocations: InvocationStore
    start: datetime
    end: datetime
    fall_at: datetime


def _history(end: datetime) -> tuple[str, datetime, datetime]:
    """The OpenMetrics text of both services' gauges, and the first instant and the fall's."""
    step = int(INTERVAL.total_seconds())
    end = datetime.fromtimestamp(int(end.timestamp()) // step * step, UTC)
    start = end - HISTORY
    fall_at = end - timedelta(minutes=60)
    times = range(int(start.timestamp()), int(end.timestamp()) + 1, step)
    total = len(times) - 1
    rng = random.Random(33)

    def labels(service: str) -> str:
        return f'{{job="{service}",service="{service}",pod="{service}-0",instance="10.0.0.7:8080"}}'

    families = {
        HIT: (CACHE, lambda k, t: (85.0 if t < fall_at.timestamp() else 25.0) + rng.gauss(0, 1.2)),
        "http_server_latency_seconds": (CACHE, lambda k, t: 0.08 + rng.gauss(0, 0.004)),
        LATENCY: (LEDGER, lambda k, t: 1.6 + 4.4 * k / total + rng.gauss(0, 0.12)),
        HEAP: (LEDGER, lambda k, t: 2.6e9 + 1.7e9 * k / total + rng.gauss(0, 3e7)),
        CPU: (LEDGER, lambda k, t: 30.0 + rng.gauss(0, 1.5)),
    }
    lines: list[str] = []
    for name, (service, value) in families.items():
        lines.append(f"# HELP {name} {name.replace('_', ' ')}.\n# TYPE {name} gauge\n")
        for k, t in enumerate(times):
            lines.append(f"{name}{labels(service)} {round(value(k, t), 4)} {t}\n")
    lines.append("# EOF\n")
    return "".join(lines), start, fall_at


@pytest.fixture(scope="module")
def estate(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Estate]:
    root = tmp_path_factory.mktemp("prometheus-falls")
    text, start, fall_at = _history(datetime.now(UTC) - timedelta(minutes=1))
    source = root / "history.om"
    source.write_text(text)
    data = create_blocks(source, root / "data")
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = PrometheusProcess(root, port, [f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                                             "--storage.tsdb.retention.time=30d"],
                                lambda: _get(f"{url}/-/ready") is not None)
    process.start()
    try:
        running = start_cluster(root, otlp_receiver.endpoint, {"ATTEST_PROMETHEUS_URL": url},
                                database_url=new_database(root))
        try:
            sessions = make_session_factory(make_engine(running.database_url))
            yield Estate(running.gateway_addr, InvocationStore(sessions), start, start + HISTORY, fall_at)
        finally:
            running.stop()
    finally:
        process.stop()


def _sentence(answer: str, metric: str, word: str) -> str:
    lines = [line for line in answer.splitlines() if metric in line and word in line]
    assert lines, f"nothing said about {metric} with {word}:\n{answer}"
    return max(lines, key=lambda line: (len(line.split("[证据")[0]), "…" not in line))


def _bindings(estate: Estate, run_id: str) -> list[dict]:
    """The metrics series the run read, as stored in the audit."""
    found: list[dict] = []
    for invocation in estate.invocations.list_for_run(run_id, "query_metrics"):
        if invocation.lifecycle == "READY":
            found += json.loads(invocation.agent_result)["series"]
    return found


@MODES
def test_a_falling_hit_ratio_is_the_anomaly_with_its_onset(estate, auth_metadata, mode) -> None:
    response = _ask(estate, f"{CACHE} 最近两小时命中率为什么降了？", auth_metadata, mode)
    answer = response.answer
    sentence = _sentence(answer, HIT, "降至")
    low = re.search(r"降至 (\d+(?:\.\d+)?)%", sentence)
    assert low is not None and 20.0 <= float(low.group(1)) <= 30.0, sentence
    before = re.search(r"低于窗口前段的 (\d+(?:\.\d+)?)%", sentence)
    assert before is not None and 80.0 <= float(before.group(1)) <= 90.0, sentence
    onset = re.search(rf"约自 {LOCAL_TIME} 起下降", sentence)
    assert onset is not None, sentence
    assert abs(_local(onset.group(1)) - estate.fall_at) <= 2 * STEP, (onset.group(1), estate.fall_at)
    # The healthy level is never the clue: nothing says the hit ratio reached or rose to ~85 %.
    assert not re.search(rf"{HIT} 在 {LOCAL_TIME} 达到", answer), answer
    assert not any(HIT in line and "升高" in line for line in answer.splitlines()), answer
    assert HIT in _first_line(answer) or "下降" in _first_line(answer), answer
    assert "当前证据未显示异常" not in answer, answer  # the next steps follow from the fall
    assert _outcome(response) in ("PASS", "LOW_CONFID", "SUCCESS"), _outcome(response)
    hit = next(s for s in _bindings(estate, response.run_id) if s["metric"] == HIT)
    assert hit["unit"] == "percent" and hit["onset"]["direction"] == "down"


@MODES
def test_a_slow_latency_ramp_is_reported(estate, auth_metadata, mode) -> None:
    response = _ask(estate, f"{LEDGER} 最近两小时延迟为什么越来越高？", auth_metadata, mode)
    answer = response.answer
    sentence = _sentence(answer, LATENCY, "达到")
    peak = re.search(r"达到 (\d+(?:\.\d+)?)s", sentence)
    assert peak is not None and 5.5 <= float(peak.group(1)) <= 6.6, sentence
    assert "高于窗口前段的" in sentence or "起升高" in sentence, sentence
    assert _outcome(response) in ("PASS", "LOW_CONFID", "SUCCESS"), _outcome(response)
    assert not _first_line(answer).startswith("在所查范围内未发现异常"), answer


def test_the_heap_ramp_is_an_anomaly_and_the_flat_cpu_is_not(estate, auth_metadata) -> None:
    response = _ask(estate, f"{LEDGER} 最近两小时有什么异常？", auth_metadata, 0)
    answer = response.answer
    heap = _sentence(answer, HEAP, "达到")
    peak = re.search(r"达到 (\d+(?:\.\d+)?)GiB", heap)
    assert peak is not None and 3.8 <= float(peak.group(1)) <= 4.2, heap  # ~4.3 GB is ~4.0 GiB
    assert not any(CPU in line and "达到" in line for line in answer.splitlines()), answer
