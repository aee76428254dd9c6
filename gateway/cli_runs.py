"""`attest runs` and `attest run-show`: a caller's runs, and the persisted audit of one of them.

    attest runs                         the caller's recent runs, newest first (--limit N; 0: all)
    attest runs --session ID            the runs of one of the caller's sessions
    attest run-show RUN_ID              the audit of a run, for a person
    attest run-show --json RUN_ID       the audit as JSON, long values cut (--full: everything)

`runs` prints each run's full id, so that it can be pasted into `run-show`. Times are shown in the
zone the gateway shows answers in (it names it in each response; a gateway that does not gets
ATTEST_TIME_ZONE), and every cut falls between tokens (`gateway/text_cut.py`), never inside a
timestamp or a name.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import json_format
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.cli_connection import bearer_metadata, caller_token, fail, gateway_stub
from gateway.progress_events import PROGRESS_KEY
from gateway.terminal_text import TerminalConsole, printable, terminal_json
from gateway.text_cut import cut
from shared.core.grounding import check_ids
from shared.core.templates import TYPE_LABEL
from shared.error_details import describe
from shared.local_time import DEFAULT_TIME_ZONE, LocalTimeDisplay, UnknownTimeZone
from shared.proto_convert import message_to_plain, spec_value

DEFAULT_LIMIT = 20
# --json without --full: a string longer than this many characters, or a list longer than this
# many items, is cut, and the cut says how much was left out.
JSON_MAX_STRING_CHARS = 400
JSON_MAX_LIST_ITEMS = 20
# The structured answer repeats the answer (`answer`) with every series' points: the bulk of an
# audit, and nothing a reader of the bounded view misses. The answer itself is kept whole.
_REPEATED_ANSWER = ("self_evaluation", "answer", "structured_answer")
_KEPT_WHOLE = ("answer",)
INDENT = 4

STATUS_LABELS = {"RUNNING": "进行中", "COMPLETED": "完成", "FALLBACK": "安全回退", "FAILED": "失败",
                 "CANCELLED": "已取消"}
VERIFICATION_LABELS = {
    "direct_observation": "直接观察",
    "reasonable_inference": "合理推断",
    "overstated": "说过了头",
    "unsupported": "证据不支持",
    "external_unknown": "证据之外，无法核实",
    "contradicted": "与证据矛盾",
}
STAGE_LABELS = {
    "executor_contract": "取证输出格式", "gatekeeper": "引用校验", "verifier": "核验", "side_text": "补充内容",
    "answer_guard": "回答检查", "semantic_guard": "语义核验", "evidence_guard": "证据检查",
}
CHECK_LABELS = {
    check_ids.VALUE_BINDING: "数值没有所引证据的支持",
    check_ids.VALUE_COMPARISON: "比较或极值没有所引证据的支持",
    check_ids.NUMBER_WORDS: "用文字写的数量没有所引证据的支持",
    check_ids.NUMBER_VAGUE: "笼统的数量词（大量、多次……）没有证据支持",
    check_ids.POLARITY_NEGATION: "说「没有」或「均正常」，却没有覆盖相应范围的观察",
    check_ids.POLARITY_ABSOLUTE: "全称说法没有覆盖整个范围的汇总",
    check_ids.POLARITY_EXCLUSION: "排除某个原因不能当作已确认的观察",
    check_ids.KEY_TERM_ABSENT: "关键词没有出现在所引证据中",
    check_ids.CAUSAL_UNHEDGED: "原因说得过于肯定，事件证据并未说明",
    check_ids.CAUSAL_LINK: "所引证据构不成可接受的因果关联",
    check_ids.QUIET_SERIES: "说序列平稳，所引汇总却显示上升或无法说明",
    check_ids.SIDE_TEXT_UNGROUNDED: "模型写的补充内容（假设、建议……）缺少证据",
    check_ids.SIDE_TEXT_MISSING_INFO: "模型写的缺失信息（只由核验给出，不展示）",
    check_ids.STATEMENT_FIELD: "结论的某一项（对象、指标、状态、数量……）没有所引证据的支持",
    check_ids.ACTION_STATE_CHANGE: "改变系统状态的操作未经人工确认",
}


# --- times ---------------------------------------------------------------------------------------

def time_display(zone_name: str) -> LocalTimeDisplay:
    """The zone the gateway named, else ATTEST_TIME_ZONE, else the default; a name this host's tz
    database lacks falls through to the next, and UTC (named as such) is the last resort."""
    for name in (zone_name, os.environ.get("ATTEST_TIME_ZONE", ""), DEFAULT_TIME_ZONE):
        try:
            return LocalTimeDisplay(name)
        except UnknownTimeZone:
            continue
    return LocalTimeDisplay("UTC")


def local_time(display: LocalTimeDisplay, stamp: str) -> str:
    """A stored UTC timestamp in the display zone, to the second; "-" for none."""
    if not stamp:
        return "-"
    return display.format(datetime.fromisoformat(stamp.replace("Z", "+00:00")))


# --- attest runs ---------------------------------------------------------------------------------

def _outcome(run: gateway_pb2.RunSummary) -> str:
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, run.effective_verdict)
    fallback = spec_value(enums_pb2.FallbackType.DESCRIPTOR, run.fallback_type)
    return verdict or (f"回退 {fallback}" if fallback else "")


def run_lines(run: gateway_pb2.RunSummary, display: LocalTimeDisplay, width: int, *, with_session: bool) -> list[str]:
    """One run of a list, each line at most `width` cells but the first: the full run id, its
    start in the display zone and its status are never cut."""
    status = STATUS_LABELS.get(run.status, run.status)
    outcome = _outcome(run)
    lines = [f"{run.run_id}  {local_time(display, run.created_at)}  {status}",
             cut(f"  问：{printable(run.query, one_line=True)}", width, cell_len)]
    answer = display.localize(printable(run.answer_line, one_line=True)).text
    if answer or outcome:
        lines.append(cut(f"  答{f'（{outcome}）' if outcome else ''}：{answer or '-'}", width, cell_len))
    if with_session:
        lines.append(f"  会话：{run.session_id}")
    return lines


def render_runs(console: Console, runs: list[gateway_pb2.RunSummary], display: LocalTimeDisplay, *,
                session_id: str = "", more: bool = False) -> None:
    width = console.width
    title = f"会话 {session_id} 的诊断（新的在前）" if session_id else "你最近的诊断（新的在前）"
    console.print(title, highlight=False, markup=False)
    if not runs:
        console.print("（还没有诊断）", highlight=False, markup=False)
        return
    for run in runs:
        console.print()
        for line in run_lines(run, display, width, with_session=not session_id):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print()
    notes = [display.zone_note(), "详情：attest run-show <run id>"]
    if more:
        notes.append("还有更早的诊断：--limit N 列出更多，--limit 0 列出全部")
    for note in notes:
        console.print(f"[dim]{note}[/dim]", highlight=False)


def fetch_runs(stub: gateway_pb2_grpc.GatewayServiceStub, metadata: tuple[tuple[str, str], ...], session_id: str,
               *, page_size: int = 0, limit: int = DEFAULT_LIMIT) -> tuple[list[gateway_pb2.RunSummary], bool, str]:
    """At most `limit` runs (0: all), newest first, read page by page; whether more remain, and the
    zone the gateway shows times in."""
    runs: list[gateway_pb2.RunSummary] = []
    page_token = ""
    zone = ""
    while True:
        size = page_size or (min(limit - len(runs), 100) if limit else 0)
        response = stub.ListRuns(gateway_pb2.ListRunsRequest(session_id=session_id, page_size=size,
                                                             page_token=page_token),
                                 timeout=30, metadata=metadata)
        runs.extend(response.runs)
        zone = zone or response.time_zone
        page_token = response.next_page_token
        if not page_token or (limit and len(runs) >= limit):
            break
    more = bool(page_token) or (bool(limit) and len(runs) > limit)
    return runs[:limit] if limit else runs, more, zone


def list_runs(addr: str, session_id: str = "", *, token: str | None = None, page_size: int = 0,
              limit: int = DEFAULT_LIMIT, as_json: bool = False,
              credentials: grpc.ChannelCredentials | None = None) -> int:
    """`attest runs`: the session's runs, or without one the caller's recent runs."""
    channel, stub = gateway_stub(addr, credentials)
    try:
        with channel:
            runs, more, zone = fetch_runs(stub, bearer_metadata(caller_token(token)), session_id,
                                          page_size=page_size, limit=limit)
    except grpc.RpcError as exc:
        return fail(TerminalConsole(stderr=True), describe(exc), 1)
    if as_json:
        print(terminal_json([message_to_plain(run) for run in runs]))
    else:
        render_runs(TerminalConsole(), runs, time_display(zone), session_id=session_id, more=more)
    return 0


# --- attest run-show -----------------------------------------------------------------------------

def whole_numbers(value: Any) -> Any:
    """The audit with its counts as integers again (a protobuf Struct keeps every number as a
    double: `4.0` calls)."""
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def bounded(audit: dict[str, Any]) -> dict[str, Any]:
    """The audit for `--json` without `--full`: the structured answer
    (a repeat of `answer`) is left out, a string beyond JSON_MAX_STRING_CHARS (but the answer) and
    a list beyond JSON_MAX_LIST_ITEMS are cut; each cut says, in place, how much was left out."""
    def walk(value: Any, path: tuple[str, ...]) -> Any:
        if path == _REPEATED_ANSWER:
            return f"（省略：结构化回答，{len(json.dumps(value, ensure_ascii=False))} 字符，与 answer 同一回答；--full 显示全部）"
        if isinstance(value, dict):
            return {key: walk(item, (*path, key)) for key, item in value.items()}
        if isinstance(value, list):
            kept = [walk(item, (*path, "[]")) for item in value[:JSON_MAX_LIST_ITEMS]]
            if len(value) > JSON_MAX_LIST_ITEMS:
                kept.append(f"…（省略其后 {len(value) - JSON_MAX_LIST_ITEMS} 项；--full 显示全部）")
            return kept
        if isinstance(value, str) and len(value) > JSON_MAX_STRING_CHARS and path != _KEPT_WHOLE:
            return f"{value[:JSON_MAX_STRING_CHARS]}…（省略 {len(value) - JSON_MAX_STRING_CHARS} 字符；--full 显示全部）"
        return value

    shown: dict[str, Any] = walk(audit, ())
    return shown


def _section(console: Console, title: str) -> None:
    console.print()
    console.print(f"[bold]{title}[/bold]", highlight=False)


def _paragraph(console: Console, text: str) -> None:
    """Text wrapped at the console's width between words, indented under its heading."""
    console.print(Padding(Text(printable(text)), (0, 0, 0, INDENT), expand=False))


def render_run(console: Console, audit: dict[str, Any], display: LocalTimeDisplay | None = None) -> None:
    """A person's view of a persisted run: verdicts, the checked claims with their texts, the
    rejection ledger, evidence counts and the path. Times in the display zone."""
    display = display or time_display("")
    audit = whole_numbers(audit)
    evaluation = (audit.get("self_evaluation") or {}).get("verifier_evaluation") or {}
    console.rule(Text(f"run {printable(str(audit.get('run_id')), one_line=True)}", style="bold"), align="left")
    console.print(f"问题: {printable(str(audit.get('query')), one_line=True)}", highlight=False, markup=False)
    started, finished = (local_time(display, str(audit.get(key) or "")) for key in ("created_at", "finished_at"))
    console.print(f"时间: {started} 至 {finished}（{display.zone_name}）", highlight=False, markup=False)
    status = str(audit.get("status") or "")
    console.print(f"状态: {STATUS_LABELS.get(status, status)}   有效结论: {audit.get('effective_verdict') or '-'}   "
                  f"模型结论: {evaluation.get('model_verdict') or '-'}   上限: {evaluation.get('verdict_ceiling') or '-'}   "
                  f"回退: {audit.get('fallback_type') or '-'}", highlight=False, markup=False)
    console.print(f"trace: {audit.get('trace_id') or '-'}   会话: {audit.get('session_id') or '-'}",
                  highlight=False, markup=False)
    _render_coverage(console, evaluation)
    _render_claim_checks(console, evaluation.get("claim_checks") or [], display)
    _render_ledger(console, evaluation.get("rejection_ledger") or [])
    rules = (audit.get("self_evaluation") or {}).get("rule_evaluation")
    if rules:
        console.print()
        console.print(f"证据统计: {rules.get('evidence_calls')} 次取证调用, 命中 {rules.get('hits')}, "
                      f"无命中 {rules.get('no_hits')}, 失败 {rules.get('failures')}, 重复 {rules.get('deduped')}",
                      highlight=False, markup=False)
    path = " → ".join(f"{e.get('node')}:{e.get('status') or e.get('phase')}" for e in audit.get("events") or []
                      if _on_path(e))
    console.print(f"路径: {path}", highlight=False, markup=False)


def _render_coverage(console: Console, evaluation: dict[str, Any]) -> None:
    coverage = evaluation.get("service_coverage") or {}
    if coverage.get("named"):
        unknown = [u.get("name", "") + (f"（是否指 {'、'.join(u['suggestions'])}？）" if u.get("suggestions") else "")
                   for u in coverage.get("unknown") or []]
        console.print(f"服务: 已检查 {', '.join(coverage.get('checked') or []) or '-'}   "
                      f"未找到 {', '.join(unknown) or '-'}   未检查 {', '.join(coverage.get('unchecked') or []) or '-'}"
                      + ("   （服务目录不可用，名称未核对）" if coverage.get("catalogue_unavailable") else ""),
                      highlight=False, markup=False)
    if evaluation.get("coverage_cap"):
        cap = evaluation["coverage_cap"]
        console.print(f"可信度上限: {cap.get('verdict_before_cap')} → {cap.get('verdict')}（有服务未检查）", highlight=False,
                      markup=False)


def _render_claim_checks(console: Console, checks: list[dict[str, Any]], display: LocalTimeDisplay) -> None:
    if not checks:
        return
    _section(console, f"核验的结论（{len(checks)} 条）")
    for check in checks:
        verification = str(check.get("verification") or "")
        labels = [TYPE_LABEL.get(str(check.get("claim_type") or ""), ""),
                  VERIFICATION_LABELS.get(verification, verification)]
        failed = str(check.get("check_id") or "")
        if failed:
            labels.append(f"{CHECK_LABELS.get(failed, '未通过检查')}（{failed}）")
        head = f"{check.get('claim_id') or '-'}  " + " · ".join(label for label in labels if label)
        console.print(printable(head, one_line=True), highlight=False, markup=False)
        _paragraph(console, display.localize(str(check.get("claim_text") or "（没有记录结论原文）")).text)


def _render_ledger(console: Console, ledger: list[dict[str, Any]]) -> None:
    if not ledger:
        return
    _section(console, f"被拦下的内容（{len(ledger)} 条）")
    for entry in ledger:
        stage = str(entry.get("stage") or "")
        rule = str(entry.get("rule") or entry.get("check") or "")
        where = entry.get("claim_id") or entry.get("item") or "-"
        reason = f"{CHECK_LABELS[rule]}（{rule}）" if rule in CHECK_LABELS else f"未通过规则 {rule or '-'}"
        console.print(printable(f"{STAGE_LABELS.get(stage, stage)} · {where}：{reason}", one_line=True),
                      highlight=False, markup=False)


def _on_path(event: dict[str, Any]) -> bool:
    """A step of the run's path: a node's exit or note, but not the run's start or a single tool
    call (those are streamed and kept too; the path stays the graph's)."""
    code = str(((event.get("payload") or {}).get(PROGRESS_KEY) or {}).get("code") or "")
    return event.get("phase") in ("EXIT", "INFO") and code != "RUN_STARTED" and not code.startswith("TOOL_CALL_")


def run_show(addr: str, run_id: str, *, token: str | None = None, session_id: str = "", as_json: bool = False,
             full: bool = False, credentials: grpc.ChannelCredentials | None = None) -> int:
    """`attest run-show`: the run's audit for a person, or as JSON (bounded unless `full`)."""
    channel, stub = gateway_stub(addr, credentials)
    try:
        with channel:
            response = stub.GetRun(gateway_pb2.GetRunRequest(run_id=run_id, session_id=session_id),
                                   timeout=30, metadata=bearer_metadata(caller_token(token)))
    except grpc.RpcError as exc:
        return fail(TerminalConsole(stderr=True), describe(exc), 1)
    audit = whole_numbers(json_format.MessageToDict(response.audit))
    if not as_json:
        render_run(TerminalConsole(), audit, time_display(response.time_zone))
        return 0
    print(terminal_json(audit if full else bounded(audit)))
    return 0
