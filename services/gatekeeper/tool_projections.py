"""Strict parsing of a tool's projection (`agent_result`) against its canonical invocation record.

Spec "Verified evidence snapshot is minimal and deterministic": only supported projections are
parsed, and a projection with an unknown tool name, invalid JSON, a mismatched tool call id or an
evidence status inconsistent with its record fails closed. The contract every evidence tool's
projection follows (it is what the executor's tools write, see `services/executor/tools/`):

1. the invocation's tool is an evidence tool (`shared.core.contracts.EVIDENCE_TOOLS`); helpers such as
   `get_current_time` are never evidence;
2. `agent_result` is a JSON object whose `tool` equals the record's `tool_name`; when it carries
   `tool_call_id` or `evidence_status`, they equal the record's;
3. the projection follows its tool's result schema (`shared.core.tool_results`), the record has
   `retrieval_details.evidence_refs`, and every ref's `raw_path` addresses an item the result
   holds (`series[0].points[12]`, `hits[3]`, `docs[1].chunks[4]`, `summary`): the projection mirrors the refs, so refs and projection describe the same data;
4. refs named `summary` (or `<path>.summary`) state scope and counts; every other ref addresses
   one evidence item. `EVIDENCE_FOUND` requires at least one item ref, `NO_EVIDENCE` allows none
   (a no-hit call keeps only its scope ref). The size of the tool's item list (`query_metrics`
   points, `query_logs` hits, `query_changes` changes, `lookup_knowledge` chunks not marked
   deduped) must agree with the status too, and with `returned` where the projection has it;
5. the record has a bounded request scope (its `request`, without the tool name).

Violations name fields and statuses, never record content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shared.core import guard_violations as codes
from shared.core.contracts import EVIDENCE_TOOLS, EvidenceRef, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.core.tool_results import (
    RESULT_TOOLS,
    KnowledgeResult,
    LogsResult,
    MetricsResult,
    ToolResultData,
    path_reader,
    read_result,
)

MAX_SCOPE_CHARS = 600
MAX_SCOPE_VALUE_CHARS = 200
MAX_SOURCE_CHARS = 200
_MISSING = object()


@dataclass(frozen=True)
class ProjectionError:
    code: str
    detail: str


@dataclass
class ParsedProjection:
    """A projection that passed every check, with what the snapshot needs from its record."""

    invocation: ToolInvocation
    scope_refs: list[EvidenceRef]  # `summary` refs: query scope and counts
    item_refs: list[EvidenceRef]  # one evidence item each, in stored order
    scope: str
    source: str


def is_scope_ref(ref: EvidenceRef) -> bool:
    return ref.raw_path == "summary" or ref.raw_path.endswith(".summary")


def _item_count(result: ToolResultData) -> int | None:
    """The size of the result's item list (None: it disagrees with its own `returned`)."""
    if isinstance(result, MetricsResult):
        return result.point_count
    if isinstance(result, KnowledgeResult):
        return result.fresh_chunk_count  # a chunk returned earlier in the run is marked deduped
    items = result.hits if isinstance(result, LogsResult) else result.changes
    if result.returned is not None and result.returned != len(items):
        return None
    return len(items)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_scope(request: dict[str, Any]) -> str:
    """The bounded request scope as `key=value` pairs in key order, without the tool name and
    without any call id (the snapshot never carries tool call ids)."""
    parts: list[str] = []
    for key in sorted(request, key=str):
        name = str(key)
        if name == "tool" or "call_id" in name.lower():
            continue
        value = request[key]
        if value is None or value == "" or value == [] or value == {}:
            continue
        text = value if isinstance(value, str) else json.dumps(
            value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str
        )
        parts.append(f"{_bounded(name, 64)}={_bounded(' '.join(text.split()), MAX_SCOPE_VALUE_CHARS)}")
    return _bounded(" ".join(parts), MAX_SCOPE_CHARS)


def _fail(code: str, detail: str) -> tuple[None, ProjectionError]:
    return None, ProjectionError(code, detail)


def parse_projection(invocation: ToolInvocation) -> tuple[ParsedProjection | None, ProjectionError | None]:
    """Check a READY invocation's projection against its record. Never raises."""
    tool = invocation.tool_name
    if tool not in EVIDENCE_TOOLS or tool not in RESULT_TOOLS:
        return _fail(codes.PROJECTION_UNKNOWN_TOOL, f"tool {tool[:60]!r} has no supported evidence projection")
    try:
        projection = json.loads(invocation.agent_result or "")
    except (ValueError, RecursionError):
        projection = None
    if not isinstance(projection, dict):
        return _fail(codes.PROJECTION_INVALID_JSON, "agent_result is not a JSON object")
    named = projection.get("tool", _MISSING)
    if named is _MISSING:
        return _fail(codes.PROJECTION_CONTRACT, "projection does not name its tool")
    if named != tool:
        return _fail(codes.PROJECTION_TOOL_MISMATCH, f"projection names another tool than {tool!r}")
    if "tool_call_id" in projection and projection["tool_call_id"] != invocation.tool_call_id:
        return _fail(codes.PROJECTION_TOOL_CALL_ID_MISMATCH, "projection carries another tool_call_id")
    if "evidence_status" in projection and projection["evidence_status"] != invocation.evidence_status:
        return _fail(codes.PROJECTION_STATUS_MISMATCH, f"projection states another evidence_status than {invocation.evidence_status}")

    result = read_result(tool, invocation.agent_result)
    if result is None:
        return _fail(codes.PROJECTION_CONTRACT, f"projection does not follow the {tool} result schema")
    refs = evidence_view(invocation).refs()
    if not refs:
        return _fail(codes.PROJECTION_CONTRACT, "record has no retrieval_details.evidence_refs")
    scope_refs: list[EvidenceRef] = []
    item_refs: list[EvidenceRef] = []
    holds = path_reader(result)
    for index, ref in enumerate(refs):
        if not holds(ref.raw_path):
            return _fail(codes.PROJECTION_CONTRACT, f"evidence_refs[{index}].raw_path is not in the projection")
        (scope_refs if is_scope_ref(ref) else item_refs).append(ref)

    found = invocation.evidence_status == "EVIDENCE_FOUND"
    if found != bool(item_refs):
        return _fail(
            codes.PROJECTION_STATUS_MISMATCH,
            f"{invocation.evidence_status} with {len(item_refs)} evidence item ref(s)",
        )
    count = _item_count(result)
    if count is None:
        return _fail(codes.PROJECTION_CONTRACT, f"{tool} projection's item list disagrees with its count")
    if found != (count > 0):
        return _fail(codes.PROJECTION_STATUS_MISMATCH, f"{invocation.evidence_status} with {count} item(s) in the projection")

    scope = render_scope(invocation.request if isinstance(invocation.request, dict) else {})
    if not scope:
        return _fail(codes.PROJECTION_SCOPE_MISSING, "record has no request scope")
    source = next((ref.source for ref in refs if ref.source.strip()), "")
    return ParsedProjection(invocation, scope_refs, item_refs, scope, _bounded(source.strip(), MAX_SOURCE_CHARS)), None
