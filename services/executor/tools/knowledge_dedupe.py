"""Deduplication of knowledge hits within one run (DESIGN §2: a `lookup_knowledge` hit already
returned earlier in the run is marked deduped; it is no new evidence).

Pure functions, for whoever runs the tools of a run (the executor's ToolRunner):

    seen = earlier_knowledge_hits(store.list_for_run(run_id))   # once per round: earlier rounds too
    ...
    result = registry.invoke(tool_name, arguments)
    if tool_name == "lookup_knowledge":
        result = mark_deduped(result, seen)
        seen |= knowledge_hit_keys(result)
    store.complete(invocation_id, evidence_status=result.evidence_status,
                   agent_result=result.agent_result, evidence_refs=result.evidence_refs,
                   deduped=result.deduped)

A chunk seen before is kept in `agent_result` with `"deduped": true` and its text dropped, and it
has no evidence ref in this invocation (its evidence is the earlier invocation's), so it can only
be cited where it first appeared. When every chunk was seen before, the result is NO_EVIDENCE
with `deduped=True` (stored as `retrieval_details.deduped`) and only its `summary` ref.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from services.executor.tools.knowledge_tool import summary_text
from services.executor.tools.tool_result import ToolResult, bounded_text
from shared.contracts import EvidenceRef, ToolInvocation
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE as TOOL_NAME


def _chunks(agent_result: dict[str, Any]) -> Iterable[tuple[int, int, dict[str, Any]]]:
    for i, doc in enumerate(agent_result.get("docs") or []):
        for j, chunk in enumerate(doc.get("chunks") or []):
            if isinstance(chunk, dict):
                yield i, j, chunk


def _load(agent_result: str | None) -> dict[str, Any] | None:
    try:
        data = json.loads(agent_result or "")
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tool") == TOOL_NAME else None


def knowledge_hit_keys(result: ToolResult) -> set[str]:
    """The hit ids a lookup_knowledge result returned as new evidence (deduped ones excluded)."""
    data = _load(result.agent_result) if result.tool_name == TOOL_NAME else None
    if data is None:
        return set()
    return {chunk["hit_id"] for _, _, chunk in _chunks(data) if chunk.get("hit_id") and not chunk.get("deduped")}


def earlier_knowledge_hits(invocations: Iterable[ToolInvocation]) -> set[str]:
    """Hit ids already returned as evidence by the given (persisted) invocations of a run."""
    seen: set[str] = set()
    for invocation in invocations:
        if invocation.tool_name != TOOL_NAME or invocation.lifecycle != "READY":
            continue
        data = _load(invocation.agent_result)
        if data is not None:
            seen |= {c["hit_id"] for _, _, c in _chunks(data) if c.get("hit_id") and not c.get("deduped")}
    return seen


def mark_deduped(result: ToolResult, earlier_hits: set[str]) -> ToolResult:
    """`result` with every hit in `earlier_hits` marked deduped (see the module docstring). A
    result of another tool, or one without any earlier hit, is returned unchanged."""
    if result.tool_name != TOOL_NAME or not earlier_hits:
        return result
    data = _load(result.agent_result)
    if data is None:
        return result
    repeated: set[str] = set()
    total = 0
    for i, j, chunk in _chunks(data):
        total += 1
        if chunk.get("hit_id") in earlier_hits:
            chunk["deduped"] = True
            chunk["text"] = None
            repeated.add(f"docs[{i}].chunks[{j}]")
    if not repeated:
        return result
    fresh = total - len(repeated)
    summary = summary_text(str(data.get("query", "")), int(data.get("top_k") or 0), len(data.get("docs") or []), total)
    summary += (
        ", all already returned earlier in this run (deduped)" if not fresh
        else f", {len(repeated)} already returned earlier in this run (deduped)"
    )
    data["summary"] = summary
    data["deduped_chunks"] = len(repeated)
    refs = [ref for ref in result.evidence_refs if ref.raw_path not in repeated and ref.raw_path != "summary"]
    summary_source = next((ref.source for ref in result.evidence_refs if ref.raw_path == "summary"), "")
    refs.append(EvidenceRef(raw_path="summary", text=bounded_text(summary), source=summary_source))
    return result.model_copy(update={
        "agent_result": json.dumps(data, ensure_ascii=False, separators=(",", ":")),
        "evidence_refs": refs,
        "evidence_status": "EVIDENCE_FOUND" if fresh else "NO_EVIDENCE",
        "deduped": not fresh,
    })
