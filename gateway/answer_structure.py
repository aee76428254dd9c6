"""The gateway's part of the structured answer: what only the run's store knows,
and the display step.

- `release_citations`: a released single-ReAct Draft's Analyses cite tool calls; each cited call
  the store holds for this run (not abandoned) becomes a citation carrying the excerpt EvidenceGuard
  put in the verified snapshot for that Analysis (a call with no snapshot entry is not cited).
- `checked_citations`: every citation keeps only invocations of this run (fail closed: the
  gatekeeper verified them already) and a metric citation gets its series window from the stored
  result (`shared/core/series_window.py`), never from model text. Each citation names the scope of
  the cited call and the kind of source it read, from the stored request and result, as
  【检查范围】 does: a client lists its sources without reading the answer's text back.
- `localized`: the display step on the structure (`shared/local_time.py`): every item's text and
  every citation's scope show times in the configured zone, and a 【时区】 section names it when a
  time was shown. Citations' excerpts and series keep UTC, as verified and as stored. The answer
  text is rendered from the result, so text and structure agree after the display step too.
"""

from __future__ import annotations

from shared.call_scope import call_scope, unexamined_series
from shared.core.contracts import ToolInvocation
from shared.core.series_window import series_window
from shared.core.structured_answer import AnswerItem, AnswerSection, Citation, SeriesWindow, StructuredAnswer
from shared.core.tool_catalogue import QUERY_METRICS
from shared.core.tool_results import read_result
from shared.draft_contract import Draft, VerifiedSnapshot
from shared.evidence_source import invocation_source_kind, source_label
from shared.local_time import ZONE_SECTION, LocalTimeDisplay


def _citable(invocations: list[ToolInvocation]) -> dict[int, ToolInvocation]:
    return {i.invocation_id: i for i in invocations if not i.abandoned}


def release_citations(draft: Draft, snapshot: VerifiedSnapshot, invocations: list[ToolInvocation]) -> dict[str, list[Citation]]:
    """Analysis id -> the citations of the calls it cites, in its order, with the verified excerpt."""
    by_call = {i.tool_call_id: i for i in invocations if i.tool_call_id and not i.abandoned}
    evidence = {entry.analysis_id: list(entry.evidence) for entry in snapshot.analyses}
    cited: dict[str, list[Citation]] = {}
    for analysis in draft.analyses:
        unused = evidence.get(analysis.analysis_id, [])
        seen: set[int] = set()
        out: list[Citation] = []
        for call_id in analysis.tool_call_ids:
            invocation = by_call.get(call_id)
            if invocation is None or invocation.invocation_id in seen:
                continue
            seen.add(invocation.invocation_id)
            # EvidenceGuard lists an Analysis' verified calls in its citing order, one per invocation.
            match = next((k for k, entry in enumerate(unused) if entry.tool_name == invocation.tool_name), None)
            if match is None:
                continue
            entry = unused.pop(match)
            out.append(Citation(invocation_id=invocation.invocation_id, tool_name=invocation.tool_name,
                                excerpt=entry.excerpt))
        cited[analysis.analysis_id] = out
    return cited


def checked_citations(answer: StructuredAnswer, invocations: list[ToolInvocation] | None) -> StructuredAnswer:
    """Citations of this run's invocations only, metric ones with their series window. Without the
    store (`None`) no citation can be checked: none is kept."""
    known = _citable(invocations or [])
    windows: dict[tuple[int, str], SeriesWindow | None] = {}  # items often cite the same series
    sources: dict[int, tuple[str, str]] = {}  # and the same call

    def described(invocation: ToolInvocation) -> tuple[str, str]:
        if invocation.invocation_id not in sources:
            sources[invocation.invocation_id] = (
                call_scope(invocation.request, unexamined_series(invocation.agent_result)),
                source_label(invocation_source_kind(invocation) or "", short=True))
        return sources[invocation.invocation_id]

    def check(citation: Citation) -> Citation | None:
        invocation = known.get(citation.invocation_id)
        if invocation is None or invocation.tool_name != citation.tool_name:
            return None
        series = None
        if citation.tool_name == QUERY_METRICS:
            key = (invocation.invocation_id, citation.raw_path)
            if key not in windows:
                windows[key] = series_window(read_result(invocation.tool_name, invocation.agent_result), citation.raw_path)
            series = windows[key]
        scope, source = described(invocation)
        return citation.model_copy(update={"series": series, "scope": scope, "source": source})

    sections = []
    for part in answer.sections:
        items = []
        for item in part.items:
            kept = [c for c in (check(c) for c in item.citations) if c is not None]
            items.append(item.model_copy(update={"citations": kept}))
        sections.append(part.model_copy(update={"items": items}))
    return answer.model_copy(update={"sections": sections})


def localized(answer: StructuredAnswer, display: LocalTimeDisplay) -> StructuredAnswer:
    """The display step on every item's text; the zone named in a last 【时区】 section when a
    time was shown (as `LocalTimeDisplay.localize_answer` does on a text)."""
    offsets: list[str] = []
    quoted = False
    rewritten = 0

    def show(text: str) -> str:
        nonlocal quoted, rewritten
        result = display.localize(text)
        rewritten += result.rewritten
        quoted = quoted or result.quoted_times
        offsets.extend(o for o in result.offsets if o not in offsets)
        return result.text

    def shown(item: AnswerItem) -> AnswerItem:
        citations = [c.model_copy(update={"scope": show(c.scope)}) if c.scope else c for c in item.citations]
        return item.model_copy(update={"text": show(item.text), "citations": citations})

    sections = [part.model_copy(update={"items": [shown(item) for item in part.items]}) for part in answer.sections]
    direct = display.localize(answer.direct_answer).text
    if rewritten:
        note = display.zone_note(tuple(offsets), quoted)
        sections.append(AnswerSection(kind="TIME_ZONE", title=ZONE_SECTION, items=[AnswerItem(text=note, basis="OURS")]))
    return StructuredAnswer(direct_answer=direct, sections=sections)
