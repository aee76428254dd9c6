"""The grounding checks on a single-ReAct conclusion that opens with the direct answer:
our fixed words pass, a model's lie in the same words does not."""

from __future__ import annotations

from shared.core.contracts import RefFacts, StatedValue
from shared.core.grounding.answer_words import blank_answer_words
from shared.core.grounding.statement_check import CitedRef, check_statement

SVC, W0, W1 = "geo-lookup", "2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z"
SUMMARY = CitedRef(
    f"{SVC} process_cpu_ratio {W0}..{W1}: 60 points, min=0.23 ratio, median=0.27 ratio, max=0.3 ratio at {W1}",
    "query_metrics",
    RefFacts(kind="metric_summary", subject=SVC, metric="process_cpu_ratio", window_start=W0, window_end=W1, values=[
        StatedValue(name="min", value=23.0, unit="%"), StatedValue(name="median", value=27.0, unit="%"),
        StatedValue(name="max", value=30.4, unit="%", at=W1)]),
)
ERROR_LINE = CitedRef(f"{W1} ERROR {SVC} host=h1 lookup failed", "query_logs",
                      RefFacts(kind="log_line", subject=SVC, at=W1, level="ERROR"))
WARN_LINE = CitedRef(f"{W1} WARN {SVC} host=h1 no city record", "query_logs",
                     RefFacts(kind="log_line", subject=SVC, at=W1, level="WARN"))


def _checks(text: str, refs: list[CitedRef]) -> list[str]:
    return [f.check_id for f in check_statement(text, refs, claim_type="observation", check_causes=True)]


def test_a_value_in_the_tools_ratio_unit_is_bound_to_its_percent_facts():
    assert _checks(f"{SVC} 的 process_cpu_ratio 最高为 0.3 ratio，中位数 0.27 ratio。", [SUMMARY]) == []
    assert "value.binding" in _checks(f"{SVC} 的 process_cpu_ratio 最高为 0.9 ratio。", [SUMMARY])


def test_a_metric_name_with_error_in_it_names_no_log_level():
    errors = CitedRef(SUMMARY.text.replace("process_cpu_ratio", "http_server_error_ratio"), "query_metrics",
                      SUMMARY.facts.model_copy(update={"metric": "http_server_error_ratio"}))
    assert _checks(f"{SVC} 的 http_server_error_ratio 未见明显升高。", [errors]) == []


def test_nothing_found_is_supported_by_quiet_readings_and_routine_warn_lines():
    text = f"在所查范围内未发现异常（{SVC}：指标 process_cpu_ratio，ERROR/WARN 日志）。"
    assert _checks(text, [SUMMARY, WARN_LINE]) == []


def test_nothing_found_citing_an_error_line_is_contradicted():
    text = f"在所查范围内未发现异常（{SVC}：指标 process_cpu_ratio，ERROR/WARN 日志）。"
    assert "polarity.negation" in _checks(text, [SUMMARY, ERROR_LINE])


def test_nothing_found_without_anything_read_is_unsupported():
    assert "polarity.negation" in _checks(f"在所查范围内未发现异常（{SVC}）。", [WARN_LINE])


def test_only_the_template_words_are_blanked():
    text = "无法确认：ledger-api、edge-proxy 都有已核实的异常，但证据没有显示二者之间的关联。"
    assert blank_answer_words(text).split() == ["无法确认：ledger-api、edge-proxy", "。"]
    # A label with names or numbers is no lexicon label: it stays, and is checked.
    assert "v2.14" in blank_answer_words("是：ledger-api v2.14 有已核实的异常——x")
    assert blank_answer_words("证据不支持：没有证据显示「磁盘」（fs_avail_bytes 正常：39GiB）").strip() == "39GiB）"
