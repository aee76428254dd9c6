"""A real Prometheus 2.42 holding two hours of known history: tests of metric
reading run against it instead of a hand-written API.

What it holds:
- `billing-gateway` (the faulty service) goes normal → fault → recovery. The fault starts 70 min
  before the end of the history and ends 40 min before it (`fault_start`/`fault_end`, the ground
  truth): the 5xx share of `http_requests_total` goes 0.2% → 22%, the p99 of
  `http_request_duration_seconds` 0.12 s → 2.5 s, one pod (`burning_pod`) burns 0.9 core of
  `process_cpu_seconds_total` while its sibling stays at 0.05, `http_requests_in_flight` rises to
  42 and 43, `process_resident_memory_bytes` stays flat, and the summary
  `db_query_duration_seconds` (quantile label 0.5/0.9/0.99) has its p99 go 0.02 s → 0.8 s.
- `search-frontend`, the healthy control: the same families, no fault. One of its pods restarts
  (`restarted_pod` at `restart_at`) so every counter of that pod resets once.
- `ledger-worker`, a live `prometheus_client` target scraped every second: backfilled series carry
  no metric metadata, scraped ones do, so `/api/v1/metadata` knows only this service's families.

How: the history is written as OpenMetrics (family by family, series by series, timestamps
ascending, `# EOF`), turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics`,
and Prometheus is started on that directory. The history ends a minute before the fixture was
built: the head refuses samples older than the newest block, so the live scrapes must be newer.
Instant queries at "now" see the backfilled gauges for only ~4 more minutes (the 5 min lookback);
pass an explicit time inside the history.

The data are reproducible: the same end instant and seed give the same file.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TextIO

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

FAULTY_SERVICE = "billing-gateway"
HEALTHY_SERVICE = "search-frontend"
LIVE_SERVICE = "ledger-worker"
INTERVAL = timedelta(seconds=15)
HISTORY = timedelta(hours=2)
SEED = 16

# Requests per second of one pod, by method; the status shares of each regime.
REQUEST_RATES = {"GET": 30.0, "POST": 8.0}
STATUS_SHARES = {
    "normal": {"200": 0.998, "500": 0.0012, "503": 0.0008},
    "fault": {"200": 0.78, "500": 0.08, "503": 0.14},
}
# Share of requests at or under each bucket bound. Prometheus interpolates inside the bucket that
# holds the 99th request: normal 0.1 + 0.15 × (0.99 − 0.9885) / (0.9985 − 0.9885) ≈ 0.12 s,
# fault 1 + 1.5 × (0.99 − 0.94) / (0.9905 − 0.94) ≈ 2.49 s.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LATENCY_SHARES = {
    "normal": (0.01, 0.06, 0.35, 0.80, 0.9885, 0.9985, 0.9995, 0.9999, 1.0, 1.0, 1.0),
    "fault": (0.005, 0.03, 0.20, 0.50, 0.68, 0.76, 0.82, 0.94, 0.9905, 0.998, 0.9995),
}
OVERFLOW_SECONDS = 15.0  # what a request above the last bound counts for in `_sum`
CPU_CORES = {"normal": 0.05, "burning": 0.9}
# A summary (client-side quantiles): database latency, slow during the fault on every pod.
DB_QUANTILES = {"normal": {"0.5": 0.004, "0.9": 0.009, "0.99": 0.02}, "fault": {"0.5": 0.03, "0.9": 0.2, "0.99": 0.8}}
DB_MEAN_SECONDS = {"normal": 0.005, "fault": 0.08}
DB_QUERIES_PER_STEP = 300
IN_FLIGHT_NORMAL = (2, 5)
IN_FLIGHT_RAMP = timedelta(minutes=3)


# --- a Prometheus process --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class PrometheusProcess:
    """The `prometheus` binary on a loopback port; `start` waits until `ready()` holds, `stop`
    terminates it (then kills it). A missing binary fails the test: CI installs the package."""

    def __init__(self, root: Path, port: int, args: Sequence[str], ready: Callable[[], bool],
                 timeout: float = 60.0) -> None:
        self.root, self.port, self.args, self.ready, self.timeout = root, port, list(args), ready, timeout
        self.log_path = root / "prometheus.log"
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("the prometheus binary is missing: install Debian's `prometheus` (.ci/run does)")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [binary, *self.args, f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready(self._process)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.ready():
            if process.poll() is not None:
                pytest.fail(f"prometheus exited {process.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"prometheus not ready after {self.timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.25)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process(process)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]


# --- the history -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    service: str
    name: str
    instance: str
    started_at: int  # unix seconds
    restart_at: int | None = None  # unix seconds: the process restarts, its counters reset

    def labels(self) -> dict[str, str]:
        return {"job": self.service, "service": self.service, "pod": self.name, "instance": self.instance}

    def start_time(self, t: int) -> int:
        """The process start time as seen at `t` (`process_start_time_seconds`, every `_created`)."""
        return self.restart_at if self.restart_at is not None and t >= self.restart_at else self.started_at


@dataclass(frozen=True)
class HistoryPlan:
    """The ground truth of the history: when, which pods, what happened."""

    start: datetime
    end: datetime
    interval: timedelta
    fault_start: datetime
    fault_end: datetime
    pods: tuple[Pod, ...]
    burning_pod: str
    in_flight_peaks: dict[str, int]
    restarted_pod: str
    restart_at: datetime
    seed: int = SEED

    @classmethod
    def ending_at(cls, end: datetime, seed: int = SEED) -> HistoryPlan:
        end = end.astimezone(UTC)
        step = int(INTERVAL.total_seconds())
        end = datetime.fromtimestamp(int(end.timestamp()) // step * step, UTC)
        start = end - HISTORY
        born = int(start.timestamp()) - 3 * 86400
        restart_at = end - timedelta(minutes=95)
        pods = (
            Pod(FAULTY_SERVICE, "billing-gateway-7d9f6c5b8-x2k4q", "10.42.1.17:8080", born),
            Pod(FAULTY_SERVICE, "billing-gateway-7d9f6c5b8-m8wzt", "10.42.2.23:8080", born + 412),
            Pod(HEALTHY_SERVICE, "search-frontend-5c8b9d7f6-qp7rn", "10.42.1.31:8080", born + 95),
            Pod(HEALTHY_SERVICE, "search-frontend-5c8b9d7f6-hv2jc", "10.42.3.12:8080", born + 1207,
                restart_at=int(restart_at.timestamp())),
        )
        return cls(
            start=start, end=end, interval=INTERVAL,
            fault_start=end - timedelta(minutes=70), fault_end=end - timedelta(minutes=40),
            pods=pods, burning_pod=pods[0].name, in_flight_peaks={pods[0].name: 42, pods[1].name: 43},
            restarted_pod=pods[3].name, restart_at=restart_at, seed=seed,
        )

    def timestamps(self) -> range:
        step = int(self.interval.total_seconds())
        return range(int(self.start.timestamp()), int(self.end.timestamp()) + 1, step)

    def in_fault(self, pod: Pod, t: int) -> bool:
        """Whether the step ending at `t` is inside the fault (only the faulty service has one)."""
        return pod.service == FAULTY_SERVICE and self.fault_start.timestamp() < t <= self.fault_end.timestamp()


@dataclass
class PodSeries:
    """One pod's samples, one entry per timestamp; counters already cumulative."""

    requests: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (method, status)
    buckets: list[list[int]] = field(default_factory=list)  # cumulative by le, incl. +Inf
    latency_sum: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)


def _count(rng: random.Random, mean: float) -> int:
    """A whole count whose expected value is `mean` (stochastic rounding: rare errors are not lost)."""
    return int(mean + rng.random())


def _simulate(plan: HistoryPlan, pod: Pod, rng: random.Random) -> PodSeries:
    series = PodSeries()
    step = plan.interval.total_seconds()
    requests = {(m, s): 0 for m in REQUEST_RATES for s in STATUS_SHARES["normal"]}
    buckets = [0] * (len(BUCKETS) + 1)
    latency_sum = cpu = 0.0
    memory = rng.randrange(170, 200) * 2**20
    middle = (plan.fault_start + (plan.fault_end - plan.fault_start) / 2).timestamp()
    for t in plan.timestamps():
        if t == pod.restart_at:
            requests = dict.fromkeys(requests, 0)
            buckets = [0] * len(buckets)
            latency_sum = cpu = 0.0
        regime = "fault" if plan.in_fault(pod, t) else "normal"
        load = rng.gauss(1.0, 0.08)
        served = 0
        for method, rate in REQUEST_RATES.items():
            total = _count(rng, rate * step * load)
            errors = {s: _count(rng, total * share * rng.gauss(1.0, 0.1))
                      for s, share in STATUS_SHARES[regime].items() if s != "200"}
            requests[(method, "200")] += total - sum(errors.values())
            for status, n in errors.items():
                requests[(method, status)] += n
            served += total
        # One uniform draw for every bound keeps the cumulative counts ordered and ends at `served`.
        u = rng.random()
        below = [int(served * share + u) for share in LATENCY_SHARES[regime]] + [served]
        for i, n in enumerate(below):
            in_bucket = n - (below[i - 1] if i else 0)
            latency_sum += in_bucket * _bucket_middle(i)
            buckets[i] += n
        cores = CPU_CORES["burning" if regime == "fault" and pod.name == plan.burning_pod else "normal"]
        cpu += max(0.0, cores * step * rng.gauss(1.0, 0.05))
        for key, value in requests.items():
            series.requests.setdefault(key, []).append(value)
        series.buckets.append(list(buckets))
        series.latency_sum.append(round(latency_sum, 3))
        series.cpu_seconds.append(round(cpu, 3))
        series.in_flight.append(_in_flight(plan, pod, t, middle, rng))
        series.memory.append(memory + rng.randrange(-2**19, 2**19, 4096))
    return series


def _bucket_middle(i: int) -> float:
    """What one request in bucket `i` counts for in `_sum`: the middle of its bounds."""
    if i == len(BUCKETS):
        return OVERFLOW_SECONDS
    return (BUCKETS[i] + (BUCKETS[i - 1] if i else 0.0)) / 2


def _in_flight(plan: HistoryPlan, pod: Pod, t: int, middle: float, rng: random.Random) -> int:
    if not plan.in_fault(pod, t):
        return rng.randint(*IN_FLIGHT_NORMAL)
    peak = plan.in_flight_peaks[pod.name]
    if t == middle:
        return peak  # reached exactly once, so max_over_time reads the peak
    ramp = min(1.0, (t - plan.fault_start.timestamp()) / IN_FLIGHT_RAMP.total_seconds())
    return max(IN_FLIGHT_NORMAL[1], round(peak * ramp) - rng.randint(1, 3))


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _family(out: TextIO, name: str, kind: str, help_text: str) -> None:
    out.write(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")


def write_openmetrics(plan: HistoryPlan, out: TextIO) -> None:
    """The whole history as OpenMetrics, as `promtool tsdb create-blocks-from openmetrics` wants it:
    each family once (families never interleave), each series' points in ascending time, timestamps
    in seconds, `# EOF` last."""
    rng = random.Random(plan.seed)
    simulated = [(pod, _simulate(plan, pod, rng)) for pod in plan.pods]
    times = list(plan.timestamps())

    _family(out, "http_requests", "counter", "HTTP requests served.")
    for pod, series in simulated:
        for (method, status), values in series.requests.items():
            labels = _labels({**pod.labels(), "method": method, "status": status})
            for t, value in zip(times, values, strict=True):
                out.write(f"http_requests_total{labels} {value} {t}\n")
                out.write(f"http_requests_created{labels} {pod.start_time(t)} {t}\n")

    _family(out, "http_request_duration_seconds", "histogram", "HTTP request latency.")
    bounds = [f"{b}" for b in BUCKETS] + ["+Inf"]
    for pod, series in simulated:
        labels = _labels(pod.labels())
        for t, cumulative, total in zip(times, series.buckets, series.latency_sum, strict=True):
            for le, value in zip(bounds, cumulative, strict=True):
                out.write(f"http_request_duration_seconds_bucket{_labels({**pod.labels(), 'le': le})} {value} {t}\n")
            out.write(f"http_request_duration_seconds_count{labels} {cumulative[-1]} {t}\n")
            out.write(f"http_request_duration_seconds_sum{labels} {total} {t}\n")
            out.write(f"http_request_duration_seconds_created{labels} {pod.start_time(t)} {t}\n")

    _family(out, "process_cpu_seconds", "counter", "Total user and system CPU time spent in seconds.")
    for pod, series in simulated:
        for t, value in zip(times, series.cpu_seconds, strict=True):
            out.write(f"process_cpu_seconds_total{_labels(pod.labels())} {value} {t}\n")

    gauges = (
        ("http_requests_in_flight", "HTTP requests being served.", lambda pod, series, i: series.in_flight[i]),
        ("process_resident_memory_bytes", "Resident memory size in bytes.", lambda pod, series, i: series.memory[i]),
        ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
         lambda pod, series, i: pod.start_time(times[i])),
    )
    for name, help_text, value_at in gauges:
        _family(out, name, "gauge", help_text)
        for pod, series in simulated:
            for i, t in enumerate(times):
                out.write(f"{name}{_labels(pod.labels())} {value_at(pod, series, i)} {t}\n")

    _family(out, "db_query_duration_seconds", "summary", "Database query latency (client-side quantiles).")
    for pod, _ in simulated:
        labels = _labels(pod.labels())
        count, total = 0, 0.0
        for t in times:
            if t == pod.restart_at:
                count, total = 0, 0.0
            regime = "fault" if plan.in_fault(pod, t) else "normal"
            wobble = 1 + 0.02 * ((t // int(plan.interval.total_seconds())) % 3 - 1)
            for quantile, seconds in DB_QUANTILES[regime].items():
                out.write(f"db_query_duration_seconds{_labels({**pod.labels(), 'quantile': quantile})} "
                          f"{round(seconds * wobble, 5)} {t}\n")
            count += DB_QUERIES_PER_STEP
            total += DB_QUERIES_PER_STEP * DB_MEAN_SECONDS[regime] * wobble
            out.write(f"db_query_duration_seconds_count{labels} {count} {t}\n")
            out.write(f"db_query_duration_seconds_sum{labels} {round(total, 4)} {t}\n")

    _family(out, "app_build_info", "gauge", "The running build; always 1.")
    for pod, _ in simulated:
        version = "4.12.1" if pod.service == FAULTY_SERVICE else "2.3.0"
        labels = _labels({**pod.labels(), "version": version, "revision": f"{zlib.crc32(pod.service.encode()):08x}"})
        for t in times:
            out.write(f"app_build_info{labels} 1 {t}\n")
    out.write("# EOF\n")


def backfill(plan: HistoryPlan, root: Path) -> Path:
    """Writes the history to `root/history.om` and turns it into TSDB blocks under `root/data`."""
    source = root / "history.om"
    with source.open("w") as out:
        write_openmetrics(plan, out)
    return create_blocks(source, root / "data")


def create_blocks(source: Path, data: Path) -> Path:
    """`promtool tsdb create-blocks-from openmetrics`; fails the test with promtool's stderr, or
    when promtool stored fewer samples than `source` holds."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("the promtool binary is missing: install Debian's `prometheus` (.ci/run does)")
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"promtool could not backfill {source}: {done.stderr.strip()}")
    # promtool 2.42 drops an out-of-order sample without a word and exits 0: count what it stored.
    written = sum(1 for line in source.open() if not line.startswith("#"))
    stored = sum(int(row.split()[4]) for row in done.stdout.splitlines()[1:] if row.strip())
    if stored != written:
        pytest.fail(f"promtool stored {stored} of the {written} samples of {source} (out of order?)")
    return data


# --- the live target -------------------------------------------------------------------------


class LiveTarget:
    """`ledger-worker`'s own metrics from a private registry, served on a loopback port."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        jobs = Counter("ledger_jobs_processed", "Ledger jobs processed.", ["outcome"], registry=self.registry)
        duration = Histogram("ledger_job_duration_seconds", "Time to process one ledger job.", registry=self.registry)
        depth = Gauge("ledger_queue_depth", "Ledger jobs waiting.", registry=self.registry)
        jobs.labels("ok").inc(1280)
        jobs.labels("failed").inc(3)
        for seconds in (0.04, 0.08, 0.11, 0.3):
            duration.observe(seconds)
        depth.set(7)
        # Keyed as /api/v1/metadata keys them: Prometheus 2.42 asks for OpenMetrics, which names a
        # counter by its family (`ledger_jobs_processed`, not `..._total` as the 0.0.4 text format).
        self.metric_types = {"ledger_jobs_processed": "counter", "ledger_job_duration_seconds": "histogram",
                             "ledger_queue_depth": "gauge"}
        self._server, self._thread = start_http_server(0, "127.0.0.1", registry=self.registry)
        self.address = f"127.0.0.1:{self._server.server_port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


# --- the whole -------------------------------------------------------------------------------


@dataclass
class PrometheusHistory:
    """A running Prometheus holding `plan`'s history and scraping the live target."""

    url: str
    faulty_service: str
    healthy_service: str
    live_service: str
    start: datetime  # the first and last backfilled samples, UTC
    end: datetime
    interval: timedelta
    fault_start: datetime  # the ground truth, UTC
    fault_end: datetime
    plan: HistoryPlan  # pods, burning pod, in-flight peaks, restart
    live_metric_types: dict[str, str]  # metadata name → type
    process: PrometheusProcess = field(repr=False)

    def stop(self) -> None:
        """Stops Prometheus mid-test (its port then refuses connections); `restart` brings it back."""
        self.process.stop()

    def restart(self) -> None:
        """Starts it again on the same port and data, and waits until it serves."""
        if not self.process.running:
            self.process.start()

    def api(self, path: str, **params: str) -> dict:
        """GET `/api/v1/<path>` and return its `data` (fails the test on an error status)."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: datetime) -> dict[str, float]:
        """An instant query: each result's labels (rendered) → value."""
        data = self.api("query", query=expr, time=f"{at.timestamp():.3f}")
        return {_labels(r["metric"]): float(r["value"][1]) for r in data["result"]}


def _config(live: LiveTarget) -> str:
    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: {LIVE_SERVICE}\n    static_configs:\n"
        f"      - targets: ['{live.address}']\n"
        f"        labels:\n          service: {LIVE_SERVICE}\n          pod: {LIVE_SERVICE}-0\n"
    )


def _get(url: str) -> bytes | None:
    """The body of a 200 answer; None while Prometheus is still starting (refused, or 503)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read()
    except (urllib.error.URLError, OSError):
        return None


@contextmanager
def running_prometheus_history(root: Path, end: datetime | None = None) -> Iterator[PrometheusHistory]:
    """Backfills the history ending at `end` (default: a minute ago), starts the live target and
    Prometheus, and waits until Prometheus is ready and has scraped the live target's metadata."""
    plan = HistoryPlan.ending_at(end or datetime.now(UTC) - timedelta(minutes=1))
    data = backfill(plan, root)
    live = LiveTarget()
    try:
        (root / "prometheus.yml").write_text(_config(live))
        port = free_port()
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:  # ready, and the live target scraped: its metadata is known
            if _get(f"{url}/-/ready") is None:
                return False
            metadata = _get(f"{url}/api/v1/metadata")
            return metadata is not None and set(live.metric_types) <= set(json.loads(metadata)["data"])

        process = PrometheusProcess(
            root, port,
            [f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
             "--storage.tsdb.retention.time=30d"],
            ready,
        )
        process.start()
        try:
            yield PrometheusHistory(
                url=url, faulty_service=FAULTY_SERVICE, healthy_service=HEALTHY_SERVICE, live_service=LIVE_SERVICE,
                start=plan.start, end=plan.end, interval=plan.interval,
                fault_start=plan.fault_start, fault_end=plan.fault_end,
                plan=plan, live_metric_types=dict(live.metric_types), process=process,
            )
        finally:
            process.stop()
    finally:
        live.close()


@pytest.fixture(scope="module", name="prometheus_history")
def prometheus_history_fixture(tmp_path_factory) -> Iterator[PrometheusHistory]:
    """`prometheus_history`: one Prometheus with the history per test module. Import
    `prometheus_history_fixture` to use it (the other name keeps the parameter from shadowing the
    import). A test that calls `stop()` should call `restart()` in a `finally` so the module's
    later tests find it serving."""
    with running_prometheus_history(tmp_path_factory.mktemp("prometheus-history")) as history:
        yield history
