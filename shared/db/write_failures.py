"""Which failed writes mean the audit store cannot take writes at all: out of space, or
read-only. Those turn the gateway NOT_SERVING (gateway/run_reaper.py); any other database error
is an ordinary failure of one call."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

# PostgreSQL SQLSTATEs: disk_full, insufficient_resources' out-of-space kin, read_only_sql_transaction.
_FULL_CODES = frozenset({"53100", "53000"})
_READ_ONLY_CODES = frozenset({"25006"})
_FULL_WORDS = ("database or disk is full", "no space left on device", "could not extend file", "disk full")
_READ_ONLY_WORDS = ("readonly database", "read-only", "read only", "query_only")

OUT_OF_SPACE = "the audit store is out of space"
READ_ONLY = "the audit store is read-only"


def unwritable_reason(exc: BaseException) -> str | None:
    """OUT_OF_SPACE or READ_ONLY when `exc` (or what caused it) says the store refuses writes; None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError):
            code = getattr(current.orig, "pgcode", None) or getattr(current.orig, "sqlstate", None)
            if code in _FULL_CODES:
                return OUT_OF_SPACE
            if code in _READ_ONLY_CODES:
                return READ_ONLY
        text = str(current).lower()
        if any(word in text for word in _FULL_WORDS):
            return OUT_OF_SPACE
        if any(word in text for word in _READ_ONLY_WORDS) and isinstance(current, DBAPIError | OSError):
            return READ_ONLY
        current = current.__cause__ or current.__context__
    return None
