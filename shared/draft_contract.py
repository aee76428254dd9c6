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

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.core.contracts import AnalysisKind, ConclusionKind, EvidenceStatus, RefFacts, Statement, StatementRef


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --- the Draft ------------------------------------------------------------------------------------


class Analysis(_Model):
    analysis_id: str = ""
    kind: AnalysisKind | None = None
    text: str = ""
    # The executor's tool_call_id column of the current run's invocations this analysis rests on.
    tool_call_ids: list[str] = Field(default_factory=list)
    # Typed: what the Analysis states; `text` is then Attest's rendering of it (docs/statements.md).
    statement: Statement | None = None


class Conclusion(_Model):
    text: str = ""
    analysis_refs: list[str] = Field(default_factory=list)
    # Typed: what the conclusion answers and the statement it rests on; `text` is rendered from them.
    kind: ConclusionKind | None = None
    statement: Statement | None = None


class ActionPlanItem(_Model):
    text: str = ""
    analysis_refs: list[str] = Field(default_factory=list)
    requires_human_confirmation: bool = False
    statement: Statement | None = None  # typed: a catalogued action (statement.action)


class Recommendation(_Model):
    text: str = ""
    analysis_refs: list[str] = Field(default_factory=list)
    statement: Statement | None = None


class Draft(_Model):
    # None: the agent reached no conclusion (the spec's `conclusion=null` Draft).
    conclusion: Conclusion | None = None
    analyses: list[Analysis] = Field(default_factory=list)
    action_plan: list[ActionPlanItem] = Field(default_factory=list)
    recommendations: list[Recommendation] = Field(default_factory=list)
    limitations: list[str] = Field(default_factory=list)
    missing_context: list[str] = Field(default_factory=list)
    # Typed gaps (a subject and a signal): Attest writes each into `limitations` / `missing_context`.
    limitation_statements: list[Statement] = Field(default_factory=list, max_length=20)
    missing_context_statements: list[Statement] = Field(default_factory=list, max_length=20)


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
    # An opaque key of the tool call (never its id): typed statements name their refs by it here.
    evidence_key: str = ""


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


# --- typed statements' refs -------------------------------------------------------------------------


def statement_refs(statement: Statement | None) -> list[StatementRef]:
    """Every ref a statement cites, its cause's two sides included."""
    if statement is None:
        return []
    refs = list(statement.refs)
    if statement.cause is not None:
        refs += statement.cause.cause.refs + statement.cause.effect.refs
    return refs


def statement_content(statement: Statement) -> dict[str, Any]:
    """What a statement says, without the refs it cites (at any level)."""
    content = statement.model_dump(mode="json", exclude={"refs": True})
    if statement.cause is not None:
        content["cause"] = {"cause": statement_content(statement.cause.cause),
                            "effect": statement_content(statement.cause.effect), "mechanism": statement.cause.mechanism}
    return content


def draft_statements(draft: Draft) -> list[tuple[str, Statement]]:
    """(item, statement) of every typed item of the Draft, in its order (`analyses[0]`, `conclusion` …)."""
    items: list[tuple[str, Statement | None]] = [(f"analyses[{i}]", a.statement) for i, a in enumerate(draft.analyses)]
    if draft.conclusion is not None:
        items.append(("conclusion", draft.conclusion.statement))
    items += [(f"action_plan[{i}]", a.statement) for i, a in enumerate(draft.action_plan)]
    items += [(f"recommendations[{i}]", r.statement) for i, r in enumerate(draft.recommendations)]
    return [(where, statement) for where, statement in items if statement is not None]


def evidence_keys(draft: Draft) -> dict[str, str]:
    """Each tool call id the Analyses cite → an opaque key (`e1`, `e2` … in order of first
    citation): SemanticGuard sees statements' refs and snapshot entries by this key, never by id."""
    keys: dict[str, str] = {}
    for analysis in draft.analyses:
        for tool_call_id in analysis.tool_call_ids:
            keys.setdefault(tool_call_id, f"e{len(keys) + 1}")
    return keys


_KEY = re.compile(r"^e\d{1,4}$")


def with_ref_calls(statement: Statement, call: Callable[[str], str]) -> Statement:
    """The statement with each ref's tool_call_id replaced by `call(tool_call_id)`, at every level."""

    def ref(item: StatementRef) -> StatementRef:
        return item.model_copy(update={"tool_call_id": call(item.tool_call_id)})

    update: dict[str, Any] = {"refs": [ref(item) for item in statement.refs]}
    if statement.cause is not None:
        update["cause"] = statement.cause.model_copy(update={
            "cause": statement.cause.cause.model_copy(update={"refs": [ref(i) for i in statement.cause.cause.refs]}),
            "effect": statement.cause.effect.model_copy(update={"refs": [ref(i) for i in statement.cause.effect.refs]}),
        })
    return statement.model_copy(update=update)


def _keyed(statement: Statement | None, keys: dict[str, str]) -> Statement | None:
    if statement is None:
        return None

    def key(tool_call_id: str) -> str:
        known = keys.get(tool_call_id)
        return known if known is not None else (tool_call_id if not keys and _KEY.match(tool_call_id) else "")

    return with_ref_calls(statement, key)


def for_semantic_guard(draft: Draft) -> Draft:
    """The Draft as SemanticGuard sees it: no tool call ids, and each typed statement's refs name
    their tool call by its evidence key. A Draft already stripped keeps the keys it carries."""
    keys = evidence_keys(draft)

    def keyed(item: Any) -> Any:
        return item.model_copy(update={"statement": _keyed(item.statement, keys)})

    return draft.model_copy(update={
        "analyses": [keyed(a).model_copy(update={"tool_call_ids": []}) for a in draft.analyses],
        "conclusion": keyed(draft.conclusion) if draft.conclusion is not None else None,
        "action_plan": [keyed(a) for a in draft.action_plan],
        "recommendations": [keyed(r) for r in draft.recommendations],
    })
