"""A bounded JSON schema of executor_evidence_v2, sent as `{"type": "json_object", "schema": …}`
to servers that accept it (DESIGN §8: llama.cpp does, and with every string and array bounded a
tiny model still returns schema-valid JSON). It constrains the shape only; the answer is still
parsed strictly and every binding is checked by the gatekeeper."""

from __future__ import annotations

from typing import Any, get_args

from shared.core.contracts import (
    CLAIM_TYPES,
    EVIDENCE_TOOLS,
    SUPPORT_LEVELS,
    ActionKind,
    QuantityAggregate,
    SignalKind,
    Standing,
    StatementState,
)
from shared.executor_contract import ANSWER_VERSION, CLAIM_ID_PATTERN

MAX_CLAIMS = 6
MAX_BINDINGS = 3
MAX_ITEMS = 6
MAX_TEXT = 300
MAX_EXCERPT = 240
SOURCE_TYPES = ("metrics", "logs", "knowledge", "changes")


def _string(max_length: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length}


def _claim_id() -> dict[str, Any]:
    # The contract's token, kept short for a small model.
    return {"type": "string", "maxLength": 8, "pattern": f"^{CLAIM_ID_PATTERN}$"}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _enum(literal: Any) -> dict[str, Any]:
    return {"type": "string", "enum": list(get_args(literal))}


def _instant() -> dict[str, Any]:
    return {"type": "string", "maxLength": 30, "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}(:\\d{2})?Z$"}


def statement_schema(depth: int = 1, *, by_tool_call: bool = False) -> dict[str, Any]:
    """A typed statement (docs/statements.md); a cause's two sides are statements without causes.
    `by_tool_call`: refs name the tool call by its id (a single-ReAct Draft), not the invocation."""
    ref = (_object({"tool_call_id": _string(80), "raw_path": _string(80)}, ["tool_call_id", "raw_path"]) if by_tool_call
           else _object({"source_invocation_id": {"type": "integer", "minimum": 1}, "raw_path": _string(80)},
                        ["source_invocation_id", "raw_path"]))
    quantity = _object(
        {
            "value": {"type": "number"},
            "unit": {"type": "string", "enum": ["%", "ms", "s", "MB", "/s", "count", ""]},
            "aggregate": _enum(QuantityAggregate),
            "at": _instant(),
            "precision": {"type": "integer", "minimum": 0, "maximum": 6},
        },
        ["value", "unit", "aggregate"],
    )
    properties: dict[str, Any] = {
        "subject": _string(80),
        "signal": _object({"kind": _enum(SignalKind), "name": _string(160)}, ["kind"]),
        "state": _enum(StatementState),
        "quantities": {"type": "array", "items": quantity, "maxItems": 4},
        "standing": _enum(Standing),
        "refs": {"type": "array", "items": ref, "minItems": 1, "maxItems": MAX_BINDINGS},
    }
    if depth > 0:
        side = statement_schema(depth - 1, by_tool_call=by_tool_call)
        properties["cause"] = _object({"cause": side, "effect": side, "mechanism": _string(60)}, ["cause", "effect"])
    return _object(properties, ["subject", "state", "refs"])


def typed_action_schema() -> dict[str, Any]:
    """A catalogued action: a failure mode's next step or remedy, by index."""
    return _object(
        {"action": _object({"mechanism": _string(60), "kind": _enum(ActionKind), "index": {"type": "integer", "minimum": 0}},
                           ["mechanism", "kind", "index"])},
        ["action"],
    )


def executor_answer_schema() -> dict[str, Any]:
    binding = _object(
        {
            "source_type": {"type": "string", "enum": list(SOURCE_TYPES)},
            "tool_name": {"type": "string", "enum": sorted(EVIDENCE_TOOLS)},
            "source_invocation_id": {"type": "integer", "minimum": 1},
            "source_invocation_ids": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 1},
            "raw_path": _string(80),
            "evidence_excerpt": _string(MAX_EXCERPT),
        },
        ["source_type", "tool_name", "source_invocation_id", "raw_path", "evidence_excerpt"],
    )
    claim = _object(
        {
            "claim_id": _claim_id(),
            "claim_type": {"type": "string", "enum": list(CLAIM_TYPES)},
            "claim_text": _string(MAX_TEXT),
            "support_level": {"type": "string", "enum": list(SUPPORT_LEVELS)},
            "evidence_bindings": {"type": "array", "items": binding, "minItems": 1, "maxItems": MAX_BINDINGS},
            "statement": statement_schema(),
        },
        ["claim_id", "claim_type", "claim_text", "support_level", "evidence_bindings"],
    )
    hypothesis = _object(
        {"text": _string(MAX_TEXT), "related_claim_ids": {"type": "array", "items": _claim_id(), "maxItems": 3}},
        ["text"],
    )
    typed_action = typed_action_schema()
    action = _object(
        {"text": _string(MAX_TEXT), "requires_human_confirmation": {"type": "boolean"}, "statement": typed_action}, ["text"]
    )
    missing = _object({"text": _string(MAX_TEXT), "tool_name": _string(40)}, ["text"])
    return _object(
        {
            "answer_version": {"type": "string", "enum": [ANSWER_VERSION]},
            "claims": {"type": "array", "items": claim, "maxItems": MAX_CLAIMS},
            "hypotheses": {"type": "array", "items": hypothesis, "maxItems": MAX_ITEMS},
            "recommended_actions": {"type": "array", "items": action, "maxItems": MAX_ITEMS},
            "missing_info": {"type": "array", "items": missing, "maxItems": MAX_ITEMS},
        },
        ["answer_version", "claims", "hypotheses", "recommended_actions", "missing_info"],
    )


def executor_response_format() -> dict[str, Any]:
    return {"type": "json_object", "schema": executor_answer_schema()}
