"""DESIGN §3: the effective verdict, groundedness score, facts_checked mapping and retry rule."""

import pytest

from shared.core.contracts import CLAIM_TYPES, Claim, ClaimCheck, EvidenceBinding, ServiceCoverage, UnknownService
from shared.core.effective_verdict import (
    build_retry_context,
    cap_for_coverage,
    compute_effective_verdict,
    derive_facts_checked,
    legacy_verification,
    should_retry_evidence,
)


def claim(claim_id, claim_type="symptom", text=None, tools=("query_metrics",)):
    return Claim(
        claim_id=claim_id,
        claim_type=claim_type,
        claim_text=text or f"text of {claim_id}",
        support_level="direct",
        evidence_bindings=[EvidenceBinding(tool_name=t, source_invocation_id=1, raw_path="p") for t in tools],
    )


def check(claim_id, verification):
    return ClaimCheck(claim_id=claim_id, verification=verification, detail=f"{verification} detail")


def verdict(pairs, model="PASS", ceiling="PASS", types=None):
    types = types or {}
    claims = [claim(cid, types.get(cid, "symptom")) for cid, _ in pairs]
    checks = [check(cid, v) for cid, v in pairs if v is not None]
    return compute_effective_verdict(claims, checks, model, ceiling)


@pytest.mark.parametrize(
    ("verification", "legacy"),
    [
        ("direct_observation", "direct_evidence"),
        ("reasonable_inference", "indirect_support"),
        ("overstated", "indirect_support"),
        ("unsupported", "no_evidence"),
        ("external_unknown", "no_evidence"),
        ("contradicted", "contradicted"),
    ],
)
def test_legacy_mapping(verification, legacy):
    assert legacy_verification(verification) == legacy


def test_unknown_verification_is_refused():
    with pytest.raises(ValueError):
        legacy_verification("probably")


def test_facts_checked_are_derived_per_claim_with_criticality_by_type():
    claims = [claim(f"c{i}", t) for i, t in enumerate(CLAIM_TYPES)]
    checks = [check(c.claim_id, "direct_observation") for c in claims]
    facts = derive_facts_checked(claims, checks)
    assert [f.fact for f in facts] == [f"{c.claim_id}: {c.claim_text}" for c in claims]
    assert {t: f.is_critical for t, f in zip(CLAIM_TYPES, facts)} == {t: t != "context" for t in CLAIM_TYPES}
    assert facts[0].verification == "direct_evidence" and facts[0].detail == "direct_observation detail"


def test_contradicted_critical_claim_rejects_with_zero_score():
    result = verdict([("c1", "direct_observation"), ("c2", "contradicted")])
    assert (result.effective_verdict, result.groundedness_score, result.upper_bound) == ("REJECT", 0.0, "REJECT")


def test_contradicted_context_claim_does_not_reject():
    result = verdict([("c1", "direct_observation"), ("c2", "contradicted")], types={"c2": "context"})
    assert result.effective_verdict == "PASS"
    assert result.groundedness_score == 1.0
    assert result.critical_fact_count == 1


@pytest.mark.parametrize(
    ("pairs", "score"),
    [
        ([("c1", "direct_observation")], 1.0),
        ([("c1", "direct_observation"), ("c2", "reasonable_inference")], 0.8),
        ([("c1", "direct_observation"), ("c2", "overstated")], 0.8),
        ([("c1", "direct_observation"), ("c2", "unsupported")], 0.5),
        ([("c1", "external_unknown"), ("c2", "reasonable_inference")], 0.3),
        ([("c1", "unsupported")], 0.0),
    ],
)
def test_score_is_the_mean_of_critical_mapped_values(pairs, score):
    assert verdict(pairs).groundedness_score == pytest.approx(score)


def test_no_critical_fact_scores_zero_and_cannot_pass():
    result = verdict([("c1", "direct_observation")], types={"c1": "context"})
    assert result.groundedness_score == 0.0
    assert result.critical_fact_count == 0
    assert result.upper_bound == "LOW_CONFID"
    assert result.effective_verdict == "LOW_CONFID"


def test_upper_bound_pass_needs_all_supported_and_one_direct():
    assert verdict([("c1", "direct_observation"), ("c2", "reasonable_inference")]).upper_bound == "PASS"
    assert verdict([("c1", "reasonable_inference"), ("c2", "reasonable_inference")]).upper_bound == "LOW_CONFID"
    for weak in ("overstated", "unsupported", "external_unknown"):
        assert verdict([("c1", "direct_observation"), ("c2", weak)]).effective_verdict == "LOW_CONFID"


def test_a_critical_claim_without_a_check_counts_as_unsupported():
    result = verdict([("c1", "direct_observation"), ("c2", None)])
    assert result.effective_verdict == "LOW_CONFID"
    assert result.groundedness_score == 0.5
    assert result.facts_checked[1].verification == "no_evidence"


@pytest.mark.parametrize(
    ("model", "ceiling", "expected"),
    [
        ("PASS", "PASS", "PASS"),
        ("PASS", "LOW_CONFID", "LOW_CONFID"),  # the ceiling is a hard upper bound
        ("PASS", "REJECT", "REJECT"),
        ("LOW_CONFID", "PASS", "LOW_CONFID"),
        ("REJECT", "PASS", "REJECT"),
    ],
)
def test_effective_is_the_lowest_of_model_upper_bound_and_ceiling(model, ceiling, expected):
    assert verdict([("c1", "direct_observation")], model=model, ceiling=ceiling).effective_verdict == expected


def test_duplicate_checks_count_their_most_damaging_classification():
    claims = [claim("c1")]
    checks = [check("c1", "direct_observation"), check("c1", "contradicted")]
    assert compute_effective_verdict(claims, checks, "PASS", "PASS").effective_verdict == "REJECT"


def test_checks_for_claims_that_were_not_verified_are_ignored():
    claims = [claim("c1")]
    checks = [check("c1", "direct_observation"), check("ghost", "contradicted")]
    assert compute_effective_verdict(claims, checks, "PASS", "PASS").effective_verdict == "PASS"


def test_verdicts_outside_the_fixed_set_are_refused():
    with pytest.raises(ValueError):
        compute_effective_verdict([claim("c1")], [], "MAYBE", "PASS")
    with pytest.raises(ValueError):
        compute_effective_verdict([claim("c1")], [], "PASS", "COMPLETED")


def test_plain_claim_dicts_are_accepted():
    result = compute_effective_verdict(
        [{"claim_id": "c1", "claim_type": "observation"}],
        [{"claim_id": "c1", "verification": "direct_observation"}],
        "PASS",
        "PASS",
    )
    assert result.effective_verdict == "PASS"


# --- evidence retry --------------------------------------------------------------------------------

GAP = [claim("c1"), claim("c2", "root_cause", "db-primary 连接池耗尽导致 payment-service 超时", ("query_logs",))]
GAP_CHECKS = [check("c1", "direct_observation"), check("c2", "external_unknown")]


def test_retry_when_low_confid_ceiling_pass_critical_gap_and_no_retry_yet():
    assert should_retry_evidence("LOW_CONFID", "PASS", GAP, GAP_CHECKS, 0)


@pytest.mark.parametrize(
    ("effective", "ceiling", "checks", "count"),
    [
        ("PASS", "PASS", GAP_CHECKS, 0),
        ("REJECT", "PASS", GAP_CHECKS, 0),
        ("LOW_CONFID", "LOW_CONFID", GAP_CHECKS, 0),  # the gatekeeper already capped it
        ("LOW_CONFID", "PASS", [check("c1", "direct_observation"), check("c2", "overstated")], 0),  # not a gap
        ("LOW_CONFID", "PASS", GAP_CHECKS, 1),  # one retry only
    ],
)
def test_no_retry_otherwise(effective, ceiling, checks, count):
    assert not should_retry_evidence(effective, ceiling, GAP, checks, count)


def test_a_non_critical_gap_does_not_retry():
    claims = [claim("c1"), claim("c2", "context")]
    checks = [check("c1", "reasonable_inference"), check("c2", "unsupported")]
    assert not should_retry_evidence("LOW_CONFID", "PASS", claims, checks, 0)


def test_effective_verdict_object_is_accepted_by_the_retry_rule():
    result = compute_effective_verdict(GAP, GAP_CHECKS, "PASS", "PASS")
    assert should_retry_evidence(result, "PASS", GAP, GAP_CHECKS, 0)


def test_retry_context_lists_only_critical_gaps():
    context = build_retry_context(GAP, GAP_CHECKS, ["fallback-service"])
    assert context.evidence_retry_count == 1
    assert [g.claim_id for g in context.gaps] == ["c2"]
    gap = context.gaps[0]
    assert gap.verification == "external_unknown"
    assert gap.services == ["db-primary", "payment-service"]
    assert gap.tool_names == ["query_logs"]


def test_retry_context_falls_back_to_the_plans_services():
    claims = [claim("c1", text="CPU 使用率升高")]
    context = build_retry_context(claims, [check("c1", "unsupported")], ["payment-service"])
    assert context.gaps[0].services == ["payment-service"]


@pytest.mark.parametrize(("verdict", "coverage", "expected"), [
    ("PASS", None, "PASS"),
    ("PASS", ServiceCoverage(named=["a-svc"], checked=["a-svc"]), "PASS"),
    ("PASS", ServiceCoverage(named=["a-svc", "b-svc"], checked=["a-svc"], unchecked=["b-svc"]), "LOW_CONFID"),
    ("PASS", ServiceCoverage(named=["a-svc", "b-scv"], checked=["a-svc"],
                             unknown=[UnknownService(name="b-scv")]), "LOW_CONFID"),
    ("LOW_CONFID", ServiceCoverage(named=["a-svc", "b-svc"], checked=["a-svc"], unchecked=["b-svc"]), "LOW_CONFID"),
    ("REJECT", ServiceCoverage(named=["a-svc", "b-svc"], checked=["a-svc"], unchecked=["b-svc"]), "REJECT"),
])
def test_partial_service_coverage_caps_the_verdict_at_low_confid(verdict, coverage, expected):
    assert cap_for_coverage(verdict, coverage) == expected
