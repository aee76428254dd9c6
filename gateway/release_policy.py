"""Fail-closed release for single-ReAct mode (single-react-evidence-semantic-guards.md).

The unchanged Draft is released only when it has a conclusion, passes EvidenceGuard (directly, or
after exactly one semantics-preserving EvidenceRepair) and SemanticGuard says SUPPORTED. Every
other path releases a typed SafeFallback built from fixed templates; a fallback never carries the
Draft, the full verified snapshot, internal counters or the guard's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.core.contracts import ComposerInput, EmptyScope, FailedCall, ServiceCoverage, VerifiedSource
from shared.core.structured_answer import AnswerLine, Citation, StructuredAnswer, render, section
from shared.core.templates import (
    COVERAGE_SECTION,
    FAILED_SECTION,
    SOURCES_SECTION,
    compose_answer,
    coverage_lines,
    source_lines,
)
from shared.draft_contract import Draft, EvidenceGuardResult, VerifiedSnapshot
from shared.failed_calls import failed_call_line, open_failures

MAX_SOURCES = 8
MAX_FACTS = 8
KIND_LABELS = {"NORMAL": "观察", "NEGATIVE_OBSERVATION": "未发现"}
OBSERVED_SECTION = "已完成的检查中观察到"
CONFIRM_NOTE = "需人工确认"


@dataclass
class SafeFallback:
    fallback_type: str
    message: str
    # What `message` renders: the fixed template's structure.
    structure: StructuredAnswer = field(default_factory=StructuredAnswer)
    # The cause that chose the text (FallbackCause), when one did.
    cause: str | None = None
    verified_sources: list[str] = field(default_factory=list)
    observed_facts: list[str] = field(default_factory=list)


@dataclass
class Release:
    outcome: str  # SUCCESS | FALLBACK
    draft: Draft | None = None
    fallback: SafeFallback | None = None
    # Which named services were checked; the answer names the others in our words.
    coverage: ServiceCoverage | None = None
    # The run's failed evidence calls, from the store; named by lines of ours.
    failed_calls: list[FailedCall] = field(default_factory=list)
    # SUCCESS: EvidenceGuard's verified snapshot of the released Draft (the citations' excerpts).
    snapshot: VerifiedSnapshot | None = None
    # The window most of the run's calls covered, as 【检查范围】 writes it (a triage's 【服务范围】 says it).
    window: str = ""

    @property
    def fallback_type(self) -> str | None:
        return self.fallback.fallback_type if self.fallback else None


def verified_tool_call_ids(draft: Draft, guard: EvidenceGuardResult) -> list[str]:
    """The tool calls the Draft cites that the guard verified (its snapshot's evidence): every
    cited id but those it kept out."""
    excluded = set(guard.excluded_tool_call_ids)
    cited = (call_id for analysis in draft.analyses for call_id in analysis.tool_call_ids)
    return [call_id for call_id in dict.fromkeys(cited) if call_id not in excluded]


def verified_sources(sources: list[VerifiedSource]) -> list[str]:
    """Where the verified evidence came from, in the words of the multi-agent answer's section:
    tool, invocation id, the scope of the persisted request and the kind of source (never content,
    never the request's raw text). The demo note is left to the released answer's 【检查范围】."""
    return source_lines(ComposerInput(query="", verified_sources=sources[:MAX_SOURCES]), demo_note_line=False)


def fallback(fallback_type: str, *, sources: list[str] | None = None, facts: list[str] | None = None,
             cause: str | None = None, failed_rules: list[str] | None = None,
             coverage: ServiceCoverage | None = None, empty: list[EmptyScope] | None = None) -> Release:
    """A typed SafeFallback; `cause` and `failed_rules` choose our text (what happened, whether a
    retry helps), `coverage` names the services the question named but that were not checked;
    `empty` (INSUFFICIENT_EVIDENCE) the checked scopes that had no data."""
    composed = compose_answer(ComposerInput(
        query="", fallback_type=fallback_type, fallback_cause=cause, failed_rules=list(failed_rules or []),
        service_coverage=coverage, empty_scopes=list(empty or []),
    ))
    return Release(outcome="FALLBACK", coverage=coverage, fallback=SafeFallback(
        fallback_type=fallback_type,
        message=composed.answer,
        structure=composed.structured_answer or StructuredAnswer(),
        cause=cause,
        verified_sources=list(sources or [])[:MAX_SOURCES],
        observed_facts=list(facts or [])[:MAX_FACTS],
    ))


# The fallback type of an outage of each role single-ReAct calls (the spec keeps
# EVIDENCE_VALIDATION_FAILED for a failed repair or a second EvidenceGuard rejection).
UNAVAILABLE_ROLE_FALLBACK = {
    "executor": "AGENT_UNAVAILABLE",  # the agent, or its one EvidenceRepair
    "gatekeeper": "GUARD_UNAVAILABLE",  # EvidenceGuard
    "verifier": "SEMANTIC_UNAVAILABLE",  # SemanticGuard
}


def unavailable_fallback(node: str) -> str:
    """The fallback type when the role `node` could not be reached or failed."""
    return UNAVAILABLE_ROLE_FALLBACK.get(node, "AGENT_UNAVAILABLE")


def future_window_fallback(answer: StructuredAnswer) -> Release:
    """MISSING_REQUIRED_CONTEXT for a window wholly in the future: `answer` names the window
    (`templates.future_window_answer`)."""
    return Release(outcome="FALLBACK", fallback=SafeFallback(
        fallback_type="MISSING_REQUIRED_CONTEXT", message=render(answer), structure=answer))


def success(draft: Draft, coverage: ServiceCoverage | None = None, snapshot: VerifiedSnapshot | None = None) -> Release:
    return Release(outcome="SUCCESS", draft=draft, coverage=coverage, snapshot=snapshot)


def release_structure(release: Release, citations: dict[str, list[Citation]] | None = None) -> StructuredAnswer:
    """The user-facing answer as a structure (its text is `structured_answer.render` of it).
    SUCCESS lays out the Draft's own sentences unchanged, in order; `citations` gives each Analysis'
    verified citations (`gateway/answer_structure.py:release_citations`), and the conclusion, an
    action or a recommendation carries those of the Analyses it refers to."""
    failed = [failed_call_line(call) for call in release.failed_calls[:MAX_SOURCES]]
    if release.fallback is not None:
        base = release.fallback.structure
        parts = list(base.sections)
        if failed:
            parts.append(section(FAILED_SECTION, failed, fallback=True))
        if release.fallback.observed_facts:
            # The executor's observed facts of its verified checks.
            parts.append(section(OBSERVED_SECTION, release.fallback.observed_facts, fallback=True, basis=None))
        if release.fallback.verified_sources:
            parts.append(section(SOURCES_SECTION, release.fallback.verified_sources, fallback=True))
        return StructuredAnswer(direct_answer=base.direct_answer, sections=parts)
    draft = release.draft
    assert draft is not None and draft.conclusion is not None
    cited = citations or {}

    def guarded(text: str, refs: list[str], label: str = "") -> AnswerLine:
        found = [c for ref in dict.fromkeys(refs) for c in cited.get(ref, [])]
        return AnswerLine(text, "GUARDED_DRAFT", label=label, citations=found)

    # The Draft is released unchanged; which named services it does not cover is our own line.
    coverage = coverage_lines(release.coverage, release.window)
    partial = "（只覆盖已检查的服务）" if coverage else ""
    if open_failures(release.failed_calls):
        partial += "（部分查询失败，结论不涵盖失败的查询）"
    # A line of the conclusion a line of the layout (the answer, another part's, what else was found).
    conclusion: list[str] = [guarded(line, draft.conclusion.analysis_refs) for line in draft.conclusion.text.split("\n") if line.strip()]
    parts = [
        section("可信度", ["可信度：已通过证据与语义双重校验" + partial], plain=True),
        section("结论", conclusion, plain=True),
    ]
    if failed:
        parts.append(section(FAILED_SECTION, failed))
    if coverage:
        parts.append(section(COVERAGE_SECTION, coverage))
    parts.append(section("分析", [
        guarded(f"[{analysis.analysis_id}] {KIND_LABELS.get(analysis.kind or '', '')}：{analysis.text}", [analysis.analysis_id])
        for analysis in draft.analyses
    ]))
    parts.append(section("行动计划", [
        guarded(item.text + (f"（{CONFIRM_NOTE}）" if item.requires_human_confirmation else ""), item.analysis_refs,
                CONFIRM_NOTE if item.requires_human_confirmation else "")
        for item in draft.action_plan
    ]))
    parts.append(section("建议", [guarded(item.text, item.analysis_refs) for item in draft.recommendations]))
    parts.append(section("局限", [AnswerLine(text, "GUARDED_DRAFT") for text in draft.limitations]))
    # The Draft is released whole: what the question lacks is user-visible too.
    parts.append(section("证据缺口", [AnswerLine(text, "GUARDED_DRAFT") for text in draft.missing_context]))
    return StructuredAnswer(direct_answer=draft.conclusion.text, sections=[p for p in parts if p.items])

