"""`attest runs` and `attest run-show` as a person reads them: full run ids that paste into
run-show, times in the gateway's zone, lines cut between tokens, claims by their text with Chinese
labels and whole counts, and a bounded --json unless --full. The CLI talks to a real gRPC server
on an ephemeral port that answers as a gateway would."""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest
from google.protobuf import struct_pb2
from rich.cells import cell_len
from rich.console import Console

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.cli import main
from gateway.cli_runs import (
    CHECK_LABELS,
    JSON_MAX_STRING_CHARS,
    bounded,
    render_run,
    run_lines,
    time_display,
)
from gateway.text_cut import cut
from shared.core.grounding.check_ids import ALL_CHECK_IDS
from shared.proto_convert import enum_number

RUN_ID = "3f2a9c1b4d5e6f708192a3b4c5d6e7f8"
OTHER_RUN_ID = "0b1c2d3e4f5a69788796a5b4c3d2e1f0"
SESSION_ID = "5e55105e55105e55105e55105e551050"
ANSWER = ("在所查范围内未发现异常（pay-svc：2026-11-30T11:50:00Z 至 2026-11-30T12:00:00Z 的指标 "
          "cpu_usage_percent，峰值 41.5%，对照 query_metrics #1 series[0].points[12]）。")
TOOL_RESULT = json.dumps({"tool": "query_metrics", "points": [["2026-11-30T11:50:00Z", n] for n in range(400)]})
AUDIT = {
    "run_id": RUN_ID, "session_id": SESSION_ID, "query": "pay-svc 的 CPU 为什么高？", "status": "COMPLETED",
    "effective_verdict": "PASS", "created_at": "2026-11-30T23:34:00.056874", "finished_at": "2026-11-30T23:34:01",
    "trace_id": "ab" * 16,
    "events": [{"node": "planner", "phase": "EXIT", "status": "OK", "payload": {}}],
    "invocations": [{"invocation_id": 1, "tool_name": "query_metrics", "agent_result": TOOL_RESULT}],
    "self_evaluation": {
        "rule_evaluation": {"evidence_calls": 4, "hits": 3, "no_hits": 1, "failures": 0, "deduped": 0},
        "answer": {"structured_answer": {"sections": [{"title": "结论", "items": [{"text": "很" * 50}]}]}},
        "verifier_evaluation": {
            "model_verdict": "PASS", "verdict_ceiling": "PASS",
            "claim_checks": [
                {"claim_id": "c1", "claim_type": "root_cause", "verification": "reasonable_inference", "check_id": "",
                 "claim_text": "pay-svc 在 2026-11-30T11:53:00Z 的发布很可能是 CPU 升高的原因",
                 "detail": "checked causal link (change): the change precedes the effect by 3 min"},
                {"claim_id": "c2", "claim_type": "symptom", "verification": "unsupported", "check_id": "value.binding",
                 "claim_text": "CPU 达到 [thread-2] 99%", "detail": "no cited ref states 99%"},
            ],
            "rejection_ledger": [{"stage": "side_text", "item": "hypotheses[1]", "claim_id": "",
                                  "rule": "side_text.ungrounded",
                                  "detail": "key_term.absent: cjk_noun '热点' does not occur in the cited evidence"}],
        },
    },
}


def _summary(run_id: str = RUN_ID, answer: str = ANSWER, **fields) -> gateway_pb2.RunSummary:
    return gateway_pb2.RunSummary(
        run_id=run_id, session_id=SESSION_ID, query="pay-svc 的 CPU 高吗？", status="COMPLETED",
        effective_verdict=enum_number(enums_pb2.Verdict.DESCRIPTOR, "PASS"), created_at="2026-11-30T23:34:00+00:00",
        finished_at="2026-11-30T23:34:01+00:00", answer_line=answer, **fields)


class _Gateway(gateway_pb2_grpc.GatewayServiceServicer):
    """Answers ListRuns and GetRun as a gateway configured with Asia/Shanghai would."""

    def __init__(self) -> None:
        self.list_requests: list[gateway_pb2.ListRunsRequest] = []

    def ListRuns(self, request, context):  # gRPC's name
        self.list_requests.append(request)
        return gateway_pb2.ListRunsResponse(runs=[_summary(), _summary(OTHER_RUN_ID, "")],
                                            time_zone="Asia/Shanghai")

    def GetRun(self, request, context):  # gRPC's name
        if request.run_id != RUN_ID:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id!r} in this session")
        audit = struct_pb2.Struct()
        audit.update(AUDIT)
        return gateway_pb2.GetRunResponse(run_id=RUN_ID, session_id=SESSION_ID, status="COMPLETED", audit=audit,
                                          time_zone="Asia/Shanghai")


@pytest.fixture()
def gateway(monkeypatch):
    for name in ("ATTEST_GATEWAY_TLS_CA_FILE", "ATTEST_GATEWAY_TLS_CERT_FILE", "ATTEST_GATEWAY_TLS_KEY_FILE",
                 "ATTEST_TIME_ZONE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    fake = _Gateway()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", fake
    finally:
        server.stop(None)


def _attest(capsys, addr: str, *args: str) -> tuple[int, str, str]:
    code = main(["--addr", addr, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- cutting between tokens -----------------------------------------------------------------------

def test_a_cut_never_splits_a_timestamp_or_a_name():
    text = "pay-svc 在 2026-11-30 11:50:00 出现 query_metrics 异常"
    for budget in range(8, len(text)):
        shown = cut(text, budget)
        assert len(shown) <= budget and shown.endswith("…"), shown
        kept = shown.removesuffix("…")
        assert text.startswith(kept)
        assert "2026-11-30 11:50:00" in kept or "2026" not in kept, shown
        assert "query_metrics" in kept or "query" not in kept, shown
    assert cut(text, len(text)) == text


def test_a_cut_counts_terminal_cells_and_cuts_cjk_between_characters():
    assert cut("很" * 10, 9, cell_len) == "很" * 4 + "…"  # 4 × 2 cells + 1
    assert cut("x" * 30, 10) == "x" * 9 + "…", "a token longer than the budget is cut inside"


# --- attest runs ---------------------------------------------------------------------------------

def test_a_listed_run_shows_its_full_id_its_local_time_and_fits_the_width():
    display = time_display("Asia/Shanghai")
    lines = run_lines(_summary(), display, 70, with_session=True)
    assert lines[0] == f"{RUN_ID}  2026-12-01 07:34:00  完成"
    assert lines[1] == "  问：pay-svc 的 CPU 高吗？"
    assert lines[2].startswith("  答（PASS）：在所查范围内未发现异常（pay-svc：2026-11-30 19:50:00 ") and lines[2].endswith("…")
    assert "T11:50" not in lines[2] and "Z " not in lines[2], "the answer's times are local too"
    assert all(cell_len(line) <= 70 for line in lines[1:]), lines
    assert lines[3] == f"  会话：{SESSION_ID}"


def test_the_answer_is_cut_between_tokens_at_every_width():
    display = time_display("Asia/Shanghai")
    shown_answer = display.localize(ANSWER).text
    for width in range(20, 140, 3):
        line = run_lines(_summary(), display, width, with_session=False)[2]
        assert cell_len(line) <= width
        body = line.split("：", 1)[1].removesuffix("…")
        assert shown_answer.startswith(body), (width, line)
        rest = shown_answer[len(body):]
        # The cut falls before a whole token: what follows it never starts mid-word or mid-time.
        assert not (body and rest and body[-1].isascii() and body[-1].isalnum() and rest[0].isascii()
                    and rest[0].isalnum()), (width, line)
        assert not body.endswith(("2026-11-30", ":")), (width, line)


def test_runs_without_a_session_lists_the_callers_runs_and_the_printed_id_shows_the_run(gateway, capsys):
    addr, fake = gateway
    code, out, _ = _attest(capsys, addr, "runs")
    assert code == 0
    assert fake.list_requests[0].session_id == "" and fake.list_requests[0].page_size == 20
    assert out.startswith("你最近的诊断（新的在前）")
    assert "时间均为 Asia/Shanghai 时间（UTC+08:00）" in out
    printed = [line.split()[0] for line in out.splitlines() if line[:1].isalnum() and len(line.split()[0]) == 32]
    assert printed == [RUN_ID, OTHER_RUN_ID]
    assert all(cell_len(line) <= 80 for line in out.splitlines()), out

    code, out, err = _attest(capsys, addr, "run-show", printed[0])
    assert code == 0, err
    assert f"run {RUN_ID}" in out


def test_runs_of_a_session_names_it_and_limit_zero_asks_for_every_page(gateway, capsys):
    addr, fake = gateway
    code, out, _ = _attest(capsys, addr, "runs", "--session", SESSION_ID, "--limit", "0")
    assert code == 0 and out.startswith(f"会话 {SESSION_ID} 的诊断（新的在前）")
    assert fake.list_requests[-1].session_id == SESSION_ID and fake.list_requests[-1].page_size == 0
    assert "会话：" not in out, "a session's list does not repeat its id on every run"
    assert _attest(capsys, addr, "runs", "--limit", "-1")[0] == 2


# --- attest run-show -----------------------------------------------------------------------------

def _shown(audit: dict) -> str:
    console = Console(record=True, width=100)
    render_run(console, audit, time_display("Asia/Shanghai"))
    return console.export_text()


def test_run_show_prints_claim_texts_with_chinese_labels_and_whole_counts():
    text = _shown(json.loads(json.dumps(AUDIT).replace(": 4,", ": 4.0,")))
    assert "c1  根因 · 合理推断" in text
    assert "pay-svc 在 2026-11-30 19:53:00 的发布很可能是 CPU 升高的原因" in text, "the claim's text, in local time"
    assert "c2  症状 · 证据不支持 · 数值没有所引证据的支持（value.binding）" in text
    assert "CPU 达到 [thread-2] 99%" in text, "brackets in a claim are text, not markup"
    assert "补充内容 · hypotheses[1]：模型写的补充内容（假设、建议……）缺少证据（side_text.ungrounded）" in text
    assert "证据统计: 4 次取证调用, 命中 3, 无命中 1, 失败 0, 重复 0" in text
    assert "4.0" not in text
    assert "checked causal link" not in text and "does not occur" not in text, "no English detail"
    assert "时间: 2026-12-01 07:34:00 至 2026-12-01 07:34:01（Asia/Shanghai）" in text


def test_every_grounding_check_has_a_chinese_label():
    assert set(CHECK_LABELS) == set(ALL_CHECK_IDS)


def test_run_show_json_is_bounded_unless_full(gateway, capsys):
    addr, _ = gateway
    code, out, err = _attest(capsys, addr, "run-show", "--json", RUN_ID)
    assert code == 0
    shown = json.loads(out)
    result = shown["invocations"][0]["agent_result"]
    left_out = len(TOOL_RESULT) - JSON_MAX_STRING_CHARS
    assert result.startswith(TOOL_RESULT[:JSON_MAX_STRING_CHARS]) and f"省略 {left_out} 字符" in result
    assert "--full" in result and err == ""
    assert isinstance(shown["self_evaluation"]["answer"]["structured_answer"], str)
    assert shown["self_evaluation"]["rule_evaluation"]["evidence_calls"] == 4
    assert isinstance(shown["self_evaluation"]["rule_evaluation"]["evidence_calls"], int)
    assert len(out) < len(TOOL_RESULT)

    code, out, err = _attest(capsys, addr, "run-show", "--json", "--full", RUN_ID)
    assert code == 0 and err == ""
    full = json.loads(out)
    assert full["invocations"][0]["agent_result"] == TOOL_RESULT
    assert full["self_evaluation"]["answer"] == AUDIT["self_evaluation"]["answer"]


def test_bounded_cuts_long_lists_and_says_how_many_items_were_left_out():
    shown = bounded({"verified_evidence": list(range(25)), "short": "x", "answer": "答" * 1000})
    assert shown["verified_evidence"][:20] == list(range(20)) and len(shown["verified_evidence"]) == 21
    assert shown["verified_evidence"][20].startswith("…（省略其后 5 项")
    assert shown["short"] == "x" and shown["answer"] == "答" * 1000, "the answer is kept whole"


def test_run_show_of_an_unknown_id_is_one_error_line(gateway, capsys):
    addr, _ = gateway
    code, out, err = _attest(capsys, addr, "run-show", OTHER_RUN_ID[:8])
    assert code == 1 and out == "" and "NOT_FOUND" in err
