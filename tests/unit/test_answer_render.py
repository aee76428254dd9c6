"""`attest ask` as a person reads it: wrapped to the width without splitting ids or times,
citations as footnotes with a list of sources, a series on a labelled line of its own drawn
without turning noise into spikes, one confidence line, and an exit status that tells a fallback
from an answer."""

from __future__ import annotations

import math
import re

import pytest
from rich.cells import cell_len

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2
from gateway.answer_render import CITE_INLINE, answer_lines, confidence_line
from gateway.cli import EXIT_ANSWER, EXIT_FAILED, EXIT_NO_ANSWER, ask_and_print, outcome_status
from gateway.sparkline import BARS, series_line, sparkline
from gateway.terminal_text import wrap
from shared.proto_convert import enum_number

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
LONG = ("payment-service 的 cpu_usage_percent 在 2026-12-08 07:26:00 达到 96.7%，高于窗口前段的 36.9%"
        "（2026-12-08 06:40:00），约自 2026-12-08 07:01:00 起升高，至 2026-12-08 07:38:00 仍为 90.4%，尚未恢复")
MARKER = " [证据: query_metrics #34 series[2].points[46]；query_metrics #34 series[2].onset；来源：演示数据 estate]"


def _verdict(name: str) -> int:
    return enum_number(enums_pb2.Verdict.DESCRIPTOR, name)


def _series(values: list[float], metric: str = "cpu_usage_percent") -> answer_pb2.SeriesWindow:
    return answer_pb2.SeriesWindow(metric=metric, unit="percent", points=[
        answer_pb2.SeriesPoint(timestamp=f"2026-12-08T07:{k:02d}:00Z", value=v) for k, v in enumerate(values)])


def _answer(verdict: str = "PASS", groundedness: float = 0.93) -> gateway_pb2.DiagnoseResponse:
    metric = answer_pb2.Citation(invocation_id=34, tool_name="query_metrics", raw_path="series[2].points[46]",
                                 scope="服务 payment-service，全部指标，2026-12-08 06:39:25 至 07:39:25",
                                 source="演示数据 estate", series=_series([30.0] * 8 + [90.0] * 8))
    onset = answer_pb2.Citation(invocation_id=34, tool_name="query_metrics", raw_path="series[2].onset",
                                scope=metric.scope, source=metric.source, series=metric.series)
    log = answer_pb2.Citation(invocation_id=35, tool_name="query_logs", raw_path="hits[2]",
                              scope="服务 payment-service，级别 FATAL/ERROR/WARN", source="演示数据 estate")
    sections = [
        answer_pb2.AnswerSection(kind=answer_pb2.SECTION_KIND_CONFIDENCE, title="可信度", plain=True, items=[
            answer_pb2.AnswerItem(text="可信度：高（以下结论均由本次运行的工具证据支持）")]),
        answer_pb2.AnswerSection(kind=answer_pb2.SECTION_KIND_EVIDENCE, title="依据", items=[
            answer_pb2.AnswerItem(text=LONG + MARKER, citations=[metric, onset], citation_marker=MARKER),
            answer_pb2.AnswerItem(text="多次出现 WARN 日志 [证据: query_logs #35 hits[2]]", citations=[log],
                                  citation_marker=" [证据: query_logs #35 hits[2]]"),
            answer_pb2.AnswerItem(text="见上方 [证据: query_metrics #34 series[2].onset]", citations=[onset],
                                  citation_marker=" [证据: query_metrics #34 series[2].onset]"),
        ]),
    ]
    return gateway_pb2.DiagnoseResponse(
        run_id="5d6fa3987ce827cfaf339fdf0cc37aa2", session_id="09c29086cb1738406d71c66b86f3f4d6",
        trace_id="d39c831944fbba91b8531024955eff8a", rounds=1, effective_verdict=_verdict(verdict),
        groundedness_score=groundedness, status="COMPLETED",
        structured_answer=answer_pb2.StructuredAnswer(sections=sections))


def _printed(response: gateway_pb2.DiagnoseResponse, width: int | None = 80, cite: str = "footnotes") -> list[str]:
    return [line.plain for line in answer_lines(response, "为什么 payment-service 的 CPU 这么高？", width, cite)]


# --- wrapping ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [30, 40, 80])
def test_wrapping_fits_the_width_and_never_splits_a_timestamp_or_a_token(width):
    lines = wrap(LONG + "[1][2]", width, "- ", "  ")
    assert len(lines) > 1
    assert all(cell_len(line) <= width for line in lines), lines
    joined = "".join(line.removeprefix("- ").removeprefix("  ") for line in lines)
    assert joined.replace(" ", "") == LONG.replace(" ", "") + "[1][2]", "nothing lost, nothing added"
    times = TIMESTAMP.findall(LONG)
    assert sum(len(TIMESTAMP.findall(line)) for line in lines) == len(times), "each timestamp whole on one line"
    for line in lines:
        body = line[2:]
        assert not body.startswith(("，", "）", "%", "[1]")), "no line starts with closing punctuation or a marker"
        assert "cpu_usage_percent" in line or "cpu_usage" not in line


def test_chinese_breaks_between_characters_and_a_token_wider_than_the_line_is_cut():
    assert wrap("排查支付服务的处理器使用率", 10) == ["排查支付服", "务的处理器", "使用率"]
    assert wrap("x" * 25, 10, "- ", "  ") == ["- xxxxxxxx", "  xxxxxxxx", "  xxxxxxxx", "  x"]
    assert wrap("一行 不折", None) == ["一行 不折"]


# --- footnotes -------------------------------------------------------------------------------------

def test_citations_are_footnotes_one_number_per_call_with_a_sources_list():
    lines = _printed(_answer())
    text = "\n".join(lines)
    assert "[证据:" not in text, "the inline markers are replaced"
    assert "尚未恢复[1]" in text and "多次出现 WARN 日志[2]" in text and "见上方[1]" in text
    sources = lines[lines.index("【引用来源】") + 1:]
    entries = "\n".join(sources)
    assert entries.startswith("[1] query_metrics #34 · 服务 payment-service，全部指标，")
    assert "来源 演示数据 estate" in entries and "位置 series[2].points[46]、series[2].onset" in entries
    assert "[2] query_logs #35 · 服务 payment-service，级别 FATAL/ERROR/WARN · 来源 演示数据 estate · 位置 hits[2]" \
        in entries.replace("\n    ", " ")
    assert all(cell_len(line) <= 80 for line in lines), lines


def test_inline_citations_keep_the_gateways_marker_and_list_no_sources():
    text = "\n".join(_printed(_answer(), width=None, cite=CITE_INLINE))
    assert LONG + MARKER in text and "【引用来源】" not in text and "[1]" not in text


# --- sparklines -------------------------------------------------------------------------------------

def test_a_flat_noisy_series_renders_flat_and_a_step_reaches_the_top():
    noisy = [25 + 2 * math.sin(k * 2.3) for k in range(60)]
    assert set(sparkline(noisy)) <= set(BARS[:2]), sparkline(noisy)
    near_zero = [0.05 + 0.04 * math.sin(k * 2.3) for k in range(60)]
    assert set(sparkline(near_zero)) <= set(BARS[:2]), sparkline(near_zero)
    step = [v + 40 * (k >= 30) for k, v in enumerate(noisy)]
    drawn = sparkline(step)
    assert drawn[0] == BARS[0] and drawn[-1] == BARS[-1] and set(drawn[:11]) == {BARS[0]}
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == BARS, "a steady ramp is not noise"
    assert sparkline([1, 1, 1, 9, 9, 9]) == "▁▁▁███"


def test_each_series_gets_its_own_labelled_line_with_its_range_once():
    lines = _printed(_answer())
    drawn = [line for line in lines if line.lstrip().startswith("cpu_usage_percent ")]
    assert drawn == ["  cpu_usage_percent ▁▁▁▁▁▁▁▁████████ 30–90%"]
    assert lines[lines.index(drawn[0]) - 1].endswith("尚未恢复[1]"), "under the fact that cites it"
    narrow = series_line(_series([1.5, 2.0, 2.5] * 20, metric="queue_lag"), 30)
    assert cell_len(narrow) <= 30 and narrow.startswith("queue_lag ▁") and narrow.endswith(" 1.5–2.5%")
    long_name = series_line(_series([1.5, 2.0, 2.5] * 20, metric="a_rather_long_metric_name_for_a_queue"), 40)
    assert all(cell_len(line) <= 40 for line in wrap(long_name, 40, "  ", "    ")), "too long for one line: wrapped"


# --- the confidence line ------------------------------------------------------------------------------

def test_one_confidence_line_that_does_not_contradict_itself():
    lines = _printed(_answer())
    assert lines[2] == "可信度：高（以下结论均由本次运行的工具证据支持） · PASS · 证据支持度 0.93"
    assert sum("可信度" in line for line in lines) == 1
    unscored = confidence_line(_answer(groundedness=0.0))
    assert "0.00" not in unscored and "PASS" in unscored
    assert "证据支持度 0.00" in confidence_line(_answer("REJECT", groundedness=0.0))


def test_a_fallback_says_so_and_whether_asking_again_helps():
    response = gateway_pb2.DiagnoseResponse(
        status="FALLBACK", retryable=False,
        fallback_type=enum_number(enums_pb2.FallbackType.DESCRIPTOR, "MISSING_REQUIRED_CONTEXT"))
    assert confidence_line(response) == ("可信度：无（安全回退：MISSING_REQUIRED_CONTEXT（缺少服务名称等必要信息））"
                                         " · 原样重问不会改变结果")


# --- the exit status ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("response", "code"), [
    (gateway_pb2.DiagnoseResponse(effective_verdict=_verdict("PASS"), status="COMPLETED"), EXIT_ANSWER),
    (gateway_pb2.DiagnoseResponse(effective_verdict=_verdict("LOW_CONFID"), status="COMPLETED"), EXIT_ANSWER),
    (gateway_pb2.DiagnoseResponse(release_outcome=enums_pb2.RELEASE_OUTCOME_SUCCESS, status="COMPLETED"), EXIT_ANSWER),
    (gateway_pb2.DiagnoseResponse(effective_verdict=_verdict("REJECT"), status="COMPLETED"), EXIT_NO_ANSWER),
    (gateway_pb2.DiagnoseResponse(status="FALLBACK", fallback_type=enum_number(
        enums_pb2.FallbackType.DESCRIPTOR, "UNKNOWN_SERVICE")), EXIT_NO_ANSWER),
    (gateway_pb2.DiagnoseResponse(outcome_status=answer_pb2.OUTCOME_STATUS_FALLBACK), EXIT_NO_ANSWER),
    (gateway_pb2.DiagnoseResponse(release_outcome=enums_pb2.RELEASE_OUTCOME_FALLBACK), EXIT_NO_ANSWER),
], ids=["pass", "low_confid", "released", "reject", "fallback", "fallback_status", "release_fallback"])
def test_the_exit_status_tells_an_answer_from_a_fallback(response, code):
    assert outcome_status(response) == code


def test_an_unreachable_gateway_exits_1(capsys):
    assert ask_and_print("127.0.0.1:1", "payment-service 怎么了？", token="t", timeout=5) == EXIT_FAILED
    assert "UNAVAILABLE" in capsys.readouterr().err
