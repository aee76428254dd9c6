"""The answer as a structure, and the one renderer of its text.

Every answer — a composed verdict, a fallback, a single-ReAct release — is built as a
`StructuredAnswer` first and its text is `render(structured)`: `DiagnoseResponse.answer` and
`DiagnoseResponse.structured_answer` cannot disagree. Field names are the proto's
(`protos/attest/gateway/v1/answer.proto`), so `shared.proto_convert` converts it generically.

An item's citations are only ever what the gatekeeper verified: a claim's bindings as they stand in
the verified projection (they passed), or a single-ReAct snapshot's evidence. A metric citation's
series window is read from the stored tool result by the gateway (`gateway/answer_series.py`),
never from model text.

The template code builds its lines as `AnswerLine`s: a `str` (every check, bound and the model
composer read lines as text) that carries what the structure needs about it, so the structure is
built from the very lines that are rendered.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SectionKind = Literal[
    "CONFIDENCE", "CONCLUSION", "EVIDENCE", "HYPOTHESES", "GAPS", "ACTIONS", "LIMITS", "EXPLANATION",
    "CHECKED_SCOPE", "SERVICE_COVERAGE", "FAILED_CALLS", "SOURCES", "TIME_ZONE",
]
ItemBasis = Literal["CHECKED_CLAIM", "CHECKED_SIDE_TEXT", "GUARDED_DRAFT", "COMPOSED_REPHRASING", "OURS"]
OutcomeStatus = Literal["COMPLETED", "FALLBACK", "CANCELLED"]

CONFIDENCE_TITLE = "可信度"
# Every heading an answer renders, and what it holds. 说明 is EXPLANATION in a fallback and LIMITS
# under REJECT (`section_kind`).
SECTION_KINDS: dict[str, SectionKind] = {
    CONFIDENCE_TITLE: "CONFIDENCE",
    "结论": "CONCLUSION",
    "依据": "EVIDENCE",
    "已确认": "EVIDENCE",
    "分析": "EVIDENCE",
    "已完成的检查中观察到": "EVIDENCE",
    "可能方向": "HYPOTHESES",
    "证据缺口": "GAPS",
    "建议": "ACTIONS",
    "下一步": "ACTIONS",
    "下一步建议": "ACTIONS",
    "行动计划": "ACTIONS",
    "局限": "LIMITS",
    "说明": "EXPLANATION",
    "检查范围": "CHECKED_SCOPE",
    "服务范围": "SERVICE_COVERAGE",
    "查询失败": "FAILED_CALLS",
    "已核实的数据来源": "SOURCES",
    "时区": "TIME_ZONE",
}
# At most this many points of a series travel with a citation.
MAX_SERIES_POINTS = 60
MAX_CITATIONS = 10


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SeriesPoint(_Model):
    timestamp: str
    value: float


class SeriesWindow(_Model):
    metric: str = ""
    unit: str = ""
    points: list[SeriesPoint] = Field(default_factory=list)
    first_index: int = 0
    focus: int = -1
    truncated: bool = False


class Citation(_Model):
    invocation_id: int
    tool_name: str = ""
    raw_path: str = ""
    excerpt: str = ""
    series: SeriesWindow | None = None
    # The cited call's scope and kind of source in our words, from the store (the gateway fills them).
    scope: str = ""
    source: str = ""


class AnswerItem(_Model):
    text: str
    basis: ItemBasis | None = None
    # A claim check's class (shared.core.contracts.Verification), for CHECKED_CLAIM items.
    verification: str | None = None
    verification_label: str = ""
    citations: list[Citation] = Field(default_factory=list)
    citation_marker: str = ""


class AnswerSection(_Model):
    kind: SectionKind | None = None
    title: str
    items: list[AnswerItem] = Field(default_factory=list)
    plain: bool = False


class StructuredAnswer(_Model):
    direct_answer: str = ""
    sections: list[AnswerSection] = Field(default_factory=list)


class AnswerLine(str):
    """A line of an answer with what its item carries besides the text."""

    basis: ItemBasis
    verification: str | None
    label: str
    citations: tuple[Citation, ...]
    marker: str

    def __new__(cls, text: str, basis: ItemBasis = "OURS", *, verification: str | None = None, label: str = "",
                citations: tuple[Citation, ...] | list[Citation] = (), marker: str = "") -> AnswerLine:
        line = super().__new__(cls, text)
        line.basis = basis
        line.verification = verification
        line.label = label
        line.citations = tuple(citations)[:MAX_CITATIONS]
        line.marker = marker
        return line


def item_of(line: str, basis: ItemBasis | None = "OURS") -> AnswerItem:
    """The item of one rendered line: an `AnswerLine`'s own data; a plain str is `basis`."""
    if isinstance(line, AnswerLine):
        return AnswerItem(text=str(line), basis=line.basis, verification=line.verification,
                          verification_label=line.label, citations=list(line.citations), citation_marker=line.marker)
    return AnswerItem(text=str(line), basis=basis)


def section_kind(title: str, *, fallback: bool = False) -> SectionKind | None:
    """The kind of a heading; 说明 outside a fallback (the REJECT layout) states the answer's limits."""
    if title == "说明" and not fallback:
        return "LIMITS"
    return SECTION_KINDS.get(title)


def section(title: str, lines: list[str], *, fallback: bool = False, plain: bool = False,
            basis: ItemBasis | None = "OURS") -> AnswerSection:
    return AnswerSection(kind=section_kind(title, fallback=fallback), title=title,
                         items=[item_of(line, basis) for line in lines], plain=plain)


def render(answer: StructuredAnswer) -> str:
    """The answer text: the confidence line first, then each non-empty section as 【title】 and its
    items (bulleted unless the section is plain), sections separated by an empty line."""
    out: list[str] = []
    for part in answer.sections:
        if not part.items:
            continue
        if part.kind == "CONFIDENCE":
            out[:0] = [item.text for item in part.items]
            continue
        out.append("")
        out.append(f"【{part.title}】")
        out.extend(item.text if part.plain else f"- {item.text}" for item in part.items)
    return "\n".join(out).strip()


# --- the outcome ----------------------------------------------------------------------------------

# Fallbacks after which asking the same question again will not help: the question must change, or
# the same evidence checks the same way. The README's "Outcome types" table, column "retry?".
_FINAL_TYPES = frozenset({
    "MISSING_REQUIRED_CONTEXT", "UNKNOWN_SERVICE", "SEMANTIC_UNSUPPORTED", "INSUFFICIENT_EVIDENCE",
    "EVIDENCE_VALIDATION_FAILED",
})
# Causes (shared.core.contracts.FallbackCause) after which it may: a role, model or backend failed or
# timed out or a replica was lost; an output a new attempt may get right; no claim left to verify.
_RETRYABLE_CAUSES = frozenset({"TECHNICAL_FAILURE", "INVALID_OUTPUT", "NO_VERIFIED_CLAIM"})


def retryable(status: str, fallback_type: str | None, fallback_cause: str | None, failed_calls: int = 0) -> bool:
    """`DiagnoseResponse.retryable`: whether asking the same question again may help.

    1. CANCELLED: yes (the caller stopped it; nothing was decided).
    2. A fallback with a cause: TECHNICAL_FAILURE, INVALID_OUTPUT, NO_VERIFIED_CLAIM yes;
       CITATION_CHECK_FAILED no (the answer says so: the same evidence checks the same way).
    3. A fallback without one, by type: MISSING_REQUIRED_CONTEXT, UNKNOWN_SERVICE,
       SEMANTIC_UNSUPPORTED, INSUFFICIENT_EVIDENCE, EVIDENCE_VALIDATION_FAILED no; every other
       (PRE_VERIFICATION, SEMANTIC_UNAVAILABLE, AGENT_UNAVAILABLE, GUARD_UNAVAILABLE,
       NO_VERIFIED_PROGRESS, RUN_INTERRUPTED) yes.
    4. An answer (a verdict, a released Draft): only while an evidence call of the run failed and
       no later round recovered it (`failed_calls` open): the answer itself says to diagnose again
       once the backend is reachable. A verified answer is otherwise final.
    """
    if status == "CANCELLED":
        return True
    if status == "FALLBACK" or fallback_type:
        if fallback_cause:
            return fallback_cause in _RETRYABLE_CAUSES
        return fallback_type not in _FINAL_TYPES
    return failed_calls > 0
