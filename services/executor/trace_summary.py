"""tool_trace_summary (stage3 spec): one bounded entry per evidence-bearing invocation.

Used for audit, trace inspection and the retry planner; the Verifier never receives it (graph
spec). Stage3 requirements implemented here:

- "only evidence-bearing tools included": helper tools (get_current_time) never appear;
- "failed evidence calls preserved as evidence gaps": ERROR and NO_EVIDENCE calls stay, marked
  unsuccessful; a deduped `lookup_knowledge` result is marked `NO_NEW_EVIDENCE`;
- "Verifier evidence summaries SHALL preserve concrete supporting facts" and "Summary remains
  bounded": the refs' own texts, most telling first (`evidence_salience`), lines of one template
  folded into one fact with a count, then boilerplate, under a byte bound per entry and overall;
- "repeated tool calls may be compacted": calls of one tool on one topic within one round become
  one entry that keeps the first effective hit and the counts, and lists every invocation id.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from services.executor.evidence_salience import rank_refs
from shared.core.contracts import EVIDENCE_TOOLS, ToolInvocation, ToolTraceSummaryEntry
from shared.core.evidence_view import evidence_view
from shared.core.tool_catalogue import QUERY_METRICS
from shared.core.tool_results import ToolResultData, point_values, read_result

MAX_ENTRY_OUTPUT_BYTES = 1200
MAX_INPUT_BYTES = 300
MAX_FACT_BYTES = 360
MIN_ENTRY_OUTPUT_BYTES = 160
# Overall bound on the summaries' text (input + output) of all entries together. Each entry keeps
# at least MIN_ENTRY_OUTPUT_BYTES, so the bound holds up to ~TOTAL/(MIN+INPUT) entries; the
# executor's step bounds keep a run's invocations far below that.
MAX_TOTAL_BYTES = 24_000
FACT_SEPARATOR = " | "
ELLIPSIS = "…"

NO_NEW_EVIDENCE = "NO_NEW_EVIDENCE"


def bounded_utf8(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, on a character boundary, marked with `…`."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    room = max(0, limit - len(ELLIPSIS.encode("utf-8")))
    return data[:room].decode("utf-8", errors="ignore") + ELLIPSIS


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _join_within(parts: list[str], limit: int) -> str:
    """Join facts in order while they fit; a fact that does not fit whole is cut, then stop."""
    out = ""
    for part in parts:
        candidate = part if not out else out + FACT_SEPARATOR + part
        if _size(candidate) <= limit:
            out = candidate
            continue
        room = limit - _size(out) - (_size(FACT_SEPARATOR) if out else 0)
        if room > 24:  # a cut fact is only worth keeping if something readable remains
            out = (out + FACT_SEPARATOR if out else "") + bounded_utf8(part, room)
        break
    return out


def _is_deduped(invocation: ToolInvocation) -> bool:
    return bool(invocation.retrieval_details and invocation.retrieval_details.deduped)


def _is_failed(invocation: ToolInvocation) -> bool:
    return invocation.lifecycle != "READY" or invocation.evidence_status == "ERROR"


def _is_effective(invocation: ToolInvocation) -> bool:
    return (not _is_failed(invocation)) and invocation.evidence_status == "EVIDENCE_FOUND" and not _is_deduped(invocation)


def _fact_text(text: str) -> str:
    return bounded_utf8(" ".join(text.split()), MAX_FACT_BYTES)


class _KeptFacts:
    """The facts of the last few results, by the parsed result object: a result whose refs are
    rendered from it has facts that follow from it alone, and the parse cache hands every reader
    of one stored text the same frozen object (a question asked again over the same window)."""

    SIZE = 64

    def __init__(self) -> None:
        self._entries: OrderedDict[int, tuple[ToolResultData, tuple[str, ...], tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, result: ToolResultData) -> tuple[list[str], list[str]] | None:
        with self._lock:
            entry = self._entries.get(id(result))
            if entry is None or entry[0] is not result:
                return None
            self._entries.move_to_end(id(result))
        return list(entry[1]), list(entry[2])

    def put(self, result: ToolResultData, facts: list[str], boilerplate: list[str]) -> None:
        with self._lock:  # the entry holds the result, so its id() is not reused while it is here
            self._entries[id(result)] = (result, tuple(facts), tuple(boilerplate))
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)


_KEPT_FACTS = _KeptFacts()


def _facts(invocation: ToolInvocation) -> tuple[list[str], list[str]]:
    """(concrete facts, boilerplate) of one invocation, each bounded, most telling first. Lines
    sharing a template (differing only in ids, numbers, timestamps) are one fact with a count."""
    details = invocation.retrieval_details
    result = read_result(invocation.tool_name, invocation.agent_result)
    if result is None or details is None or not details.refs_rendered:
        return _read_facts(invocation)
    kept = _KEPT_FACTS.get(result)
    if kept is None:
        kept = _read_facts(invocation)
        _KEPT_FACTS.put(result, *kept)
    return kept


def _read_facts(invocation: ToolInvocation) -> tuple[list[str], list[str]]:
    refs = evidence_view(invocation).cited_refs()
    concrete: list[tuple[str, str]] = []
    repeats: list[int] = []
    boilerplate: list[str] = []
    position: dict[str, int] = {}
    for item in rank_refs(refs, point_values(read_result(invocation.tool_name, invocation.agent_result))):
        if item.boilerplate:
            boilerplate.append(_fact_text(item.ref.text))
        elif item.template in position:
            repeats[position[item.template]] += 1  # only counted: its text is never shown
        else:
            position[item.template] = len(concrete)
            concrete.append((item.ref.raw_path, _fact_text(item.ref.text)))
            repeats.append(1)
    # The count leads, so that cutting a long fact never loses it.
    facts = [f"{path}: {text}" if n == 1 else f"{path} (×{n}): {text}" for (path, text), n in zip(concrete, repeats)]
    return facts, boilerplate


def _input_summary(invocation: ToolInvocation, variants: int = 0) -> str:
    scope = {k: v for k, v in invocation.request.items() if k != "tool"}
    text = json.dumps(scope, ensure_ascii=False, sort_keys=True, default=str)
    if variants:
        text += f" (+{variants} 次同主题调用)"
    return bounded_utf8(text, MAX_INPUT_BYTES)


def _gap_text(invocation: ToolInvocation) -> str:
    if _is_failed(invocation):
        return f"调用失败: {' '.join((invocation.error or 'unknown error').split())}"
    _, boilerplate = _facts(invocation)
    scope = boilerplate[0] if boilerplate else "无匹配结果"
    return f"重复检索结果，无新证据: {scope}" if _is_deduped(invocation) else f"无命中: {scope}"


def _level(invocation: ToolInvocation) -> str:
    if _is_failed(invocation):
        return "ERROR"
    if _is_deduped(invocation):
        return NO_NEW_EVIDENCE
    return invocation.evidence_status or "NO_EVIDENCE"


def _single_output(invocation: ToolInvocation, budget: int) -> str:
    if _is_failed(invocation) or invocation.evidence_status != "EVIDENCE_FOUND":
        return bounded_utf8(_gap_text(invocation), budget)
    concrete, boilerplate = _facts(invocation)
    parts = concrete + boilerplate
    if _is_deduped(invocation):
        parts.insert(0, "重复检索结果，无新证据")
    return _join_within(parts, budget)


def topic_key(invocation: ToolInvocation) -> tuple[Any, ...]:
    """Same tool, same round, same subject: the service (and metric) asked about, or the query
    text of a knowledge lookup. Filters (levels, substrings, limits) do not change the topic."""
    request = invocation.request
    subject = request.get("service") or " ".join(str(request.get("query", "")).lower().split())
    extra = request.get("metric") if invocation.tool_name == QUERY_METRICS else None
    return (invocation.round, invocation.tool_name, str(subject), str(extra or ""))


def _group_output(members: list[ToolInvocation], budget: int) -> tuple[str, bool, str]:
    effective = [inv for inv in members if _is_effective(inv)]
    failed = sum(1 for inv in members if _is_failed(inv))
    deduped = sum(1 for inv in members if not _is_failed(inv) and _is_deduped(inv))
    no_hit = sum(
        1 for inv in members if not _is_failed(inv) and not _is_deduped(inv) and inv.evidence_status != "EVIDENCE_FOUND"
    )
    counts_text = (
        f"{len(members)} 次同主题调用: 有效命中 {len(effective)}, 无命中 {no_hit}, 失败 {failed}, 重复 {deduped}"
    )
    if effective:
        first = effective[0]
        concrete, boilerplate = _facts(first)
        parts = [counts_text, f"首个有效命中 #{first.invocation_id}: " + (concrete[0] if concrete else "")]
        parts += concrete[1:]
        for other in effective[1:]:
            more, _ = _facts(other)
            if more:
                parts.append(f"#{other.invocation_id}: {more[0]}")
                parts += more[1:2]
        parts += boilerplate[:1]
        return _join_within(parts, budget), True, "EVIDENCE_FOUND"
    first_gap = members[0]
    level = NO_NEW_EVIDENCE if deduped and not failed and not no_hit else ("NO_EVIDENCE" if no_hit else "ERROR")
    return _join_within([counts_text, f"#{first_gap.invocation_id} {_gap_text(first_gap)}"], budget), False, level


def build_tool_trace_summary(invocations: list[ToolInvocation]) -> list[ToolTraceSummaryEntry]:
    """Helper tools (e.g. get_current_time) are not evidence and never appear."""
    groups: dict[tuple[Any, ...], list[ToolInvocation]] = {}
    for invocation in invocations:
        if invocation.tool_name in EVIDENCE_TOOLS:
            groups.setdefault(topic_key(invocation), []).append(invocation)
    if not groups:
        return []
    per_entry = max(MIN_ENTRY_OUTPUT_BYTES, min(MAX_ENTRY_OUTPUT_BYTES, MAX_TOTAL_BYTES // len(groups) - MAX_INPUT_BYTES))
    entries: list[ToolTraceSummaryEntry] = []
    for members in groups.values():
        first = members[0]
        ids = [inv.invocation_id for inv in members]
        if len(members) == 1:
            output = _single_output(first, per_entry)
            success = _is_effective(first)  # a deduped result is no new evidence
            level = _level(first)
            trace_ref = f"trace-{first.invocation_id}"
        else:
            output, success, level = _group_output(members, per_entry)
            trace_ref = f"trace-{first.invocation_id}-x{len(members)}"
        entries.append(ToolTraceSummaryEntry(
            trace_ref=trace_ref,
            source_invocation_ids=ids,
            tool_name=first.tool_name,
            success=success,
            input_summary=_input_summary(first, len(members) - 1),
            output_summary=output,
            evidence_level=level,
        ))
    return entries
