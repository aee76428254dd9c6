"""A bounded JSON schema of executor_evidence_v2, sent as `{"type": "json_object", "schema": …}`
to servers that accept it (DESIGN §8: llama.cpp does, and with every string and array bounded a
tiny model still returns schema-valid JSON). It constrains the shape only; the answer is still
parsed strictly and every binding is checked by the gatekeeper."""

from __future__ import annotations

from typing import Any

from shared.core.contracts import CLAIM_TYPES, EVIDENCE_TOOLS, SUPPORT_LEVELS
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
        },
        ["claim_id", "claim_type", "claim_text", "support_level", "evidence_bindings"],
    )
    hypothesis = _object(
        {"text": _string(MAX_TEXT), "related_claim_ids": {"type": "array", "items": _claim_id(), "maxItems": 3}},
        ["text"],
    )
    action = _object({"text": _string(MAX_TEXT), "requires_human_confirmation": {"type": "boolean"}}, ["text"])
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
