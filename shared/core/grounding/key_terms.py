"""Key terms of a sentence — the names, versions, people, nouns and events it states — and whether
each occurs in the cited evidence.

A model that lies about an incident names things: a service that was not queried, a version nobody
deployed, a person, a 主节点 or a 回滚 no tool returned. Every key term of a model-written sentence
must occur in its cited evidence (check `key_term.absent`). What is NOT a key term is the wording
every honest sentence uses to report an observation (服务, 日志, 指标, 期间, 峰值 …), the units,
log levels and metric families that the value and family checks compare, and numbers and times
(checked by value binding). Those words are in the documented lists below; everything else a
sentence names is a key term.

Kinds:
- identifier: a hyphenated, underscored or dotted name (payment-service, db-01.prod,
  cpu_usage_percent, hikaripool-1), a letter+digit name (node3), a path (/api/pay), an IPv4 address.
- version: v2.14.0, 2.14.0 (three or more parts), v5 (a `v` and digits).
- person: a dotted lowercase name (zhang.wei) or an @handle.
- ascii_word: an ASCII word of three or more letters outside GENERIC_ASCII_WORDS (redis, kafka,
  master), or an English noun phrase of NOUN_DICTIONARY (connection pool).
- cjk_noun: a Chinese noun or noun compound (jieba.posseg n, nr, ns, nt, nz, nw, ng, and every
  NOUN_DICTIONARY word whatever jieba tags it) minus OBSERVATION_VOCABULARY; adjacent nouns form
  one compound (缓存集群, 订单中心); a verbal noun (vn) or a single-character noun only joins a
  compound that has a real noun. Person names jieba tags nr (张伟) are cjk_noun too: jieba's nr
  also tags 连接池 and 索引, so it cannot tell people from things.
- event: a word of EVENT_DICTIONARY, in Chinese or English (回滚, restarted, 故障, failover).

Presence (`term_present`) is textual and never consults estate data; text is compared after
NFKC + case folding (`number_words.normalise`).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from dataclasses import dataclass
from types import ModuleType

import jieba

from shared.core.grounding.number_words import find_vague, find_word_quantities, normalise
from shared.text_scan import Scan


@dataclass(frozen=True)
class KeyTerm:
    text: str  # normalised
    kind: str  # identifier | version | person | ascii_word | cjk_noun | event
    span: tuple[int, int]  # in normalise(text)


# --- segmentation (jieba, initialised once, lazily, under a lock) --------------------------------

_lock = threading.Lock()
_posseg: ModuleType | None = None
CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _segmenter() -> ModuleType:
    """jieba.posseg, its dictionary loaded once (about a second) by whichever thread comes first."""
    global _posseg
    if _posseg is None:
        with _lock:
            if _posseg is None:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                import jieba.posseg as posseg  # loads the tag tables: only when first needed

                _posseg = posseg
    return _posseg


def warm_up() -> None:
    """Load the segmenter now (a service calls it in the background at start-up, so that the first
    question does not wait about a second for jieba's dictionary)."""
    _segmenter()


@functools.lru_cache(maxsize=8192)
def segment(run: str) -> tuple[tuple[str, str, int], ...]:
    """(word, part-of-speech flag, offset in `run`) for a run of CJK text. Cached: the key-term and
    hedge readers segment the same runs of the same sentences."""
    words: list[tuple[str, str, int]] = []
    offset = 0
    for pair in _segmenter().cut(run):
        words.append((pair.word, pair.flag, offset))
        offset += len(pair.word)
    return tuple(words)


# --- the lists ---------------------------------------------------------------------------------------

EVENT_DICTIONARY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "回滚": (("回滚", "回退"), ("rollback*", "rolled back", "roll back", "rolling back", "revert*")),
    "重启": (("重启", "重新启动", "重启动"), ("restart*", "reboot*")),
    "扩容": (("扩容",), ("scale out", "scaled out", "scaling out", "scale-out", "scale up", "scaled up",
                       "scaling up", "scale-up", "upscal*")),
    "缩容": (("缩容",), ("scale in", "scaled in", "scaling in", "scale-in", "scale down", "scaled down",
                       "scaling down", "scale-down", "downscal*")),
    "扩缩容": (("扩缩容", "弹性伸缩", "自动伸缩"), ("autoscal*", "scaling", "scaled")),
    "宕机": (("宕机", "挂掉", "挂了"), ("down", "outage*", "crash*", "went down")),
    "故障": (("故障",), ("failure*", "fault*", "outage*", "failed", "down")),
    "崩溃": (("崩溃",), ("crash*", "panic*", "segfault*")),
    "发布": (("发布", "上线", "发版"), ("releas*", "deploy*", "rollout*", "roll out", "rolled out")),
    "部署": (("部署",), ("deploy*",)),
    "下线": (("下线",), ("offline", "decommission*")),
    "停机": (("停机", "关机"), ("shutdown*", "shut down", "powered off")),
    "删除": (("删除", "删掉"), ("delet*", "remov*", "drop table", "drop database", "dropped table")),
    "清空": (("清空", "清除"), ("truncat*", "purg*", "flush*", "wiped")),
    "迁移": (("迁移", "搬迁"), ("migrat*",)),
    "杀掉": (("杀掉", "杀死", "强杀"), ("kill*",)),
    "重平衡": (("重平衡", "再平衡"), ("rebalanc*",)),
    "切换": (("主从切换", "故障转移", "切换", "切主"), ("failover*", "fail over", "failed over", "switchover*",
                                                "switch over", "switched over", "promot*")),
    "熔断": (("熔断",), ("circuit breaker*", "circuitbreaker*", "open circuit", "circuit open", "breaker open")),
    "限流": (("限流",), ("rate limit*", "ratelimit*", "rate-limit*", "throttl*")),
    "降级": (("降级",), ("degrad*", "downgrad*", "fallback*")),
    "升级": (("升级",), ("upgrad*",)),
    "断网": (("断网", "网络分区", "网络中断", "断连"), ("network partition*", "partitioned", "unreachable",
                                            "disconnect*")),
    "中断": (("中断",), ("interrupt*", "disconnect*", "aborted")),
    "脑裂": (("脑裂",), ("split brain", "split-brain")),
    "泄漏": (("泄漏", "泄露"), ("leak*",)),
    "满": (("写满", "打满", "已满", "占满", "用满", "爆满", "满了"), ("full", "no space left")),
    "耗尽": (("耗尽", "用尽", "枯竭", "用完"), ("exhaust*", "depleted")),
    "溢出": (("内存溢出", "栈溢出", "溢出"), ("oom*", "out of memory", "outofmemory*", "overflow*")),
    "过期": (("过期", "到期", "失效"), ("expir*",)),
    "死锁": (("死锁",), ("deadlock*",)),
    "重试": (("重试",), ("retry", "retries", "retried", "retrying")),
    "积压": (("积压", "堆积"), ("backlog*", "lag")),
    "抖动": (("抖动",), ("jitter*", "flap*")),
    "丢包": (("丢包",), ("packet loss", "packets lost", "packet drop*")),
    "驱逐": (("驱逐",), ("evict*",)),
    "拒绝": (("拒绝",), ("refus*", "reject*", "denied")),
    "阻塞": (("阻塞", "卡住"), ("block*", "hung", "stuck")),
}
"""What happened to a system, canonical Chinese word → (Chinese forms, English
forms). An English form ending in `*` is a stem matched at the start of a word or word part
(restart* → restarts, restart_count; crash* → crashloopbackoff); one without is a whole word,
with -s/-es/-ed/-d/-ing. A sentence naming any form states the event; the evidence shows it when
it contains any form of the same entry (either language). An event word followed by one of
_PROCEDURE_SUFFIXES (回滚流程, 发布记录, 评估回滚效果) names a procedure or a record, not an
occurrence, and is no key term."""
_PROCEDURE_SUFFIXES = ("流程", "方案", "计划", "预案", "步骤", "效果", "策略", "脚本", "手册", "记录", "系统", "平台",
                       "工具", "权限", "单")

NOUN_DICTIONARY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "主节点": (("主节点", "主实例", "主服务器"), ("master", "primary", "leader")),
    "主库": (("主库",), ("primary", "master")),
    "从节点": (("从节点", "从实例", "备节点"), ("replica", "slave", "follower", "standby", "secondary")),
    "从库": (("从库", "备库"), ("replica", "slave", "standby", "secondary")),
    "主从": (("主从",), ("master-slave", "primary-replica", "replication")),
    "复制": (("主从复制", "复制"), ("replicat*",)),
    "副本": (("副本",), ("replica",)),
    "缓存": (("缓存",), ("cache",)),
    "集群": (("集群",), ("cluster",)),
    "数据库": (("数据库",), ("database", "db")),
    "连接池": (("连接池",), ("connection pool", "connpool", "pool")),
    "线程池": (("线程池",), ("thread pool", "threadpool", "pool")),
    "磁盘": (("磁盘", "硬盘", "云盘"), ("disk", "volume", "pvc")),
    "内存": (("内存", "堆内存"), ("memory", "heap", "mem", "rss")),
    "队列": (("队列", "消息队列"), ("queue", "mq")),
    "消息": (("消息",), ("message", "msg")),
    "节点": (("节点",), ("node",)),
    "实例": (("实例",), ("instance", "pod")),
    "容器": (("容器",), ("container",)),
    "主机": (("主机", "机器", "服务器", "宿主机"), ("host", "server", "machine", "vm")),
    "证书": (("证书",), ("certificate", "cert", "tls", "ssl", "x509")),
    "配置": (("配置",), ("config", "configuration", "setting")),
    "索引": (("索引",), ("index", "indices")),
    "网关": (("网关",), ("gateway",)),
    "负载均衡": (("负载均衡器", "负载均衡"), ("load balancer", "loadbalancer", "lb", "slb", "elb", "alb", "nlb")),
    "分区": (("分区",), ("partition", "shard")),
    "分片": (("分片",), ("shard", "partition")),
    "消费者组": (("消费者组", "消费组"), ("consumer group", "consumergroup")),
    "消费者": (("消费者",), ("consumer",)),
    "生产者": (("生产者",), ("producer",)),
    "主题": (("主题",), ("topic",)),
    "连接": (("连接",), ("connection", "conn", "connect")),
    "线程": (("线程",), ("thread",)),
    "进程": (("进程",), ("process", "pid")),
    "慢查询": (("慢查询",), ("slow query", "slow queries", "slowlog", "slow_query", "slow sql")),
    "事务": (("事务",), ("transaction", "txn", "tx")),
    "锁": (("锁", "行锁", "表锁"), ("lock=",)),
    "会话": (("会话",), ("session",)),
    "端口": (("端口",), ("port=",)),
    "域名": (("域名", "域名解析"), ("dns", "domain", "hostname")),
    "带宽": (("带宽",), ("bandwidth",)),
    "网络": (("网络",), ("network", "net")),
    "镜像": (("镜像",), ("image",)),
    "探针": (("探针", "存活探针", "就绪探针"), ("probe", "liveness", "readiness")),
    "健康检查": (("健康检查",), ("health check", "healthcheck", "probe")),
    "注册中心": (("注册中心",), ("registry", "service discovery")),
    "配置中心": (("配置中心",), ("config center", "config server")),
    "存储": (("存储",), ("storage",)),
    "接口": (("接口",), ("api", "endpoint", "interface")),
    "下游": (("下游",), ("downstream",)),
    "上游": (("上游",), ("upstream",)),
    "数据源": (("数据源",), ("datasource", "data source")),
}
"""Common infrastructure nouns, canonical Chinese word → (Chinese forms, English
forms). Used both ways: a Chinese noun is present when the evidence holds any English form (and
an English noun such as `master` when it holds a Chinese form), and a compound jieba did not
split (缓存集群, 数据库连接池) is cut into these words. English forms of four letters or more
also match as the start or end of a word part (pool in HikariPool, cache in rediscache); shorter
ones, and those marked `=` (port, lock: report, block), only as whole words or delimited parts."""

OBSERVATION_VOCABULARY: frozenset[str] = frozenset("""
陈述 工具 工具调用 人工 人工确认 确认 调整 修改 优化 检查 查看 核对 临时 上限 下限 大小 日志 指标 证据 数据 数据点 记录 变更记录 结果 查询 检索 知识库 文档 参考文档 参考 排查 分析 评估 调用 解析 监控 告警 报警 事件
序列 指标序列 样本 采样 数值 值 峰值 谷值 均值 平均值 平均 中位数 最大值 最小值 最高值 最低值 总数 数量 次数 条数 个数 比例 占比
百分比 趋势 变化 波动 幅度 基线 阈值 水位 水平 高位 低位 范围 区间 规则 级别 日志级别 字段 关键字 内容 文本 摘要 命中 匹配 新结果
期间 窗口 时间 时间点 时刻 时段 时间段 时间窗口 查询窗口 起点 终点 开始 结束 前段 后段 前期 后期 此前 之前 之后 当前 目前 最近
本次 今天 昨天 凌晨 上午 下午 晚上 分钟 小时 毫秒 北京时间 东八区 本地时间 当地时间 时区 协调世界时 异常开始 开始时间 结束时间 首次 最早 最晚
服务 服务名 系统 应用 程序 组件 模块 平台 环境 版本 新版本 旧版本 版本号 对象 名称 情况 问题 现象 异常现象 状态 状态码 信息 详情
细节 原因 根因 根本原因 常见原因 因素 影响 效果 流程 步骤 方法 建议 措施 操作 处理 代码 二者 两者 双方 部分 全部 所有 其他 其它
相关 相关性 关系 关联 依赖 生效 无法 手动 自动 执行人 用户 请求 请求量 调用量 流量 吞吐 吞吐量 并发 并发量 访问量 证明 对应 依据 结论 判断 假设
可能性 健康 健康状态 正常 稳定 稳定性 因果 时间接近 排查范围 排查步骤 处置 处置方法 止血 运行手册 手册 团队 人员 同事 值班
错误 报错 异常 失败 超时 延迟 时延 耗时 响应时间 响应 内存 堆内存 使用率 利用率 占用率 错误率 成功率 失败率 处理器 垃圾回收 负载 压力
性能 容量 资源 资源使用 速率 频率 吞吐率 命中率 延时 卡顿 瓶颈
""".split())
"""Chinese words that describe observing, not facts — what every honest
sentence about a tool result says (…在 T1 至 T2 期间的指标数据, 多次出现 ERROR 日志, 执行人,
中位数, 高于窗口前段的 …), generic referents (服务, 版本, 系统, 问题), the metric families the
family check compares (错误, 延迟, 超时, 内存, 使用率), and the polarity vocabulary the polarity
checks read (原因, 根因, 关系, 健康). None of them is ever a key term; inside a compound they
separate nouns (服务 is dropped from 缓存服务, leaving 缓存). Built from what the embedded agent's
claim, hypothesis and action templates and the observed-fact sentences write themselves
(services/executor/embedded_*.py, observed_facts.py); tests hold that."""

GENERIC_ASCII_WORDS: frozenset[str] = frozenset("""
ms msec sec secs second seconds min mins minute minutes hour hours hrs day days week weeks month months year years
kb kib mb mib gb gib tb tib byte bytes bit bits percent pct qps rps tps req reqs ops iops
trace debug info information notice warn warning warnings error errors err fatal critical crit severe alert alerts
emerg emergency
http https get post put patch head options status code codes request requests response responses header headers
body url uri api method path client server
the and for with from into onto that this these those was were are is been being has have had not but any some its
per via than then also only more most less least very just over under after before during since until while when
where which what who whom whose why how there here each every both either neither none nor our your their they them
you can could should would will shall may might must does did done about above below between within without across
again same other such own out off yes all one two three four five six seven eight nine ten first last next
cpu cpus memory mem heap rss latency latencies duration durations timeout timeouts usage used utilization
utilisation util rate rates ratio count counts total sum avg average mean median max maximum min minimum value values
metric metrics series point points sample samples gauge counter histogram bucket buckets quantile percentile
throughput traffic load level levels gc
today yesterday tomorrow now ago recent recently utc gmt cst time times timestamp date window start end begin
jan feb mar apr jun jul aug sep sept oct nov dec january february march april june july august september october
november december monday tuesday wednesday thursday friday saturday sunday
log logs line lines hit hits match matches matching matched record records change changes summary result results
query queries data evidence service services found observed observation shows showed show reached peak peaked
higher lower high low increase increased increasing decrease decreased decreasing rise rose rising fell falling
normal abnormal anomaly anomalies anomalous issue issues problem problems incident healthy stable unstable
likely probably possibly possible perhaps maybe suspected suspect seems seem appears unclear uncertain unconfirmed
unlikely potential potentially presumably cause caused causes because due root reason related unrelated ruled
never always consistently constantly throughout entire whole
read write only real built non pre multi auto self sub via new old bad good
""".split())
"""English words that are never key terms: units, log levels, HTTP words,
English function words, metric-family words (checked by the family comparison), time words, the
words of the tools' own record formats (`0 matching lines`, `n points, min=…, median=…`), and the
polarity and hedge words the polarity checks read."""
# Letter+digit tokens that are units or metric words, never names.
_GENERIC_MIXED = frozenset("p50 p90 p95 p99 p999 p9999 2xx 3xx 4xx 5xx ipv4 ipv6 http2 http3 utf8 utf16 base64 "
                           "sha1 sha256 md5 x86 x64 arm64 amd64 1xx".split())
_NOUN_FLAGS = frozenset({"n", "nr", "nrfg", "nrt", "ns", "nt", "nz", "nw", "ng"})
# Verbal nouns (vn: 生效, 排查, 重试 …) name an activity more often than a thing: they only join a
# compound that has a noun (风控引擎), never stand alone.
_VERBAL_NOUN_FLAGS = frozenset({"vn"})
_ATTACHABLE_FLAGS = frozenset({"n", "ng", "b", "nr", "nz"})  # single characters that only join a compound
_FILE_OR_DOMAIN = frozenset("yaml yml json log txt conf cfg xml properties sql py java go js ts md csv ini toml sh "
                            "jar war tar zip gz html key pem crt com org net io cn local internal svc cluster dev "
                            "prod test".split())


# --- lexicon indexes ---------------------------------------------------------------------------------

def _forms_index(dictionary: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for canonical, (cjk, english) in dictionary.items():
        for form in (*cjk, *(e.rstrip("*=") for e in english)):
            index.setdefault(form, []).append(canonical)
    return index


_EVENT_OF = _forms_index(EVENT_DICTIONARY)
_NOUN_OF = _forms_index(NOUN_DICTIONARY)
_EVENT_CJK = sorted({f for cjk, _ in EVENT_DICTIONARY.values() for f in cjk}, key=len, reverse=True)
_NOUN_CJK = sorted({f for cjk, _ in NOUN_DICTIONARY.values() for f in cjk}, key=len, reverse=True)
_VOCAB_MULTI = sorted((w for w in OBSERVATION_VOCABULARY if len(w) > 1), key=len, reverse=True)


def _english_pattern(form: str, nouns: bool) -> str:
    """The regex for one English form (see the dictionaries' docstrings for the rules)."""
    whole = form.endswith("=")
    stem = form.endswith("*")
    word = re.escape(form.rstrip("*="))
    if stem:
        return rf"(?<![a-z]){word}"
    if nouns and not whole and len(form) >= 4 and " " not in form:
        return rf"(?<![a-z]){word}|{word}(?![a-z])"  # the start or the end of a word part
    return rf"(?<![a-z]){word}(?:s|es|ed|d|ing)?(?![a-z])"


@functools.cache
def _entry_pattern(dictionary_name: str, canonical: str) -> re.Pattern[str]:
    dictionary = EVENT_DICTIONARY if dictionary_name == "event" else NOUN_DICTIONARY
    cjk, english = dictionary[canonical]
    parts = [re.escape(f) for f in cjk] + [_english_pattern(e, dictionary_name == "noun") for e in english]
    return re.compile("|".join(parts))


@functools.cache
def _entry_scan(dictionary_name: str, canonical: str) -> Scan:
    """The entry's pattern, tried only where one of its forms occurs: every alternative of
    `_entry_pattern` holds one form literally (a CJK form, or an English form without its `*`/`=`
    marker), and a search over a run's whole evidence is costly."""
    dictionary = EVENT_DICTIONARY if dictionary_name == "event" else NOUN_DICTIONARY
    cjk, english = dictionary[canonical]
    return Scan(_entry_pattern(dictionary_name, canonical), (*cjk, *(e.rstrip("*=") for e in english)))


_ENGLISH_EVENT_FORMS = sorted({e for _, english in EVENT_DICTIONARY.values() for e in english}, key=len, reverse=True)
# Every form starts after a non-letter: that is asked once, before the forms are tried in order (one
# lookbehind per form made the engine try each form at every position).
_EVENT_ENGLISH = re.compile("(?<![a-z])(?:" + "|".join(
    rf"{re.escape(e.rstrip('*'))}[a-z]*" if e.endswith("*")
    else rf"{re.escape(e)}(?:s|es|ed|d|ing)?(?![a-z])"
    for e in _ENGLISH_EVENT_FORMS
) + ")")
_NOUN_PHRASES = sorted({e for _, english in NOUN_DICTIONARY.values() for e in english if " " in e}, key=len,
                       reverse=True)
_NOUN_PHRASE = re.compile("|".join(rf"(?<![a-z]){re.escape(p)}(?![a-z])" for p in _NOUN_PHRASES))
_CJK_FORCED = re.compile("|".join(re.escape(w) for w in sorted({*_EVENT_CJK, *_NOUN_CJK, *_VOCAB_MULTI}, key=len,
                                                                  reverse=True)))
_PROCEDURE = re.compile("|".join(_PROCEDURE_SUFFIXES))
_NOUN_CJK_PATTERN = re.compile("|".join(re.escape(w) for w in _NOUN_CJK))


def event_of(form: str) -> list[str]:
    """The canonical events a (normalised) form names: `restarted` → [重启]."""
    return list(_events_of(form))


@functools.lru_cache(maxsize=8192)
def _events_of(form: str) -> tuple[str, ...]:
    """Kept per form: the key-term reader asks for every ASCII token and the presence check for
    every event term, and a miss tries every English form of the dictionary."""
    form = normalise(form)
    if form in _EVENT_OF:
        return tuple(_EVENT_OF[form])
    return tuple(c for c, (_, english) in EVENT_DICTIONARY.items()
                 if any(_english_event_form(e).fullmatch(form) for e in english))


@functools.cache
def _english_event_form(form: str) -> re.Pattern[str]:
    word = re.escape(form.rstrip("*"))
    return re.compile(rf"{word}[a-z]*" if form.endswith("*") else rf"{word}(?:s|es|ed|d|ing)?")


# --- extraction --------------------------------------------------------------------------------------

_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[t ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?")
_CLOCK = re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?![\d:])")
_ASCII_TOKEN = re.compile(r"(?<![a-z0-9_.:/@+\-])[/@]?[a-z0-9_][a-z0-9_.:/@+\-]*")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?")
_VERSION = re.compile(r"v\d+(?:\.\d+)*(?:[-+][a-z0-9.]+)?|\d+\.\d+\.\d+(?:\.\d+)?(?:[-+][a-z0-9.]+)?")
_NUMBERISH = re.compile(r"[\d.,]+(?:[a-z%]{0,5}|/s)")
_PERSON = re.compile(r"[a-z]{2,}\.([a-z]{2,})")
_HANDLE = re.compile(r"@[a-z0-9_][a-z0-9_.\-]*")


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _ascii_token_terms(token: str, start: int, out: list[KeyTerm]) -> None:
    token_end = len(token.rstrip(".:/-+@"))
    token = token[:token_end]
    if not token:
        return
    span = (start, start + len(token))
    if token.startswith("@"):
        if _HANDLE.fullmatch(token):
            out.append(KeyTerm(token, "person", span))
        return
    if _IPV4.fullmatch(token):
        out.append(KeyTerm(token, "identifier", span))
        return
    if "://" in token or (token.startswith("/") and token.count("/") >= 2):
        out.append(KeyTerm(token, "identifier", span))
        return
    for separator in ("/", ":"):
        if separator in token:
            offset = 0
            for part in token.split(separator):
                if part:
                    _ascii_token_terms(part, start + offset, out)
                offset += len(part) + 1
            return
    if _VERSION.fullmatch(token):
        out.append(KeyTerm(token, "version", span))
        return
    if _NUMBERISH.fullmatch(token) or not re.search(r"[a-z]", token):
        return  # a number with or without a unit: the value checks' business
    person = _PERSON.fullmatch(token)
    if person is not None and person.group(1) not in _FILE_OR_DOMAIN:
        out.append(KeyTerm(token, "person", span))
        return
    if re.search(r"[-_.]", token):
        parts = [p for p in re.split(r"[-_.]", token) if p]
        spaced = " ".join(parts)
        if "-" in token and all(p.isalpha() for p in parts):
            if _events_of(spaced) or _events_of(token):
                out.append(KeyTerm(token, "event", span))
                return
            if all(p in GENERIC_ASCII_WORDS or len(p) < 3 for p in parts):
                return  # time-out, read-only: generic words joined
        out.append(KeyTerm(token, "identifier", span))
        return
    if re.search(r"\d", token):
        if token not in _GENERIC_MIXED and len(token) >= 3:
            out.append(KeyTerm(token, "identifier", span))
        return
    if len(token) < 3:
        return
    if _events_of(token):
        out.append(KeyTerm(token, "event", span))
    elif token not in GENERIC_ASCII_WORDS:
        out.append(KeyTerm(token, "ascii_word", span))


def _cjk_terms(run: str, base: int, out: list[KeyTerm]) -> None:
    """Events, dictionary nouns and jieba nouns of one CJK run; adjacent nouns form one compound."""
    tokens: list[tuple[str, str, int]] = []  # (word, class or POS flag, offset in run)
    position = 0
    for m in _CJK_FORCED.finditer(run):
        if m.start() > position:
            tokens += [(w, f, position + o) for w, f, o in segment(run[position:m.start()])]
        word = m.group(0)
        if word in OBSERVATION_VOCABULARY:
            cls = "generic"
        elif word in _EVENT_OF:
            cls = "generic" if _PROCEDURE.match(run, m.end()) else "event"
        else:
            cls = "dict"
        tokens.append((word, cls, m.start()))
        position = m.end()
    if position < len(run):
        tokens += [(w, f, position + o) for w, f, o in segment(run[position:])]

    compound: list[tuple[str, str, int]] = []

    def flush() -> None:
        if any(cls == "dict" or (cls == "noun" and len(word) > 1) for word, cls, _ in compound):
            first, last = compound[0], compound[-1]
            start, end = base + first[2], base + last[2] + len(last[0])
            out.append(KeyTerm(run[first[2]: last[2] + len(last[0])], "cjk_noun", (start, end)))
        compound.clear()

    for word, cls, offset in tokens:
        if cls == "event":
            flush()
            out.append(KeyTerm(word, "event", (base + offset, base + offset + len(word))))
        elif cls == "dict" or (cls in _NOUN_FLAGS and len(word) > 1 and word not in OBSERVATION_VOCABULARY):
            compound.append((word, "dict" if cls == "dict" else "noun", offset))
        elif cls in _VERBAL_NOUN_FLAGS and word not in OBSERVATION_VOCABULARY:
            compound.append((word, "attached", offset))
        elif cls in _ATTACHABLE_FLAGS and len(word) == 1 and word not in OBSERVATION_VOCABULARY:
            compound.append((word, "attached", offset))
        else:
            flush()
    flush()


def key_terms(text: str) -> list[KeyTerm]:
    """The key terms of `text`, first occurrence of each (kind, text), in text order."""
    return list(_key_terms(normalise(text)))


@functools.lru_cache(maxsize=4096)
def _key_terms(normal: str) -> tuple[KeyTerm, ...]:
    work = normal
    found: list[KeyTerm] = []
    for pattern in (_DATETIME, _CLOCK):
        for m in pattern.finditer(work):
            work = _blank(work, *m.span())
    # Number words and vague quantifiers are checked by their own rules, never as nouns.
    for quantity in find_word_quantities(work):
        work = _blank(work, *quantity.span)
    for _, _, span in find_vague(work):
        work = _blank(work, *span)
    for m in _NOUN_PHRASE.finditer(work):
        found.append(KeyTerm(m.group(0), "ascii_word", m.span()))
        work = _blank(work, *m.span())
    for m in _EVENT_ENGLISH.finditer(work):
        if " " in m.group(0):  # multi-word forms first (rolled back, scale out); single words below
            found.append(KeyTerm(m.group(0), "event", m.span()))
            work = _blank(work, *m.span())
    for m in _ASCII_TOKEN.finditer(work):
        _ascii_token_terms(m.group(0), m.start(), found)
    for m in CJK_RUN.finditer(work):
        _cjk_terms(m.group(0), m.start(), found)
    seen: set[tuple[str, str]] = set()
    unique: list[KeyTerm] = []
    for term in sorted(found, key=lambda t: t.span):
        if (term.kind, term.text) not in seen:
            seen.add((term.kind, term.text))
            unique.append(term)
    return tuple(unique)


# --- presence ------------------------------------------------------------------------------------------

_A = "a-z0-9_"


@functools.lru_cache(maxsize=256)
def _normal_evidence(evidence_text: str) -> str:
    return normalise(evidence_text)


def _whole_name(name: str, evidence: str) -> bool:
    """As `claim_features.entity_present`: not part of a longer name; a pod suffix such as `-7f9c`
    (or a domain such as `.prod`) may follow."""
    if name not in evidence:  # the pattern matches the name literally
        return False
    return re.search(rf"(?<![{_A}-]){re.escape(name)}(?![{_A}])", evidence) is not None


def _version_present(version: str, evidence: str) -> bool:
    bare = version[1:] if version.startswith("v") else version
    if bare not in evidence:  # either pattern matches the bare version literally
        return False
    if "." not in bare:  # v5 needs its v (a bare 5 is any number)
        return re.search(rf"(?<![{_A}.])v{re.escape(bare)}(?![0-9]|\.[0-9])", evidence) is not None
    return re.search(rf"(?<![{_A}.])v?{re.escape(bare)}(?![0-9]|\.[0-9])", evidence) is not None


def _entry_present(dictionary_name: str, canonical: str, evidence: str) -> bool:
    return _entry_scan(dictionary_name, canonical).search(evidence) is not None


def _cjk_parts(text: str) -> list[tuple[str, bool]]:
    """A compound cut into dictionary nouns (True) and the words between them (False)."""
    parts: list[tuple[str, bool]] = []
    position = 0
    for m in _NOUN_CJK_PATTERN.finditer(text):
        if m.start() > position:
            parts += [(w, False) for w, _, _ in segment(text[position:m.start()])]
        parts.append((m.group(0), True))
        position = m.end()
    if position < len(text):
        parts += [(w, False) for w, _, _ in segment(text[position:])]
    return parts


def _noun_present(text: str, evidence: str) -> bool:
    if text in evidence:
        return True
    if any(_entry_present("noun", c, evidence) for c in _NOUN_OF.get(text, ())):
        return True
    parts = _cjk_parts(text)
    if len(parts) < 2 or not any(is_dict for _, is_dict in parts):
        return False
    for word, is_dict in parts:
        if is_dict:
            if not any(_entry_present("noun", c, evidence) for c in _NOUN_OF[word]):
                return False
        elif len(word) > 1 and word not in OBSERVATION_VOCABULARY and word not in evidence:
            return False
    return True


def term_present(term: KeyTerm, evidence_text: str) -> bool:
    """The term occurs in the evidence: identifiers and people as whole names, versions with or
    without `v`, English words as whole words, Chinese nouns as a substring, and dictionary nouns
    and events by any of their forms in either language; a compound the dictionary cuts
    (缓存集群 → 缓存 + 集群) when each of its words does."""
    evidence = _normal_evidence(evidence_text)
    text = normalise(term.text)
    if term.kind == "version":
        return _version_present(text, evidence)
    if term.kind in ("identifier", "person"):
        if text.startswith("@"):
            return _whole_name(text, evidence) or _whole_name(text[1:], evidence)
        return _whole_name(text, evidence)
    if term.kind == "event":
        canonicals = _events_of(text)
        if not canonicals:
            return text in evidence
        return any(_entry_present("event", c, evidence) for c in canonicals)
    if term.kind == "ascii_word":
        # Five letters or more may be the start or end of a word part (kafka in kafkaconsumer).
        pattern = (rf"(?<![a-z]){re.escape(text)}|{re.escape(text)}(?![a-z])" if len(text) >= 5 and " " not in text
                   else rf"(?<![a-z]){re.escape(text)}(?![a-z])")
        if text in evidence and re.search(pattern, evidence):  # the pattern matches the word literally
            return True
        return any(_entry_present("noun", c, evidence) for c in _NOUN_OF.get(text, ()))
    return _noun_present(text, evidence)
