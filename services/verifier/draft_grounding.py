"""The deterministic grounding checks of a single-ReAct Draft, run after every SemanticGuard
engine (embedded or model); UNSUPPORTED from either side wins.

The spec releases a SUPPORTED Draft unchanged, so nothing can be cut from it: any finding makes
the whole Draft UNSUPPORTED (SEMANTIC_UNSUPPORTED). A typed item (docs/statements.md) is checked
typed: its statement, field by field, against the facts of the refs it cites (found in the
snapshot by evidence key and raw_path, among the groups its item rests on); an action item must
state a catalogued action, a named cause a cause, and a remedy needs confirmation. Its text is
Attest's rendering and is not read. Untyped items are checked against the snapshot evidence they
may rest on:
- an analysis against its own group, the conclusion against the groups it references, with the
  statement checks of `shared.core.grounding.statement_check` (causes included: an unhedged cause the
  incident evidence does not state is a finding);
- action-plan items and recommendations as actions (`side_texts.check_action`): grounded names and
  numbers, and a state-changing action needs human confirmation — the item's flag for an action
  plan item, the words 需人工确认 for a recommendation, which has no flag;
- limitations and missing context as possibilities (`side_texts.check_possibility`), where the
  user's question also counts as grounding (a limitation may name what was asked and not found).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.verifier.embedded_semantic_guard import SemanticReview
from shared.config import configured_failure_modes
from shared.core.contracts import RefFacts, Statement, StatementRef
from shared.core.grounding import check_ids
from shared.core.grounding.answer_words import blank_answer_words
from shared.core.grounding.side_texts import SideVerdict, check_action, check_possibility
from shared.core.grounding.statement_check import CitedRef, check_statement
from shared.core.statement_facts import changes_state
from shared.core.statement_facts import check_statement as check_typed
from shared.core.statement_render import render_gap
from shared.draft_contract import (
    ActionPlanItem,
    Draft,
    Recommendation,
    SemanticFinding,
    SnapshotEvidence,
    VerifiedSnapshot,
)

_CONFIRMATION_WORDS = re.compile(r"需人工确认|需要人工确认|人工确认后|经确认后|确认后再|需审批")
MAX_FINDINGS = 20
MAX_REASON_CHARS = 1000


_NOT_SHOWN = re.compile(r"^\(\+\d+ more evidence ref\(s\) not shown\)$")


def snapshot_refs(item: SnapshotEvidence) -> list[CitedRef]:
    """One snapshot item as cited refs: each excerpt line with the facts of its ref (the snapshot
    has one line and one facts entry per ref shown), and the scope and source as text (they name
    the subject and what was asked). Should lines and facts not line up, the lines count as text
    only and the facts as values only, so no value is read from another ref's line."""
    context = CitedRef("\n".join(p for p in (item.scope, item.source) if p), item.tool_name, None)
    lines = [line for line in item.excerpt.split("\n") if line.strip() and not _NOT_SHOWN.match(line)]
    if len(item.facts) == len(lines):
        return [context] + [
            CitedRef(line, item.tool_name, facts if facts.kind != "unknown" else None)
            for line, facts in zip(lines, item.facts)
        ]
    facts_only = [CitedRef("", item.tool_name, facts) for facts in item.facts if facts.kind != "unknown"]
    text_only = CitedRef(item.excerpt, item.tool_name, RefFacts(kind="unknown"))
    return [context, text_only, *facts_only]


def _groups(snapshot: VerifiedSnapshot) -> dict[str, list[CitedRef]]:
    return {
        group.analysis_id: [ref for item in group.evidence for ref in snapshot_refs(item)]
        for group in snapshot.analyses
    }


def _union(groups: dict[str, list[CitedRef]], ids: list[str]) -> list[CitedRef]:
    return [ref for analysis_id in dict.fromkeys(ids) for ref in groups.get(analysis_id, [])]


def _side(item: str, verdict: SideVerdict) -> list[SemanticFinding]:
    if not verdict.shown:
        return [SemanticFinding(item=item, check_id=verdict.check_id, detail=verdict.detail)]
    if verdict.check_id == check_ids.ACTION_STATE_CHANGE:
        return [SemanticFinding(item=item, check_id=verdict.check_id,
                                detail="a state-changing action without human confirmation")]
    return []


# --- typed items (docs/statements.md): typed against typed, no prose ------------------------------

_REFS_OF_KIND: dict[str, str] = {"cause_named": "a named cause states its cause and effect"}


def _typed_facts(snapshot: VerifiedSnapshot) -> dict[str, dict[tuple[str, str], RefFacts]]:
    """Per Analysis id: the facts of each ref its snapshot shows, by (evidence key, raw_path)."""
    table: dict[str, dict[tuple[str, str], RefFacts]] = {}
    for group in snapshot.analyses:
        facts = table.setdefault(group.analysis_id, {})
        for item in group.evidence:
            for fact in item.facts:
                if item.evidence_key and fact.raw_path and fact.kind != "unknown":
                    facts.setdefault((item.evidence_key, fact.raw_path), fact)
    return table


def _typed_item(item: str, statement: Statement, facts: dict[tuple[str, str], RefFacts]) -> list[SemanticFinding]:
    def facts_of(ref: StatementRef) -> RefFacts | None:
        return facts.get((ref.tool_call_id, ref.raw_path))

    return [SemanticFinding(item=item, check_id=check_ids.STATEMENT_FIELD, detail=f"{r.field}: {r.detail}"[:300])
            for r in check_typed(statement, facts_of, configured_failure_modes())]


def _typed_shape(item: str, statement: Statement, *, action: bool, kind: str | None = None) -> list[SemanticFinding]:
    """What the item's section asks of its statement: an action is a catalogued action and a
    finding is not; a named cause states a cause; a stated cause is never observed."""
    problems = []
    if action != (statement.action is not None):
        problems.append("an action item states no catalogued action" if action else "a finding states an action")
    if kind == "cause_named" and statement.cause is None:
        problems.append(_REFS_OF_KIND[kind])
    if statement.cause is not None and statement.standing == "observed":
        problems.append("a cause is stated as observed: the evidence shows its sides, not the causation")
    return [SemanticFinding(item=item, check_id=check_ids.STATEMENT_FIELD, detail=p) for p in problems]


def _gap_findings(query: str, draft: Draft, snapshot: VerifiedSnapshot) -> list[SemanticFinding]:
    """A typed gap names what was not checked: a service the run's evidence or the question names,
    and it cites nothing (a gap is no observation)."""
    known = {f.subject.casefold() for group in snapshot.analyses for item in group.evidence for f in item.facts if f.subject}
    asked = query.casefold()
    findings = []
    for name, statements in (("limitation_statements", draft.limitation_statements),
                             ("missing_context_statements", draft.missing_context_statements)):
        for index, gap in enumerate(statements):
            subject = gap.subject.casefold().strip()
            if not subject or (subject not in known and subject not in asked):
                findings.append(SemanticFinding(item=f"{name}[{index}]", check_id=check_ids.STATEMENT_FIELD,
                                                detail="subject: a gap about a service neither the evidence nor the question names"))
            if gap.refs or gap.cause is not None or gap.action is not None or gap.quantities:
                findings.append(SemanticFinding(item=f"{name}[{index}]", check_id=check_ids.STATEMENT_FIELD,
                                                detail="a gap states only a subject and a signal"))
    return findings


def ground_typed(draft: Draft, snapshot: VerifiedSnapshot) -> list[SemanticFinding]:
    """The typed items' findings: each statement against the facts of the refs it cites, among the
    snapshot groups its item rests on (an Analysis its own, a report item its Analyses')."""
    table = _typed_facts(snapshot)

    def facts(analysis_ids: list[str]) -> dict[tuple[str, str], RefFacts]:
        return {key: fact for analysis_id in dict.fromkeys(analysis_ids) for key, fact in table.get(analysis_id, {}).items()}

    findings: list[SemanticFinding] = []
    for index, analysis in enumerate(draft.analyses):
        if analysis.statement is not None:
            where = f"analyses[{index}]"
            findings += _typed_shape(where, analysis.statement, action=False)
            findings += _typed_item(where, analysis.statement, facts([analysis.analysis_id]))
    conclusion = draft.conclusion
    if conclusion is not None and conclusion.statement is not None:
        findings += _typed_shape("conclusion", conclusion.statement, action=False, kind=conclusion.kind)
        findings += _typed_item("conclusion", conclusion.statement, facts(conclusion.analysis_refs))
    elif conclusion is not None and conclusion.kind in _REFS_OF_KIND:
        findings.append(SemanticFinding(item="conclusion", check_id=check_ids.STATEMENT_FIELD, detail=_REFS_OF_KIND[conclusion.kind]))
    sections: tuple[tuple[str, Sequence[ActionPlanItem | Recommendation]], ...] = (
        ("action_plan", draft.action_plan), ("recommendations", draft.recommendations))
    for name, items in sections:
        for index, entry in enumerate(items):
            if entry.statement is None:
                continue
            where = f"{name}[{index}]"
            findings += _typed_shape(where, entry.statement, action=True)
            findings += _typed_item(where, entry.statement, facts(entry.analysis_refs))
            flagged = entry.requires_human_confirmation if isinstance(entry, ActionPlanItem) else bool(
                _CONFIRMATION_WORDS.search(entry.text))
            if changes_state(entry.statement) and not flagged:
                findings.append(SemanticFinding(item=where, check_id=check_ids.ACTION_STATE_CHANGE,
                                                detail="a state-changing action without human confirmation"))
    return findings


def ground_draft(query: str, draft: Draft, snapshot: VerifiedSnapshot) -> list[SemanticFinding]:
    """Every grounding finding in the Draft's user-visible sections (empty: nothing found). Typed
    items are checked typed (`ground_typed`); the others by the text checks below."""
    groups = _groups(snapshot)
    everything = _union(groups, list(groups))
    findings: list[SemanticFinding] = ground_typed(draft, snapshot)

    def statement(item: str, text: str, refs: list[CitedRef], claim_type: str = "observation") -> None:
        findings.extend(
            SemanticFinding(item=item, check_id=f.check_id, detail=f.detail)
            for f in check_statement(text, refs, claim_type=claim_type, check_causes=True)
        )

    for index, analysis in enumerate(draft.analyses):
        if analysis.statement is None:
            statement(f"analyses[{index}]", analysis.text, groups.get(analysis.analysis_id, []))
    if draft.conclusion is not None and draft.conclusion.kind is None and draft.conclusion.statement is None:
        # The answer line's template words are ours; what it asserts is the answer guard's check.
        statement("conclusion", blank_answer_words(draft.conclusion.text), _union(groups, draft.conclusion.analysis_refs))
    for index, action in enumerate(draft.action_plan):
        if action.statement is not None:
            continue
        refs = _union(groups, action.analysis_refs) if action.analysis_refs else everything
        findings += _side(f"action_plan[{index}]", check_action(
            action.text, refs, model_confirmation=action.requires_human_confirmation))
    for index, recommendation in enumerate(draft.recommendations):
        if recommendation.statement is not None:
            continue
        refs = _union(groups, recommendation.analysis_refs) if recommendation.analysis_refs else everything
        findings += _side(f"recommendations[{index}]", check_action(
            recommendation.text, refs, model_confirmation=bool(_CONFIRMATION_WORDS.search(recommendation.text))))
    written = {render_gap(s, "limitation") for s in draft.limitation_statements}
    written |= {render_gap(s, "missing") for s in draft.missing_context_statements}
    for name, texts in (("limitations", draft.limitations), ("missing_context", draft.missing_context)):
        for index, text in enumerate(texts):
            if text in written:
                continue  # Attest's rendering of a typed gap, checked below
            findings += _side(f"{name}[{index}]", check_possibility(
                text, everything, also_allowed=query, states_unknowns=True))
    findings += _gap_findings(query, draft, snapshot)
    return findings[:MAX_FINDINGS]


ENGINE_CHECK = "semantic_guard.engine"


def combine_review(review: SemanticReview, findings: list[SemanticFinding]) -> tuple[str, str, list[SemanticFinding]]:
    """(verdict, reason, findings) of the engine's review and the grounding findings together:
    UNSUPPORTED when either says so; an engine's UNSUPPORTED is recorded as a finding of its own
    and keeps its reason when the grounding checks found nothing more."""
    if review.verdict == "UNSUPPORTED":
        engine = SemanticFinding(item="draft", check_id=ENGINE_CHECK, detail=review.reason[:300])
        if not findings:
            return "UNSUPPORTED", review.reason, [engine]
        findings = [engine] + findings
    if not findings:
        return review.verdict, review.reason, []
    shown = "; ".join(f"{f.item}: {f.check_id}: {f.detail}" for f in findings[:4])
    more = f" (+{len(findings) - 4} more)" if len(findings) > 4 else ""
    return "UNSUPPORTED", (shown + more)[:MAX_REASON_CHARS], findings
