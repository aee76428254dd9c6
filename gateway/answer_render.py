"""How `attest ask` lays out an answer for a person at a terminal.

From the structured answer (`answer.proto`), never by reading the answer's text back:

- The question, the notes the run's progress left that the answer does not repeat (a follow-up
  says what it took over from the session's last run), then one confidence line: the answer's own words for its confidence, the verdict
  and the evidence score together, or the fallback with whether asking again can help.
- Each section as 【title】 and its items, wrapped to the terminal's width (`terminal_text.wrap`:
  at spaces and between CJK characters, never inside an id, a path or a timestamp) with a hanging
  indent under the bullet.
- Citations as footnotes (the default): an item's inline `[证据: …]` marker becomes `[1][2]`, one
  number per cited tool call, and 【引用来源】 at the end lists each call — tool, invocation id,
  its scope, the kind of source it read and the places cited in its result. `inline` keeps the
  marker in the text as the gateway rendered it.
- A metric citation's series on its own labelled line under the item (`gateway/sparkline.py`),
  once per series.
- The run's ids last, one to a line, so each can be copied whole.

An answer from a gateway that sent no structure is printed as its text, wrapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.text import Text

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2
from gateway.sparkline import series_line
from gateway.terminal_text import printable, wrap
from shared.proto_convert import spec_value

CITE_FOOTNOTES = "footnotes"
CITE_INLINE = "inline"
CITE_STYLES = (CITE_FOOTNOTES, CITE_INLINE)
SOURCES_TITLE = "引用来源"
# Progress events whose message stays above the answer: what a follow-up took over from the
# session's last run is said nowhere else.
KEPT_EVENTS = frozenset({"PLANNER_FOLLOW_UP"})
# At most this many cited places of one call are listed under its footnote.
MAX_PLACES = 4
RULE_WIDTH = 40

VERDICT_LABELS = {"PASS": "PASS（证据充分）", "LOW_CONFID": "LOW_CONFID（证据不足，结论待确认）",
                  "REJECT": "REJECT（证据不支持可靠结论）"}
VERDICT_WORDS = {"PASS": "高", "LOW_CONFID": "中", "REJECT": "低"}
FALLBACK_LABELS = {
    "PRE_VERIFICATION": "PRE_VERIFICATION（核验前回退）",
    "EVIDENCE_VALIDATION_FAILED": "EVIDENCE_VALIDATION_FAILED（证据引用未通过核验）",
    "SEMANTIC_UNSUPPORTED": "SEMANTIC_UNSUPPORTED（结论未得到证据支持）",
    "SEMANTIC_UNAVAILABLE": "SEMANTIC_UNAVAILABLE（语义核验不可用）",
    "MISSING_REQUIRED_CONTEXT": "MISSING_REQUIRED_CONTEXT（缺少服务名称等必要信息）",
    "INSUFFICIENT_EVIDENCE": "INSUFFICIENT_EVIDENCE（证据不足以得出结论）",
    "UNKNOWN_SERVICE": "UNKNOWN_SERVICE（没有找到所问的服务）",
    "AGENT_UNAVAILABLE": "AGENT_UNAVAILABLE（诊断模型不可用，未完成任何检查）",
    "NO_VERIFIED_PROGRESS": "NO_VERIFIED_PROGRESS（停止前没有经核验的检查结果）",
    "RUN_INTERRUPTED": "RUN_INTERRUPTED（诊断被中断，可重新提问）",
    "GUARD_UNAVAILABLE": "GUARD_UNAVAILABLE（证据核验服务不可用）",
}


def is_fallback(response: gateway_pb2.DiagnoseResponse) -> bool:
    """Whether the run ended in a typed fallback rather than an answer, by any of the fields that
    say so (a fallback type, the outcome status, the release outcome)."""
    return (response.fallback_type != enums_pb2.FALLBACK_TYPE_UNSPECIFIED
            or response.outcome_status == answer_pb2.OUTCOME_STATUS_FALLBACK
            or response.release_outcome == enums_pb2.RELEASE_OUTCOME_FALLBACK
            or response.status == "FALLBACK")


def confidence_line(response: gateway_pb2.DiagnoseResponse) -> str:
    """The one line that says how far the answer can be trusted."""
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)
    if is_fallback(response):
        fallback = spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type)
        label = FALLBACK_LABELS.get(fallback or "", fallback or "")
        retry = "可重新提问" if response.retryable else "原样重问不会改变结果"
        return f"可信度：无（安全回退{'：' + label if label else ''}） · {retry}"
    own = [printable(item.text, one_line=True) for section in response.structured_answer.sections
           if section.kind == answer_pb2.SECTION_KIND_CONFIDENCE for item in section.items]
    if verdict is None:  # a released single-ReAct Draft: no verdict of the graph's
        return " · ".join([*own[:1], "已通过证据核验发布（SUCCESS）"])
    # The answer's own words say what the verdict means; without them, our label does.
    parts = [own[0], verdict] if own else [f"可信度：{VERDICT_WORDS.get(verdict, verdict)}", VERDICT_LABELS.get(verdict, verdict)]
    # A score is shown where the verifier scored: a PASS without one was not scored, not ungrounded.
    if verdict != "PASS" or response.groundedness_score > 0:
        parts.append(f"证据支持度 {response.groundedness_score:.2f}")
    return " · ".join(parts)


@dataclass
class Footnote:
    number: int
    tool_name: str
    invocation_id: int
    scope: str
    source: str
    places: list[str] = field(default_factory=list)


@dataclass
class Footnotes:
    """One number per cited tool call, in the order the answer first cites it."""

    by_call: dict[int, Footnote] = field(default_factory=dict)

    def markers(self, citations: list[answer_pb2.Citation]) -> str:
        numbers: list[int] = []
        for citation in citations:
            note = self.by_call.get(citation.invocation_id)
            if note is None:
                note = Footnote(len(self.by_call) + 1, citation.tool_name, citation.invocation_id,
                                citation.scope, citation.source)
                self.by_call[citation.invocation_id] = note
            if citation.raw_path and citation.raw_path not in note.places:
                note.places.append(citation.raw_path)
            if note.number not in numbers:
                numbers.append(note.number)
        return "".join(f"[{number}]" for number in numbers)

    def entry(self, note: Footnote) -> str:
        places = "、".join(note.places[:MAX_PLACES]) + (f" 等 {len(note.places)} 处" if len(note.places) > MAX_PLACES else "")
        parts = [f"[{note.number}] {note.tool_name} #{note.invocation_id}", note.scope,
                 f"来源 {note.source}" if note.source else "", f"位置 {places}" if places else ""]
        return " · ".join(printable(part, one_line=True) for part in parts if part)


def _item_text(item: answer_pb2.AnswerItem, notes: Footnotes | None) -> str:
    """The item's text; with footnotes, its inline marker replaced by the calls' numbers."""
    if notes is None or not item.citations:
        return item.text
    text = item.text.replace(item.citation_marker, "") if item.citation_marker else item.text
    return text.rstrip() + notes.markers(list(item.citations))


def answer_lines(response: gateway_pb2.DiagnoseResponse, query: str, width: int | None,
                 cite: str = CITE_FOOTNOTES, notes_kept: Sequence[str] = ()) -> list[Text]:
    """The whole printout of one answer, each line at most `width` cells (None: unwrapped)."""
    out = [Text(line, style="bold") for line in wrap(printable(query, one_line=True), width, "问：", "    ")]
    out += [Text(line, style="dim") for note in notes_kept for line in wrap(printable(note, one_line=True), width, "", "  ")]
    out.append(Text("─" * min(width or RULE_WIDTH, RULE_WIDTH * 2), style="dim"))
    out += [Text(line, style="bold") for line in wrap(confidence_line(response), width, "", "  ")]
    notes = Footnotes() if cite == CITE_FOOTNOTES else None
    drawn: set[tuple[int, str]] = set()
    sections = [s for s in response.structured_answer.sections if s.items and s.kind != answer_pb2.SECTION_KIND_CONFIDENCE]
    for section in sections:
        out += [Text(""), Text(f"【{printable(section.title, one_line=True)}】", style="bold")]
        for item in section.items:
            text = printable(_item_text(item, notes), one_line=True)
            out += [Text(line) for line in (wrap(text, width) if section.plain else wrap(text, width, "- ", "  "))]
            for citation in item.citations:
                key = (citation.invocation_id, citation.series.metric)
                if citation.HasField("series") and citation.series.points and key not in drawn:
                    drawn.add(key)
                    out += [Text(line, style="cyan") for line in wrap(series_line(citation.series, width and width - 2), width, "  ", "    ")]
    if not response.structured_answer.sections:
        out.append(Text(""))
        for raw in response.answer.splitlines():
            line = printable(raw, one_line=True)
            out += [Text(part) for part in wrap(line, width, "", "  " if line.startswith("- ") else "")]
    if notes is not None and notes.by_call:
        out += [Text(""), Text(f"【{SOURCES_TITLE}】", style="bold")]
        for note in notes.by_call.values():
            out += [Text(line, style="dim") for line in wrap(notes.entry(note), width, "", "    ")]
    return out + [Text("")] + [Text(line, style="dim") for raw in run_ids(response) for line in wrap(raw, width, "", "  ")]


def run_ids(response: gateway_pb2.DiagnoseResponse) -> list[str]:
    """The run's ids, one to a line, and how to ask a follow-up."""
    session = printable(response.session_id, one_line=True)
    return [f"run id: {printable(response.run_id, one_line=True)} · rounds: {response.rounds}",
            f"trace id: {printable(response.trace_id, one_line=True) or '-'}",
            f"session id: {session}",
            f"追问：attest ask --session {session} \"…\""]
