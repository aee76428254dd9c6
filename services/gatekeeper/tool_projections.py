"""Strict parsing of a tool's projection (`agent_result`) against its canonical invocation record.

Spec "Verified evidence snapshot is minimal and deterministic": only supported projections are
parsed, and a projection with an unknown tool name, invalid JSON, a mismatched tool call id or an
evidence status inconsistent with its record fails closed. The contract every evidence tool's
projection follows (it is what the executor's tools write, see `services/executor/tools/`):

1. the invocation's tool is an evidence tool (`shared.contracts.EVIDENCE_TOOLS`); helpers such as
   `get_current_time` are never evidence;
2. `agent_result` is a JSON object whose `tool` equals the record's `tool_name`; when it carries
   `tool_call_id` or `evidence_status`, they equal the record's;
3. the record has `retrieval_details.evidence_refs`, and every ref's `raw_path` addresses a value
   that exists in the projection (`series[0].points[12]`, `hits[3]`, `docs[1].chunks[4]`,
   `summary`): the projection mirrors the refs, so refs and projection describe the same data;
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
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.contracts import EVIDENCE_TOOLS, EvidenceRef, ToolInvocation
from shared.core import guard_violations as codes

MAX_SCOPE_CHARS = 600
MAX_SCOPE_VALUE_CHARS = 200
MAX_SOURCE_CHARS = 200
_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d{1,9}\])*)$")
_INDEX = re.compile(r"\[(\d+)\]")
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


def _resolve(projection: Any, raw_path: str) -> Any:
    """The value `raw_path` addresses inside the projection, or _MISSING."""
    node = projection
    if not raw_path or len(raw_path) > 300:
        return _MISSING
    for segment in raw_path.split("."):
        match = _SEGMENT.match(segment)
        if match is None or not isinstance(node, dict) or match.group(1) not in node:
            return _MISSING
        node = node[match.group(1)]
        for index in _INDEX.findall(match.group(2)):
            position = int(index)
            if not isinstance(node, list) or position >= len(node):
                return _MISSING
            node = node[position]
    return node


def is_scope_ref(ref: EvidenceRef) -> bool:
    return ref.raw_path == "summary" or ref.raw_path.endswith(".summary")


def _metric_points(projection: dict[str, Any]) -> int | None:
    series = projection.get("series")
    if not isinstance(series, list):
        return None
    total = 0
    for item in series:
        if not isinstance(item, dict) or not isinstance(item.get("points"), list):
            return None
        total += len(item["points"])
    return total


def _returned_list(key: str) -> Callable[[dict[str, Any]], int | None]:
    """Items of a list that the projection also counts in `returned` (logs hits, change records)."""

    def count(projection: dict[str, Any]) -> int | None:
        items = projection.get(key)
        if not isinstance(items, list):
            return None
        returned = projection.get("returned", len(items))
        if isinstance(returned, bool) or returned != len(items):
            return None
        return len(items)

    return count


def _knowledge_chunks(projection: dict[str, Any]) -> int | None:
    """Chunks that are new evidence: a chunk returned earlier in the run is marked deduped."""
    docs = projection.get("docs")
    if not isinstance(docs, list):
        return None
    total = 0
    for doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("chunks"), list):
            return None
        total += sum(1 for chunk in doc["chunks"] if not (isinstance(chunk, dict) and chunk.get("deduped") is True))
    return total


# Each evidence tool's item list: a function counting the items (None: shape broken).
_ITEM_COUNTERS: dict[str, Callable[[dict[str, Any]], int | None]] = {
    "query_metrics": _metric_points,
    "query_logs": _returned_list("hits"),
    "query_changes": _returned_list("changes"),
    "lookup_knowledge": _knowledge_chunks,
}


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
    if tool not in EVIDENCE_TOOLS or tool not in _ITEM_COUNTERS:
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

    refs = invocation.retrieval_details.evidence_refs if invocation.retrieval_details else []
    if not refs:
        return _fail(codes.PROJECTION_CONTRACT, "record has no retrieval_details.evidence_refs")
    scope_refs: list[EvidenceRef] = []
    item_refs: list[EvidenceRef] = []
    for index, ref in enumerate(refs):
        if _resolve(projection, ref.raw_path) is _MISSING:
            return _fail(codes.PROJECTION_CONTRACT, f"evidence_refs[{index}].raw_path is not in the projection")
        (scope_refs if is_scope_ref(ref) else item_refs).append(ref)

    found = invocation.evidence_status == "EVIDENCE_FOUND"
    if found != bool(item_refs):
        return _fail(
            codes.PROJECTION_STATUS_MISMATCH,
            f"{invocation.evidence_status} with {len(item_refs)} evidence item ref(s)",
        )
    count = _ITEM_COUNTERS[tool](projection)
    if count is None:
        return _fail(codes.PROJECTION_CONTRACT, f"{tool} projection lacks its item list")
    if found != (count > 0):
        return _fail(codes.PROJECTION_STATUS_MISMATCH, f"{invocation.evidence_status} with {count} item(s) in the projection")

    scope = render_scope(invocation.request if isinstance(invocation.request, dict) else {})
    if not scope:
        return _fail(codes.PROJECTION_SCOPE_MISSING, "record has no request scope")
    source = next((ref.source for ref in refs if ref.source.strip()), "")
    return ParsedProjection(invocation, scope_refs, item_refs, scope, _bounded(source.strip(), MAX_SOURCE_CHARS)), None
