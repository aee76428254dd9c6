"""One test per scenario of the Verifier and Composer requirements of chat-verifier-agent.graph.md,
each named after its scenario (graph-only scenarios — persistence channels, edges the gateway owns —
are tested with the gateway).

They run the real parts: the embedded verifier, the protocol parser, the model verifier over an
in-process model client, the verifier servicer, the effective-verdict rule and the composer.
"""

from __future__ import annotations

import json
import re

import pytest

from attest.common.v1 import enums_pb2, verifier_types_pb2
from attest.verifier.v1 import verifier_pb2
from services.gatekeeper.engine import check_executor_output
from services.verifier.embedded_verifier import EmbeddedVerifier
from services.verifier.engine import EmbeddedVerifierEngine
from services.verifier.model_verifier import ModelVerifier
from services.verifier.prompts import VERIFIER_PROMPT, load_prompt
from services.verifier.protocol import VerifierProtocolError, canonical_input_bytes, parse_verifier_output
from services.verifier.servicer import VerifierServicer
from shared.core.contracts import (
    VERIFICATIONS,
    Claim,
    ClaimCheck,
    ComposerInput,
    DiagnosisContext,
    EvidenceBinding,
    EvidenceGap,
    ExecutorEvidenceV2,
    GatekeeperResult,
    Hypothesis,
    RecommendedAction,
    RetryContext,
    TokenUsage,
    ToolInvocation,
    VerifiedEvidence,
    VerifierInput,
)
from shared.core.effective_verdict import compute_effective_verdict, should_retry_evidence
from shared.core.templates import compose_answer
from shared.model_client import ModelReply, ModelTransportError
from shared.proto_convert import plain_to_message, spec_value

METRIC = ("query_metrics", 12, "series[0].points[41]", "2026-11-29T10:35:00Z payment-service cpu_usage=92%")
LOG = ("query_logs", 13, "hits[0]", "10:36:02 ERROR payment-service upstream timeout calling db-primary after 3000ms")
QUERY = "为什么 payment-service 的 CPU 这么高?"


def make_input(items, ceiling="PASS", gatekeeper=None, retry_context=None) -> VerifierInput:
    """items: (claim_id, claim_type, claim_text, support_level, [(tool, invocation, path, matched_text)])"""
    claims, evidence = [], []
    for claim_id, claim_type, text, support, refs in items:
        claims.append(Claim(
            claim_id=claim_id, claim_type=claim_type, claim_text=text, support_level=support,
            evidence_bindings=[
                EvidenceBinding(tool_name=t, source_invocation_id=i, source_invocation_ids=[i], raw_path=p, evidence_excerpt=m[-30:])
                for t, i, p, m in refs
            ],
        ))
        evidence += [VerifiedEvidence(claim_id=claim_id, source_invocation_id=i, tool_name=t, raw_path=p, matched_text=m)
                     for t, i, p, m in refs]
    return VerifierInput(
        diagnosis_context=DiagnosisContext(query=QUERY, services=["payment-service"]),
        verified_executor_output=ExecutorEvidenceV2(
            claims=claims,
            hypotheses=[Hypothesis(text="db-primary 的连接数可能接近上限")],
            recommended_actions=[RecommendedAction(text="检查 db-primary 的连接池配置")],
        ),
        verified_evidence=evidence,
        gatekeeper_audit=gatekeeper or GatekeeperResult(status="pass", severity="none", rule_set_version="rules/1"),
        verdict_ceiling=ceiling,
        retry_context=retry_context,
    )


CPU = ("c1", "symptom", "payment-service CPU 使用率 92%", "direct", [METRIC])
TIMEOUT = ("c2", "observation", "payment-service 日志出现调用 db-primary 的 upstream timeout", "direct", [LOG])


def verify(inp: VerifierInput):
    return EmbeddedVerifier().verify(inp)


def effective(inp: VerifierInput, output):
    return compute_effective_verdict(inp.verified_executor_output.claims, output.claim_checks, output.verdict, inp.verdict_ceiling)


def compose(inp: VerifierInput, output) -> tuple[str, object]:
    verdict = effective(inp, output)
    composed = compose_answer(ComposerInput(
        query=QUERY, effective_verdict=verdict.effective_verdict,
        verified_executor_output=inp.verified_executor_output, claim_checks=output.claim_checks,
    ))
    return verdict.effective_verdict, composed


def model_json(checks, verdict="PASS") -> str:
    return json.dumps({"verdict": verdict, "groundedness_score": 0.9, "critical_fact_count": len(checks),
                       "claim_checks": checks, "rationale": "r"}, ensure_ascii=False)


def check_json(claim_id, verification, refs=()):
    return {"claim_id": claim_id, "verification": verification, "detail": "d", "evidence_refs": list(refs)}


class FakeClient:
    provider, model, timeout_seconds = "openai", "fake-model", 60.0

    def __init__(self, *replies):
        self.replies, self.calls = list(replies), []

    def complete(self, messages, *, tools=None, response_format=None, timeout=None):
        self.calls.append(messages)
        item = self.replies.pop(0)
        if isinstance(item, Exception):
            raise item
        return ModelReply(content=item, usage=TokenUsage(prompt_tokens=5, completion_tokens=3, total_tokens=8))


def model_verifier(client) -> ModelVerifier:
    return ModelVerifier(client, load_prompt(VERIFIER_PROMPT), attempt_timeout_seconds=10)


class Context:
    """The part of grpc.ServicerContext the servicer uses."""

    def is_active(self):
        return True

    def time_remaining(self):
        return None

    def abort(self, code, details):
        raise AssertionError(f"aborted {code}: {details}")


# --- Requirement: Verifier SHALL fact-check Executor answers ------------------------------------------


def test_pass_verdict_when_all_claims_have_evidence():
    inp = make_input([CPU, TIMEOUT])
    out = verify(inp)
    assert [c.verification for c in out.claim_checks] == ["direct_observation", "direct_observation"]
    assert out.verdict == "PASS" and out.groundedness_score >= 0.5
    assert effective(inp, out).effective_verdict == "PASS"


@pytest.mark.parametrize(
    ("text", "support", "verification"),
    [
        ("payment-service 内存使用率 92%", "direct", "external_unknown"),
        # A cause with no checked link among its refs (causal_link.py).
        ("payment-service 的 CPU 使用率 92% 导致了问题", "direct", "unsupported"),
        ("payment-service 出现问题", "direct", "unsupported"),
    ],
)
def test_low_confid_verdict_with_partial_evidence(text, support, verification):
    out = verify(make_input([CPU, ("c3", "symptom", text, support, [METRIC])]))
    assert out.claim_checks[1].verification == verification
    assert "contradicted" not in {c.verification for c in out.claim_checks}
    assert out.verdict == "LOW_CONFID"


def test_low_confid_verdict_with_only_inference_support():
    out = verify(make_input([("c1", "symptom", "payment-service CPU 升高到 92%", "direct", [METRIC])]))
    assert [c.verification for c in out.claim_checks] == ["reasonable_inference"]
    assert out.verdict == "LOW_CONFID"


@pytest.mark.parametrize(
    ("text", "evidence"),
    [
        ("payment-service CPU 使用率 29%", METRIC),  # a different number
        ("payment-service 返回 HTTP 502", ("query_logs", 14, "hits[2]", "payment-service status=503 count=120")),  # code
        ("payment-service 运行正常", LOG),  # healthy against an error line
    ],
)
def test_reject_verdict_when_claims_contradict_evidence(text, evidence):
    inp = make_input([TIMEOUT, ("c3", "symptom", text, "direct", [evidence])])
    out = verify(inp)
    assert out.claim_checks[1].verification == "contradicted"
    assert out.verdict == "REJECT"
    assert effective(inp, out).effective_verdict == "REJECT"


def test_verified_structured_claims_are_the_only_verification_target():
    inp = make_input([CPU, ("c2", "symptom", "payment-service CPU 使用率 92%", "direct", [])])
    raw = inp.model_dump()
    raw["executor_final_answer"] = '{"user_facing_answer": "order-service 挂了"}'
    raw["tool_trace_summary"] = [{"trace_ref": "t1", "output_summary": "order-service down"}]
    inp = VerifierInput.model_validate(raw)  # anything but the verified-only blocks is dropped
    assert b"order-service" not in canonical_input_bytes(inp)
    out = verify(inp)
    assert [c.claim_id for c in out.claim_checks] == ["c1", "c2"]
    assert out.claim_checks[1].verification == "unsupported"  # no verified evidence: never direct_observation
    # A model's direct_observation for that claim is overruled by the parser.
    parsed = parse_verifier_output(
        model_json([check_json("c1", "direct_observation"), check_json("c2", "direct_observation")]), inp
    )
    assert parsed.claim_checks[1].verification == "unsupported"


def test_executor_output_is_invalid():
    # The graph routes an invalid executor output to the pre-verification fallback; its answer
    # carries no verdict and nothing of the executor's text.
    out = compose_answer(ComposerInput(query=QUERY, fallback_type="PRE_VERIFICATION",
                                       fallback_reason="executor output malformed: {\"claims\": 1}"))
    assert out.used_fallback_template and out.template == "fallback.pre_verification.v1"
    assert "可信度" not in out.answer and "claims" not in out.answer
    # And the verifier refuses to run without the verified-only payload.
    with pytest.raises(Exception, match="input is required"):
        VerifierServicer(EmbeddedVerifierEngine()).VerifyClaims(verifier_pb2.VerifyClaimsRequest(), Context())


# --- Requirement: Verifier SHALL output structured JSON ------------------------------------------------


def test_claim_level_verifier_output_is_accepted():
    inp = make_input([CPU, TIMEOUT])
    ref = {"tool_name": "query_metrics", "source_invocation_ids": [12], "raw_path": "series[0].points[41]"}
    out = parse_verifier_output(model_json([check_json("c1", "direct_observation", [ref]), check_json("c2", "direct_observation")]), inp)
    data = out.model_dump()
    assert {"verdict", "groundedness_score", "critical_fact_count", "claim_checks", "facts_checked", "rationale"} <= set(data)
    assert [c.claim_id for c in out.claim_checks] == ["c1", "c2"]
    assert len(out.facts_checked) == 2


def test_output_format_validation():
    inp = make_input([CPU])
    out = parse_verifier_output(model_json([check_json("c1", "direct_observation")]), inp)
    assert out.verdict in ("PASS", "LOW_CONFID", "REJECT") and 0.0 <= out.groundedness_score <= 1.0
    for bad in ({"verdict": "OK"}, {"groundedness_score": 1.5}, {"groundedness_score": "high"}):
        data = json.loads(model_json([check_json("c1", "direct_observation")]))
        data.update(bad)
        with pytest.raises(VerifierProtocolError):
            parse_verifier_output(json.dumps(data), inp)


def test_strict_schema_output():
    inp = make_input([CPU])
    good = model_json([check_json("c1", "direct_observation")])
    for text in (f"```json\n{good}\n```", f"结果如下：{good}", good + "\n以上。"):
        with pytest.raises(VerifierProtocolError):
            parse_verifier_output(text, inp)
    without_count = json.loads(good)
    del without_count["critical_fact_count"]
    without_refs = json.loads(good)
    del without_refs["claim_checks"][0]["evidence_refs"]
    for data in (without_count, without_refs):
        with pytest.raises(VerifierProtocolError):
            parse_verifier_output(json.dumps(data), inp)
    fact = parse_verifier_output(good, inp).facts_checked[0].model_dump()
    assert {"fact", "is_critical", "verification", "detail"} <= set(fact)


# --- Requirement: facts_checked SHALL use a fixed classification set -----------------------------------


def test_claim_checks_are_mapped_to_legacy_facts():
    claims = [(f"c{i}", "symptom", "payment-service CPU 使用率 92%", "direct", [METRIC]) for i in range(6)]
    inp = make_input(claims)
    checks = [check_json(f"c{i}", v) for i, v in enumerate(VERIFICATIONS)]
    out = parse_verifier_output(model_json(checks, "LOW_CONFID"), inp)
    assert [f.verification for f in out.facts_checked] == [
        "direct_evidence", "indirect_support", "indirect_support", "no_evidence", "no_evidence", "contradicted",
    ]
    assert out.facts_checked[0].fact == "c0: payment-service CPU 使用率 92%"


# --- Requirement: groundedness_score SHALL be derived from fact classifications ------------------------


def test_contradicted_fact_forces_reject():
    inp = make_input([CPU, TIMEOUT])
    out = parse_verifier_output(model_json([check_json("c1", "contradicted"), check_json("c2", "direct_observation")], "PASS"), inp)
    verdict = effective(inp, out)
    assert verdict.effective_verdict == "REJECT" and verdict.groundedness_score == 0.0


def test_score_derived_from_supported_facts():
    inp = make_input([CPU, TIMEOUT, ("c3", "impact", "payment-service 请求超时 3s", "direct", [LOG])])
    checks = [check_json("c1", "direct_observation"), check_json("c2", "reasonable_inference"), check_json("c3", "unsupported")]
    out = parse_verifier_output(model_json(checks, "LOW_CONFID"), inp)  # the model claimed 0.9
    assert out.groundedness_score == pytest.approx((1.0 + 0.6 + 0.0) / 3)


# --- Requirement: ChatService SHALL route based on Verifier verdict -------------------------------------


def test_pass_routes_to_composer():
    inp = make_input([CPU, TIMEOUT])
    verdict, out = compose(inp, verify(inp))
    assert verdict == "PASS" and out.template == "pass.v1"
    assert "{" not in out.answer and "user_facing_answer" not in out.answer
    assert "payment-service CPU 使用率 92%" in out.answer


def test_low_confid_does_not_qualify_for_evidence_retry():
    inp = make_input([CPU, ("c3", "symptom", "payment-service 内存使用率 92%", "direct", [METRIC])])
    out = verify(inp)
    claims = inp.verified_executor_output.claims
    assert should_retry_evidence("LOW_CONFID", "PASS", claims, out.claim_checks, 0)  # the qualifying baseline
    assert not should_retry_evidence("LOW_CONFID", "LOW_CONFID", claims, out.claim_checks, 0)  # ceiling
    assert not should_retry_evidence("LOW_CONFID", "PASS", claims, out.claim_checks, 1)  # already retried
    inferred = make_input([("c1", "symptom", "payment-service CPU 升高到 92%", "direct", [METRIC])])
    assert not should_retry_evidence("LOW_CONFID", "PASS", inferred.verified_executor_output.claims,
                                     verify(inferred).claim_checks, 0)  # no valid critical gap
    _, composed = compose(inp, out)
    # Every verdict's answer opens with 【结论】, the direct answer.
    assert list(composed.sections)[1:] == ["结论", "已确认", "可能方向", "证据缺口", "下一步"]


def test_low_confid_qualifies_for_evidence_retry():
    inp = make_input([CPU, ("c3", "symptom", "payment-service 内存使用率 92%", "direct", [METRIC])])
    out = verify(inp)
    verdict = effective(inp, out)
    assert verdict.effective_verdict == "LOW_CONFID"
    claims = inp.verified_executor_output.claims
    assert should_retry_evidence(verdict, "PASS", claims, out.claim_checks, 0)
    # Not a groundedness threshold: the same checks qualify whatever the score.
    assert should_retry_evidence(verdict.model_copy(update={"groundedness_score": 0.99}), "PASS", claims, out.claim_checks, 0)


def test_reject_does_not_enter_retry_round():
    inp = make_input([CPU, ("c3", "symptom", "payment-service CPU 使用率 29%", "direct", [METRIC])])
    out = verify(inp)
    verdict = effective(inp, out)
    assert verdict.effective_verdict == "REJECT"
    assert not should_retry_evidence(verdict, "PASS", inp.verified_executor_output.claims, out.claim_checks, 0)


def test_reject_produces_bounded_output():
    root = ("c3", "root_cause", "db-primary 连接池耗尽导致 payment-service CPU 升高", "direct", [LOG])
    inp = make_input([CPU, ("c2", "symptom", "payment-service CPU 使用率 29%", "direct", [METRIC]), root])
    verdict, out = compose(inp, verify(inp))
    assert verdict == "REJECT"
    assert "当前证据不足以支持可靠结论" in out.answer
    assert "连接池耗尽" not in out.answer and "导致" not in out.answer and "根因" not in out.answer
    assert "29%" not in out.answer and "{" not in out.answer


def test_verifier_execution_fails():
    client = FakeClient("not json", ModelTransportError("HTTP 503"))
    servicer = VerifierServicer(model_verifier(client))
    request = verifier_pb2.VerifyClaimsRequest(input=plain_to_message(make_input([CPU]), verifier_types_pb2.VerifierInput))
    response = servicer.VerifyClaims(request, Context())
    assert spec_value(enums_pb2.VerifierStatus.DESCRIPTOR, response.verifier_status) == "FAILED"
    assert not response.HasField("output") and not response.HasField("effective")  # no verdict is invented
    assert response.attempts == 2 and response.failure_reason
    assert response.model_call.attempts == 2 and response.model_call.token_usage.total_tokens == 8


# --- Requirement: Verifier SHALL consume explicit verification inputs -----------------------------------


def test_explicit_input_blocks_available_to_verifier():
    inp = make_input([CPU])
    assert set(json.loads(canonical_input_bytes(inp))) == {
        "diagnosis_context", "verified_executor_output", "verified_evidence", "gatekeeper_audit", "verdict_ceiling",
    }
    retry = make_input([CPU], retry_context=RetryContext(
        evidence_retry_count=1, gaps=[EvidenceGap(claim_id="c1", verification="unsupported")]
    ))
    assert "retry_context" in json.loads(canonical_input_bytes(retry))


def test_verifier_remains_isolated_from_intermediate_and_raw_material():
    client = FakeClient(model_json([check_json("c1", "direct_observation")]))
    model_verifier(client).verify(make_input([CPU]))
    [messages] = client.calls
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].encode("utf-8") == canonical_input_bytes(make_input([CPU]))
    for absent in ("tool_trace_summary", "executor_final_answer", "user_facing_answer", "reasoning"):
        assert absent not in messages[1]["content"]


def test_only_passed_bindings_are_available():
    refs = [{"raw_path": METRIC[2], "text": METRIC[3]}, {"raw_path": "series[0].points[40]", "text": "payment-service cpu_usage=88%"}]
    invocations = [ToolInvocation(invocation_id=12, run_id="r1", tool_name="query_metrics", lifecycle="READY",
                                  evidence_status="EVIDENCE_FOUND", retrieval_details={"evidence_refs": refs})]
    output = {"answer_version": "executor_evidence_v2", "claims": [{
        "claim_id": "c1", "claim_type": "symptom", "claim_text": "payment-service CPU 使用率 92%", "support_level": "direct",
        "evidence_bindings": [
            {"tool_name": "query_metrics", "source_invocation_id": 12, "raw_path": METRIC[2], "evidence_excerpt": "cpu_usage=92%"},
            {"tool_name": "query_metrics", "source_invocation_id": 12, "raw_path": "series[0].points[40]",
             "evidence_excerpt": "cpu_usage=99%"},  # fails the excerpt check
        ]}]}
    gate = check_executor_output("r1", output, invocations)
    inp = VerifierInput(diagnosis_context=DiagnosisContext(query=QUERY), verified_executor_output=gate.verified_executor_output,
                        verified_evidence=gate.verified_evidence, gatekeeper_audit=gate.gatekeeper_result,
                        verdict_ceiling=gate.verdict_ceiling)
    assert [e.raw_path for e in inp.verified_evidence] == [METRIC[2]]
    out = verify(inp)
    assert [r.raw_path for c in out.claim_checks for r in c.evidence_refs] == [METRIC[2]]
    data = json.loads(canonical_input_bytes(inp))
    assert "99%" not in json.dumps([data["verified_executor_output"], data["verified_evidence"]], ensure_ascii=False)


def test_verified_evidence_preserves_precise_references():
    [check] = verify(make_input([CPU])).claim_checks
    [ref] = check.evidence_refs
    assert (ref.claim_id, ref.source_invocation_ids, ref.tool_name, ref.raw_path) == ("c1", [12], "query_metrics", METRIC[2])
    assert "cpu_usage=92%" in ref.note


def test_gatekeeper_audit_and_ceiling_are_available():
    audit = GatekeeperResult(status="fail", severity="low_confid", failed_rules=["evidence.raw_path"], rule_set_version="rules/1")
    inp = make_input([CPU, TIMEOUT], ceiling="LOW_CONFID", gatekeeper=audit)
    data = json.loads(canonical_input_bytes(inp))
    assert data["gatekeeper_audit"]["failed_rules"] == ["evidence.raw_path"] and data["verdict_ceiling"] == "LOW_CONFID"
    out = verify(inp)
    assert out.verdict == "LOW_CONFID" and effective(inp, out).effective_verdict == "LOW_CONFID"


def test_technical_retry_occurs():
    client = FakeClient("{not json", model_json([check_json("c1", "direct_observation")]))
    inp = make_input([CPU])
    run = model_verifier(client).verify(inp)
    assert run.output is not None and run.audit.attempts == 2
    first, second = client.calls
    assert json.dumps(first, ensure_ascii=False).encode() == json.dumps(second, ensure_ascii=False).encode()
    assert second[1]["content"].encode("utf-8") == canonical_input_bytes(inp)


# --- Requirement: Verifier facts SHALL be auditable ---------------------------------------------------


def test_claim_checks_contain_evidence_refs():
    inp = make_input([CPU, TIMEOUT])
    good = {"tool_name": "query_metrics", "source_invocation_ids": [12], "raw_path": METRIC[2]}
    foreign = {"tool_name": "query_logs", "source_invocation_ids": [13], "raw_path": "hits[0]"}  # c2's evidence, not c1's
    out = parse_verifier_output(model_json([check_json("c1", "direct_observation", [good]),
                                            check_json("c2", "direct_observation", [foreign, {"raw_path": "hits[9]"}])]), inp)
    assert out.claim_checks[0].verification == "direct_observation" and out.claim_checks[0].evidence_refs[0].raw_path == METRIC[2]
    assert out.claim_checks[1].verification == "unsupported"  # hits[9] is not verified evidence
    assert all(isinstance(c.evidence_refs, list) for c in out.claim_checks)


# --- Requirement: Verifier low-confidence output SHALL not present unsupported claims as confirmed -----


def test_low_confid_with_critical_evidence_gaps():
    gap = ("c3", "symptom", "payment-service 出现问题", "direct", [METRIC])
    inp = make_input([CPU, gap])
    out = verify(inp)
    assert out.facts_checked[1].verification == "no_evidence"
    verdict, composed = compose(inp, out)
    assert verdict == "LOW_CONFID"
    assert "payment-service 出现问题" not in " ".join(composed.sections["已确认"])
    # The gap is named in our words (type and claim id); the unconfirmed text is never shown.
    assert "payment-service 出现问题" not in composed.answer
    assert any("（c3）" in line for line in composed.sections["证据缺口"])


# --- Requirement: User-facing Chat answers SHALL remain readable Chinese -------------------------------


def test_v2_machine_contract_is_not_exposed_as_normal_user_answer():
    inp = make_input([CPU, TIMEOUT])
    _, out = compose(inp, verify(inp))
    assert len(re.findall(r"[\u4e00-\u9fff]", out.answer)) >= 40
    for marker in ("answer_version", "executor_evidence_v2", "evidence_bindings", "claim_id", "{", '":'):
        assert marker not in out.answer


def test_machine_contract_remains_available_for_trace_inspection():
    inp = make_input([CPU, TIMEOUT])
    out = verify(inp)
    # The structured checks keep each claim's text and type for the audit, next to a prose answer.
    assert [(c.claim_id, c.claim_type, c.claim_text) for c in out.claim_checks] == [
        ("c1", "symptom", CPU[2]), ("c2", "observation", TIMEOUT[2]),
    ]
    _, composed = compose(inp, out)
    assert composed.sections["依据"] and "claim_type" not in composed.answer


# --- Requirement: Verifier claim checks SHALL use a fixed derivability classification set ------------


def test_claim_check_verification_values_are_constrained():
    inp = make_input([CPU])
    with pytest.raises(VerifierProtocolError):
        parse_verifier_output(model_json([check_json("c1", "partially_supported")]), inp)
    texts = ["payment-service CPU 使用率 92%", "payment-service CPU 使用率 29%", "order-service CPU 92%",
             "CPU 升高到 92%", "payment-service 出现问题", "payment-service CPU 92% 是因为发布"]
    out = verify(make_input([(f"c{i}", "symptom", t, "direct", [METRIC]) for i, t in enumerate(texts)]))
    assert {c.verification for c in out.claim_checks} <= set(VERIFICATIONS)
    assert len({c.verification for c in out.claim_checks}) >= 5


def test_claim_check_evidence_references_remain_auditable():
    out = verify(make_input([CPU, TIMEOUT]))
    for check in out.claim_checks:
        assert check.claim_id and check.verification and check.detail
        assert check.evidence_refs and all(r.tool_name and r.source_invocation_ids for r in check.evidence_refs)


# --- Requirement: User-facing verifier outputs SHALL follow Composer-safe protocols --------------------


def _composer_input(verdict, checks, claims):
    return ComposerInput(
        query=QUERY, effective_verdict=verdict, claim_checks=checks,
        verified_executor_output=ExecutorEvidenceV2(
            claims=claims,
            hypotheses=[Hypothesis(text="order-service 流量突增 300% 可能挤占连接")],
            recommended_actions=[RecommendedAction(text="扩容 inventory-service 到 8 个副本")],
        ),
    )


def test_pass_uses_composer_safe_output():
    inp = make_input([CPU, TIMEOUT])
    claims = inp.verified_executor_output.claims
    checks = verify(inp).claim_checks
    out = compose_answer(_composer_input("PASS", checks, claims))
    assert list(out.sections)[1:] == ["结论", "依据", "建议"]
    assert "user_facing_answer" not in out.answer and "{" not in out.answer
    for absent in ("order-service", "300", "inventory-service", "8 个"):
        assert absent not in out.answer  # side material naming unverified things stays out


def test_low_confid_uses_composer_safe_uncertainty_output():
    inp = make_input([CPU, ("c3", "symptom", "payment-service 内存使用率 92%", "direct", [METRIC])])
    checks = verify(inp).claim_checks
    out = compose_answer(_composer_input("LOW_CONFID", checks, inp.verified_executor_output.claims))
    assert list(out.sections)[1:] == ["结论", "已确认", "可能方向", "证据缺口", "下一步"]
    assert "内存使用率" not in " ".join(out.sections["已确认"])
    # The gap comes from the verifier's check (external_unknown: described, its content not repeated).
    assert out.sections["证据缺口"] == ["症状类说法（c3）涉及证据中没有出现的对象或数值，需要补充查询后再判断。"]
    assert "order-service" not in out.answer and "300" not in out.answer


def test_reject_uses_degraded_template():
    root = Claim(claim_id="c3", claim_type="root_cause", claim_text="payment-service 的 CPU 升高由 upstream timeout 引起",
                 support_level="direct", evidence_bindings=[EvidenceBinding(tool_name="query_logs", source_invocation_id=13, raw_path="hits[0]")])
    inp = make_input([CPU, TIMEOUT])
    claims = inp.verified_executor_output.claims + [root]
    checks = [ClaimCheck(claim_id="c1", verification="direct_observation"),
              ClaimCheck(claim_id="c2", verification="contradicted"),
              ClaimCheck(claim_id="c3", verification="direct_observation")]
    out = compose_answer(_composer_input("REJECT", checks, claims))
    assert out.template == "reject.v1"
    assert list(out.sections)[1:] == ["结论", "说明", "已确认", "证据缺口", "下一步"]
    assert out.sections["结论"][0].startswith("原因尚未由证据确认"), "under REJECT the first line names no cause"
    assert root.claim_text not in out.answer and "引起" not in out.answer and "根因" not in out.answer
    assert TIMEOUT[2] not in out.answer  # contradicted content is not repeated
    assert "order-service" not in out.answer and "inventory-service" not in out.answer


# --- Requirement: Verifier SHALL use verified claim-local evidence for derivability -------------------


def test_verified_excerpt_supports_direct_observation():
    out = verify(make_input([("c1", "observation", "10:36 payment-service 出现调用 db-primary 的 upstream timeout（3000ms）",
                              "direct", [LOG])]))
    assert out.claim_checks[0].verification == "direct_observation"


def test_verified_evidence_is_complete_verifier_context():
    inp = make_input([CPU, TIMEOUT])
    assert "tool_trace_summary" not in VerifierInput.model_fields
    out = verify(inp)
    assert out.verdict == "PASS"  # nothing beyond the verified evidence was needed


# --- Requirement: Gatekeeper severity SHALL constrain effective verdict -------------------------------


def test_low_confidence_severity_prevents_pass():
    audit = GatekeeperResult(status="fail", severity="low_confid", failed_rules=["evidence.raw_path"])
    inp = make_input([CPU], ceiling="LOW_CONFID", gatekeeper=audit)
    client = FakeClient(model_json([check_json("c1", "direct_observation")], "PASS"))
    servicer = VerifierServicer(model_verifier(client))
    response = servicer.VerifyClaims(
        verifier_pb2.VerifyClaimsRequest(input=plain_to_message(inp, verifier_types_pb2.VerifierInput)), Context()
    )
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.output.verdict) == "PASS"  # the model said PASS
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective.effective_verdict) == "LOW_CONFID"
