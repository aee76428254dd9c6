"""Cutting a line of text to a budget without breaking a token.

A run list shows the start of a question or an answer. Cut at a fixed index, it splits whatever
stands there: `2026-12-` / `03`, `query_m` / `etrics`, half a run id. Here the text is read as
atoms: a timestamp (`2026-11-30 11:50:00`, `2026-11-30T11:50:00Z`), a token of letters, digits
and the punctuation that joins them (`pay-svc`, `v2.14.0`, `query_metrics`, `changes[0]`), or any
other single character (a CJK character, a space, a mark). The cut falls between atoms, trailing
spaces are dropped, and `…` says that something was left out. Only an atom longer than the whole
budget is cut inside, since nothing else fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable

ELLIPSIS = "…"
_ATOM = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|[A-Za-z0-9_][A-Za-z0-9_.:/#@%+\-\[\]]*"
    r"|.",
    re.DOTALL,
)


def cut(text: str, budget: int, measure: Callable[[str], int] = len) -> str:
    """`text` if it measures at most `budget`, else its longest run of whole atoms that fits with
    `…` after it. `measure` is how length is counted: characters (`len`) or terminal cells."""
    if measure(text) <= budget:
        return text
    room = budget - measure(ELLIPSIS)
    kept: list[str] = []
    used = 0
    for match in _ATOM.finditer(text):
        atom = match.group()
        size = measure(atom)
        if used + size > room:
            if not kept:  # one atom longer than the budget: cut inside it, by character
                kept.append(_prefix(atom, room, measure))
            break
        kept.append(atom)
        used += size
    return "".join(kept).rstrip() + ELLIPSIS


def _prefix(atom: str, room: int, measure: Callable[[str], int]) -> str:
    end = 0
    while end < len(atom) and measure(atom[:end + 1]) <= room:
        end += 1
    return atom[:end]
