"""A typed Draft's texts, written by Attest before EvidenceGuard sees the Draft (docs/statements.md).

A model states its single-ReAct Draft as typed statements: each Analysis a statement, the
conclusion a kind (what it answers) with the statement it rests on, each action a catalogued
action. This module writes every text of such a Draft from those records, once, before the Draft
leaves the executor:

- an Analysis: `render_statement`, quoting the line or change record it cites (the ref's own
  text, read from the run's stored tool result: never words the model wrote; its leading
  timestamp shown as a time of the answer, so that it too is shown in the configured zone);
- the conclusion: the opening its kind gives (`shared.core.direct_answer`), then its statement;
- an action: the failure-mode catalogue's text, its confirmation flag from its kind (a remedy
  changes the running system, a next step reads);
- a typed gap: 未核实：<subject 的 signal> into `limitations`, 缺少：… into `missing_context`, after
  the model's own strings (which the text checks still read).

Times stay ISO-8601 UTC: the gateway's display step shows them in the configured zone, for the
Draft as for every answer. Nothing here reads prose, and no rendered text holds a tool call id, so a
references-only EvidenceRepair re-renders to the same bytes. A cause is an inference (the evidence
shows the two sides and their order, never the causation itself), so a cause stated as observed is
rendered, and checked, as inferred. Items without a statement keep the model's text (their own
grounding checks read it). The model's text of a typed item is dropped: it is never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from shared.core.contracts import ConclusionKind, Statement, ToolInvocation
from shared.core.direct_answer import (
    CAUSE_UNCONFIRMED,
    FOUND,
    MOST_LIKELY_CAUSE,
    NOT_SUPPORTED,
    NOTHING_FOUND,
    UNKNOWN,
    YES,
)
from shared.core.evidence_facts import ref_facts
from shared.core.evidence_view import evidence_view
from shared.core.failure_modes import FailureModes
from shared.core.statement_facts import changes_state
from shared.core.statement_render import render_gap, render_statement
from shared.draft_contract import ActionPlanItem, Conclusion, Draft, Recommendation

MAX_QUOTE_CHARS = 240
CONFIRMATION_NOTE = "（需人工确认）"
# What each kind of conclusion opens with; the statement follows.
OPENING: dict[ConclusionKind, str] = {
    "finding": "",
    "cause_named": MOST_LIKELY_CAUSE,
    "cause_unconfirmed": f"{CAUSE_UNCONFIRMED}；最明显的线索：",
    "healthy": NOTHING_FOUND,
    "found": FOUND,
    "yes": YES,
    "no": NOT_SUPPORTED,
    "cannot_confirm": UNKNOWN,
}
# A kind whose statement is optional, and what it says without one.
_WITHOUT_STATEMENT: dict[ConclusionKind, str] = {
    "cause_unconfirmed": CAUSE_UNCONFIRMED,
    "cannot_confirm": f"{UNKNOWN}本次没有可核实的检查结果",
}
_QUOTED_KINDS = ("log", "change")

# The text of the ref at (tool_call_id, raw_path) in this run and the UTC instant its record
# carries ("" when none), or None.
RefText = Callable[[str, str], "tuple[str, str] | None"]


def ref_texts(invocations: Sequence[ToolInvocation]) -> RefText:
    """Ref texts of the run's stored invocations, by tool_call_id and raw_path."""
    by_call = {invocation.tool_call_id: invocation for invocation in invocations if invocation.tool_call_id}

    def text(tool_call_id: str, raw_path: str) -> tuple[str, str] | None:
        invocation = by_call.get(tool_call_id)
        if invocation is None:
            return None
        found = evidence_view(invocation).at(raw_path)
        facts = ref_facts(invocation, raw_path)
        return (found[0].text, facts.at if facts is not None else "") if found else None

    return text


def as_inferred(statement: Statement) -> Statement:
    """A cause is never observed: at most inferred (a hypothesis stays one)."""
    if statement.cause is not None and statement.standing == "observed":
        return statement.model_copy(update={"standing": "inferred"})
    return statement


def _quote(statement: Statement, ref_text: RefText) -> tuple[str, str]:
    """The cited line or change record, verbatim (bounded), for a statement about one, and its
    instant: a record that opens with its own timestamp is quoted from after it, and the instant
    shown before the quote, in the answer's zone like every other time."""
    if (statement.cause is not None or statement.signal is None or statement.signal.kind not in _QUOTED_KINDS
            or statement.state == "absent"):  # a search that found nothing has no record to quote
        return "", ""
    for ref in statement.refs:
        found = ref_text(ref.tool_call_id, ref.raw_path)
        if found and found[0].strip():
            text, at = " ".join(found[0].split()), found[1]
            if at and text.startswith(at) and text[len(at):].strip():
                text = text[len(at):].strip()
            else:
                at = ""
            return (text if len(text) <= MAX_QUOTE_CHARS else text[: MAX_QUOTE_CHARS - 1] + "…"), at
    return "", ""


def statement_text(statement: Statement, ref_text: RefText, modes: FailureModes) -> str:
    """One statement's sentence; a hypothesis reads as one."""
    quote, at = _quote(statement, ref_text)
    sides = (_quote(statement.cause.cause, ref_text), _quote(statement.cause.effect, ref_text)) if statement.cause else None
    text = render_statement(as_inferred(statement), None, modes=modes, quote=quote, quote_at=at, side_quotes=sides)
    return f"可能：{text}（待验证）" if statement.standing == "hypothesis" and statement.action is None else text


def conclusion_text(conclusion: Conclusion, ref_text: RefText, modes: FailureModes) -> str:
    kind = conclusion.kind or "finding"
    if conclusion.statement is None:
        return _WITHOUT_STATEMENT.get(kind, OPENING[kind])
    body = statement_text(conclusion.statement, ref_text, modes)
    if kind == "healthy":
        return f"{NOTHING_FOUND}（{body}）"
    return OPENING[kind] + body


def _action_text(statement: Statement, modes: FailureModes, note: bool) -> str:
    text = render_statement(statement, None, modes=modes)
    return text + CONFIRMATION_NOTE if text and note and changes_state(statement) else text


def render_draft(draft: Draft, ref_text: RefText, modes: FailureModes) -> Draft:
    """The Draft with every typed item's text written from its statement (module docstring)."""
    analyses = [
        a.model_copy(update={"text": statement_text(a.statement, ref_text, modes),
                             "statement": as_inferred(a.statement)}) if a.statement is not None else a
        for a in draft.analyses
    ]
    conclusion = draft.conclusion
    if conclusion is not None and (conclusion.kind is not None or conclusion.statement is not None):
        conclusion = conclusion.model_copy(update={
            "text": conclusion_text(conclusion, ref_text, modes),
            "statement": as_inferred(conclusion.statement) if conclusion.statement is not None else None,
        })
    actions: list[ActionPlanItem] = [
        item.model_copy(update={"text": _action_text(item.statement, modes, note=False),
                                "requires_human_confirmation": changes_state(item.statement)})
        if item.statement is not None else item
        for item in draft.action_plan
    ]
    recommendations: list[Recommendation] = [
        item.model_copy(update={"text": _action_text(item.statement, modes, note=True)})
        if item.statement is not None else item
        for item in draft.recommendations
    ]
    limitations = draft.limitations + [t for t in map(gap_text("limitation"), draft.limitation_statements) if t]
    missing = draft.missing_context + [t for t in map(gap_text("missing"), draft.missing_context_statements) if t]
    return draft.model_copy(update={"analyses": analyses, "conclusion": conclusion, "action_plan": actions,
                                    "recommendations": recommendations, "limitations": limitations,
                                    "missing_context": missing})


def gap_text(gap: Literal["limitation", "missing"]) -> Callable[[Statement], str]:
    """How a typed limitation or missing-context item reads (`render_gap`)."""
    return lambda statement: render_gap(statement, gap)
