"""`query_logs`: log lines of one service over a window, one evidence ref per returned line.

raw_path conventions (relative to this invocation's evidence_refs):
- `hits[k]` — text `<ts> <LEVEL> <service> host=<host> <message>` (at most 500 characters; a longer
  multi-line message keeps its first line and its exception lines, see `log_entry.py`)
- `summary` — text `query_logs service=<s> [level=<L,…>] [contains="…"] <start>..<end>: <n> matching lines[, <k> returned]`
A result without any line is NO_EVIDENCE and carries only the `summary` ref.
"""

from __future__ import annotations

import json

from services.executor.tools.backends import LogsBackend
from services.executor.tools.log_entry import compact_entry
from services.executor.tools.tool_result import MAX_REF_TEXT_CHARS, ToolResult, bounded_scope, bounded_text, iso_utc
from shared.contracts import EvidenceRef
from shared.core.tool_catalogue import QUERY_LOGS as TOOL_NAME
from shared.core.tool_catalogue import QueryLogsArguments

DESCRIPTION = (
    "Log lines of one service between start and end, optionally filtered by level(s) and a "
    "case-insensitive substring; the most recent `limit` lines. Each line is an evidence ref "
    "addressed as hits[k]."
)
MAX_MESSAGE_CHARS = 400


def hit_text(ts: str, level: str, service: str, host: str, message: str) -> str:
    prefix = f"{ts} {level} {service} host={host} "
    room = MAX_REF_TEXT_CHARS - len(prefix)
    if room >= MAX_REF_TEXT_CHARS // 4:  # else the prefix itself is the problem: cut as before
        message = compact_entry(message, room)
    return bounded_text(prefix + message)


def query_logs(backend: LogsBackend, args: QueryLogsArguments) -> ToolResult:
    start, end = iso_utc(args.start), iso_utc(args.end)
    result = backend.query_range(args.service, args.start, args.end, args.levels, args.contains, args.limit)
    records = result.records[-args.limit:]
    scope = bounded_scope(
        tool=TOOL_NAME, service=args.service, level=args.levels, contains=args.contains,
        start=args.start, end=args.end, limit=args.limit,
    )

    refs: list[EvidenceRef] = []
    hits: list[dict] = []
    for k, record in enumerate(records):
        stamp = iso_utc(record.ts)
        refs.append(EvidenceRef(
            raw_path=f"hits[{k}]",
            text=hit_text(stamp, record.level, record.service, record.host, record.message),
            source=backend.source_name,
            timestamp=stamp,
        ))
        hits.append({
            "ts": stamp,
            "level": record.level,
            "host": record.host,
            "message": compact_entry(record.message, MAX_MESSAGE_CHARS),
        })

    filters = ""
    if args.levels:
        filters += f" level={','.join(args.levels)}"
    if args.contains:
        filters += f" contains={json.dumps(args.contains, ensure_ascii=False)}"
    summary = f"{TOOL_NAME} service={args.service}{filters} {start}..{end}: {result.total_matches} matching lines"
    if result.total_matches > len(records):
        summary += f", {len(records)} most recent returned"
    refs.append(EvidenceRef(raw_path="summary", text=bounded_text(summary), source=backend.source_name, timestamp=end))
    agent_result = {
        "tool": TOOL_NAME,
        "service": args.service,
        "level": args.levels,
        "contains": args.contains,
        "start": start,
        "end": end,
        "total_matches": result.total_matches,
        "returned": len(records),
        "hits": hits,
        "summary": summary,
    }
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if records else "NO_EVIDENCE",
        agent_result=json.dumps(agent_result, ensure_ascii=False, separators=(",", ":")),
        evidence_refs=refs,
        request_scope=scope,
    )
