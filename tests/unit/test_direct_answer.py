"""The first line answers the question: question kinds and the decision table."""

from __future__ import annotations

import pytest

from shared.core.direct_answer import (
    ABNORMAL,
    CAUSE,
    CHANGE,
    NORMAL,
    OPENINGS,
    first_line,
    make_finding,
)
from shared.core.question_intent import classify_question


@pytest.mark.parametrize(
    ("query", "kind", "symptoms"),
    [
        ("为什么 billing-core 的 CPU 这么高？", "why", ()),
        ("queue-relay 消息积压越来越多，为什么？", "why", ()),
        ("checkout-api 最近一小时正常吗？", "health", ()),
        ("checkout-api 最近一小时有报错吗？", "health", ()),
        ("stock-svc 最近半小时情况怎么样？", "health", ()),
        ("Is stock-svc healthy over the last 30 minutes?", "health", ()),
        ("fx-rates 最近一小时正常吗？有没有积压？", "health", ()),
        ("cart-api 报错很多，是数据库连接池的问题吗？", "yes_no", ("db_pool",)),
        ("cart-api 上传一直失败，是不是磁盘满了？", "yes_no", ("disk",)),
        ("cart-api 报错是不是因为磁盘满了？", "yes_no", ("disk",)),
        ("cart-api 是不是内存泄漏了？", "yes_no", ("memory",)),
        ("cart-api 最近一小时的错误日志说了什么？", "what", ()),
    ],
)
def test_the_kind_and_hypothesis_are_read_from_the_wording(query, kind, symptoms):
    intent = classify_question(query)
    assert intent.kind == kind
    assert intent.hypothesis_symptoms[: len(symptoms)] == symptoms


def test_a_question_linking_two_services_has_them_as_its_hypothesis():
    intent = classify_question("cart-api 和 front-gw 的错误是同一个问题吗？")
    assert intent.kind == "yes_no"
    assert intent.hypothesis_services == ("front-gw",)


POOL_HIGH = make_finding("cart-api 的 db_pool_active_connections 在 T2 达到 50。", " [证据: q #1]", ABNORMAL, True)
POOL_QUIET = make_finding("cart-api 的 db_pool_active_connections 在 T0 至 T9 期间最高为 12，中位数 10。", " [证据: q #2]",
                          NORMAL, True)
DISK_QUIET = make_finding("cart-api 的 fs_avail_bytes 在 T0 至 T9 期间最高为 40 GB，中位数 39 GB。", " [证据: q #3]",
                          NORMAL, True)
ERRORS = make_finding("cart-api 在 T1 至 T9 期间多次出现 ERROR 日志：「render failed: font dir missing」。", " [证据: l #4]",
                      ABNORMAL, True)


def test_yes_when_the_hypothesis_signal_is_verified_abnormal():
    intent = classify_question("cart-api 报错很多，是数据库连接池的问题吗？")
    line = first_line(intent, "", [ERRORS, POOL_HIGH], "PASS")
    assert line.startswith("是：数据库连接池有已核实的异常——") and "db_pool_active_connections" in line
    assert line.endswith("[证据: q #1]")


def test_metric_names_are_read_outside_quoted_evidence():
    finding = make_finding("cart-api 的 p99_latency_ms 升高，日志：「pool waited_s=30 No space left on device」", "", ABNORMAL, True)
    assert finding.metrics == ("p99_latency_ms",)
    assert "disk" in finding.symptoms, "quoted log text still tells what the finding is about"


def test_under_reject_nothing_is_denied_either():
    health = classify_question("cart-api 最近一小时正常吗？")
    assert first_line(health, "", [POOL_QUIET], "REJECT").startswith("无法确认：")
    disk = classify_question("cart-api 报错是不是因为磁盘满了？")
    assert first_line(disk, "", [DISK_QUIET], "REJECT").startswith("无法确认：")


def test_unconfirmed_anomalies_are_counted_after_nothing_found():
    intent = classify_question("cart-api 最近一小时正常吗？")
    unconfirmed = make_finding("cart-api 的 heap_used_bytes 在 T2 达到 9 GB。", "", ABNORMAL, False)
    line = first_line(intent, "", [POOL_QUIET, unconfirmed], "LOW_CONFID", scope="cart-api")
    assert line == "在所查范围内未发现异常（cart-api）；另有 1 项异常说法未能核实，见【证据缺口】"
    assert "heap_used_bytes" not in line


def test_never_yes_under_reject():
    intent = classify_question("cart-api 报错很多，是数据库连接池的问题吗？")
    assert first_line(intent, "", [POOL_HIGH], "REJECT").startswith("无法确认：")


def test_not_supported_when_the_signal_is_verified_normal_and_names_it():
    intent = classify_question("cart-api 报错是不是因为磁盘满了？")
    line = first_line(intent, "", [ERRORS, DISK_QUIET], "PASS")
    assert line.startswith("证据不支持：") and "fs_avail_bytes 正常" in line and "[证据: q #3]" in line


def test_unknown_when_the_signal_was_not_checked_or_not_confirmed():
    intent = classify_question("cart-api 是不是内存泄漏了？")
    assert first_line(intent, "", [ERRORS], "PASS").startswith("无法确认：")
    unconfirmed = make_finding("cart-api 的 heap_used_bytes 在 T2 达到 9 GB。", "", ABNORMAL, False)
    assert first_line(intent, "", [unconfirmed], "LOW_CONFID").startswith("无法确认：")


def test_why_names_a_confirmed_cause_else_says_it_is_unconfirmed_with_the_lead():
    intent = classify_question("cart-api 为什么一直报错？")
    cause = make_finding("cart-api 的 v2.1 发布与 ERROR 日志都提到 render.font_dir，是最可能的原因。", " [证据: c #5；l #4]",
                         CAUSE, True)
    assert first_line(intent, "", [ERRORS, cause], "PASS").startswith("最可能的原因：cart-api 的 v2.1")
    line = first_line(intent, "", [ERRORS], "LOW_CONFID")
    assert line.startswith("原因尚未由证据确认") and "render failed" in line
    assert first_line(intent, "", [ERRORS, cause], "REJECT").startswith("原因尚未由证据确认")


def test_why_leads_with_the_metric_the_question_names():
    query = "cart-api 的 grpc_server_handling_seconds_p99 为什么升高？"
    p99 = make_finding("cart-api 的 grpc_server_handling_seconds_p99 在 T3 达到 2.1 s。", " [证据: q #6]", ABNORMAL, True)
    line = first_line(classify_question(query), query, [ERRORS, p99], "PASS")
    assert "grpc_server_handling_seconds_p99" in line


def test_health_says_nothing_found_with_its_scope_or_the_anomalies_never_healthy():
    intent = classify_question("cart-api 最近一小时正常吗？")
    quiet = first_line(intent, "", [POOL_QUIET, DISK_QUIET], "PASS", scope="cart-api：2 项指标")
    assert quiet == "在所查范围内未发现异常（cart-api：2 项指标）"
    found = first_line(intent, "", [POOL_QUIET, ERRORS, POOL_HIGH], "PASS")
    assert found.startswith("发现异常：") and "另有 1 项异常" in found
    for line in (quiet, found):
        assert "健康" not in line and "排除" not in line


def test_a_change_alone_is_no_anomaly():
    intent = classify_question("cart-api 最近一小时正常吗？")
    change = make_finding("cart-api 在 T1 有一次 config 变更：刷新间隔调整。", " [证据: c #7]", CHANGE, True)
    assert first_line(intent, "", [change, POOL_QUIET], "PASS").startswith("在所查范围内未发现异常")


@pytest.mark.parametrize("kind", ["yes_no", "why", "health"])
def test_every_first_line_of_a_kind_opens_as_the_guard_expects(kind):
    query = {"yes_no": "cart-api 是不是磁盘满了？", "why": "cart-api 为什么报错？", "health": "cart-api 正常吗？"}[kind]
    intent = classify_question(query)
    for findings in ([], [ERRORS], [DISK_QUIET], [ERRORS, DISK_QUIET]):
        for verdict in ("PASS", "LOW_CONFID", "REJECT"):
            assert first_line(intent, query, findings, verdict).startswith(OPENINGS[kind])


def test_a_follow_up_naming_a_signal_is_answered_about_that_signal_abnormal_or_not():
    # 「那它的磁盘呢？」 after a question about errors: the disk reading first, though it is quiet and
    # an error burst was also found; a signal it names that is abnormal comes before a quiet one.
    query = "那它的磁盘呢？"
    intent = classify_question(query)
    assert intent.kind == "what"
    line = first_line(intent, query, [ERRORS, POOL_HIGH, DISK_QUIET], "PASS")
    assert line.startswith("cart-api 的 fs_avail_bytes") and line.endswith("[证据: q #3]"), line
    pool = "那连接池呢？"
    assert first_line(classify_question(pool), pool, [ERRORS, POOL_QUIET, POOL_HIGH], "PASS").endswith("[证据: q #1]")
    # Under REJECT a quiet reading is no answer: the main confirmed finding is, as before.
    assert first_line(intent, query, [ERRORS, DISK_QUIET], "REJECT").endswith("[证据: l #4]")
    # Its reading comes before a cause found for it (the cause follows in the summary).
    cause = make_finding("cart-api 的 v2.1 发布与 db_pool_active_connections 升高有关。", " [证据: c #5]", CAUSE, True)
    assert first_line(classify_question(pool), pool, [cause, POOL_HIGH], "PASS").endswith("[证据: q #1]")
    # A signal nobody found anything about: the main finding.
    memory = "那内存呢？"
    assert first_line(classify_question(memory), memory, [ERRORS, DISK_QUIET], "PASS").endswith("[证据: l #4]")
