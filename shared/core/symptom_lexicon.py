"""Operations domain knowledge shared by the embedded planner and the embedded executor agent.

This is knowledge about *kinds* of problems (what CPU saturation or pool exhaustion looks like in
metric names and log messages, what an SRE would check next), never about a particular estate:
no service, incident or value of the demo data may appear here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.config import configured_signal_semantics
from shared.core.signal_semantics import Direction, SignalSemantics
from shared.text_scan import Scan, literal_part


@dataclass(frozen=True)
class Action:
    text: str
    # Anything that changes the running system (restart, rollback, scaling) needs a human.
    changes_system: bool
    # Advice that presumes a change was linked to the anomaly by checked evidence (rollback):
    # never given without one (actions follow from verified claims).
    after_linked_change: bool = False


@dataclass(frozen=True)
class Symptom:
    id: str
    label_zh: str
    query_patterns: tuple[str, ...]  # regexes over the lower-cased query
    metric_keywords: tuple[str, ...]  # substrings of metric names that measure this symptom
    log_keywords: tuple[str, ...]  # lower-case substrings of log messages that report it
    possible_causes_zh: tuple[str, ...]
    actions: tuple[Action, ...]
    # A consequence of many faults (errors, latency) rather than a fault of its own kind: when
    # several symptoms are seen, the specific ones say more about where to look.
    generic: bool = False


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        id="cpu",
        label_zh="CPU 使用率",
        query_patterns=(r"cpu", r"处理器", r"负载", r"\bload\b"),
        metric_keywords=("cpu",),
        log_keywords=("cpu", "throttl"),
        possible_causes_zh=("流量突增或热点请求", "新版本引入的高开销代码路径", "频繁 GC 占用 CPU"),
        actions=(
            Action("用 top -H、jstack 或 pprof 定位 CPU 占用最高的线程与调用栈", False),
            Action("对比异常开始前后的请求量与发布记录", False),
            Action("若确认容量不足，评估扩容或限流", True),
        ),
    ),
    Symptom(
        id="memory",
        label_zh="内存",
        query_patterns=(r"内存", r"memory", r"\boom", r"堆", r"heap", r"泄漏", r"泄露", r"leak"),
        metric_keywords=("memory", "mem_", "heap", "rss"),
        log_keywords=("outofmemory", "oomkilled", "heap space", "full gc", "gc overhead", "oom"),
        possible_causes_zh=("内存泄漏（对象持续累积未释放）", "内存上限配置过小", "缓存或大对象无界增长"),
        actions=(
            Action("导出 heap dump 或内存 profile，分析占用最多的对象", False),
            Action("核对容器内存 limit 与进程堆上限（如 -Xmx）是否匹配", False),
            Action("如需止血，滚动重启实例或临时调高内存上限", True),
        ),
    ),
    Symptom(
        id="errors",
        label_zh="错误/5xx",
        query_patterns=(
            r"5xx", r"\b50[0-4]\b", r"错误", r"报错", r"失败", r"\berrors?\b",
            r"exception", r"error rate",
        ),
        metric_keywords=("5xx", "error", "fail"),
        log_keywords=("error", "exception", "panic", "failed", "失败"),
        possible_causes_zh=("新版本发布引入缺陷", "下游依赖返回异常", "配置变更错误"),
        actions=(
            Action("按接口、实例和版本拆分错误，确认错误集中在哪里", False),
            Action("核对错误开始时间点前后的发布与配置变更", False),
            Action("若确认与新版本相关，按发布流程回滚", True, after_linked_change=True),
        ),
        generic=True,
    ),
    Symptom(
        id="latency",
        label_zh="延迟",
        query_patterns=(
            r"延迟", r"latency", r"\bp9[059]\b", r"慢", r"\bslow\b",
            r"响应时间", r"\brt\b", r"卡顿",
        ),
        metric_keywords=("latency", "duration", "p99", "p95", "response_time"),
        log_keywords=("slow", "慢", "耗时"),
        possible_causes_zh=("资源饱和（CPU、连接池、线程池）", "慢查询或下游依赖变慢", "GC 停顿"),
        actions=(
            Action("按接口查看延迟分布与调用链，定位耗时最长的环节", False),
            Action("检查同一时段的资源饱和指标与慢查询日志", False),
        ),
        generic=True,
    ),
    Symptom(
        id="timeout",
        label_zh="超时",
        query_patterns=(r"超时", r"timeout", r"timed out"),
        metric_keywords=("timeout",),
        log_keywords=("timeout", "timed out", "超时", "deadline exceeded"),
        possible_causes_zh=("下游依赖响应变慢或不可用", "连接池或线程池耗尽", "网络抖动"),
        actions=(
            Action("沿调用链确认超时发生在哪个下游依赖", False),
            Action("核对超时与重试配置，避免重试放大流量", False),
            Action("必要时对异常下游降级或熔断", True),
        ),
    ),
    Symptom(
        id="db_pool",
        label_zh="数据库连接池",
        query_patterns=(r"连接池", r"connection pool", r"hikari", r"数据库连接", r"db pool", r"连接数"),
        metric_keywords=("pool", "connection"),
        log_keywords=("connection is not available", "pool", "连接池", "too many connections"),
        possible_causes_zh=("慢查询长时间占用连接", "连接泄漏（借出后未归还）", "并发突增超过连接池上限"),
        actions=(
            Action("查看数据库活跃会话与慢查询（如 SHOW PROCESSLIST）", False),
            Action("检查连接池配置与连接泄漏检测日志", False),
            Action("如需止血，限流或临时调整连接池上限（需评估数据库承载）", True),
        ),
    ),
    Symptom(
        id="disk",
        label_zh="磁盘",
        query_patterns=(r"磁盘", r"\bdisk", r"inode", r"no space", r"存储空间", r"空间不足"),
        metric_keywords=("disk", "filesystem", "fs_"),
        log_keywords=("no space left", "disk", "磁盘"),
        possible_causes_zh=("日志或临时文件无界增长", "日志轮转或清理任务失效"),
        actions=(
            Action("用 du 定位占用最大的目录与文件", False),
            Action("检查日志轮转与清理策略", False),
            Action("清理或扩容磁盘", True),
        ),
    ),
    Symptom(
        id="queue",
        label_zh="消息队列积压",
        query_patterns=(r"队列", r"积压", r"堆积", r"\blag\b", r"消费", r"kafka", r"\bmq\b", r"backlog"),
        metric_keywords=("queue", "lag", "backlog"),
        log_keywords=("lag", "rebalance", "consumer", "积压"),
        possible_causes_zh=("消费者处理变慢或实例减少", "生产流量突增", "消费者组频繁 rebalance"),
        actions=(
            Action("查看各分区的消费延迟与消费者实例状态", False),
            Action("检查消费者处理耗时与错误日志", False),
            Action("必要时扩容消费者实例", True),
        ),
    ),
    Symptom(
        id="cache",
        label_zh="缓存命中率",
        query_patterns=(r"命中率", r"缓存命中", r"未命中", r"缓存", r"hit ratio", r"hit rate", r"cache hit", r"cache miss"),
        metric_keywords=("cache", "_hit", "hit_", "miss", "evict"),
        log_keywords=("cache miss", "evict", "缓存"),
        possible_causes_zh=("缓存节点重启、扩缩容或预热不足导致冷缓存", "缓存容量不足，淘汰增多", "缓存键或 TTL 配置变更", "访问模式变化（新流量或大范围扫描）"),
        actions=(
            Action("查看缓存的淘汰数、内存占用与节点重启记录", False),
            Action("核对命中率下降前后的缓存配置（TTL、容量、键规则）与发布记录", False),
            Action("若确认容量不足，评估扩容缓存或调整淘汰策略", True),
        ),
    ),
    Symptom(
        id="cert",
        label_zh="证书",
        query_patterns=(r"证书", r"certificate", r"\bssl\b", r"\btls\b", r"x509", r"handshake", r"握手"),
        metric_keywords=("cert", "ssl", "tls"),
        log_keywords=("certificate", "x509", "handshake", "证书"),
        possible_causes_zh=("证书过期或即将过期", "证书链配置不完整"),
        actions=(
            Action("用 openssl s_client 检查证书有效期与证书链", False),
            Action("更新并重新加载证书", True),
        ),
    ),
    Symptom(
        id="restart",
        label_zh="重启/崩溃",
        query_patterns=(r"重启", r"restart", r"crash", r"崩溃", r"挂了", r"宕机"),
        metric_keywords=("restart",),
        log_keywords=("restart", "oomkilled", "crash", "exit code", "back-off"),
        possible_causes_zh=("内存超限被杀（OOMKilled）", "启动探针或存活探针失败", "进程异常退出"),
        actions=(
            Action("查看容器退出码与最近一次退出前的日志", False),
            Action("核对探针与资源限制配置", False),
        ),
    ),
)

SYMPTOMS_BY_ID: dict[str, Symptom] = {symptom.id: symptom for symptom in SYMPTOMS}

# Per symptom, its query patterns as one alternation: it matches where any of them does.
_QUERY_PATTERN = {s.id: re.compile("|".join(f"(?:{p})" for p in s.query_patterns)) for s in SYMPTOMS}


def _query_scan(symptom: Symptom) -> Scan:
    """The symptom's alternation, searched only in a text holding one of its patterns' literal
    parts (ten alternations tried at every position of every text cost more than the substring
    tests); a pattern without a literal part makes the search unconditional."""
    needs = tuple(literal_part(p) for p in symptom.query_patterns)
    return Scan(_QUERY_PATTERN[symptom.id], needs if all(needs) else ("",))


_QUERY_SCAN = {s.id: _query_scan(s) for s in SYMPTOMS}


def find_symptoms(text: str) -> list[str]:
    """Symptom ids mentioned in `text`, in lexicon order, each once."""
    lowered = text.lower()
    return [s.id for s in SYMPTOMS if _QUERY_SCAN[s.id].search(lowered)]


def by_specificity(symptom_ids: list[str]) -> list[str]:
    """The same ids, specific symptoms first (stable otherwise)."""
    return sorted(symptom_ids, key=lambda s: SYMPTOMS_BY_ID[s].generic)


def symptom_terms(text: str, symptom_id: str) -> list[str]:
    """The words of `text` through which it names the symptom (each pattern's first match)."""
    lowered = text.lower()
    terms: list[str] = []
    for pattern in SYMPTOMS_BY_ID[symptom_id].query_patterns:
        match = re.search(pattern, lowered)
        if match and match.group(0).strip() and match.group(0).strip() not in terms:
            terms.append(match.group(0).strip())
    return terms


def symptoms_for_metric(metric: str) -> list[str]:
    name = metric.lower()
    return [s.id for s in SYMPTOMS if any(k in name for k in s.metric_keywords)]


def symptoms_for_log(message: str) -> list[str]:
    lowered = message.lower()
    return [s.id for s in SYMPTOMS if any(k in lowered for k in s.log_keywords)]


# --- metric semantics: what counts as abnormal for a kind of metric -----------------------------


@dataclass(frozen=True)
class MetricProfile:
    kind: str  # utilisation | error_rate | latency | generic, or another kind of the signal semantics
    # A level that is abnormal whatever the baseline (None: judge only relative to the baseline);
    # only for signals whose bad direction is up.
    absolute_threshold: float | None
    # The smallest move the bad way from the baseline worth reporting, in the metric's own unit.
    min_delta: float
    # Which way is bad (`shared/core/signal_semantics.json`): "up" (latency, errors, utilisation)
    # or "down" (hit ratio, availability, success rate, free bytes).
    bad_direction: Direction = "up"


_PERCENT_UNITS = ("percent", "%")


def metric_profile(metric: str, unit: str, semantics: SignalSemantics | None = None,
                   direction: Direction | None = None) -> MetricProfile:
    """What counts as abnormal for `metric`: its kind and bad direction from the signal semantics
    (the configured ones unless given), a `direction` the question states overriding the latter."""
    found = (semantics or configured_signal_semantics()).classify(metric)
    kind = found.kind if found is not None else ""
    bad: Direction = direction or (found.bad if found is not None else "up")
    unit = unit.lower()
    if bad == "down":
        return _fall_profile(kind or "generic", unit)
    if kind == "error_rate":
        if unit in _PERCENT_UNITS:
            return MetricProfile("error_rate", absolute_threshold=5.0, min_delta=0.5)
        if unit == "ratio":  # the same share written as 0..1 (the verifier reads it ×100 as %)
            return MetricProfile("error_rate", absolute_threshold=0.05, min_delta=0.005)
        return MetricProfile("error_rate", absolute_threshold=None, min_delta=1.0)
    if found is not None and found.bad == "down":
        # A fall-bad signal asked about rising: judged relative to its baseline only.
        return MetricProfile(kind, absolute_threshold=None, min_delta=_generic_delta(unit))
    if unit in _PERCENT_UNITS:
        return MetricProfile("utilisation", absolute_threshold=85.0, min_delta=10.0)
    if unit == "ratio" and kind in ("", "utilisation"):
        return MetricProfile("utilisation", absolute_threshold=0.85, min_delta=0.1)
    if unit == "cores":  # CPU seconds per second: a fifth of a core is a rise worth reporting
        return MetricProfile("utilisation", absolute_threshold=None, min_delta=0.2)
    if unit in ("ms", "milliseconds") or kind == "latency":
        return MetricProfile("latency", absolute_threshold=None, min_delta=100.0 if unit == "ms" else 0.1)
    if kind == "utilisation":
        return MetricProfile("utilisation", absolute_threshold=None, min_delta=_generic_delta(unit))
    return MetricProfile("generic", absolute_threshold=None, min_delta=_generic_delta(unit))


def _generic_delta(unit: str) -> float:
    if unit == "bytes":
        return 64 * 1024 * 1024
    if unit == "ratio":
        return 0.05
    if unit in _PERCENT_UNITS:
        return 5.0
    return 2.0


def _fall_profile(kind: str, unit: str) -> MetricProfile:
    """A signal whose fall is the trouble: no absolute level (what is low depends on the estate),
    a fall worth reporting of a few points of a share, 64 MiB of bytes."""
    if unit in _PERCENT_UNITS:
        return MetricProfile(kind, absolute_threshold=None, min_delta=2.0, bad_direction="down")
    if unit == "ratio":
        return MetricProfile(kind, absolute_threshold=None, min_delta=0.02, bad_direction="down")
    if unit == "bytes":
        return MetricProfile(kind, absolute_threshold=None, min_delta=64 * 1024 * 1024, bad_direction="down")
    if unit in ("count", ""):
        return MetricProfile(kind, absolute_threshold=None, min_delta=1.0, bad_direction="down")
    return MetricProfile(kind, absolute_threshold=None, min_delta=0.1, bad_direction="down")


def bad_direction(metric: str, semantics: SignalSemantics | None = None) -> Direction:
    """The direction in which `metric` is bad, from the signal semantics."""
    return (semantics or configured_signal_semantics()).bad_direction(metric)
