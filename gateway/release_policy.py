"""Fail-closed release for single-ReAct mode (single-react-evidence-semantic-guards.md).

The unchanged Draft is released only when it has a conclusion, passes EvidenceGuard (directly, or
after exactly one semantics-preserving EvidenceRepair) and SemanticGuard says SUPPORTED. Every
other path releases a typed SafeFallback built from fixed templates; a fallback never carries the
Draft, the full verified snapshot, internal counters or the guard's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.core.contracts import ComposerInput, FailedCall, ServiceCoverage, VerifiedSource
from shared.core.templates import COVERAGE_SECTION, FAILED_SECTION, compose_answer, coverage_lines, source_lines
from shared.draft_contract import Draft, EvidenceGuardResult
from shared.failed_calls import failed_call_line, open_failures

MAX_SOURCES = 8
MAX_FACTS = 8
KIND_LABELS = {"NORMAL": "观察", "NEGATIVE_OBSERVATION": "未发现"}


@dataclass
class SafeFallback:
    fallback_type: str
    message: str
    verified_sources: list[str] = field(default_factory=list)
    observed_facts: list[str] = field(default_factory=list)


@dataclass
class Release:
    outcome: str  # SUCCESS | FALLBACK
    draft: Draft | None = None
    fallback: SafeFallback | None = None
    # Which named services were checked (issue 14); the answer names the others in our words.
    coverage: ServiceCoverage | None = None
    # The run's failed evidence calls (issue 16, point 4), from the store; named by lines of ours.
    failed_calls: list[FailedCall] = field(default_factory=list)

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
             coverage: ServiceCoverage | None = None) -> Release:
    """A typed SafeFallback; `cause` and `failed_rules` choose our text (what happened, whether a
    retry helps), `coverage` names the services the question named but that were not checked."""
    message = compose_answer(ComposerInput(
        query="", fallback_type=fallback_type, fallback_cause=cause, failed_rules=list(failed_rules or []),
        service_coverage=coverage,
    )).answer
    return Release(outcome="FALLBACK", coverage=coverage, fallback=SafeFallback(
        fallback_type=fallback_type,
        message=message,
        verified_sources=list(sources or [])[:MAX_SOURCES],
        observed_facts=list(facts or [])[:MAX_FACTS],
    ))


def success(draft: Draft, coverage: ServiceCoverage | None = None) -> Release:
    return Release(outcome="SUCCESS", draft=draft, coverage=coverage)


def render_release(release: Release) -> str:
    """The user-facing text. SUCCESS lays out the Draft's own sentences unchanged, in order."""
    failed = [f"- {failed_call_line(call)}" for call in release.failed_calls[:MAX_SOURCES]]
    if release.fallback is not None:
        lines = [release.fallback.message]
        if failed:
            lines += ["", f"【{FAILED_SECTION}】"] + failed
        if release.fallback.observed_facts:
            lines += ["", "【已完成的检查中观察到】"] + [f"- {fact}" for fact in release.fallback.observed_facts]
        if release.fallback.verified_sources:
            lines += ["", "【已核实的数据来源】"] + [f"- {source}" for source in release.fallback.verified_sources]
        return "\n".join(lines)
    draft = release.draft
    assert draft is not None and draft.conclusion is not None
    # The Draft is released unchanged; which named services it does not cover is our own line.
    coverage = coverage_lines(release.coverage)
    partial = "（只覆盖已检查的服务）" if coverage else ""
    if open_failures(release.failed_calls):
        partial += "（部分查询失败，结论不涵盖失败的查询）"
    lines = ["可信度：已通过证据与语义双重校验" + partial, "", "【结论】", draft.conclusion.text]
    if failed:
        lines += ["", f"【{FAILED_SECTION}】"] + failed
    if coverage:
        lines += ["", f"【{COVERAGE_SECTION}】"] + [f"- {line}" for line in coverage]
    lines += ["", "【分析】"]
    lines += [f"- [{analysis.analysis_id}] {KIND_LABELS.get(analysis.kind or '', '')}：{analysis.text}"
              for analysis in draft.analyses]
    if draft.action_plan:
        lines += ["", "【行动计划】"] + [
            f"- {item.text}" + ("（需人工确认）" if item.requires_human_confirmation else "")
            for item in draft.action_plan
        ]
    if draft.recommendations:
        lines += ["", "【建议】"] + [f"- {item.text}" for item in draft.recommendations]
    if draft.limitations:
        lines += ["", "【局限】"] + [f"- {text}" for text in draft.limitations]
    return "\n".join(lines)
