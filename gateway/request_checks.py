"""Input hygiene at the edge: what the gateway refuses before any work starts.

Text fields may not carry control characters (Unicode Cc, except newline, tab and carriage return
in a query) nor invisible format characters (Cf: bidi overrides and isolates, zero-width spaces
and joiners, the byte-order mark...), which can make a question read differently to a person
than to the model and the audit. Enum fields must hold a value the contract defines. The limits
come from GatewaySettings.
"""

from __future__ import annotations

import unicodedata

from google.protobuf.descriptor import EnumDescriptor

from shared.errors import InvalidInput, Reason

QUERY_ALLOWED_CONTROLS = frozenset({"\n", "\t", "\r"})
_REFUSED_CATEGORIES = {"Cc": "control", "Cf": "invisible format"}


def refuse_hidden_characters(field: str, text: str, allowed: frozenset[str] = frozenset()) -> None:
    """INVALID_ARGUMENT naming the first control or format character of `text`, and where it is."""
    for position, char in enumerate(text, start=1):
        kind = _REFUSED_CATEGORIES.get(unicodedata.category(char))
        if kind is not None and char not in allowed:
            name = unicodedata.name(char, "")
            named = f"U+{ord(char):04X}" + (f" ({name})" if name else "")
            raise InvalidInput(f"{field} contains the {kind} character {named} at position {position}; "
                               "remove it and ask again", reason=Reason.HIDDEN_CHARACTER, field=field,
                               metadata={"character": f"U+{ord(char):04X}", "position": position})


def check_length(field: str, text: str, max_chars: int, reason: Reason = Reason.IDENTIFIER_TOO_LONG) -> None:
    if len(text) > max_chars:
        raise InvalidInput(f"{field} is {len(text)} characters; the limit is {max_chars}", reason=reason,
                           field=field, metadata={"limit": max_chars, "length": len(text)})


def check_identifier(field: str, text: str, max_chars: int) -> None:
    """A session, run or label string: bounded, and no control or format characters (stored as
    text and used as a key; PostgreSQL refuses NUL in text)."""
    check_length(field, text, max_chars)
    refuse_hidden_characters(field, text)


def validate_query(query: str, max_chars: int) -> str:
    """The question, stripped; refused when empty, too long or carrying hidden characters."""
    refuse_hidden_characters("query", query, QUERY_ALLOWED_CONTROLS)
    text = query.strip()
    if not text:
        raise InvalidInput("query is empty", reason=Reason.QUERY_EMPTY, field="query")
    check_length("query", text, max_chars, Reason.QUERY_TOO_LONG)
    return text


def check_enum(field: str, enum: EnumDescriptor, number: int) -> int:
    """`number` when `enum` defines it; otherwise INVALID_ARGUMENT listing the allowed values."""
    if number not in enum.values_by_number:
        allowed = ", ".join(f"{value.name} ({value.number})" for value in enum.values)
        raise InvalidInput(f"{field} {number} is not a {enum.name}; allowed values: {allowed}",
                           reason=Reason.UNKNOWN_ENUM_VALUE, field=field,
                           metadata={"enum": enum.full_name, "value": number})
    return number
