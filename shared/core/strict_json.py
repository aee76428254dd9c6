"""The one strict reader of a model's JSON reply.

A reply JSON can read two ways is not one answer: duplicate keys and the non-JSON constants
NaN/Infinity are refused (PostgreSQL's json columns refuse them too, so nothing stored can hold
them). `one_json_object` adds what every model-reply parser asks for: the whole reply, surrounding
whitespace aside, is exactly one JSON object — no fences, no prose around it.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DETAIL_CHARS = 120


class DuplicateKey(ValueError):
    """An object names the same key twice."""


class NotOneObject(ValueError):
    """The reply is not exactly one JSON object; the message says why, in a caller's words."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(f"duplicate key {key[:60]!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def loads_strict_json(text: str) -> Any:
    """json.loads that also refuses duplicate keys and NaN/Infinity."""
    return DECODER.decode(text)


def one_json_object(text: str, what: str = "reply") -> dict[str, Any]:
    """The object `text` is, or NotOneObject: `<what> must be exactly one JSON object, without
    fences or prose`, `invalid JSON: …` or `<what> must be a JSON object`."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise NotOneObject(f"{what} must be exactly one JSON object, without fences or prose")
    try:
        data = loads_strict_json(body)
    except (ValueError, RecursionError) as exc:
        raise NotOneObject(f"invalid JSON: {str(exc)[:MAX_DETAIL_CHARS]}") from None
    if not isinstance(data, dict):
        raise NotOneObject(f"{what} must be a JSON object")
    return data
