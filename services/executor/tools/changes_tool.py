"""`query_changes`: deployments and configuration changes over a window, one evidence ref per
change record.

raw_path conventions (relative to this invocation's evidence_refs):
- `changes[k]` — text `<ts> <kind> <service> by <author>: <summary>` (at most 500 characters)
- `summary`    — text `query_changes service=<s|*> [kind=<k>] <start>..<end>: <n> change records[, <k> most recent returned]`
A result without any record is NO_EVIDENCE and carries only the `summary` ref.
"""

from __future__ import annotations

from services.executor.tools.backends import ChangesBackend
from services.executor.tools.tool_result import ToolResult, bounded_scope, bounded_text, iso_utc
from shared.core.tool_catalogue import QUERY_CHANGES as TOOL_NAME
from shared.core.tool_catalogue import QueryChangesArguments
from shared.core.tool_results import ChangeRecord, ChangesResult, dump_result, ref_count, ref_text

DESCRIPTION = (
    "Deployments and configuration changes between start and end (of one service, or of every "
    "service), optionally of one kind (deploy, config, rollback, scale…); the most recent `limit` "
    "records. Each record is an evidence ref addressed as changes[k]."
)


MAX_SUMMARY_CHARS = 400


def change_text(ts: str, kind: str, service: str, author: str, summary: str) -> str:
    """The evidence text of one change record (the renderer's, `shared.core.tool_results.ref_text`)."""
    result = ChangesResult(tool=TOOL_NAME, total_matches=1, changes=[
        ChangeRecord(ts=ts, kind=kind, service=service, author=author, summary=bounded_text(summary, MAX_SUMMARY_CHARS)),
    ])
    return ref_text(result, "changes[0]") or ""


def query_changes(backend: ChangesBackend, args: QueryChangesArguments) -> ToolResult:
    start, end = iso_utc(args.start), iso_utc(args.end)
    result = backend.query_range(args.service, args.start, args.end, args.kind, args.limit)
    records = result.records[-args.limit:]
    changes = [
        ChangeRecord(ts=iso_utc(record.ts), service=record.service, kind=record.kind, author=record.author,
                     summary=bounded_text(record.summary, MAX_SUMMARY_CHARS))
        for record in records
    ]
    filters = f" kind={args.kind}" if args.kind else ""
    summary = f"{TOOL_NAME} service={args.service or '*'}{filters} {start}..{end}: {result.total_matches} change records"
    if result.total_matches > len(records):
        summary += f", {len(records)} most recent returned"
    stored = ChangesResult(
        tool=TOOL_NAME, service=args.service, kind=args.kind, start=start, end=end,
        total_matches=result.total_matches, returned=len(records), changes=changes, summary=summary,
    )
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if records else "NO_EVIDENCE",
        agent_result=dump_result(stored),
        source=backend.source_name,
        ref_count=ref_count(stored),
        request_scope=bounded_scope(
            tool=TOOL_NAME, service=args.service, kind=args.kind, start=args.start, end=args.end, limit=args.limit
        ),
    )
