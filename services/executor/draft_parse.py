"""Strict parsing of a model's Draft text, and the bounded JSON schema of that Draft.

The model's final answer (and a model repair) must be exactly one JSON object in the Draft's
shape: no Markdown fence, no prose around it, no duplicate or unknown keys, every item with all
of its fields, every value of its type (no "true" for true, no number for a string). A text that
is anything else is no Draft: the caller returns the Draft absent with the parse detail, and
nothing of the text is used (spec "Fail-closed release policy", invalid Draft scenario).

Strict parsing checks the shape only. Whether ids are unique, references resolve and kinds match
the evidence is EvidenceGuard's job, so a structurally broken Draft reaches the guard (and may be
repaired) instead of being discarded here.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from services.executor.answer_schema import statement_schema, typed_action_schema
from shared.core.contracts import ConclusionKind
from shared.core.strict_json import DuplicateKey, loads_strict_json
from shared.draft_contract import ActionPlanItem, Analysis, Conclusion, Draft, Recommendation

MAX_DRAFT_CHARS = 64_000
MAX_DETAIL_CHARS = 300
# Top-level fields a Draft must state (the Conclusion may be null); the lists default to empty.
REQUIRED_TOP_LEVEL = ("conclusion", "analyses")
# An item may be typed (docs/statements.md): it then states a statement (a conclusion: its kind)
# and may leave out the text, which Attest writes (`draft_render.py`).
_TYPED: dict[type[BaseModel], tuple[str, ...]] = {Conclusion: ("statement", "kind")}
_TYPED_DEFAULT = ("statement",)
_ITEM_MODELS: dict[str, type[BaseModel]] = {
    "analyses": Analysis,
    "action_plan": ActionPlanItem,
    "recommendations": Recommendation,
}


def _shape_problem(data: dict[str, Any]) -> str:
    """The first key-level problem: an unknown or missing field, at any level."""
    unknown = [key for key in data if key not in Draft.model_fields]
    if unknown:
        return f"unknown field {unknown[0][:40]!r}"
    missing = [key for key in REQUIRED_TOP_LEVEL if key not in data]
    if missing:
        return f"missing field {missing[0]!r}"
    items: list[tuple[str, Any, type[BaseModel]]] = []
    if isinstance(data.get("conclusion"), dict):
        items.append(("conclusion", data["conclusion"], Conclusion))
    for section, model in _ITEM_MODELS.items():
        if isinstance(data.get(section), list):
            items += [(f"{section}[{i}]", item, model) for i, item in enumerate(data[section])]
    for where, item, model in items:
        if not isinstance(item, dict):
            continue  # reported by validation as a type error
        extra = [key for key in item if key not in model.model_fields]
        if extra:
            return f"{where}: unknown field {extra[0][:40]!r}"
        typed_fields = _TYPED.get(model, _TYPED_DEFAULT)
        absent = [key for key in model.model_fields if key not in item and key not in typed_fields
                  and not (key == "text" and any(field in item for field in typed_fields))]
        if absent:
            return f"{where}: missing field {absent[0]!r}"
    return ""


def _validation_detail(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first.get("loc", ()))
    return f"{location or 'draft'}: {first.get('msg', 'invalid value')}"


def parse_draft_text(text: str | None) -> tuple[Draft | None, str]:
    """(Draft, "") for a strictly valid Draft text; (None, why) otherwise. Never raises."""
    if text is None or not text.strip():
        return None, "the answer is empty"
    if len(text) > MAX_DRAFT_CHARS:
        return None, f"the answer is longer than {MAX_DRAFT_CHARS} characters"
    try:
        data = loads_strict_json(text)  # the one strict reader: no duplicate keys, no NaN/Infinity
    except DuplicateKey as exc:
        return None, f"the answer has a {exc}"
    except (ValueError, RecursionError) as exc:
        detail = (f"{exc.msg} at position {exc.pos}" if isinstance(exc, json.JSONDecodeError)
                  else str(exc) or type(exc).__name__)
        return None, f"the answer is not one JSON object: {detail}"[:MAX_DETAIL_CHARS]
    if not isinstance(data, dict):
        return None, f"the answer is JSON but not an object ({type(data).__name__})"
    problem = _shape_problem(data)
    if problem:
        return None, f"the answer is not a Draft: {problem}"[:MAX_DETAIL_CHARS]
    try:
        draft = Draft.model_validate(data, strict=True)
    except ValidationError as exc:
        return None, f"the answer is not a Draft: {_validation_detail(exc)}"[:MAX_DETAIL_CHARS]
    return draft, ""


# --- the schema, for servers that constrain output to one ------------------------------------

MAX_ANALYSES = 8
MAX_ITEMS = 6
MAX_REFS = 6
MAX_TEXT = 400
MAX_ID = 80


def _string(max_length: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length}


def _ids(max_items: int) -> dict[str, Any]:
    return {"type": "array", "items": _string(MAX_ID), "minItems": 1, "maxItems": max_items}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def draft_schema() -> dict[str, Any]:
    """A bounded JSON schema of the typed Draft (docs/statements.md): the shape only, never a
    substitute for the guards. Attest writes every text from the statements."""
    statement = statement_schema(by_tool_call=True)
    analysis = _object({
        "analysis_id": _string(MAX_ID),
        "kind": {"type": "string", "enum": ["NORMAL", "NEGATIVE_OBSERVATION"]},
        "statement": statement,
        "tool_call_ids": _ids(MAX_REFS),
    })
    conclusion = _object({
        "kind": {"type": "string", "enum": list(get_args(ConclusionKind))},
        "statement": {"anyOf": [statement, {"type": "null"}]},
        "analysis_refs": _ids(MAX_REFS),
    })
    action = _object({
        "statement": typed_action_schema(), "analysis_refs": _ids(MAX_REFS), "requires_human_confirmation": {"type": "boolean"},
    })
    recommendation = _object({"statement": typed_action_schema(), "analysis_refs": _ids(MAX_REFS)})
    texts = {"type": "array", "items": _string(MAX_TEXT), "maxItems": MAX_ITEMS}
    gap = _object({"subject": _string(MAX_ID), "signal": statement["properties"]["signal"]})
    gaps = {"type": "array", "items": gap, "maxItems": MAX_ITEMS}
    return _object({
        "conclusion": {"anyOf": [conclusion, {"type": "null"}]},
        "analyses": {"type": "array", "items": analysis, "maxItems": MAX_ANALYSES},
        "action_plan": {"type": "array", "items": action, "maxItems": MAX_ITEMS},
        "recommendations": {"type": "array", "items": recommendation, "maxItems": MAX_ITEMS},
        "limitations": texts,
        "missing_context": texts,
        "limitation_statements": gaps,
        "missing_context_statements": gaps,
    })


def draft_response_format() -> dict[str, Any]:
    """`response_format` of a schema-constrained request (llama.cpp's `json_object` + schema)."""
    return {"type": "json_object", "schema": draft_schema()}
