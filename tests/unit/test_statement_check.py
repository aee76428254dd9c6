"""The grounding checks of one statement against its cited refs: values bound to what
they measure, comparisons, numbers in words, vague quantifiers, polarity and key terms.

The refs are made up here (service, metric and values unknown to the demo estate), with their
typed facts as the gatekeeper reads them from a stored tool result."""

from __future__ import annotations

import pytest

from shared.core.contracts import RefFacts, StatedValue
from shared.core.grounding import check_ids
from shared.core.grounding.statement_check import CitedRef, check_statement, worst

SVC = "ledger-api"
PEAK = CitedRef(
    f"{SVC} heap_used_percent=91.4% at 2026-05-02T03:12:00Z", "query_metrics",
    RefFacts(kind="metric_point", subject=SVC, metric="heap_used_percent", at="2026-05-02T03:12:00Z",
             values=[StatedValue(name="value", value=91.4, unit="%", at="2026-05-02T03:12:00Z")]),
)
LOW = CitedRef(
    f"{SVC} heap_used_percent=30.2% at 2026-05-02T02:40:00Z", "query_metrics",
    RefFacts(kind="metric_point", subject=SVC, metric="heap_used_percent", at="2026-05-02T02:40:00Z",
             values=[StatedValue(name="value", value=30.2, unit="%", at="2026-05-02T02:40:00Z")]),
)
ERRORS = CitedRef(
    f"{SVC} grpc_error_ratio=4.7% at 2026-05-02T03:12:00Z", "query_metrics",
    RefFacts(kind="metric_point", subject=SVC, metric="grpc_error_ratio", at="2026-05-02T03:12:00Z",
             values=[StatedValue(name="value", value=4.7, unit="%", at="2026-05-02T03:12:00Z")]),
)
SUMMARY = CitedRef(
    f"{SVC} heap_used_percent 2026-05-02T02:30:00Z..2026-05-02T03:30:00Z: 60 points, min=29.8%, "
    "median=33.0%, max=91.4% at 2026-05-02T03:12:00Z", "query_metrics",
    RefFacts(kind="metric_summary", subject=SVC, metric="heap_used_percent",
             window_start="2026-05-02T02:30:00Z", window_end="2026-05-02T03:30:00Z",
             values=[StatedValue(name="min", value=29.8, unit="%"), StatedValue(name="median", value=33.0, unit="%"),
                     StatedValue(name="max", value=91.4, unit="%", at="2026-05-02T03:12:00Z")]),
)
ERROR_LINE = CitedRef(
    f"2026-05-02T03:13:07Z ERROR {SVC} host=node-4 upstream call to quota-store failed: deadline 2500ms exceeded",
    "query_logs",
    RefFacts(kind="log_line", subject=SVC, at="2026-05-02T03:13:07Z", level="ERROR"),
)
ERROR_LINE_2 = CitedRef(
    f"2026-05-02T03:15:41Z ERROR {SVC} host=node-2 upstream call to quota-store failed: deadline 2500ms exceeded",
    "query_logs",
    RefFacts(kind="log_line", subject=SVC, at="2026-05-02T03:15:41Z", level="ERROR"),
)
EMPTY_ERRORS = CitedRef(
    f"query_logs service={SVC} level=ERROR 2026-05-02T02:30:00Z..2026-05-02T03:30:00Z: 0 hits", "query_logs",
    RefFacts(kind="log_scope", subject=SVC, level="ERROR", window_start="2026-05-02T02:30:00Z",
             window_end="2026-05-02T03:30:00Z", item_count=0, empty=True),
)
CHANGE = CitedRef(
    f"2026-05-02T02:58:00Z {SVC} deploy release 7.3.1 by li.na: enable batch compaction", "query_changes",
    RefFacts(kind="change", subject=SVC, at="2026-05-02T02:58:00Z"),
)


def checks(text: str, refs: list[CitedRef], **kw) -> set[str]:
    return {f.check_id for f in check_statement(text, refs, **kw)}


def verification(text: str, refs: list[CitedRef], **kw) -> str | None:
    found = worst(check_statement(text, refs, **kw))
    return found.verification if found else None


# --- honest statements pass ---------------------------------------------------------------------


@pytest.mark.parametrize("text, refs", [
    (f"{SVC} 的 heap_used_percent 在 2026-05-02T03:12:00Z 达到 91.4%，高于窗口前段的 30.2%（2026-05-02T02:40:00Z）",
     [PEAK, LOW]),
    (f"{SVC} 的 heap_used_percent 在 2026-05-02T02:30:00Z 至 2026-05-02T03:30:00Z 期间最高为 91.4%"
     "（2026-05-02T03:12:00Z），中位数 33.0%", [SUMMARY]),
    (f"{SVC} 的 heap_used_percent 峰值 91.4%", [SUMMARY]),
    (f"{SVC} 在 2026-05-02T03:13:07Z 至 2026-05-02T03:15:41Z 期间多次出现 ERROR 日志：「upstream call to quota-store "
     "failed: deadline 2500ms exceeded」", [ERROR_LINE, ERROR_LINE_2]),
    (f"{SVC} 在 2026-05-02T02:30:00Z 至 2026-05-02T03:30:00Z 期间没有 ERROR 日志（0 条）", [EMPTY_ERRORS]),
    (f"{SVC} 在 2026-05-02T02:58:00Z 有一次 deploy 变更（执行人 li.na）：release 7.3.1", [CHANGE]),
])
def test_honest_statements_have_no_finding(text, refs):
    assert check_statement(text, refs) == []


# --- values bound to what they measure ----------------------------------------------------------


def test_a_peak_time_with_another_points_value_is_contradicted():
    text = f"{SVC} 的 heap_used_percent 在 2026-05-02T03:12:00Z 仅为 30.2%"
    assert check_ids.VALUE_BINDING in checks(text, [PEAK, LOW])
    assert verification(text, [PEAK, LOW]) == "contradicted"


def test_one_metrics_value_given_to_another_is_not_supported():
    text = f"{SVC} 的内存堆使用率 heap_used_percent 在 2026-05-02T03:12:00Z 为 4.7%"
    assert check_ids.VALUE_BINDING in checks(text, [PEAK, ERRORS])


def test_a_value_with_no_metric_named_binds_to_nothing():
    assert check_ids.VALUE_BINDING in checks(f"{SVC} 在 2026-05-02T03:12:00Z 达到 91.4%", [PEAK])


def test_times_are_compared_with_their_zone():
    beijing = f"{SVC} 的 heap_used_percent 在 11:12（北京时间）达到 91.4%"
    assert check_statement(beijing, [PEAK]) == []
    mislabelled = f"{SVC} 的 heap_used_percent 在 03:12（北京时间）达到 91.4%"
    assert check_ids.VALUE_BINDING in checks(mislabelled, [PEAK])


def test_numbers_in_words_are_values():
    assert check_ids.NUMBER_WORDS in checks(f"{SVC} 的 heap_used_percent 在峰值 2026-05-02T03:12:00Z 时仅约三成", [PEAK])
    assert check_ids.NUMBER_WORDS not in checks(f"{SVC} 的 heap_used_percent 在 2026-05-02T02:40:00Z 约为三成", [LOW])


def test_a_count_no_ref_states_is_not_supported():
    text = f"{SVC} 的 ERROR 日志出现 500 次"
    assert check_ids.VALUE_BINDING in checks(text, [ERROR_LINE, ERROR_LINE_2])


# --- comparisons and vague quantities -----------------------------------------------------------


def test_a_point_value_called_the_peak_needs_the_summary():
    assert check_ids.VALUE_COMPARISON in checks(f"{SVC} 的 heap_used_percent 峰值为 30.2%", [LOW])
    assert verification(f"{SVC} 的 heap_used_percent 峰值为 30.2%", [SUMMARY]) == "contradicted"


def test_a_comparison_must_hold():
    text = f"{SVC} 的 heap_used_percent 在 2026-05-02T02:40:00Z 为 30.2%，高于 2026-05-02T03:12:00Z 的 91.4%"
    assert check_ids.VALUE_COMPARISON in checks(text, [PEAK, LOW])


def test_vague_quantifiers_need_their_evidence():
    assert check_ids.NUMBER_VAGUE in checks(f"{SVC} 大量请求超时", [ERROR_LINE])
    assert check_ids.NUMBER_VAGUE not in checks(f"{SVC} 多次出现 ERROR 日志", [ERROR_LINE, ERROR_LINE_2])
    assert check_ids.NUMBER_VAGUE in checks(f"{SVC} 多次出现 ERROR 日志", [ERROR_LINE])


# --- polarity -----------------------------------------------------------------------------------


def test_everything_within_a_bound_is_contradicted_by_an_error_line():
    text = f"{SVC} 的请求均在 2500ms 内完成"
    assert check_ids.POLARITY_ABSOLUTE in checks(text, [ERROR_LINE])
    assert verification(text, [ERROR_LINE]) == "contradicted"


def test_excluding_a_cause_is_never_confirmed():
    text = f"{SVC} heap_used_percent 升高与 release 7.3.1 无关"
    assert check_ids.POLARITY_EXCLUSION in checks(text, [CHANGE, PEAK])


def test_absence_needs_a_search_over_that_scope():
    assert check_ids.POLARITY_NEGATION in checks(f"{SVC} 没有 ERROR 日志", [PEAK])
    assert verification(f"{SVC} 没有 ERROR 日志", [ERROR_LINE]) == "contradicted"


# --- key terms ----------------------------------------------------------------------------------


def test_an_invented_cause_is_a_fabricated_key_entity():
    found = worst(check_statement("Redis 主节点故障是根因", [PEAK], claim_type="root_cause"))
    assert found is not None and found.check_id == check_ids.KEY_TERM_ABSENT and found.fabricated_key


def test_an_invented_event_and_person_are_fabrications():
    found = worst(check_statement(f"{SVC} heap_used_percent 升高出现在 li.na 回滚之后", [CHANGE, PEAK]))
    assert found is not None and found.check_id == check_ids.KEY_TERM_ABSENT and found.fabricated_key
    found = worst(check_statement(f"{SVC} 在 2026-05-02T02:58:00Z 由 wang.qiang 发布 7.3.1", [CHANGE]))
    assert found is not None and found.fabricated_key


def test_an_invented_service_is_a_fabrication():
    found = worst(check_statement("quota-store-7 连接超时", [ERROR_LINE]))
    assert found is not None and found.fabricated_key


def test_an_unhedged_cause_is_reported_where_causes_are_checked():
    assert check_ids.CAUSAL_UNHEDGED in checks(
        f"不可能是其他原因，{SVC} 的 ERROR 日志导致 heap_used_percent 升高", [ERROR_LINE, PEAK], check_causes=True)
    assert check_ids.CAUSAL_UNHEDGED not in checks(
        f"{SVC} 的 ERROR 日志可能导致 heap_used_percent 升高", [ERROR_LINE, PEAK], check_causes=True)


def test_a_quoted_log_line_is_evidence_not_an_assertion():
    line = CitedRef(
        f"2026-05-02T03:13:07Z ERROR {SVC} host=node-4 write failed: No space left on device overflow=0",
        "query_logs", RefFacts(kind="log_line", subject=SVC, at="2026-05-02T03:13:07Z", level="ERROR"),
    )
    text = f"{SVC} 在 2026-05-02T03:13:07Z 出现 ERROR 日志：「write failed: No space left on device overflow=0」"
    assert check_statement(text, [line]) == []


def test_a_value_matches_at_its_written_precision_whichever_way_it_was_rounded():
    summary = CitedRef(
        f"{SVC} rpc_latency_seconds ... median=0.209s", "query_metrics",
        RefFacts(kind="metric_summary", subject=SVC, metric="rpc_latency_seconds",
                 values=[StatedValue(name="median", value=0.2095, unit="s")]),
    )
    for written in ("0.209s", "0.210s"):
        assert check_statement(f"{SVC} 的 rpc_latency_seconds 中位数 {written}", [summary]) == []
    assert check_ids.VALUE_COMPARISON in checks(f"{SVC} 的 rpc_latency_seconds 中位数 0.208s", [summary])
