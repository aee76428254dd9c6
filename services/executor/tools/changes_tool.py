"""`query_changes`: deployments and configuration changes over a window, one evidence ref per
change record.

raw_path conventions (relative to this invocation's evidence_refs):
- `changes[k]` — text `<ts> <kind> <service> by <author>: <summary>` (at most 500 characters)
- `summary`    — text `query_changes service=<s|*> [kind=<k>] <start>..<end>: <n> change records[, <k> most recent returned]`
A result without any record is NO_EVIDENCE and carries only the `summary` ref.
"""

from __future__ import annotations

import json

from services.executor.tools.backends import ChangesBackend
from services.executor.tools.tool_result import ToolResult, bounded_scope, bounded_text, iso_utc
from shared.contracts import EvidenceRef
from shared.core.tool_catalogue import QUERY_CHANGES as TOOL_NAME
from shared.core.tool_catalogue import QueryChangesArguments

DESCRIPTION = (
    "Deployments and configuration changes between start and end (of one service, or of every "
    "service), optionally of one kind (deploy, config, rollback, scale…); the most recent `limit` "
    "records. Each record is an evidence ref addressed as changes[k]."
)


def change_text(ts: str, kind: str, service: str, author: str, summary: str) -> str:
    return bounded_text(f"{ts} {kind} {service} by {author}: {summary}")


def query_changes(backend: ChangesBackend, args: QueryChangesArguments) -> ToolResult:
    start, end = iso_utc(args.start), iso_utc(args.end)
    result = backend.query_range(args.service, args.start, args.end, args.kind, args.limit)
    records = result.records[-args.limit:]
    refs: list[EvidenceRef] = []
    projected: list[dict] = []
    for k, record in enumerate(records):
        stamp = iso_utc(record.ts)
        refs.append(EvidenceRef(
            raw_path=f"changes[{k}]",
            text=change_text(stamp, record.kind, record.service, record.author, record.summary),
            source=backend.source_name,
            timestamp=stamp,
        ))
        projected.append({
            "ts": stamp, "service": record.service, "kind": record.kind, "author": record.author,
            "summary": bounded_text(record.summary, 400),
        })
    filters = f" kind={args.kind}" if args.kind else ""
    summary = f"{TOOL_NAME} service={args.service or '*'}{filters} {start}..{end}: {result.total_matches} change records"
    if result.total_matches > len(records):
        summary += f", {len(records)} most recent returned"
    refs.append(EvidenceRef(raw_path="summary", text=bounded_text(summary), source=backend.source_name, timestamp=end))
    agent_result = {
        "tool": TOOL_NAME,
        "service": args.service,
        "kind": args.kind,
        "start": start,
        "end": end,
        "total_matches": result.total_matches,
        "returned": len(records),
        "changes": projected,
        "summary": summary,
    }
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status="EVIDENCE_FOUND" if records else "NO_EVIDENCE",
        agent_result=json.dumps(agent_result, ensure_ascii=False, separators=(",", ":")),
        evidence_refs=refs,
        request_scope=bounded_scope(
            tool=TOOL_NAME, service=args.service, kind=args.kind, start=args.start, end=args.end, limit=args.limit
        ),
    )
