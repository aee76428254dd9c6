"""`attest ask` and `attest run-show` say which typed outcome a run ended in, and which named
services were checked."""

from __future__ import annotations

from rich.console import Console

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2
from gateway.cli import render
from gateway.cli_runs import render_run
from shared.proto_convert import enum_number


def _printed(draw) -> str:
    console = Console(record=True, width=200)
    draw(console)
    return console.export_text()


def test_a_typed_fallback_is_labelled():
    response = gateway_pb2.DiagnoseResponse(
        run_id="r1", answer="没有找到服务 pay-scv，是否指 pay-svc？",
        fallback_type=enum_number(enums_pb2.FallbackType.DESCRIPTOR, "UNKNOWN_SERVICE"))
    text = _printed(lambda console: render(console, "pay-scv 怎么了", response))
    assert "UNKNOWN_SERVICE（没有找到所问的服务）" in text


def test_run_show_prints_the_service_coverage_and_the_cap():
    audit = {"run_id": "r1", "query": "q", "status": "COMPLETED", "effective_verdict": "LOW_CONFID", "events": [],
             "self_evaluation": {"verifier_evaluation": {
                 "service_coverage": {"named": ["a-svc", "b-scv", "c-svc"], "checked": ["a-svc"],
                                      "unknown": [{"name": "b-scv", "suggestions": ["b-svc"]}],
                                      "unchecked": ["c-svc"], "limit": 1, "catalogue_unavailable": False},
                 "coverage_cap": {"verdict_before_cap": "PASS", "verdict": "LOW_CONFID"},
             }}}
    text = _printed(lambda console: render_run(console, audit))
    assert "已检查 a-svc" in text and "未找到 b-scv（是否指 b-svc？）" in text and "未检查 c-svc" in text
    assert "PASS → LOW_CONFID" in text


def test_brackets_in_an_answer_are_printed_as_written():
    """Evidence quotes log lines as written: `[lag-monitor]` is a thread name, `[/x]` a stray
    closing tag; neither may be read as console markup (dropped, or a crash)."""
    answer = "- svc 多次出现 ERROR 日志：「[lag-monitor] c.a.Monitor - lag=12 [/x] [bold]」"
    response = gateway_pb2.DiagnoseResponse(
        run_id="r1", answer=answer, effective_verdict=enum_number(enums_pb2.Verdict.DESCRIPTOR, "PASS"))
    text = _printed(lambda console: render(console, "为什么 [a] 积压", response))
    assert answer in text and "为什么 [a] 积压" in text

    audit = {"run_id": "r1", "query": "q [x]", "status": "COMPLETED", "events": [], "self_evaluation": {
        "verifier_evaluation": {"claim_checks": [{"claim_id": "c1", "verification": "direct_observation",
                                                  "claim_text": "[thread-2] ok"}]}}}
    text = _printed(lambda console: render_run(console, audit))
    assert "问题: q [x]" in text and "[thread-2] ok" in text
