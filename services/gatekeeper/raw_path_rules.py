"""`evidence.raw_path`: the binding points at one evidence ref of the cited invocation.

Graph spec, "Missing raw path is low confidence", "Old invocation without evidence refs is low
confidence", "Unknown raw path is rejected"; "Raw path is never backfilled". Paths are compared
exactly (surrounding whitespace aside): `series[0].points[12]` is not `series[0].points[12 ]`.
"""

from __future__ import annotations

from services.gatekeeper.findings import Finding
from services.gatekeeper.rule_catalog import RAW_PATH
from shared.core.contracts import EvidenceRef, ToolInvocation


class RefIndex:
    """Each cited invocation's evidence refs by raw_path, built once per gatekeeper check: a
    binding's lookup costs the same however many refs the invocation has."""

    def __init__(self) -> None:
        self._by_invocation: dict[int, tuple[ToolInvocation, dict[str, list[EvidenceRef]]]] = {}

    def paths(self, invocation: ToolInvocation) -> dict[str, list[EvidenceRef]]:
        key = id(invocation)
        cached = self._by_invocation.get(key)
        if cached is None or cached[0] is not invocation:
            details = invocation.retrieval_details
            index: dict[str, list[EvidenceRef]] = {}
            for ref in details.evidence_refs if details is not None else []:
                index.setdefault(ref.raw_path.strip(), []).append(ref)
            cached = (invocation, index)  # holding the invocation keeps its id() unique
            self._by_invocation[key] = cached
        return cached[1]

    def refs_at_path(self, raw_path: str, invocation: ToolInvocation) -> tuple[list[EvidenceRef], list[Finding]]:
        """The invocation's evidence refs at raw_path (usually one), or why there are none."""
        if not raw_path:
            return [], [Finding(RAW_PATH, "low_confid", "binding has no raw_path; it is never backfilled")]
        paths = self.paths(invocation)
        if not paths:
            return [], [
                Finding(
                    RAW_PATH,
                    "low_confid",
                    f"invocation {invocation.invocation_id} has no retrieval_details.evidence_refs",
                )
            ]
        matching = paths.get(raw_path)
        if not matching:
            return [], [
                Finding(
                    RAW_PATH,
                    "reject",
                    f"raw_path {raw_path[:120]!r} is not among invocation {invocation.invocation_id}'s evidence_refs",
                )
            ]
        return list(matching), []


def refs_at_path(raw_path: str, invocation: ToolInvocation) -> tuple[list[EvidenceRef], list[Finding]]:
    """One lookup without a shared index (the engine keeps a RefIndex per check)."""
    return RefIndex().refs_at_path(raw_path, invocation)
