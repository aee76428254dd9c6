"""One rule failure found while checking an output, a claim or a binding."""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.contracts import Severity

SEVERITY_RANK: dict[str, int] = {"none": 0, "low_confid": 1, "reject": 2}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    detail: str


def worst(findings: list[Finding]) -> Finding | None:
    """The most severe finding (the first one among equals), or None."""
    best: Finding | None = None
    for finding in findings:
        if best is None or SEVERITY_RANK[finding.severity] > SEVERITY_RANK[best.severity]:
            best = finding
    return best
