"""The embedded (offline) executor engine: runs the plan's tool calls, then derives an
executor_evidence_v2 answer from what the persisted invocations actually contain.

Claims come only from anomalies present in the results — metric rises above the window's own
baseline or past a level abnormal for the kind of metric, error log lines (one is evidence) and
bursts of warnings, the changes recorded in the window, and events (lines of any level whose
template is new or rare near an onset, read by one follow-up call of every level: observations,
ranked last) — and no-hit results. Every claim states only facts found in the
ref texts it cites, and each binding's excerpt is an exact substring of the cited ref's text that
the gatekeeper's matcher accepts (a log line's excerpt is its most telling piece, the exception
line first: `excerpt_choice.py`).

Causes (the rule is `shared/core/grounding/causal_link.py`, which the verifier runs
on every engine's claims): a change becomes a `root_cause` claim (support `indirect`) only when it
precedes the anomaly's onset (or its first error signature) within the bounded window AND shares
a distinctive token (version, config key, rule set, host …) with that service's error/warn
signatures; the claim names the change, cites both ends (the change record, the signature line)
and the onset ref, and says the link (the token, the minutes between). Without a linked change,
an ERROR signature whose first line coincides with a metric onset (the same service, or a service
the line names) is the cause claimed. A change that merely came first is an observation and at
most a hypothesis (closeness in time proves nothing); a change of a service with no anomaly is
mentioned, never blamed. Rollback advice appears only with a linked change. Runbook hits are
guidance, never incident facts: they only shape `recommended_actions`. Possible causes go to
`hypotheses`, next steps to `recommended_actions`, what the evidence cannot show to
`missing_info` (graph spec: "Executor SHALL output an evidence-attribution contract", "Executor
prompt SHALL constrain narrow-scope over-expansion").

This module runs the calls (the planned ones, then the follow-up reads) and derives the answer;
the parts live beside it: the findings and their shared helpers (`embedded_findings.py`), metric
findings (`embedded_metrics.py`), log findings and events (`embedded_logs.py`), change records
and causes (`embedded_causes.py`), which findings become claims (`embedded_selection.py`), the
hypotheses, actions and missing info (`embedded_side_lists.py`) and how sentences quote what they
cite (`embedded_wording.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from services.executor.dependency_follow import follow_dependencies
from services.executor.embedded_causes import changes_findings, link_causes
from services.executor.embedded_findings import Candidate, Findings, parse_ts, scope_label, service_onsets
from services.executor.embedded_logs import (
    EVENT_AFTER_ONSET_MIN,
    EVENT_BEFORE_ONSET_MIN,
    events_findings,
    logs_findings,
)
from services.executor.embedded_metrics import keep_zoomed_out, metrics_findings
from services.executor.embedded_selection import answering
from services.executor.embedded_side_lists import (
    MAX_MISSING,
    actions_for,
    hypotheses_for,
    knowledge_findings,
    missing_for,
)
from services.executor.engine import BUDGET_EXHAUSTED_NOTE, budget_exhausted
from services.executor.tools.registry import ToolDisabledError
from shared.core.contracts import EVIDENCE_TOOLS, Claim, ExecutorEvidenceV2, MissingInfo, Plan, ToolInvocation
from shared.core.grounding.causal_link import NEW_KIND_AFTER_CHANGE_MIN, change_precedes
from shared.core.question_intent import plan_intent
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, by_specificity, find_symptoms
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.errors import ResourceExhausted

CallTool = Callable[[str, dict[str, Any]], ToolInvocation]

MAX_CLAIMS = 6
MAX_NARROW_CLAIMS = 2
# Event reads (`event_reads`): one read of every level around an onset (EVENT_BEFORE_ONSET_MIN
# before it to EVENT_AFTER_ONSET_MIN after), for at most MAX_EVENT_READS services.
MAX_EVENT_READS = 2
# A series already high where the window starts: its service's metrics are read once more from
# this many minutes further back (`zoom_out_reads`), for at most MAX_ZOOM_OUT_READS services.
ZOOM_OUT_MIN = 60
MAX_ZOOM_OUT_READS = 1
# Change reads (`change_reads`): the error lines around a change that precedes an onset, from
# this many minutes before it, at most MAX_CHANGE_READS per question.
CHANGE_READ_BEFORE_MIN = 20
MAX_CHANGE_READS = 2
BAD_READ_LEVELS = ("FATAL", "ERROR", "WARN")


class EmbeddedExecutorAgent:
    def __init__(self, max_claims: int = MAX_CLAIMS, max_narrow_claims: int = MAX_NARROW_CLAIMS) -> None:
        self._max_claims = max_claims
        self._max_narrow_claims = max_narrow_claims

    def run(self, plan: Plan, call_tool: CallTool, query: str) -> str:
        """Call every planned tool through `call_tool` (which persists the invocation), then return
        the executor_evidence_v2 JSON text derived from the invocations."""
        invocations: list[ToolInvocation] = []
        unfinished: list[MissingInfo] = []
        calls = [(step.tool_name, dict(step.arguments)) for step in plan.steps]
        for tool_name, arguments in calls:
            self._call(call_tool, tool_name, arguments, invocations, unfinished)
        # A catalogued service the error lines name is checked too.
        dependencies = follow_dependencies(calls, invocations, call_tool)
        for tool_name, arguments in dependencies.calls:
            self._call(call_tool, tool_name, arguments, invocations, unfinished)
        unfinished += dependencies.missing_info
        if not budget_exhausted(call_tool):
            for tool_name, arguments in self.zoom_out_reads(plan, calls, invocations, query):
                self._call(call_tool, tool_name, arguments, invocations, unfinished)
        if not budget_exhausted(call_tool):
            for tool_name, arguments in self.event_reads(plan, calls, invocations, query):
                self._call(call_tool, tool_name, arguments, invocations, unfinished)
        if not budget_exhausted(call_tool):
            for tool_name, arguments in self.change_reads(plan, calls, invocations, query):
                self._call(call_tool, tool_name, arguments, invocations, unfinished)
        follow_up = self._knowledge_follow_up(plan, invocations, query)
        if follow_up is not None:
            self._call(call_tool, follow_up[0], follow_up[1], invocations, unfinished)
        output = self.derive(plan, invocations, query)
        output.missing_info = (unfinished + output.missing_info)[:MAX_MISSING]
        return json.dumps(output.model_dump(mode="json", exclude_none=True), ensure_ascii=False)

    @staticmethod
    def _call(call_tool: CallTool, tool_name: str, arguments: dict[str, Any], invocations: list[ToolInvocation],
              unfinished: list[MissingInfo]) -> None:
        try:
            invocations.append(call_tool(tool_name, arguments))
        except ToolDisabledError:
            return  # no source is configured for it: the answer's scope names it, nothing is missing
        except ResourceExhausted:  # the run's budget: this check (and any later one) is not run
            if all(item.text != BUDGET_EXHAUSTED_NOTE for item in unfinished):
                unfinished.append(MissingInfo(text=BUDGET_EXHAUSTED_NOTE, tool_name=tool_name))
        except Exception as exc:  # the call never produced an invocation; say so, do not crash
            unfinished.append(MissingInfo(text=f"{tool_name} 调用未完成：{str(exc)[:200]}", tool_name=tool_name))

    def _knowledge_follow_up(self, plan: Plan, invocations: list[ToolInvocation], query: str) -> tuple[str, dict[str, Any]] | None:
        """When the plan looked up no runbook (the query named no symptom) but the evidence shows
        anomalies, one lookup for the symptoms actually observed, to guide the next steps."""
        if plan_intent(plan, query).confirmation or any(inv.tool_name == LOOKUP_KNOWLEDGE for inv in invocations):
            return None
        findings = self._collect(plan, invocations, query)
        anomalies = sorted((c for c in findings.candidates if c.kind == "anomaly"), key=lambda c: -c.score)
        symptoms = by_specificity(list(dict.fromkeys(s for c in anomalies for s in sorted(c.symptoms))))[:2]
        if not symptoms:
            return None
        words = [SYMPTOMS_BY_ID[s].label_zh for s in symptoms]
        return LOOKUP_KNOWLEDGE, {"query": " ".join(words), "top_k": 3}

    def event_reads(self, plan: Plan, calls: list[tuple[str, dict[str, Any]]], invocations: list[ToolInvocation],
                    query: str) -> list[tuple[str, dict[str, Any]]]:
        """One `query_logs` call of every level per service with an anomaly onset or a first error
        line, over EVENT_BEFORE_ONSET_MIN before it to EVENT_AFTER_ONSET_MIN after (not past the
        planned window's end), the earliest onsets first, at most MAX_EVENT_READS; none where a read
        of every level already covers that window, and none for a yes/no question (whose answer
        leaves events out)."""
        if plan_intent(plan, query).confirmation:
            return []
        onsets = service_onsets(self._collect(plan, invocations).candidates)
        reads: list[tuple[str, dict[str, Any]]] = []
        for service, onset in sorted(onsets.items(), key=lambda item: (item[1], item[0])):
            if len(reads) >= MAX_EVENT_READS:
                break
            start = onset - timedelta(minutes=EVENT_BEFORE_ONSET_MIN)
            end = onset + timedelta(minutes=EVENT_AFTER_ONSET_MIN)
            planned_end = _planned_end(calls, service)
            if planned_end is not None:
                end = min(end, planned_end)
            if end <= start or _read_covers(invocations, service, start, end):
                continue
            reads.append((QUERY_LOGS, {"service": service, "start": _iso(start), "end": _iso(end)}))
        return reads

    def zoom_out_reads(self, plan: Plan, calls: list[tuple[str, dict[str, Any]]], invocations: list[ToolInvocation],
                       query: str) -> list[tuple[str, dict[str, Any]]]:
        """One `query_metrics` call reaching ZOOM_OUT_MIN further back for each service (at most
        MAX_ZOOM_OUT_READS) with a series already high where the planned window starts: the onset
        lies before the window, and an SRE widens the view to find it (the onset then drives the
        event and change reads, and a cause can be linked to it)."""
        findings = self._collect(plan, invocations, query)
        services = list(dict.fromkeys(c.service for c in findings.candidates if c.kind == "anomaly" and c.already_high))
        reads: list[tuple[str, dict[str, Any]]] = []
        for service in [s for s in services if not _failed(invocations, QUERY_METRICS, s)][:MAX_ZOOM_OUT_READS]:
            planned = next((a for name, a in calls if name == QUERY_METRICS and str(a.get("service") or "") == service), None)
            start = parse_ts(str((planned or {}).get("start") or ""))
            end = parse_ts(str((planned or {}).get("end") or ""))
            if planned is None or start is None or end is None:
                continue
            arguments = {key: value for key, value in planned.items() if key not in ("start", "end")}
            reads.append((QUERY_METRICS, {**arguments, "start": _iso(start - timedelta(minutes=ZOOM_OUT_MIN)), "end": _iso(end)}))
        return reads

    def change_reads(self, plan: Plan, calls: list[tuple[str, dict[str, Any]]], invocations: list[ToolInvocation],
                     query: str) -> list[tuple[str, dict[str, Any]]]:
        """One `query_logs` call of the error levels around each change that came before a
        service's onset but before its planned log window too (a release an hour before a leak
        fills the memory): CHANGE_READ_BEFORE_MIN before the change to NEW_KIND_AFTER_CHANGE_MIN
        after it, so that the link check can see whether a new kind of error line started after
        it (`new_kind_after`). The latest changes first, at most MAX_CHANGE_READS; none where a
        read of those levels already covers that window. Its lines are read for links only."""
        findings = self._collect(plan, invocations, query)
        onsets = service_onsets(findings.candidates)
        reads: list[tuple[str, dict[str, Any]]] = []
        for change in sorted(findings.changes, key=lambda c: (-c.ts.timestamp(), c.raw_path)):
            onset = onsets.get(change.service)
            if len(reads) >= MAX_CHANGE_READS or onset is None or not change_precedes(change.ts, onset):
                continue
            if _failed(invocations, QUERY_LOGS, change.service):
                continue  # its log backend failed this run: asking it again adds a failure, not a line
            start = change.ts - timedelta(minutes=CHANGE_READ_BEFORE_MIN)
            end = change.ts + timedelta(minutes=NEW_KIND_AFTER_CHANGE_MIN + 1)
            planned_end = _planned_end(calls, change.service)
            if planned_end is not None:
                end = min(end, planned_end)
            if end <= start or _read_covers(invocations, change.service, start, end, levels=BAD_READ_LEVELS):
                continue
            reads.append((QUERY_LOGS, {"service": change.service, "start": _iso(start), "end": _iso(end),
                                       "level": list(BAD_READ_LEVELS)}))
        return reads

    # --- derivation ------------------------------------------------------------------------

    def derive(self, plan: Plan, invocations: list[ToolInvocation], query: str) -> ExecutorEvidenceV2:
        asked = set(plan.symptoms)
        intent = plan_intent(plan, query)
        narrow = intent.confirmation
        findings = self._collect(plan, invocations, query)
        selected = answering(findings.candidates, intent, asked, self._max_claims, self._max_narrow_claims)
        # A compound question: what answers each other part too (「…？CPU 高不高？」 brings the
        # CPU series, quiet or not), after what answers the first.
        for part in intent.parts:
            own = set(find_symptoms(part.text))
            extra = answering(findings.candidates, part, own, self._max_claims, self._max_narrow_claims)
            selected += [c for c in extra if c not in selected][:self._max_narrow_claims]
        claims = [
            Claim(
                claim_id=f"c{index}",
                claim_type=self._claim_type(candidate, narrow),
                claim_text=candidate.text,
                support_level=candidate.support,
                evidence_bindings=candidate.bindings,
                statement=candidate.statement,
            )
            for index, candidate in enumerate(selected, start=1)
        ]
        positives = [c for c in selected if c.kind != "negative"]
        return ExecutorEvidenceV2(
            claims=claims,
            hypotheses=hypotheses_for(selected, claims, findings.candidates, narrow),
            recommended_actions=actions_for(positives, asked, narrow, findings.runbooks),
            missing_info=missing_for(plan, findings, positives, asked, invocations),
        )

    def _collect(self, plan: Plan, invocations: list[ToolInvocation], query: str = "") -> Findings:
        """Everything the invocations show: candidate claims, gaps, change records, runbook hits."""
        asked = set(plan.symptoms)
        findings = Findings(stated=dict(plan_intent(plan, query).stated_directions))
        evidence = [inv for inv in invocations if inv.tool_name in EVIDENCE_TOOLS]
        for invocation in evidence:
            findings.queried_tools.add(invocation.tool_name)
            if invocation.lifecycle == "ERROR" or invocation.evidence_status == "ERROR":
                reason = (invocation.error or "unknown error")[:200]
                findings.missing.append(MissingInfo(
                    text=f"{scope_label(invocation)} 调用失败（{reason}），相应证据缺失。",
                    tool_name=invocation.tool_name,
                ))
        # Metrics first: the symptoms they show decide which single error lines are relevant.
        for invocation in evidence:
            if invocation.tool_name == QUERY_METRICS and invocation.lifecycle == "READY":
                metrics_findings(invocation, findings)
        keep_zoomed_out(findings)
        planned = [(step.tool_name, dict(step.arguments)) for step in plan.steps]
        observed = set(asked)
        for candidate in findings.candidates:
            if candidate.kind == "anomaly":
                observed |= candidate.symptoms
        for invocation in evidence:
            if invocation.tool_name == QUERY_LOGS and invocation.lifecycle == "READY":
                logs_findings(invocation, findings, observed, planned)
        events_findings(evidence, findings)
        for invocation in evidence:
            if invocation.tool_name == QUERY_CHANGES and invocation.lifecycle == "READY":
                changes_findings(invocation, findings)
            elif invocation.tool_name == LOOKUP_KNOWLEDGE and invocation.lifecycle == "READY":
                knowledge_findings(invocation, findings)
        link_causes(findings, evidence, asked)
        return findings

    @staticmethod
    def _claim_type(candidate: Candidate, narrow: bool) -> str:
        if candidate.kind == "negative":
            return "negative_observation"
        if candidate.kind == "cause":
            return "root_cause"  # a checked link: both ends cited (causal_link.py)
        if candidate.kind == "change":
            return "observation"  # a fact about the change log; never a root cause by itself
        if candidate.kind == "anomaly" and not narrow:
            return "symptom"
        return "observation"


def _failed(invocations: list[ToolInvocation], tool_name: str, service: str) -> bool:
    """Whether a call of this tool about this service failed in the run."""
    return any(inv.tool_name == tool_name and str(inv.request.get("service") or "") == service
               and (inv.lifecycle == "ERROR" or inv.evidence_status == "ERROR") for inv in invocations)


def _planned_end(calls: list[tuple[str, dict[str, Any]]], service: str) -> datetime | None:
    """The end of the service's first planned query_logs (else query_metrics) call's window."""
    for tool_name in (QUERY_LOGS, QUERY_METRICS):
        for name, arguments in calls:
            if name == tool_name and str(arguments.get("service") or "") == service:
                return parse_ts(str(arguments.get("end") or ""))
    return None


def _read_covers(invocations: list[ToolInvocation], service: str, start: datetime, end: datetime,
                 levels: tuple[str, ...] = ()) -> bool:
    """Whether a READY read of every level of the service (or, given `levels`, of at least
    those) already covers start..end."""
    for invocation in invocations:
        request = invocation.request
        if (invocation.tool_name != QUERY_LOGS or invocation.lifecycle != "READY"
                or request.get("contains") or str(request.get("service") or "") != service):
            continue
        asked = {str(level).upper() for level in request.get("level") or ()}
        if asked and not (levels and set(levels) <= asked):
            continue
        read_start, read_end = parse_ts(str(request.get("start") or "")), parse_ts(str(request.get("end") or ""))
        if read_start is not None and read_end is not None and read_start <= start and read_end >= end:
            return True
    return False


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
