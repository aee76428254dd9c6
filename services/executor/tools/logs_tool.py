"""`query_logs`: log lines of one service over a window, one evidence ref per returned line.

raw_path conventions (relative to this invocation's evidence_refs):
- `hits[k]` — text `<ts> <LEVEL> <service> host=<host> <message>` (at most 500 characters; a longer
  multi-line message keeps its first line and its exception lines, see `log_entry.py`; the stored
  hit holds the message as the text shows it)
- `summary` — text `query_logs service=<s> [level=<L,…>] [contains="…"] <start>..<end>: <n> matching lines[, <k> returned]`
A result without any line is NO_EVIDENCE and carries only the `summary` ref.
"""

from __future__ import annotations

import json

from services.executor.tools.backends import LogsBackend
from services.executor.tools.log_entry import compact_entry
from services.executor.tools.tool_result import MAX_REF_TEXT_CHARS, ToolResult, bounded_scope, iso_utc
from shared.core.tool_catalogue import QUERY_LOGS as TOOL_NAME
from shared.core.tool_catalogue import QueryLogsArguments
from shared.core.tool_results import LogHit, LogsResult, dump_result, ref_count, ref_text

DESCRIPTION = (
    "Log lines of one service between start and end, optionally filtered by level(s) and a "
    "case-insensitive substring; the most recent `limit` lines. Each line is an evidence ref "
    "addressed as hits[k]."
)
MAX_MESSAGE_CHARS = 400


def _stored_message(prefix: str, message: str) -> str:
    """The message as its evidence text shows it: compacted to the room the line's prefix leaves
    (an unusually long prefix: to MAX_MESSAGE_CHARS, and the text is cut)."""
    room = MAX_REF_TEXT_CHARS - len(prefix)
    return compact_entry(message, room if room >= MAX_REF_TEXT_CHARS // 4 else MAX_MESSAGE_CHARS)


def hit_text(ts: str, level: str, service: str, host: str, message: str) -> str:
    """The evidence text of one log line (the renderer's, `shared.core.tool_results.ref_text`)."""
    result = LogsResult(tool=TOOL_NAME, service=service, total_matches=1, hits=[
        LogHit(ts=ts, level=level, host=host, message=_stored_message(f"{ts} {level} {service} host={host} ", message)),
    ])
    return ref_text(result, "hits[0]") or ""


def query_logs(backend: LogsBackend, args: QueryLogsArguments) -> ToolResult:
    start, end = iso_utc(args.start), iso_utc(args.end)
    result = backend.query_range(args.service, args.start, args.end, args.levels, args.contains, args.limit)
    records = result.records[-args.limit:]
    scope = bounded_scope(
        tool=TOOL_NAME, service=args.service, level=args.levels, contains=args.contains,
        start=args.start, end=args.end, limit=args.limit,
    )
    hits: list[LogHit] = []
    for record in records:
        stamp = iso_utc(record.ts)
        service = record.service if record.service != args.service else ""
        prefix = f"{stamp} {record.level} {record.service} host={record.host} "
        hits.append(LogHit(ts=stamp, level=record.level, host=record.host, service=service,
                           message=_stored_message(prefix, record.message)))

    filters = ""
    if args.levels:
        filters += f" level={','.join(args.levels)}"
    if args.contains:
        filters += f" contains={json.dumps(args.contains, ensure_ascii=False)}"
    summary = f"{TOOL_NAME} service={args.service}{filters} {start}..{end}: {result.total_matches} matching lines"
    if result.total_matches > len(records):
        summary += f", {len(records)} most recent returned"
    stored = LogsResult(
        tool=TOOL_NAME, service=args.service, level=args.levels, contains=args.contains, start=start, end=end,
        total_matches=result.total_matches, returned=len(records), hits=hits, summary=summary,
    )
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if records else "NO_EVIDENCE",
        agent_result=dump_result(stored),
        source=backend.source_name,
        ref_count=ref_count(stored),
        request_scope=scope,
    )
