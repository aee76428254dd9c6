"""Executor-written values in the gatekeeper audit: named by position, quoted only escaped.

DESIGN §3 ruling "Nothing a model wrote reaches another model unescaped". The errors, warnings and
checked bindings of `gatekeeper_result` name a claim, an enum value or a field by its position
(`claims[3]`, `claims[3].claim_type`, `claims[0].keys[2]` for the third key of claims[0]), never by
the executor's own string, because a verifier model reads them. The executor's value at such a
position is kept for the persisted audit in `executor_values`: escaped as Python's `repr` escapes
(control characters, bidi overrides and other non-printables visible as `\\x1b`, `\\u202e`) and
bounded; `GatekeeperResult.for_verifier` empties that list before the result reaches a verifier.

Only tokens that cannot carry an instruction pass unquoted: a claim id matching `CLAIM_ID`, a
source type or tool name matching `TOKEN`.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

from shared.core.contracts import ExecutorValue
from shared.executor_contract import CLAIM_ID_PATTERN

CLAIM_ID = re.compile(CLAIM_ID_PATTERN)
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,32}")
SOURCE_ID = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
MAX_VALUE_CHARS = 120
MAX_EXECUTOR_VALUES = 100

_BOUNDED = reprlib.Repr()
_BOUNDED.maxlevel, _BOUNDED.maxdict, _BOUNDED.maxlist = 2, 4, 4
_BOUNDED.maxstring = _BOUNDED.maxother = MAX_VALUE_CHARS


def is_token(value: Any, pattern: re.Pattern[str] = TOKEN) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def escaped(value: Any) -> ExecutorValue:
    """The value escaped and bounded (`at` left for the caller)."""
    if isinstance(value, str):
        text = repr(value[:MAX_VALUE_CHARS]) + ("…" if len(value) > MAX_VALUE_CHARS else "")
        return ExecutorValue(at="", value=text, chars=len(value))
    return ExecutorValue(at="", value=_BOUNDED.repr(value)[: MAX_VALUE_CHARS * 2])


class QuotedValues:
    """The executor values of one check, at most MAX_EXECUTOR_VALUES, one per position."""

    def __init__(self) -> None:
        self.values: list[ExecutorValue] = []
        self._at: set[str] = set()
        self.omitted = 0

    def add(self, at: str, value: Any) -> None:
        if at in self._at:
            return
        if len(self.values) >= MAX_EXECUTOR_VALUES:
            self.omitted += 1
            return
        self._at.add(at)
        self.values.append(escaped(value).model_copy(update={"at": at}))
