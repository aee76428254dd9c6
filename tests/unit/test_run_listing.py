"""ListRuns' answer_line: what a run list shows of each answer is its direct answer."""

from __future__ import annotations

from gateway.run_listing import MAX_ANSWER_LINE_CHARS, answer_line

MULTI_AGENT = """可信度：高（以下结论均由本次运行的工具证据支持）

【结论】
- 最可能的原因：pay-svc 的 v2.14.0 发布 [证据: query_changes #3 changes[0]]
- 这一回答基于本次运行中直接观察到的现象：…
"""
SINGLE_REACT = """可信度：已通过证据与语义双重校验
【结论】
在所查范围内未发现异常（pay-svc：2026-11-30 11:50:00 至 12:00:00 的指标 cpu_usage_percent）。
【分析】
- [a1] 观察：…
"""
FALLBACK = """【说明】
- 本次取得的证据引用没有一条通过引用核验，因此不给出诊断结论。
"""


def test_the_line_is_the_direct_answer_not_the_confidence_header_or_a_heading():
    assert answer_line(MULTI_AGENT) == "最可能的原因：pay-svc 的 v2.14.0 发布 [证据: query_changes #3 changes[0]]"
    assert answer_line(SINGLE_REACT).startswith("在所查范围内未发现异常（pay-svc")
    assert answer_line(FALLBACK) == "本次取得的证据引用没有一条通过引用核验，因此不给出诊断结论。"


def test_an_empty_or_long_answer_gives_a_bounded_line():
    assert answer_line(None) == "" and answer_line("可信度：高\n【结论】\n") == ""
    line = answer_line("【结论】\n- " + "很" * 1000)
    assert len(line) == MAX_ANSWER_LINE_CHARS and line.endswith("…")
