"""tool_trace_summary (stage3 spec): one bounded entry per evidence-bearing invocation.

Used for audit, trace inspection and the retry planner; the Verifier never receives it. Concrete
facts (the evidence refs' own texts) come before boilerplate, and every entry stays bounded.
"""

from __future__ import annotations

import json

from shared.contracts import EVIDENCE_TOOLS, ToolInvocation, ToolTraceSummaryEntry

MAX_FACTS = 5
MAX_SUMMARY_CHARS = 600


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_invocation(invocation: ToolInvocation) -> ToolTraceSummaryEntry:
    refs = invocation.retrieval_details.evidence_refs if invocation.retrieval_details else []
    if invocation.lifecycle == "ERROR" or invocation.evidence_status == "ERROR":
        output = f"调用失败: {invocation.error or 'unknown error'}"
    elif invocation.retrieval_details and invocation.retrieval_details.deduped:
        output = "重复检索结果，无新证据"
    else:
        output = " | ".join(ref.text for ref in refs[:MAX_FACTS])
        if len(refs) > MAX_FACTS:
            output += f" | …(+{len(refs) - MAX_FACTS} refs)"
    scope = json.dumps(invocation.request, ensure_ascii=False, sort_keys=True, default=str)
    return ToolTraceSummaryEntry(
        trace_ref=f"trace-{invocation.invocation_id}",
        source_invocation_ids=[invocation.invocation_id],
        tool_name=invocation.tool_name,
        success=invocation.lifecycle == "READY" and invocation.evidence_status != "ERROR",
        input_summary=_bounded(scope, MAX_SUMMARY_CHARS),
        output_summary=_bounded(output, MAX_SUMMARY_CHARS),
        evidence_level=invocation.evidence_status or "ERROR",
    )


def build_tool_trace_summary(invocations: list[ToolInvocation]) -> list[ToolTraceSummaryEntry]:
    """Helper tools (e.g. get_current_time) are not evidence and never appear."""
    return [summarize_invocation(inv) for inv in invocations if inv.tool_name in EVIDENCE_TOOLS]
