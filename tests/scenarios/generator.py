"""A seeded generator of scenario sets: a random estate (random service, metric, host, config-key,
version and author names) with incidents of known classes, and the cases that ask about it, with
expectations written from the generator's own ground truth.

    python -m tests.scenarios.generator --seed N --out DIR

writes DIR/estate/services.json, DIR/estate/incidents/*.json (the format
`services/executor/estate.py` loads), DIR/cases/*.yaml (the format `tests/eval/scenario_eval.py`
loads, each case with its `class`) and DIR/knowledge/ (a copy of tests/scenarios/knowledge).
The same seed gives the same files, byte for byte.

Every incident is internally consistent: a cause (a config change, a release with a version, a
resource reaching its limit, a named dependency failing) that precedes the symptom; log lines
whose text names the mechanism and, where a change is the cause, share an identifier with the
change (exactly, or contained in a longer one: `report.export.concurrency` / `report-export-7`).
Controls: healthy services, questions about windows the estate does not cover, decoy changes
(after the onset or long before, sharing no identifier) and consequence errors that start after
the symptom.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KNOWLEDGE_SOURCE = Path(__file__).resolve().parent / "knowledge"
HISTORY_MINUTES = 180
INCIDENTS_PER_CLASS = 6
HEALTHY_SERVICES = 8

CLASSES = (
    "memory_oom", "disk_full", "cpu_saturation", "connection_pool_exhaustion", "thread_pool_exhaustion",
    "slow_query", "lock_contention", "certificate_expiry", "dns_failure", "upstream_down", "dependency_slow",
    "rate_limited", "config_change", "bad_release", "cache_hit_collapse", "consumer_lag", "gc_pause",
    "network_flapping", "crash_loop", "batch_external_failure",
)
CONTROL_CLASSES = ("healthy", "no_data", "triage", "multi_service")
LOG_FORMATS = ("json", "logfmt", "plain", "access", "python_traceback", "java_traceback", "no_level")
LOG_FORMAT_TAG = {"json": "log_json", "logfmt": "log_logfmt", "access": "log_access",
                  "python_traceback": "log_traceback", "java_traceback": "log_traceback",
                  "plain": "log_plain", "no_level": "log_no_level"}

# Mechanism names, Chinese and English, as an answer would say them (the judge takes any one).
MECHANISM_WORDS: dict[str, list[str]] = {
    "memory_oom": ["内存", "memory", "OOM", "OutOfMemory", "heap", "堆"],
    "disk_full": ["磁盘", "disk", "No space left", "ENOSPC", "空间不足"],
    "cpu_saturation": ["CPU", "处理器"],
    "connection_pool_exhaustion": ["连接池", "connection pool", "hikari", "QueuePool", "Connection is not available"],
    "thread_pool_exhaustion": ["线程池", "thread pool", "RejectedExecution", "EXHAUSTED", "executor"],
    "lock_contention": ["锁", "lock", "deadlock"],
    "certificate_expiry": ["证书", "certificate", "x509", "CERTIFICATE_VERIFY_FAILED", "SSLHandshake", "PKIX"],
    "dns_failure": ["DNS", "域名解析", "no such host", "UnknownHost", "ENOTFOUND", "name resolution"],
    "rate_limited": ["限流", "rate limit", "429", "Too Many Requests", "throttl"],
    "cache_hit_collapse": ["缓存", "cache", "命中率", "hit ratio"],
    "consumer_lag": ["积压", "lag", "消费"],
    "gc_pause": ["GC", "垃圾回收", "Full GC", "pause"],
    "network_flapping": ["网络", "network", "丢包", "retransmit", "reset by peer", "抖动", "flap"],
    "crash_loop": ["重启", "restart", "crash", "CrashLoop", "panic", "崩溃"],
}
# Words no random name may contain: a name that contains a mechanism word would satisfy the judge
# by being named.
_FORBIDDEN_IN_NAMES = {w.casefold() for words in MECHANISM_WORDS.values() for w in words if w.isascii()} | {
    "err", "fail", "oom", "tls", "ssl", "cpu", "gc", "dns", "lag", "io", "net", "pod", "lock", "pool",
    "kill", "dead", "slow", "down", "ok",
}

_ONSETS = ["b", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "st",
           "tr", "pl", "gr", "sh", "th", "qu", "vr", "zh"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou", "ia", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "x", "m", "k", "th"]
_SUFFIXES = ["-svc", "-api", "-worker", "-service", "-gw", ""]
_WORDS = ["ledger", "quota", "render", "export", "report", "batch", "ingest", "payout", "refund", "catalog",
          "pricing", "invoice", "tenant", "profile", "search", "upload", "notify", "audit", "billing", "rating",
          "shipment", "coupon", "session", "thumbnail", "archive", "settle", "reconcile", "sync", "import",
          "inventory", "feed", "journal", "voucher", "routing", "geo", "media", "ticket", "order", "stock"]
_ADJ = ["max", "min", "default", "primary", "legacy", "bulk", "fast", "strict", "remote", "local", "eager"]
_SETTING = ["concurrency", "timeout_ms", "batch_size", "max_retries", "window_seconds", "ttl_seconds",
            "parallelism", "max_inflight", "buffer_kb", "flush_interval_ms", "prefetch", "page_size"]
_FIRST = ["li", "wang", "zhang", "chen", "okafor", "varga", "lindqvist", "haddad", "mori", "silva", "novak",
          "kim", "patel", "ivanova", "garcia", "moreau", "tanaka", "nguyen", "kowalski", "fischer", "rossi"]
_INITIAL = "abcdeghjklmnprstwxyz"
_TABLES = ["orders", "payments", "line_items", "accounts", "shipments", "invoices", "sessions", "events",
           "tickets", "vouchers", "subscriptions", "transfers", "ledger_rows", "stock_moves", "audit_entries"]
_COLUMNS = ["customer_id", "tenant_id", "created_at", "status", "external_ref", "account_id", "sku", "batch_id"]
_TLDS = ["internal", "corp", "svc.cluster.local", "example.net", "partner.example.com", "prod.local"]


# --- random names ------------------------------------------------------------------------------


def _clean(name: str) -> bool:
    folded = name.casefold()
    return not any(word in folded for word in _FORBIDDEN_IN_NAMES)


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _word(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
    while True:
        word = "".join(_syllable(rng) for _ in range(rng.randint(*syllables)))
        if 4 <= len(word) <= 12 and _clean(word):
            return word


class Names:
    """Every random name of one estate, unique within it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _unique(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if name not in self.used and _clean(name):
                self.used.add(name)
                return name

    def service(self) -> str:
        def make() -> str:
            if self.rng.random() < 0.15:
                return _word(self.rng, (2, 3))  # a single word
            parts = [_word(self.rng, (1, 2))] + ([_word(self.rng, (1, 2))] if self.rng.random() < 0.4 else [])
            return "-".join(parts) + self.rng.choice(_SUFFIXES)
        return self._unique(make)

    def namespace(self) -> str:
        return self._unique(lambda: _word(self.rng, (1, 2))[:8])

    def hosts(self, service: str) -> list[str]:
        stem = service.replace("-", "")[:3] + "-" + "".join(self.rng.choice("abcdefghkmnpqrstuvwxyz0123456789") for _ in range(4))
        if not _clean(stem):
            stem = "h" + str(self.rng.randint(100, 999)) + "-" + str(self.rng.randint(1000, 9999))
        return [f"{stem}-{i}" for i in range(self.rng.randint(1, 3))]

    def author(self) -> str:
        return f"{self.rng.choice(_FIRST)}.{self.rng.choice(_INITIAL)}"

    def version(self) -> str:
        return self._unique(lambda: f"v{self.rng.randint(1, 19)}.{self.rng.randint(0, 40)}.{self.rng.randint(0, 30)}")

    def config_key(self, setting: str | None = None) -> str:
        def make() -> str:
            parts = [self.rng.choice(_WORDS), self.rng.choice(_WORDS)]
            if self.rng.random() < 0.4:
                parts.insert(1, self.rng.choice(_ADJ))
            return ".".join(dict.fromkeys(parts)) + "." + (setting or self.rng.choice(_SETTING))
        return self._unique(make)

    def feature(self) -> str:
        return self._unique(lambda: f"{self.rng.choice(_WORDS)}_{_word(self.rng, (1, 2))}")

    def external_host(self) -> str:
        return self._unique(lambda: f"{_word(self.rng, (1, 2))}.{self.rng.choice(_TLDS)}")

    def token(self, prefix: str) -> str:
        return self._unique(lambda: f"{prefix}{_word(self.rng, (1, 2))}")


# --- log formats -------------------------------------------------------------------------------


@dataclass
class Event:
    """One log line before formatting: a level, a logger, a message, fields, and optionally an
    exception (type, message) or an HTTP request (method, path, status)."""

    level: str
    logger: str
    msg: str
    fields: dict[str, str] = field(default_factory=dict)
    exc: tuple[str, str] | None = None
    http: tuple[str, str, str] | None = None
    raw: str | None = None  # a line with a fixed shape of its own (a GC log line, a Go panic)


_LEVEL_SPELLINGS = {
    "json": [{"DEBUG": "debug", "INFO": "info", "WARN": "warn", "ERROR": "error", "FATAL": "fatal"},
             {"DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARNING", "ERROR": "ERROR", "FATAL": "CRITICAL"}],
    "logfmt": [{"DEBUG": "dbug", "INFO": "info", "WARN": "warn", "ERROR": "eror", "FATAL": "crit"},
               {"DEBUG": "debug", "INFO": "info", "WARN": "warning", "ERROR": "error", "FATAL": "fatal"}],
    "plain": [{"DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARN", "ERROR": "ERROR", "FATAL": "FATAL"},
              {"DEBUG": "FINE", "INFO": "INFO", "WARN": "WARNING", "ERROR": "SEVERE", "FATAL": "SEVERE"}],
}


@dataclass
class LogStyle:
    kind: str
    level_key: str
    spelling: dict[str, str]
    thread: str
    package: str

    def render(self, event: Event) -> str:
        if event.raw is not None:
            return event.raw
        extra = " ".join(f"{k}={v}" for k, v in event.fields.items())
        if self.kind == "json":
            obj: dict[str, Any] = {self.level_key: self.spelling[event.level], "logger": event.logger, "msg": event.msg}
            obj.update(event.fields)
            if event.http:
                obj.update({"method": event.http[0], "path": event.http[1], "status": event.http[2]})
            if event.exc:
                obj["error"] = {"type": event.exc[0], "message": event.exc[1]}
            obj["trace_id"] = "{trace_id}"
            return json.dumps(obj, ensure_ascii=self.level_key == "severity")
        if self.kind == "logfmt":
            text = f'{self.level_key}={self.spelling[event.level]} logger={event.logger} msg="{event.msg}"'
            if event.http:
                text += f" method={event.http[0]} path={event.http[1]} status={event.http[2]}"
            if extra:
                text += " " + extra
            if event.exc:
                text += f' err="{event.exc[0]}: {event.exc[1]}"'
            return text
        if self.kind == "access":
            if event.http:
                method, path, status = event.http
                tail = f' rt={{float:0.002:0.090}} msg="{event.msg}"' + (f" {extra}" if extra else "")
                return f'{{ip}} - - "{method} {path} HTTP/1.1" {status} {{int:80:4000}} "-" "{{choice:okhttp/4.12.0|Go-http-client/2.0|curl/8.5.0}}"' + tail
            nginx_level = {"DEBUG": "debug", "INFO": "notice", "WARN": "warn", "ERROR": "error", "FATAL": "crit"}[event.level]
            exc = f" ({event.exc[0]}: {event.exc[1]})" if event.exc else ""
            return f"[{nginx_level}] {{int:10:99}}#0: *{{int:1000:999999}} {event.msg}{exc}" + (f", {extra}" if extra else "")
        if self.kind == "python_traceback":
            text = f"{event.level if event.level != 'WARN' else 'WARNING'}:{event.logger}:{event.msg}" + (f" {extra}" if extra else "")
            if event.exc:
                module = event.logger.split(".")[-1]
                text += ("\nTraceback (most recent call last):\n"
                         f'  File "/srv/{self.package}/{module}.py", line {{int:40:400}}, in handle\n'
                         "    result = self._call(request)\n"
                         f'  File "/srv/{self.package}/client.py", line {{int:40:400}}, in _call\n'
                         "    return self.session.send(prepared, timeout=self.timeout)\n"
                         f"{event.exc[0]}: {event.exc[1]}")
            return text
        if self.kind == "java_traceback":
            spelled = _LEVEL_SPELLINGS["plain"][0][event.level]
            text = f"{spelled} [{self.thread}] {event.logger} - {event.msg}" + (f" {extra}" if extra else "")
            if event.exc:
                cls = event.logger.split(".")[-1].capitalize()
                text += (f"\n{event.exc[0]}: {event.exc[1]}\n"
                         f"\tat com.{self.package}.{event.logger.split('.')[-1]}.{cls}.handle({cls}.java:{{int:40:400}})\n"
                         f"\tat com.{self.package}.core.Dispatcher.dispatch(Dispatcher.java:{{int:40:400}})\n"
                         "\tat java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1136)\n"
                         "\tat java.base/java.lang.Thread.run(Thread.java:840)")
            return text
        if self.kind == "no_level":
            exc = f" cause={event.exc[0]}: {event.exc[1]}" if event.exc else ""
            http = f" {event.http[0]} {event.http[1]} -> {event.http[2]}" if event.http else ""
            return f"{event.logger} | {event.msg}{http}" + (f" {extra}" if extra else "") + exc
        # plain: [thread] LEVEL logger - message
        text = f"[{self.thread}] {self.spelling[event.level]} {event.logger} - {event.msg}" + (f" {extra}" if extra else "")
        if event.exc:
            text += f" ({event.exc[0]}: {event.exc[1]})"
        return text


def _style(rng: random.Random, kind: str, namespace: str) -> LogStyle:
    spellings = _LEVEL_SPELLINGS.get(kind, _LEVEL_SPELLINGS["plain"])
    level_key = rng.choice(["level", "severity", "lvl"] if kind == "json" else ["level", "lvl"])
    thread = rng.choice(["http-nio-8080-exec-{int:1:200}", "worker-{int:1:16}", "grpc-default-executor-{int:0:63}",
                         "main", "scheduler-{int:1:4}"])
    return LogStyle(kind, level_key, rng.choice(spellings), thread, namespace)


# --- metrics -----------------------------------------------------------------------------------


@dataclass
class Metric:
    name: str
    unit: str
    baseline: float
    noise: float
    decimals: int = 2
    max: float | None = None


def _request_metrics(rng: random.Random, ns: str) -> tuple[Metric, Metric, Metric]:
    rate = rng.choice([f"{ns}_http_requests_per_second", f"{ns}_requests_rate", f"{ns}_grpc_calls_per_second"])
    if rng.random() < 0.5:
        latency = Metric(rng.choice([f"{ns}_http_request_duration_seconds_p99", f"{ns}_latency_p99_seconds"]), "seconds",
                         round(rng.uniform(0.04, 0.3), 3), 0.0, 3)
    else:
        base = rng.randint(30, 300)
        latency = Metric(f"{ns}_latency_p99_ms", "ms", base, base * 0.06, 0)
    errors = rng.choice([Metric(f"{ns}_http_error_ratio", "ratio", 0.002, 0.001, 4, 1),
                         Metric(f"{ns}_5xx_ratio", "ratio", 0.001, 0.0005, 4, 1)])
    base_rate = rng.randint(40, 2000)
    latency.noise = latency.noise or round(latency.baseline * 0.06, 4)
    return Metric(rate, "per_second", base_rate, base_rate * 0.04, 1), latency, errors


# --- incidents ---------------------------------------------------------------------------------


MIN_SYMPTOM_AGE_MIN = 10  # the latest effect of an incident starts at least this long before the anchor


@dataclass
class Incident:
    """An incident's estate data and its ground truth."""

    klass: str
    service: str
    start: int  # minutes before the anchor
    duration: int
    metrics: list[Metric] = field(default_factory=list)  # series the class adds to the service
    effects: list[dict] = field(default_factory=list)
    logs: list[dict] = field(default_factory=list)
    changes: list[dict] = field(default_factory=list)
    cause_terms: list[str] = field(default_factory=list)  # the opening names one of these
    symptom_terms: list[str] = field(default_factory=list)  # what is observed (metric names, log words)
    decoy_terms: list[str] = field(default_factory=list)  # never named as the cause
    symptom: str = "一直报错"  # 「X 为什么<symptom>？」
    thing: tuple[str, str] = ("错误率", "升高")  # 「X 的<thing>为什么<bad>了？」
    hypothesis_true: str = ""  # 「…是不是<hypothesis>导致的？」 that the truth supports
    hypotheses_false: list[str] = field(default_factory=list)  # entity confusions the truth refutes
    cause_kind: str = "resource"  # resource | config | release | migration | dependency
    title: str = ""
    related: str | None = None  # a second catalogued service the incident involves
    facets: list[str] = field(default_factory=list)


class Builder:
    """Builds one incident of a class on a fresh service."""

    def __init__(self, rng: random.Random, names: Names, service: str, ns: str, style: LogStyle,
                 request: tuple[Metric, Metric, Metric], host_pool: list[str]) -> None:
        self.rng, self.names, self.service, self.ns, self.style = rng, names, service, ns, style
        self.rate, self.latency, self.errors = request
        self.host_pool = host_pool

    def log(self, event: Event, rate: float = 0.0, *, delay: int = 0, at: list[int] | None = None,
            ramp: int = 0, service: str | None = None) -> dict:
        template: dict[str, Any] = {"level": event.level, "template": self.style.render(event)}
        if rate:
            template["rate_per_min"] = rate
        if at:
            template["at_minutes"] = at
        if ramp:
            template["ramp_minutes"] = ramp
        if delay:
            template["delay_minutes"] = delay
        if service:
            template["service"] = service
        return template

    def effect(self, metric: Metric, shape: str, target: float, **extra: Any) -> dict:
        return {"metric": metric.name, "shape": shape, "target": target, **extra}

    def latency_up(self, factor: float, delay: int = 0) -> dict:
        return self.effect(self.latency, "ramp", round(self.latency.baseline * factor, 3), ramp_minutes=3,
                           delay_minutes=delay, noise=round(self.latency.baseline * factor * 0.05, 4))

    def errors_up(self, target: float, delay: int = 0) -> dict:
        return self.effect(self.errors, "ramp", target, ramp_minutes=2, delay_minutes=delay, noise=round(target * 0.08, 4))

    def config_change(self, key: str, old: str, new: str, offset: int, why: str) -> dict:
        return {"offset_minutes": offset, "kind": "config",
                "summary": f"{self.service} 配置变更：{key} {old} -> {new}（{why}）", "author": self.names.author()}

    def release(self, version: str, offset: int, what: str) -> dict:
        return {"offset_minutes": offset, "kind": "deploy", "summary": f"{self.service} 发布 {version}：{what}",
                "author": self.names.author()}

    def logger(self, *parts: str) -> str:
        return ".".join((self.ns,) + parts)


def _memory_oom(b: Builder, inc: Incident) -> None:
    r = b.rng
    style = r.choice(["jvm", "container"])
    if style == "jvm":
        mem = Metric(f"{b.ns}_jvm_heap_used_percent", "percent", r.randint(45, 62), 2.0, 1, 100)
        exc = ("java.lang.OutOfMemoryError", "Java heap space")
    else:
        mem = Metric("container_memory_usage_percent", "percent", r.randint(40, 60), 2.0, 1, 100)
        exc = ("MemoryError", "unable to allocate {int:64:512} MiB for buffer")
    ramp = r.randint(12, 25)
    inc.metrics.append(mem)
    inc.effects += [b.effect(mem, "ramp", r.choice([97.5, 98.8, 99.6]), ramp_minutes=ramp, noise=0.4),
                    b.errors_up(round(r.uniform(0.15, 0.5), 3), delay=ramp)]
    inc.logs += [
        b.log(Event("WARN", b.logger("mem"), "memory usage above threshold", {"used_pct": "{int:90:99}", "limit_mb": str(r.choice([1024, 2048, 4096]))}), 0.6, delay=ramp - 4),
        b.log(Event("ERROR", b.logger("worker"), "request aborted: out of memory", {"request_id": "{uuid}"}, exc=exc), 2.5, delay=ramp),
        b.log(Event("WARN", b.logger("lifecycle"), "container restarted after OOMKilled exit_code=137"), 0.3, delay=ramp + 1),
    ]
    inc.cause_terms = MECHANISM_WORDS["memory_oom"] + [mem.name]
    inc.symptom_terms = [mem.name, b.errors.name, "out of memory"]
    inc.symptom, inc.thing = r.choice(["一直报错", "接口大量失败", "实例总是被重启"]), ("错误率", "升高")
    inc.hypothesis_true = r.choice(["内存不足", "内存泄漏", "OOM"])
    inc.hypotheses_false = ["磁盘满了", "数据库连接池耗尽"]


def _disk_full(b: Builder, inc: Incident) -> None:
    r = b.rng
    path = r.choice(["/var/lib/", "/data/", "/var/cache/", "/srv/spool/"]) + _word(r, (1, 2))
    disk = Metric(r.choice(["fs_used_percent", f"{b.ns}_disk_used_percent"]), "percent", r.randint(35, 70), 0.3, 1, 100)
    fill = r.randint(12, 30)
    inc.metrics.append(disk)
    inc.effects += [b.effect(disk, "ramp", 100, ramp_minutes=fill, noise=0),
                    b.errors_up(round(r.uniform(0.2, 0.6), 3), delay=fill)]
    exc = r.choice([("OSError", f"[Errno 28] No space left on device: '{path}/tmp/{{hex:10}}.part'"),
                    ("java.io.IOException", "No space left on device"),
                    ("Error", f"ENOSPC: no space left on device, write '{path}/{{hex:8}}.seg'")])
    inc.logs += [
        b.log(Event("WARN", b.logger("store"), "volume nearly full", {"path": path, "avail_mb": "{int:20:900}"}), 0.5, delay=max(fill - 6, 0)),
        b.log(Event("ERROR", b.logger("store"), "write failed: no space left on device", {"path": path, "object": "{hex:12}"}, exc=exc), 3, delay=fill),
    ]
    inc.cause_terms = MECHANISM_WORDS["disk_full"] + [disk.name]
    inc.symptom_terms = [disk.name, "No space left", "ENOSPC"]
    inc.symptom, inc.thing = r.choice(["写入一直失败", "任务大量失败", "一直报错"]), ("错误率", "升高")
    inc.hypothesis_true = r.choice(["磁盘满了", "磁盘空间不足"])
    inc.hypotheses_false = ["内存不足", "CPU 打满"]


def _cpu_saturation(b: Builder, inc: Incident) -> None:
    r = b.rng
    cpu = r.choice([Metric(f"{b.ns}_process_cpu_usage_ratio", "ratio", round(r.uniform(0.2, 0.45), 2), 0.03, 3, 1),
                    Metric("container_cpu_usage_percent", "percent", r.randint(20, 45), 3.0, 1, 100)])
    target = 0.97 if cpu.unit == "ratio" else 98.0
    inc.metrics.append(cpu)
    inc.effects += [b.effect(cpu, "step", target, noise=0.01 if cpu.unit == "ratio" else 0.8),
                    b.latency_up(r.uniform(8, 25), delay=1)]
    inc.logs += [
        b.log(Event("WARN", b.logger("runtime"), "event loop lag high", {"lag_ms": "{int:800:4000}", "cpu_pct": "{int:95:100}"}), 1.5, delay=1),
        b.log(Event("WARN", b.logger("pool"), "Thread starvation or clock leap detected (housekeeper delta={int:30:90}s)."), 0.4, delay=2),
        b.log(Event("ERROR", b.logger("http"), "request timed out while waiting for CPU", {"request_id": "{uuid}"}, http=("POST", f"/v1/{r.choice(_WORDS)}", "504")), 1.5, delay=2),
    ]
    inc.cause_terms = MECHANISM_WORDS["cpu_saturation"] + [cpu.name]
    inc.symptom_terms = [cpu.name, b.latency.name, "lag"]
    inc.symptom, inc.thing = r.choice(["变慢了", "响应这么慢", "超时变多"]), ("p99 延迟", "升高")
    inc.hypothesis_true = r.choice(["CPU 打满", "CPU 不够用"])
    inc.hypotheses_false = ["磁盘满了", "内存泄漏"]


def _connection_pool(b: Builder, inc: Incident) -> None:
    r = b.rng
    size = r.choice([10, 20, 30, 40, 50])
    active = Metric(f"{b.ns}_hikari_active_connections", "count", round(size * 0.3), 2.0, 0)
    pending = Metric(f"{b.ns}_hikari_pending_threads", "count", 0, 0.0, 0)
    maximum = Metric(f"{b.ns}_hikari_max_connections", "count", size, 0.0, 0)  # the pool's stated limit
    job = f"{r.choice(_WORDS)}-{r.choice(['nightly', 'reconcile', 'backfill', 'rebuild'])}"
    inc.metrics += [active, pending, maximum]
    inc.effects += [b.effect(active, "ramp", size, ramp_minutes=3, noise=0),
                    b.effect(pending, "ramp", r.randint(30, 120), ramp_minutes=3, delay_minutes=2, noise=4),
                    b.latency_up(r.uniform(20, 80), delay=2), b.errors_up(round(r.uniform(0.1, 0.4), 3), delay=3)]
    pool = f"{r.choice(['HikariPool-1', 'HikariPool-2', b.ns + '-primary'])}"
    inc.logs += [
        b.log(Event("WARN", b.logger("jobs"), "long transaction holding connections", {"job": job, "held": str(size - r.randint(1, 4)), "age_s": "{int:300:1500}"}), 0.5),
        b.log(Event("ERROR", b.logger("db"), f"{pool} - Connection is not available, request timed out after 30000ms.",
                    {"pool": pool, "maximumPoolSize": str(size), "active": str(size), "waiting": "{int:20:120}"},
                    exc=("java.sql.SQLTransientConnectionException", f"{pool} - Connection is not available, request timed out after 30000ms.")), 3, delay=3, ramp=2),
    ]
    inc.cause_terms = MECHANISM_WORDS["connection_pool_exhaustion"] + [active.name, pending.name]
    inc.symptom_terms = [active.name, pending.name, "Connection is not available"]
    inc.symptom, inc.thing = r.choice(["变慢了", "大量超时", "接口报错变多"]), ("p99 延迟", "升高")
    inc.hypothesis_true = r.choice(["数据库连接池耗尽", "数据库连接池满了"])
    inc.hypotheses_false = ["线程池满了", "Redis 连接池不够用"]


def _thread_pool(b: Builder, inc: Incident) -> None:
    r = b.rng
    key = b.names.config_key(r.choice(["concurrency", "max_threads"]))
    thread = "-".join(key.split(".")[:-1])  # report.export.concurrency -> report-export-7
    size = r.choice([8, 16, 32, 64])
    active = Metric(f"{b.ns}_executor_active_threads", "count", round(size * 0.4), 1.5, 0)
    queue = Metric(f"{b.ns}_executor_queue_size", "count", r.randint(0, 5), 1.0, 0)
    inc.metrics += [active, queue]
    caused_by_change = r.random() < 0.5
    if caused_by_change:
        old = size * r.choice([4, 8])
        inc.changes.append(b.config_change(key, str(old), str(size), -r.randint(2, 8), "节省资源"))
    inc.effects += [b.effect(active, "step", size, noise=0), b.effect(queue, "ramp", r.randint(800, 5000), ramp_minutes=10, noise=40),
                    b.latency_up(r.uniform(10, 40), delay=2)]
    inc.logs += [
        b.log(Event("WARN", b.logger("exec"), f"all {size} threads busy", {"pool": thread, "queued": "{int:500:5000}"}), 1),
        b.log(Event("ERROR", b.logger("exec"), "thread pool exhausted, task rejected", {"thread": f"{thread}-{{int:1:{size}}}"},
                    exc=("java.util.concurrent.RejectedExecutionException",
                         f"Task rejected from ThreadPoolExecutor[Running, pool size = {size}, active threads = {size}, queued tasks = 1000]")), 2.5, delay=2),
    ]
    mechanism = MECHANISM_WORDS["thread_pool_exhaustion"] + [active.name, queue.name]
    if caused_by_change:
        inc.cause_terms, inc.symptom_terms = [key], mechanism + ["RejectedExecutionException"]
        inc.cause_kind, inc.facets = "config", ["change_cause", "contained_identifier"]
    else:
        inc.cause_terms, inc.symptom_terms = mechanism, [active.name, queue.name, "RejectedExecutionException"]
    inc.symptom, inc.thing = r.choice(["变慢了", "请求堆积", "一直超时"]), ("请求延迟", "升高")
    inc.hypothesis_true = r.choice(["线程池满了", "线程池耗尽"])
    inc.hypotheses_false = ["数据库连接池耗尽", "Redis 连接池不够用"]


def _slow_query(b: Builder, inc: Incident) -> None:
    r = b.rng
    table, column = r.choice(_TABLES), r.choice(_COLUMNS)
    index = f"idx_{table}_{column}"
    version = f"V{r.randint(20, 400)}__drop_{index}"
    qdur = Metric(f"{b.ns}_db_query_duration_seconds_p99", "seconds", round(r.uniform(0.01, 0.05), 3), 0.003, 3)
    inc.metrics.append(qdur)
    offset = -r.randint(2, 8)
    inc.changes.append({"offset_minutes": offset, "kind": "migration",
                        "summary": f"{b.service} 数据库迁移 {version}：删除索引 {index}（表 {table}）", "author": b.names.author()})
    inc.effects += [b.effect(qdur, "step", round(r.uniform(2.5, 9.0), 2), noise=0.3), b.latency_up(r.uniform(15, 60), delay=1)]
    inc.logs += [
        b.log(Event("WARN", b.logger("db"), "slow query", {"duration_ms": "{int:2500:9000}", "table": table,
                                                               "statement": f"'SELECT * FROM {table} WHERE {column} = ? LIMIT 50'",
                                                               "plan": f"'Seq Scan on {table}'"}), 3),
    ]
    inc.cause_terms = [index, version]
    inc.symptom_terms = [qdur.name, table, "slow query"]
    inc.cause_kind, inc.facets = "migration", ["change_cause"]
    inc.symptom, inc.thing = r.choice(["变慢了", "查询这么慢"]), ("数据库查询耗时", "变长")
    inc.hypothesis_true = "数据库迁移"
    inc.hypotheses_false = ["CPU 打满", "线程池满了"]


def _lock_contention(b: Builder, inc: Incident) -> None:
    r = b.rng
    table = r.choice(_TABLES)
    job = f"{r.choice(_WORDS)}-{r.choice(['backfill', 'recalc', 'purge', 'rebuild'])}"
    waits = Metric(f"{b.ns}_db_lock_wait_seconds", "seconds", 0.01, 0.005, 3)
    inc.metrics.append(waits)
    inc.effects += [b.effect(waits, "ramp", round(r.uniform(8, 40), 1), ramp_minutes=4, noise=1.0),
                    b.latency_up(r.uniform(15, 50), delay=1), b.errors_up(round(r.uniform(0.05, 0.3), 3), delay=2)]
    msg = r.choice([("Lock wait timeout exceeded; try restarting transaction", "com.mysql.cj.jdbc.exceptions.MySQLTransactionRollbackException"),
                    ("deadlock detected", "psycopg.errors.DeadlockDetected")])
    inc.logs += [
        b.log(Event("INFO", b.logger("jobs"), "batch job running", {"job": job, "table": table, "rows_locked": "{int:50000:400000}"}), 0.5),
        b.log(Event("ERROR", b.logger("db"), "transaction rolled back: lock wait on table " + table, {"table": table}, exc=(msg[1], msg[0])), 2.5, delay=2),
    ]
    inc.cause_terms = MECHANISM_WORDS["lock_contention"] + [waits.name, job]
    inc.symptom_terms = [waits.name, msg[0]]
    inc.symptom, inc.thing = r.choice(["写入变慢", "事务总是回滚", "一直报错"]), ("写请求延迟", "升高")
    inc.hypothesis_true = r.choice(["锁等待", "数据库锁冲突"])
    inc.hypotheses_false = ["磁盘满了", "DNS 解析失败"]


def _certificate(b: Builder, inc: Incident) -> None:
    r = b.rng
    host = b.names.external_host()
    inc.related = host
    errors = Metric(f"{b.ns}_tls_handshake_errors_per_second", "per_second", 0.0, 0.0, 2)
    inc.metrics.append(errors)
    inc.effects += [b.effect(errors, "step", round(r.uniform(2, 20), 1), noise=0.5), b.errors_up(round(r.uniform(0.2, 0.9), 3))]
    exc = r.choice([("x509", f"certificate has expired or is not yet valid: current time is after notAfter for {host}"),
                    ("javax.net.ssl.SSLHandshakeException", f"PKIX path validation failed: validity check failed for {host}"),
                    ("ssl.SSLCertVerificationError", f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired ({host})")])
    inc.logs += [b.log(Event("ERROR", b.logger("client"), f"TLS handshake with {host}:443 failed: peer certificate expired", {"peer": host}, exc=exc), 3)]
    inc.cause_terms = MECHANISM_WORDS["certificate_expiry"]
    inc.symptom_terms = [errors.name, host, "handshake"]
    inc.symptom, inc.thing = r.choice(["调用外部接口全部失败", "一直报错"]), ("错误率", "升高")
    inc.hypothesis_true = r.choice(["证书过期", "TLS 证书失效"])
    inc.hypotheses_false = ["DNS 解析失败", "限流"]


def _dns(b: Builder, inc: Incident) -> None:
    r = b.rng
    host = b.names.external_host()
    inc.related = host
    fails = Metric(f"{b.ns}_dns_lookup_failures_per_second", "per_second", 0.0, 0.0, 2)
    inc.metrics.append(fails)
    inc.effects += [b.effect(fails, "step", round(r.uniform(3, 30), 1), noise=0.8), b.errors_up(round(r.uniform(0.2, 0.8), 3))]
    exc = r.choice([("net.OpError", f"dial tcp: lookup {host} on 10.96.0.10:53: no such host"),
                    ("java.net.UnknownHostException", f"{host}: Temporary failure in name resolution"),
                    ("Error", f"getaddrinfo ENOTFOUND {host}")])
    inc.logs += [b.log(Event("ERROR", b.logger("client"), f"cannot resolve {host}: DNS lookup failed", exc=exc), 3)]
    inc.cause_terms = MECHANISM_WORDS["dns_failure"]
    inc.symptom_terms = [fails.name, host]
    inc.symptom, inc.thing = r.choice(["连不上下游", "一直报错"]), ("错误率", "升高")
    inc.hypothesis_true = r.choice(["DNS 解析失败", "域名解析出问题"])
    inc.hypotheses_false = ["证书过期", "CPU 打满"]


def _upstream_down(b: Builder, inc: Incident) -> None:
    r = b.rng
    upstream = inc.related or ""
    port = r.choice([8080, 8443, 9090, 50051])
    up_errors = Metric(f"{b.ns}_upstream_errors_per_second", "per_second", 0.05, 0.05, 2)
    inc.metrics.append(up_errors)
    inc.effects += [b.effect(up_errors, "step", round(r.uniform(10, 80), 1), noise=2), b.errors_up(round(r.uniform(0.3, 0.9), 3))]
    exc = r.choice([("requests.exceptions.ConnectionError", f"HTTPConnectionPool(host='{upstream}', port={port}): Max retries exceeded (Caused by NewConnectionError: [Errno 111] Connection refused)"),
                    ("java.net.ConnectException", f"Connection refused: {upstream}/10.{{int:0:255}}.{{int:0:255}}.{{int:1:254}}:{port}"),
                    ("rpc error", f"code = Unavailable desc = connection error: dial tcp {upstream}:{port}: connect: connection refused")])
    inc.logs += [b.log(Event("ERROR", b.logger("upstream"), f"call to {upstream} failed", {"upstream": f"{upstream}:{port}"}, exc=exc,
                             http=("GET", f"/api/{r.choice(_WORDS)}/{{int:1000:99999}}", "502")), 3)]
    inc.cause_terms = [upstream]
    inc.symptom_terms = [up_errors.name, b.errors.name, "Connection refused", "connection refused"]
    inc.cause_kind = "dependency"
    inc.symptom, inc.thing = r.choice(["一直返回 502", "一直报错"]), ("5xx 比例", "升高")
    inc.hypothesis_true = f"{upstream} 挂了"
    inc.hypotheses_false = ["磁盘满了", "线程池满了"]


def _dependency_slow(b: Builder, inc: Incident) -> None:
    r = b.rng
    dep = inc.related or ""
    dep_latency = Metric(f"{b.ns}_client_{dep.split('-')[0].replace('.', '_')}_latency_p99_seconds", "seconds", round(r.uniform(0.02, 0.1), 3), 0.005, 3)
    inc.metrics.append(dep_latency)
    timeout = r.choice([3, 5, 10])
    inc.effects += [b.effect(dep_latency, "ramp", round(timeout * r.uniform(0.8, 1.0), 2), ramp_minutes=3, noise=0.2),
                    b.latency_up(r.uniform(20, 60), delay=1)]
    inc.logs += [b.log(Event("WARN", b.logger("client"), f"slow call to {dep}", {"dependency": dep, "took_ms": f"{{int:{timeout * 700}:{timeout * 1000}}}", "timeout_ms": str(timeout * 1000)}), 2.5),
                 b.log(Event("ERROR", b.logger("client"), f"call to {dep} timed out", {"dependency": dep},
                             exc=("context deadline exceeded", f"{dep} did not answer within {timeout}s")), 1, delay=2)]
    inc.cause_terms = [dep]
    inc.symptom_terms = [dep_latency.name, b.latency.name]
    inc.cause_kind = "dependency"
    inc.symptom, inc.thing = r.choice(["变慢了", "响应时间变长"]), ("p99 延迟", "升高")
    inc.hypothesis_true = f"{dep} 变慢"
    inc.hypotheses_false = ["CPU 打满", "数据库连接池耗尽"]


def _rate_limited(b: Builder, inc: Incident) -> None:
    r = b.rng
    provider = b.names.external_host()
    inc.related = provider
    limited = Metric(f"{b.ns}_http_client_429_per_second", "per_second", 0.0, 0.0, 2)
    inc.metrics.append(limited)
    quota = r.choice([100, 300, 600, 1200])
    inc.effects += [b.effect(limited, "step", round(r.uniform(5, 40), 1), noise=1), b.errors_up(round(r.uniform(0.1, 0.5), 3))]
    inc.logs += [b.log(Event("WARN", b.logger("client"), f"429 Too Many Requests from {provider}",
                             {"limit": f"{quota}/min", "retry_after_s": "{int:10:60}"}, http=("POST", f"/v2/{r.choice(_WORDS)}", "429")), 3)]
    inc.cause_terms = MECHANISM_WORDS["rate_limited"]
    inc.symptom_terms = [limited.name, provider]
    inc.symptom, inc.thing = r.choice(["调用外部服务老是失败", "一直报错"]), ("错误率", "升高")
    inc.hypothesis_true = r.choice(["被限流", "触发了限流"])
    inc.hypotheses_false = ["证书过期", "内存不足"]


def _config_change(b: Builder, inc: Incident) -> None:
    r = b.rng
    setting = r.choice(["timeout_ms", "concurrency", "max_retries", "batch_size", "endpoint"])
    key = b.names.config_key(setting)
    if setting == "timeout_ms":
        old, new = str(r.choice([2000, 3000, 5000])), str(r.choice([20, 50, 80]))
        exc = ("TimeoutError", f"deadline of {new}ms exceeded ({key}={new})")
    elif setting == "endpoint":
        old, new = f"https://{b.names.external_host()}", f"https://{b.names.external_host()}"
        exc = ("ConnectionError", f"{key}={new}: connection refused")
    else:
        old, new = str(r.randint(4, 16)), str(r.choice([0, 1, 500]))
        exc = ("ValueError", f"invalid value {new} for {key}")
    offset = -r.randint(1, 8)
    inc.changes.append(b.config_change(key, old, new, offset, r.choice(["调优", "统一配置", "压测后调整"])))
    contained = r.random() < 0.5 and setting == "concurrency"
    if contained:  # the change's key is contained in a thread name: report.export.concurrency / report-export-7
        thread = "-".join(key.split(".")[:-1])
        event = Event("ERROR", b.logger("jobs"), "job stalled: no worker picked it up", {"thread": f"{thread}-{{int:0:15}}", "waited_s": "{int:30:300}"})
        inc.cause_terms = [key]
        inc.facets.append("contained_identifier")
    else:
        event = Event("ERROR", b.logger("config"), f"request failed with {key}={new}", {"request_id": "{uuid}"}, exc=exc)
        inc.cause_terms = [key]
    inc.effects += [b.errors_up(round(r.uniform(0.2, 0.7), 3))]
    inc.logs += [b.log(event, 3)]
    inc.symptom_terms = [b.errors.name, key]
    inc.cause_kind, inc.facets = "config", inc.facets + ["change_cause"]
    inc.symptom, inc.thing = r.choice(["突然开始报错", "一直报错"]), ("错误率", "升高")
    inc.hypothesis_true = "配置变更"
    inc.hypotheses_false = ["磁盘满了", "新版本"]


def _bad_release(b: Builder, inc: Incident) -> None:
    r = b.rng
    version, feature = b.names.version(), b.names.feature()
    offset = -r.randint(1, 8)
    inc.changes.append(b.release(version, offset, f"启用新功能 {feature}（默认开启）"))
    exc = r.choice([("java.lang.NullPointerException", f"Cannot invoke \"String.length()\" because \"{feature}.label\" is null"),
                    ("KeyError", f"'{feature}'"), ("TypeError", f"Cannot read properties of undefined (reading '{feature}')")])
    inc.effects += [b.errors_up(round(r.uniform(0.15, 0.6), 3))]
    inc.logs += [b.log(Event("ERROR", b.logger("handler"), f"unhandled exception in {feature}", {"feature": feature, "build": version}, exc=exc), 3)]
    inc.cause_terms = [version]
    inc.symptom_terms = [b.errors.name, feature, exc[0]]
    inc.decoy_terms = []
    inc.cause_kind, inc.facets = "release", ["change_cause"]
    inc.symptom, inc.thing = r.choice(["发布后一直报错", "突然报错"]), ("错误率", "升高")
    inc.hypothesis_true = "新版本"
    inc.hypotheses_false = ["磁盘满了", "配置变更"]


def _cache_hit(b: Builder, inc: Incident) -> None:
    r = b.rng
    key = b.names.config_key("ttl_seconds")
    hit = Metric(r.choice(["cache_hit_ratio", f"{b.ns}_cache_hit_ratio"]), "ratio", round(r.uniform(0.9, 0.98), 3), 0.005, 3, 1)
    inc.metrics.append(hit)
    new = r.choice([1, 2, 5])
    inc.changes.append(b.config_change(key, str(r.choice([600, 1800, 3600])), str(new), -r.randint(1, 6), "缩短缓存时间"))
    inc.effects += [b.effect(hit, "ramp", round(r.uniform(0.05, 0.3), 3), ramp_minutes=3, noise=0.02), b.latency_up(r.uniform(4, 12), delay=2)]
    inc.logs += [b.log(Event("INFO", b.logger("cache"), "cache entry expired", {"ttl_s": str(new), "setting": key, "key": f"{r.choice(_WORDS)}:{{hex:8}}"}), 4),
                 b.log(Event("WARN", b.logger("db"), "backend load high after cache misses", {"qps": "{int:800:4000}"}), 1, delay=2)]
    inc.cause_terms = [key]
    inc.symptom_terms = [hit.name]
    inc.cause_kind, inc.facets = "config", ["change_cause"]
    inc.symptom, inc.thing = r.choice(["变慢了"]), ("缓存命中率", "掉")
    inc.hypothesis_true = "配置变更"
    inc.hypotheses_false = ["新版本", "磁盘满了"]


def _consumer_lag(b: Builder, inc: Incident) -> None:
    r = b.rng
    topic = f"{r.choice(_WORDS)}.{r.choice(['events', 'commands', 'updates'])}.v{r.randint(1, 4)}"
    group = f"{b.service}-{r.choice(['consumer', 'cg'])}"
    lag = Metric(f"{b.ns}_consumer_lag", "count", r.randint(0, 50), 10.0, 0)
    inc.metrics.append(lag)
    inc.effects += [b.effect(lag, "ramp", r.randint(20000, 400000), ramp_minutes=r.randint(15, 30), noise=200)]
    inc.logs += [b.log(Event("WARN", b.logger("consumer"), "consumer lag growing", {"group": group, "topic": topic, "lag": "{int:10000:400000}"}), 1.5),
                 b.log(Event("WARN", b.logger("consumer"), "message processing slow", {"topic": topic, "took_ms": "{int:900:5000}", "downstream_write": "retrying"}), 2)]
    inc.cause_terms = MECHANISM_WORDS["consumer_lag"] + [lag.name]
    inc.symptom_terms = [lag.name, topic]
    inc.symptom, inc.thing = r.choice(["消息处理不过来", "数据延迟这么大"]), ("数据延迟", "越来越大")
    inc.hypothesis_true = r.choice(["消费跟不上", "消费积压"])
    inc.hypotheses_false = ["磁盘满了", "证书过期"]


def _gc_pause(b: Builder, inc: Incident) -> None:
    r = b.rng
    pause = Metric(f"{b.ns}_jvm_gc_pause_seconds_max", "seconds", round(r.uniform(0.01, 0.05), 3), 0.005, 3)
    inc.metrics.append(pause)
    inc.effects += [b.effect(pause, "sawtooth", round(r.uniform(1.5, 6.0), 2), period_minutes=r.randint(3, 6), noise=0.05),
                    b.latency_up(r.uniform(10, 40), delay=1)]
    heap = r.choice([2048, 4096, 8192])
    raw = f"[gc] GC({{int:100:9999}}) Pause Full (Allocation Failure) {heap - 40}M->{heap - 60}M({heap}M) {{int:1500:6000}}.{{int:100:999}}ms"
    inc.logs += [b.log(Event("WARN", "", "", raw=raw), 2),
                 b.log(Event("WARN", b.logger("http"), "request stalled during stop-the-world pause", {"stalled_ms": "{int:1500:6000}"}), 1, delay=1)]
    inc.cause_terms = MECHANISM_WORDS["gc_pause"] + [pause.name]
    inc.symptom_terms = [pause.name, "Pause Full"]
    inc.facets.append("no_level_line")
    inc.symptom, inc.thing = r.choice(["时不时卡顿", "延迟抖动"]), ("p99 延迟", "忽高忽低")
    inc.hypothesis_true = r.choice(["GC 停顿", "Full GC"])
    inc.hypotheses_false = ["数据库连接池耗尽", "DNS 解析失败"]


def _network(b: Builder, inc: Incident) -> None:
    r = b.rng
    retrans = Metric(r.choice(["node_tcp_retransmit_ratio", f"{b.ns}_tcp_retransmit_ratio"]), "ratio", 0.002, 0.001, 4, 1)
    inc.metrics.append(retrans)
    nic = r.choice(["eth0", "ens5", "bond0"])
    inc.effects += [b.effect(retrans, "sawtooth", round(r.uniform(0.08, 0.3), 3), period_minutes=r.randint(4, 8), noise=0.01),
                    b.errors_up(round(r.uniform(0.05, 0.2), 3), delay=1)]
    inc.logs += [b.log(Event("WARN", "", "", raw=f"kernel: {nic}: Link is {{choice:Down|Up 10000 Mbps Full Duplex}}"), 1.5),
                 b.log(Event("ERROR", b.logger("net"), "connection reset by peer", {"peer": "{ip}:{int:1024:65000}"}, exc=("ECONNRESET", "read: connection reset by peer")), 2, delay=1)]
    inc.cause_terms = MECHANISM_WORDS["network_flapping"] + [retrans.name, nic]
    inc.symptom_terms = [retrans.name, "reset by peer"]
    inc.facets.append("no_level_line")
    inc.symptom, inc.thing = r.choice(["时好时坏", "偶发报错"]), ("错误率", "忽高忽低")
    inc.hypothesis_true = r.choice(["网络抖动", "网络不稳定"])
    inc.hypotheses_false = ["磁盘满了", "内存不足"]


def _crash_loop(b: Builder, inc: Incident) -> None:
    r = b.rng
    restarts = Metric(f"{b.ns}_container_restarts_per_10m", "count", 0, 0.0, 0)
    inc.metrics.append(restarts)
    inc.effects += [b.effect(restarts, "sawtooth", r.randint(3, 8), period_minutes=r.randint(5, 10), noise=0),
                    b.errors_up(round(r.uniform(0.2, 0.6), 3), delay=1)]
    raw = ("panic: runtime error: invalid memory address or nil pointer dereference\n"
           "[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc={hex:6}]\n\n"
           "goroutine {int:1:400} [running]:\n"
           f"main.(*{b.ns.capitalize()}Handler).serve(0xc000{{hex:6}})\n"
           f"\t/src/{b.ns}/handler.go:{{int:40:400}} +0x{{hex:3}}")
    inc.logs += [b.log(Event("FATAL", "", "", raw=raw), 1.5),
                 b.log(Event("WARN", b.logger("supervisor"), "Back-off restarting failed container", {"restarts": "{int:3:40}"}), 1, delay=1)]
    # The question says 重启 / 挂: the cause is the panic, not the restarts the question names.
    inc.cause_terms = ["panic", "nil pointer", "SIGSEGV", "空指针", "崩溃", "crash"]
    inc.symptom_terms = [restarts.name, "Back-off restarting"]
    inc.facets.append("no_level_line")
    inc.symptom, inc.thing = r.choice(["一直重启", "老是挂"]), ("重启次数", "变多")
    inc.hypothesis_true = r.choice(["进程崩溃", "程序 panic"])
    inc.hypotheses_false = ["磁盘满了", "被限流"]


def _batch_external(b: Builder, inc: Incident) -> None:
    r = b.rng
    host = b.names.external_host()
    inc.related = host
    job = f"{r.choice(_WORDS)}-{r.choice(['export', 'settlement', 'import', 'sync'])}"
    fails = Metric(f"{b.ns}_batch_job_failures", "count", 0, 0.0, 0)
    inc.metrics.append(fails)
    inc.effects += [b.effect(fails, "step", r.randint(3, 12), noise=0)]
    exc = r.choice([("paramiko.ssh_exception.NoValidConnectionsError", f"[Errno None] Unable to connect to port 22 on {host}"),
                    ("HTTPError", f"503 Service Unavailable from https://{host}/upload"),
                    ("botocore.exceptions.EndpointConnectionError", f"Could not connect to the endpoint URL: https://{host}/")])
    inc.logs += [b.log(Event("ERROR", b.logger("batch"), f"job {job} failed", {"job": job, "target": host, "attempt": "{int:1:3}"}, exc=exc), 1.5),
                 b.log(Event("INFO", b.logger("batch"), f"job {job} scheduled for retry", {"job": job}), 1)]
    inc.cause_terms = [host]
    inc.symptom_terms = [fails.name, job]
    inc.cause_kind = "dependency"
    inc.symptom, inc.thing = r.choice(["批处理任务一直失败", "定时任务跑不成功"]), ("任务失败数", "变多")
    inc.hypothesis_true = f"{host} 不可用"
    inc.hypotheses_false = ["内存不足", "磁盘满了"]


BUILDERS: dict[str, Callable[[Builder, Incident], None]] = {
    "memory_oom": _memory_oom, "disk_full": _disk_full, "cpu_saturation": _cpu_saturation,
    "connection_pool_exhaustion": _connection_pool, "thread_pool_exhaustion": _thread_pool, "slow_query": _slow_query,
    "lock_contention": _lock_contention, "certificate_expiry": _certificate, "dns_failure": _dns,
    "upstream_down": _upstream_down, "dependency_slow": _dependency_slow, "rate_limited": _rate_limited,
    "config_change": _config_change, "bad_release": _bad_release, "cache_hit_collapse": _cache_hit,
    "consumer_lag": _consumer_lag, "gc_pause": _gc_pause, "network_flapping": _network, "crash_loop": _crash_loop,
    "batch_external_failure": _batch_external,
}
assert tuple(BUILDERS) == CLASSES


# --- the estate --------------------------------------------------------------------------------


@dataclass
class ServiceSpec:
    name: str
    ns: str
    hosts: list[str]
    style: LogStyle
    metrics: list[Metric]
    logs: list[dict]
    changes: list[dict] = field(default_factory=list)


def _routine_logs(rng: random.Random, spec: ServiceSpec, b: Builder) -> list[dict]:
    word = rng.choice(_WORDS)
    events = [
        (Event("INFO", b.logger("http"), "request served", {"took_ms": "{int:3:120}", "request_id": "{uuid}"},
               http=(rng.choice(["GET", "POST"]), f"/v1/{word}/{{int:1000:99999}}", "200")), rng.uniform(2, 4)),
        (Event("INFO", b.logger(rng.choice(["jobs", "sync", "scheduler"])), f"{word} batch done", {"items": "{int:10:900}"}), rng.uniform(0.2, 1)),
        (Event("WARN", b.logger("http"), "client closed connection early", {"peer": "{ip}"}), 0.03),
    ]
    return [b.log(event, round(rate, 2)) for event, rate in events]


def _routine_change(rng: random.Random, names: Names, service: str, minutes_ago: int) -> tuple[dict, str]:
    """A harmless change sharing no identifier with anything else; returns it and its identifier."""
    if rng.random() < 0.5:
        key = names.config_key(rng.choice(["log_level", "banner_text", "docs_url", "ui_theme"]))
        return ({"minutes_ago": minutes_ago, "kind": "config", "summary": f"{service} 配置变更：{key} 调整（仅展示用途）",
                 "author": names.author()}, key)
    version = names.version()
    return ({"minutes_ago": minutes_ago, "kind": "deploy", "summary": f"{service} 发布 {version}：帮助文档链接与页面文案更新（无代码路径变更）",
             "author": names.author()}, version)


@dataclass
class Scenario:
    seed: int
    services: list[ServiceSpec]
    incidents: list[Incident]
    healthy: list[str]
    routine_ids: dict[str, str]  # healthy service -> its routine change's identifier


def build_scenario(seed: int) -> Scenario:
    rng = random.Random(f"attest-scenario:{seed}")
    names = Names(rng)
    services: list[ServiceSpec] = []
    incidents: list[Incident] = []
    formats = list(LOG_FORMATS)

    def new_service(fmt: str | None = None) -> tuple[ServiceSpec, Builder]:
        name, ns = names.service(), names.namespace()
        style = _style(rng, fmt or rng.choice(formats), ns)
        request = _request_metrics(rng, ns)
        spec = ServiceSpec(name, ns, names.hosts(name), style, list(request), [])
        builder = Builder(rng, names, name, ns, style, request, spec.hosts)
        spec.logs = _routine_logs(rng, spec, builder)
        services.append(spec)
        return spec, builder

    for klass in CLASSES:
        for index in range(INCIDENTS_PER_CLASS):
            fmt = formats[(CLASSES.index(klass) + index) % len(formats)]  # every format in every class
            spec, builder = new_service(fmt)
            start = rng.randint(12, 45)
            inc = Incident(klass, spec.name, start, rng.randint(start + 5, start + 60))
            if klass in ("upstream_down", "dependency_slow"):
                other, _ = new_service()
                inc.related = other.name
            BUILDERS[klass](builder, inc)
            # Every effect has been going on for a while when the question is asked (a disk that
            # fills for 30 minutes before writes fail is asked about once they fail): a symptom a
            # minute old is a different question, and its reading would shift with the minute
            # the run asks it.
            latest = max((int(e.get("delay_minutes", 0)) for e in inc.effects), default=0)
            shift = max(0, MIN_SYMPTOM_AGE_MIN - (inc.start - latest))
            inc.start, inc.duration = inc.start + shift, inc.duration + shift
            if klass == "upstream_down":
                down = Metric(f"{other.ns}_up", "ratio", 1, 0.0, 0, 1)
                other.metrics.append(down)
                inc.effects.append({"metric": down.name, "shape": "step", "target": 0, "delay_minutes": 0, "service": other.name})
                other_builder = Builder(rng, names, other.name, other.ns, other.style, tuple(other.metrics[:3]), other.hosts)  # type: ignore[arg-type]
                inc.logs.append(other_builder.log(Event("FATAL", other_builder.logger("main"), "shutting down: listener closed after fatal init error",
                                                        exc=("RuntimeError", "schema registry handshake failed")), at=[0], service=other.name))
                inc.title = f"{other.name} 不可用，{spec.name} 调用被拒绝"
            elif klass == "dependency_slow":
                dep_latency = other.metrics[1]
                inc.effects.append({"metric": dep_latency.name, "shape": "ramp", "target": round(dep_latency.baseline * 40, 3),
                                    "ramp_minutes": 3, "service": other.name})
            _add_decoys(rng, names, builder, inc, index)
            spec.metrics += inc.metrics
            inc.title = inc.title or f"{spec.name} {klass}"
            incidents.append(inc)

    healthy: list[str] = []
    routine_ids: dict[str, str] = {}
    for index in range(HEALTHY_SERVICES):
        spec, builder = new_service(formats[index % len(formats)])
        extra = rng.choice([Metric(f"{spec.ns}_jvm_heap_used_percent", "percent", rng.randint(40, 60), 1.5, 1, 100),
                            Metric("container_memory_usage_percent", "percent", rng.randint(30, 60), 1.5, 1, 100),
                            Metric("fs_used_percent", "percent", rng.randint(30, 70), 0.2, 1, 100),
                            Metric(f"{spec.ns}_hikari_active_connections", "count", rng.randint(2, 8), 1.0, 0)])
        spec.metrics.append(extra)
        if index % 2 == 0:
            change, ident = _routine_change(rng, names, spec.name, rng.randint(10, 50))
            spec.changes.append(change)
            routine_ids[spec.name] = ident
        healthy.append(spec.name)
    return Scenario(seed, services, incidents, healthy, routine_ids)


def _add_decoys(rng: random.Random, names: Names, b: Builder, inc: Incident, index: int) -> None:
    """Index 1: an unrelated change after the onset; index 2: one long before; index 3: an error
    that starts after the symptom, a consequence (distinct identifier)."""
    if index == 1 or index == 2:
        offset = rng.randint(3, 9) if index == 1 else -rng.randint(70, 100)
        if rng.random() < 0.5:
            key = names.config_key(rng.choice(["log_level", "banner_text", "docs_url", "ui_theme"]))
            inc.changes.append({"offset_minutes": offset, "kind": "config", "summary": f"{b.service} 配置变更：{key} 调整（仅展示用途）",
                                "author": names.author()})
            inc.decoy_terms.append(key)
        else:
            version = names.version()
            inc.changes.append({"offset_minutes": offset, "kind": "deploy",
                                "summary": f"{b.service} 发布 {version}：页面文案与帮助链接更新（仅文案，无代码路径变更）", "author": names.author()})
            inc.decoy_terms.append(version)
        inc.facets.append("decoy_change_after" if index == 1 else "decoy_change_before")
    elif index == 3:
        breaker = names.token("cb-")
        inc.logs.append(b.log(Event("ERROR", b.logger("resilience"), f"circuit breaker {breaker} OPEN, rejecting calls",
                                    {"breaker": breaker, "failure_rate": "{int:50:100}%"}), 1, delay=rng.randint(6, 10)))
        inc.decoy_terms.append(breaker)
        inc.facets.append("decoy_consequence")


# --- cases -------------------------------------------------------------------------------------

ANSWER_OUTCOMES = {"multi_agent": ["PASS", "LOW_CONFID"], "single_react": ["SUCCESS"]}
NO_DATA_OUTCOMES = {"multi_agent": ["LOW_CONFID", "REJECT", "INSUFFICIENT_EVIDENCE", "NO_VERIFIED_PROGRESS", "MISSING_REQUIRED_CONTEXT"],
                    "single_react": ["SUCCESS", "INSUFFICIENT_EVIDENCE", "NO_VERIFIED_PROGRESS", "MISSING_REQUIRED_CONTEXT"]}
TECHNICAL_FAILURE = "请稍后重试"
NO_DATA_WORDS = ["无法确认", "没有数据", "无数据", "没有查到数据", "缺少数据"]
QUESTION_KINDS_BY_CLASS = ("why", "anomaly", "thing", "yes_true", "yes_false", "change_or_compound")


def _ask(head: str, tail: str) -> str:
    """Join Chinese and a following ASCII word with a space, as people type it."""
    return f"{head} {tail}" if tail[:1].isascii() and head[-1:] and not head[-1:].isascii() else head + tail


def _case(case_id: str, klass: str, question: str, tags: list[str], note: str, *,
          outcomes: dict | None = None, opening: dict | None = None, answer: dict | None = None,
          confirmed: dict | None = None, issue15: dict | None = None) -> dict:
    case: dict[str, Any] = {"id": case_id, "class": klass, "question": question, "tags": tags, "concerns": [], "note": note,
                            "expect": outcomes or ANSWER_OUTCOMES,
                            "opening": opening or {"must_contain": [], "must_not_contain": [TECHNICAL_FAILURE]}}
    if answer:
        case["answer"] = answer
    if confirmed:
        case["confirmed"] = confirmed
    if issue15:
        case["issue15"] = issue15
    return case


def _terms(words: list[str]) -> list[str]:
    return list(dict.fromkeys(w for w in words if w))


def _incident_cases(rng: random.Random, inc: Incident, index: int, fmt_tag: str, scenario: Scenario) -> list[dict]:
    svc, cid = inc.service, f"{inc.klass.replace('_', '-')}-{index + 1}"
    tags = [fmt_tag] if fmt_tag in ("log_json", "log_logfmt", "log_access", "log_traceback") else []
    cause = _terms(inc.cause_terms)
    evidence = _terms(inc.cause_terms + inc.symptom_terms)
    no_decoy = list(inc.decoy_terms)
    note = f"truth: {inc.klass} on {svc}, cause {inc.cause_kind} ({', '.join(cause[:3])})" + (
        f"; decoys {', '.join(no_decoy)} ({', '.join(f for f in inc.facets if f.startswith('decoy'))})" if no_decoy else "")
    if "decoy_change_after" in inc.facets or "decoy_change_before" in inc.facets:
        tags.append("unrelated_release")
    kind = QUESTION_KINDS_BY_CLASS[index % len(QUESTION_KINDS_BY_CLASS)]
    cases: list[dict] = []
    why_first = {"must_contain": [cause], "must_not_contain": no_decoy}
    if kind == "why":
        q = rng.choice([f"{svc} 为什么{inc.symptom}？", f"{svc} 最近为什么{inc.symptom}？", f"帮我看看 {svc} 为什么{inc.symptom}"])
        cases.append(_case(cid, inc.klass, q, tags + ["why"], note,
                           opening={"must_contain": [cause], "must_not_contain": [TECHNICAL_FAILURE]},
                           issue15={"kind": "why", "first_line": why_first}))
    elif kind == "anomaly":
        q = rng.choice([f"{svc} 最近一小时有什么异常？", f"{svc} 现在有问题吗？", f"看一下 {svc} 最近半小时的情况"])
        cases.append(_case(cid, inc.klass, q, tags, note,
                           opening={"must_contain": [evidence], "must_not_contain": [TECHNICAL_FAILURE, "在所查范围内未发现异常"]},
                           confirmed={"must_contain": [evidence]},
                           issue15={"kind": "health", "first_line": {"must_contain": ["发现异常："], "must_not_contain": ["在所查范围内未发现异常"] + no_decoy}}))
    elif kind == "thing":
        thing, bad = inc.thing
        done = "" if bad.endswith("了") or "忽" in bad or "这么" in bad else "了"
        q = _ask(f"{svc} 的", f"{thing}为什么{bad}{done}？")
        cases.append(_case(cid, inc.klass, q, tags + ["why"], note,
                           opening={"must_contain": [cause], "must_not_contain": [TECHNICAL_FAILURE]},
                           issue15={"kind": "why", "first_line": why_first}))
    elif kind == "yes_true":
        q = rng.choice([_ask(f"{svc} {inc.symptom}，是不是", f"{inc.hypothesis_true}导致的？"),
                        _ask(_ask(f"{svc} 的", inc.thing[0]) + f"{inc.thing[1]}，是", f"{inc.hypothesis_true}的问题吗？")])
        cases.append(_case(cid, inc.klass, q, tags + ["hypothesis"], note + f"; hypothesis '{inc.hypothesis_true}' is true",
                           opening={"must_contain": [cause], "must_not_contain": [TECHNICAL_FAILURE]},
                           issue15={"kind": "yes_no", "hypothesis": inc.hypothesis_true,
                                    "first_line": {"must_contain": ["是："], "must_not_contain": ["证据不支持", "无法确认"] + no_decoy}}))
    elif kind == "yes_false":
        wrong = rng.choice(inc.hypotheses_false)
        q = rng.choice([_ask(_ask(f"{svc} 的", inc.thing[0]) + f"{inc.thing[1]}，是不是", f"{wrong}导致的？"),
                        _ask(f"{svc} {inc.symptom}，是不是", f"{wrong}的问题？")])
        cases.append(_case(cid, inc.klass, q, tags + ["hypothesis", "hypothesis_no"], note + f"; hypothesis '{wrong}' is false",
                           issue15={"kind": "yes_no", "hypothesis": wrong,
                                    "first_line": {"must_contain": [["证据不支持", "无法确认"]], "must_not_contain": ["是："]}}))
    else:
        if inc.cause_kind in ("config", "release", "migration"):
            asked = {"release": "新版本", "config": "配置变更", "migration": "数据库迁移"}[inc.cause_kind]
            q = f"{svc} {inc.symptom}，是不是{asked}导致的？"
            cases.append(_case(cid, inc.klass, q, tags + ["hypothesis"], note + f"; the change hypothesis ({asked}) is true",
                               opening={"must_contain": [cause], "must_not_contain": [TECHNICAL_FAILURE]},
                               issue15={"kind": "yes_no", "hypothesis": asked,
                                        "first_line": {"must_contain": ["是：", cause], "must_not_contain": ["证据不支持"] + no_decoy}}))
        else:
            q = rng.choice([f"{svc} 为什么{inc.symptom}？影响大吗？要不要回滚？", f"{svc} {inc.symptom}，是什么原因？现在恢复了吗？"])
            cases.append(_case(cid, inc.klass, q, tags + ["why"], note + "; compound question",
                               opening={"must_contain": [cause], "must_not_contain": [TECHNICAL_FAILURE] + no_decoy}))
    # A second question on the incidents with a decoy: was it the decoy change?
    if any(f in inc.facets for f in ("decoy_change_after", "decoy_change_before")):
        asked = "新版本" if no_decoy[0].startswith("v") else "配置变更"
        if inc.cause_kind in ("config", "release") and (asked == "新版本") == (inc.cause_kind == "release"):
            pass  # the same kind of change is both cause and decoy: the yes/no would be ambiguous
        else:
            q = f"{svc} {inc.symptom}，是不是{asked}导致的？"
            cases.append(_case(f"{cid}-decoy", inc.klass, q, tags + ["hypothesis", "hypothesis_no", "unrelated_release"],
                               note + f"; the {asked} ({no_decoy[0]}) is a decoy",
                               answer={"must_contain": [], "must_not_contain": []},
                               issue15={"kind": "yes_no", "hypothesis": f"{asked} {no_decoy[0]}",
                                        "first_line": {"must_contain": [["证据不支持", "无法确认"]], "must_not_contain": ["是："]}}))
    return cases


def build_cases(scenario: Scenario) -> dict[str, list[dict]]:
    rng = random.Random(f"attest-cases:{scenario.seed}")
    files: dict[str, list[dict]] = {}
    styles = {s.name: s.style.kind for s in scenario.services}
    per_class: dict[str, int] = {}
    for inc in scenario.incidents:
        index = per_class.get(inc.klass, 0)
        per_class[inc.klass] = index + 1
        files.setdefault(inc.klass, []).extend(
            _incident_cases(rng, inc, index, LOG_FORMAT_TAG[styles[inc.service]], scenario))
    # Two services in one question: the upstream-down pairs, and an incident beside a healthy one.
    multi: list[dict] = []
    for n, inc in enumerate(i for i in scenario.incidents if i.klass == "upstream_down"):
        if n >= 2:
            break
        q = f"{inc.service} 和 {inc.related} 的报错是同一个问题吗？"
        multi.append(_case(f"multi-upstream-{n + 1}", "multi_service", q, ["multi_service", "hypothesis"],
                           f"truth: {inc.related} is down and {inc.service} fails calling it",
                           answer={"must_contain": [inc.service, inc.related], "must_not_contain": []},
                           issue15={"kind": "yes_no", "first_line": {"must_contain": [inc.related], "must_not_contain": ["证据不支持"]}}))
    for n in range(3):
        inc = scenario.incidents[rng.randrange(len(scenario.incidents))]
        healthy = scenario.healthy[n]
        q = rng.choice([f"{inc.service} 和 {healthy} 最近一小时有没有异常？", f"帮我看下 {healthy}、{inc.service} 现在正常吗"])
        multi.append(_case(f"multi-pair-{n + 1}", "multi_service", q, ["multi_service"],
                           f"truth: {inc.service} has a {inc.klass} incident, {healthy} is healthy",
                           opening={"must_contain": [inc.service], "must_not_contain": [TECHNICAL_FAILURE]},
                           answer={"must_contain": [inc.service, healthy], "must_not_contain": []},
                           confirmed={"must_contain": [_terms(inc.cause_terms + inc.symptom_terms)]}))
    files["multi_service"] = multi
    # Healthy controls: PASS / SUCCESS and no cause.
    healthy_cases = []
    for n, name in enumerate(scenario.healthy):
        q = rng.choice([f"{name} 最近一小时正常吗？", f"{name} 最近一小时有什么异常？", f"{name} 最近半小时有报错吗？",
                        f"{name} 现在有没有问题？", f"Is {name} healthy over the last 30 minutes?"])
        routine = scenario.routine_ids.get(name)
        healthy_cases.append(_case(f"healthy-{n + 1}", "healthy", q, ["healthy_control"],
                                   f"truth: no incident on {name}" + (f"; routine change {routine}" if routine else ""),
                                   outcomes={"multi_agent": ["PASS"], "single_react": ["SUCCESS"]},
                                   answer={"must_contain": [name], "must_not_contain": []},
                                   issue15={"kind": "health", "first_line": {
                                       "must_contain": ["在所查范围内未发现异常"],
                                       "must_not_contain": ["最可能的原因", "发现异常："] + ([routine] if routine else [])}}))
    files["healthy"] = healthy_cases
    # No data: windows the estate does not cover (HISTORY_MINUTES of history only).
    no_data = []
    picks = scenario.healthy[:3] + [scenario.incidents[rng.randrange(len(scenario.incidents))].service for _ in range(3)]
    windows = ["前天下午", "前天上午 9 点到 10 点", "昨天上午 10 点到 11 点", "前天晚上", "昨天凌晨 2 点到 3 点", "前天下午 3 点"]
    for n, name in enumerate(picks):
        q = rng.choice([f"{name} {windows[n]}有没有异常？", f"{name} 在{windows[n]}有报错吗？", f"{windows[n]} {name} 正常吗？"])
        no_data.append(_case(f"no-data-{n + 1}", "no_data", q, ["no_data"],
                             f"truth: the estate holds {HISTORY_MINUTES} minutes of history; {windows[n]} has no data",
                             outcomes=NO_DATA_OUTCOMES,
                             opening={"must_contain": [NO_DATA_WORDS], "must_not_contain": [TECHNICAL_FAILURE, "在所查范围内未发现异常"]},
                             issue15={"kind": "health", "first_line": {"must_contain": [NO_DATA_WORDS],
                                                                       "must_not_contain": ["在所查范围内未发现异常", "发现异常："]}}))
    files["no_data"] = no_data
    # Triage: which service is in trouble?
    triage = []
    for n in range(3):
        sick = scenario.incidents[rng.randrange(len(scenario.incidents))]
        group = [sick.service] + rng.sample(scenario.healthy, 2)
        rng.shuffle(group)
        q = rng.choice([f"{'、'.join(group)} 这几个服务现在哪个有问题？", f"帮我巡检一下 {'、'.join(group)}，哪个服务不正常？"])
        triage.append(_case(f"triage-named-{n + 1}", "triage", q, ["multi_service"],
                            f"truth: only {sick.service} ({sick.klass}) is abnormal",
                            opening={"must_contain": [sick.service], "must_not_contain": [TECHNICAL_FAILURE]},
                            confirmed={"must_contain": [_terms(sick.cause_terms + sick.symptom_terms)]}))
    sick_names = [i.service for i in scenario.incidents]
    q = rng.choice(["现在线上哪个服务有问题？", "最近一小时哪些服务出了问题？"])
    triage.append(_case("triage-open", "triage", q, ["no_service"],
                        "truth: every incident service is abnormal; a clarifying question naming none is also honest",
                        outcomes={"multi_agent": ["PASS", "LOW_CONFID", "MISSING_REQUIRED_CONTEXT"],
                                  "single_react": ["SUCCESS", "MISSING_REQUIRED_CONTEXT"]},
                        answer={"must_contain": [sick_names + ["请补充要排查的服务名称"]],
                                "must_not_contain": []}))
    files["triage"] = triage
    return files


# --- writing -----------------------------------------------------------------------------------


class _PlainDumper(yaml.SafeDumper):
    """No anchors and aliases: each case reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def estate_documents(scenario: Scenario) -> tuple[dict, dict[str, dict]]:
    definitions: dict[str, dict] = {}
    for spec in scenario.services:
        for metric in spec.metrics:
            definition: dict[str, Any] = {"unit": metric.unit, "decimals": metric.decimals}
            if metric.max is not None:
                definition["max"] = metric.max
            definitions.setdefault(metric.name, definition)
    services = []
    for spec in scenario.services:
        entry: dict[str, Any] = {
            "name": spec.name, "hosts": spec.hosts,
            "metrics": {m.name: {"baseline": m.baseline, "noise": round(m.noise, 4)} for m in spec.metrics},
            "logs": spec.logs,
        }
        if spec.changes:
            entry["changes"] = spec.changes
        services.append(entry)
    incidents: dict[str, dict] = {}
    counters: dict[str, int] = {}
    for inc in scenario.incidents:
        counters[inc.klass] = counters.get(inc.klass, 0) + 1
        ident = f"GEN-{inc.klass.upper().replace('_', '-')}-{counters[inc.klass]}"
        incidents[f"{inc.klass}-{counters[inc.klass]}.json"] = {
            "id": ident, "title": inc.title, "service": inc.service, "kind": inc.klass,
            "start_offset_minutes": inc.start, "duration_minutes": inc.duration,
            "metrics": inc.effects, "logs": inc.logs, "changes": inc.changes,
        }
    return {"history_minutes": HISTORY_MINUTES, "metrics": definitions, "services": services}, incidents


def write_scenario(seed: int, out: Path) -> dict:
    """Generate the scenario set of `seed` into `out` (replacing estate/, cases/ and knowledge/
    there). Returns counts."""
    out = Path(out)
    scenario = build_scenario(seed)
    services_doc, incidents = estate_documents(scenario)
    cases = build_cases(scenario)
    for sub in ("estate", "cases", "knowledge"):
        shutil.rmtree(out / sub, ignore_errors=True)
    (out / "estate" / "incidents").mkdir(parents=True)
    (out / "cases").mkdir(parents=True)
    (out / "estate" / "services.json").write_text(json.dumps(services_doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for name, doc in incidents.items():
        (out / "estate" / "incidents" / name).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for name, items in cases.items():
        header = f"# Generated by tests/scenarios/generator.py, seed {seed}: class {name}. Do not edit.\n"
        body = yaml.dump(items, Dumper=_PlainDumper, allow_unicode=True, sort_keys=False, width=200)
        (out / "cases" / f"{name}.yaml").write_text(header + body, encoding="utf-8")
    shutil.copytree(KNOWLEDGE_SOURCE, out / "knowledge")
    return {"seed": seed, "services": len(scenario.services), "incidents": len(scenario.incidents),
            "cases": sum(len(items) for items in cases.values()), "classes": len(cases)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scenarios.generator", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="directory for estate/, cases/ and knowledge/")
    args = parser.parse_args(argv)
    counts = write_scenario(args.seed, args.out)
    print(f"seed {counts['seed']}: {counts['services']} services, {counts['incidents']} incidents, "
          f"{counts['cases']} cases in {counts['classes']} classes -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
