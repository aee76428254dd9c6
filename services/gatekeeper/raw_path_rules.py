"""`evidence.raw_path`: the binding points at one evidence ref of the cited invocation.

Graph spec, "Missing raw path is low confidence", "Old invocation without evidence refs is low
confidence", "Unknown raw path is rejected"; "Raw path is never backfilled". Paths are compared
exactly (surrounding whitespace aside): `series[0].points[12]` is not `series[0].points[12 ]`.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.gatekeeper.findings import Finding
from services.gatekeeper.rule_catalog import RAW_PATH
from shared.core.contracts import ToolInvocation
from shared.core.evidence_view import CitedRef, EvidenceView, evidence_view


class RefIndex:
    """The cited invocations' evidence views, kept for one gatekeeper check: each stored result
    is read once, and a binding's lookup renders only the ref it cites (never the whole list) and
    reads its path and text as rendered."""

    def __init__(self) -> None:
        self._views: dict[int, tuple[ToolInvocation, EvidenceView]] = {}

    def view(self, invocation: ToolInvocation) -> EvidenceView:
        key = id(invocation)
        cached = self._views.get(key)
        if cached is None or cached[0] is not invocation:
            cached = (invocation, evidence_view(invocation))  # holding the invocation keeps its id() unique
            self._views[key] = cached
        return cached[1]

    def refs_at_path(self, raw_path: str, invocation: ToolInvocation) -> tuple[Sequence[CitedRef], list[Finding]]:
        """The invocation's evidence refs at raw_path (usually one), or why there are none."""
        if not raw_path:
            return [], [Finding(RAW_PATH, "low_confid", "binding has no raw_path; it is never backfilled")]
        view = self.view(invocation)
        if not view.count():
            return [], [
                Finding(
                    RAW_PATH,
                    "low_confid",
                    f"invocation {invocation.invocation_id} has no retrieval_details.evidence_refs",
                )
            ]
        matching = view.cited_at(raw_path)
        if not matching:
            return [], [
                Finding(
                    RAW_PATH,
                    "reject",
                    f"not among invocation {invocation.invocation_id}'s evidence_refs",
                    "raw_path",
                    raw_path,
                )
            ]
        return matching, []


def refs_at_path(raw_path: str, invocation: ToolInvocation) -> tuple[Sequence[CitedRef], list[Finding]]:
    """One lookup without a shared index (the engine keeps a RefIndex per check)."""
    return RefIndex().refs_at_path(raw_path, invocation)
