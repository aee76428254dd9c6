"""The verifier protocol: the canonical input bytes and the strict parser of a model's output.

Graph spec: "Verifier SHALL output structured JSON" (strict schema output), "facts_checked SHALL
use a fixed classification set", "Verifier facts SHALL be auditable", "Verified structured claims
are the only verification target", "technical retry occurs" (byte-identical input).

`parse_verifier_output` accepts exactly one JSON object (surrounding whitespace only; no fences,
no prose) with `verdict`, `groundedness_score`, `critical_fact_count`, `claim_checks` and
`rationale`; `facts_checked` is optional. Any violation raises VerifierProtocolError, which the
caller treats as a technical failure (one more attempt on the same bytes).

What the parser decides rather than trusts:
- `claim_checks` are authoritative and must name verified claims (unknown or duplicate claim ids
  are protocol errors); a verified claim without a check gets an `unsupported` check.
- A claim without verified evidence is never direct_observation, reasonable_inference or
  overstated: it becomes `unsupported`.
- Every non-empty evidence ref must match the claim's own verified evidence: its claim_id (if
  given) is the check's, and some verified evidence item of that claim agrees with every
  tool_name, raw_path and source_invocation_id it gives. A ref with only a trace_ref cannot be
  matched. An unmatched ref turns a positive check into `unsupported`; it never softens
  `contradicted` (a bad reference must not raise a verdict). Refs with no identifier are dropped.
- `facts_checked` is derived from the final claim checks (DESIGN §3 mapping); a model-supplied
  list is kept only where it agrees item by item, otherwise the derivation replaces it.
- `groundedness_score` and `critical_fact_count` are recomputed; `verdict` stays the model's
  (the effective verdict is computed separately by `shared.core.effective_verdict`).
"""

from __future__ import annotations

import json
from typing import Any, cast

from shared.core.contracts import (
    VERDICT_ORDER,
    VERIFICATIONS,
    Claim,
    ClaimCheck,
    VerifiedEvidence,
    VerifierEvidenceRef,
    VerifierInput,
    VerifierOutput,
)
from shared.core.effective_verdict import LEGACY_VERIFICATION, derive_facts_checked, groundedness_score, is_critical
from shared.core.strict_json import NotOneObject, one_json_object

MAX_VERIFIER_OUTPUT_BYTES = 1024 * 1024
_REQUIRED = ("verdict", "groundedness_score", "critical_fact_count", "claim_checks", "rationale")
_POSITIVE = frozenset({"direct_observation", "reasonable_inference", "overstated"})
_LEGACY = frozenset(LEGACY_VERIFICATION.values())


class VerifierProtocolError(ValueError):
    """The model output violates the verifier protocol (a retryable technical failure)."""


def canonical_input_bytes(inp: VerifierInput) -> bytes:
    """Canonical JSON of the verified-only payload: sorted keys, no whitespace, UTF-8, no nulls.

    The same input always gives the same bytes, so a technical retry sends exactly what the first
    attempt sent; `retry_context` is absent unless the graph prepared an evidence retry. The
    gatekeeper audit's `executor_values` (executor-written strings kept for the persisted audit)
    are never sent, whoever built the input.
    """
    data = inp.model_dump(mode="json", exclude_none=True, exclude={"gatekeeper_audit": {"executor_values"}})
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise VerifierProtocolError(message)


def _optional_str(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key, "")
    _require(value is None or isinstance(value, str), f"{where}.{key} must be a string")
    return value or ""


def _read_ref(raw: Any, where: str) -> VerifierEvidenceRef:
    _require(isinstance(raw, dict), f"{where} must be an object")
    ids = raw.get("source_invocation_ids", [])
    _require(
        ids is None or (isinstance(ids, list) and all(_is_int(i) for i in ids)),
        f"{where}.source_invocation_ids must be a list of integers",
    )
    ids = list(ids or [])
    single = raw.get("source_invocation_id")
    if single is not None:
        _require(_is_int(single), f"{where}.source_invocation_id must be an integer")
        if single not in ids:
            ids.append(single)
    return VerifierEvidenceRef(
        trace_ref=_optional_str(raw, "trace_ref", where),
        tool_name=_optional_str(raw, "tool_name", where),
        source_invocation_ids=ids,
        raw_path=_optional_str(raw, "raw_path", where),
        claim_id=_optional_str(raw, "claim_id", where),
        note=_optional_str(raw, "note", where)[:500],
    )


def _is_empty(ref: VerifierEvidenceRef) -> bool:
    return not (ref.trace_ref or ref.tool_name or ref.source_invocation_ids or ref.raw_path or ref.claim_id)


def ref_matches(ref: VerifierEvidenceRef, claim_id: str, own: list[VerifiedEvidence]) -> bool:
    """Whether a ref points only at verified evidence of this claim."""
    if ref.claim_id and ref.claim_id != claim_id:
        return False
    candidates = [
        item
        for item in own
        if (not ref.tool_name or item.tool_name == ref.tool_name)
        and (not ref.raw_path or item.raw_path == ref.raw_path)
    ]
    if not candidates:
        return False
    if not (ref.tool_name or ref.raw_path or ref.source_invocation_ids or ref.claim_id):
        return False  # only a trace_ref: nothing that verified evidence can confirm
    candidate_ids = {item.source_invocation_id for item in candidates}
    return all(invocation_id in candidate_ids for invocation_id in ref.source_invocation_ids)


def _read_check(raw: Any, index: int) -> ClaimCheck:
    where = f"claim_checks[{index}]"
    _require(isinstance(raw, dict), f"{where} must be an object")
    for key in ("claim_id", "verification", "detail", "evidence_refs"):
        _require(key in raw, f"{where} lacks {key}")
    _require(isinstance(raw["claim_id"], str) and raw["claim_id"].strip() != "", f"{where}.claim_id must be text")
    _require(raw["verification"] in VERIFICATIONS, f"{where}.verification {str(raw['verification'])[:40]!r} is not allowed")
    _require(isinstance(raw["detail"], str), f"{where}.detail must be a string")
    _require(isinstance(raw["evidence_refs"], list), f"{where}.evidence_refs must be a list")
    refs = [_read_ref(ref, f"{where}.evidence_refs[{i}]") for i, ref in enumerate(raw["evidence_refs"][:50])]
    return ClaimCheck(
        claim_id=raw["claim_id"].strip(),
        verification=raw["verification"],
        detail=raw["detail"][:2000],
        evidence_refs=[ref for ref in refs if not _is_empty(ref)],
    )


def _enforce_evidence(check: ClaimCheck, claim: Claim, own: list[VerifiedEvidence]) -> ClaimCheck:
    check = check.model_copy(update={"claim_text": claim.claim_text, "claim_type": claim.claim_type})
    if check.verification not in _POSITIVE:
        return check
    if not own:
        return check.model_copy(
            update={"verification": "unsupported", "detail": f"{check.detail} [no verified evidence for this claim]".strip()}
        )
    unmatched = [ref for ref in check.evidence_refs if not ref_matches(ref, claim.claim_id, own)]
    if unmatched:
        return check.model_copy(
            update={
                "verification": "unsupported",
                "detail": f"{check.detail} [evidence ref does not match verified evidence]".strip(),
                "evidence_refs": [ref for ref in check.evidence_refs if ref not in unmatched],
            }
        )
    return check


def _check_facts(raw: Any) -> list[dict[str, Any]]:
    _require(isinstance(raw, list), "facts_checked must be a list")
    for index, item in enumerate(raw):
        where = f"facts_checked[{index}]"
        _require(isinstance(item, dict), f"{where} must be an object")
        _require(isinstance(item.get("fact"), str), f"{where}.fact must be a string")
        _require(isinstance(item.get("is_critical"), bool), f"{where}.is_critical must be a boolean")
        _require(item.get("verification") in _LEGACY, f"{where}.verification is not allowed")
        _require(isinstance(item.get("detail"), str), f"{where}.detail must be a string")
    return cast(list[dict[str, Any]], raw)  # each item was checked to be an object above


def parse_verifier_output(text: str, verifier_input: VerifierInput) -> VerifierOutput:
    """Parse and police one model output against the verified-only input it was given."""
    _require(isinstance(text, str), "verifier output must be text")
    _require(len(text) <= MAX_VERIFIER_OUTPUT_BYTES, "verifier output is too large")
    try:
        data = one_json_object(text, "output")
    except NotOneObject as exc:
        raise VerifierProtocolError(str(exc)) from None
    for key in _REQUIRED:
        _require(key in data, f"missing required field {key}")
    _require(data["verdict"] in VERDICT_ORDER, f"verdict {str(data['verdict'])[:40]!r} is not allowed")
    score = data["groundedness_score"]
    _require(
        isinstance(score, (int, float)) and not isinstance(score, bool) and 0.0 <= score <= 1.0,
        "groundedness_score must be a number in [0, 1]",
    )
    count = data["critical_fact_count"]
    _require(_is_int(count) and count >= 0, "critical_fact_count must be a non-negative integer")
    _require(isinstance(data["rationale"], str), "rationale must be a string")
    _require(isinstance(data["claim_checks"], list), "claim_checks must be a list")

    claims = verifier_input.verified_executor_output.claims
    by_id = {claim.claim_id: claim for claim in claims}
    received: dict[str, ClaimCheck] = {}
    for index, raw in enumerate(data["claim_checks"]):
        check = _read_check(raw, index)
        _require(check.claim_id in by_id, f"claim_checks[{index}] names unknown claim {check.claim_id[:60]!r}")
        _require(check.claim_id not in received, f"claim_checks[{index}] repeats claim {check.claim_id[:60]!r}")
        received[check.claim_id] = check

    checks: list[ClaimCheck] = []
    for claim in claims:
        own = [item for item in verifier_input.verified_evidence if item.claim_id == claim.claim_id]
        check = received.get(claim.claim_id) or ClaimCheck(
            claim_id=claim.claim_id, verification="unsupported", detail="the model returned no check for this claim"
        )
        checks.append(_enforce_evidence(check, claim, own))

    facts = derive_facts_checked(claims, checks)
    if "facts_checked" in data and data["facts_checked"] is not None:
        supplied = _check_facts(data["facts_checked"])
        consistent = len(supplied) == len(facts) and all(
            item["fact"] == fact.fact
            and item["is_critical"] == fact.is_critical
            and item["verification"] == fact.verification
            for item, fact in zip(supplied, facts)
        )
        if consistent:
            facts = [fact.model_copy(update={"detail": item["detail"][:2000]}) for item, fact in zip(supplied, facts)]

    return VerifierOutput(
        verdict=data["verdict"],
        groundedness_score=groundedness_score(facts),
        critical_fact_count=sum(1 for claim in claims if is_critical(claim.claim_type)),
        claim_checks=checks,
        facts_checked=facts,
        rationale=data["rationale"][:4000],
    )
