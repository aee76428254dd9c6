"""The one serializer of the store's JSON columns, so SQLite and PostgreSQL store the same text.

Non-finite numbers. JSON has no NaN or Infinity. Python's `json.dumps` writes
them anyway, as bare `NaN`/`Infinity` tokens: SQLite stored those, PostgreSQL refused the whole
write, so one run could be recorded on one database and fail on the other. The policy:

1. A non-finite float, as a value or as a key, is stored as the string `"NaN"`, `"Infinity"` or
   `"-Infinity"`: the spelling of protobuf's JSON mapping for doubles (`shared/proto_convert.py`
   uses it too) and of Prometheus's API. Nothing is lost (NaN, +Inf and -Inf stay apart), every
   document is standard JSON that both databases, `jq` and JSON1 read, and a `float` field of a
   pydantic model reads the string back as the number.
2. Each such write logs a WARNING naming the JSON paths it spelled, so the change is never silent.
3. Reads are not rewritten: the string cannot be told apart from a stored string "NaN", so a
   reader gets what is stored. Rows SQLite stored before this policy keep their bare tokens, which
   `json.loads` still reads.

Documents without non-finite numbers are written exactly as `json.dumps` wrote them before.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

log = logging.getLogger(__name__)

MAX_LOGGED_PATHS = 10


def non_finite_spelling(value: float) -> str:
    """`"NaN"`, `"Infinity"` or `"-Infinity"` for a non-finite float."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def dumps_stored_json(document: Any) -> str:
    """`document` as JSON text under the policy above (the engines' `json_serializer`)."""
    try:
        return json.dumps(document, allow_nan=False)
    except ValueError:
        spelled: list[str] = []
        finite = _spell_non_finite(document, "$", spelled, set())
    shown = ", ".join(spelled[:MAX_LOGGED_PATHS]) + (", ..." if len(spelled) > MAX_LOGGED_PATHS else "")
    log.warning("stored %d non-finite number(s) as strings (NaN, Infinity, -Infinity) at %s", len(spelled), shown)
    return json.dumps(finite, allow_nan=False)


def _spell_non_finite(value: Any, path: str, spelled: list[str], ancestors: set[int]) -> Any:
    """A copy of `value` with its non-finite floats spelled, appending their paths to `spelled`.
    A container inside itself is refused with the words of `json.dumps`."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        spelled.append(path)
        return non_finite_spelling(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    if id(value) in ancestors:
        raise ValueError(f"Circular reference detected at {path}")
    ancestors.add(id(value))
    try:
        if isinstance(value, dict):
            copy: dict[Any, Any] = {}
            for key, item in value.items():
                if isinstance(key, float) and not math.isfinite(key):
                    key = non_finite_spelling(key)
                    spelled.append(f"{path} key {key}")
                copy[key] = _spell_non_finite(item, f"{path}.{key}", spelled, ancestors)
            return copy
        return [_spell_non_finite(item, f"{path}[{index}]", spelled, ancestors) for index, item in enumerate(value)]
    finally:
        ancestors.discard(id(value))
