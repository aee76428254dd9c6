"""The shared verifier protocol parser and the canonical input bytes."""

import json

import pytest

from services.verifier.protocol import VerifierProtocolError, canonical_input_bytes, parse_verifier_output
from shared.core.contracts import (
    Claim,
    DiagnosisContext,
    EvidenceBinding,
    EvidenceGap,
    ExecutorEvidenceV2,
    GatekeeperResult,
    RetryContext,
    VerifiedEvidence,
    VerifierInput,
)


def make_input():
    claims = [
        Claim(claim_id="c1", claim_type="symptom", claim_text="payment-service CPU 92%", support_level="direct",
              evidence_bindings=[EvidenceBinding(tool_name="query_metrics", source_invocation_id=12, raw_path="series[0].points[41]",
                                                 evidence_excerpt="cpu_usage=92%")]),
        Claim(claim_id="c2", claim_type="context", claim_text="昨晚 22:00 有发布", support_level="direct",
              evidence_bindings=[EvidenceBinding(tool_name="query_changes", source_invocation_id=20, raw_path="rows[0]",
                                                 evidence_excerpt="deploy payment-service")]),
    ]
    evidence = [
        VerifiedEvidence(claim_id="c1", source_invocation_id=12, tool_name="query_metrics", raw_path="series[0].points[41]",
                         matched_text="payment-service cpu_usage=92%"),
        VerifiedEvidence(claim_id="c2", source_invocation_id=20, tool_name="query_changes", raw_path="rows[0]",
                         matched_text="22:00 deploy payment-service v2.3"),
    ]
    return VerifierInput(
        diagnosis_context=DiagnosisContext(query="为什么 payment-service 的 CPU 这么高?", services=["payment-service"]),
        verified_executor_output=ExecutorEvidenceV2(claims=claims),
        verified_evidence=evidence,
        gatekeeper_audit=GatekeeperResult(status="pass", severity="none", rule_set_version="v"),
        verdict_ceiling="PASS",
    )


def good_ref(**overrides):
    ref = {"trace_ref": "", "tool_name": "query_metrics", "source_invocation_ids": [12], "raw_path": "series[0].points[41]"}
    ref.update(overrides)
    return ref


def model_output(**overrides):
    data = {
        "verdict": "PASS",
        "groundedness_score": 0.9,
        "critical_fact_count": 1,
        "claim_checks": [
            {"claim_id": "c1", "verification": "direct_observation", "detail": "cpu_usage=92%", "evidence_refs": [good_ref()]},
            {"claim_id": "c2", "verification": "direct_observation", "detail": "deploy at 22:00",
             "evidence_refs": [{"tool_name": "query_changes", "source_invocation_ids": [20]}]},
        ],
        "rationale": "both claims observed",
    }
    data.update(overrides)
    return data


def parse(data, inp=None):
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return parse_verifier_output(text, inp or make_input())


def test_valid_output_is_accepted_and_numbers_are_recomputed():
    out = parse(model_output())
    assert out.verdict == "PASS"
    assert [c.verification for c in out.claim_checks] == ["direct_observation", "direct_observation"]
    assert out.groundedness_score == 1.0  # recomputed, not the model's 0.9
    assert out.critical_fact_count == 1  # context is not critical
    assert out.claim_checks[0].claim_text == "payment-service CPU 92%"  # filled from the verified claim


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + json.dumps(model_output()) + "\n```",
        "Here you go: " + json.dumps(model_output()),
        json.dumps(model_output()) + "\nDone.",
        json.dumps(model_output()) + json.dumps(model_output()),
        "[]",
        "",
        json.dumps(model_output())[:-3],
    ],
)
def test_exactly_one_json_object_without_fences_or_prose(text):
    with pytest.raises(VerifierProtocolError):
        parse(text)


@pytest.mark.parametrize("field", ["verdict", "groundedness_score", "critical_fact_count", "claim_checks", "rationale"])
def test_required_fields(field):
    data = model_output()
    del data[field]
    with pytest.raises(VerifierProtocolError):
        parse(data)


@pytest.mark.parametrize(
    "overrides",
    [
        {"verdict": "COMPLETED"},
        {"groundedness_score": 1.5},
        {"groundedness_score": True},
        {"critical_fact_count": -1},
        {"rationale": None},
        {"claim_checks": {"c1": "direct_observation"}},
        {"claim_checks": [{"claim_id": "c1", "verification": "probably", "detail": "", "evidence_refs": []}]},
        {"claim_checks": [{"claim_id": "c1", "verification": "direct_observation", "evidence_refs": []}]},
        {"claim_checks": [{"claim_id": "c9", "verification": "direct_observation", "detail": "", "evidence_refs": []}]},
        {"claim_checks": [{"claim_id": "c1", "verification": "unsupported", "detail": "", "evidence_refs": []}] * 2},
        {"claim_checks": [{"claim_id": "c1", "verification": "unsupported", "detail": "", "evidence_refs": [{"source_invocation_ids": ["12"]}]}]},
        {"facts_checked": [{"fact": "c1: x", "is_critical": True, "verification": "direct_observation", "detail": ""}]},
        {"facts_checked": [{"fact": "c1: x", "verification": "direct_evidence", "detail": ""}]},
    ],
)
def test_fixed_sets_and_shapes_are_enforced(overrides):
    with pytest.raises(VerifierProtocolError):
        parse(model_output(**overrides))


def test_facts_checked_are_derived_when_absent():
    out = parse(model_output())
    assert [(f.fact, f.is_critical, f.verification) for f in out.facts_checked] == [
        ("c1: payment-service CPU 92%", True, "direct_evidence"),
        ("c2: 昨晚 22:00 有发布", False, "direct_evidence"),
    ]


def test_inconsistent_facts_checked_are_replaced_by_the_derivation():
    wrong = [{"fact": "c1: payment-service CPU 92%", "is_critical": True, "verification": "no_evidence", "detail": "model"}]
    out = parse(model_output(facts_checked=wrong))
    assert [f.verification for f in out.facts_checked] == ["direct_evidence", "direct_evidence"]


def test_consistent_facts_checked_keep_the_models_detail():
    facts = [
        {"fact": "c1: payment-service CPU 92%", "is_critical": True, "verification": "direct_evidence", "detail": "model says so"},
        {"fact": "c2: 昨晚 22:00 有发布", "is_critical": False, "verification": "direct_evidence", "detail": "deploy row"},
    ]
    assert parse(model_output(facts_checked=facts)).facts_checked[0].detail == "model says so"


@pytest.mark.parametrize(
    "ref",
    [
        good_ref(source_invocation_ids=[99]),  # an invocation that is not verified evidence
        good_ref(tool_name="query_logs"),
        good_ref(raw_path="series[0].points[40]"),
        good_ref(claim_id="c2"),  # another claim's reference
        {"tool_name": "query_changes", "source_invocation_ids": [20]},  # c2's evidence cited for c1
        {"trace_ref": "trace-1"},  # nothing verified evidence can confirm
    ],
)
def test_a_reference_to_unverified_material_makes_the_check_unsupported(ref):
    data = model_output()
    data["claim_checks"][0]["evidence_refs"] = [good_ref(), ref]
    out = parse(data)
    assert out.claim_checks[0].verification == "unsupported"
    assert ref not in [r.model_dump() for r in out.claim_checks[0].evidence_refs]


def test_matching_references_are_kept():
    data = model_output()
    data["claim_checks"][0]["evidence_refs"] = [
        good_ref(trace_ref="trace-1", note="cpu 92%"),
        {"claim_id": "c1"},
        {"raw_path": "series[0].points[41]"},
        {"source_invocation_id": 12},
        {"note": "an identifier-less note is dropped"},
    ]
    check = parse(data).claim_checks[0]
    assert check.verification == "direct_observation"
    assert len(check.evidence_refs) == 4


def test_a_bad_reference_never_softens_a_contradiction():
    data = model_output()
    data["claim_checks"][0].update(verification="contradicted", evidence_refs=[good_ref(source_invocation_ids=[99])])
    assert parse(data).claim_checks[0].verification == "contradicted"


def test_claim_without_verified_evidence_is_never_direct_observation():
    inp = make_input()
    inp.verified_evidence = [e for e in inp.verified_evidence if e.claim_id != "c1"]
    data = model_output()
    data["claim_checks"][0]["evidence_refs"] = []
    out = parse(data, inp)
    assert out.claim_checks[0].verification == "unsupported"


def test_a_claim_the_model_skipped_gets_an_unsupported_check():
    data = model_output()
    data["claim_checks"] = data["claim_checks"][1:]
    out = parse(data)
    assert [(c.claim_id, c.verification) for c in out.claim_checks] == [("c1", "unsupported"), ("c2", "direct_observation")]
    assert out.groundedness_score == 0.0


def test_the_models_verdict_is_kept_as_the_model_verdict():
    data = model_output(verdict="LOW_CONFID")
    assert parse(data).verdict == "LOW_CONFID"


# --- canonical input -------------------------------------------------------------------------------


def test_canonical_input_is_byte_identical_for_equal_inputs():
    first = canonical_input_bytes(make_input())
    again = canonical_input_bytes(VerifierInput.model_validate_json(make_input().model_dump_json()))
    assert first == again


def test_canonical_input_is_sorted_compact_utf8_and_omits_absent_retry_context():
    raw = canonical_input_bytes(make_input())
    text = raw.decode("utf-8")
    assert "为什么" in text  # UTF-8, not \\u escapes
    assert ": " not in text and ", " not in text and "\n" not in text
    assert "retry_context" not in text
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() == raw


def test_retry_context_is_serialised_when_present():
    inp = make_input()
    inp.retry_context = RetryContext(evidence_retry_count=1, gaps=[EvidenceGap(claim_id="c1", verification="unsupported")])
    assert b'"retry_context":{"evidence_retry_count":1' in canonical_input_bytes(inp)
