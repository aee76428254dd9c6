"""Log findings of the embedded executor agent: clusters of error lines and bursts of warnings
(one finding per kind of line, however many reads return it; the small ones kept aside to link a
change), and events — lines of any level whose template is new or rare near an onset.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.executor.embedded_findings import (
    Candidate,
    Findings,
    binding,
    load_result,
    nothing_found,
    parse_ts,
    read_scope,
    ref_texts,
    service_onsets,
)
from services.executor.embedded_wording import MAX_LOG_EXCERPT
from services.executor.excerpt_choice import decisive_excerpt, telling_excerpt
from services.executor.log_clusters import cluster_hits, is_significant, level_of
from shared.core.contracts import MissingInfo, Signal, Statement, StatementRef, TimeWindow, ToolInvocation
from shared.core.grounding.causal_link import minutes_between
from shared.core.log_levels import BAD_LEVELS
from shared.core.statement_render import render_statement
from shared.core.symptom_lexicon import symptoms_for_log
from shared.core.tool_catalogue import LOG_LEVELS, QUERY_LOGS
from shared.core.tool_results import LogHit, LogsResult, hit_prefix, read_result
from shared.log_templates import mask, templates

LOG_BASE_SCORE = 5.0
MAX_SIGNAL_CHARS = 500  # a statement's signal name (the line's words)
# Events: lines of any level whose template is new or rare near an onset (a reload, a restart, a
# failover). After the planned calls, one read of every level over a short window around the
# onset (`EmbeddedExecutorAgent.event_reads`); its templates first seen near the onset, new to
# the read (absent from its first EVENT_NEW_AFTER_MIN minutes) or rare (at most EVENT_RARE_LINES
# lines), are observations: ranked below every anomaly and error cluster, never a cause here.
EVENT_BEFORE_ONSET_MIN = 15
EVENT_AFTER_ONSET_MIN = 5
EVENT_NEW_AFTER_MIN = 5
EVENT_RARE_LINES = 2
MAX_EVENTS_PER_SERVICE = 2
EVENT_SCORE = 3.0  # below a log cluster's least (LOG_BASE_SCORE + one WARN line's weight)


def logs_findings(invocation: ToolInvocation, findings: Findings, observed: set[str],
                  planned: list[tuple[str, dict[str, Any]]]) -> None:
    refs = ref_texts(invocation)
    data = load_result(invocation, findings, LogsResult)
    if data is None:
        return
    service, start, end = read_scope(invocation, data)
    # A read of the error levels from before the question's window (`change_reads`) shows
    # what started after a change: its lines link a change, they are no finding of their own.
    planned_start, read_start = _planned_start(planned, service), parse_ts(start)
    links_only = bool(data.level) and planned_start is not None and read_start is not None and read_start < planned_start
    if links_only and invocation.evidence_status == "NO_EVIDENCE":
        return
    if invocation.evidence_status == "NO_EVIDENCE":
        text = refs.get("summary")
        if text:
            contains = data.contains
            statement = nothing_found(invocation, service, "log", start, end, words=contains or "",
                                      levels="/".join(data.level or []))
            findings.candidates.append(Candidate(
                kind="negative", service=service, no_hit=True, score=0.8, bindings=[binding(invocation, "summary", text)],
                text=render_statement(statement, None) + "。", statement=statement,
                symptoms={"errors"} if not contains else set(symptoms_for_log(contains)),
                preferred_negative=1,
            ))
        return
    hits = data.hits
    total, returned = data.total_matches, data.returned or len(hits)
    if total > returned:
        findings.missing.append(MissingInfo(
            text=f"{service} 的日志共匹配 {total} 条，返回其中最早 {returned - returned // 2} 条与最近 "
                 f"{returned // 2} 条，其余 {total - returned} 条未逐条纳入分析；条数与首末出现时间按整个时间窗统计。",
            tool_name=invocation.tool_name,
        ))
    first_ts, last_ts = parse_ts(start), parse_ts(end)
    window_minutes = (last_ts - first_ts).total_seconds() / 60 if first_ts and last_ts else 60.0
    # A read of every level (an event read) clusters only the lines of levels no earlier read
    # of the service asked for, and that no earlier read held: an error line is one finding,
    # however many reads return it (an earlier read may have returned a sample of its level).
    read = findings.read_lines.setdefault(service, set())
    levels_read = findings.levels_read.setdefault(service, set())
    keys = [(hit.ts, hit.message) for hit in hits]
    every_level = not data.level and not _contains_filter(data)
    # A line of a level read in full is new when it lies before that read's window (an event
    # read reaching further back than the planned one).
    read_from = findings.levels_read_from.get(service)
    fresh = [k for k, key in enumerate(keys) if key not in read and (
        level_of(hits[k]) not in levels_read or (read_from is not None and (parse_ts(hits[k].ts) or read_from) < read_from))] \
        if every_level else list(range(len(hits)))
    read.update(keys)
    if not _contains_filter(data) and data.level:
        levels_read.update(level.upper() for level in data.level or ())
        if first_ts is not None:
            findings.levels_read_from[service] = min(first_ts, read_from or first_ts)
    reported = findings.reported_lines.setdefault(service, set())
    for cluster in cluster_hits([hits[k] for k in fresh]):
        cluster.hit_indexes = [fresh[k] for k in cluster.hit_indexes]
        # A few warnings are no finding of their own, but one that names what a change
        # names links that change (`_link_causes`): kept aside for that.
        significant = is_significant(cluster, window_minutes) and not links_only
        if not significant and level_of(hits[cluster.hit_indexes[0]]) not in BAD_LEVELS:
            continue
        # The first line's words: a template's parameters (`<*>`) may have held the symptom's.
        symptoms = set(symptoms_for_log(hits[cluster.hit_indexes[0]].message))
        first_path, last_path = f"hits[{cluster.hit_indexes[0]}]", f"hits[{cluster.hit_indexes[-1]}]"
        if first_path not in refs or last_path not in refs:
            continue
        first, last = hits[cluster.hit_indexes[0]], hits[cluster.hit_indexes[-1]]
        # The line's most telling piece (its exception line first), checked with the
        # gatekeeper's matcher: never an excerpt our own check would refuse.
        first_excerpt = telling_excerpt(refs[first_path], len(hit_prefix(data, first)), MAX_LOG_EXCERPT)
        last_excerpt = telling_excerpt(refs[last_path], len(hit_prefix(data, last)), MAX_LOG_EXCERPT)
        if first_excerpt is None or last_excerpt is None:
            continue
        bindings = [binding(invocation, first_path, first_excerpt)]
        several = cluster.count > 1
        if several:
            bindings.append(binding(invocation, last_path, last_excerpt))
        statement = lines_statement(invocation.invocation_id, service, (first_path, first), (last_path, last) if several else None)
        candidate = Candidate(
            kind="log_cluster", service=service, text=render_statement(statement, None, quote=first_excerpt) + "。",
            bindings=bindings, statement=statement,
            score=LOG_BASE_SCORE + min(cluster.weight, 10.0) + (3.0 if symptoms & observed else 0.0),
            symptoms=symptoms, first_ts=first.ts, level=first.level, excerpt=first_excerpt,
            signature=(invocation, first_path, refs[first_path]), template=cluster.template,
            decisive=decisive_excerpt(refs[first_path], len(hit_prefix(data, first)), MAX_LOG_EXCERPT) or "",
        )
        if not significant:
            findings.link_signatures.append(candidate)
            continue
        reported.update(keys[k] for k in cluster.hit_indexes)
        earlier = _earlier_start(findings.candidates, candidate)
        if earlier is None:
            findings.candidates.append(candidate)

def events_findings(evidence: list[ToolInvocation], findings: Findings) -> None:
    """Events: in each read of every level, the templates (`shared/log_templates.py`, over the
    read's lines) whose first line lies near the service's onset (EVENT_BEFORE_ONSET_MIN before
    it to EVENT_AFTER_ONSET_MIN after) and that are new to the read or rare in it, whatever
    their level or words; lines an error cluster reports are not events. At most
    MAX_EVENTS_PER_SERVICE per service, those before the onset and nearest it first. Each is an
    observation citing its line, with its time, level and template kept for a cause rule."""
    onsets = service_onsets(findings.candidates)
    kept: dict[str, set[str]] = {}
    for invocation in evidence:
        if invocation.tool_name != QUERY_LOGS or invocation.lifecycle != "READY" or invocation.evidence_status != "EVIDENCE_FOUND":
            continue
        data = read_result(invocation.tool_name, invocation.agent_result)
        if not isinstance(data, LogsResult) or data.level or _contains_filter(data):
            continue
        service = data.service or str(invocation.request.get("service") or "")
        onset = onsets.get(service)
        if onset is not None:
            _events_of(invocation, data, service, onset, findings, kept.setdefault(service, set()))

def _events_of(invocation: ToolInvocation, data: LogsResult, service: str, onset: datetime,
               findings: Findings, kept: set[str]) -> None:
    hits = data.hits
    stamps = [parse_ts(hit.ts) for hit in hits]
    dated = [k for k, at in enumerate(stamps) if at is not None]
    if not dated:
        return
    read_from = min(stamps[k] for k in dated)  # type: ignore[type-var]
    by_template: dict[str, list[int]] = {}
    for k, template in zip(dated, templates([hits[k].message for k in dated])):
        by_template.setdefault(template, []).append(k)
    reported = findings.reported_lines.get(service, set())
    near: list[tuple[bool, float, int, str]] = []
    for template, indexes in by_template.items():
        first = min(indexes, key=lambda k: (stamps[k], k))
        at = stamps[first]
        assert at is not None and read_from is not None
        minutes = minutes_between(onset, at)
        if template in kept or not -EVENT_BEFORE_ONSET_MIN <= minutes <= EVENT_AFTER_ONSET_MIN:
            continue
        new = minutes_between(read_from, at) >= EVENT_NEW_AFTER_MIN
        if not (new or len(indexes) <= EVENT_RARE_LINES):
            continue
        if any((hits[k].ts, hits[k].message) in reported for k in indexes):
            continue  # an error cluster reports these lines
        near.append((minutes > 0, abs(minutes), first, template))
    refs = ref_texts(invocation) if near else {}
    for after, minutes, k, template in sorted(near):
        if len(kept) >= MAX_EVENTS_PER_SERVICE:
            break
        path, hit = f"hits[{k}]", hits[k]
        if path not in refs:
            continue
        excerpt = telling_excerpt(refs[path], len(hit_prefix(data, hit)), MAX_LOG_EXCERPT)
        if excerpt is None:
            continue
        kept.add(template)
        statement = lines_statement(invocation.invocation_id, service, (path, hit), None)
        findings.candidates.append(Candidate(
            kind="event", service=service, text=render_statement(statement, None, quote=excerpt) + "。",
            bindings=[binding(invocation, path, excerpt)], statement=statement,
            # Nearer the onset ranks higher, and a line before it higher than one after.
            score=EVENT_SCORE + (0.5 if not after else 0.0) + 0.5 / (1.0 + minutes),
            first_ts=hit.ts, level=hit.level, excerpt=excerpt, signature=(invocation, path, refs[path]),
            template=template,
        ))


def _earlier_start(candidates: list[Candidate], new: Candidate) -> Candidate | None:
    """The reported cluster of the same kind of line (equal masks) as `new`, a cluster of a read
    reaching further back; when `new` starts earlier, that finding now starts at `new`'s first
    line (its text, first binding and signature), so a line's first time comes from every read
    and the line is one finding. None when no cluster of that kind was reported."""
    same = next((c for c in candidates if c.kind == "log_cluster" and c.service == new.service and c.signature
                 and new.signature and mask(_line_of(c)) == mask(_line_of(new))), None)
    if same is None:
        return None
    new_at, same_at = parse_ts(new.first_ts or ""), parse_ts(same.first_ts or "")
    if new_at is None or same_at is None or new_at >= same_at:
        return same
    assert same.statement is not None and new.statement is not None  # every cluster is stated
    last, last_ref = same.bindings[-1], same.statement.refs[-1]
    last_at = same.statement.span.end if same.statement.span is not None else same.statement.at
    level = new.statement.signal.level if new.statement.signal is not None and same.statement.signal is not None and (
        new.statement.signal.level == same.statement.signal.level) else ""
    same.first_ts, same.signature, same.decisive = new.first_ts, new.signature, new.decisive or same.decisive
    same.excerpt = new.excerpt
    same.bindings = [new.bindings[0], last]
    same.statement = new.statement.model_copy(update={
        "state": "present", "at": "", "span": TimeWindow(start=new.statement.at or new.first_ts or "", end=last_at),
        "refs": [new.statement.refs[0], last_ref],
        "signal": Signal(kind="log", name=new.statement.signal.name if new.statement.signal else "", level=level)})
    same.text = render_statement(same.statement, None, quote=new.excerpt) + "。"
    return same


def lines_statement(invocation_id: int, service: str, first: tuple[str, LogHit], last: tuple[str, LogHit] | None) -> Statement:
    """What a cluster of lines says, typed: the line's words and level, one line at its instant
    (an event) or several from the first line to the last (present). The level is stated only
    when every cited line carries it."""
    first_hit, cited = first[1], [first] + ([last] if last is not None else [])
    levels = {str(hit.level or "").upper() for _, hit in cited}
    level = levels.pop() if len(levels) == 1 and level_of(first_hit) in LOG_LEVELS else ""
    signal = Signal(kind="log", name=str(first_hit.message or "")[:MAX_SIGNAL_CHARS], level=level)
    refs = [StatementRef(source_invocation_id=invocation_id, raw_path=path) for path, _ in cited]
    if last is None:
        return Statement(subject=service, signal=signal, state="event", at=first_hit.ts, refs=refs)
    return Statement(subject=service, signal=signal, state="present", refs=refs,
                     span=TimeWindow(start=first_hit.ts, end=last[1].ts))


def _line_of(candidate: Candidate) -> str:
    """The message of a cluster's first line (its ref text after the tool's prefix)."""
    assert candidate.signature is not None
    return candidate.excerpt or candidate.signature[2]


def _contains_filter(data: LogsResult) -> bool:
    return bool(data.contains)


def _planned_start(calls: list[tuple[str, dict[str, Any]]], service: str) -> datetime | None:
    """The start of the service's first planned query_logs call's window."""
    for name, arguments in calls:
        if name == QUERY_LOGS and str(arguments.get("service") or "") == service:
            return parse_ts(str(arguments.get("start") or ""))
    return None
