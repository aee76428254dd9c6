"""The deterministic grounding checks over whatever verifier engine ran (embedded or model).

The checks of `shared.core.grounding` run after every engine, and the lower classification
wins, so a lenient or lying model verifier cannot confirm what the code refutes:
- each claim check is compared with `check_statement` over the claim's own verified evidence
  (text and typed facts); a worse finding replaces the engine's verification and names its
  check id;
- a claim that asserts a cause (a root_cause claim, or causal words its incident evidence does
  not itself state) must cite both ends of a link the deterministic check accepts
  (`shared/core/grounding/causal_link.py`, check `causal.link`): unlinked -> `unsupported`; linked ->
  at best `reasonable_inference` (a cause is inferred, never observed), whatever the engine said;
- a critical claim whose key entity, error code or cause is absent from its evidence
  (`fabricated_key`) makes the model verdict REJECT (ruling 2026-11-30), which is never retried;
- hypotheses, recommended actions and missing info get a `SideTextCheck` each: the composer shows
  only those marked shown, with human confirmation where this code says an action changes state;
  rollback advice is shown only when a root_cause claim with a checked link to a change stands
  as reasonable_inference (actions follow from verified claims; `causal.link`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.config import configured_failure_modes
from shared.core.contracts import (
    CRITICAL_CLAIM_TYPES,
    Claim,
    ClaimCheck,
    RefFacts,
    SideTextCheck,
    Statement,
    StatementRef,
    VerifiedEvidence,
    VerifierInput,
    VerifierOutput,
)
from shared.core.effective_verdict import compute_effective_verdict
from shared.core.grounding import check_ids
from shared.core.grounding.causal_link import (
    Corpus,
    Link,
    advises_rollback,
    claim_link,
    corpus_of,
    link_of,
    mask_link_minutes,
)
from shared.core.grounding.quiet_series import quiet_series_findings
from shared.core.grounding.side_texts import SideVerdict, check_action, check_possibility
from shared.core.grounding.statement_check import VERIFICATION_RANK, CitedRef, Finding, check_statement, worst
from shared.core.statement_facts import changes_state
from shared.core.statement_facts import check_statement as check_typed


def _cited(items: list[VerifiedEvidence]) -> list[CitedRef]:
    return [CitedRef(item.matched_text, item.tool_name, item.facts) for item in items]


def claim_evidence(claim: Claim, evidence: list[VerifiedEvidence]) -> list[VerifiedEvidence]:
    """The claim's own verified evidence, restricted to refs its verified bindings name."""
    cited = {(b.source_invocation_id, b.raw_path) for b in claim.evidence_bindings}
    own = [item for item in evidence if item.claim_id == claim.claim_id]
    if cited:
        own = [item for item in own if (item.source_invocation_id, item.raw_path) in cited]
    return own


@dataclass(frozen=True)
class ClaimFindings:
    """What the grounding checks found for one claim: the worst finding and the causal link."""

    own: list[VerifiedEvidence]
    finding: Finding | None
    link: Link | None


@dataclass
class Grounding:
    """The grounding checks of one VerifierInput, each claim's findings computed once:
    the embedded engine grounds its own checks, then the servicer grounds whatever engine ran, and
    both read the same findings. Each pass still applies them to the check it is given."""

    inp: VerifierInput
    corpus: Corpus = field(init=False)
    # claim_id -> (the claim read, its findings); the claim is compared by identity, so a claim of
    # another input, or a second claim with the same id, is never answered from here.
    _found: dict[str, tuple[Claim, ClaimFindings]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.corpus = corpus_of(self.inp.verified_evidence)

    def of(self, claim: Claim) -> ClaimFindings:
        kept = self._found.get(claim.claim_id)
        if kept is not None and kept[0] is claim:
            return kept[1]
        found = claim_findings(claim, self.inp.verified_evidence, self.corpus)
        self._found[claim.claim_id] = (claim, found)
        return found

    def ground(self, claim: Claim, check: ClaimCheck) -> ClaimCheck:
        return grounded_check(check, self.of(claim))


def claim_findings(claim: Claim, evidence: list[VerifiedEvidence], corpus: Corpus) -> ClaimFindings:
    """The grounding checks of one claim over its own verified evidence (none without any)."""
    own = claim_evidence(claim, evidence)
    if not own:
        return ClaimFindings(own, None, None)
    if claim.statement is not None:
        return _typed_claim_findings(claim.statement, claim.claim_type, own, corpus)
    link = claim_link(claim.claim_text, claim.claim_type, own, corpus)
    text = mask_link_minutes(claim.claim_text, link) if link is not None else claim.claim_text
    findings = check_statement(text, _cited(own), claim_type=claim.claim_type)
    findings += quiet_series_findings(claim.claim_text, [item.facts for item in own])
    if link is not None and not link.linked:
        findings.append(Finding(check_ids.CAUSAL_LINK, "unsupported", f"no checked causal link: {link.detail}"[:200]))
    return ClaimFindings(own, worst(findings), link)


# How a refuted field of a typed statement classifies the claim; a subject or signal no cited ref
# states is a fabricated key entity (REJECT, ruling 2026-11-30).
_REFUTED_AS = {"refs": "unsupported", "subject": "contradicted", "signal": "contradicted", "level": "contradicted",
               "state": "contradicted", "quantities": "contradicted", "at": "contradicted", "cause": "unsupported",
               "action": "unsupported"}


def typed_findings(statement: Statement, own: list[VerifiedEvidence]) -> list[Finding]:
    """The typed check of a claim's statement against the facts of the claim's own verified refs:
    a ref the statement cites that is not among them is refuted like a ref that does not exist."""
    facts = {(item.source_invocation_id, item.raw_path): item.facts for item in own}

    def facts_of(ref: StatementRef) -> RefFacts | None:
        return facts.get((ref.source_invocation_id, ref.raw_path))

    return [
        Finding(check_ids.STATEMENT_FIELD, _REFUTED_AS[item.field], f"{item.field}: {item.detail}"[:200],
                fabricated_key=item.field in ("subject", "signal"))
        for item in check_typed(statement, facts_of, configured_failure_modes())
    ]


def _typed_claim_findings(statement: Statement, claim_type: str, own: list[VerifiedEvidence], corpus: Corpus) -> ClaimFindings:
    """A typed claim: its statement checked field by field (its text is Attest's rendering of it,
    so no prose is read); a cause, or a root_cause claim, needs the causal link its refs form."""
    findings = typed_findings(statement, own)
    link = link_of(own, corpus) if statement.cause is not None or claim_type == "root_cause" else None
    if link is not None and not link.linked:
        findings.append(Finding(check_ids.CAUSAL_LINK, "unsupported", f"no checked causal link: {link.detail}"[:200]))
    return ClaimFindings(own, worst(findings), link)


def grounded_check(check: ClaimCheck, found: ClaimFindings) -> ClaimCheck:
    """The engine's check, or the grounding finding when that is worse. A claim without verified
    evidence is left to the engine (it is never confirmed: an evidence gap, not a finding)."""
    if not found.own:
        return check
    return _capped(_lowered(check, found.finding), found.link)


def ground_claim(claim: Claim, check: ClaimCheck, evidence: list[VerifiedEvidence],
                 corpus: Corpus | None = None) -> ClaimCheck:
    """The engine's check, or the grounding finding when that is worse (`grounded_check`).
    `corpus`: the run's verified evidence for the causal link's rarity (built when not given)."""
    return grounded_check(check, claim_findings(claim, evidence, corpus if corpus is not None else corpus_of(evidence)))


def _capped(check: ClaimCheck, link: Link | None) -> ClaimCheck:
    """A linked cause is inferred, never observed: at best reasonable_inference."""
    if link is None or not link.linked or check.verification != "direct_observation":
        return check
    return check.model_copy(update={
        "verification": "reasonable_inference",
        "detail": f"{check_ids.CAUSAL_LINK}: checked causal link ({link.kind}): {link.detail}"[:600],
        "check_id": check.check_id or check_ids.CAUSAL_LINK,
    })


def _lowered(check: ClaimCheck, finding: Finding | None) -> ClaimCheck:
    if finding is None:
        return check
    if VERIFICATION_RANK[finding.verification] < VERIFICATION_RANK[check.verification] or (
        finding.fabricated_key and VERIFICATION_RANK[finding.verification] <= VERIFICATION_RANK[check.verification]
    ):
        return check.model_copy(update={
            "verification": finding.verification,
            "detail": f"{finding.check_id}: {finding.detail}",
            "check_id": finding.check_id,
            "fabricated_key": finding.fabricated_key,
        })
    # The engine judged it at least as harshly: its verification stands, and the audit names the
    # deterministic check that also flagged the claim.
    return check.model_copy(update={
        "detail": f"{check.detail}; {finding.check_id}: {finding.detail}"[:600],
        "check_id": check.check_id or finding.check_id,
        "fabricated_key": check.fabricated_key or finding.fabricated_key,
    })


def _unique(evidence: list[VerifiedEvidence]) -> list[VerifiedEvidence]:
    seen: dict[tuple[int, str], VerifiedEvidence] = {}
    for item in evidence:
        seen.setdefault((item.source_invocation_id, item.raw_path), item)
    return list(seen.values())


def linked_change_verified(inp: VerifierInput, checks: list[ClaimCheck], grounding: Grounding | None = None) -> bool:
    """Whether a root_cause claim whose cited refs link a change stands as an inference or better."""
    claims = {claim.claim_id: claim for claim in inp.verified_executor_output.claims}
    grounding = _grounding_of(inp, grounding)
    for check in checks:
        claim = claims.get(check.claim_id)
        if claim is None or claim.claim_type != "root_cause":
            continue
        if VERIFICATION_RANK[check.verification] < VERIFICATION_RANK["reasonable_inference"]:
            continue
        # A claim without verified evidence links nothing (its link check has no end).
        link = grounding.of(claim).link
        if link is not None and link.linked and link.kind == "change":
            return True
    return False


def side_text_checks(inp: VerifierInput, rollback_allowed: bool = False) -> list[SideTextCheck]:
    """A check for every hypothesis, recommended action and missing-info item of the output;
    `rollback_allowed`: a linked change stands verified (`linked_change_verified`)."""
    refs = _cited(_unique(inp.verified_evidence))
    output = inp.verified_executor_output
    checks: list[SideTextCheck] = []
    evidence = _unique(inp.verified_evidence)
    for index, hypothesis in enumerate(output.hypotheses):
        if hypothesis.statement is not None:
            # Typed: each field checked against the run's verified evidence (no prose read).
            refuted = typed_findings(hypothesis.statement, evidence)
            verdict = SideVerdict(not refuted, check_ids.STATEMENT_FIELD if refuted else "",
                                  refuted[0].detail if refuted else "")
        else:
            verdict = check_possibility(hypothesis.text, refs)
        checks.append(SideTextCheck(item=f"hypotheses[{index}]", text=hypothesis.text, shown=verdict.shown,
                                    check_id=verdict.check_id, detail=verdict.detail))
    for index, action in enumerate(output.recommended_actions):
        if action.statement is not None and action.statement.action is not None:
            # A step of the catalogue, in the catalogue's words (the gatekeeper wrote its text and
            # its confirmation from its kind): only the rollback rule below can hide it.
            verdict = SideVerdict(True, requires_human_confirmation=changes_state(action.statement))
        else:
            verdict = check_action(action.text, refs, model_confirmation=action.requires_human_confirmation)
        if advises_rollback(action.text) and not rollback_allowed:
            # Hidden either way; a state change the model left unconfirmed is named as such first.
            unconfirmed = verdict.check_id == check_ids.ACTION_STATE_CHANGE
            checks.append(SideTextCheck(
                item=f"recommended_actions[{index}]", text=action.text, shown=False,
                check_id=check_ids.ACTION_STATE_CHANGE if unconfirmed else check_ids.CAUSAL_LINK,
                detail=("; ".join(filter(None, [verdict.detail if unconfirmed else "",
                                                "rollback advice without a verified causal link to a change"]))),
                requires_human_confirmation=True,
            ))
            continue
        checks.append(SideTextCheck(
            item=f"recommended_actions[{index}]", text=action.text, shown=verdict.shown, check_id=verdict.check_id,
            detail=verdict.detail, requires_human_confirmation=verdict.requires_human_confirmation,
        ))
    for index, info in enumerate(output.missing_info):
        checks.append(SideTextCheck(
            item=f"missing_info[{index}]", text=info.text, shown=False, check_id=check_ids.SIDE_TEXT_MISSING_INFO,
            detail="model-written missing info is never shown; gaps come from the verifier",
        ))
    return checks


def _grounding_of(inp: VerifierInput, grounding: Grounding | None) -> Grounding:
    return grounding if grounding is not None and grounding.inp is inp else Grounding(inp)


def apply_grounding(inp: VerifierInput, output: VerifierOutput, grounding: Grounding | None = None) -> VerifierOutput:
    """The engine's output with every grounding check applied (the lower classification wins).
    `grounding`: the findings an engine already computed for this very input, reused."""
    claims = {claim.claim_id: claim for claim in inp.verified_executor_output.claims}
    grounding = _grounding_of(inp, grounding)
    checks = [
        grounding.ground(claims[check.claim_id], check) if check.claim_id in claims else check
        for check in output.claim_checks
    ]
    verdict = output.verdict
    if any(c.fabricated_key and claims.get(c.claim_id) is not None
           and claims[c.claim_id].claim_type in CRITICAL_CLAIM_TYPES for c in checks):
        verdict = "REJECT"
    effective = compute_effective_verdict(list(claims.values()), checks, verdict, inp.verdict_ceiling)
    changed = sum(1 for old, new in zip(output.claim_checks, checks) if old.verification != new.verification)
    rationale = output.rationale
    if changed:
        rationale = f"{rationale}; grounding checks lowered {changed} claim(s)".lstrip("; ")
    return output.model_copy(update={
        "verdict": verdict,
        "claim_checks": checks,
        "groundedness_score": effective.groundedness_score,
        "critical_fact_count": effective.critical_fact_count,
        "facts_checked": effective.facts_checked,
        "rationale": rationale,
        "side_text_checks": side_text_checks(inp, rollback_allowed=linked_change_verified(inp, checks, grounding)),
    })
