"""The single-ReAct Draft and what EvidenceGuard returns for it, as pydantic models.

Field names mirror `protos/attest/common/v1/single_react.proto` (Draft, Analysis, Conclusion,
ActionPlanItem, Recommendation, GuardViolation, SnapshotEvidence, AnalysisEvidence,
VerifiedSnapshot, EvidenceGuardResult), so `shared.proto_convert` converts them both ways.

The Draft models check types only. Whether ids are unique, texts non-blank, kinds supported and
references resolvable is EvidenceGuard's job (`services/gatekeeper/evidence_guard.py`), so that a
structurally broken Draft reaches the guard and gets violations instead of a parse error. `kind`
is therefore optional: an unspecified proto enum (or a missing JSON value) reads as None, which
the guard reports as an unsupported kind.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shared.core.contracts import AnalysisKind, EvidenceStatus, RefFacts


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- the Draft ------------------------------------------------------------------------------------


class Analysis(_Model):
    analysis_id: str = ""
    kind: AnalysisKind | None = None
    text: str = ""
    # The executor's tool_call_id column of the current run's invocations this analysis rests on.
    tool_call_ids: list[str] = Field(default_factory=list)


class Conclusion(_Model):
    text: str = ""
    analysis_refs: list[str] = Field(default_factory=list)


class ActionPlanItem(_Model):
    text: str = ""
    analysis_refs: list[str] = Field(default_factory=list)
    requires_human_confirmation: bool = False


class Recommendation(_Model):
    text: str = ""
    analysis_refs: list[str] = Field(default_factory=list)


class Draft(_Model):
    # None: the agent reached no conclusion (the spec's `conclusion=null` Draft).
    conclusion: Conclusion | None = None
    analyses: list[Analysis] = Field(default_factory=list)
    action_plan: list[ActionPlanItem] = Field(default_factory=list)
    recommendations: list[Recommendation] = Field(default_factory=list)
    limitations: list[str] = Field(default_factory=list)
    missing_context: list[str] = Field(default_factory=list)


# --- EvidenceGuard's result -----------------------------------------------------------------------


class GuardViolation(_Model):
    code: str  # one of shared.core.guard_violations.VIOLATION_CODES
    analysis_id: str = ""
    tool_call_id: str = ""
    detail: str = ""


class SnapshotEvidence(_Model):
    """One verified invocation as SemanticGuard may see it: no tool call id, no raw response."""

    tool_name: str
    source: str = ""
    scope: str = ""
    timestamp: str = ""
    excerpt: str = ""
    evidence_status: EvidenceStatus | None = None
    # What each ref shown in the excerpt states, in the excerpt's order.
    facts: list[RefFacts] = Field(default_factory=list)


class SemanticFinding(_Model):
    """One problem SemanticGuard found in a Draft (audit only)."""

    item: str  # analyses[i] | conclusion | action_plan[i] | recommendations[i] | limitations[i] | missing_context[i]
    check_id: str
    detail: str = ""


class AnalysisEvidence(_Model):
    analysis_id: str
    evidence: list[SnapshotEvidence] = Field(default_factory=list)


class VerifiedSnapshot(_Model):
    analyses: list[AnalysisEvidence] = Field(default_factory=list)


class EvidenceGuardResult(_Model):
    passed: bool
    violations: list[GuardViolation] = Field(default_factory=list)
    snapshot: VerifiedSnapshot = Field(default_factory=VerifiedSnapshot)
    # conclusion=null Drafts only: the references kept out of the snapshot (never published).
    excluded_tool_call_ids: list[str] = Field(default_factory=list)
