"""Whether an EvidenceRepair changed what a reader of the Draft would see.

Spec "Evidence repair is single-turn and semantics-preserving": a repair may change identifiers
and references only — `analysis_id`, an Analysis' `tool_call_ids`, and the `analysis_refs` of the
Conclusion, Action Plan items and Recommendations (a typed statement's refs are references too).
Everything else is report semantics: whether there is a Conclusion, every text (compared exactly:
even whitespace is what the user reads; a typed item's statement and a conclusion's kind, whose
rendering the text is), an
Analysis' kind, the number and order of every section's items, and an Action Plan item's
human-confirmation flag. Limitations and missing context are user-visible text too.

Pure and shared: the gateway decides on the repair and must not import executor code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shared.draft_contract import Draft, statement_content

T = TypeVar("T")
# One visible property of an item: (name in the reason, how to read it).
Aspect = tuple[str, Callable[[Any], Any]]

def _says(item: Any) -> Any:
    """What an item says: a typed item's statement without its refs (its text is Attest's rendering,
    whose quote follows the refs), else its text."""
    if isinstance(item, str):
        return item
    statement = getattr(item, "statement", None)
    return item.text if statement is None else statement_content(statement)


_TEXT: Aspect = ("text", _says)
_CONTENT: Aspect = ("statement", statement_content)
_KIND: Aspect = ("kind", lambda analysis: analysis.kind)
_FLAG: Aspect = ("requires_human_confirmation", lambda item: item.requires_human_confirmation)


def _section_change(section: str, before: Sequence[T], after: Sequence[T], aspects: Sequence[Aspect]) -> str | None:
    """The first visible difference between two versions of a section: its size, its order (same
    items, other sequence), or an aspect of the first item that differs."""
    if len(before) != len(after):
        return f"{section}: {len(before)} item(s) became {len(after)}"

    def visible(item: T) -> tuple[Any, ...]:
        return tuple(read(item) for _, read in aspects)

    old, new = [visible(item) for item in before], [visible(item) for item in after]
    if old == new:
        return None
    if sorted(old, key=repr) == sorted(new, key=repr):
        return f"{section}: the order changed"
    index = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
    name = next(name for (name, _), a, b in zip(aspects, old[index], new[index]) if a != b)
    return f"{section}[{index}]: the {name} changed"


def repair_changes_semantics(before: Draft, after: Draft) -> str | None:
    """The first user-visible difference between the Draft before and after repair, as a short
    reason naming the field (never its content); None when only ids and references differ."""
    if (before.conclusion is None) != (after.conclusion is None):
        return "conclusion: added" if before.conclusion is None else "conclusion: removed"
    if before.conclusion is not None and after.conclusion is not None and (
            (before.conclusion.kind, _says(before.conclusion)) != (after.conclusion.kind, _says(after.conclusion))):
        return "conclusion: the text changed"
    sections: list[tuple[str, Sequence[Any], Sequence[Any], Sequence[Aspect]]] = [
        ("analyses", before.analyses, after.analyses, (_KIND, _TEXT)),
        ("action_plan", before.action_plan, after.action_plan, (_TEXT, _FLAG)),
        ("recommendations", before.recommendations, after.recommendations, (_TEXT,)),
        ("limitations", before.limitations, after.limitations, (_TEXT,)),
        ("missing_context", before.missing_context, after.missing_context, (_TEXT,)),
        ("limitation_statements", before.limitation_statements, after.limitation_statements, (_CONTENT,)),
        ("missing_context_statements", before.missing_context_statements, after.missing_context_statements, (_CONTENT,)),
    ]
    for section, old, new, aspects in sections:
        reason = _section_change(section, old, new, aspects)
        if reason is not None:
            return reason
    return None
