"""`query_logs`: log lines of one service over a window, one evidence ref per returned line.

A line's level comes from its level label, else from the line (`shared.core.log_levels`); a line
whose level cannot be read is UNKNOWN. Counts, and the first and last matching line, come from the
whole window; when more lines match than `limit`, the oldest half and the newest half are returned.

raw_path conventions (relative to this invocation's evidence_refs):
- `hits[k]` — text `<ts> <LEVEL> <service> host=<host> <message>` (at most 500 characters; a longer
  multi-line message keeps its first line and its exception lines, see `log_entry.py`; the stored
  hit holds the message as the text shows it)
- `summary` — text `query_logs service=<s> [level=<L,…>] [contains="…"] <start>..<end>: <n> matching
  lines[ or more (up to <m> …)][, first at <ts>, last at <ts>][; <a> oldest and <b> newest returned]
  [; <w> lines of any level][, <u> of unknown level]`
A result without any line is NO_EVIDENCE and carries only the `summary` ref.
"""

from __future__ import annotations

import json

from services.executor.tools.backends import LogQueryResult, LogsBackend, sample_lines
from services.executor.tools.log_entry import compact_entry
from services.executor.tools.tool_result import MAX_REF_TEXT_CHARS, ToolResult, bounded_scope, iso_utc
from shared.core.tool_catalogue import QUERY_LOGS as TOOL_NAME
from shared.core.tool_catalogue import QueryLogsArguments
from shared.core.tool_results import LogHit, LogsResult, dump_result, ref_count, ref_text

DESCRIPTION = (
    "Log lines of one service between start and end, optionally filtered by level(s) and a "
    "case-insensitive substring. A line's level is its level label's, else read from the line "
    "(UNKNOWN when neither states one). Counts and first/last times cover the whole window; when "
    "more lines match than `limit`, the oldest and the newest halves are returned. Each line is an "
    "evidence ref addressed as hits[k]."
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


def _summary(
    args: QueryLogsArguments, start: str, end: str, result: LogQueryResult, returned: int,
    first_ts: str | None, last_ts: str | None,
) -> str:
    """The call's scope and counts; its head, `query_logs service=<s> … <start>..<end>: <n>
    matching lines`, is what readers of the summary rely on."""
    filters = ""
    if args.levels:
        filters += f" level={','.join(args.levels)}"
    if args.contains:
        filters += f" contains={json.dumps(args.contains, ensure_ascii=False)}"
    text = f"{TOOL_NAME} service={args.service}{filters} {start}..{end}: {result.total_matches} matching lines"
    if result.matches_up_to is not None:
        text += (f" or more (up to {result.matches_up_to}: lines without a level label were selected by level "
                 "words and not all of them were read)")
    if result.total_matches and first_ts and last_ts:
        text += f", first at {first_ts}, last at {last_ts}"
    if result.total_matches > returned:
        newest = returned // 2
        text += f"; {returned - newest} oldest and {newest} newest returned"
    if result.window_lines is not None:
        text += f"; {result.window_lines} lines of any level"
        if result.unclassified_lines:
            text += f", {result.unclassified_lines} of unknown level"
    return text


def query_logs(backend: LogsBackend, args: QueryLogsArguments) -> ToolResult:
    start, end = iso_utc(args.start), iso_utc(args.end)
    result = backend.query_range(args.service, args.start, args.end, args.levels, args.contains, args.limit)
    records = sample_lines(result.records, args.limit)
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
    first_ts = iso_utc(result.first_ts) if result.first_ts else (hits[0].ts if hits else None)
    last_ts = iso_utc(result.last_ts) if result.last_ts else (hits[-1].ts if hits else None)
    summary = _summary(args, start, end, result, len(records), first_ts, last_ts)
    stored = LogsResult(
        tool=TOOL_NAME, service=args.service, level=args.levels, contains=args.contains, start=start, end=end,
        total_matches=result.total_matches, returned=len(records), hits=hits, summary=summary,
        window_lines=result.window_lines, unclassified_lines=result.unclassified_lines,
        first_ts=first_ts, last_ts=last_ts,
    )
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if records else "NO_EVIDENCE",
        agent_result=dump_result(stored),
        source=backend.source_name,
        ref_count=ref_count(stored),
        request_scope=scope,
    )
