"""Tools of the text readers that run per diagnosis on the same few texts (the grounding checks,
the executor's findings): a bounded per-text memo of a pure reader, and a pattern skipped where the
substrings it needs are absent."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache, wraps
from typing import TypeVar

_Result = TypeVar("_Result")


def per_text_cache(max_texts: int, max_chars: int) -> Callable[[Callable[[str], _Result]], Callable[[str], _Result]]:
    """Keep the results of a pure reader (text -> an immutable result: tuples of frozen values) for
    the last `max_texts` texts of at most `max_chars` characters; a longer text is read every time,
    so the memory kept stays bounded. The grounding checks read the same statements and cited texts
    several times per diagnosis (each claim is grounded by the engine and again by the servicer)."""

    def decorate(read: Callable[[str], _Result]) -> Callable[[str], _Result]:
        kept = lru_cache(maxsize=max_texts)(read)

        @wraps(read)
        def reading(text: str) -> _Result:
            return kept(text) if len(text) <= max_chars else read(text)

        return reading

    return decorate


@dataclass(frozen=True)
class Scan:
    """A pattern that matches only where one of `needs` occurs in the text: a text holding none of
    them is not scanned (a substring test is much cheaper than the pattern's scan). The grounding
    readers' patterns that start with a lookbehind or an optional prefix are tried at every
    position of every text they read."""

    pattern: re.Pattern[str]
    needs: tuple[str, ...]

    def search(self, text: str) -> re.Match[str] | None:
        return self.pattern.search(text) if any(need in text for need in self.needs) else None

    def finditer(self, text: str) -> list[re.Match[str]]:
        return list(self.pattern.finditer(text)) if any(need in text for need in self.needs) else []


def alternation(words: Iterable[str]) -> str:
    """A regex alternation of literal words, longest first (so that 不是 wins over 不)."""
    return "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))


_SYNTAX = frozenset(".^$*+?{}[]|()\\")


def literal_part(pattern: str) -> str:
    """Text that every match of `pattern` (compiled without flags) holds, for a `Scan`'s needs:
    its characters before the first regex syntax (after a leading `\\b`), less one that a
    quantifier follows; "" when none is known (an alternation or a group, or syntax first)."""
    body = pattern[2:] if pattern.startswith("\\b") else pattern
    if "|" in body or "(" in body:
        return ""
    literal = ""
    for char in body:
        if char in _SYNTAX:
            return literal[:-1] if char in "*?{" else literal
        literal += char
    return literal
