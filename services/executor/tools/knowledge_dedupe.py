"""Deduplication of knowledge hits within one run (DESIGN §2: a `lookup_knowledge` hit already
returned earlier in the run is marked deduped; it is no new evidence).

Pure functions, for whoever runs the tools of a run (the executor's ToolRunner):

    seen = earlier_knowledge_hits(store.list_for_run(run_id))   # once per round: earlier rounds too
    ...
    result = registry.invoke(tool_name, arguments)
    if tool_name == LOOKUP_KNOWLEDGE:
        result = mark_deduped(result, seen)
        seen |= knowledge_hit_keys(result)
    store.complete(invocation_id, evidence_status=result.evidence_status,
                   agent_result=result.agent_result, source=result.source,
                   ref_count=result.ref_count, deduped=result.deduped)

A chunk seen before is kept in `agent_result` with `"deduped": true` and its text dropped, and it
has no evidence ref in this invocation (the view renders none for a deduped chunk) (its evidence is the earlier invocation's), so it can only
be cited where it first appeared. When every chunk was seen before, the result is NO_EVIDENCE
with `deduped=True` (stored as `retrieval_details.deduped`) and only its `summary` ref.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.executor.tools.knowledge_tool import summary_text
from services.executor.tools.tool_result import ToolResult
from shared.core.contracts import ToolInvocation
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE as TOOL_NAME
from shared.core.tool_results import KnowledgeResult, dump_result, read_result, ref_count


def _read(tool_name: str, agent_result: str | None) -> KnowledgeResult | None:
    result = read_result(tool_name, agent_result)
    return result if isinstance(result, KnowledgeResult) else None


def _fresh_hits(result: KnowledgeResult | None) -> set[str]:
    if result is None:
        return set()
    return {chunk.hit_id for doc in result.docs for chunk in doc.chunks if chunk.hit_id and not chunk.deduped}


def knowledge_hit_keys(result: ToolResult) -> set[str]:
    """The hit ids a lookup_knowledge result returned as new evidence (deduped ones excluded)."""
    return _fresh_hits(_read(result.tool_name, result.agent_result))


def earlier_knowledge_hits(invocations: Iterable[ToolInvocation]) -> set[str]:
    """Hit ids already returned as evidence by the given (persisted) invocations of a run."""
    seen: set[str] = set()
    for invocation in invocations:
        if invocation.lifecycle == "READY":
            seen |= _fresh_hits(_read(invocation.tool_name, invocation.agent_result))
    return seen


def mark_deduped(result: ToolResult, earlier_hits: set[str]) -> ToolResult:
    """`result` with every hit in `earlier_hits` marked deduped (see the module docstring). A
    result of another tool, or one without any earlier hit, is returned unchanged."""
    if result.tool_name != TOOL_NAME or not earlier_hits:
        return result
    data = _read(result.tool_name, result.agent_result)
    if data is None:
        return result
    repeated: set[str] = set()
    docs = []
    for i, doc in enumerate(data.docs):
        chunks = []
        for j, chunk in enumerate(doc.chunks):
            if chunk.hit_id in earlier_hits:
                chunk = chunk.model_copy(update={"deduped": True, "text": None})
                repeated.add(f"docs[{i}].chunks[{j}]")
            chunks.append(chunk)
        docs.append(doc.model_copy(update={"chunks": chunks}))
    if not repeated:
        return result
    total = sum(len(doc.chunks) for doc in docs)
    fresh = total - len(repeated)
    summary = summary_text(data.query, data.top_k, len(docs), total)
    summary += (
        ", all already returned earlier in this run (deduped)" if not fresh
        else f", {len(repeated)} already returned earlier in this run (deduped)"
    )
    marked = data.model_copy(update={"docs": docs, "summary": summary, "deduped_chunks": len(repeated)})
    return result.model_copy(update={
        "agent_result": dump_result(marked),
        "ref_count": ref_count(marked),
        "evidence_status": "EVIDENCE_FOUND" if fresh else "NO_EVIDENCE",
        "deduped": not fresh,
    })
