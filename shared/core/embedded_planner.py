"""The embedded (offline) planner: a plan of tool calls from what the query actually says.

Services are the identifiers in the query that look like service names, symptoms come from the
domain lexicon, the window from the query's time words read in the user's zone (ATTEST_TIME_ZONE;
`question_window.py`: absolute 「10点到10点半」「昨天下午三点」, relative 「最近一小时」, days; default:
the hour ending now), sent to the tools in UTC. Each
service gets its metrics, its error/warning logs and its change records (over a window opened a
little earlier, since a change that explains an anomaly precedes it); the query's symptom words
go to the knowledge base once. Nothing here knows the estate: a service the planner has never
seen is planned for like any other. A single word (`frontend`) looks no different from an
ordinary one, so the planner leaves it out; the executor, which can ask its backends, plans the
same `service_steps` for the words they know.

A triage question (「现在线上哪个服务有问题？」, `QuestionIntent.triage`) names no service
and asks which are abnormal: its plan is marked `triage`, with the window and symptoms read as
usual and no service step; the executor, which knows the catalogue, plans `service_steps` for the
catalogued services (up to its bound). Any other question without a service still misses one.

A disabled tool (no source is configured for it; the executor's registry says
which) is never planned, in either mode: `disabled_tools`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo

from shared.config import configured_time_zone
from shared.core.contracts import Plan, PlannedToolCall, QuestionIntent, RetryContext, TimeWindow
from shared.core.follow_up import FollowUpReading
from shared.core.question_intent import classify_question
from shared.core.question_window import DEFAULT_WINDOW, MAX_WINDOW, read_window
from shared.core.service_mentions import MAX_NAMED_SERVICES, extract_service_names
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, find_symptoms, symptom_terms
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.local_time import load_zone

# Every named service is planned for (up to this bound on plan size); how many are checked is the
# executor's per-question limit, and the answer names the rest.
MAX_SERVICES = MAX_NAMED_SERVICES
# The levels of a service's log step: FATAL (CRITICAL, PANIC …) is an error too.
LOG_LEVELS = ["FATAL", "ERROR", "WARN"]
EVIDENCE_TOOLS_PLANNED = (QUERY_METRICS, QUERY_LOGS)
# Tools a retry plans only when an evidence gap names them.
GAP_ONLY_TOOLS = (QUERY_CHANGES,)
# Change records are read from this long before the window: the change precedes its effect.
CHANGES_LOOKBACK = timedelta(minutes=120)
CHANGES_LIMIT = 50
KNOWLEDGE_TOP_K = 3


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def extract_services(query: str) -> list[str]:
    """Identifiers in the query that name services, in order of appearance, each once
    (`shared/core/service_mentions.py`: protocol words, field names and code are not services)."""
    return extract_service_names(query, MAX_SERVICES)


def extract_metric_names(text: str) -> list[str]:
    """Metric-looking identifiers (underscore-joined) mentioned in a text."""
    names = re.findall(r"(?<![A-Za-z0-9_\-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![A-Za-z0-9\-])", text)
    return list(dict.fromkeys(names))


def extract_window(query: str, now: datetime, local_tz: tzinfo) -> tuple[datetime, datetime, str]:
    """(start, end, how) from the query's time words, read in `local_tz` (`question_window.py`);
    the last hour when it has none."""
    window = read_window(query, now, local_tz)
    return window.start, window.end, window.how


class EmbeddedPlanner:
    def __init__(self, local_timezone: str | None = None, disabled_tools: Iterable[str] = ()) -> None:
        # 「今天」「10点」 are the user's, not UTC's: ATTEST_TIME_ZONE unless the wiring names a zone.
        self.zone_name = local_timezone or configured_time_zone()
        self._local_tz = load_zone(self.zone_name)
        self.disabled_tools = frozenset(disabled_tools)

    @property
    def zone(self) -> tzinfo:
        return self._local_tz

    def plan(
        self,
        query: str,
        now: datetime,
        mode: str = "NORMAL",
        retry_context: RetryContext | None = None,
        *,
        services: list[str] | None = None,
        follow_up: FollowUpReading | None = None,
        intent: QuestionIntent | None = None,
    ) -> Plan:
        """`services`, when given, replaces the services read from the query (the executor passes
        the ones it resolved and will check). `follow_up`: what a follow-up question inherits
        from the session's last run (`shared/core/follow_up.py`): its services when the query
        names none, and the window to plan over. `intent`: the question's reading
        (`classify_question`), read here when the caller has none; the plan carries it."""
        now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
        intent = intent or classify_question(query)
        if mode == "EVIDENCE_GAP_ONLY":
            plan = self._plan_gaps(query, now, retry_context or RetryContext(), follow_up, intent)
        else:
            plan = self._plan_normal(query, now, services, follow_up, intent)
        return self._without_disabled(plan).model_copy(update={"intent": intent})

    def _without_disabled(self, plan: Plan) -> Plan:
        """The plan without steps of disabled tools; a retry left with no step says so."""
        if not self.disabled_tools:
            return plan
        steps = [step for step in plan.steps if step.tool_name not in self.disabled_tools]
        if len(steps) == len(plan.steps):
            return plan
        missing = list(plan.missing_context)
        if plan.mode == "EVIDENCE_GAP_ONLY" and not steps and "evidence_gap" not in missing:
            missing.append("evidence_gap")
        disabled = ", ".join(sorted(self.disabled_tools))
        return plan.model_copy(update={
            "steps": steps, "missing_context": missing,
            "rationale": f"{plan.rationale}; not planned (no source configured): {disabled}",
        })

    # --- NORMAL -----------------------------------------------------------------------------

    def _plan_normal(self, query: str, now: datetime, given: list[str] | None,
                     follow_up: FollowUpReading | None, intent: QuestionIntent) -> Plan:
        if given is None:
            named = extract_service_names(query, 2 * MAX_SERVICES)
            services, unchecked = named[:MAX_SERVICES], named[MAX_SERVICES:]
        else:
            services, unchecked = list(dict.fromkeys(given))[:MAX_SERVICES], []
        if not services and follow_up is not None and follow_up.services:
            services = follow_up.services[:MAX_SERVICES]
        symptoms = find_symptoms(query)
        read = follow_up.window if follow_up is not None else read_window(query, now, self._local_tz)
        window = TimeWindow(start=_iso(read.start), end=_iso(read.end))
        how = read.how if read.how == "default" or read.how.startswith("inherited") else f"{read.how!r} in {self.zone_name}"
        if read.note:
            how += f" ({read.note})"
        if read.future:
            # Nothing can be checked in a window that has not begun; no other window stands in.
            return Plan(
                mode="NORMAL", services=services, symptoms=symptoms, window=window, missing_context=["window"],
                rationale=f"the window {how} lies wholly in the future: nothing can be queried there",
                unchecked_services=unchecked,
            )
        if not services and intent.triage:
            return Plan(
                mode="NORMAL", symptoms=symptoms, window=window, triage=True, steps=_knowledge_steps(query, symptoms),
                rationale=f"triage: the question names no service and asks which are abnormal; the executor "
                          f"checks the services of its catalogue; symptoms: "
                          f"{', '.join(SYMPTOMS_BY_ID[s].label_zh for s in symptoms) or 'none'}; window: {how}",
            )
        if not services:
            return Plan(
                mode="NORMAL", symptoms=symptoms, window=window, missing_context=["service"],
                rationale="no service name found in the query; nothing can be queried without one",
                unchecked_services=unchecked,
            )
        steps: list[PlannedToolCall] = []
        for service in services:
            steps += service_steps(service, window, symptoms)
        steps += _knowledge_steps(query, symptoms)
        labels = ", ".join(SYMPTOMS_BY_ID[s].label_zh for s in symptoms) or "none"
        rationale = f"services: {', '.join(services)}; symptoms: {labels}; window: {how}"
        if follow_up is not None:
            rationale += f"; {follow_up.note}"
        return Plan(
            mode="NORMAL",
            services=services,
            symptoms=symptoms,
            window=window,
            steps=steps,
            rationale=rationale,
            unchecked_services=unchecked,
        )

    # --- EVIDENCE_GAP_ONLY ----------------------------------------------------------------------

    def _plan_gaps(self, query: str, now: datetime, retry_context: RetryContext,
                   follow_up: FollowUpReading | None, intent: QuestionIntent) -> Plan:
        """Only calls that address the gaps: the gaps' services and tools over a widened window,
        with filters drawn from the gap. A call identical to a NORMAL-plan call is never repeated."""
        normal = self._plan_normal(query, now, None, follow_up, intent)
        if normal.window is not None:
            base_start = datetime.fromisoformat(normal.window.start.replace("Z", "+00:00"))
            base_end = datetime.fromisoformat(normal.window.end.replace("Z", "+00:00"))
        else:
            base_start, base_end = now - DEFAULT_WINDOW, now
        span = base_end - base_start
        if base_end > now - timedelta(seconds=1):  # the window text drops now's fraction of a second
            # A window ending now doubles backwards.
            wide_start, wide_end = now - min(span * 2, MAX_WINDOW), now
        else:
            # A window the question placed in the past (「昨天下午三点」) widens on both sides.
            pad = max(timedelta(0), min(span / 2, (MAX_WINDOW - span) / 2))
            wide_start, wide_end = base_start - pad, min(base_end + pad, now)
        window = TimeWindow(start=_iso(wide_start), end=_iso(wide_end))
        already = {_call_key(step) for step in normal.steps}

        steps: list[PlannedToolCall] = []
        services_seen: list[str] = []
        symptoms_seen: list[str] = []
        for gap in retry_context.gaps:
            services = [s.lower() for s in gap.services] or extract_services(gap.claim_text) or normal.services
            tools = [t for t in gap.tool_names if t in EVIDENCE_TOOLS_PLANNED + GAP_ONLY_TOOLS] or list(EVIDENCE_TOOLS_PLANNED)
            gap_symptoms = find_symptoms(gap.claim_text) or normal.symptoms
            metrics = extract_metric_names(gap.claim_text)
            keyword = next(
                (kw for s in gap_symptoms for kw in SYMPTOMS_BY_ID[s].log_keywords if kw.isascii() and len(kw) > 3),
                None,
            )
            for service in services[:MAX_SERVICES]:
                for tool in tools:
                    for call in _gap_calls(tool, service, window, metrics, keyword, gap.claim_id):
                        key = _call_key(call)
                        if key in already:
                            continue
                        already.add(key)
                        steps.append(call)
                if service not in services_seen:
                    services_seen.append(service)
            symptoms_seen += [s for s in gap_symptoms if s not in symptoms_seen]

        missing = [] if steps else ["evidence_gap"]
        return Plan(
            mode="EVIDENCE_GAP_ONLY",
            services=services_seen,
            symptoms=symptoms_seen,
            window=window,
            steps=steps,
            missing_context=missing,
            rationale=(
                f"{len(retry_context.gaps)} evidence gap(s); window widened to {window.start}..{window.end}"
                if steps else "no evidence gap that a tool call could address"
            ),
        )


def service_steps(service: str, window: TimeWindow, symptoms: list[str]) -> list[PlannedToolCall]:
    """What checking one service takes: its metrics, its ERROR/WARN logs, its change records (the
    executor plans the same for a service only its catalogue can name)."""
    focus = ", ".join(symptoms) if symptoms else "all metrics"
    return [
        PlannedToolCall(
            tool_name=QUERY_METRICS,
            arguments={"service": service, "start": window.start, "end": window.end, "step_seconds": 60},
            purpose=f"metric series of {service} ({focus})",
        ),
        PlannedToolCall(
            tool_name=QUERY_LOGS,
            arguments={"service": service, "start": window.start, "end": window.end, "level": list(LOG_LEVELS), "limit": 200},
            purpose=f"FATAL/ERROR/WARN log lines of {service}",
        ),
        _changes_call(service, window, CHANGES_LOOKBACK, f"deployments and config changes of {service}, from before the window"),
    ]


def _changes_call(service: str, window: TimeWindow, lookback: timedelta, purpose: str) -> PlannedToolCall:
    start = datetime.fromisoformat(window.start.replace("Z", "+00:00")) - lookback
    return PlannedToolCall(
        tool_name=QUERY_CHANGES,
        arguments={"service": service, "start": _iso(start), "end": window.end, "limit": CHANGES_LIMIT},
        purpose=purpose,
    )


def _knowledge_steps(query: str, symptoms: list[str]) -> list[PlannedToolCall]:
    """One runbook lookup with the symptom words, when the query names any."""
    knowledge_query = _knowledge_query(query, symptoms)
    if not knowledge_query:
        return []
    return [PlannedToolCall(
        tool_name=LOOKUP_KNOWLEDGE,
        arguments={"query": knowledge_query, "top_k": KNOWLEDGE_TOP_K},
        purpose="runbooks and past incidents for the symptoms asked about (guidance, not evidence of this incident)",
    )]


def _knowledge_query(query: str, symptoms: list[str]) -> str:
    """The symptom words: each symptom's label and the words of the query that named it."""
    words: list[str] = []
    for symptom in symptoms:
        for word in (SYMPTOMS_BY_ID[symptom].label_zh, *symptom_terms(query, symptom)):
            if word.lower() not in (w.lower() for w in words):
                words.append(word)
    return " ".join(words)[:300]


def _gap_calls(
    tool: str, service: str, window: TimeWindow, metrics: list[str], keyword: str | None, claim_id: str
) -> list[PlannedToolCall]:
    base = {"service": service, "start": window.start, "end": window.end}
    purpose = f"evidence gap of claim {claim_id}"
    if tool == QUERY_CHANGES:
        return [_changes_call(service, window, CHANGES_LOOKBACK, purpose)]
    if tool == QUERY_METRICS:
        if metrics:
            return [
                PlannedToolCall(tool_name=tool, arguments={**base, "metric": m, "step_seconds": 60}, purpose=purpose)
                for m in metrics[:3]
            ]
        return [PlannedToolCall(tool_name=tool, arguments={**base, "step_seconds": 60}, purpose=purpose)]
    if keyword:
        # Every level: the gap may be in lines the level filter of the first round excluded.
        return [PlannedToolCall(tool_name=tool, arguments={**base, "contains": keyword, "limit": 200}, purpose=purpose)]
    return [PlannedToolCall(tool_name=tool, arguments={**base, "level": list(LOG_LEVELS), "limit": 200}, purpose=purpose)]


def _call_key(call: PlannedToolCall) -> tuple[str, str]:
    return call.tool_name, repr(sorted((k, repr(v)) for k, v in call.arguments.items()))
