"""The embedded verifier: an honest, deterministic classifier of each verified claim.

Each claim is compared with the matched text of *its own* verified evidence only (graph spec,
"Verifier SHALL use verified claim-local evidence for derivability"); nothing else is read.

Per claim, in this order:
1. no verified evidence -> `unsupported` (never direct_observation);
2. a quantity of the same unit class that differs (`CPU 95%` vs `cpu_usage=92%`), the opposite
   direction (升高 vs 下降) or state (正常 vs 异常), or an error code where the evidence shows a
   different code of the same family (`HTTP 502` vs `HTTP 503`) -> `contradicted`;
3. a name (service, host, metric identifier, time), error code, quantity or metric family (CPU,
   内存, 延迟 …) the evidence lacks -> `external_unknown`;
4. causation (a root_cause claim; or 因为/导致/由于/根因/caused by … outside quotations that no
   current-incident evidence states) is judged by the deterministic link check over the claim's
   cited refs (`shared/core/grounding/causal_link.py`, DESIGN §3 "Causal links"): a change on one end,
   an error signature or anomaly onset on the other, the change preceding them within the bound
   and a distinctive token in common — or an error signature whose first line coincides with an
   onset — -> `reasonable_inference`; otherwise `unsupported` (an unlinked cause is a hypothesis
   at most). The minutes between the link's ends, checked by the link, are not read as a value.
   `lookup_knowledge` text (runbooks, past incidents) never states the current incident's cause;
5. a claim with nothing concrete to compare but names whose words mostly occur in the evidence
   -> `direct_observation` when it names something (a directly observed change is an
   observation) and is no risk or cause, else `reasonable_inference` (little overlap ->
   `unsupported`); a direction or state the evidence does not itself show, or a `risk` claim (a
   forecast, not an observation) -> `reasonable_inference`;
6. otherwise -> `direct_observation`.

Then the grounding checks of `shared.core.grounding` (values bound to their subject, metric and time,
numbers in words, polarity, key terms; see `grounding_overlay.py`) run on every claim and the
lower classification wins; a critical claim whose key entity, error code or cause is absent from
its evidence makes the verdict REJECT (ruling 2026-11-30: a fabrication, never retried).

The model verdict follows the spec's verdict scenarios: REJECT when a critical claim is
contradicted; PASS only when every critical claim is direct_observation or reasonable_inference
with at least one direct_observation, and the ceiling is PASS; else LOW_CONFID. Groundedness and
facts_checked come from `shared.core.effective_verdict`.
"""

from __future__ import annotations

from collections import Counter

from services.verifier.grounding_overlay import Grounding
from shared.core.contracts import (
    CRITICAL_CLAIM_TYPES,
    Claim,
    ClaimCheck,
    VerifiedEvidence,
    VerifierEvidenceRef,
    VerifierInput,
    VerifierOutput,
)
from shared.core.effective_verdict import compute_effective_verdict
from shared.core.grounding.causal_link import Corpus, claim_link, corpus_of, mask_link_minutes
from shared.core.grounding.claim_features import Code, Features, entity_present, extract, overlap
from shared.core.grounding.quiet_series import check_quiet_series

_CONFLICT_CLASSES = frozenset({"percent", "time", "size", "rate", "count"})
_CODE_CONFLICT_FAMILIES = frozenset({"http", "vendor"})
_NOTE_CHARS = 160


def _refs(items: list[VerifiedEvidence]) -> list[VerifierEvidenceRef]:
    return [
        VerifierEvidenceRef(
            tool_name=item.tool_name,
            source_invocation_ids=[item.source_invocation_id],
            raw_path=item.raw_path,
            claim_id=item.claim_id,
            note=" ".join(item.matched_text.split())[:_NOTE_CHARS],
        )
        for item in items
    ]


def find_conflicts(claim: Features, evidence: Features) -> list[str]:
    """What the statement says that the evidence contradicts (also used by the SemanticGuard)."""
    found: list[str] = []
    for quantity in claim.quantities:
        if quantity.unit_class not in _CONFLICT_CLASSES:
            continue
        same_class = [q for q in evidence.quantities if q.unit_class == quantity.unit_class]
        if same_class and not any(quantity.matches(q) for q in evidence.quantities):
            shown = ", ".join(q.raw for q in same_class[:3])
            found.append(f"claim says {quantity.raw}, evidence shows {shown}")
    for one, other in (("up", "down"), ("down", "up")):
        if one in claim.trend and other in evidence.trend and one not in evidence.trend:
            found.append(f"claim says {one}, evidence says {other}")
    for one, other in (("normal", "abnormal"), ("abnormal", "normal")):
        if one in claim.state and other in evidence.state and one not in evidence.state:
            found.append(f"claim says {one}, evidence says {other}")
    evidence_codes = set(evidence.codes)
    for code in claim.codes:
        if code in evidence_codes or code.family not in _CODE_CONFLICT_FAMILIES:
            continue
        rivals = [c.value for c in evidence.codes if c.family == code.family]
        if rivals:
            found.append(f"claim names {code.value}, evidence shows {', '.join(rivals[:3])}")
    return found


def _code_shown(code: Code, evidence: Features) -> bool:
    if code in set(evidence.codes):
        return True
    if code.family == "http_class":  # `5xx` is shown by any 5xx status
        return any(c.family == "http" and c.value[0] == code.value[0] for c in evidence.codes)
    return False


def find_absent(claim: Features, evidence: Features) -> list[str]:
    """Names, codes, quantities and metric families the evidence lacks (also the SemanticGuard's)."""
    missing: list[str] = []
    shown_entities = set(evidence.entities)
    missing += [
        name for name in claim.entities if name not in shown_entities and not entity_present(name, evidence.text)
    ]
    missing += [code.value for code in claim.codes if not _code_shown(code, evidence)]
    missing += [q.raw for q in claim.quantities if not any(q.matches(e) for e in evidence.quantities)]
    missing += [f"{family} metric" for family in sorted(claim.families - evidence.families)]
    return missing


def _names_only(features: Features) -> bool:
    return not (features.quantities or features.codes or features.families or features.trend or features.state)


_STANDING_VERIFICATION = {"observed": "direct_observation", "inferred": "reasonable_inference", "hypothesis": "unsupported"}


def classify(claim: Claim, items: list[VerifiedEvidence], corpus: Corpus | None = None) -> tuple[str, str]:
    """(verification, detail) for one claim against its verified evidence; `corpus` is the run's
    verified evidence, for the rarity of a causal link's shared token (the claim's own refs when
    not given)."""
    if not items:
        return "unsupported", "no verified evidence for this claim"
    if claim.statement is not None:
        # A typed claim: its fields are checked against its refs' facts by the grounding pass
        # (which lowers this when a field is refuted, or a cause is not linked); its text is ours.
        return _STANDING_VERIFICATION[claim.statement.standing], f"typed statement ({claim.statement.standing})"
    evidence_text = "\n".join(item.matched_text for item in items)
    link = claim_link(claim.claim_text, claim.claim_type, items, corpus if corpus is not None else corpus_of(items))
    claim_text = mask_link_minutes(claim.claim_text, link) if link is not None else claim.claim_text
    claim_features = extract(claim_text)
    evidence = extract(evidence_text)
    conflicts = find_conflicts(claim_features, evidence)
    if conflicts:
        return "contradicted", "; ".join(conflicts)
    missing = find_absent(claim_features, evidence)
    if missing:
        return "external_unknown", "not in the verified evidence: " + ", ".join(missing[:6])

    if link is not None:
        if link.linked:
            return "reasonable_inference", f"checked causal link ({link.kind}): {link.detail}"
        return "unsupported", f"no checked causal link: {link.detail}"
    # A series stated as quiet (未见明显升高): the cited summary's numbers decide.
    quiet = check_quiet_series(claim.claim_text, [item.facts for item in items])
    if quiet is not None:
        return quiet.verification, quiet.detail
    if not claim_features.concrete or _names_only(claim_features):
        # Nothing comparable beyond (present) names: what the claim says of them rests on wording.
        if overlap(claim.claim_text, evidence_text) >= 0.5:
            if claim_features.entities and claim.claim_type not in ("risk", "root_cause"):
                # Its names, versions and times all occur in its cited text (a directly observed
                # change is an observation, DESIGN §3); the grounding checks test its other terms.
                return "direct_observation", "the cited text states the claim's names, versions and times"
            return "reasonable_inference", "no concrete value to compare; wording matches the evidence"
        return "unsupported", "no concrete value to compare and little in common with the evidence"
    unshown = sorted((claim_features.trend - evidence.trend) | (claim_features.state - evidence.state))
    if unshown:
        return "reasonable_inference", "the evidence does not itself show: " + ", ".join(unshown)
    if claim.claim_type == "risk":
        return "reasonable_inference", "a risk is a forecast, not an observation"
    return "direct_observation", "the verified evidence contains the claim's values and names"


class EmbeddedVerifier:
    """Deterministic verifier engine: no network, no model, the same answer for the same input."""

    def verify(self, inp: VerifierInput, grounding: Grounding | None = None) -> VerifierOutput:
        """`grounding`: where the claims' grounding findings are kept, for the servicer's pass to
        reuse (`grounding_overlay.apply_grounding`); one of its own when not given."""
        claims = inp.verified_executor_output.claims
        checks: list[ClaimCheck] = []
        if grounding is None or grounding.inp is not inp:
            grounding = Grounding(inp)
        for claim in claims:
            found = grounding.of(claim)
            items = found.own
            verification, detail = classify(claim, items, grounding.corpus)
            check = ClaimCheck(
                claim_id=claim.claim_id,
                claim_text=claim.claim_text,
                claim_type=claim.claim_type,
                verification=verification,
                detail=detail,
                evidence_refs=_refs(items),
            )
            # The same grounding checks the servicer runs after any engine: the lower wins.
            checks.append(grounding.ground(claim, check))
        fabricated = any(c.fabricated_key and c.claim_type in CRITICAL_CLAIM_TYPES for c in checks)
        verdict = compute_effective_verdict(claims, checks, "REJECT" if fabricated else "PASS", inp.verdict_ceiling)
        counts = Counter(check.verification for check in checks)
        summary = ", ".join(f"{count} {name}" for name, count in sorted(counts.items())) or "no claims"
        return VerifierOutput(
            verdict=verdict.effective_verdict,
            groundedness_score=verdict.groundedness_score,
            critical_fact_count=verdict.critical_fact_count,
            claim_checks=checks,
            facts_checked=verdict.facts_checked,
            rationale=(
                f"{len(claims)} verified claim(s): {summary}; upper bound {verdict.upper_bound}, "
                f"ceiling {inp.verdict_ceiling}"
            ),
        )
