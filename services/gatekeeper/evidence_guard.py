"""EvidenceGuard: the deterministic check of a single-ReAct Draft against the current run.

Specs (single-react-evidence-semantic-guards): "Deterministic Draft and evidence validation",
"Current Run canonical invocation ownership", "Analysis kind matches evidence semantics",
"Verified evidence snapshot is minimal and deterministic". Violation codes are listed and
explained in `guard_violations.py`.

A Draft with a Conclusion passes only when it has no violation at all:
- structure: every Analysis has a unique non-blank id, a supported kind, non-blank text and at
  least one tool call id; the Conclusion, every Action Plan item and every Recommendation has
  non-blank text and non-empty references, all to existing Analysis ids;
- every tool call id resolves, through `run_id + tool_call_id`, to exactly one invocation of the
  current run, not abandoned, that is READY, has a non-empty `agent_result`, evidence status EVIDENCE_FOUND or
  NO_EVIDENCE, and a projection that parses strictly (`tool_projections.py`);
- a typed statement (docs/statements.md) cites refs of the tool calls its item rests on (an
  Analysis its own, a report item its Analyses'), each a raw_path the call's result has; the
  snapshot shows every ref a statement cites, each entry under an opaque evidence key;
- a NORMAL Analysis cites only EVIDENCE_FOUND calls, a NEGATIVE_OBSERVATION only NO_EVIDENCE
  calls (a negative observation is accepted as "this query found nothing", never as proof of
  health or of a root cause being excluded; the snapshot keeps its query scope to say so).
It then gets the snapshot: per Analysis id, one entry per cited invocation (`evidence_snapshot.py`).
A failing concluded Draft gets an empty snapshot: nothing of it is verified.

A Draft with `conclusion=null` has no structure requirement and is not rejected (`passed` is
true): Release handles it deterministically. Its references are still resolved and checked for
kind semantics; each one that fails is left out of the snapshot, listed in
`excluded_tool_call_ids` (an id is listed when it is excluded under at least one Analysis) and
explained in `violations`, so it can never be published as an observed fact. Analyses with no
verified evidence have no snapshot group.

Identifiers are compared exactly as written (`" a1"` is not `"a1"`; a whitespace-only id is
blank): the snapshot is keyed by the Draft's own analysis ids, so SemanticGuard and Release find
each group under the id the Draft shows, and fixing a mistyped id is EvidenceRepair's job.

A tool call id that no invocation of the current run has, but another run's has, is
`tool_ref.other_run` rather than `tool_ref.not_found`: the caller passes such rows, or (the
servicer, which loads only the current run) a lookup `other_run_tool_call_ids` asked once for the
ids cited and not found, which tells only which ids exist elsewhere, never their content.

Either way the snapshot holds no tool call id, no raw response (`agent_result` is parsed, never
copied) and no invocation the Draft does not cite. The guard never raises: an unreadable or
oversized Draft, or any defect in the guard, yields `passed=false` with an empty snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.gatekeeper.evidence_snapshot import SnapshotBuilder
from services.gatekeeper.tool_projections import ParsedProjection, parse_projection
from shared.core import guard_violations as codes
from shared.core.contracts import EVIDENCE_TOOLS, ToolInvocation
from shared.draft_contract import (
    AnalysisEvidence,
    Draft,
    EvidenceGuardResult,
    GuardViolation,
    SnapshotEvidence,
    VerifiedSnapshot,
    draft_statements,
    evidence_keys,
    statement_refs,
)

SUPPORTED_KINDS: frozenset[str] = frozenset({"NORMAL", "NEGATIVE_OBSERVATION"})
# The evidence status each kind may cite.
REQUIRED_STATUS: dict[str, str] = {"NORMAL": "EVIDENCE_FOUND", "NEGATIVE_OBSERVATION": "NO_EVIDENCE"}

# Size bounds of a Draft (DESIGN §6: list lengths and sizes are bounded).
MAX_ANALYSES = 100
MAX_TOOL_CALLS_PER_ANALYSIS = 50
MAX_ITEMS = 100  # action plan items, recommendations, limitations, missing context: each list
MAX_REFS_PER_ITEM = 100
MAX_TEXT_CHARS = 8000
MAX_ID_CHARS = 200
MAX_DETAIL_CHARS = 300


# Given tool call ids that no invocation of the current run has: those another run's invocation has.
OtherRunToolCallIds = Callable[[Collection[str]], Collection[str]]


@dataclass
class _Resolution:
    parsed: ParsedProjection | None = None
    code: str = ""
    detail: str = ""


@dataclass
class _Outcome:
    violations: list[GuardViolation] = field(default_factory=list)
    groups: dict[str, list[SnapshotEvidence]] = field(default_factory=dict)
    seen_in_group: dict[str, set[int]] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)

    def violate(self, code: str, detail: str = "", analysis_id: str = "", tool_call_id: str = "") -> None:
        self.violations.append(
            GuardViolation(
                code=code,
                analysis_id=analysis_id[:MAX_ID_CHARS],
                tool_call_id=tool_call_id[:MAX_ID_CHARS],
                detail=detail[:MAX_DETAIL_CHARS],
            )
        )

    def exclude(self, tool_call_id: str) -> None:
        if tool_call_id and tool_call_id not in self.excluded:
            self.excluded.append(tool_call_id[:MAX_ID_CHARS])


class _RunInvocations:
    """The run's invocations by tool_call_id; each referenced id is resolved and parsed once."""

    def __init__(self, run_id: str, invocations: Iterable[Any]) -> None:
        self._current: dict[str, list[ToolInvocation]] = {}
        self._other: set[str] = set()  # tool call ids that some other run's invocation has
        for item in invocations:
            invocation = item if isinstance(item, ToolInvocation) else _as_invocation(item)
            if invocation is None or not invocation.tool_call_id or invocation.abandoned:
                # An abandoned invocation (a lost executor attempt) is never resolved:
                # the retry may have reused its tool call id, which then names the retry's call.
                continue
            if run_id and invocation.run_id == run_id:
                self._current.setdefault(invocation.tool_call_id, []).append(invocation)
            else:
                self._other.add(invocation.tool_call_id)
        self._resolved: dict[str, _Resolution] = {}

    def learn_other_runs(self, cited: Iterable[str], lookup: OtherRunToolCallIds) -> None:
        """Ask `lookup` once which of the cited ids this run lacks exist in another run."""
        unknown = {tool_call_id for tool_call_id in cited if tool_call_id.strip()} - set(self._current) - self._other
        if unknown:
            self._other.update(tool_call_id for tool_call_id in lookup(sorted(unknown)) if tool_call_id in unknown)

    def resolve(self, tool_call_id: str) -> _Resolution:
        if tool_call_id not in self._resolved:
            self._resolved[tool_call_id] = self._resolve(tool_call_id)
        return self._resolved[tool_call_id]

    def _resolve(self, tool_call_id: str) -> _Resolution:
        rows = self._current.get(tool_call_id, [])
        if not rows:
            if tool_call_id in self._other:
                return _Resolution(code=codes.TOOL_REF_OTHER_RUN, detail="the tool call belongs to another run")
            return _Resolution(code=codes.TOOL_REF_NOT_FOUND, detail="no invocation of this run has this tool_call_id")
        if len(rows) > 1:
            return _Resolution(code=codes.TOOL_REF_AMBIGUOUS, detail=f"{len(rows)} invocations of this run share this tool_call_id")
        invocation = rows[0]
        if invocation.lifecycle != "READY":
            return _Resolution(code=codes.TOOL_REF_NOT_READY, detail=f"invocation {invocation.invocation_id} is {invocation.lifecycle}")
        if invocation.tool_name not in EVIDENCE_TOOLS:  # a helper (e.g. get_current_time) is no evidence
            return _Resolution(code=codes.PROJECTION_UNKNOWN_TOOL, detail=f"invocation {invocation.invocation_id}'s tool is not an evidence tool")
        if invocation.evidence_status not in REQUIRED_STATUS.values():
            return _Resolution(
                code=codes.TOOL_REF_EVIDENCE_STATUS,
                detail=f"invocation {invocation.invocation_id} has evidence_status {invocation.evidence_status}",
            )
        if not (invocation.agent_result or "").strip():
            return _Resolution(code=codes.TOOL_REF_AGENT_RESULT_MISSING, detail=f"invocation {invocation.invocation_id} has no agent_result")
        parsed, error = parse_projection(invocation)
        if error is not None:
            return _Resolution(code=error.code, detail=f"invocation {invocation.invocation_id}: {error.detail}")
        return _Resolution(parsed=parsed)


def _as_invocation(item: Any) -> ToolInvocation | None:
    try:
        return ToolInvocation.model_validate(item)
    except Exception:  # noqa: BLE001 — an unreadable row is no invocation: nothing can cite it
        return None


def _size_problem(draft: Draft) -> str:
    if len(draft.analyses) > MAX_ANALYSES:
        return f"{len(draft.analyses)} analyses, more than {MAX_ANALYSES}"
    for name in ("action_plan", "recommendations", "limitations", "missing_context"):
        if len(getattr(draft, name)) > MAX_ITEMS:
            return f"{name} has more than {MAX_ITEMS} items"
    texts: list[str] = [*draft.limitations, *draft.missing_context]
    for index, analysis in enumerate(draft.analyses):
        if len(analysis.tool_call_ids) > MAX_TOOL_CALLS_PER_ANALYSIS:
            return f"analyses[{index}] cites more than {MAX_TOOL_CALLS_PER_ANALYSIS} tool calls"
        if len(analysis.analysis_id) > MAX_ID_CHARS or any(len(t) > MAX_ID_CHARS for t in analysis.tool_call_ids):
            return f"analyses[{index}] has an id longer than {MAX_ID_CHARS} characters"
        texts.append(analysis.text)
    for where, item in _report_items(draft):
        if len(item.analysis_refs) > MAX_REFS_PER_ITEM:
            return f"{where} has more than {MAX_REFS_PER_ITEM} analysis_refs"
        if any(len(ref) > MAX_ID_CHARS for ref in item.analysis_refs):
            return f"{where} has a reference longer than {MAX_ID_CHARS} characters"
        texts.append(item.text)
    if any(len(text) > MAX_TEXT_CHARS for text in texts):
        return f"a text is longer than {MAX_TEXT_CHARS} characters"
    return ""


def _report_items(draft: Draft) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    if draft.conclusion is not None:
        items.append(("conclusion", draft.conclusion))
    items += [(f"action_plan[{i}]", item) for i, item in enumerate(draft.action_plan)]
    items += [(f"recommendations[{i}]", item) for i, item in enumerate(draft.recommendations)]
    return items


def _check_structure(draft: Draft, outcome: _Outcome) -> None:
    """Concluded Drafts only: ids, kinds, texts, tool call presence and report references."""
    known: set[str] = set()
    for index, analysis in enumerate(draft.analyses):
        where = f"analyses[{index}]"
        analysis_id = analysis.analysis_id
        if not analysis_id.strip():
            outcome.violate(codes.ANALYSIS_ID_BLANK, where)
        elif analysis_id in known:
            outcome.violate(codes.ANALYSIS_ID_DUPLICATE, where, analysis_id)
        else:
            known.add(analysis_id)
        if analysis.kind not in SUPPORTED_KINDS:
            outcome.violate(codes.ANALYSIS_KIND_UNSUPPORTED, f"{where} kind {analysis.kind}", analysis_id)
        if not analysis.text.strip():
            outcome.violate(codes.ANALYSIS_TEXT_BLANK, where, analysis_id)
        if not any(call.strip() for call in analysis.tool_call_ids):
            outcome.violate(codes.ANALYSIS_TOOL_CALLS_MISSING, where, analysis_id)
    _check_statement_calls(draft, outcome)
    for where, item in _report_items(draft):
        if not item.text.strip():
            outcome.violate(codes.REPORT_TEXT_BLANK, where)
        if not item.analysis_refs:
            outcome.violate(codes.REPORT_REFS_MISSING, where)
        for ref in item.analysis_refs:
            if ref not in known:
                detail = f"{where} references a blank analysis id" if not ref.strip() else f"{where} references an unknown analysis"
                outcome.violate(codes.REPORT_REF_UNKNOWN, detail, ref)


def _item_calls(draft: Draft) -> dict[str, set[str]]:
    """The tool calls each item may rest on: an Analysis its own, a report item its Analyses'."""
    own = {analysis.analysis_id: set(analysis.tool_call_ids) for analysis in draft.analyses}
    calls = {f"analyses[{i}]": set(a.tool_call_ids) for i, a in enumerate(draft.analyses)}
    for where, item in _report_items(draft):
        calls[where] = {call for ref in item.analysis_refs for call in own.get(ref, set())}
    return calls


def _check_statement_calls(draft: Draft, outcome: _Outcome) -> None:
    """A typed statement cites refs of the tool calls its item rests on, and of no other."""
    calls = _item_calls(draft)
    for where, statement in draft_statements(draft):
        for ref in statement_refs(statement):
            if ref.tool_call_id not in calls.get(where, set()):
                outcome.violate(codes.STATEMENT_REF_UNCITED, f"{where} cites a tool call its analyses do not",
                                tool_call_id=ref.tool_call_id)


def _cited_paths(draft: Draft) -> dict[str, list[str]]:
    """tool_call_id → the raw_paths typed statements cite of it, in order."""
    paths: dict[str, list[str]] = {}
    for _, statement in draft_statements(draft):
        for ref in statement_refs(statement):
            if ref.raw_path not in paths.setdefault(ref.tool_call_id, []):
                paths[ref.tool_call_id].append(ref.raw_path)
    return paths


def _check_references(draft: Draft, run: _RunInvocations, outcome: _Outcome, concluded: bool) -> None:
    """Every tool call of every Analysis: resolution, projection and kind semantics."""
    builder = SnapshotBuilder()
    keys = evidence_keys(draft)
    cited = _cited_paths(draft)
    missing_reported: set[tuple[str, str]] = set()
    for index, analysis in enumerate(draft.analyses):
        analysis_id = analysis.analysis_id
        kind = analysis.kind
        if kind not in SUPPORTED_KINDS and not concluded:
            # No structure requirement, but references whose meaning cannot be checked are excluded.
            outcome.violate(codes.ANALYSIS_KIND_UNSUPPORTED, f"analyses[{index}] kind {kind}: its references are excluded", analysis_id)
        seen: set[str] = set()
        for tool_call_id in analysis.tool_call_ids:
            if tool_call_id in seen:
                continue
            seen.add(tool_call_id)
            if not tool_call_id.strip():
                outcome.violate(codes.TOOL_REF_BLANK, f"analyses[{index}] has a blank tool call id", analysis_id)
                continue
            resolution = run.resolve(tool_call_id)
            if resolution.parsed is None:
                outcome.violate(resolution.code, resolution.detail, analysis_id, tool_call_id)
                outcome.exclude(tool_call_id)
                continue
            if kind not in SUPPORTED_KINDS:
                outcome.exclude(tool_call_id)  # reported above (concluded: by _check_structure)
                continue
            invocation = resolution.parsed.invocation
            if invocation.evidence_status != REQUIRED_STATUS[kind]:
                code = codes.KIND_NORMAL_WITHOUT_EVIDENCE if kind == "NORMAL" else codes.KIND_NEGATIVE_WITH_EVIDENCE
                outcome.violate(code, f"a {kind} analysis cites a {invocation.evidence_status} call", analysis_id, tool_call_id)
                outcome.exclude(tool_call_id)
                continue
            group_seen = outcome.seen_in_group.setdefault(analysis_id, set())
            if invocation.invocation_id in group_seen:
                continue
            group_seen.add(invocation.invocation_id)
            paths = cited.get(tool_call_id, [])
            known = {ref.raw_path for ref in resolution.parsed.scope_refs + resolution.parsed.item_refs}
            for path in paths:
                if path not in known and (tool_call_id, path) not in missing_reported:
                    missing_reported.add((tool_call_id, path))
                    outcome.violate(codes.STATEMENT_REF_NOT_FOUND, f"raw_path {path[:80]!r}", analysis_id, tool_call_id)
            entry = builder.entry(resolution.parsed, analysis.text, shown_paths=[p for p in paths if p in known])
            outcome.groups.setdefault(analysis_id, []).append(entry.model_copy(update={"evidence_key": keys[tool_call_id]}))


def _rejected(code: str, detail: str) -> EvidenceGuardResult:
    return EvidenceGuardResult(passed=False, violations=[GuardViolation(code=code, detail=detail[:MAX_DETAIL_CHARS])])


def _guard(
    run_id: str, draft: Draft, invocations: Iterable[Any], other_run_tool_call_ids: OtherRunToolCallIds | None
) -> EvidenceGuardResult:
    problem = _size_problem(draft)
    if problem:
        return _rejected(codes.DRAFT_TOO_LARGE, problem)
    concluded = draft.conclusion is not None
    outcome = _Outcome()
    if concluded:
        _check_structure(draft, outcome)
    run = _RunInvocations(run_id, invocations)
    if other_run_tool_call_ids is not None:
        run.learn_other_runs((t for a in draft.analyses for t in a.tool_call_ids), other_run_tool_call_ids)
    _check_references(draft, run, outcome, concluded)
    snapshot = VerifiedSnapshot(
        analyses=[AnalysisEvidence(analysis_id=key, evidence=items) for key, items in outcome.groups.items() if items]
    )
    if concluded:
        passed = not outcome.violations
        return EvidenceGuardResult(
            passed=passed,
            violations=outcome.violations,
            snapshot=snapshot if passed else VerifiedSnapshot(),
        )
    return EvidenceGuardResult(
        passed=True, violations=outcome.violations, snapshot=snapshot, excluded_tool_call_ids=outcome.excluded
    )


def guard_draft(
    run_id: str,
    draft: Draft | Mapping[str, Any],
    invocations: Iterable[ToolInvocation],
    other_run_tool_call_ids: OtherRunToolCallIds | None = None,
) -> EvidenceGuardResult:
    """Check one Draft of run `run_id` against the run's canonical invocations. Never raises.

    `invocations` are trusted rows (from the store); rows of other runs may be included and are
    never resolved. `other_run_tool_call_ids`, when given, is asked once which of the cited tool
    call ids the current run lacks exist in another run (reported as `tool_ref.other_run`).
    `draft` may also be the Draft's JSON object, validated here.
    """
    try:
        parsed = draft if isinstance(draft, Draft) else Draft.model_validate(draft)
    except Exception as exc:  # noqa: BLE001 — an unreadable Draft is a violation, not an error
        return _rejected(codes.DRAFT_INVALID, f"not a Draft: {type(exc).__name__}")
    try:
        return _guard(run_id if isinstance(run_id, str) else "", parsed, invocations or [], other_run_tool_call_ids)
    except Exception as exc:  # noqa: BLE001 — fail closed, never raise to the caller
        return _rejected(codes.GUARD_INTERNAL_ERROR, f"the guard could not check this Draft: {type(exc).__name__}")
