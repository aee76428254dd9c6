"""The deterministic effective verdict, groundedness score and evidence-retry rule (DESIGN §3).

One module, used by the verifier and by the gateway, which recomputes the verdict itself rather
than trusting a downstream's arithmetic. Graph spec: "groundedness_score SHALL be derived from fact
classifications", "facts_checked SHALL use a fixed classification set", "Gatekeeper severity SHALL
constrain effective verdict", "LOW_CONFID qualifies for evidence retry".

1. Any critical claim `contradicted` -> REJECT, groundedness 0.0.
2. Score = mean over critical facts of direct_evidence 1.0 / indirect_support 0.6 /
   no_evidence 0.0, clamped to [0, 1]; no critical fact -> 0.0.
3. Upper bound: PASS only if every critical claim is direct_observation or reasonable_inference
   and at least one is direct_observation; otherwise LOW_CONFID.
4. Effective = the lowest of model verdict, upper bound and verdict ceiling.
5. After the rounds: a failed evidence call that no later round recovered caps the verdict at
   LOW_CONFID (`cap_for_failed_calls`), as a partial service coverage does
   (`cap_for_coverage`). In round 0 such a call is a critical gap that triggers the one retry.

A claim is critical when its type is in CRITICAL_CLAIM_TYPES (every type but `context`). A
verified claim with no claim check counts as `unsupported`. When several checks name the same
claim, the most damaging one counts (contradicted, then no evidence, then overstated, …).
Checks naming claims that are not in `claims` are ignored: only verified claims are judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from pydantic import BaseModel

from shared.core.contracts import (
    CRITICAL_CLAIM_TYPES,
    VERDICT_ORDER,
    VERIFICATIONS,
    ClaimCheck,
    EffectiveVerdict,
    EvidenceGap,
    FactCheck,
    FailedCall,
    LegacyVerification,
    RetryContext,
    ServiceCoverage,
    Verdict,
)

LEGACY_VERIFICATION: dict[str, LegacyVerification] = {
    "direct_observation": "direct_evidence",
    "reasonable_inference": "indirect_support",
    "overstated": "indirect_support",
    "unsupported": "no_evidence",
    "external_unknown": "no_evidence",
    "contradicted": "contradicted",
}
SCORE: dict[str, float] = {"direct_evidence": 1.0, "indirect_support": 0.6, "no_evidence": 0.0, "contradicted": 0.0}
# Most damaging first: the order in which duplicate checks for one claim are resolved.
_DAMAGE_ORDER: tuple[str, ...] = (
    "contradicted",
    "external_unknown",
    "unsupported",
    "overstated",
    "reasonable_inference",
    "direct_observation",
)
FAILED_CALL_GAP_PREFIX = "failed_call."
GAP_VERIFICATIONS: frozenset[str] = frozenset({"unsupported", "external_unknown"})
_SERVICE_NAME = re.compile(r"(?<![A-Za-z0-9_.-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![A-Za-z0-9_-])")


class ClaimRef(BaseModel):
    """The part of a claim the verdict needs (a Claim, or `{claim_id, claim_type}` from the CLI)."""

    claim_id: str
    claim_type: str
    claim_text: str = ""


def _as_ref(claim: Any) -> ClaimRef:
    if isinstance(claim, ClaimRef):
        return claim
    if isinstance(claim, Mapping):
        return ClaimRef.model_validate(claim)
    return ClaimRef(
        claim_id=claim.claim_id, claim_type=claim.claim_type, claim_text=getattr(claim, "claim_text", "") or ""
    )


def _as_check(check: Any) -> ClaimCheck:
    return check if isinstance(check, ClaimCheck) else ClaimCheck.model_validate(check)


def _is_verdict(value: str) -> TypeGuard[Verdict]:
    return value in VERDICT_ORDER


def _verdict(value: str, what: str) -> Verdict:
    if not _is_verdict(value):
        raise ValueError(f"{what} must be one of PASS, LOW_CONFID, REJECT; got {value!r}")
    return value


def legacy_verification(verification: str) -> LegacyVerification:
    """The compatibility classification of one claim-check verification."""
    try:
        return LEGACY_VERIFICATION[verification]
    except KeyError:
        raise ValueError(f"unknown verification {verification!r}; expected one of {VERIFICATIONS}") from None


def is_critical(claim_type: str) -> bool:
    return claim_type in CRITICAL_CLAIM_TYPES


def checks_by_claim(claims: Sequence[Any], claim_checks: Sequence[Any]) -> dict[str, ClaimCheck]:
    """The deciding check per claim id (missing claims -> an `unsupported` check)."""
    refs = [_as_ref(claim) for claim in claims]
    wanted = {ref.claim_id for ref in refs}
    chosen: dict[str, ClaimCheck] = {}
    for raw in claim_checks:
        check = _as_check(raw)
        if check.claim_id not in wanted:
            continue
        current = chosen.get(check.claim_id)
        if current is None or _DAMAGE_ORDER.index(check.verification) < _DAMAGE_ORDER.index(current.verification):
            chosen[check.claim_id] = check
    for ref in refs:
        if ref.claim_id not in chosen:
            chosen[ref.claim_id] = ClaimCheck(
                claim_id=ref.claim_id,
                claim_text=ref.claim_text,
                claim_type=ref.claim_type,
                verification="unsupported",
                detail="no claim check was returned for this claim",
            )
    return chosen


def derive_facts_checked(claims: Sequence[Any], claim_checks: Sequence[Any]) -> list[FactCheck]:
    """The compatibility facts_checked: one fact per verified claim, in claim order."""
    chosen = checks_by_claim(claims, claim_checks)
    facts: list[FactCheck] = []
    for claim in (_as_ref(c) for c in claims):
        check = chosen[claim.claim_id]
        text = claim.claim_text or check.claim_text
        facts.append(
            FactCheck(
                fact=f"{claim.claim_id}: {text}",
                is_critical=is_critical(claim.claim_type),
                verification=legacy_verification(check.verification),
                detail=check.detail,
                evidence_refs=[ref.model_copy() for ref in check.evidence_refs],
            )
        )
    return facts


def groundedness_score(facts: Sequence[FactCheck]) -> float:
    critical = [fact for fact in facts if fact.is_critical]
    if not critical or any(fact.verification == "contradicted" for fact in critical):
        return 0.0
    score = sum(SCORE[fact.verification] for fact in critical) / len(critical)
    return round(min(1.0, max(0.0, score)), 6)


def _lowest(*verdicts: Verdict) -> Verdict:
    return min(verdicts, key=VERDICT_ORDER.__getitem__)


def compute_effective_verdict(
    claims: Sequence[Any],
    claim_checks: Sequence[Any],
    model_verdict: str,
    verdict_ceiling: str,
) -> EffectiveVerdict:
    """DESIGN §3, rules 1–4. Raises ValueError for a verdict outside PASS/LOW_CONFID/REJECT."""
    model = _verdict(model_verdict, "model_verdict")
    ceiling = _verdict(verdict_ceiling, "verdict_ceiling")
    facts = derive_facts_checked(claims, claim_checks)
    chosen = checks_by_claim(claims, claim_checks)
    critical = [ref for ref in (_as_ref(c) for c in claims) if is_critical(ref.claim_type)]
    critical_verifications = [chosen[ref.claim_id].verification for ref in critical]
    if "contradicted" in critical_verifications:
        return EffectiveVerdict(
            effective_verdict="REJECT",
            groundedness_score=0.0,
            critical_fact_count=len(critical),
            facts_checked=facts,
            upper_bound="REJECT",
        )
    supported = {"direct_observation", "reasonable_inference"}
    upper: Verdict = (
        "PASS"
        if critical_verifications
        and all(v in supported for v in critical_verifications)
        and "direct_observation" in critical_verifications
        else "LOW_CONFID"
    )
    return EffectiveVerdict(
        effective_verdict=_lowest(model, upper, ceiling),
        groundedness_score=groundedness_score(facts),
        critical_fact_count=len(critical),
        facts_checked=facts,
        upper_bound=upper,
    )


def cap_for_coverage(verdict: str, coverage: ServiceCoverage | None) -> Verdict:
    """An answer that leaves out a service the question named (unknown to the
    backends, or beyond the per-question limit) is never PASS: the verdict is at most
    LOW_CONFID. Applied to the final verdict after rules 1–4 (and after the retry decision, which
    concerns the evidence of the services that were checked)."""
    value = _verdict(verdict, "verdict")
    if coverage is not None and coverage.partial:
        return _lowest(value, "LOW_CONFID")
    return value


def cap_for_failed_calls(verdict: str, failed: Sequence[FailedCall]) -> Verdict:
    """A failed evidence call that no later round recovered is a critical gap
    the evidence cannot close, so the verdict is at most LOW_CONFID. It does not lower the
    gatekeeper's verdict_ceiling (the retry may still run the call again); it bounds the answer."""
    value = _verdict(verdict, "verdict")
    if any(not call.recovered for call in failed):
        return _lowest(value, "LOW_CONFID")
    return value


def critical_gaps(claims: Sequence[Any], claim_checks: Sequence[Any]) -> list[ClaimCheck]:
    """Critical claims whose deciding check is unsupported or external_unknown, in claim order."""
    chosen = checks_by_claim(claims, claim_checks)
    return [
        chosen[ref.claim_id]
        for ref in (_as_ref(c) for c in claims)
        if is_critical(ref.claim_type) and chosen[ref.claim_id].verification in GAP_VERIFICATIONS
    ]


def should_retry_evidence(
    effective: str | EffectiveVerdict,
    verdict_ceiling: str,
    claims: Sequence[Any],
    claim_checks: Sequence[Any],
    evidence_retry_count: int,
    failed_calls: Sequence[FailedCall] = (),
) -> bool:
    """One EVIDENCE_GAP_ONLY round: effective LOW_CONFID, ceiling PASS, ≥1 critical gap, no retry yet.

    A failed evidence call is a critical gap too: with ceiling PASS and no
    retry yet it triggers the round (which runs the call again) unless the verdict is REJECT; the
    verdict it would otherwise have been given is no bar, since the failure caps it anyway.
    """
    verdict = effective.effective_verdict if isinstance(effective, EffectiveVerdict) else effective
    if verdict_ceiling != "PASS" or evidence_retry_count != 0:
        return False
    if any(not call.recovered for call in failed_calls) and verdict in ("PASS", "LOW_CONFID"):
        return True
    return verdict == "LOW_CONFID" and bool(critical_gaps(claims, claim_checks))


def build_retry_context(
    claims: Sequence[Any],
    claim_checks: Sequence[Any],
    services: Sequence[str] | None = None,
    evidence_retry_count: int = 1,
    failed_calls: Sequence[FailedCall] = (),
) -> RetryContext:
    """The structured gaps for the retry planner; never raw text beyond the claim's own sentence.

    `evidence_retry_count` is the count of the round the context prepares (1 for the one retry).
    Each gap names the services the claim mentions (hyphenated names), else `services`, and the
    tools its verified bindings used. Each failed evidence call no later round recovered adds a
    gap of its own (claim id `failed_call.<invocation id>`, verification external_unknown, its
    tool and service), one per tool and service, so the retry planner plans that call again.
    """
    refs = {ref.claim_id: ref for ref in (_as_ref(c) for c in claims)}
    gaps: list[EvidenceGap] = []
    for check in critical_gaps(claims, claim_checks):
        ref = refs[check.claim_id]
        text = ref.claim_text or check.claim_text
        named = list(dict.fromkeys(_SERVICE_NAME.findall(text.casefold())))
        claim = next((c for c in claims if _as_ref(c).claim_id == check.claim_id), None)
        bindings = getattr(claim, "evidence_bindings", None) or []
        tools = list(dict.fromkeys(b.tool_name for b in bindings if getattr(b, "tool_name", "")))
        tools += [r.tool_name for r in check.evidence_refs if r.tool_name and r.tool_name not in tools]
        gaps.append(
            EvidenceGap(
                claim_id=check.claim_id,
                claim_text=text[:500],
                verification=check.verification,
                services=named or list(services or []),
                tool_names=tools,
            )
        )
    seen: set[tuple[str, str]] = set()
    for call in failed_calls:
        if call.recovered or (call.tool_name, call.service) in seen:
            continue
        seen.add((call.tool_name, call.service))
        gaps.append(
            EvidenceGap(
                claim_id=f"{FAILED_CALL_GAP_PREFIX}{call.invocation_id}",
                verification="external_unknown",
                services=[call.service] if call.service else list(services or []),
                tool_names=[call.tool_name],
            )
        )
    return RetryContext(evidence_retry_count=evidence_retry_count, gaps=gaps)
