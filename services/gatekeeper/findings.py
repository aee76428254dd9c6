"""One rule failure found while checking an output, a claim or a binding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.core.contracts import Severity

SEVERITY_RANK: dict[str, int] = {"none": 0, "low_confid": 1, "reject": 2}
NOTHING_QUOTED = object()


@dataclass(frozen=True)
class Finding:
    """`detail` is in our words only, never a value the executor wrote (DESIGN §3, "Nothing a model
    wrote reaches another model unescaped"): the audit a verifier sees names the place, `field`
    (below the claim or binding, e.g. `claim_type`), and the executor's value there, `quoted`, goes
    only to the persisted audit, escaped (`quoted_values.py`)."""

    rule: str
    severity: Severity
    detail: str
    field: str = ""
    quoted: Any = NOTHING_QUOTED

    @property
    def text(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail


def worst(findings: list[Finding]) -> Finding | None:
    """The most severe finding (the first one among equals), or None."""
    best: Finding | None = None
    for finding in findings:
        if best is None or SEVERITY_RANK[finding.severity] > SEVERITY_RANK[best.severity]:
            best = finding
    return best
