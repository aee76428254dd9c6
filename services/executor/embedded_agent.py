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

Causes (issue 15, point 2; the rule is `shared/grounding/causal_link.py`, which the verifier runs
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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from services.executor.checked_scope import quiet_series_text
from services.executor.dependency_follow import follow_dependencies
from services.executor.engine import BUDGET_EXHAUSTED_NOTE, budget_exhausted
from services.executor.excerpt_choice import decisive_excerpt, is_supported, named_peer, telling_excerpt
from services.executor.log_clusters import cluster_hits, is_significant, level_of
from services.executor.metric_anomaly import assess_series
from services.executor.tools.metrics_tool import no_series_text
from services.executor.tools.registry import ToolDisabledError
from shared.config import configured_failure_modes, configured_signal_semantics
from shared.core.contracts import (
    EVIDENCE_TOOLS,
    Claim,
    EvidenceBinding,
    ExecutorEvidenceV2,
    Hypothesis,
    MissingInfo,
    Plan,
    RecommendedAction,
    ToolInvocation,
)
from shared.core.evidence_facts import ref_facts
from shared.core.evidence_view import evidence_view
from shared.core.failure_modes import Mechanism
from shared.core.log_levels import BAD_LEVELS
from shared.core.signal_semantics import Direction, stated_directions
from shared.core.symptom_lexicon import (
    SYMPTOMS_BY_ID,
    by_specificity,
    find_symptoms,
    is_confirmation_question,
    metric_profile,
    symptoms_for_log,
    symptoms_for_metric,
)
from shared.core.tool_catalogue import LOG_LEVELS, LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.core.tool_results import (
    ChangesResult,
    KnowledgeResult,
    LogsResult,
    MetricSeriesResult,
    MetricsResult,
    ToolResultData,
    hit_prefix,
    read_result,
)
from shared.core.value_format import format_value
from shared.errors import ResourceExhausted
from shared.grounding.causal_link import (
    COINCIDE_MIN,
    NEW_KIND_AFTER_CHANGE_MIN,
    RESOURCE_BEFORE_EFFECT_MIN,
    RESOURCE_LINES_AFTER_MIN,
    SIGNATURE_AFTER_ONSET_MIN,
    Corpus,
    IdentifierMatch,
    LinkEnd,
    advises_rollback,
    change_precedes,
    coincide,
    mechanism_link,
    minutes_between,
    names_service,
    new_kind_after,
    parse_instant,
    reports_series,
    saturable,
    shared_identifiers,
)
from shared.grounding.quiet_series import summary_state
from shared.log_templates import mask, templates
from shared.question_intent import classify_question

CallTool = Callable[[str, dict[str, Any]], ToolInvocation]

MAX_CLAIMS = 6
MAX_NARROW_CLAIMS = 2
MAX_ANOMALY_CLAIMS_PER_SERVICE = 3
MAX_LOG_CLAIMS_PER_SERVICE = 2
MAX_HYPOTHESES = 4
MAX_ACTIONS = 5
MAX_MISSING = 6
MAX_LOG_EXCERPT = 160
# Which of the lines that start with an anomaly is its cause: the most severe first.
_SEVERITY = {"FATAL": 0, "ERROR": 1, "WARN": 2}
# A metric anomaly outranks a log burst of the same relevance: it measures the symptom itself.
ANOMALY_BASE_SCORE = 20.0
# A level past the abnormal one read from too few points for a trend: below a detected rise.
FEW_POINTS_ANOMALY_SCORE = 1.0
LOG_BASE_SCORE = 5.0
CORRELATION_BEFORE_MIN = 10
CORRELATION_AFTER_MIN = 15
CHANGE_SCORE = 19.0  # above any log cluster (at most LOG_BASE_SCORE + 10 + 3): a change just before an onset is the lead a why-question wants
ROUTINE_CHANGE_SCORE = 0.2  # a change with no anomaly after it: mentioned, after everything else
# A checked cause outranks every finding: it is what a why-question asks for.
CAUSE_SCORE = 60.0
# A change with no identifier in common with the effect counts as "just before" an onset within
# this many minutes before it (or in the onset's own minute: onsets are known to the minute only);
# a change that shares one may come earlier, within the link check's CHANGE_BEFORE_EFFECT_MIN.
CHANGE_BEFORE_ONSET_MIN = 60
# An error signature is taken as an event cause only when its first line falls no later than the
# minute after the onset's (onsets are minute points): a cause does not follow its effect.
CAUSE_AFTER_ONSET_MIN = SIGNATURE_AFTER_ONSET_MIN
MAX_SUMMARY_IN_CAUSE = 60
MAX_EVENT_QUOTE = 100  # a cause claim stays one readable line (an answer's first line quotes it)
# Events: lines of any level whose template is new or rare near an onset (a reload, a restart, a
# failover). After the planned calls, one read of every level over a short window around the
# onset, for at most MAX_EVENT_READS services; its templates first seen near the onset, new to
# the read (absent from its first EVENT_NEW_AFTER_MIN minutes) or rare (at most EVENT_RARE_LINES
# lines), are observations: ranked below every anomaly and error cluster, never a cause here.
EVENT_BEFORE_ONSET_MIN = 15
EVENT_AFTER_ONSET_MIN = 5
EVENT_NEW_AFTER_MIN = 5
EVENT_RARE_LINES = 2
MAX_EVENT_READS = 2
MAX_EVENTS_PER_SERVICE = 2
EVENT_SCORE = 3.0  # below a log cluster's least (LOG_BASE_SCORE + one WARN line's weight)
MAX_RUNBOOK_ACTIONS = 2
# A series already high where the window starts: its service's metrics are read once more from
# this many minutes further back (`zoom_out_reads`), for at most MAX_ZOOM_OUT_READS services.
ZOOM_OUT_MIN = 60
MAX_ZOOM_OUT_READS = 1
MAX_MECHANISM_ACTIONS = 2  # failure modes whose first read-only step is advised
# Change reads (`change_reads`): the error lines around a change that precedes an onset, from
# this many minutes before it, at most MAX_CHANGE_READS per question.
CHANGE_READ_BEFORE_MIN = 20
MAX_CHANGE_READS = 2
BAD_READ_LEVELS = ("FATAL", "ERROR", "WARN")
MAX_STEP_CHARS = 90
_R = TypeVar("_R", bound=ToolResultData)
# Words of an action that changes the running system: such an action needs a human.
_SYSTEM_CHANGING = re.compile(r"回滚|重启|扩容|缩容|清理|删除|截断|替换|调大|调小|调高|调整|限流|降级|熔断|kill|restart|rollback|scale", re.I)
_STEP_SECTION = re.compile(r"排查|处置|处理|步骤|止血|mitigat|troubleshoot|remediat", re.I)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)、])\s+")

SOURCE_TYPES = {QUERY_METRICS: "metrics", QUERY_LOGS: "logs", LOOKUP_KNOWLEDGE: "knowledge", QUERY_CHANGES: "changes"}
# `<service> <metric>=<value with unit> at <ts>` (tools/metrics_tool.py)
# `<ts> <LEVEL> <service> host=<host> <message>` (tools/logs_tool.py)


@dataclass
class Candidate:
    kind: str  # anomaly | log_cluster | event | negative | change | cause
    service: str
    text: str
    bindings: list[EvidenceBinding]
    score: float
    symptoms: set[str] = field(default_factory=set)
    metric: str = ""
    onset_ts: str | None = None
    first_ts: str | None = None
    level: str = ""
    excerpt: str = ""
    preferred_negative: int = 9  # lower is a better stand-in for "this service looks normal"
    no_hit: bool = False
    related: Candidate | None = None  # change candidates: the anomaly whose onset they precede
    minutes_before: float = 0.0
    # log clusters: the first line; events: the line (invocation, raw_path, text)
    signature: tuple[ToolInvocation, str, str] | None = None
    template: str = ""  # log clusters and events: the lines' template (shared/log_templates.py)
    onset_ref: tuple[ToolInvocation, str, str] | None = None  # anomalies: the series' onset ref
    moved: str = "升高"  # anomalies: how the series moved the bad way (升高, or 下降 for a fall)
    support: str = "direct"
    link_token: str = ""  # change causes: the distinctive token the change shares with the signatures
    already_high: bool = False  # anomalies: the series was already high where the window starts
    change_linked: bool = False  # causes: a change linked by the link check (rollback advice may follow)
    decisive: str = ""  # log clusters: the part of the first line that says what went wrong (a cause's quote)


@dataclass(frozen=True)
class ChangeEntry:
    invocation: ToolInvocation
    raw_path: str
    ref_text: str
    ts: datetime
    stamp: str
    service: str
    kind: str
    author: str
    summary: str


@dataclass(frozen=True)
class _ModeCause:
    related_change: ChangeEntry
    candidate: Candidate


@dataclass(frozen=True)
class RunbookHit:
    title: str
    path: str
    kind: str
    heading: str
    text: str


@dataclass
class Findings:
    candidates: list[Candidate] = field(default_factory=list)
    missing: list[MissingInfo] = field(default_factory=list)
    queried_tools: set[str] = field(default_factory=set)
    changes: list[ChangeEntry] = field(default_factory=list)
    changes_checked: set[str] = field(default_factory=set)  # services whose change records were read
    runbooks: list[RunbookHit] = field(default_factory=list)  # best first
    # service -> (ts, message) of the log lines read so far, and of those an error cluster reports
    read_lines: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    reported_lines: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    levels_read: dict[str, set[str]] = field(default_factory=dict)  # service -> levels a read asked for in full
    levels_read_from: dict[str, datetime] = field(default_factory=dict)  # service -> where those reads start
    # Error/warn clusters too small to report: a change that names what one names is linked by it.
    link_signatures: list[Candidate] = field(default_factory=list)
    # Signal kind -> the direction the question says it moved (「命中率为什么降了」): series of
    # that kind are assessed in that direction (`shared.core.signal_semantics.stated_directions`).
    stated: dict[str, Direction] = field(default_factory=dict)


def _binding(invocation: ToolInvocation, raw_path: str, excerpt: str) -> EvidenceBinding:
    return EvidenceBinding(
        source_type=SOURCE_TYPES.get(invocation.tool_name, invocation.tool_name),
        tool_name=invocation.tool_name,
        source_invocation_id=invocation.invocation_id,
        source_invocation_ids=[invocation.invocation_id],
        raw_path=raw_path,
        evidence_excerpt=excerpt,
    )


def _refs(invocation: ToolInvocation) -> dict[str, str]:
    return {ref.raw_path: ref.text for ref in evidence_view(invocation).cited_refs()}


def _moved_metrics(anomalies: list[Candidate]) -> str:
    """「a、b 升高」, or 「a 升高、b 下降」 when they moved different ways."""
    ways = {c.moved for c in anomalies}
    if len(ways) == 1:
        return f"{'、'.join(c.metric for c in anomalies)} {ways.pop()}"
    return "、".join(f"{c.metric} {c.moved}" for c in anomalies)


def _stated_direction(metric: str, stated: dict[str, Direction]) -> Direction | None:
    """The direction the question says `metric`'s kind of signal moved, if it says one."""
    if not stated:
        return None
    found = configured_signal_semantics().classify(metric)
    return stated.get(found.kind) if found is not None else None


_NEVER = datetime.min.replace(tzinfo=UTC)


def _sort_ts(text: str | None) -> datetime:
    """A candidate's time as a sort key (the candidates sorted by it were chosen for having one)."""
    return _parse_ts(text or "") or _NEVER


def _parse_ts(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None


def _scope_label(invocation: ToolInvocation) -> str:
    service = invocation.request.get("service")
    return f"{invocation.tool_name}（service={service}）" if service else invocation.tool_name


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
        # Issue 15, point 5: a catalogued service the error lines name is checked too.
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
        if is_confirmation_question(query) or any(inv.tool_name == LOOKUP_KNOWLEDGE for inv in invocations):
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
        if is_confirmation_question(query):
            return []
        onsets = _onsets(self._collect(plan, invocations).candidates)
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
            start = _parse_ts(str((planned or {}).get("start") or ""))
            end = _parse_ts(str((planned or {}).get("end") or ""))
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
        onsets = _onsets(findings.candidates)
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
        narrow = is_confirmation_question(query)
        findings = self._collect(plan, invocations, query)
        evidence = [inv for inv in invocations if inv.tool_name in EVIDENCE_TOOLS]
        selected = self._answering(findings.candidates, query, asked, _hypothesis_symptoms(plan, query))
        # A compound question: what answers each other part too (「…？CPU 高不高？」 brings the
        # CPU series, quiet or not), after what answers the first.
        for part in classify_question(query).parts:
            own = set(find_symptoms(part))
            extra = self._answering(findings.candidates, part, own, _hypothesis_symptoms(Plan(), part))
            selected += [c for c in extra if c not in selected][:self._max_narrow_claims]
        claims = [
            Claim(
                claim_id=f"c{index}",
                claim_type=self._claim_type(candidate, narrow),
                claim_text=candidate.text,
                support_level=candidate.support,
                evidence_bindings=candidate.bindings,
            )
            for index, candidate in enumerate(selected, start=1)
        ]
        positives = [c for c in selected if c.kind != "negative"]
        missing = findings.missing
        if "service" in plan.missing_context:
            missing.insert(0, MissingInfo(text="问题中没有可识别的服务名（如 xxx-service），无法查询指标与日志；请指明服务。"))
        if positives and QUERY_CHANGES not in findings.queried_tools:
            missing.append(MissingInfo(
                text="本次未查询变更记录（发布、配置变更），无法判断异常开始前是否有相关变更。", tool_name=QUERY_CHANGES
            ))
        for symptom in sorted(asked):
            if not any(symptom in c.symptoms for c in findings.candidates) and evidence:
                missing.append(MissingInfo(
                    text=f"本次查询结果中没有与「{SYMPTOMS_BY_ID[symptom].label_zh}」直接对应的指标或日志。",
                    tool_name=QUERY_METRICS,
                ))
        return ExecutorEvidenceV2(
            claims=claims,
            hypotheses=self._hypotheses(selected, claims, findings.candidates, narrow),
            recommended_actions=self._actions(positives, asked, narrow, findings.runbooks),
            missing_info=_dedupe_missing(missing)[:MAX_MISSING],
        )

    def _answering(self, candidates: list[Candidate], query: str, asked: set[str],
                   hypothesis: frozenset[str]) -> list[Candidate]:
        """The findings that answer `query` (one question, or one part of a compound one)."""
        narrow = is_confirmation_question(query)
        # A change, an event or a cause answers "why", never "is it true": narrow answers leave
        # them out — unless what is asked is whether a change caused it.
        about_change = narrow and classify_question(query).hypothesis_change
        kept = [
            c for c in candidates
            if about_change or not (narrow and (c.kind in ("cause", "event") or (c.kind == "change" and c.related is not None)))
        ]
        return self._select(kept, asked, narrow, hypothesis, about_change,
                            _hypothesis_entities(query) if narrow else frozenset(),
                            _hypothesis_peers(query) if narrow else ())

    def _collect(self, plan: Plan, invocations: list[ToolInvocation], query: str = "") -> Findings:
        """Everything the invocations show: candidate claims, gaps, change records, runbook hits."""
        asked = set(plan.symptoms)
        findings = Findings(stated=stated_directions(query, configured_signal_semantics()))
        evidence = [inv for inv in invocations if inv.tool_name in EVIDENCE_TOOLS]
        for invocation in evidence:
            findings.queried_tools.add(invocation.tool_name)
            if invocation.lifecycle == "ERROR" or invocation.evidence_status == "ERROR":
                reason = (invocation.error or "unknown error")[:200]
                findings.missing.append(MissingInfo(
                    text=f"{_scope_label(invocation)} 调用失败（{reason}），相应证据缺失。",
                    tool_name=invocation.tool_name,
                ))
        # Metrics first: the symptoms they show decide which single error lines are relevant.
        for invocation in evidence:
            if invocation.tool_name == QUERY_METRICS and invocation.lifecycle == "READY":
                self._metrics_findings(invocation, findings)
        _keep_zoomed_out(findings)
        planned = [(step.tool_name, dict(step.arguments)) for step in plan.steps]
        observed = set(asked)
        for candidate in findings.candidates:
            if candidate.kind == "anomaly":
                observed |= candidate.symptoms
        for invocation in evidence:
            if invocation.tool_name == QUERY_LOGS and invocation.lifecycle == "READY":
                self._logs_findings(invocation, findings, observed, planned)
        self._events_findings(evidence, findings)
        for invocation in evidence:
            if invocation.tool_name == QUERY_CHANGES and invocation.lifecycle == "READY":
                self._changes_findings(invocation, findings)
            elif invocation.tool_name == LOOKUP_KNOWLEDGE and invocation.lifecycle == "READY":
                self._knowledge_findings(invocation, findings)
        self._link_causes(findings, evidence, asked)
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

    # --- metrics ---------------------------------------------------------------------------

    def _metrics_findings(self, invocation: ToolInvocation, findings: Findings) -> None:
        refs = _refs(invocation)
        data = _load(invocation, findings, MetricsResult)
        if data is None:
            return
        service = data.service or str(invocation.request.get("service") or "")
        start, end = data.start or "", data.end or ""
        if invocation.evidence_status == "NO_EVIDENCE":
            text = refs.get("summary")
            if text:
                findings.candidates.append(Candidate(
                    kind="negative", service=service, no_hit=True, score=0.5, bindings=[_binding(invocation, "summary", text)],
                    text=no_series_text(service, start, end, data.absent),
                ))
            return
        unexamined = data.not_examined
        if unexamined.count > 0:
            names = "、".join(unexamined.names)
            findings.missing.append(MissingInfo(
                text=f"{service} 另有 {unexamined.count} 条指标序列未检查（{names}{'等' if unexamined.count > len(unexamined.names) else ''}）。",
                tool_name=invocation.tool_name,
            ))
        for i, series in enumerate(data.series):
            metric, unit = series.metric, series.unit
            points = series.points
            values = series.values
            asked_direction = _stated_direction(metric, findings.stated)
            assessment = assess_series(metric, unit, values, asked_direction)
            if assessment.insufficient:
                findings.missing.append(MissingInfo(
                    text=f"{service} 的 {metric} 只有 {len(values)} 个数据点，不足以判断趋势。", tool_name=invocation.tool_name
                ))
                self._few_points(invocation, refs, service, series, i, start, end, findings, assessment.direction)
                continue
            anomaly = assessment.anomaly
            if anomaly is None:
                self._normal_series(invocation, refs, service, series, i, start, end, findings, assessment.direction)
                continue
            peak_path = f"series[{i}].points[{anomaly.peak_index}]"
            if peak_path not in refs:
                continue  # the fact cannot be cited: state nothing
            falling = anomaly.direction == "down"
            # The worst point is the clue: the highest of a rise, the lowest of a fall (never the
            # healthy level the fall started from).
            peak_ts, peak_value = points[anomaly.peak_index]
            bindings = [_binding(invocation, peak_path, refs[peak_path])]
            reached = "降至" if falling else "达到"
            text = f"{service} 的 {metric} 在 {peak_ts} {reached} {format_value(peak_value, unit)}"
            base_ts, base_value = points[anomaly.baseline_index]
            beyond = base_value > peak_value if falling else base_value < peak_value
            if (anomaly.relative or anomaly.trend) and beyond:
                base_path = f"series[{i}].points[{anomaly.baseline_index}]"
                if base_path in refs:
                    bindings.append(_binding(invocation, base_path, refs[base_path]))
                    compared = "低于" if falling else "高于"
                    text += f"，{compared}窗口前段的 {format_value(base_value, unit)}（{base_ts}）"
            if anomaly.baseline_already_high:
                findings.missing.append(MissingInfo(
                    text=f"{service} 的 {metric} 在窗口起点已处于高位，异常开始时间不在本次时间窗口内，建议扩大窗口。",
                    tool_name=invocation.tool_name,
                ))
            onset = points[anomaly.onset_index][0] if anomaly.onset_index is not None else None
            # The tool's onset ref (the same detector) when it marks this rise: citable.
            stated = series.onset
            onset_path = f"series[{i}].onset"
            onset_ref = None
            if stated is not None and stated.direction == anomaly.direction and stated.at == onset and onset_path in refs:
                onset_ref = (invocation, onset_path, refs[onset_path])
            text += self._episode(invocation, refs, series, i, onset_ref, peak_ts, bindings)
            findings.candidates.append(Candidate(
                kind="anomaly", service=service, text=text + "。", bindings=bindings, score=ANOMALY_BASE_SCORE + anomaly.score,
                symptoms=set(symptoms_for_metric(metric)), metric=metric, onset_ts=onset, onset_ref=onset_ref,
                moved="下降" if falling else "升高", already_high=anomaly.baseline_already_high,
            ))

    @staticmethod
    def _episode(invocation: ToolInvocation, refs: dict[str, str], series: MetricSeriesResult, i: int,
                 onset_ref: tuple[ToolInvocation, str, str] | None, peak_ts: str,
                 bindings: list[EvidenceBinding]) -> str:
        """When the move began (a rise or, for a signal whose fall is the trouble, a fall),
        whether it ended, and which instance was highest at a rise's peak, each from a ref of the
        tool's and cited."""
        text = ""
        falling = series.onset is not None and series.onset.direction == "down"
        if onset_ref is not None and series.onset is not None:
            bindings.append(_binding(*onset_ref))
            text += f"，约自 {series.onset.at} 起{'下降' if falling else '升高'}"
            end_path = f"series[{i}].end"
            last_path = f"series[{i}].points[{len(series.points) - 1}]"
            if series.end is not None and end_path in refs:
                bindings.append(_binding(invocation, end_path, refs[end_path]))
                text += f"，已于 {series.end.at} 恢复"
            elif series.points and last_path in refs:
                last_ts, last_value = series.points[-1]
                if last_ts != peak_ts:
                    bindings.append(_binding(invocation, last_path, refs[last_path]))
                    text += f"，至 {last_ts} 仍为 {format_value(last_value, series.unit)}，尚未恢复"
                else:
                    text += f"，至查询窗口结束仍在{'低位' if falling else '高位'}"
        top = series.top
        top_path = f"series[{i}].top"
        # The top instance is the highest at the combined peak: it says nothing of a fall.
        if top is not None and top_path in refs and top.instances > 1 and not falling:
            bindings.append(_binding(invocation, top_path, refs[top_path]))
            text += f"；峰值时 {top.label}={top.value} 最高"
        return text

    @staticmethod
    def _normal_series(invocation: ToolInvocation, refs: dict[str, str], service: str, series: MetricSeriesResult,
                       i: int, start: str, end: str, findings: Findings, direction: Direction = "up") -> None:
        path = f"series[{i}].summary"
        text = quiet_series_text(service, series, start, end, direction)
        if path not in refs or text is None:
            return
        metric = series.metric
        kind = metric_profile(metric, series.unit, direction=direction).kind
        findings.candidates.append(Candidate(
            kind="negative", service=service, score=1.0, metric=metric,
            symptoms=set(symptoms_for_metric(metric)),
            bindings=[_binding(invocation, path, refs[path])],
            text=text,
            preferred_negative={"error_rate": 0, "utilisation": 1, "latency": 2}.get(kind, 3),
        ))

    @staticmethod
    def _few_points(invocation: ToolInvocation, refs: dict[str, str], service: str, series: MetricSeriesResult,
                    i: int, start: str, end: str, findings: Findings, direction: Direction = "up") -> None:
        """A series too short for the detector still has a level, and an SRE asks for it (「CPU 多高」).
        Its summary ref is read as the verifier reads a cited summary (`summary_state` over the
        ref's facts, in the same normalised units): past the level abnormal for its kind, or risen
        over its median, it is an anomaly whose onset is unknown; no rise even over its minimum, it
        reads quiet; anything between is stated as read, never as normal. A signal whose fall is
        the trouble is stated as read (its lowest and its median), never as a rise nor as quiet:
        the summary's rise test says nothing of a fall."""
        summary_path = f"series[{i}].summary"
        stats = series.summary
        if stats is None or not series.points or summary_path not in refs:
            return
        facts = ref_facts(invocation, summary_path)
        state = summary_state(facts) if facts is not None else None
        if state is None:
            return
        reading = state.state
        metric, unit = series.metric, series.unit
        profile = metric_profile(metric, unit, direction=direction)
        bindings = [_binding(invocation, summary_path, refs[summary_path])]
        symptoms = set(symptoms_for_metric(metric))
        if direction == "down":
            findings.candidates.append(Candidate(
                kind="negative", service=service, score=0.9, metric=metric, bindings=bindings, symptoms=symptoms,
                preferred_negative=3,
                text=(f"{service} 的 {metric} 在 {start} 至 {end} 期间共 {stats.count} 个数据点，最低为 "
                      f"{format_value(stats.min, unit)}，中位数 {format_value(stats.median, unit)}；"
                      "数据点太少，无法判断趋势。"),
            ))
            return
        level = (f"{service} 的 {metric} 在 {start} 至 {end} 期间共 {stats.count} 个数据点，最高为 "
                 f"{format_value(stats.max, unit)}（{stats.max_at}），中位数 {format_value(stats.median, unit)}")
        if reading == "rise":
            peak = max(range(len(series.points)), key=lambda k: (series.points[k][1], -k))
            peak_path = f"series[{i}].points[{peak}]"
            if peak_path in refs:
                bindings.insert(0, _binding(invocation, peak_path, refs[peak_path]))
            findings.candidates.append(Candidate(
                kind="anomaly", service=service, bindings=bindings, metric=metric, symptoms=symptoms,
                score=ANOMALY_BASE_SCORE + FEW_POINTS_ANOMALY_SCORE, text=f"{level}；数据点太少，无法判断何时开始升高。",
            ))
            return
        findings.candidates.append(Candidate(
            kind="negative", service=service, score=0.9, metric=metric, bindings=bindings, symptoms=symptoms,
            preferred_negative={"error_rate": 0, "utilisation": 1, "latency": 2}.get(profile.kind, 3),
            text=f"{level}，未见明显升高；数据点太少，无法判断趋势。" if reading == "quiet"
            else f"{level}；数据点太少，无法判断趋势。",
        ))

    # --- logs ------------------------------------------------------------------------------

    def _logs_findings(self, invocation: ToolInvocation, findings: Findings, observed: set[str],
                       planned: list[tuple[str, dict[str, Any]]]) -> None:
        refs = _refs(invocation)
        data = _load(invocation, findings, LogsResult)
        if data is None:
            return
        service = data.service or str(invocation.request.get("service") or "")
        start, end = data.start or "", data.end or ""
        # A read of the error levels from before the question's window (`change_reads`) shows
        # what started after a change: its lines link a change, they are no finding of their own.
        planned_start, read_start = _planned_start(planned, service), _parse_ts(start)
        links_only = bool(data.level) and planned_start is not None and read_start is not None and read_start < planned_start
        if links_only and invocation.evidence_status == "NO_EVIDENCE":
            return
        if invocation.evidence_status == "NO_EVIDENCE":
            text = refs.get("summary")
            if text:
                levels = "/".join(data.level or []) or "任何级别的"
                contains = data.contains
                what = f"包含「{contains}」的{levels}" if contains else levels
                findings.candidates.append(Candidate(
                    kind="negative", service=service, no_hit=True, score=0.8, bindings=[_binding(invocation, "summary", text)],
                    text=f"{service} 在 {start} 至 {end} 期间没有 {what} 日志（0 matching lines）。",
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
        first_ts, last_ts = _parse_ts(start), _parse_ts(end)
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
            level_of(hits[k]) not in levels_read or (read_from is not None and (_parse_ts(hits[k].ts) or read_from) < read_from))] \
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
            bindings = [_binding(invocation, first_path, first_excerpt)]
            # The other end of the call the line reports, when its quote leaves it out.
            peer = named_peer(refs[first_path][len(hit_prefix(data, first)):], (service,))
            toward = f"（调用对象 {peer}）" if peer and peer.lower() not in first_excerpt.lower() else ""
            if cluster.count > 1:
                bindings.append(_binding(invocation, last_path, last_excerpt))
                text = f"{service} 在 {first.ts} 至 {last.ts} 期间多次出现 {first.level} 日志：「{first_excerpt.strip()}」{toward}。"
            else:
                text = f"{service} 在 {first.ts} 出现 {first.level} 日志：「{first_excerpt.strip()}」{toward}。"
            candidate = Candidate(
                kind="log_cluster", service=service, text=text, bindings=bindings,
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

    def _events_findings(self, evidence: list[ToolInvocation], findings: Findings) -> None:
        """Events: in each read of every level, the templates (`shared/log_templates.py`, over the
        read's lines) whose first line lies near the service's onset (EVENT_BEFORE_ONSET_MIN before
        it to EVENT_AFTER_ONSET_MIN after) and that are new to the read or rare in it, whatever
        their level or words; lines an error cluster reports are not events. At most
        MAX_EVENTS_PER_SERVICE per service, those before the onset and nearest it first. Each is an
        observation citing its line, with its time, level and template kept for a cause rule."""
        onsets = _onsets(findings.candidates)
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
                self._events_of(invocation, data, service, onset, findings, kept.setdefault(service, set()))

    @staticmethod
    def _events_of(invocation: ToolInvocation, data: LogsResult, service: str, onset: datetime,
                   findings: Findings, kept: set[str]) -> None:
        hits = data.hits
        stamps = [_parse_ts(hit.ts) for hit in hits]
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
        refs = _refs(invocation) if near else {}
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
            said = f"出现 {hit.level} 日志" if level_of(hit) in LOG_LEVELS else "出现日志"
            findings.candidates.append(Candidate(
                kind="event", service=service, text=f"{service} 在 {hit.ts} {said}：「{excerpt.strip()}」。",
                bindings=[_binding(invocation, path, excerpt)],
                # Nearer the onset ranks higher, and a line before it higher than one after.
                score=EVENT_SCORE + (0.5 if not after else 0.0) + 0.5 / (1.0 + minutes),
                first_ts=hit.ts, level=hit.level, excerpt=excerpt, signature=(invocation, path, refs[path]),
                template=template,
            ))

    # --- changes ---------------------------------------------------------------------------

    def _changes_findings(self, invocation: ToolInvocation, findings: Findings) -> None:
        refs = _refs(invocation)
        data = _load(invocation, findings, ChangesResult)
        if data is None:
            return
        service = data.service or str(invocation.request.get("service") or "")
        start, end = data.start or "", data.end or ""
        if service:
            findings.changes_checked.add(service)
        if invocation.evidence_status == "NO_EVIDENCE":
            text = refs.get("summary")
            if text and service:
                findings.candidates.append(Candidate(
                    kind="negative", service=service, no_hit=True, score=0.3, bindings=[_binding(invocation, "summary", text)],
                    text=f"{service} 在 {start} 至 {end} 期间没有变更记录（0 change records）。",
                    preferred_negative=7,
                ))
            return
        for k, change in enumerate(data.changes):
            path = f"changes[{k}]"
            ts = _parse_ts(change.ts)
            if path not in refs or ts is None:
                continue
            findings.changes.append(ChangeEntry(
                invocation=invocation, raw_path=path, ref_text=refs[path], ts=ts, stamp=change.ts,
                service=change.service or service, kind=change.kind, author=change.author, summary=change.summary,
            ))

    def _link_causes(self, findings: Findings, evidence: list[ToolInvocation], asked: set[str]) -> None:
        """Per troubled service: a linked change becomes a cause; else an ERROR signature that
        coincides with the onset; a change that merely came first is an observation (with a
        hypothesis); services whose change log shows nothing there are noted as such (an
        unrecorded change cannot be excluded). A change of a service with nothing wrong is
        mentioned as an observation, never blamed."""
        texts = [ref.text for inv in evidence for ref in evidence_view(inv).cited_refs()]
        names = {str(inv.request.get("service") or "") for inv in evidence} | {c.service for c in findings.changes}
        corpus = Corpus.of(texts, names)
        anomalies = [c for c in findings.candidates if c.kind == "anomaly" and _parse_ts(c.onset_ts or "")]
        clusters = [c for c in findings.candidates if c.kind == "log_cluster" and c.signature and _parse_ts(c.first_ts or "")]
        troubled = list(dict.fromkeys(c.service for c in anomalies + clusters))
        mentioned: set[int] = set()
        for service in troubled:
            # The anomaly the question asks about when there is one, else the earliest.
            own = sorted((c for c in anomalies if c.service == service),
                         key=lambda c: (not (c.symptoms & asked), _sort_ts(c.onset_ts)))
            first = own[0] if own else None
            signatures = sorted((c for c in clusters if c.service == service), key=lambda c: _sort_ts(c.first_ts))
            effect = first or signatures[0]
            effect_at = _parse_ts((first.onset_ts if first else effect.first_ts) or "")
            assert effect_at is not None
            near = sorted(
                (change for change in findings.changes if change_precedes(change.ts, effect_at)),
                key=lambda change: (-change.ts.timestamp(), change.raw_path),
            )
            quiet = sorted((c for c in findings.link_signatures if c.service == service and _parse_ts(c.first_ts or "")),
                           key=lambda c: _sort_ts(c.first_ts))
            earliest = min((_sort_ts(c.onset_ts) for c in own), default=None)
            linked = self._linked_change(near, signatures + quiet, corpus, first, earliest)
            if linked is not None:
                change, signature, tokens = linked
                mentioned.add(id(change))
                findings.candidates.append(self._change_cause(change, signature, tokens, first, effect_at))
                continue
            by_mode = self._mechanism_change(near, [c for c in own if c.onset_ref is not None], service)
            if by_mode is not None:
                mentioned.add(id(by_mode.related_change))
                findings.candidates.append(by_mode.candidate)
                continue
            # Time alone is a weaker lead than a shared identifier: only a change in the hour
            # before the effect is named as having come first.
            own_near = [change for change in near if change.service == service
                        and minutes_between(change.ts, effect_at) <= CHANGE_BEFORE_ONSET_MIN]
            if own_near:
                change = own_near[0]
                mentioned.add(id(change))
                minutes = max(minutes_between(change.ts, effect_at), 0.0)
                findings.candidates.append(Candidate(
                    kind="change", service=service, text=_change_text(change),
                    bindings=[_binding(change.invocation, change.raw_path, change.ref_text)],
                    score=CHANGE_SCORE, symptoms=set(effect.symptoms), first_ts=change.stamp,
                    related=effect, minutes_before=minutes,
                ))
            elif service in findings.changes_checked:
                findings.missing.append(MissingInfo(
                    text=(
                        f"变更记录中没有 {service} 在异常开始（约 {first.onset_ts if first else effect.first_ts}）前 "
                        f"{CHANGE_BEFORE_ONSET_MIN} 分钟内的发布或配置变更；未登记的变更无法排除。"
                    ),
                    tool_name=QUERY_CHANGES,
                ))
            if first is not None:
                lines = [c for c in clusters if c.service == service or names_service(c.excerpt, service)]
                event = self._event_cause(first, lines, anomalies, troubled)
                if event is None:
                    event = self._resource_cause(first, own, signatures)
                if event is None and first.onset_ref is None:
                    # The series asked about has no onset of its own (a sawtooth of restarts): the
                    # cause is sought for the service's earliest anomaly that has one (the panic
                    # that restarts it also starts its 5xx).
                    timed = [c for c in own if c.onset_ref is not None]
                    event = self._event_cause(timed[0], lines, anomalies, troubled) if timed else None
                if event is not None:
                    findings.candidates.append(event)
        # A change the causes above did not mention: observed, not blamed (the latest per service).
        for change in sorted(findings.changes, key=lambda c: (-c.ts.timestamp(), c.raw_path)):
            if id(change) in mentioned or change.service in troubled:
                continue
            mentioned.add(id(change))
            troubled.append(change.service)  # one per service
            findings.candidates.append(Candidate(
                kind="change", service=change.service, text=_change_text(change),
                bindings=[_binding(change.invocation, change.raw_path, change.ref_text)],
                score=ROUTINE_CHANGE_SCORE, first_ts=change.stamp,
            ))

    @staticmethod
    def _linked_change(near: list[ChangeEntry], signatures: list[Candidate], corpus: Corpus,
                       anomaly: Candidate | None, earliest: datetime | None = None,
                       ) -> tuple[ChangeEntry, Candidate, list[IdentifierMatch]] | None:
        """The latest change before the effect that shares a distinctive identifier with an
        error/warn signature starting after it, with that signature and the identifiers; else the
        latest change after which a new kind of error/warn line starts (`new_kind_after`, the
        link check's rule), with that line and no identifiers. Time alone being the weaker lead,
        such a change must also come before the service's earliest onset (`earliest`): a release
        after a disk began to fill did not fill it, whatever new warnings the filling brings."""
        for change in near:
            for signature in signatures:
                first_at = _parse_ts(signature.first_ts or "")
                if signature.level not in BAD_LEVELS or first_at is None or not change_precedes(change.ts, first_at):
                    continue
                matches = shared_identifiers(change.ref_text, [signature.signature[2]], corpus) if signature.signature else []
                if matches:
                    return change, signature, matches
        onset_at = _parse_ts(anomaly.onset_ts or "") if anomaly is not None and anomaly.onset_ref is not None else None
        onsets = [LinkEnd("onset", "", onset_at)] if onset_at is not None else []
        ends: list[tuple[LinkEnd, Candidate]] = []
        for signature in signatures:
            end = _signature_end(signature)
            if end is not None:
                ends.append((end, signature))
        if earliest is not None:
            onsets = [LinkEnd("onset", "", earliest)]
        for change in near:
            if earliest is not None and not change_precedes(change.ts, earliest):
                continue
            novel = new_kind_after(LinkEnd("change", change.ref_text, change.ts), [end for end, _ in ends], onsets)
            if novel is not None:
                return change, next(signature for end, signature in ends if end is novel), []
        return None

    @staticmethod
    def _mechanism_change(near: list[ChangeEntry], anomalies: list[Candidate], service: str) -> _ModeCause | None:
        """The latest change of the service that names a setting of the failure mode of one of its
        anomalies' metrics, before that anomaly's onset (`mechanism_link`, the link check's rule):
        a cause citing the change and the onset."""
        for change in (c for c in near if c.service == service):
            onsets = [LinkEnd("onset", "", _parse_ts(a.onset_ts or ""), a.service, a.metric) for a in anomalies
                      if _parse_ts(a.onset_ts or "") is not None]
            found = mechanism_link(LinkEnd("change", change.ref_text, change.ts, change.service), onsets)
            if found is None or not found[2]:
                continue
            onset, _, words = found
            anomaly = next(a for a in anomalies if a.metric == onset.metric)
            assert anomaly.onset_ref is not None
            text = (
                f"{change.service} 在 {change.stamp} 的 {change.kind} 变更「{_bounded_summary(change.summary)}」"
                f"很可能是 {anomaly.metric} {anomaly.moved}的原因：变更涉及 {words}，且变更早于 {anomaly.metric} "
                f"开始{anomaly.moved}（约 {anomaly.onset_ts}）。"
            )
            bindings = [_binding(change.invocation, change.raw_path, change.ref_text),
                        _binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2])]
            return _ModeCause(change, Candidate(
                kind="cause", service=service, text=text, bindings=bindings, score=CAUSE_SCORE,
                symptoms=set(anomaly.symptoms), first_ts=change.stamp, support="indirect", link_token=words,
                related=anomaly, change_linked=True,
            ))
        return None

    @staticmethod
    def _change_cause(change: ChangeEntry, signature: Candidate, matches: list[IdentifierMatch], anomaly: Candidate | None,
                      effect_at: datetime) -> Candidate:
        assert signature.signature is not None
        log_invocation, log_path, log_text = signature.signature
        token = _spelled(matches[0].change, change.ref_text) if matches else ""
        in_line = _spelled(matches[0].signature, log_text) if matches else ""
        line_excerpt = (_excerpt_with(log_text, in_line) if in_line else signature.decisive) or signature.excerpt
        bindings = [
            _binding(change.invocation, change.raw_path, change.ref_text),
            _binding(log_invocation, log_path, line_excerpt),
        ]
        # Names only where they differ from the change's service: the line stays short.
        def owner(service: str) -> str:
            return "" if service == change.service else f"{service} 的 "

        if anomaly is not None and anomaly.onset_ref is not None:
            effect = f"{owner(anomaly.service)}{anomaly.metric} {anomaly.moved}"
            began = f"{anomaly.metric} 开始{anomaly.moved}（约 {anomaly.onset_ts}）"
            bindings.append(_binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2]))
        elif anomaly is not None and anomaly.bindings:
            # A series whose onset has no ref of its own (a sawtooth): its cited level names it.
            effect = f"{owner(anomaly.service)}{anomaly.metric} {anomaly.moved}"
            began = f"该日志首次出现（{signature.first_ts}）"
            bindings.append(anomaly.bindings[0])
        else:
            effect = f"{owner(signature.service)}{signature.level} 日志"
            began = f"该日志首次出现（{signature.first_ts}）"
        line = f"{owner(signature.service)}{signature.level} 日志"
        if not matches:
            # A new kind of line after the change: what it says, and when it first appeared.
            quote = _quote_around(line_excerpt.strip(), None, MAX_EVENT_QUOTE)
            shared = f"变更后才开始出现的 {line}「{quote}」（首次出现于 {signature.first_ts}）"
        elif token.lower() == in_line.lower():
            shared = f"变更内容与 {line}都出现 {token}"
        else:
            shared = f"变更内容提到 {token}，{line}中出现 {in_line}"
        # The minutes between are said by the two instants (the change's, the onset's), which
        # every checker binds to the cited refs; a bare duration binds to no single ref.
        text = (
            f"{change.service} 在 {change.stamp} 的 {change.kind} 变更「{_bounded_summary(change.summary)}」"
            f"很可能是 {effect}的原因：{shared}，且变更早于{' ' if began[:1].isascii() else ''}{began}。"
        )
        return Candidate(
            kind="cause", service=anomaly.service if anomaly else signature.service, text=text, bindings=bindings,
            score=CAUSE_SCORE, symptoms=set(anomaly.symptoms if anomaly else signature.symptoms),
            first_ts=change.stamp, support="indirect", link_token=token, related=anomaly, change_linked=True,
        )

    @staticmethod
    def _event_cause(anomaly: Candidate, clusters: list[Candidate], anomalies: list[Candidate],
                     troubled: list[str]) -> Candidate | None:
        """An ERROR/FATAL signature whose first line coincides with the onset (at most
        CAUSE_AFTER_ONSET_MIN after it): the event claimed as the anomaly's cause. Said with it,
        each cited: a saturation of a specific kind that starts with it on the same service (the
        signature's own symptom, e.g. a pool filling up while pool timeouts start: the resource,
        not the generic latency, is what an SRE acts on), and the quote keeps the name of another
        checked service the line points to (an upstream)."""
        onset_at = _parse_ts(anomaly.onset_ts or "")
        if onset_at is None or anomaly.onset_ref is None:
            return None
        near: list[tuple[int, float, float, Candidate]] = []
        for cluster in clusters:
            first_at = _parse_ts(cluster.first_ts or "")
            # An error line; or a warning that names a failure mode of the catalogue (a GC pause,
            # a pool at its limit): a mechanism, not noise.
            typed = cluster.level == "WARN" and bool(configured_failure_modes().line_mentions(cluster.excerpt))
            if (cluster.level not in ("ERROR", "FATAL") and not typed) or first_at is None or cluster.signature is None:
                continue
            minutes = minutes_between(onset_at, first_at)
            # A line that reports the very events the series counts says what they are, a few
            # minutes either way (`causal_link.explains_onset`).
            after = COINCIDE_MIN if reports_series(cluster.signature[2], anomaly.metric) else CAUSE_AFTER_ONSET_MIN
            if -COINCIDE_MIN <= minutes <= after:
                near.append((_SEVERITY.get(cluster.level, len(_SEVERITY)), minutes, -cluster.score, cluster))
        if not near:
            return None
        # The most severe line, then the one that started first: a crash before the restarts it
        # causes, never the back-off warning that follows it.
        *_, cluster = min(near, key=lambda item: item[:3])
        assert cluster.signature is not None
        log_invocation, log_path, log_text = cluster.signature
        upstream = next((s for s in troubled if s not in (cluster.service, anomaly.service) and names_service(log_text, s)), None)
        excerpt = (_excerpt_with(log_text, upstream) if upstream else None) or cluster.decisive or cluster.excerpt
        quote = _quote_around(excerpt.strip(), upstream, MAX_EVENT_QUOTE)
        bindings = [_binding(log_invocation, log_path, excerpt)]
        specific = {s for s in cluster.symptoms if s in SYMPTOMS_BY_ID and not SYMPTOMS_BY_ID[s].generic}
        resource = next((
            c for c in sorted(anomalies, key=lambda c: _sort_ts(c.onset_ts))
            if c is not anomaly and c.service == anomaly.service and c.onset_ref is not None and c.symptoms & specific
            and coincide(_sort_ts(c.onset_ts), onset_at)
        ), None)
        where = f"{cluster.service} 的 " if cluster.service != anomaly.service else ""
        # The other end of the failing call, when the line names one the quote leaves out (a
        # host in a JSON field, at the tail of a long exception): what an SRE checks next.
        peer = None if upstream else named_peer(log_text, (cluster.service, anomaly.service))
        toward = f"，调用对象 {peer}" if peer and peer.lower() not in quote.lower() else ""
        cause = f"{where}{cluster.level} 日志「{quote}」（首次出现于 {cluster.first_ts}{toward}）"
        if resource is not None:
            assert resource.onset_ref is not None
            cause = f"{anomaly.service} 的 {resource.metric} {resource.moved}（约自 {resource.onset_ts} 起）与 {cause}"
            bindings.append(_binding(resource.onset_ref[0], resource.onset_ref[1], resource.onset_ref[2]))
        text = (
            f"{cause}很可能是 {anomaly.service} 的 {anomaly.metric} {anomaly.moved}（约自 {anomaly.onset_ts} 起）的直接原因："
            f"{'' if resource is not None else '二者'}开始时间接近。"
        )
        bindings.append(_binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2]))
        return Candidate(
            kind="cause", service=anomaly.service, text=text, bindings=bindings,
            score=CAUSE_SCORE - 1, symptoms=set(anomaly.symptoms) | (resource.symptoms if resource else set()),
            first_ts=cluster.first_ts, support="indirect",
        )

    @staticmethod
    def _resource_cause(anomaly: Candidate, own: list[Candidate], signatures: list[Candidate]) -> Candidate | None:
        """A limited resource that ran out before the symptom (`causal_link.resource_link`): a
        series measuring it (a pool's connections in use, memory …) starts rising no later than
        the anomaly, and lines naming that failure mode's exhaustion follow it — said as one
        chain, each end cited: the resource's onset, the first line, the anomaly's onset."""
        if saturable(anomaly.metric):
            # The anomaly asked about (or the earliest) is the resource itself: its effect is the
            # service's first other anomaly that starts after it (the errors of an OOM).
            later = sorted((c for c in own if not saturable(c.metric) and c.onset_ref is not None
                            and (_parse_ts(c.onset_ts or "") or datetime.min.replace(tzinfo=UTC))
                            >= (_parse_ts(anomaly.onset_ts or "") or datetime.max.replace(tzinfo=UTC))),
                           key=lambda c: _sort_ts(c.onset_ts))
            if not later:
                return None
            anomaly = later[0]
        onset_at = _parse_ts(anomaly.onset_ts or "")
        if onset_at is None or anomaly.onset_ref is None:
            return None
        catalogue = configured_failure_modes()
        for resource in sorted(own, key=lambda c: _parse_ts(c.onset_ts or "") or onset_at):
            mechanism = saturable(resource.metric)
            resource_at = _parse_ts(resource.onset_ts or "")
            if (resource is anomaly or not mechanism or resource.onset_ref is None or resource_at is None
                    or not 0 <= minutes_between(resource_at, onset_at) <= RESOURCE_BEFORE_EFFECT_MIN):
                continue
            lines = [c for c in signatures if c.signature is not None and c.level in BAD_LEVELS
                     and mechanism in {m.id for m in catalogue.for_line(c.signature[2])}
                     and -SIGNATURE_AFTER_ONSET_MIN <= minutes_between(resource_at, _parse_ts(c.first_ts or "") or resource_at)
                     <= RESOURCE_LINES_AFTER_MIN]
            if not lines:
                continue
            line = min(lines, key=lambda c: (_SEVERITY.get(c.level, len(_SEVERITY)), _parse_ts(c.first_ts or "")))
            assert line.signature is not None
            log_invocation, log_path, _ = line.signature
            excerpt = line.decisive or line.excerpt
            quote = _quote_around(excerpt.strip(), None, MAX_EVENT_QUOTE)
            text = (
                f"{resource.service} 的 {resource.metric} {resource.moved}（约自 {resource.onset_ts} 起），"
                f"随后出现 {line.level} 日志「{quote}」（首次出现于 {line.first_ts}）："
                f"很可能是 {anomaly.service} 的 {anomaly.metric} {anomaly.moved}（约自 {anomaly.onset_ts} 起）的原因。"
            )
            bindings = [_binding(resource.onset_ref[0], resource.onset_ref[1], resource.onset_ref[2]),
                        _binding(log_invocation, log_path, excerpt),
                        _binding(anomaly.onset_ref[0], anomaly.onset_ref[1], anomaly.onset_ref[2])]
            return Candidate(
                kind="cause", service=anomaly.service, text=text, bindings=bindings, score=CAUSE_SCORE - 1,
                symptoms=set(anomaly.symptoms) | set(resource.symptoms), first_ts=resource.onset_ts, support="indirect",
            )
        return None

    # --- knowledge -------------------------------------------------------------------------

    def _knowledge_findings(self, invocation: ToolInvocation, findings: Findings) -> None:
        """Runbook hits, kept only to shape recommended_actions: never a claim, never a fact."""
        data = _load(invocation, findings, KnowledgeResult)
        if data is None:
            return
        for doc in data.docs:
            for chunk in doc.chunks:
                # A deduped chunk (returned earlier in the run) has no text here, but its
                # runbook can still be pointed to.
                findings.runbooks.append(RunbookHit(
                    title=doc.title, path=doc.path, kind=doc.kind, heading=chunk.heading, text=chunk.text or "",
                ))

    # --- selection -------------------------------------------------------------------------

    def _select(self, candidates: list[Candidate], asked: set[str], narrow: bool,
                hypothesis: frozenset[str] = frozenset(), about_change: bool = False,
                entities: frozenset[str] = frozenset(), peers: tuple[str, ...] = ()) -> list[Candidate]:
        positives = sorted((c for c in candidates if c.kind != "negative"), key=lambda c: -c.score)
        negatives = sorted((c for c in candidates if c.kind == "negative"), key=lambda c: (c.preferred_negative, -c.score))

        def relevant(candidate: Candidate) -> bool:
            return not asked or bool(candidate.symptoms & asked)

        # A question about several services: every service whose evidence shows something wrong
        # gets its strongest finding in first, so that none is crowded out by another service's
        # (issue 14, point 4: a checked service's anomaly is never left out).
        findings = [c for c in positives if c.kind in ("anomaly", "log_cluster")]
        troubled = list(dict.fromkeys(c.service for c in findings))

        def one_per_service(pool: list[Candidate]) -> list[Candidate]:
            firsts = [next(c for c in pool if c.service == service) for service in dict.fromkeys(c.service for c in pool)]
            return firsts + [c for c in pool if c not in firsts]

        routine = [c for c in positives if c.kind == "change" and c.related is None]
        if narrow:
            # Confirm the one thing asked: its own evidence, else the evidence that it is absent.
            # The findings that show more of what was asked first (a log line naming both the
            # premise and the hypothesis before a metric showing one of them), then by score.
            covering = sorted((c for c in positives if relevant(c) and c not in routine and c.kind in ("anomaly", "log_cluster")),
                              key=lambda c: -len(c.symptoms & (asked | hypothesis)))
            chosen = one_per_service(covering)
            if hypothesis and not any(c.symptoms & hypothesis for c in chosen):
                # 「报错是不是因为磁盘满了」: the premise (errors) is shown, and so is the hypothesis'
                # own signal read in full — a quiet series answers 「证据不支持」 (issue 15).
                on_signal = [c for c in negatives if c.symptoms & hypothesis]
                chosen = sorted(on_signal, key=lambda c: c.no_hit)[:1] + chosen
            if entities and not any(_typed(c) & entities for c in chosen):
                # 「是线程池耗尽的问题吗」: the thing the catalogue types the hypothesis as — a
                # finding about that very thing (a thread pool, not a database pool), else its
                # series read quiet — goes first, so that the answer is about it.
                on_entity = [c for c in positives if c.kind in ("anomaly", "log_cluster") and _typed(c) & entities]
                quiet = [c for c in negatives if not c.no_hit and _typed(c) & entities]
                chosen = (on_entity or quiet)[:1] + chosen
            if peers and not any(_names_any(c, peers) for c in chosen):
                # 「是 pay.internal 不可用的问题吗」: what names that host or service goes first.
                chosen = [c for c in positives if c.kind in ("anomaly", "log_cluster") and _names_any(c, peers)][:1] + chosen
            if not chosen:
                chosen = [c for c in negatives if relevant(c) and not c.no_hit] + [c for c in negatives if c.no_hit]
            if not chosen:
                # Nothing reads the premise either way (「实例总是被重启」 with no restart series):
                # what the evidence does show is the answer's ground, not silence.
                chosen = [c for c in positives if c.kind in ("anomaly", "log_cluster")][: self._max_narrow_claims]
            service_count = len({c.service for c in chosen})
            chosen = chosen[: self._max_narrow_claims * max(1, service_count)]
            if entities:
                # The line that names the thing (a `panic:`, a RejectedExecutionException) says
                # more than a series typed as it, and the most severe such line more than a
                # back-off warning about it: shown too unless a line as severe already is.
                def severity(c: Candidate) -> int:
                    return _SEVERITY.get(c.level, len(_SEVERITY))

                lines = sorted((c for c in positives if c.kind == "log_cluster" and _typed(c) & entities),
                               key=lambda c: (severity(c), c.first_ts or ""))
                shown = [c for c in chosen if c.kind == "log_cluster" and _typed(c) & entities]
                if lines and not any(severity(c) <= severity(lines[0]) for c in shown):
                    chosen += lines[:1]
            if about_change:
                # 「是不是新版本导致的」: the change first — linked, else the one that came first,
                # else any in the window, else the search that found none — then the premise.
                change_first = (
                    [c for c in positives if c.kind == "cause" and c.change_linked]
                    or [c for c in positives if c.kind == "change" and c.related is not None]
                    or routine
                    or [c for c in negatives if c.no_hit and any(b.tool_name == QUERY_CHANGES for b in c.bindings)]
                )[:1]
                return change_first + [c for c in chosen if c not in change_first]
            # A change in the window of a service with nothing wrong is mentioned, never blamed.
            normal = {c.service for c in chosen if c.kind == "negative"} - {c.service for c in chosen if c.kind != "negative"}
            return chosen + [c for c in routine if c.service in normal]

        selected: list[Candidate] = []
        counts: dict[tuple[str, str], int] = {}
        budget = max(self._max_claims, len(troubled))

        def take(candidate: Candidate) -> None:
            if candidate in selected or len(selected) >= budget:
                return
            cap = {"anomaly": MAX_ANOMALY_CLAIMS_PER_SERVICE, "log_cluster": MAX_LOG_CLAIMS_PER_SERVICE, "change": 1,
                   "cause": 1}.get(candidate.kind, 2)
            key = (candidate.service, candidate.kind)
            if counts.get(key, 0) >= cap:
                return
            counts[key] = counts.get(key, 0) + 1
            selected.append(candidate)

        if len(troubled) > 1:
            for service in troubled:
                own = [c for c in findings if c.service == service]
                take(next((c for c in own if relevant(c)), own[0]))
        for candidate in positives:
            if asked and relevant(candidate):
                take(candidate)
        services = list(dict.fromkeys(c.service for c in candidates))
        for service in services:
            # A change alone is no finding: a service whose only record is a change looks normal.
            own_positive = [c for c in positives if c.service == service and c.kind != "change"]
            own_negative = [c for c in negatives if c.service == service]
            if not own_positive:
                # A service that looks normal: say so, with what was asked about first.
                own_negative.sort(key=lambda c: not relevant(c))
                for candidate in own_negative[:2]:
                    take(candidate)
            elif asked and not any(relevant(c) for c in own_positive):
                for candidate in [c for c in own_negative if relevant(c) and not c.no_hit][:1]:
                    take(candidate)
        for candidate in positives:
            take(candidate)
        return selected

    # --- hypotheses and actions -------------------------------------------------------------

    @staticmethod
    def _hypotheses(selected: list[Candidate], claims: list[Claim], candidates: list[Candidate],
                    narrow: bool) -> list[Hypothesis]:
        """Possible explanations, never confirmed facts: a log burst that starts near a metric's
        onset may be related; the usual causes of each observed symptom."""
        ids = {id(c): claim.claim_id for c, claim in zip(selected, claims)}
        hypotheses: list[Hypothesis] = []
        onsets = {id(c): at for c in selected if c.kind == "anomaly" and (at := _parse_ts(c.onset_ts or "")) is not None}
        anomalies = [c for c in selected if id(c) in onsets]
        firsts = {id(c): at for c in candidates if c.kind == "log_cluster" and (at := _parse_ts(c.first_ts or "")) is not None}
        clusters = [c for c in candidates if id(c) in firsts]
        for service in dict.fromkeys(c.service for c in anomalies):
            own = sorted((c for c in anomalies if c.service == service), key=lambda c: onsets[id(c)])
            onset = onsets[id(own[0])]
            near: list[tuple[float, float, Candidate]] = []
            for cluster in (c for c in clusters if c.service == service):
                minutes = (firsts[id(cluster)] - onset).total_seconds() / 60
                if -CORRELATION_BEFORE_MIN <= minutes <= CORRELATION_AFTER_MIN:
                    near.append((abs(minutes), -cluster.score, cluster))
            if not near:
                continue
            # The burst that starts closest to the onset is the likeliest companion.
            cluster = min(near, key=lambda item: item[:2])[2]
            related = [ids[id(c)] for c in own] + ([ids[id(cluster)]] if id(cluster) in ids else [])
            hypotheses.append(Hypothesis(
                text=(
                    f"{service} 的 {_moved_metrics(own)}（最早约自 {own[0].onset_ts} 起）与 "
                    f"{cluster.level} 日志「{_short(cluster.excerpt)}」（首次出现于 {cluster.first_ts}）时间接近，"
                    f"二者可能相关；是否为根因需结合变更记录与代码进一步确认。"
                ),
                related_claim_ids=related,
            ))
        for change in (c for c in selected if c.kind == "change" and c.related is not None):
            anomaly = change.related
            assert anomaly is not None  # chosen for having one
            related = [ids[id(anomaly)]] if id(anomaly) in ids else []
            hypotheses.append(Hypothesis(
                text=(
                    f"{change.service} 的变更（{change.first_ts}）发生在异常开始（约 "
                    f"{anomaly.onset_ts or anomaly.first_ts} 起）前约 {round(change.minutes_before)} 分钟，变更可能与异常相关；"
                    f"但变更内容与错误日志没有共同的关键标识，时间接近不能证明因果，需对照变更内容与错误日志确认。"
                ),
                related_claim_ids=related + [ids[id(change)]],
            ))
        if not narrow:
            # The usual causes of what the metrics show (of what the logs show, when metrics show nothing).
            sources = [c for c in selected if c.kind == "anomaly"] or [c for c in selected if c.kind == "log_cluster"]
            seen: set[tuple[str, str]] = set()
            for candidate in sources:
                for symptom in sorted(candidate.symptoms):
                    if (candidate.service, symptom) in seen:
                        continue
                    seen.add((candidate.service, symptom))
                    info = SYMPTOMS_BY_ID[symptom]
                    hypotheses.append(Hypothesis(
                        text=(
                            f"{candidate.service} 的 {info.label_zh} 异常的常见原因包括："
                            f"{'、'.join(info.possible_causes_zh)}；本次证据尚不能确认是哪一种。"
                        ),
                        related_claim_ids=[ids[id(candidate)]],
                    ))
        return hypotheses[: 1 if narrow else MAX_HYPOTHESES]

    @staticmethod
    def _actions(positives: list[Candidate], asked: set[str], narrow: bool,
                 runbooks: list[RunbookHit]) -> list[RecommendedAction]:
        order: list[str] = [s for s in sorted(asked) if any(s in c.symptoms for c in positives)]
        for candidate in positives:
            order += [s for s in sorted(candidate.symptoms) if s not in order and (not narrow or not asked or s in asked)]
        actions: list[RecommendedAction] = []
        linked = [c for c in positives if c.kind == "cause" and c.change_linked]
        if positives and not narrow:
            actions += _runbook_actions(runbooks, by_specificity(order), allow_rollback=bool(linked))
        for cause in linked:
            what = f"中与 {cause.link_token} 相关的内容" if cause.link_token else "内容与其后首次出现的日志"
            actions.append(RecommendedAction(
                text=f"核对 {cause.first_ts} 的变更{what}；确认是该变更引起后，按变更回滚流程处理。",
                requires_human_confirmation=True,
            ))
        for change in (c for c in positives if c.kind == "change" and c.related is not None):
            actions.append(RecommendedAction(
                text=f"核对 {change.service} 在 {change.first_ts} 的变更内容与异常现象是否相关。",
                requires_human_confirmation=False,
            ))
        # The read-only first steps of the failure modes the findings show (the catalogue's), the
        # cause's first: what an SRE checks for this kind of failure.
        for mechanism in _mechanisms(positives)[:MAX_MECHANISM_ACTIONS]:
            step = mechanism.next_steps_zh[0]
            if all(a.text != step for a in actions):
                actions.append(RecommendedAction(text=step, requires_human_confirmation=False))
        for symptom in order:
            for action in SYMPTOMS_BY_ID[symptom].actions:
                if action.after_linked_change and not linked:
                    continue  # rollback advice follows only from a checked link
                if all(a.text != action.text for a in actions):
                    actions.append(RecommendedAction(text=action.text, requires_human_confirmation=action.changes_system))
        if not linked:
            # No rollback advice without a linked change, whatever a runbook's first step says.
            actions = [a for a in actions if not advises_rollback(a.text)]
        if not actions and any(c.kind in ("anomaly", "log_cluster", "cause") for c in positives):
            # Something is wrong, of no kind we know a step for: compare it with what changed.
            actions.append(RecommendedAction(
                text="对照异常开始的时间，核对同期的发布、配置变更与上下游服务状态。",
                requires_human_confirmation=False,
            ))
        if not actions:
            actions.append(RecommendedAction(
                text="当前证据未显示异常；如仍有疑虑，请提供告警名称或具体时间点以缩小排查范围。",
                requires_human_confirmation=False,
            ))
        return actions[: 2 if narrow else MAX_ACTIONS]


def _earlier_start(candidates: list[Candidate], new: Candidate) -> Candidate | None:
    """The reported cluster of the same kind of line (equal masks) as `new`, a cluster of a read
    reaching further back; when `new` starts earlier, that finding now starts at `new`'s first
    line (its text, first binding and signature), so a line's first time comes from every read
    and the line is one finding. None when no cluster of that kind was reported."""
    same = next((c for c in candidates if c.kind == "log_cluster" and c.service == new.service and c.signature
                 and new.signature and mask(_line_of(c)) == mask(_line_of(new))), None)
    if same is None:
        return None
    new_at, same_at = _parse_ts(new.first_ts or ""), _parse_ts(same.first_ts or "")
    if new_at is None or same_at is None or new_at >= same_at:
        return same
    last = same.bindings[-1]
    same.first_ts, same.signature, same.decisive = new.first_ts, new.signature, new.decisive or same.decisive
    same.excerpt = new.excerpt
    same.bindings = [new.bindings[0], last]
    last_ts = same.text.split(" 至 ", 1)[1].split(" 期间", 1)[0] if " 至 " in same.text else same_at.isoformat()
    same.text = f"{same.service} 在 {new.first_ts} 至 {last_ts} 期间多次出现 {new.level} 日志：「{new.excerpt.strip()}」。"
    return same


def _line_of(candidate: Candidate) -> str:
    """The message of a cluster's first line (its ref text after the tool's prefix)."""
    assert candidate.signature is not None
    return candidate.excerpt or candidate.signature[2]


def _failed(invocations: list[ToolInvocation], tool_name: str, service: str) -> bool:
    """Whether a call of this tool about this service failed in the run."""
    return any(inv.tool_name == tool_name and str(inv.request.get("service") or "") == service
               and (inv.lifecycle == "ERROR" or inv.evidence_status == "ERROR") for inv in invocations)


def _keep_zoomed_out(findings: Findings) -> None:
    """A series read twice (the planned window, and a read reaching further back because it was
    already high at the window's start) is one finding: the read that shows where the move began,
    and no note asking to widen the window that was widened."""
    dated = {(c.service, c.metric) for c in findings.candidates if c.kind == "anomaly" and c.onset_ts}
    findings.candidates = [c for c in findings.candidates
                           if not ((c.service, c.metric) in dated and c.kind in ("anomaly", "negative")
                                   and not c.onset_ts)]
    findings.missing = [m for m in findings.missing if not any(
        f"{service} 的 {metric} 在窗口起点已处于高位" in m.text for service, metric in dated)]


def _contains_filter(data: LogsResult) -> bool:
    return bool(data.contains)


def _onsets(candidates: list[Candidate]) -> dict[str, datetime]:
    """service -> the earliest onset of its metric anomalies, else its first ERROR/FATAL line."""
    onsets: dict[str, datetime] = {}
    for candidate in candidates:
        if candidate.kind == "anomaly":
            at = _parse_ts(candidate.onset_ts or "")
            if at is not None and (candidate.service not in onsets or at < onsets[candidate.service]):
                onsets[candidate.service] = at
    errors: dict[str, datetime] = {}
    for candidate in candidates:
        if candidate.kind == "log_cluster" and candidate.level.upper() in ("ERROR", "FATAL") and candidate.service not in onsets:
            at = _parse_ts(candidate.first_ts or "")
            if at is not None and (candidate.service not in errors or at < errors[candidate.service]):
                errors[candidate.service] = at
    return {**onsets, **errors}


def _planned_start(calls: list[tuple[str, dict[str, Any]]], service: str) -> datetime | None:
    """The start of the service's first planned query_logs call's window."""
    for name, arguments in calls:
        if name == QUERY_LOGS and str(arguments.get("service") or "") == service:
            return _parse_ts(str(arguments.get("start") or ""))
    return None


def _planned_end(calls: list[tuple[str, dict[str, Any]]], service: str) -> datetime | None:
    """The end of the service's first planned query_logs (else query_metrics) call's window."""
    for tool_name in (QUERY_LOGS, QUERY_METRICS):
        for name, arguments in calls:
            if name == tool_name and str(arguments.get("service") or "") == service:
                return _parse_ts(str(arguments.get("end") or ""))
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
        read_start, read_end = _parse_ts(str(request.get("start") or "")), _parse_ts(str(request.get("end") or ""))
        if read_start is not None and read_end is not None and read_start <= start and read_end >= end:
            return True
    return False


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _runbook_actions(runbooks: list[RunbookHit], symptoms: list[str], allow_rollback: bool = False) -> list[RecommendedAction]:
    """Pointers to the best-ranked runbook (a past-incident note is no procedure) about each
    symptom seen, the most specific symptom first, at most MAX_RUNBOOK_ACTIONS, each with the
    first step of its investigation or remediation section when that section was among the hits
    (not a step that rolls back, unless `allow_rollback`: a linked change). Guidance, not evidence."""
    actions: list[RecommendedAction] = []
    used: set[str] = set()
    for symptom in symptoms:
        if len(actions) >= MAX_RUNBOOK_ACTIONS:
            break
        hit = next(
            (h for h in runbooks if h.kind != "incident" and h.path not in used and symptom in find_symptoms(h.title)),
            None,
        )
        if hit is None:
            continue  # no runbook about what the evidence shows
        used.add(hit.path)
        step_hit = next(
            (h for h in runbooks if h.path == hit.path and _STEP_SECTION.search(h.heading) and _first_step(h.text)
             and (allow_rollback or not advises_rollback(_first_step(h.text)))),
            None,
        )
        text = f"参考运行手册《{hit.title}》（{hit.path}）"
        if step_hit is not None:
            text += f"「{step_hit.heading.split(' > ')[0]}」：{_first_step(step_hit.text)}"
        else:
            text += "中的排查步骤与处置方法。"
        actions.append(RecommendedAction(text=text, requires_human_confirmation=bool(_SYSTEM_CHANGING.search(text))))
    return actions


def _hypothesis_entities(query: str) -> frozenset[str]:
    """The things (a thread pool, a GC, a lock …) the failure-mode catalogue types a yes/no
    question's hypothesis as."""
    intent = classify_question(query)
    if intent.kind != "yes_no" or intent.hypothesis_change:
        return frozenset()
    return frozenset(mention.entity for mention in configured_failure_modes().hypothesis_in(intent.hypothesis))


def _hypothesis_peers(query: str) -> tuple[str, ...]:
    """The services and hosts a yes/no question's hypothesis blames (「是 pay.internal 挂了吗」)."""
    intent = classify_question(query)
    return intent.blamed if intent.kind == "yes_no" else ()


def _names_any(candidate: Candidate, names: tuple[str, ...]) -> bool:
    return any(names_service(candidate.text, name) for name in names)


def _typed(candidate: Candidate) -> set[str]:
    """The things the catalogue types a finding as, by its words and its series."""
    return set(configured_failure_modes().entities_in(candidate.text, [candidate.metric] if candidate.metric else []))


def _hypothesis_symptoms(plan: Plan, query: str) -> frozenset[str]:
    """The specific symptoms a yes/no question's hypothesis names (the plan's reading, else the
    query's own: the single-ReAct agent plans without the planner service)."""
    named = list(plan.hypothesis_symptoms) or list(classify_question(query).hypothesis_symptoms)
    specific = [s for s in named if s in SYMPTOMS_BY_ID and not SYMPTOMS_BY_ID[s].generic]
    return frozenset(specific or named)


def _first_step(chunk_text: str) -> str:
    """The chunk's first list item, without its marker, bounded."""
    for line in chunk_text.splitlines():
        if _LIST_MARKER.match(line):
            step = _LIST_MARKER.sub("", line).strip()
            return step if len(step) <= MAX_STEP_CHARS else step[: MAX_STEP_CHARS - 1] + "…"
    return ""


def _change_text(change: ChangeEntry) -> str:
    # The summary is quoted: its words (无代码路径变更 …) are the record's, not our assertion.
    return f"{change.service} 在 {change.stamp} 有一次 {change.kind} 变更（执行人 {change.author}）：「{change.summary.strip()}」。"


def _bounded_summary(summary: str) -> str:
    """The change summary, cut at a separator when long (a cut never halves a token)."""
    text = summary.strip().rstrip("。")
    if len(text) <= MAX_SUMMARY_IN_CAUSE:
        return text
    return _cut(text, MAX_SUMMARY_IN_CAUSE, ("，", "；", "、", ",", ";", " ")).rstrip("，；、,; ") + "…"


def _spelled(token: str, text: str) -> str:
    """The token as `text` spells it (tokens are compared lower-cased)."""
    at = text.lower().find(token)
    return text[at: at + len(token)] if at >= 0 else token


def _quote_around(text: str, token: str | None, limit: int) -> str:
    """`text` bounded to `limit` characters, keeping `token` in view when it is given."""
    if len(text) <= limit:
        return text
    at = text.lower().find(token.lower()) if token else -1
    word_end = text.find(" ", at) if at >= 0 else -1
    word_end = len(text) if word_end < 0 else word_end
    if at < 0 or word_end <= limit - 1:
        return _short(text, limit)
    start = max(0, at - limit // 3)
    space = text.find(" ", start, at)
    start = space + 1 if space >= 0 else start
    piece = text[start:]
    return "…" + (piece if len(piece) <= limit else _short(piece, limit))


def _excerpt_with(text: str, token: str) -> str | None:
    """A verbatim piece of `text` (at most MAX_LOG_EXCERPT characters, cut at spaces) that holds
    `token` and that the gatekeeper's matcher accepts; None when there is none."""
    at = text.lower().find(token.lower())
    if at < 0:
        return None
    if len(text) <= MAX_LOG_EXCERPT:
        return text if is_supported(text, text) else None
    lo = max(0, at - (MAX_LOG_EXCERPT - len(token)) // 2)
    hi = min(len(text), lo + MAX_LOG_EXCERPT)
    if lo > 0:
        space = text.find(" ", lo, at)
        lo = space + 1 if space >= 0 else lo
    if hi < len(text):
        space = text.rfind(" ", at + len(token), hi)
        hi = space if space >= 0 else hi
    piece = text[lo:hi].strip()
    return piece if token.lower() in piece.lower() and is_supported(piece, text) else None


def _mechanisms(positives: list[Candidate]) -> list[Mechanism]:
    """The failure modes (`shared/core/failure_modes.json`) the findings show, causes first, then
    anomalies by their metric, then log lines by their words; each once."""
    catalogue = configured_failure_modes()
    rank = {"cause": 0, "anomaly": 1, "log_cluster": 2}
    found: dict[str, Mechanism] = {}
    for candidate in sorted((c for c in positives if c.kind in rank), key=lambda c: rank[c.kind]):
        matches = [m.mechanism for m in catalogue.for_metric(candidate.metric)] if candidate.metric else []
        matches += [m.mechanism for m in catalogue.line_mentions(candidate.excerpt or candidate.text)]
        for mechanism in matches[:1]:
            found.setdefault(mechanism.id, mechanism)
    return list(found.values())


def _signature_end(signature: Candidate) -> LinkEnd | None:
    """A log cluster's first line as the link check reads it (its stored facts)."""
    if signature.signature is None:
        return None
    invocation, path, text = signature.signature
    facts = ref_facts(invocation, path)
    if facts is None or facts.kind != "log_line":
        return None
    return LinkEnd("signature", text, parse_instant(facts.at), facts.subject, first_of_kind=facts.first_of_kind,
                   read_from=parse_instant(facts.window_start))


def _load(invocation: ToolInvocation, findings: Findings, kind: type[_R]) -> _R | None:
    """The call's stored result, typed; a result off its schema is named as not analysed."""
    data = read_result(invocation.tool_name, invocation.agent_result)
    if not isinstance(data, kind):
        findings.missing.append(MissingInfo(
            text=f"{_scope_label(invocation)} 的结果无法解析，未纳入分析。", tool_name=invocation.tool_name
        ))
        return None
    return data


def _short(text: str, limit: int = 80) -> str:
    if len(text) <= limit:
        return text
    return _cut(text, limit, (" ",)) + "…"


_NAME_CHAR = re.compile(r"[A-Za-z0-9_.\-]")
MAX_NAME_OVERRUN = 40  # how far a cut may run past its limit to keep a name whole


def _cut(text: str, limit: int, marks: tuple[str, ...]) -> str:
    """The head of `text` for a bound of `limit` characters: through the end of a name the limit
    falls inside (when it ends within MAX_NAME_OVERRUN), else up to the last of `marks` before the
    limit (when past half of it), else up to the limit moved on to the end of its name. Never a
    halved name (`max_retrie`): it would read as a name the evidence lacks."""
    start = end = limit
    while 0 < end < len(text) and _NAME_CHAR.match(text[end - 1]) and _NAME_CHAR.match(text[end]):
        end += 1
    while 0 < start < len(text) and _NAME_CHAR.match(text[start - 1]) and _NAME_CHAR.match(text[start]):
        start -= 1
    named = any(ch.isalpha() for ch in text[start:end])  # a number or an address is no name to keep
    if named and end > limit and end - limit <= MAX_NAME_OVERRUN:
        return text[:end]  # a name that starts inside the limit is kept whole (a migration's V45__drop_idx_…)
    cut = max(text.rfind(mark, 0, limit) for mark in marks)
    if cut > limit // 2:
        return text[:cut]
    return text[:end] if named else text[:start]


def _dedupe_missing(items: list[MissingInfo]) -> list[MissingInfo]:
    seen: set[str] = set()
    unique: list[MissingInfo] = []
    for item in items:
        if item.text not in seen:
            seen.add(item.text)
            unique.append(item)
    return unique
