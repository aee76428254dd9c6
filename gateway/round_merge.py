"""The evidence retry adds to round 0 (DESIGN §3 ruling of 2026-11-30).

After an EVIDENCE_GAP_ONLY round the answer rests on the union of both rounds' verified claims:

- claim ids are namespaced per round (`r0.c1`, `r1.c1`), in the claims, their checks, the verified
  evidence and the checks' evidence refs, so the audit can say which round stated what;
- a round-1 claim closes a round-0 gap when it answers that gap's retry_context entry: it is
  confirmed (direct_observation or reasonable_inference), of the gap claim's type, about one of the
  gap's services (when the gap names any), from one of its tools (when it names any) and about one
  of the metric or field identifiers the gap's claim names (when it names any). The closed
  gap's claim leaves the set and the closing claim takes its place; each claim closes one gap at
  most;
- the other round-1 claims are added after round 0's (a claim whose sentence round 0 already
  stated is not repeated); side texts are appended with their checks re-indexed;
- the effective verdict, score and gaps are recomputed deterministically over the union
  (`shared.core.effective_verdict`), bounded by round 1's model verdict and ceiling: a round-1 REJECT
  (a contradiction or a fabricated key entity) still gives a degraded REJECT. A gap round 1 did
  not close is still in the union, unconfirmed, and so still named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from shared.core.contracts import (
    Claim,
    ClaimCheck,
    EffectiveVerdict,
    ExecutorEvidenceV2,
    RetryContext,
    SideTextCheck,
    VerifiedEvidence,
    VerifierOutput,
)
from shared.core.effective_verdict import checks_by_claim, compute_effective_verdict

CONFIRMED = frozenset({"direct_observation", "reasonable_inference"})
_ITEM = re.compile(r"^(?P<kind>[a-z_]+)\[(?P<index>\d+)\]$")
_SERVICE = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+")
# What a claim is about beyond its service: metric and field identifiers (cpu_usage_percent …).
_IDENTIFIER = re.compile(r"(?<![a-z0-9_])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![a-z0-9_])")


def namespaced(round_: int, claim_id: str) -> str:
    return f"r{round_}.{claim_id}"


@dataclass
class Merged:
    output: ExecutorEvidenceV2
    claim_checks: list[ClaimCheck]
    verified_evidence: list[VerifiedEvidence]
    verifier_output: VerifierOutput
    effective: EffectiveVerdict
    closed: dict[str, str] = field(default_factory=dict)  # round-0 claim id -> the round-1 claim id closing it
    open_gaps: list[str] = field(default_factory=list)  # round-0 gap claim ids round 1 did not close

    def summary(self) -> dict[str, Any]:
        return {"closed_gaps": dict(self.closed), "open_gaps": list(self.open_gaps),
                "claims": [c.claim_id for c in self.output.claims],
                "effective_verdict": self.effective.effective_verdict}


def _rename_claims(round_: int, claims: list[Claim]) -> list[Claim]:
    return [c.model_copy(update={"claim_id": namespaced(round_, c.claim_id)}) for c in claims]


def _rename_checks(round_: int, checks: list[ClaimCheck]) -> list[ClaimCheck]:
    renamed = []
    for check in checks:
        refs = [r.model_copy(update={"claim_id": namespaced(round_, r.claim_id) if r.claim_id else r.claim_id})
                for r in check.evidence_refs]
        renamed.append(check.model_copy(update={"claim_id": namespaced(round_, check.claim_id), "evidence_refs": refs}))
    return renamed


def _rename_evidence(round_: int, items: list[VerifiedEvidence]) -> list[VerifiedEvidence]:
    return [i.model_copy(update={"claim_id": namespaced(round_, i.claim_id) if i.claim_id else i.claim_id})
            for i in items]


def _shift_side_texts(checks: list[SideTextCheck], offsets: dict[str, int]) -> list[SideTextCheck]:
    shifted = []
    for check in checks:
        match = _ITEM.match(check.item)
        if match is None:
            continue  # an item we cannot place is not shown
        item = f"{match['kind']}[{int(match['index']) + offsets.get(match['kind'], 0)}]"
        shifted.append(check.model_copy(update={"item": item}))
    return shifted


def _answers(claim: Claim, check: ClaimCheck, gap_claim: Claim, services: list[str], tools: list[str]) -> bool:
    if check.verification not in CONFIRMED or claim.claim_type != gap_claim.claim_type:
        return False
    if services:
        named = set(_SERVICE.findall(claim.claim_text.casefold()))
        if not named & {s.casefold() for s in services}:
            return False
    if tools and not {b.tool_name for b in claim.evidence_bindings} & set(tools):
        return False
    subject = set(_IDENTIFIER.findall(gap_claim.claim_text.casefold()))
    if subject and not subject & set(_IDENTIFIER.findall(claim.claim_text.casefold())):
        return False  # about another metric: it answers some other question
    return True


def merge_rounds(round0: tuple[ExecutorEvidenceV2, list[ClaimCheck], list[VerifiedEvidence], VerifierOutput],
                 round1: tuple[ExecutorEvidenceV2, list[ClaimCheck], list[VerifiedEvidence], VerifierOutput],
                 retry_context: RetryContext, ceiling: str) -> Merged:
    """The union of both rounds (see the module docstring); `ceiling` is round 1's."""
    out0, checks0, evidence0, verifier0 = round0
    out1, checks1, evidence1, verifier1 = round1
    chosen0 = checks_by_claim(out0.claims, checks0)
    chosen1 = checks_by_claim(out1.claims, checks1)
    gaps = {gap.claim_id: gap for gap in retry_context.gaps}

    closing: dict[str, Claim] = {}  # round-0 claim id -> round-1 claim
    used: set[str] = set()
    for claim0 in out0.claims:
        gap = gaps.get(claim0.claim_id)
        if gap is None:
            continue
        for claim1 in out1.claims:
            if claim1.claim_id in used:
                continue
            if _answers(claim1, chosen1[claim1.claim_id], claim0, gap.services, gap.tool_names):
                closing[claim0.claim_id] = claim1
                used.add(claim1.claim_id)
                break

    stated = {" ".join(c.claim_text.split()) for c in out0.claims if c.claim_id not in closing}
    claims: list[Claim] = []
    checks: list[ClaimCheck] = []
    for claim0 in out0.claims:
        if claim0.claim_id in closing:
            claim1 = closing[claim0.claim_id]
            claims += _rename_claims(1, [claim1])
            checks += _rename_checks(1, [chosen1[claim1.claim_id]])
        else:
            claims += _rename_claims(0, [claim0])
            checks += _rename_checks(0, [chosen0[claim0.claim_id]])
    for claim1 in out1.claims:
        if claim1.claim_id in used or " ".join(claim1.claim_text.split()) in stated:
            continue
        claims += _rename_claims(1, [claim1])
        checks += _rename_checks(1, [chosen1[claim1.claim_id]])

    kept = {c.claim_id for c in claims}
    evidence = [e for e in _rename_evidence(0, evidence0) + _rename_evidence(1, evidence1)
                if not e.claim_id or e.claim_id in kept]
    offsets = {"hypotheses": len(out0.hypotheses), "recommended_actions": len(out0.recommended_actions),
               "missing_info": len(out0.missing_info)}
    side_texts = verifier0.side_text_checks + _shift_side_texts(verifier1.side_text_checks, offsets)
    output = ExecutorEvidenceV2(
        claims=claims,
        hypotheses=out0.hypotheses + out1.hypotheses,
        recommended_actions=out0.recommended_actions + out1.recommended_actions,
        missing_info=out0.missing_info + out1.missing_info,
    )
    model_verdict = "REJECT" if "REJECT" in (verifier0.verdict, verifier1.verdict) else verifier1.verdict
    effective = compute_effective_verdict(claims, checks, model_verdict, ceiling)
    verifier_output = VerifierOutput(
        verdict=model_verdict,
        groundedness_score=effective.groundedness_score,
        critical_fact_count=effective.critical_fact_count,
        claim_checks=checks,
        facts_checked=effective.facts_checked,
        rationale=(f"round 0 and round 1 merged: {len(closing)} of {len(gaps)} gap(s) closed; "
                   f"round 0: {verifier0.rationale} | round 1: {verifier1.rationale}")[:2000],
        side_text_checks=side_texts,
    )
    return Merged(
        output=output, claim_checks=checks, verified_evidence=evidence, verifier_output=verifier_output,
        effective=effective,
        closed={namespaced(0, k): namespaced(1, v.claim_id) for k, v in closing.items()},
        open_gaps=[namespaced(0, k) for k in gaps if k not in closing],
    )
