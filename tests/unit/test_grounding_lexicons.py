"""The lexicons and extractors of the deterministic grounding checks (shared/core/grounding): number
words, vague quantifiers, hedges, negations, absolutes, exclusions, causal words, key terms and
state-changing actions. A model is assumed to lie; these readers must find what it states, and must
not find anything in what our own honest templates write."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.observed_facts import observed_fact
from services.executor.tools.backends import (
    ChangeQueryResult,
    ChangeRecord,
    KnowledgeChunk,
    KnowledgeDocument,
    LogQueryResult,
    LogRecord,
    MetricSeries,
    ToolBackends,
)
from services.executor.tools.registry import build_default_registry
from shared.core.contracts import Plan, PlannedToolCall, RetrievalDetails, TimeWindow, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.grounding.actions import (
    READ_ONLY_VERBS,
    STATE_CHANGING_ACTIONS,
    needs_confirmation,
    state_changing_verbs,
)
from shared.core.grounding.key_terms import (
    EVENT_DICTIONARY,
    GENERIC_ASCII_WORDS,
    NOUN_DICTIONARY,
    OBSERVATION_VOCABULARY,
    KeyTerm,
    key_terms,
    term_present,
)
from shared.core.grounding.number_words import (
    NUMBER_WORDS,
    VAGUE_QUANTIFIERS,
    WordQuantity,
    cjk_number,
    find_unaccepted_quantities,
    find_vague,
    find_word_quantities,
    normalise,
)
from shared.core.grounding.polarity import (
    ABSOLUTE_QUANTIFIERS,
    HEDGES_ASCII,
    HEDGES_CJK,
    STRONG_NEGATIONS,
    find_absolutes,
    find_causal,
    find_exclusions,
    find_hedges,
    find_negations,
    is_hedged,
)
from shared.core.symptom_lexicon import SYMPTOMS, find_symptoms

# --- number words ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, raw, kind, value, low, high, approx, low_open, high_open",
    [
        ("三成请求失败", "三成", "percent", 30, 30, 30, False, False, False),
        ("约三成请求失败", "约三成", "percent", 30, 25, 35, True, False, False),
        ("使用率约为三成", "约为三成", "percent", 30, 25, 35, True, False, False),
        ("仅约三成", "约三成", "percent", 30, 25, 35, True, False, False),
        ("约占一半", "约占一半", "percent", 50, 45, 55, True, False, False),
        ("近三成", "近三成", "percent", 30, 25, 35, True, False, False),
        ("三成左右", "三成左右", "percent", 30, 25, 35, True, False, False),
        ("三成以上的请求", "三成以上", "percent", 30, 30, 100, False, False, False),
        ("超过三成", "超过三成", "percent", 30, 30, 100, False, True, False),
        ("不到三成", "不到三成", "percent", 30, 0, 30, False, False, True),
        ("三成半", "三成半", "percent", 35, 35, 35, False, False, False),
        ("两成", "两成", "percent", 20, 20, 20, False, False, False),
        ("一半请求超时", "一半", "percent", 50, 50, 50, False, False, False),
        ("半数实例", "半数", "percent", 50, 50, 50, False, False, False),
        ("过半实例重启", "过半", "percent", 50, 50, 100, False, True, False),
        ("超过一半", "超过一半", "percent", 50, 50, 100, False, True, False),
        ("大半请求", "大半", "percent", 50, 50, 100, False, True, False),
        ("不到一半", "不到一半", "percent", 50, 0, 50, False, False, True),
        ("一半以上", "一半以上", "percent", 50, 50, 100, False, False, False),
        ("约一半", "约一半", "percent", 50, 45, 55, True, False, False),
        ("绝大多数请求", "绝大多数", "percent", 90, 90, 100, False, False, False),
        ("少数请求", "少数", "percent", 50, 0, 50, False, False, True),
        ("多半请求失败", "多半", "percent", 50, 50, 100, False, True, False),
        ("百分之三十", "百分之三十", "percent", 30, 30, 30, False, False, False),
        ("百分之30的请求", "百分之30", "percent", 30, 30, 30, False, False, False),
        ("百分之三点五", "百分之三点五", "percent", 3.5, 3.5, 3.5, False, False, False),
        ("约百分之三十", "约百分之三十", "percent", 30, 27, 33, True, False, False),
        ("百分之五十以上", "百分之五十以上", "percent", 50, 50, 100, False, False, False),
        ("四分之一", "四分之一", "percent", 25, 25, 25, False, False, False),
        ("三分之一", "三分之一", "percent", 100 / 3, 33.3, 33.4, False, False, False),
        ("三分之二", "三分之二", "percent", 200 / 3, 66.6, 66.7, False, False, False),
        ("千分之五", "千分之五", "percent", 0.5, 0.5, 0.5, False, False, False),
        ("上升了三个百分点", "三个百分点", "percent", 3, 3, 3, False, False, False),
        ("延迟翻倍", "翻倍", "ratio", 2, 2, 2, False, False, False),
        ("翻了一倍", "翻了一倍", "ratio", 2, 2, 2, False, False, False),
        ("增加一倍", "增加一倍", "ratio", 2, 2, 2, False, False, False),
        ("增加了两倍", "增加了两倍", "ratio", 2, 2, 3, False, False, False),
        ("是平时的两倍", "两倍", "ratio", 2, 2, 2, False, False, False),
        ("三倍", "三倍", "ratio", 3, 3, 3, False, False, False),
        ("十倍", "十倍", "ratio", 10, 10, 10, False, False, False),
        ("2倍", "2倍", "ratio", 2, 2, 2, False, False, False),
        ("1.5 倍", "1.5 倍", "ratio", 1.5, 1.5, 1.5, False, False, False),
        ("翻两番", "翻两番", "ratio", 4, 4, 4, False, False, False),
        ("流量减半", "减半", "ratio", 0.5, 0.5, 0.5, False, False, False),
        ("3x", "3x", "ratio", 3, 3, 3, False, False, False),
        ("latency doubled", "doubled", "ratio", 2, 2, 2, False, False, False),
        ("三十秒", "三十秒", "time", 30_000, 30_000, 30_000, False, False, False),
        ("五分钟", "五分钟", "time", 300_000, 300_000, 300_000, False, False, False),
        ("两个小时", "两个小时", "time", 7_200_000, 7_200_000, 7_200_000, False, False, False),
        ("半小时", "半小时", "time", 1_800_000, 1_800_000, 1_800_000, False, False, False),
        ("一个半小时", "一个半小时", "time", 5_400_000, 5_400_000, 5_400_000, False, False, False),
        ("三十秒内", "三十秒内", "time", 30_000, 0, 30_000, False, False, False),
        ("约三十秒", "约三十秒", "time", 30_000, 27_000, 33_000, True, False, False),
        ("近一小时", "近一小时", "time", 3_600_000, 3_600_000, 3_600_000, False, False, False),  # a window
        ("三点五秒", "三点五秒", "time", 3_500, 3_500, 3_500, False, False, False),
        ("重启了两次", "两次", "count", 2, 2, 2, False, False, False),
        ("三个实例", "三个", "count", 3, 3, 3, False, False, False),
        ("仅一次", "仅一次", "count", 1, 1, 1, False, False, False),
        ("零条", "零条", "count", 0, 0, 0, False, False, False),
        ("一百零五条", "一百零五条", "count", 105, 105, 105, False, False, False),
        ("两三次", "两三次", "count", 2, 2, 3, True, False, False),
        ("三四成", "三四成", "percent", 30, 30, 40, True, False, False),
        ("twice as high", "twice as", "ratio", 2, 2, 2, False, False, False),
        ("three times as many", "three times as", "ratio", 3, 3, 3, False, False, False),
        ("restarted three times", "three times", "count", 3, 3, 3, False, False, False),
        ("more than half of the pods", "more than half", "percent", 50, 50, 100, False, True, False),
    ],
)
def test_number_words_state_the_interval_they_assert(text, raw, kind, value, low, high, approx, low_open, high_open):
    found = find_word_quantities(text)
    assert len(found) == 1, found
    q = found[0]
    assert (q.raw, q.kind, q.approx, q.low_open, q.high_open) == (raw, kind, approx, low_open, high_open)
    assert q.value == pytest.approx(value) and q.low == pytest.approx(low) and q.high == pytest.approx(high)
    assert normalise(text)[q.span[0]:q.span[1]] == q.raw


@pytest.mark.parametrize("text", [
    "出现一次 ERROR 日志",  # 一次: the article
    "有一个实例",
    "配置一成不变",
    "完成了迁移",  # 完成: no numeral
    "三个月前",  # 个月: not a count of 个
    "二次重试",  # an ordinal
    "第三次重启",
    "这十分重要",  # 十分 = very
    "参数十分重要",
    "多半是配置问题",  # 多半是 = probably
    "统一成一个入口",
    "万一失败",
    "CPU 使用率 93.5%",  # digits are the digit extractor's
    "二〇二六年",  # a year, no unit
    "一直正常",
])
def test_words_that_state_no_quantity(text):
    assert find_word_quantities(text) == []


@pytest.mark.parametrize("text, unaccepted", [
    ("十几次", ["十几次"]),
    ("几十次重试", ["几十次"]),
    ("上千条错误日志", ["上千条"]),
    ("延迟升高了数倍", ["数倍"]),
    ("好几倍", ["好几倍"]),
    ("十几分钟", ["十几分钟"]),
    ("出现数千条", ["数千条"]),
    ("成百上千的请求", ["成百上千"]),
    ("三十多次", ["三十多次"]),
    ("10余条", ["10余条"]),
    ("二十来个实例", ["二十来个"]),
    ("一个多小时", ["一个多小时"]),
    ("几分钟后", ["几分钟"]),
    ("hundreds of errors", ["hundreds of"]),
    ("a few thousand requests", ["a few thousand"]),
])
def test_approximate_quantities_are_not_accepted(text, unaccepted):
    assert find_unaccepted_quantities(text) == unaccepted
    assert find_word_quantities(text) == []  # 几十次 is never read as 十次


@pytest.mark.parametrize("text", ["参数十分重要", "次数十分稳定", "有 12 条", "线上百分之三十", "三成以上", "多次", "数据"])
def test_exact_or_non_quantities_are_not_unaccepted(text):
    assert find_unaccepted_quantities(text) == []


def test_cjk_numerals():
    assert [cjk_number(t) for t in ["三十", "十五", "一百零五", "两千", "三万五千", "三点五", "二〇二六", "零"]] == [
        30, 15, 105, 2000, 35000, 3.5, 2026, 0]
    assert cjk_number("两三") is None and cjk_number("几十") is None


def test_an_interval_admits_only_what_it_asserts():
    (over_half,) = find_word_quantities("过半")
    assert not over_half.admits(50) and over_half.admits(50.1) and over_half.admits(100)
    (under_half,) = find_word_quantities("不到一半")
    assert under_half.admits(0) and under_half.admits(49.9) and not under_half.admits(50)
    (thirty,) = find_word_quantities("三成")
    assert thirty.admits(30) and not thirty.admits(33)
    (about,) = find_word_quantities("约三成")
    assert about.admits(33) and not about.admits(36)
    assert isinstance(thirty, WordQuantity)


@pytest.mark.parametrize("text, expected", [
    ("多次出现 ERROR 日志", [("多次", "repeated")]),
    ("频繁 Full GC", [("频繁", "repeated")]),
    ("反复重启", [("反复", "repeated")]),
    ("好几次超时", [("好几次", "repeated")]),
    ("大量超时", [("大量", "many")]),
    ("海量请求", [("海量", "many")]),
    ("少量报错", [("少量", "few")]),
    ("偶尔超时", [("偶尔", "few")]),
    ("延迟明显升高", [("明显", "marked_change")]),
    ("CPU 显著下降", [("显著", "marked_change")]),
    ("流量骤增", [("骤增", "marked_change")]),
    ("请求量大幅增加", [("大幅", "marked_change")]),
    ("latency increased significantly", []),  # the change word comes first: not the pattern
    ("a significant increase in latency", [("significant", "marked_change")]),
    ("errors repeatedly", [("repeatedly", "repeated")]),
    ("lots of timeouts", [("lots of", "many")]),
    ("未见明显升高", []),  # negated
    ("没有大量报错", []),
    ("并不频繁", []),
    ("明显的错误", []),  # no change word: no amount
    ("十多次", []),  # an approximate numeral, not 多次
    ("持续升高", []),  # an absolute, not an amount
    ("no significant increase", []),
    ("参数个数不对", []),  # 数个 inside 参数个数 is no quantifier
    ("several hundred errors", []),  # an unaccepted quantity, not "several"
])
def test_vague_quantifiers_and_their_rules(text, expected):
    assert [(word, rule) for word, rule, _ in find_vague(text)] == expected


def test_vague_rules_are_the_documented_four():
    assert set(VAGUE_QUANTIFIERS.values()) == {"repeated", "many", "few", "marked_change"}
    assert "持续" not in VAGUE_QUANTIFIERS and "一直" not in VAGUE_QUANTIFIERS


def test_text_is_compared_after_nfkc_and_casefold():
    assert normalise("ＥＲＲＯＲ　日志％") == "error 日志%"
    assert [q.raw for q in find_word_quantities("ＴＷＩＣＥ AS high")] == ["twice as"]


# --- hedges ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, hedged", [
    ("可能是 Redis 主节点故障", True),
    ("也许与发布有关", True),
    ("或许是网络抖动", True),
    ("疑似内存泄漏", True),
    ("推测为连接池耗尽", True),
    ("怀疑是证书过期", True),
    ("大概是配置问题", True),
    ("大概率是配置变更", True),
    ("不排除网络抖动", True),
    ("无法排除发布的影响", True),
    ("根因待确认", True),
    ("有待进一步确认", True),
    ("倾向于认为是发布导致", True),
    ("可能性较高", True),
    ("很可能是慢查询", True),
    ("不太可能是缓存导致", True),  # unlikely: a low probability, still a hedge
    ("不是不可能", True),  # not impossible
    ("the deploy may have caused it", True),
    ("possibly a leak", True),
    ("likely the cache", True),
    ("suspected memory leak", True),
    ("这不可能是数据库的问题", False),  # jieba cuts 不 / 可能: a strong negation, not a hedge
    ("这是不可能的", False),
    ("绝不可能", False),
    ("不会是网络问题", False),
    ("连接池耗尽导致超时", False),
    ("功能与性能正常", False),  # 能 inside words, no 可能 token
    ("could not connect to redis", False),
    ("it is not possible", False),
    ("Redis 主节点故障", False),
])
def test_hedges_are_tokens(text, hedged):
    assert is_hedged(text) is hedged, find_hedges(text)


# --- negations -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, kind, cue, obj", [
    ("没有 ERROR 日志", "absence", "没有", "error 日志"),
    ("未发现告警", "absence", "未发现", "告警"),
    ("未见明显升高", "absence", "未见", "明显升高"),
    ("没有出现任何超时", "absence", "没有出现", "超时"),
    ("不存在慢查询", "absence", "不存在", "慢查询"),
    ("无异常", "absence", "无", "异常"),
    ("0 条 ERROR 日志", "absence", "0", "error 日志"),
    ("零错误", "absence", "零", "错误"),
    ("错误数为 0", "absence", "0", "错误"),
    ("no errors in the logs", "absence", "no", "errors"),
    ("errors not found", "absence", "not found", "errors"),
    ("各服务的 CPU 均正常", "health", "正常", "各服务的 cpu"),
    ("一切正常", "health", "正常", ""),
    ("payment-service 运行稳定", "health", "稳定", "payment-service"),
    ("the service is healthy", "health", "healthy", "the service"),
])
def test_negations_state_absence_or_health_with_their_object(text, kind, cue, obj):
    found = find_negations(text)
    assert len(found) == 1, found
    assert (found[0].kind, found[0].cue, found[0].object) == (kind, cue, obj)


@pytest.mark.parametrize("text", [
    "与数据库无关",  # an exclusion
    "和发布没有关系",
    "服务无响应",  # a failure, not an absence
    "连接池无可用连接",
    "无法连接 Redis",
    "有没有 ERROR 日志？",  # a question
    "CPU 不稳定",
    "健康检查失败",
    "正常情况下 P99 应低于 200ms",
    "零星报错",
    "延迟为 0.5 秒",
    "重试间隔为 0 ms",  # a value
    "0 ms 的排队时间",
    "the service is not healthy",
    "abnormal latency",
])
def test_what_is_not_a_negation(text):
    assert find_negations(text) == []


def test_a_parenthesised_zero_restates_its_sentence():
    negations = find_negations("payment-service 在 A 至 B 期间没有变更记录（0 条）。")
    assert [(n.cue, n.object) for n in negations] == [("没有", "变更记录")]


# --- absolutes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, quantifier, predicate, bound", [
    ("所有请求均在 3000ms 内完成", "所有", "内", "3000ms"),
    ("均在 3000ms 内完成", "均", "内", "3000ms"),
    ("CPU 始终低于 80%", "始终", "低于", "80%"),
    ("延迟一直不超过 200ms", "一直", "不超过", "200ms"),
    ("P99 从未超过 3000ms", "从未", "超过", "3000ms"),
    ("均在三十秒以内", "均", "以内", "三十秒以内"),
    ("所有实例在 10:00 至 11:00 期间 CPU 均低于 80%", "所有", "低于", "80%"),  # a clock is no bound
    ("各服务均正常", "均", "正常", None),
    ("全部成功", "全部", "成功", None),
    ("都未见异常", "都", "未见异常", None),
    ("all requests completed within 3s", "all", "within", "3s"),
    ("latency never exceeded 2s", "never", "exceeded", "2s"),
    ("every pod is healthy", "every", "healthy", None),
])
def test_absolutes_with_a_bound_or_a_state(text, quantifier, predicate, bound):
    found = find_absolutes(text)
    assert len(found) == 1, found
    assert (found[0].quantifier, found[0].predicate, found[0].bound) == (quantifier, predicate, bound)


@pytest.mark.parametrize("text", [
    "平均延迟低于 200ms",  # 平均 is no quantifier
    "CPU 和内存都升高了",  # no bound, no state
    "负载均衡正常",
    "每秒 300 次请求",  # a rate
    "持续升高",
])
def test_what_is_not_an_absolute(text):
    assert find_absolutes(text) == []


# --- exclusions and causes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, candidate, other", [
    ("延迟升高与发布无关", "发布", "延迟升高"),
    ("payment-service 的延迟与 db-01.prod 的连接池无关", "db-01.prod 的连接池", "payment-service 的延迟"),
    ("和配置变更没有关系", "配置变更", ""),
    ("与网络无关联", "网络", ""),
    ("不是配置变更导致的", "配置变更", ""),
    ("并非由网络抖动引起", "网络抖动", ""),
    ("非代码缺陷所致", "代码缺陷", ""),
    ("不太可能是缓存导致", "缓存", ""),
    ("不是因为 GC", "gc", ""),
    ("排除了数据库的可能性", "数据库", ""),
    ("已排除磁盘问题", "磁盘问题", ""),
    ("磁盘已被排除", "磁盘", ""),
    ("网络不是根因", "网络", ""),
    ("发布不是本次故障的原因", "发布", ""),
    ("the latency is not related to the deploy", "the deploy", ""),
    ("not caused by redis", "redis", ""),
    ("ruled out the cache", "the cache", ""),
    ("the deploy was ruled out", "the deploy", ""),
])
def test_exclusions_name_the_excluded_candidate(text, candidate, other):
    found = find_exclusions(text)
    assert len(found) == 1, found
    assert (found[0].candidate, found[0].other) == (candidate, other)


@pytest.mark.parametrize("text", ["不排除网络问题", "无法排除发布的影响", "排除故障后服务恢复", "连接池耗尽导致超时",
                                  "非常多的请求导致超时"])
def test_what_is_not_an_exclusion(text):
    assert find_exclusions(text) == []


@pytest.mark.parametrize("text, causal", [
    ("连接池耗尽导致超时", True),
    ("由于发布引入缺陷", True),
    ("根因是慢查询", True),
    ("慢查询是超时的直接原因", True),
    ("超时由 Redis 故障引起", True),
    ("timeouts caused by redis", True),
    ("the root cause is a leak", True),
    ("可能是发布导致的", True),  # hedged, but a causal assertion all the same
    ("不是配置变更导致的", False),  # an exclusion
    ("与发布无关", False),
    ("并非由网络抖动引起", False),
    ("此问题引起注意", False),
    ("CPU 在 10:00 达到 93%", False),
])
def test_causal_assertions_and_exclusions_are_distinct(text, causal):
    assert bool(find_causal(text)) is causal


# --- key terms -------------------------------------------------------------------------------------------

def _terms(text: str) -> set[tuple[str, str]]:
    return {(t.text, t.kind) for t in key_terms(text)}


@pytest.mark.parametrize("text, expected", [
    ("Redis 主节点故障", {("redis", "ascii_word"), ("主节点", "cjk_noun"), ("故障", "event")}),
    ("zhang.wei 回滚了 v2.14.0", {("zhang.wei", "person"), ("回滚", "event"), ("v2.14.0", "version")}),
    ("缓存集群主从切换后连接池耗尽",
     {("缓存集群", "cjk_noun"), ("主从切换", "event"), ("连接池", "cjk_noun"), ("耗尽", "event")}),
    ("db-01.prod 的 HikariPool-1 连接池耗尽",
     {("db-01.prod", "identifier"), ("hikaripool-1", "identifier"), ("连接池", "cjk_noun"), ("耗尽", "event")}),
    ("payment-service 的 cpu_usage_percent 在 2026-11-29T10:00:00Z 达到 93.5%",
     {("payment-service", "identifier"), ("cpu_usage_percent", "identifier")}),
    ("ruleSet=v5 已生效", {("ruleset", "ascii_word"), ("v5", "version")}),
    ("@ops-bot 在 10:35 重启了 pod", {("@ops-bot", "person"), ("重启", "event"), ("pod", "ascii_word")}),
    ("MySQL 慢查询导致数据库连接池耗尽",
     {("mysql", "ascii_word"), ("慢查询", "cjk_noun"), ("数据库连接池", "cjk_noun"), ("耗尽", "event")}),
    ("订单中心宕机", {("订单中心", "cjk_noun"), ("宕机", "event")}),
    ("Kafka consumer group 积压", {("kafka", "ascii_word"), ("consumer group", "ascii_word"), ("积压", "event")}),
    ("the pod was restarted after OOMKilled",
     {("pod", "ascii_word"), ("restarted", "event"), ("oomkilled", "event")}),
    ("java.lang.OutOfMemoryError 导致服务崩溃", {("java.lang.outofmemoryerror", "identifier"), ("崩溃", "event")}),
    ("证书过期", {("证书", "cjk_noun"), ("过期", "event")}),
    ("磁盘写满", {("磁盘", "cjk_noun"), ("写满", "event")}),
    ("10.0.3.12:6379 拒绝连接", {("10.0.3.12:6379", "identifier"), ("拒绝", "event"), ("连接", "cjk_noun")}),
    ("GET /api/v1/pay 返回 503", {("/api/v1/pay", "identifier")}),
    ("scale-out 后恢复", {("scale-out", "event")}),
    ("发布记录显示新版本已发布", {("发布", "event")}),  # 发布记录 names a record, 已发布 an event
    # generic wording only: no key terms
    ("没有 ERROR 日志", set()),
    ("均在 3000ms 内完成", set()),
    ("CPU 使用率与内存均正常，延迟未见明显升高", set()),
    ("大量超时，错误率翻倍", set()),
    ("ERROR/WARN 日志（0 matching lines）", set()),
    ("评估回滚效果后确认；按变更回滚流程处理", set()),  # a procedure, not an occurrence
    ("read-only 的 time-out", set()),
    ("在 11:12（北京时间）达到峰值", set()),
])
def test_key_terms(text, expected):
    assert _terms(text) == expected


@pytest.mark.parametrize("claim, evidence, present", [
    # identifiers: whole names, a pod or domain suffix allowed
    ("payment-service 重启", "payment-service-7f9c restarted", True),
    ("payment-service", "payment-service.prod.svc ok", True),
    ("payment-service", "payment-service2 ok", False),
    ("payment-service", "new-payment-service ok", False),
    ("cpu_usage_percent", "payment-service cpu_usage_percent_total=3", False),
    # versions: v optional when dotted, required when not
    ("v2.14.0", "deploy payment-service 2.14.0 by li.si", True),
    ("2.14.0", "deploy payment-service v2.14.0", True),
    ("v2.14.0", "deploy 2.14.01", False),
    ("v2.14.0", "deploy 12.14.0", False),
    ("v2.14.0", "deploy 2.14.0.1", False),
    ("v5", "ruleSet=v5", True),
    ("v5", "5 errors", False),
    # people
    ("zhang.wei", "2026-11-29T10:02:00Z deploy payment-service by zhang.wei: bump", True),
    ("zhang.wei", "by zhang.weiming", False),
    ("@ops-bot", "triggered by ops-bot", True),
    # ASCII words: whole words, five letters or more also as a word part; dictionary nouns both ways
    ("redis", "Redis master down", True),
    ("redis", "redisson client error", True),  # five letters or more: the start of a word part
    ("redis", "memcached miss", False),
    ("nginx", "nginx-ingress 502", True),
    ("kafka", "KafkaConsumer poll timeout", True),
    ("mysql", "postgres primary", False),
    ("master", "主节点切换", True),
    ("master", "replica lag", False),
    # Chinese nouns: substring, dictionary equivalent, or every dictionary word of a compound
    ("主节点", "redis master down", True),
    ("主节点", "redis replica down", False),
    ("连接池", "HikariPool-1 - Connection is not available", True),
    ("连接池", "thread starvation", False),
    ("缓存集群", "redis cache cluster failover", True),
    ("缓存集群", "redis cache hit ratio", False),
    ("数据库连接池", "db pool exhausted", True),
    ("证书", "x509: certificate has expired", True),
    ("端口", "daily report", False),
    ("端口", "port 6379 refused", True),
    ("订单中心", "订单中心 returned 500", True),
    ("订单中心", "order-center returned 500", False),
    # events: any form of the same entry, in either language
    ("回滚", "kind=rollback service=payment-service", True),
    ("回滚", "rolled back to v1", True),
    ("回滚", "deploy v2", False),
    ("重启", "kube_pod_container_status_restarts_total 3", True),
    ("宕机", "node down", True),
    ("宕机", "downstream timeout", False),
    ("故障", "redis failover after primary failure", True),
    ("restarted", "容器重启 3 次", True),
    ("写满", "no space left on device", True),
    ("oomkilled", "内存溢出", True),
])
def test_term_presence(claim, evidence, present):
    terms = key_terms(claim)
    assert terms, claim
    assert term_present(terms[0], evidence) is present, terms[0]


def test_a_term_never_matches_by_anything_but_the_evidence_text():
    term = KeyTerm("ledger-api", "identifier", (0, 10))
    assert not term_present(term, "")
    assert not term_present(term, "ledger api ledger_api ledgerapi")


def test_key_terms_are_thread_safe_and_stable():
    texts = ["Redis 主节点故障", "缓存集群主从切换", "订单中心的风控引擎宕机", "zhang.wei 回滚了 v2.14.0"]
    expected = [key_terms(t) for t in texts]
    results: list[list] = []

    def worker() -> None:
        results.append([key_terms(t + " ") for t in texts])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all([[t.text for t in r] for r in result] == [[t.text for t in e] for e in expected] for result in results)


# --- honest templates give no key terms beyond their names ---------------------------------------------------

START = datetime(2031, 3, 4, 8, 0, tzinfo=UTC)
END = START + timedelta(minutes=60)


class _Metrics:
    source_name = "fake-metrics"

    def __init__(self, series: dict[str, list[MetricSeries]]) -> None:
        self.series = series

    def query_range(self, service, metric, start, end, step_seconds):
        return [s for s in self.series.get(service, []) if metric in (None, s.metric)]


class _Logs:
    source_name = "fake-logs"

    def __init__(self, records: list[LogRecord]) -> None:
        self.records = records

    def query_range(self, service, start, end, levels, contains, limit):
        hits = [r for r in self.records if r.service == service and (not levels or r.level in levels)
                and (not contains or contains.lower() in r.message.lower())]
        return LogQueryResult(total_matches=len(hits), records=hits[-limit:])


class _Changes:
    source_name = "fake-changes"

    def __init__(self, records: list[ChangeRecord]) -> None:
        self.records = records

    def query_range(self, service, start, end, kind, limit):
        hits = [r for r in self.records if service in (None, r.service) and kind in (None, r.kind)]
        return ChangeQueryResult(total_matches=len(hits), records=hits[-limit:])


class _Knowledge:
    source_name = "fake-knowledge"

    def search(self, query, top_k, chunks_per_doc):
        chunk = KnowledgeChunk(heading="排查步骤", text="## 排查步骤\n- 检查租约客户端的超时配置", score=1.0)
        return [KnowledgeDocument(path="runbooks/lease.md", title="租约超时排查", kind="runbook", score=1.0,
                                  chunks=[chunk])]


def _points(values: list[float]) -> list[tuple[datetime, float]]:
    return [(START + timedelta(minutes=2 * k), v) for k, v in enumerate(values)]


def _registry():
    heap = [41, 40, 42, 41, 40, 43, 41, 42, 40, 41, 55, 68, 79, 88, 93, 95, 94, 96, 95, 96]
    latency = [120, 118, 121, 119, 122, 120, 118, 121, 120, 119, 121, 120, 122, 118, 120, 121, 119, 120, 121, 120]
    metrics = _Metrics({"quill-api": [
        MetricSeries("jvm_heap_used_percent", "percent", _points(heap)),
        MetricSeries("http_server_latency_p99", "ms", _points(latency)),
    ]})
    logs = _Logs([
        LogRecord(START + timedelta(minutes=21 + k), "ERROR", "quill-api", "quill-api-5d8f",
                  "[lease-pool-3] c.q.LeaseClient - Timed out waiting for lease from broker-7 trace_id=ab12")
        for k in range(8)
    ])
    changes = _Changes([ChangeRecord(START + timedelta(minutes=12), "quill-api", "deploy", "mo.ling",
                                     "quill-api v3.1.0 with the new lease client")])
    backends = ToolBackends(metrics=metrics, logs=logs, changes=changes, knowledge=_Knowledge(),
                            clock=lambda: END)
    return build_default_registry(backends)


def _invocations(steps: list[tuple[str, dict]]) -> list[ToolInvocation]:
    registry = _registry()
    invocations = []
    for k, (tool, arguments) in enumerate(steps, start=1):
        result = registry.invoke(tool, arguments)
        invocations.append(ToolInvocation(
            invocation_id=k, run_id="run-t", tool_name=tool, lifecycle="READY",
            evidence_status=result.evidence_status, request=result.request_scope, agent_result=result.agent_result,
            retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()),
        ))
    return invocations


WINDOW = {"start": START.isoformat(), "end": END.isoformat()}
STEPS = [
    ("query_metrics", {"service": "quill-api", **WINDOW}),
    ("query_logs", {"service": "quill-api", "level": ["ERROR", "WARN"], **WINDOW}),
    ("query_changes", {"service": "quill-api", **WINDOW}),
    ("lookup_knowledge", {"query": "租约 超时"}),
    ("query_metrics", {"service": "tern-worker", **WINDOW}),
    ("query_logs", {"service": "tern-worker", "level": "ERROR", **WINDOW}),
    ("query_logs", {"service": "quill-api", "level": "WARN", "contains": "lease", **WINDOW}),
    ("query_changes", {"service": "tern-worker", **WINDOW}),
]


def _ref_texts(invocation: ToolInvocation) -> dict[str, str]:
    return {ref.raw_path: ref.text for ref in evidence_view(invocation).refs()}


def test_honest_claim_templates_state_no_key_term_their_cited_evidence_lacks():
    invocations = _invocations(STEPS)
    by_id = {inv.invocation_id: inv for inv in invocations}
    plan = Plan(services=["quill-api", "tern-worker"], symptoms=["memory"],
                window=TimeWindow(start=WINDOW["start"], end=WINDOW["end"]),
                steps=[PlannedToolCall(tool_name=t, arguments=a) for t, a in STEPS])
    output = EmbeddedExecutorAgent().derive(plan, invocations, "quill-api 和 tern-worker 为什么内存高？")
    kinds = set()
    for claim in output.claims:
        cited = " ".join(_ref_texts(by_id[b.source_invocation_id])[b.raw_path] for b in claim.evidence_bindings)
        for term in key_terms(claim.claim_text):
            assert term_present(term, cited), (claim.claim_text, term, cited)
        kinds.add(claim.claim_type)
    texts = " ".join(c.claim_text for c in output.claims)
    # The scenario exercised the templates it is meant to: an anomaly, a log burst, a change (here
    # linked as a cause: a new kind of error line started after it), negatives.
    assert "达到" in texts and "多次出现" in texts and "变更后才开始出现" in texts and "没有" in texts, texts
    # Beyond the names the tools returned, the templates add no key term of their own.
    names = {"quill-api", "tern-worker", "jvm_heap_used_percent", "http_server_latency_p99", "mo.ling", "v3.1.0",
             "lease-pool-3", "c.q.leaseclient", "broker-7", "deploy", "lease", "client", "timed", "out", "waiting",
             "with", "the", "new"}
    extra = {t.text for c in output.claims for t in key_terms(c.claim_text)} - names
    assert extra == set(), extra


def test_observed_fact_sentences_state_no_key_term_their_record_lacks():
    for invocation in _invocations(STEPS):
        fact = observed_fact(invocation)
        assert fact, invocation.tool_name
        record = " ".join([*_ref_texts(invocation).values(), invocation.agent_result or ""])
        for term in key_terms(fact):
            assert term_present(term, record), (fact, term)
        data = json.loads(invocation.agent_result or "{}")
        if not data.get("hits") and not data.get("series") and not data.get("changes") and not data.get("docs"):
            assert {t.text for t in key_terms(fact)} <= {"quill-api", "tern-worker", "lease"}, fact


@pytest.mark.parametrize("sentence", [
    # the frames of the embedded agent's missing-info, hypothesis and action templates, with made-up names
    "quill-api 的 jvm_heap_used_percent 只有 3 个数据点，不足以判断趋势。",
    "quill-api 的 jvm_heap_used_percent 在窗口起点已处于高位，异常开始时间不在本次时间窗口内，建议扩大窗口。",
    "quill-api 的日志共匹配 300 条，仅返回最近 200 条，更早的日志未纳入分析。",
    "quill-api 的 jvm_heap_used_percent 升高（最早约自 2031-03-04T08:20:00Z 起）与 ERROR 日志「x」（首次出现于 "
    "2031-03-04T08:21:00Z）时间接近，二者可能相关；是否为根因需结合变更记录与代码进一步确认。",
    "quill-api 的变更（2031-03-04T08:12:00Z）发生在 jvm_heap_used_percent 升高（约自 2031-03-04T08:20:00Z 起）前约 8 "
    "分钟，变更可能与异常相关；时间接近不能证明因果，需对照变更内容、错误日志并评估回滚效果后确认。",
    "核对 quill-api 在 2031-03-04T08:12:00Z 的变更内容与异常现象是否相关；确认相关后按变更回滚流程处理。",
    "当前证据未显示异常；如仍有疑虑，请提供告警名称或具体时间点以缩小排查范围。",
    "quill-api 的结果无法解析，未纳入分析。",
    "quill-api 的 http_server_latency_p99 在 2031-03-04T08:00:00Z 至 2031-03-04T09:00:00Z 期间最高为 122ms"
    "（2031-03-04T08:20:00Z），中位数 120ms，未见明显升高。",
])
def test_template_frames_add_only_their_names(sentence):
    names = {"quill-api", "jvm_heap_used_percent", "http_server_latency_p99"}
    assert {t.text for t in key_terms(sentence)} <= names, key_terms(sentence)


# --- actions -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, verbs", [
    ("回滚 payment-service 到 v2.13.0", ["回滚"]),
    ("滚动重启实例", ["滚动重启"]),
    ("清理或扩容磁盘", ["清理", "扩容"]),
    ("删除过期索引", ["删除"]),
    ("清空缓存", ["清空"]),
    ("执行 SQL 修复数据", ["执行 sql", "修复数据"]),
    ("切换流量到备用集群", ["切换流量"]),
    ("主从切换", ["主从切换"]),
    ("修改配置 maxPoolSize", ["修改配置"]),
    ("kill -9 the process", ["kill"]),
    ("restart the pod", ["restart"]),
    ("rolled back the deploy", ["rolled back", "deploy"]),
    ("scaling out the workers", ["scaling out"]),
    ("roll back the release", ["roll back", "release"]),
    ("DROP TABLE tmp_orders", ["drop"]),
    ("无需重启", ["重启"]),  # negation is not honoured: confirmation errs on the safe side
])
def test_state_changing_verbs(text, verbs):
    assert state_changing_verbs(text) == verbs
    assert needs_confirmation(text)


@pytest.mark.parametrize("text", [
    "检查连接池配置与连接泄漏检测日志",
    "查看数据库活跃会话与慢查询",
    "核对 payment-service 的发布记录",
    "对比发布前后的延迟",
    "观察重启次数",
    "排查超时原因并分析调用链",
    "确认告警是否恢复",
    "check the logs and verify the config",
    "查看 OOMKilled 原因",
])
def test_read_only_actions_need_no_confirmation(text):
    assert not needs_confirmation(text), state_changing_verbs(text)


def test_the_symptom_lexicon_actions_agree_with_the_closed_list():
    for symptom in SYMPTOMS:
        for action in symptom.actions:
            assert needs_confirmation(action.text) is action.changes_system, action.text


# --- every entry of every closed list is read as documented ----------------------------------------------

def test_every_list_entry_is_read_as_documented():
    assert all(find_word_quantities(word) for word in NUMBER_WORDS)
    assert all(find_vague(w + (" increase" if w.isascii() else "升高")) for w in VAGUE_QUANTIFIERS)
    assert all(is_hedged(h) for h in HEDGES_CJK) and all(is_hedged(f"it {h} x") for h in HEDGES_ASCII)
    assert not any(is_hedged(n) for n in STRONG_NEGATIONS)
    for quantifier in ABSOLUTE_QUANTIFIERS:
        text = f"all requests {quantifier} normal" if quantifier.isascii() else f"请求{quantifier}正常"
        assert find_absolutes(text), quantifier
    for cjk, english in EVENT_DICTIONARY.values():
        for form in (*cjk, *(e.rstrip("*") for e in english)):
            assert any(t.kind == "event" for t in key_terms(form)), form
    for cjk, _ in NOUN_DICTIONARY.values():
        for form in cjk:
            assert key_terms(form) or form in OBSERVATION_VOCABULARY, form
    assert not any(key_terms(word) for word in OBSERVATION_VOCABULARY)
    assert not any(key_terms(word) for word in GENERIC_ASCII_WORDS)
    assert all(needs_confirmation(action) for action in STATE_CHANGING_ACTIONS)
    assert not any(needs_confirmation(verb) for verb in READ_ONLY_VERBS)


# The literal pieces of every symptom's query patterns, and some filler, joined at random.
_SYMPTOM_PIECES = sorted({piece for s in SYMPTOMS for p in s.query_patterns
                          for piece in re.split(r"\\[bsdw]|[\\^$()?:|*+.\[\]{}<=!]+", p) if piece.strip()})


@given(st.lists(st.sampled_from([*_SYMPTOM_PIECES, " ", "服务", "为什么", "?", "Is ", "ERROR"]), max_size=6)
       .map("".join))
def test_a_symptom_is_found_where_any_of_its_patterns_matches(text: str) -> None:
    lowered = text.lower()
    expected = [s.id for s in SYMPTOMS if any(re.search(p, lowered) for p in s.query_patterns)]
    assert find_symptoms(text) == expected
