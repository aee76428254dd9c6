"""The single-ReAct answer guard: the conclusion opens with the direct answer
to the question, and the opening agrees with what the Analyses' verified evidence shows.

Drafts and snapshots are built by hand, as EvidenceGuard would hand them over: each Analysis'
evidence with its excerpt lines and the typed facts of each line (`shared.core.evidence_facts`)."""

from __future__ import annotations

import pytest

from gateway.answer_guard import OPENING_CONTRADICTED, OPENING_MISSING, check_answer
from shared.core.contracts import RefFacts, StatedValue
from shared.core.question_intent import classify_question
from shared.draft_contract import (
    Analysis,
    AnalysisEvidence,
    Conclusion,
    Draft,
    SnapshotEvidence,
    VerifiedSnapshot,
)

W0, W1 = "2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z"
SVC = "search-indexer"


def _summary(metric: str, low: float, mid: float, high: float, unit: str = "MB") -> tuple[str, RefFacts]:
    line = f"{SVC} {metric} {W0}..{W1}: 60 points, min={low}{unit}, median={mid}{unit}, max={high}{unit} at {W1}"
    facts = RefFacts(kind="metric_summary", subject=SVC, metric=metric, window_start=W0, window_end=W1, values=[
        StatedValue(name="min", value=low, unit=unit), StatedValue(name="median", value=mid, unit=unit),
        StatedValue(name="max", value=high, unit=unit, at=W1)])
    return line, facts


def _onset(metric: str, before: float, after: float, unit: str = "%") -> tuple[str, RefFacts]:
    at = "2026-11-30T10:40:00Z"
    line = f"{SVC} {metric} onset at {at}: median before={before}{unit}, after={after}{unit}"
    return line, RefFacts(kind="metric_onset", subject=SVC, metric=metric, at=at, level="up", values=[
        StatedValue(name="before", value=before, unit=unit), StatedValue(name="after", value=after, unit=unit, at=at)])


def _log(level: str, message: str, at: str = "2026-11-30T10:45:00Z") -> tuple[str, RefFacts]:
    return f"{at} {level} {SVC} host=h1 {message}", RefFacts(kind="log_line", subject=SVC, at=at, level=level)


def _change(summary: str, at: str = "2026-11-30T10:35:00Z") -> tuple[str, RefFacts]:
    return f"{at} deploy {SVC} by ops: {summary}", RefFacts(kind="change", subject=SVC, at=at)


def _item(tool: str, lines: list[tuple[str, RefFacts]], status: str = "EVIDENCE_FOUND") -> SnapshotEvidence:
    return SnapshotEvidence(tool_name=tool, evidence_status=status, excerpt="\n".join(line for line, _ in lines),
                            facts=[facts for _, facts in lines])


NO_ERRORS = SnapshotEvidence(
    tool_name="query_logs", evidence_status="NO_EVIDENCE",
    excerpt=f"query_logs service={SVC} level=ERROR,WARN {W0}..{W1}: 0 matching lines",
    facts=[RefFacts(kind="log_scope", subject=SVC, level="ERROR,WARN", item_count=0, empty=True)])
QUIET_HEAP = _item("query_metrics", [_summary("heap_used_bytes", 1100, 1120, 1150)])
QUIET_CPU = _item("query_metrics", [_summary("process_cpu_ratio", 38, 40, 46, "%")])
CPU_RISE = _item("query_metrics", [_summary("process_cpu_ratio", 30, 40, 97, "%"), _onset("process_cpu_ratio", 36, 95)])
ERROR_BURST = _item("query_logs", [_log("ERROR", "java.lang.OutOfMemoryError: Java heap space")])
ROUTINE_WARN = _item("query_logs", [_log("WARN", "job started late name=daily delay=6s")])
RULESET_CHANGE = _item("query_changes", [_change("release v2.14.0 enables rule set ruleSet=v5")])
RULESET_WARN = _item("query_logs", [_log("WARN", "rule engine slow ruleSet=v5 eval_ms=900", "2026-11-30T10:41:00Z")])
UNRELATED_CHANGE = _item("query_changes", [_change("page copy update for the help page")])


def _draft(conclusion: str, evidence: dict[str, SnapshotEvidence], refs: list[str] | None = None):
    analyses = [Analysis(analysis_id=aid, kind="NORMAL" if item.evidence_status == "EVIDENCE_FOUND"
                         else "NEGATIVE_OBSERVATION", text="（分析文本不影响本检查）", tool_call_ids=["c"])
                for aid, item in evidence.items()]
    draft = Draft(conclusion=Conclusion(text=conclusion, analysis_refs=refs or list(evidence)), analyses=analyses)
    snapshot = VerifiedSnapshot(analyses=[AnalysisEvidence(analysis_id=aid, evidence=[item])
                                          for aid, item in evidence.items()])
    return draft, snapshot


def _checks(query: str, conclusion: str, evidence: dict[str, SnapshotEvidence], refs: list[str] | None = None):
    draft, snapshot = _draft(conclusion, evidence, refs)
    return [f.check_id for f in check_answer(classify_question(query), draft, snapshot)]


# --- honest drafts pass ----------------------------------------------------------------------------


def test_a_healthy_answer_over_quiet_series_and_empty_searches_passes():
    assert _checks(f"{SVC} 最近一小时正常吗？", f"在所查范围内未发现异常（{SVC}：指标 heap_used_bytes，ERROR/WARN 日志）。",
                   {"a1": QUIET_HEAP, "a2": NO_ERRORS}) == []


def test_routine_warn_lines_and_a_routine_change_do_not_make_a_healthy_answer_a_lie():
    assert _checks(f"{SVC} 最近一小时有没有异常？", "在所查范围内未发现异常（…）。",
                   {"a1": QUIET_HEAP, "a2": ROUTINE_WARN, "a3": UNRELATED_CHANGE}) == []


@pytest.mark.parametrize(("query", "conclusion", "evidence"), [
    (f"{SVC} 是不是内存泄漏了？", "证据不支持：没有证据显示「内存」（heap_used_bytes 正常：…）。", {"a1": QUIET_HEAP}),
    (f"{SVC} 是不是内存泄漏了？", "是：内存有已核实的异常——…", {"a1": ERROR_BURST}),
    (f"{SVC} 是不是内存泄漏了？", "无法确认：缺少「内存」相关信号（指标或日志）的已核实证据。", {"a1": NO_ERRORS}),
    (f"为什么 {SVC} 的 CPU 这么高？", "原因尚未由证据确认；最明显的线索：…", {"a1": CPU_RISE}),
    (f"为什么 {SVC} 的 CPU 这么高？", "最可能的原因：v2.14.0 的 ruleSet=v5 …", {"a1": RULESET_CHANGE, "a2": RULESET_WARN, "a3": CPU_RISE}),
    (f"{SVC} 最近一小时正常吗？", "发现异常：process_cpu_ratio …", {"a1": CPU_RISE, "a2": NO_ERRORS}),
    (f"{SVC} 最近的错误日志说了什么？", "java.lang.OutOfMemoryError …", {"a1": ERROR_BURST}),
])
def test_honest_openings_pass(query, conclusion, evidence):
    assert _checks(query, conclusion, evidence) == []


# --- a conclusion that does not answer ------------------------------------------------------------


@pytest.mark.parametrize(("query", "conclusion"), [
    (f"{SVC} 最近一小时正常吗？", "本次检查查到以下表现：heap_used_bytes 平稳。"),
    (f"{SVC} 是不是内存泄漏了？", "heap_used_bytes 最高 1150MB。"),
    (f"为什么 {SVC} 的 CPU 这么高？", "process_cpu_ratio 升到 97%。"),
    (f"{SVC} 最近一小时正常吗？", "  健康：各项指标均正常。"),
])
def test_a_conclusion_without_the_direct_answer_is_refused(query, conclusion):
    assert _checks(query, conclusion, {"a1": QUIET_HEAP}) == [OPENING_MISSING]


# --- a lying opening -------------------------------------------------------------------------------


def test_no_anomaly_while_an_analysis_shows_error_lines_is_refused_even_if_not_cited():
    assert _checks(f"{SVC} 最近一小时正常吗？", "在所查范围内未发现异常（…）。",
                   {"a1": QUIET_HEAP, "a2": ERROR_BURST}, refs=["a1"]) == [OPENING_CONTRADICTED]


def test_no_anomaly_while_a_series_rose_is_refused():
    assert _checks(f"{SVC} 最近一小时正常吗？", "在所查范围内未发现异常（…）。",
                   {"a1": CPU_RISE, "a2": NO_ERRORS}) == [OPENING_CONTRADICTED]


def test_no_anomaly_without_anything_quiet_cited_is_refused():
    assert _checks(f"{SVC} 最近一小时正常吗？", "在所查范围内未发现异常（…）。",
                   {"a1": ROUTINE_WARN}) == [OPENING_CONTRADICTED]


def test_yes_over_quiet_evidence_on_the_hypothesis_signal_is_refused():
    assert _checks(f"{SVC} 是不是内存泄漏了？", "是：内存有已核实的异常——heap_used_bytes …",
                   {"a1": QUIET_HEAP, "a2": NO_ERRORS}) == [OPENING_CONTRADICTED]


def test_not_supported_while_the_hypothesis_signal_is_abnormal_is_refused():
    assert _checks(f"{SVC} 是不是内存泄漏了？", "证据不支持：没有证据显示「内存」（heap_used_bytes 正常：…）。",
                   {"a1": QUIET_HEAP, "a2": ERROR_BURST}, refs=["a1"]) == [OPENING_CONTRADICTED]


def test_found_an_anomaly_over_quiet_evidence_only_is_refused():
    assert _checks(f"{SVC} 最近一小时正常吗？", "发现异常：heap_used_bytes …",
                   {"a1": QUIET_HEAP, "a2": NO_ERRORS}) == [OPENING_CONTRADICTED]


def test_a_most_likely_cause_without_a_checked_link_is_refused():
    # A change came first, but shares no distinctive token with the error lines: not a cause.
    assert _checks(f"为什么 {SVC} 的 CPU 这么高？", "最可能的原因：页面文案更新 …",
                   {"a1": UNRELATED_CHANGE, "a2": RULESET_WARN, "a3": CPU_RISE}) == [OPENING_CONTRADICTED]
    # A cause citing only the effect.
    assert _checks(f"为什么 {SVC} 的 CPU 这么高？", "最可能的原因：CPU 升高 …", {"a1": CPU_RISE}) == [OPENING_CONTRADICTED]


def _fall(metric: str, before: float, after: float, unit: str = "ratio") -> tuple[str, RefFacts]:
    at = "2026-11-30T10:40:00Z"
    line = f"{SVC} {metric} onset at {at}: falling from {before} {unit} (median before) to {after} {unit} (median after)"
    return line, RefFacts(kind="metric_onset", subject=SVC, metric=metric, at=at, level="down", values=[
        StatedValue(name="before", value=before, unit=unit), StatedValue(name="after", value=after, unit=unit, at=at)])


def test_a_hit_ratio_that_collapses_is_the_other_failure_a_denial_may_name():
    # 「是不是磁盘满了」 denied with the cache hit ratio's fall as what the evidence shows instead.
    hit_fall = _item("query_metrics", [_fall("cache_hit_ratio", 0.95, 0.05)])
    assert _checks(f"{SVC} 的缓存命中率掉，是不是磁盘满了导致的？",
                   "证据不支持：没有证据显示「磁盘」有问题（实际：缓存命中率骤降——…）。", {"a1": hit_fall}) == []


def test_a_fall_of_a_series_where_down_is_good_is_no_anomaly():
    errors_fall = _item("query_metrics", [_fall("http_error_ratio", 0.3, 0.01)])
    assert _checks(f"{SVC} 的缓存命中率掉，是不是磁盘满了导致的？",
                   "证据不支持：没有证据显示「磁盘」有问题（实际：…）。", {"a1": errors_fall}) != []


def test_a_warning_that_names_the_hypothesis_thing_supports_a_yes():
    # A Full GC pause is logged at WARN: no error, but it shows the GC the question asks about.
    gc_warn = _item("query_logs", [_log("WARN", "[gc] GC(9239) Pause Full (Allocation Failure) 4056M->4036M(4096M) 2097.478ms")])
    assert _checks(f"{SVC} 的 p99 延迟忽高忽低，是 Full GC 的问题吗？", "是：GC有已核实的异常——…",
                   {"a1": gc_warn, "a2": QUIET_HEAP}) == []
    # The same yes over a heap series read quiet (typed: memory, not the GC) alone is refused.
    assert _checks(f"{SVC} 的 p99 延迟忽高忽低，是 Full GC 的问题吗？", "是：GC有已核实的异常——…",
                   {"a1": QUIET_HEAP}) != []
