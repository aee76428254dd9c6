"""The embedded verifier classifies each claim honestly against its own verified evidence."""

import pytest

from services.gatekeeper.engine import check_executor_output
from services.verifier.embedded_verifier import EmbeddedVerifier
from shared.core.contracts import (
    Claim,
    DiagnosisContext,
    EvidenceBinding,
    ExecutorEvidenceV2,
    GatekeeperResult,
    RefFacts,
    ToolInvocation,
    VerifiedEvidence,
    VerifierInput,
)


def make_input(items, ceiling="PASS"):
    """items: (claim_id, claim_type, claim_text, support_level, [(tool, invocation, path, matched_text)])"""
    claims, evidence = [], []
    for claim_id, claim_type, text, support, refs in items:
        claims.append(
            Claim(
                claim_id=claim_id,
                claim_type=claim_type,
                claim_text=text,
                support_level=support,
                evidence_bindings=[
                    EvidenceBinding(tool_name=t, source_invocation_id=i, source_invocation_ids=[i], raw_path=p, evidence_excerpt=m[:20])
                    for t, i, p, m, *_ in refs
                ],
            )
        )
        evidence += [
            VerifiedEvidence(claim_id=claim_id, source_invocation_id=i, tool_name=t, raw_path=p, matched_text=m,
                             facts=facts[0] if facts else None)
            for t, i, p, m, *facts in refs
        ]
    return VerifierInput(
        diagnosis_context=DiagnosisContext(query="为什么 payment-service 的 CPU 这么高?"),
        verified_executor_output=ExecutorEvidenceV2(claims=claims),
        verified_evidence=evidence,
        gatekeeper_audit=GatekeeperResult(status="pass", severity="none"),
        verdict_ceiling=ceiling,
    )


METRIC = ("query_metrics", 12, "series[0].points[41]", "2026-11-29T10:35:00Z payment-service cpu_usage=92%")
LOG = ("query_logs", 13, "hits[0]", "10:36:02 ERROR payment-service upstream timeout calling db-primary after 3000ms")
RUNBOOK = ("lookup_knowledge", 14, "docs[0].chunks[2]", "历史事故：db-primary 连接池耗尽导致 payment-service 超时")


def classify(text, refs, claim_type="symptom", support="direct"):
    out = EmbeddedVerifier().verify(make_input([("c1", claim_type, text, support, refs)]))
    return out.claim_checks[0].verification


@pytest.mark.parametrize(
    ("text", "refs", "expected"),
    [
        ("CPU 92%", [("query_metrics", 12, "p", "cpu_usage=92%")], "direct_observation"),
        ("payment-service CPU 使用率 92%", [METRIC], "direct_observation"),
        ("payment-service CPU 使用率 95%", [METRIC], "contradicted"),  # number differs
        ("order-service CPU 使用率 92%", [METRIC], "external_unknown"),  # service absent
        ("payment-service 内存使用率 92%", [METRIC], "external_unknown"),  # metric family absent
        ("10:35 payment-service CPU 92%", [METRIC], "direct_observation"),  # time inside an ISO timestamp
        ("payment-service 请求超时 3s", [LOG], "direct_observation"),  # 3000ms is 3s
        ("payment-service 请求超时 5s", [LOG], "contradicted"),
        ("payment-service 返回 HTTP 502", [("query_logs", 13, "hits[1]", "payment-service status=503 count=120")], "contradicted"),
        ("payment-service 出现 NullPointerException", [LOG], "external_unknown"),
        ("payment-service 错误率下降", [("query_metrics", 12, "p", "payment-service error rate increased to 12%")], "contradicted"),
        ("payment-service 运行正常", [LOG], "contradicted"),
        ("CPU 升高到 92%", [("query_metrics", 12, "p", "cpu_usage=92%")], "reasonable_inference"),  # rise not shown
    ],
)
def test_claims_are_compared_with_their_matched_text(text, refs, expected):
    assert classify(text, refs) == expected


EMPTY_ERROR_SEARCH = RefFacts(kind="log_scope", subject="payment-service", level="ERROR", item_count=0, empty=True)


def test_negative_observation_from_an_empty_result():
    refs = [("query_logs", 15, "summary", "no log lines matched query level=error service=payment-service",
             EMPTY_ERROR_SEARCH)]
    assert classify("payment-service 日志中未发现 ERROR", refs, "negative_observation") == "direct_observation"


def test_a_negative_observation_needs_a_search_over_that_scope():
    # The same words over a search of WARN lines, or with no typed scope at all, prove nothing.
    warn_search = EMPTY_ERROR_SEARCH.model_copy(update={"level": "WARN"})
    text = "no log lines matched query service=payment-service"
    for refs in ([("query_logs", 15, "summary", text, warn_search)], [("query_logs", 15, "summary", text)]):
        assert classify("payment-service 日志中未发现 ERROR", refs, "negative_observation") in ("unsupported", "external_unknown")


@pytest.mark.parametrize("support", ["direct", "indirect"])
def test_root_cause_from_a_single_symptom_line_is_never_direct(support):
    verification = classify("db-primary 连接池耗尽导致 payment-service 超时", [LOG], "root_cause", support)
    assert verification in ("overstated", "reasonable_inference", "external_unknown")
    assert verification != "direct_observation"


def test_causation_without_both_ends_of_a_checked_link_is_unsupported():
    # A cause is an inference only when its cited refs form a checked link
    # (shared/core/grounding/causal_link.py); one symptom line is one end at most, however it is marked.
    assert classify("payment-service 超时是由于 db-primary 调用超时", [LOG], "root_cause", "indirect") == "unsupported"
    assert classify("payment-service 超时是由于 db-primary 调用超时", [LOG], "root_cause", "direct") == "unsupported"


def test_a_runbook_does_not_state_the_current_incidents_cause():
    assert classify("db-primary 连接池耗尽导致 payment-service 超时", [RUNBOOK], "root_cause") != "direct_observation"


def test_claim_without_verified_evidence_is_unsupported():
    inp = make_input([("c1", "symptom", "payment-service CPU 92%", "direct", [])])
    check = EmbeddedVerifier().verify(inp).claim_checks[0]
    assert check.verification == "unsupported"
    assert check.evidence_refs == []


def test_only_the_claims_own_evidence_is_used():
    inp = make_input(
        [
            ("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC]),
            ("c2", "symptom", "payment-service CPU 92%", "direct", [LOG]),
        ]
    )
    checks = EmbeddedVerifier().verify(inp).claim_checks
    assert checks[0].verification == "direct_observation"
    assert checks[1].verification != "direct_observation"  # c1's metric is not c2's evidence
    assert all(r.claim_id == "c2" and r.source_invocation_ids == [13] for r in checks[1].evidence_refs)


def test_evidence_refs_point_only_at_verified_evidence():
    out = EmbeddedVerifier().verify(make_input([("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC])]))
    ref = out.claim_checks[0].evidence_refs[0]
    assert (ref.claim_id, ref.tool_name, ref.source_invocation_ids, ref.raw_path) == (
        "c1", "query_metrics", [12], "series[0].points[41]",
    )


def test_pass_verdict_when_all_critical_claims_have_direct_evidence():
    out = EmbeddedVerifier().verify(make_input([("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC])]))
    assert out.verdict == "PASS"
    assert out.groundedness_score >= 0.5
    assert out.critical_fact_count == 1
    assert out.facts_checked[0].verification == "direct_evidence"


def test_low_confid_verdict_with_partial_evidence():
    out = EmbeddedVerifier().verify(
        make_input(
            [
                ("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC]),
                ("c2", "symptom", "payment-service 内存使用率 92%", "direct", [METRIC]),
            ]
        )
    )
    assert [c.verification for c in out.claim_checks] == ["direct_observation", "external_unknown"]
    assert out.verdict == "LOW_CONFID"
    assert out.groundedness_score == 0.5


def test_a_claim_naming_a_service_absent_from_the_evidence_is_a_fabrication():
    # Ruling 2026-11-30 (graph spec's REJECT scenario): a critical claim whose key entity does not
    # occur in its evidence is external_unknown with model verdict REJECT, never retried.
    out = EmbeddedVerifier().verify(
        make_input([("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC]),
                    ("c2", "symptom", "order-service CPU 使用率 92%", "direct", [METRIC])])
    )
    assert out.claim_checks[1].verification == "external_unknown" and out.claim_checks[1].fabricated_key
    assert out.claim_checks[1].check_id == "key_term.absent"
    assert out.verdict == "REJECT"


def test_an_absent_detail_that_is_no_key_entity_is_a_gap():
    # A lesser detail (here a noun phrase outside any cause) the evidence lacks stays LOW_CONFID.
    out = EmbeddedVerifier().verify(
        make_input([("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC]),
                    ("c2", "observation", "payment-service 的 CPU 92%，集中在结算线程池", "direct", [METRIC])])
    )
    assert out.claim_checks[1].verification in ("external_unknown", "unsupported")
    assert not out.claim_checks[1].fabricated_key
    assert out.verdict == "LOW_CONFID"


# Acceptance cases for the embedded verifier.


def test_acceptance_a_number_that_differs_from_the_evidence_is_contradicted():
    assert classify("payment-service CPU 使用率 95%", [METRIC]) == "contradicted"
    assert classify("payment-service 请求超时 5000ms", [LOG]) == "contradicted"


def test_acceptance_a_service_absent_from_the_evidence_is_external_unknown():
    assert classify("order-service CPU 使用率 92%", [METRIC]) == "external_unknown"


def test_acceptance_cpu_92_percent_from_cpu_usage_92_percent_is_direct_observation():
    assert classify("CPU 92%", [("query_metrics", 12, "series[0].points[41]", "cpu_usage=92%")]) == "direct_observation"


@pytest.mark.parametrize(("support", "expected"), [("direct", "unsupported"), ("indirect", "unsupported")])
def test_acceptance_a_root_cause_from_a_single_symptom_line_is_never_direct(support, expected):
    # Every name in the claim occurs in the line; only the causation is the claim's own.
    text = "payment-service 出现 upstream timeout 的根因是 db-primary"
    assert classify(text, [LOG], "root_cause", support) == expected


def test_low_confid_verdict_with_only_inference_support():
    out = EmbeddedVerifier().verify(make_input([("c1", "symptom", "CPU 升高到 92%", "direct", [METRIC])]))
    assert [c.verification for c in out.claim_checks] == ["reasonable_inference"]
    assert out.verdict == "LOW_CONFID"


def test_reject_verdict_when_claims_contradict_evidence():
    out = EmbeddedVerifier().verify(make_input([("c1", "symptom", "payment-service CPU 95%", "direct", [METRIC])]))
    assert out.verdict == "REJECT"
    assert out.groundedness_score == 0.0


def test_low_confid_ceiling_prevents_pass():
    inp = make_input([("c1", "symptom", "payment-service CPU 92%", "direct", [METRIC])], ceiling="LOW_CONFID")
    assert EmbeddedVerifier().verify(inp).verdict == "LOW_CONFID"


def test_same_input_same_output():
    inp = make_input([("c1", "root_cause", "db-primary 连接池耗尽导致 payment-service 超时", "direct", [LOG])])
    assert EmbeddedVerifier().verify(inp) == EmbeddedVerifier().verify(inp.model_copy(deep=True))


def test_end_to_end_from_the_gatekeepers_projection():
    invocations = [
        ToolInvocation(invocation_id=12, run_id="r1", tool_name="query_metrics", lifecycle="READY", evidence_status="EVIDENCE_FOUND",
                       retrieval_details={"evidence_refs": [{"raw_path": METRIC[2], "text": METRIC[3]}]}),
    ]
    output = {
        "answer_version": "executor_evidence_v2",
        "claims": [{"claim_id": "c1", "claim_type": "symptom", "claim_text": "payment-service CPU 使用率 92%", "support_level": "direct",
                    "evidence_bindings": [{"source_type": "metrics", "tool_name": "query_metrics", "source_invocation_id": 12,
                                           "raw_path": METRIC[2], "evidence_excerpt": "payment-service cpu_usage=92%"}]}],
        "hypotheses": [], "recommended_actions": [], "missing_info": [],
    }
    check = check_executor_output("r1", output, invocations)
    inp = VerifierInput(
        diagnosis_context=DiagnosisContext(query="q"),
        verified_executor_output=check.verified_executor_output,
        verified_evidence=check.verified_evidence,
        gatekeeper_audit=check.gatekeeper_result,
        verdict_ceiling=check.verdict_ceiling,
    )
    assert EmbeddedVerifier().verify(inp).verdict == "PASS"
