"""EvidenceRepair: one single-turn attempt to fix a Draft's identifiers and references.

Spec "Evidence repair is single-turn and semantics-preserving": exactly one direct attempt with no
tool — the diagnosis agent and the tools are never run again — that may change ids and references
only. Whether a repair changed report semantics is decided by the gateway with
`shared.draft_semantics.repair_changes_semantics`; this module never edits text, kinds, order or
flags to begin with.

The embedded repair fixes only what EvidenceGuard's violations name, and only where the intended
target is unambiguous:

- an unknown Analysis reference (`report.ref_unknown`) that equals exactly one existing
  `analysis_id` once case and whitespace are ignored is replaced by that id;
- a tool call id that resolves to no call of this run (`tool_ref.not_found`,
  `tool_ref.other_run`) is replaced by the one current-run call id that it matches ignoring case
  and whitespace, or, failing that, of which it is a prefix or a suffix (at least
  MIN_PARTIAL_ID_CHARS characters) — a truncated or decorated copy of a real id.

Anything else is returned unchanged: a repair that cannot be sure does nothing. The model repair
makes one direct model call (no tools, one attempt) with the versioned repair prompt and parses
the reply strictly; no usable reply means no repaired Draft.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from services.executor.draft_parse import draft_response_format, parse_draft_text
from shared.core import guard_violations as codes
from shared.core.contracts import PromptRef, ToolInvocation
from shared.draft_contract import Draft, GuardViolation, with_ref_calls
from shared.model_calls import ModelCallAudit, ModelEngine
from shared.model_client import ModelCallTally, ModelClient, ModelError, TimeRemaining, complete_with_retries
from shared.prompt_files import Prompt

log = logging.getLogger(__name__)

EMBEDDED_REPAIR_PROMPT = PromptRef(role="executor", name="draft_repair.embedded", version="1")
MIN_PARTIAL_ID_CHARS = 4
# "Exactly one direct no-Tool model call": no technical retry either.
REPAIR_MODEL_ATTEMPTS = 1
MAX_VIOLATIONS_SHOWN = 50
MAX_CALLS_SHOWN = 100
_TOOL_REF_UNRESOLVED = frozenset({codes.TOOL_REF_NOT_FOUND, codes.TOOL_REF_OTHER_RUN})


@dataclass
class RepairRun:
    """What one RepairDraft produced: the repaired Draft (None: no usable repair) and its audit."""

    draft: Draft | None
    audit: ModelCallAudit


class DraftRepair(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def prompt_ref(self) -> PromptRef:
        """The prompt the engine uses (name and version only), whether or not it has run."""
        ...
    def repair(self, draft: Draft, violations: list[GuardViolation], invocations: list[ToolInvocation], *,
               time_remaining: TimeRemaining | None = None) -> RepairRun: ...


def _loose(identifier: str) -> str:
    return "".join(identifier.split()).casefold()


def _unique_match(wrong: str, candidates: Iterable[str], *, partial: bool) -> str | None:
    """The one candidate `wrong` designates: equal ignoring case and whitespace, else (when
    `partial`) a unique prefix/suffix relation of at least MIN_PARTIAL_ID_CHARS characters;
    None if unsure."""
    options = list(dict.fromkeys(c for c in candidates if c))
    loose = _loose(wrong)
    if not loose:
        return None
    exact = [c for c in options if _loose(c) == loose]
    if exact:
        return exact[0] if len(exact) == 1 else None
    if not partial or len(loose) < MIN_PARTIAL_ID_CHARS:
        return None
    related = [
        c for c in options
        if _loose(c).startswith(loose) or _loose(c).endswith(loose) or loose.startswith(_loose(c)) or loose.endswith(_loose(c))
    ]
    related = [c for c in related if len(_loose(c)) >= MIN_PARTIAL_ID_CHARS]
    return related[0] if len(related) == 1 else None


def repair_references(draft: Draft, violations: list[GuardViolation], run_tool_call_ids: list[str]) -> Draft:
    """The embedded repair: the Draft with the unambiguous reference fixes applied (a copy)."""
    repaired = draft.model_copy(deep=True)
    analysis_ids = [a.analysis_id for a in repaired.analyses if a.analysis_id.strip()]
    ref_fixes: dict[str, str] = {}
    for violation in violations:
        if violation.code == codes.REPORT_REF_UNKNOWN and violation.analysis_id not in analysis_ids:
            target = _unique_match(violation.analysis_id, analysis_ids, partial=False)
            if target is not None:
                ref_fixes[violation.analysis_id] = target
    items = ([repaired.conclusion] if repaired.conclusion is not None else []) + repaired.action_plan + repaired.recommendations
    for item in items:
        item.analysis_refs = [ref_fixes.get(ref, ref) for ref in item.analysis_refs]

    call_fixes: dict[str, str] = {}
    for violation in violations:
        if violation.code not in _TOOL_REF_UNRESOLVED or violation.tool_call_id in run_tool_call_ids:
            continue
        target = _unique_match(violation.tool_call_id, run_tool_call_ids, partial=True)
        if target is None:
            continue
        for analysis in repaired.analyses:
            if violation.analysis_id and analysis.analysis_id != violation.analysis_id:
                continue
            analysis.tool_call_ids = [target if t == violation.tool_call_id else t for t in analysis.tool_call_ids]
        call_fixes.setdefault(violation.tool_call_id, target)
    # A typed statement cites a call by the same id: it is the same reference.
    for typed in [*repaired.analyses, *items]:
        if typed.statement is not None:
            typed.statement = with_ref_calls(typed.statement, lambda call: call_fixes.get(call, call))
    return repaired


class EmbeddedDraftRepair:
    provider = "embedded"
    prompt_ref = EMBEDDED_REPAIR_PROMPT

    def repair(self, draft: Draft, violations: list[GuardViolation], invocations: list[ToolInvocation], *,
               time_remaining: TimeRemaining | None = None) -> RepairRun:
        ids = [inv.tool_call_id for inv in invocations if inv.tool_call_id]
        return RepairRun(draft=repair_references(draft, violations, ids),
                         audit=ModelCallAudit.embedded(EMBEDDED_REPAIR_PROMPT))


def repair_request(draft: Draft, violations: list[GuardViolation], invocations: list[ToolInvocation]) -> str:
    """The user message of the model repair: the Draft, the violations and the run's calls by id
    (tool, lifecycle, evidence status) — identifiers to point at, never their results."""
    calls = [
        {"tool_call_id": inv.tool_call_id, "tool_name": inv.tool_name, "lifecycle": inv.lifecycle,
         "evidence_status": inv.evidence_status}
        for inv in invocations if inv.tool_call_id
    ][:MAX_CALLS_SHOWN]
    body: dict[str, Any] = {
        "draft": draft.model_dump(mode="json"),
        "violations": [v.model_dump(mode="json") for v in violations[:MAX_VIOLATIONS_SHOWN]],
        "tool_calls_of_this_run": calls,
    }
    return json.dumps(body, ensure_ascii=False)


class ModelDraftRepair(ModelEngine):
    ROLE = "executor"

    def __init__(self, client: ModelClient, prompt: Prompt, *, json_schema_format: bool = False) -> None:
        self._client = client
        self._prompt = prompt
        self._response_format = draft_response_format() if json_schema_format else None

    def repair(self, draft: Draft, violations: list[GuardViolation], invocations: list[ToolInvocation], *,
               time_remaining: TimeRemaining | None = None) -> RepairRun:
        tally = ModelCallTally()
        messages = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": repair_request(draft, violations, invocations)},
        ]
        repaired: Draft | None = None
        try:
            reply = complete_with_retries(
                self._client, messages, tally=tally, max_attempts=REPAIR_MODEL_ATTEMPTS,
                time_remaining=time_remaining, response_format=self._response_format,
            )
        except ModelError as error:
            log.warning("draft repair model call failed: %s", error)
        else:
            repaired, detail = parse_draft_text(reply.content)
            if repaired is None:
                log.info("draft repair reply is no Draft: %s", detail)
        return RepairRun(draft=repaired, audit=ModelCallAudit.of_calls(self.prompt_ref, self._client, tally))
