"""What a tool call returns, the errors it raises, and the bounds every result respects."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field

from shared.core.contracts import EvidenceRef
from shared.core.evidence_view import as_evidence_ref
from shared.core.tool_results import read_result, rendered_refs

MAX_REF_TEXT_CHARS = 500
MAX_SCOPE_VALUE_CHARS = 200
_CACHED_INSTANTS = 4096


class ToolResult(BaseModel):
    """One call's outcome. Helper tools (not evidence) leave `evidence_status` as None."""

    tool_name: str
    evidence_status: Literal["EVIDENCE_FOUND", "NO_EVIDENCE"] | None = None
    # The compact JSON projection an agent sees; its structure mirrors the refs' raw_paths. An
    # evidence tool's is its typed result (shared/core/tool_results.py): the evidence refs are
    # rendered from it on demand, never stored beside it.
    agent_result: str
    # The backend the evidence came from (EvidenceRef.source of every rendered ref).
    source: str = ""
    # How many evidence refs the result's view holds (shared.core.tool_results.ref_count).
    ref_count: int = 0
    # Bounded description of what was asked (tool, service, filters, start, end).
    request_scope: dict[str, Any] = Field(default_factory=dict)
    # lookup_knowledge only: every hit had already been returned earlier in the run, so the
    # result is no new evidence (stored as retrieval_details.deduped; see knowledge_dedupe.py).
    deduped: bool = False

    def evidence_refs(self) -> list[EvidenceRef]:
        """Every evidence ref of the result, rendered (the view a stored call has; nothing keeps it)."""
        result = read_result(self.tool_name, self.agent_result)
        if result is None:
            return []
        return [as_evidence_ref(ref, self.source) for ref in rendered_refs(result)]


class ToolError(Exception):
    """A call that produced no result; the caller records it as an ERROR observation."""

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(f"{tool_name}: {message}")
        self.tool_name = tool_name
        self.message = message


class ToolArgumentError(ToolError):
    """The arguments were missing, malformed or out of bounds (or the tool is unknown)."""


class ToolBackendError(ToolError):
    """The backend behind the tool failed (database unreachable, query error)."""


def bounded_text(text: str, limit: int = MAX_REF_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def iso_utc(moment: datetime) -> str:
    """The one timestamp spelling of tool output: second precision, UTC, `Z` suffix."""
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    # The series of one call share their timestamps: each instant is spelled once.
    return _utc_spelling(moment)


@lru_cache(maxsize=_CACHED_INSTANTS)
def _utc_spelling(moment: datetime) -> str:
    # `YYYY-MM-DDTHH:MM:SS` (a four-digit year, zero-padded) is isoformat's first 19 characters;
    # strftime costs several times more.
    return moment.isoformat(timespec="seconds")[:19] + "Z"


def bounded_scope(**values: Any) -> dict[str, Any]:
    """A request scope with None values dropped and every value bounded."""
    scope: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            value = iso_utc(value)
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        if isinstance(value, str):
            value = bounded_text(value, MAX_SCOPE_VALUE_CHARS)
        scope[key] = value
    return scope
