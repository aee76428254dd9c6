"""The evidence retry adds to round 0: the union the answer rests on."""

from __future__ import annotations

from gateway.round_merge import merge_rounds
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    EvidenceBinding,
    EvidenceGap,
    ExecutorEvidenceV2,
    Hypothesis,
    RetryContext,
    SideTextCheck,
    VerifiedEvidence,
    VerifierOutput,
)


def _claim(claim_id: str, text: str, tool: str = "query_metrics", claim_type: str = "symptom") -> Claim:
    return Claim(claim_id=claim_id, claim_type=claim_type, claim_text=text, support_level="direct",
                 evidence_bindings=[EvidenceBinding(source_type="metrics", tool_name=tool, source_invocation_id=1,
                                                    source_invocation_ids=[1], raw_path="series[0].points[1]",
                                                    evidence_excerpt="x")])


def _check(claim: Claim, verification: str, fabricated: bool = False) -> ClaimCheck:
    return ClaimCheck(claim_id=claim.claim_id, claim_text=claim.claim_text, claim_type=claim.claim_type,
                      verification=verification, fabricated_key=fabricated)


def _evidence(claim: Claim) -> VerifiedEvidence:
    return VerifiedEvidence(claim_id=claim.claim_id, source_invocation_id=1, tool_name="query_metrics",
                            raw_path="series[0].points[1]", matched_text="x")


def _round(claims, checks, verdict, hypotheses=(), side=()):
    output = ExecutorEvidenceV2(claims=list(claims), hypotheses=list(hypotheses))
    return (output, list(checks), [_evidence(c) for c in claims],
            VerifierOutput(verdict=verdict, groundedness_score=0.5, claim_checks=list(checks),
                           side_text_checks=list(side)))


FACT = _claim("c1", "alpha-svc 的 cpu_usage_percent 在 T1 达到 97%。")
GAP = _claim("c2", "alpha-svc 的 db_pool_active 在 T2 达到 50。")
GAP_CONTEXT = RetryContext(evidence_retry_count=1, gaps=[
    EvidenceGap(claim_id="c2", claim_text=GAP.claim_text, verification="unsupported", services=["alpha-svc"],
                tool_names=["query_metrics"]),
])
ROUND0 = _round([FACT, GAP], [_check(FACT, "direct_observation"), _check(GAP, "unsupported")], "LOW_CONFID")


def test_round_0_facts_stay_and_a_closing_claim_takes_the_gaps_place():
    closing = _claim("c1", "alpha-svc 的 db_pool_active 在 T3 达到 48。")
    round1 = _round([closing], [_check(closing, "direct_observation")], "PASS")
    merged = merge_rounds(ROUND0, round1, GAP_CONTEXT, "PASS")
    assert [c.claim_id for c in merged.output.claims] == ["r0.c1", "r1.c1"]
    assert merged.closed == {"r0.c2": "r1.c1"} and merged.open_gaps == []
    assert merged.effective.effective_verdict == "PASS"
    assert {e.claim_id for e in merged.verified_evidence} == {"r0.c1", "r1.c1"}


def test_a_gap_round_1_did_not_close_is_still_named_and_keeps_the_verdict_low():
    other = _claim("c1", "alpha-svc 的 heap_used_bytes 在 T3 达到 2 GB。")
    round1 = _round([other], [_check(other, "direct_observation")], "PASS")
    merged = merge_rounds(ROUND0, round1, GAP_CONTEXT, "PASS")
    assert [c.claim_id for c in merged.output.claims] == ["r0.c1", "r0.c2", "r1.c1"]
    assert merged.open_gaps == ["r0.c2"]
    unconfirmed = [k.claim_id for k in merged.claim_checks if k.verification == "unsupported"]
    assert unconfirmed == ["r0.c2"]
    assert merged.effective.effective_verdict == "LOW_CONFID"


def test_a_claim_of_another_service_or_an_unconfirmed_one_closes_nothing():
    elsewhere = _claim("c1", "beta-svc 的 db_pool_active 在 T3 达到 48。")
    unconfirmed = _claim("c2", "alpha-svc 的 db_pool_active 在 T3 达到 48。")
    round1 = _round([elsewhere, unconfirmed],
                    [_check(elsewhere, "direct_observation"), _check(unconfirmed, "external_unknown")], "LOW_CONFID")
    merged = merge_rounds(ROUND0, round1, GAP_CONTEXT, "PASS")
    assert merged.closed == {} and merged.open_gaps == ["r0.c2"]


def test_a_round_1_reject_still_gives_reject():
    lie = _claim("c1", "alpha-svc 的 db_pool_active 在 T3 达到 480，由 gamma-db 故障引起。", claim_type="root_cause")
    round1 = _round([lie], [_check(lie, "external_unknown", fabricated=True)], "REJECT")
    merged = merge_rounds(ROUND0, round1, GAP_CONTEXT, "PASS")
    assert merged.effective.effective_verdict == "REJECT"
    assert merged.verifier_output.verdict == "REJECT"


def test_the_same_sentence_is_not_stated_twice_and_side_texts_are_reindexed():
    again = _claim("c1", FACT.claim_text)
    round0 = _round([FACT, GAP], [_check(FACT, "direct_observation"), _check(GAP, "unsupported")], "LOW_CONFID",
                    hypotheses=[Hypothesis(text="h0")],
                    side=[SideTextCheck(item="hypotheses[0]", text="h0", shown=True)])
    round1 = _round([again], [_check(again, "direct_observation")], "PASS", hypotheses=[Hypothesis(text="h1")],
                    side=[SideTextCheck(item="hypotheses[0]", text="h1", shown=True)])
    merged = merge_rounds(round0, round1, GAP_CONTEXT, "PASS")
    assert [c.claim_text for c in merged.output.claims].count(FACT.claim_text) == 1
    assert [h.text for h in merged.output.hypotheses] == ["h0", "h1"]
    assert [(s.item, s.text) for s in merged.verifier_output.side_text_checks] == [
        ("hypotheses[0]", "h0"), ("hypotheses[1]", "h1")]
