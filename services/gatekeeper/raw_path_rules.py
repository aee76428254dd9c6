"""`evidence.raw_path`: the binding points at one evidence ref of the cited invocation.

Graph spec, "Missing raw path is low confidence", "Old invocation without evidence refs is low
confidence", "Unknown raw path is rejected"; "Raw path is never backfilled". Paths are compared
exactly (surrounding whitespace aside): `series[0].points[12]` is not `series[0].points[12 ]`.
"""

from __future__ import annotations

from services.gatekeeper.findings import Finding
from services.gatekeeper.rule_catalog import RAW_PATH
from shared.contracts import EvidenceRef, ToolInvocation


def refs_at_path(raw_path: str, invocation: ToolInvocation) -> tuple[list[EvidenceRef], list[Finding]]:
    """The invocation's evidence refs at raw_path (usually one), or why there are none."""
    if not raw_path:
        return [], [Finding(RAW_PATH, "low_confid", "binding has no raw_path; it is never backfilled")]
    details = invocation.retrieval_details
    refs = details.evidence_refs if details is not None else []
    if not refs:
        return [], [
            Finding(
                RAW_PATH,
                "low_confid",
                f"invocation {invocation.invocation_id} has no retrieval_details.evidence_refs",
            )
        ]
    matching = [ref for ref in refs if ref.raw_path.strip() == raw_path]
    if not matching:
        return [], [
            Finding(
                RAW_PATH,
                "reject",
                f"raw_path {raw_path[:120]!r} is not among invocation {invocation.invocation_id}'s evidence_refs",
            )
        ]
    return matching, []
