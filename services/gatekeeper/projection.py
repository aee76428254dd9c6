"""The verified projection: the only executor material the verifier and composer ever see.

Graph spec, "only passed bindings are available" and "verified evidence preserves precise
references": `verified_executor_output` keeps only claims with at least one passed binding and
only those bindings (with the resolved `source_invocation_id`, so a backfilled id is explicit);
`verified_evidence` has one item per passed binding whose `matched_text` is the ref's system-side
text, bounded to a window around the excerpt, and whose `facts` are what that ref states, read from
the stored tool result (`shared.core.evidence_facts`; None where the record does not say). Hypotheses,
recommended actions and missing info are carried as they were read (they are rendered as
possibilities, never as facts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.gatekeeper.schema_rules import BindingFields, ClaimShape, SideLists
from shared.config import configured_failure_modes
from shared.core.contracts import (
    Claim,
    EvidenceBinding,
    ExecutorEvidenceV2,
    RefFacts,
    Statement,
    ToolInvocation,
    VerifiedEvidence,
)
from shared.core.evidence_facts import facts_reader
from shared.core.evidence_view import CitedRef
from shared.core.excerpt_match import bounded_window
from shared.core.statement_render import render_statement
from shared.core.tool_catalogue import QUERY_CHANGES, QUERY_LOGS


@dataclass
class PassedBinding:
    fields: BindingFields
    invocation: ToolInvocation
    ref: CitedRef


_QUOTED_TOOLS = (QUERY_LOGS, QUERY_CHANGES)


def _excerpt(passed: list[PassedBinding], side: Statement | None = None) -> str:
    """The verified excerpt of the first line or change record cited (by `side`'s refs, when given):
    an excerpt the gatekeeper found verbatim in the ref's text."""
    wanted = None if side is None else {(ref.source_invocation_id, ref.raw_path) for ref in side.refs}
    return next((item.fields.evidence_excerpt for item in passed
                 if item.invocation.tool_name in _QUOTED_TOOLS and item.fields.evidence_excerpt.strip()
                 and (wanted is None or (item.invocation.invocation_id, item.fields.raw_path) in wanted)), "")


def _typed_text(statement: Statement, passed: list[PassedBinding]) -> str:
    """A typed claim's sentence, quoting the verified excerpt of the line or change record it cites;
    a cause quotes what each of its sides cites."""
    link = statement.cause
    sides = ((_excerpt(passed, link.cause), ""), (_excerpt(passed, link.effect), "")) if link is not None else None
    return render_statement(statement, None, modes=configured_failure_modes(), quote=_excerpt(passed),
                            side_quotes=sides)


def project(
    claims: list[tuple[ClaimShape, list[PassedBinding]]],
    side_lists: SideLists,
    matched_text_max_chars: int,
) -> tuple[ExecutorEvidenceV2, list[VerifiedEvidence]]:
    verified_claims: list[Claim] = []
    evidence: list[VerifiedEvidence] = []
    readers: dict[int, Callable[[str], RefFacts | None]] = {}  # one parse of agent_result per invocation
    for shape, passed in claims:
        if not shape.valid or not passed:
            continue
        bindings = []
        for item in passed:
            invocation_id = item.invocation.invocation_id
            if invocation_id not in readers:
                readers[invocation_id] = facts_reader(item.invocation)
            bindings.append(
                EvidenceBinding(
                    source_type=item.fields.source_type,
                    tool_name=item.invocation.tool_name,
                    source_invocation_id=invocation_id,
                    source_invocation_ids=[invocation_id],
                    raw_path=item.fields.raw_path,
                    evidence_excerpt=item.fields.evidence_excerpt,
                    source_id=item.fields.source_id,
                )
            )
            evidence.append(
                VerifiedEvidence(
                    claim_id=shape.claim_id,
                    source_invocation_id=invocation_id,
                    tool_name=item.invocation.tool_name,
                    raw_path=item.fields.raw_path,
                    matched_text=bounded_window(item.ref.text, item.fields.evidence_excerpt, matched_text_max_chars),
                    facts=readers[invocation_id](item.fields.raw_path),
                )
            )
        verified_claims.append(
            Claim(
                claim_id=shape.claim_id,
                claim_type=shape.claim_type,  # a valid shape's type is one of the contract's
                claim_text=shape.claim_text if shape.statement is None else _typed_text(shape.statement, passed),
                support_level=shape.support_level,
                evidence_bindings=bindings,
                statement=shape.statement,
            )
        )
    kept_ids = {claim.claim_id for claim in verified_claims}
    hypotheses = [
        hypothesis.model_copy(update={"related_claim_ids": [c for c in hypothesis.related_claim_ids if c in kept_ids]})
        for hypothesis in side_lists.hypotheses
    ]
    output = ExecutorEvidenceV2(
        claims=verified_claims,
        hypotheses=hypotheses,
        recommended_actions=list(side_lists.recommended_actions),
        missing_info=list(side_lists.missing_info),
    )
    return output, evidence
