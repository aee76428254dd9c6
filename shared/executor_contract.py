"""Strict parsing of the executor's final output into the `executor_evidence_v2` contract.

Graph spec, "Executor SHALL output an evidence-attribution contract" and "Structured Executor
output SHALL degrade safely"; DESIGN §3 "Parse status".

- `valid`: exactly one JSON object, optionally surrounded by whitespace, whose `answer_version` is
  `executor_evidence_v2` and whose `claims` is a list (and `hypotheses`, `recommended_actions`,
  `missing_info`, when present, are lists; absent ones read as empty here, and the gatekeeper's
  `schema.executor_v2` names each absent one as a failed rule at low_confid).
- `missing`: no JSON value at all (empty text, prose).
- `malformed`: JSON, or an attempt at it, that is not the contract: invalid or truncated JSON, a
  top-level value that is not an object, text around the object, more than one object, a wrong
  answer_version, `claims` not a list, duplicate keys, NaN/Infinity, lone surrogates, or input
  larger than MAX_EXECUTOR_OUTPUT_BYTES.

Fences: the spec says the output SHOULD be parseable without Markdown fences. One fence wrapping
the whole output (```` ```json ```` … ```` ``` ````) is tolerated — the status is `valid` and the
detail says a fence was removed — only when the fence's content is itself exactly one object.
Anything else around or between fences is `malformed`.

Problems inside a claim or binding are not parse failures: they are gatekeeper schema rules.

Unknown fields (a model's `confidence`, `severity`, `reasoning` …) change nothing: they are ignored
wherever they appear, as before. `unknown_fields` finds them, bounded, for the audit, so a model
that writes beyond the contract is on record. A field name is the executor's own string: the
audit's warnings name an unknown field by its position only (`claims[0].keys[2]`, the third key of
claims[0]), and the name itself goes, escaped, to the persisted audit alone (DESIGN §3 ruling
"Nothing a model wrote reaches another model unescaped").
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from shared.core.contracts import (
    Claim,
    EvidenceBinding,
    ExecutorEvidenceV2,
    Hypothesis,
    MissingInfo,
    ParseStatus,
    RecommendedAction,
)
from shared.core.strict_json import DECODER, loads_strict_json

ANSWER_VERSION = "executor_evidence_v2"
# A claim id is a short token (the gatekeeper fails any other under schema.executor_v2): it is
# echoed to a verifier model, so it can carry no words.
CLAIM_ID_PATTERN = r"[A-Za-z0-9_-]{1,16}"
MAX_EXECUTOR_OUTPUT_BYTES = 2 * 1024 * 1024
_OPTIONAL_LISTS = ("hypotheses", "recommended_actions", "missing_info")
_FENCE = re.compile(r"\A```[ \t]*(?:json)?[ \t]*\r?\n(?P<body>.*?)\r?\n?```\Z", re.DOTALL | re.IGNORECASE)
_MAX_OBJECT_PROBES = 16  # bounded search for an embedded object in prose
# Fields the gatekeeper knows at each level: the contract's own, plus the top-level fields it
# reports as removed (schema rule `schema.executor_v2`), which must not be reported twice.
_REMOVED_FIELDS = frozenset({"diagnosis_summary", "user_facing_answer"})
_KNOWN_TOP = frozenset(ExecutorEvidenceV2.model_fields) | _REMOVED_FIELDS
_KNOWN_CLAIM = frozenset(Claim.model_fields)
_KNOWN_BINDING = frozenset(EvidenceBinding.model_fields)
_KNOWN_ITEM = {
    "hypotheses": frozenset(Hypothesis.model_fields),
    "recommended_actions": frozenset(RecommendedAction.model_fields),
    "missing_info": frozenset(MissingInfo.model_fields),
}
MAX_UNKNOWN_FIELD_WARNINGS = 20


class ParsedExecutorOutput(BaseModel):
    parse_status: ParseStatus
    raw: dict[str, Any] | None = None
    detail: str = ""


def _malformed(detail: str) -> ParsedExecutorOutput:
    return ParsedExecutorOutput(parse_status="malformed", detail=detail)


def check_contract_object(obj: Any) -> ParsedExecutorOutput:
    """Output-level contract check of an already decoded JSON value."""
    if not isinstance(obj, dict):
        return _malformed(f"top-level JSON value is {type(obj).__name__}, not an object")
    try:
        size = len(json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:  # non-JSON values, NaN, lone surrogates
        return _malformed(f"object is not serialisable as UTF-8 JSON: {type(exc).__name__}")
    if size > MAX_EXECUTOR_OUTPUT_BYTES:
        return _malformed(f"output exceeds {MAX_EXECUTOR_OUTPUT_BYTES} bytes")
    version = obj.get("answer_version")
    if version != ANSWER_VERSION:
        return _malformed(f"answer_version must be {ANSWER_VERSION!r}, got {str(version)[:60]!r}")
    if not isinstance(obj.get("claims"), list):
        return _malformed("claims must be a list")
    for name in _OPTIONAL_LISTS:
        if name in obj and not isinstance(obj[name], list):
            return _malformed(f"{name} must be a list")
    return ParsedExecutorOutput(parse_status="valid", raw=obj)


def _contains_object(text: str) -> bool:
    """Whether some `{` in the text starts a decodable JSON object (bounded number of probes)."""
    start = text.find("{")
    probes = 0
    while start != -1 and probes < _MAX_OBJECT_PROBES:
        probes += 1
        try:
            value, _ = DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return True
        start = text.find("{", start + 1)
    return False


def parse_executor_output(text: object) -> ParsedExecutorOutput:
    """Classify the executor's final text as valid / missing / malformed. Never raises, whatever
    it is given (a value that is not text is malformed)."""
    if not isinstance(text, str):
        return _malformed(f"output is {type(text).__name__}, not text")
    if len(text) > MAX_EXECUTOR_OUTPUT_BYTES:
        return _malformed(f"output exceeds {MAX_EXECUTOR_OUTPUT_BYTES} bytes")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return _malformed("output is not valid Unicode text")
    if size > MAX_EXECUTOR_OUTPUT_BYTES:
        return _malformed(f"output exceeds {MAX_EXECUTOR_OUTPUT_BYTES} bytes")
    body = text.strip()
    if not body:
        return ParsedExecutorOutput(parse_status="missing", detail="output is empty")
    fence_note = ""
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
        fence_note = "one Markdown fence around the object was removed"
        if not body.startswith("{"):
            return _malformed("the fenced content is not a JSON object")
    try:
        value = loads_strict_json(body)
    except (ValueError, RecursionError) as exc:
        if fenced or body.startswith(("{", "[")) or _contains_object(body):
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            return _malformed(f"not exactly one JSON object: {reason}")
        return ParsedExecutorOutput(parse_status="missing", detail="no JSON object in the output")
    result = check_contract_object(value)
    if result.parse_status == "valid" and fence_note:
        result.detail = fence_note
    return result


def unknown_fields(raw: dict[str, Any], limit: int = MAX_UNKNOWN_FIELD_WARNINGS) -> tuple[list[tuple[str, str]], int]:
    """(position, name) of every field of a valid contract object that the contract does not have
    (top level, claims, their bindings, hypotheses, recommended actions, missing info), in document
    order, at most `limit` of them; and how many more there were. The position is the key's index
    in its object: `claims[1].keys[0]`, `output.keys[3]`. Items that are not objects are the schema
    rules' business and are skipped here."""
    found: list[tuple[str, str]] = []
    more = 0

    def scan(item: Any, known: frozenset[str], where: str, *at: int) -> None:
        # `where` is a template the item's indexes fill, formatted only for an unknown field.
        nonlocal more
        if not isinstance(item, dict):
            return
        for position, key in enumerate(item):
            if key in known:
                continue
            if len(found) < limit:
                found.append((f"{where.format(*at)}.keys[{position}]", str(key)))
            else:
                more += 1

    scan(raw, _KNOWN_TOP, "output")
    claims = raw.get("claims")
    for i, claim in enumerate(claims if isinstance(claims, list) else []):
        scan(claim, _KNOWN_CLAIM, "claims[{}]", i)
        bindings = claim.get("evidence_bindings") if isinstance(claim, dict) else None
        for j, binding in enumerate(bindings if isinstance(bindings, list) else []):
            scan(binding, _KNOWN_BINDING, "claims[{}].evidence_bindings[{}]", i, j)
    for name, known in _KNOWN_ITEM.items():
        items = raw.get(name)
        for i, item in enumerate(items if isinstance(items, list) else []):
            scan(item, known, name + "[{}]", i)
    return found, more


def unknown_field_warnings(raw: dict[str, Any], limit: int = MAX_UNKNOWN_FIELD_WARNINGS) -> list[str]:
    """`claims[0].keys[2]: unknown field ignored` for each of `unknown_fields`, then one line
    counting the rest: positions only, never the name."""
    found, more = unknown_fields(raw, limit)
    warnings = [f"{position}: unknown field ignored" for position, _ in found]
    if more:
        warnings.append(f"{more} further unknown field(s) ignored")
    return warnings
