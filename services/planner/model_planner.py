"""The OpenAI-compatible planner: a model proposes the plan, strict parsing decides whether it is
usable, and the embedded planner's plan replaces it when it is not.

The model gets the query, `now`, the mode, the tool names the executor offers and, on the retry
round, the evidence gaps; it must answer with one JSON object shaped like `Plan` (a bounded JSON
schema is sent where the server accepts `{"type": "json_object", "schema": …}`). `parse_plan_reply`
accepts only: known keys, tools the executor offers (only the evidence tools a retry may use in
EVIDENCE_GAP_ONLY), services the question names (or, on the retry, a gap names; never a tool name,
a field name or other words of an injected question: `shared/core/service_mentions.py`), arguments the
executor's own argument models accept, windows that end by
`now` and start at most a week before it, known symptom ids, bounded strings and lists, and at
least one step. Anything else is a failed attempt.

Times: the model gets `now` in UTC and in the user's zone, the zone's name
and, when the question names a time, the window our deterministic reading found
(`question_window.py`). That reading is the authority in NORMAL mode: a usable model plan keeps
its tools and filters, but its window and every metrics/logs call's start and end become the
question's window (changes from CHANGES_LOOKBACK before it), and the rationale says so when that
changed anything. A 270M model (or an injected question) cannot be trusted with date arithmetic
across a +8 offset; the parse is exact and cheap. Without a time phrase the model's window stands
(checked as above); on the retry round its widened windows stand.

A failed attempt (transport error, timeout, or an unusable reply) is retried on byte-identical
input up to `max_attempts`; then the embedded plan is used, and the response says so: the prompt
and model call stay truthful (the prompt was sent, the attempts were made and cost tokens), the
plan's rationale names the fallback and why. Falling back is safe: a plan is not evidence, it
only decides which tools run, and everything the executor finds is still checked downstream.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from pydantic import BaseModel, ValidationError

from services.planner.engine import PlanRun
from shared.core.contracts import Plan, PlannedToolCall, QuestionIntent, RetryContext, TimeWindow
from shared.core.embedded_planner import (
    CHANGES_LOOKBACK,
    EVIDENCE_TOOLS_PLANNED,
    GAP_ONLY_TOOLS,
    MAX_SERVICES,
    EmbeddedPlanner,
)
from shared.core.follow_up import FollowUpReading
from shared.core.question_intent import classify_question
from shared.core.question_window import QuestionWindow, read_window
from shared.core.service_mentions import mentions_service
from shared.core.strict_json import NotOneObject, one_json_object
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID
from shared.core.tool_catalogue import (
    LOG_LEVELS,
    LOOKUP_KNOWLEDGE,
    QUERY_CHANGES,
    QUERY_LOGS,
    QUERY_METRICS,
    SERVICE_NAME_PATTERN,
    LookupKnowledgeArguments,
    QueryChangesArguments,
    QueryLogsArguments,
    QueryMetricsArguments,
    WindowArguments,
    describe_validation_error,
)
from shared.model_calls import ModelCallAudit, ModelEngine
from shared.model_client import (
    ModelAttemptsFailed,
    ModelCallTally,
    ModelClient,
    ModelReply,
    TimeRemaining,
    run_attempts,
)
from shared.prompt_files import Prompt

log = logging.getLogger(__name__)

# The evidence tools the executor offers, with the argument models it validates them with.
TOOL_ARGUMENTS: dict[str, type[BaseModel]] = {
    QUERY_METRICS: QueryMetricsArguments,
    QUERY_LOGS: QueryLogsArguments,
    QUERY_CHANGES: QueryChangesArguments,
    LOOKUP_KNOWLEDGE: LookupKnowledgeArguments,
}
GAP_TOOLS = EVIDENCE_TOOLS_PLANNED + GAP_ONLY_TOOLS
MAX_REPLY_CHARS = 32 * 1024
MAX_STEPS = 16
MAX_TEXT_CHARS = 300
MAX_MISSING_CONTEXT = 4
TIMESTAMP_CHARS = 25
# A planned window must end by now (a little clock skew allowed) and start at most this long before.
FUTURE_SLACK = timedelta(minutes=5)
MAX_LOOKBACK = timedelta(days=8)
PLAN_KEYS = frozenset({"services", "symptoms", "window", "steps", "missing_context", "rationale"})
# Plan fields a model may echo but never sets: the planner servicer reads the question itself
# (shared.core.question_intent) and the embedded planner keeps its own bookkeeping.
IGNORED_PLAN_KEYS = frozenset({"question_kind", "hypothesis", "hypothesis_symptoms", "triage", "intent"})
STEP_KEYS = frozenset({"tool_name", "arguments", "purpose"})
FALLBACK_NOTE = "embedded plan (model plan not used: {reason})"


class PlanReplyError(ValueError):
    """The model's reply is not a usable plan."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def allowed_tools(mode: str) -> tuple[str, ...]:
    return GAP_TOOLS if mode == "EVIDENCE_GAP_ONLY" else tuple(TOOL_ARGUMENTS)


def planner_input_text(query: str, now: datetime, mode: str, retry_context: RetryContext | None, *,
                       zone_name: str = "UTC", zone: tzinfo = UTC,
                       question_window: QuestionWindow | None = None,
                       follow_up: FollowUpReading | None = None, triage: bool = False) -> str:
    data: dict[str, Any] = {
        "query": query,
        "now": _iso(now),
        "time_zone": zone_name,
        "now_local": now.astimezone(zone).replace(microsecond=0).isoformat(),
        "mode": mode,
        "tools": list(allowed_tools(mode)),
        "symptoms": sorted(SYMPTOMS_BY_ID),
    }
    if triage:
        # No service to name: the executor checks its catalogue's (prompt v4).
        data["triage"] = True
    if mode == "NORMAL" and question_window is not None and question_window.named:
        data["question_window"] = {"start": _iso(question_window.start), "end": _iso(question_window.end)}
    if follow_up is not None:
        # A follow-up: the services it inherits, and the window it plans over.
        data["inherited"] = {"services": follow_up.services,
                             "window": {"start": _iso(follow_up.window.start), "end": _iso(follow_up.window.end)}
                             if follow_up.window_inherited else None,
                             "note": follow_up.note}
    if mode == "EVIDENCE_GAP_ONLY" and retry_context is not None:
        data["gaps"] = [
            {"claim_text": gap.claim_text[:MAX_TEXT_CHARS], "services": gap.services, "tool_names": gap.tool_names}
            for gap in retry_context.gaps
        ]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _bounded_string(max_length: int, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, **extra}


def _bounded_int(minimum: int, maximum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def plan_json_schema(mode: str, triage: bool = False) -> dict[str, Any]:
    """Every string and array bounded, so that a constrained decoder always terminates. A triage
    question's plan may have no step."""
    timestamp = _bounded_string(TIMESTAMP_CHARS)
    arguments = {
        "type": "object",
        "properties": {
            "service": _bounded_string(64),
            "start": timestamp,
            "end": timestamp,
            "metric": _bounded_string(64),
            "step_seconds": _bounded_int(10, 3600),
            "level": {"type": "array", "items": {"type": "string", "enum": list(LOG_LEVELS)}, "maxItems": len(LOG_LEVELS)},
            "contains": _bounded_string(100),
            "limit": _bounded_int(1, 200),
            "kind": _bounded_string(32),
            "query": _bounded_string(200),
            "top_k": _bounded_int(1, 10),
        },
        "additionalProperties": False,
    }
    step = {
        "type": "object",
        "properties": {
            "tool_name": {"type": "string", "enum": list(allowed_tools(mode))},
            "arguments": arguments,
            "purpose": _bounded_string(120),
        },
        "required": ["tool_name", "arguments", "purpose"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "services": {"type": "array", "items": _bounded_string(64), "maxItems": MAX_SERVICES},
            "symptoms": {"type": "array", "items": {"type": "string", "enum": sorted(SYMPTOMS_BY_ID)},
                         "maxItems": len(SYMPTOMS_BY_ID)},
            "window": {"type": "object", "properties": {"start": timestamp, "end": timestamp},
                       "required": ["start", "end"], "additionalProperties": False},
            "steps": {"type": "array", "items": step, "minItems": 0 if triage else 1, "maxItems": MAX_STEPS},
            "missing_context": {"type": "array", "items": _bounded_string(40), "maxItems": MAX_MISSING_CONTEXT},
            "rationale": _bounded_string(200),
        },
        "required": ["services", "symptoms", "window", "steps", "rationale"],
        "additionalProperties": False,
    }


def planner_response_format(mode: str, json_schema_format: bool, triage: bool = False) -> dict[str, Any]:
    if not json_schema_format:
        return {"type": "json_object"}
    return {"type": "json_object", "schema": plan_json_schema(mode, triage)}


# --- strict parsing ----------------------------------------------------------------------------


def _timestamp(value: Any, where: str) -> datetime:
    if not isinstance(value, str) or len(value) > TIMESTAMP_CHARS:
        raise PlanReplyError(f"{where} must be an ISO-8601 string")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise PlanReplyError(f"{where} is not an ISO-8601 timestamp: {value[:30]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _check_window(start: datetime, end: datetime, now: datetime, where: str) -> None:
    if end <= start:
        raise PlanReplyError(f"{where}: end must be after start")
    if end > now + FUTURE_SLACK:
        raise PlanReplyError(f"{where}: the window ends after now")
    if start < now - MAX_LOOKBACK:
        raise PlanReplyError(f"{where}: the window starts more than {MAX_LOOKBACK.days} days before now")


def _string_list(value: Any, where: str, max_items: int, max_chars: int) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise PlanReplyError(f"{where} must be a list of strings")
    if len(value) > max_items:
        raise PlanReplyError(f"{where} has more than {max_items} items")
    if any(len(item) > max_chars for item in value):
        raise PlanReplyError(f"{where} has an item longer than {max_chars} characters")
    return [item.strip() for item in value]


def _parse_step(item: Any, index: int, tools: tuple[str, ...], now: datetime) -> PlannedToolCall:
    where = f"steps[{index}]"
    if not isinstance(item, dict) or not {"tool_name", "arguments"} <= set(item) <= STEP_KEYS:
        raise PlanReplyError(f"{where} must have tool_name, arguments and optionally purpose")
    tool_name, arguments, purpose = item["tool_name"], item["arguments"], item.get("purpose", "")
    if tool_name not in tools:
        raise PlanReplyError(f"{where}: tool {str(tool_name)[:40]!r} is not one of {', '.join(tools)}")
    if not isinstance(arguments, dict):
        raise PlanReplyError(f"{where}: arguments must be an object")
    if not isinstance(purpose, str) or len(purpose) > MAX_TEXT_CHARS:
        raise PlanReplyError(f"{where}: purpose must be a short string")
    for key in ("start", "end"):
        if key in arguments and not isinstance(arguments[key], str):
            raise PlanReplyError(f"{where}: {key} must be an ISO-8601 string")
    try:
        parsed = TOOL_ARGUMENTS[tool_name].model_validate(arguments)
    except ValidationError as exc:
        raise PlanReplyError(f"{where}: {describe_validation_error(exc)}") from None
    if isinstance(parsed, WindowArguments):
        _check_window(parsed.start, parsed.end, now, where)
    return PlannedToolCall(tool_name=tool_name, arguments=dict(arguments), purpose=purpose.strip())


def _unmentioned(names: list[str], query: str | None, allowed: Collection[str]) -> str | None:
    """The first planned service the question does not name (nor a gap, on the retry round)."""
    if query is None:
        return None
    known = {name.lower() for name in allowed}
    return next((name for name in names if name not in known and not mentions_service(query, name)), None)


def parse_plan_reply(text: str, *, mode: str, now: datetime, query: str | None = None,
                     gap_services: Collection[str] = (), triage: bool = False) -> Plan:
    """Exactly one JSON object shaped like `Plan`, every part checked (see the module docstring).
    With `query`, every planned service must be one the question names (`mentions_service`) or,
    on the retry round, one of `gap_services`: a model never adds a service. A triage
    question's plan may have no step: the executor plans the catalogue's services."""
    if len(text) > MAX_REPLY_CHARS:
        raise PlanReplyError("reply is too long")
    try:
        data = one_json_object(text)
    except NotOneObject as exc:
        raise PlanReplyError(str(exc)) from None
    unknown = set(data) - PLAN_KEYS - IGNORED_PLAN_KEYS
    if unknown:
        raise PlanReplyError(f"unknown field(s): {', '.join(sorted(unknown))[:120]}")
    steps_value = data.get("steps")
    if not isinstance(steps_value, list) or (not steps_value and not triage):
        raise PlanReplyError("steps must be a non-empty list")
    if len(steps_value) > MAX_STEPS:
        raise PlanReplyError(f"more than {MAX_STEPS} steps")
    tools = allowed_tools(mode)
    steps: list[PlannedToolCall] = []
    seen: set[str] = set()
    for index, item in enumerate(steps_value):
        step = _parse_step(item, index, tools, now)
        key = json.dumps([step.tool_name, step.arguments], sort_keys=True, ensure_ascii=False)
        if key not in seen:  # an identical call twice adds nothing
            seen.add(key)
            steps.append(step)

    services = [s.lower() for s in _string_list(data.get("services"), "services", MAX_SERVICES, 128)]
    bad = [s for s in services if not re.fullmatch(SERVICE_NAME_PATTERN, s)]
    if bad:
        raise PlanReplyError(f"services: {bad[0][:40]!r} is not a service name")
    step_services = [str(s.arguments["service"]).lower() for s in steps if s.arguments.get("service")]
    unmentioned = _unmentioned(services + step_services, query, gap_services)
    if unmentioned is not None:
        raise PlanReplyError(f"service {unmentioned[:40]!r} is not named by the question")
    for name in step_services:
        if name not in services and len(services) < MAX_SERVICES:
            services.append(name)
    symptoms = _string_list(data.get("symptoms"), "symptoms", len(SYMPTOMS_BY_ID), 64)
    unknown_symptoms = [s for s in symptoms if s not in SYMPTOMS_BY_ID]
    if unknown_symptoms:
        raise PlanReplyError(f"symptoms: {unknown_symptoms[0][:40]!r} is not a known symptom id")
    window = None
    if data.get("window") is not None:
        value = data["window"]
        if not isinstance(value, dict) or set(value) != {"start", "end"}:
            raise PlanReplyError("window must have exactly start and end")
        start, end = _timestamp(value["start"], "window.start"), _timestamp(value["end"], "window.end")
        _check_window(start, end, now, "window")
        window = TimeWindow(start=_iso(start), end=_iso(end))
    missing = _string_list(data.get("missing_context"), "missing_context", MAX_MISSING_CONTEXT, 40)
    rationale = data.get("rationale", "")
    if not isinstance(rationale, str) or len(rationale) > MAX_TEXT_CHARS:
        raise PlanReplyError("rationale must be a short string")
    return Plan(
        mode=mode, services=list(dict.fromkeys(services)), symptoms=list(dict.fromkeys(symptoms)),
        window=window, steps=steps, missing_context=missing, rationale=rationale.strip(),
    )


def follow_question_window(plan: Plan, window: QuestionWindow, zone_name: str) -> Plan:
    """A NORMAL plan over the window the question names (see the module docstring)."""
    start, end = _iso(window.start), _iso(window.end)
    changes_start = _iso(window.start - CHANGES_LOOKBACK)
    steps: list[PlannedToolCall] = []
    changed = plan.window is None or (plan.window.start, plan.window.end) != (start, end)
    for step in plan.steps:
        arguments = dict(step.arguments)
        if "start" in arguments or "end" in arguments:
            wanted = (changes_start if step.tool_name == QUERY_CHANGES else start, end)
            if (arguments.get("start"), arguments.get("end")) != wanted:
                arguments["start"], arguments["end"] = wanted
                changed = True
        steps.append(step.model_copy(update={"arguments": arguments}))
    if not changed:
        return plan
    note = f"window from the question ({window.how!r} in {zone_name}), not the model's"
    return plan.model_copy(update={
        "window": TimeWindow(start=start, end=end), "steps": steps,
        "rationale": f"{plan.rationale}; {note}" if plan.rationale else note,
    })


def inherit_services(plan: Plan, follow_up: FollowUpReading) -> Plan:
    """A follow-up's usable model plan, its rationale saying what was inherited."""
    note = follow_up.note
    return plan.model_copy(update={"rationale": f"{plan.rationale}; {note}" if plan.rationale else note})


# --- the engine ----------------------------------------------------------------------------------


def _why_not_used(error: Exception) -> str:
    """The fallback's reason, from the failure that ended the model's attempts."""
    if isinstance(error, PlanReplyError):
        return f"model reply is not a usable plan: {error}"
    return f"model call failed: {type(error).__name__}: {str(error)[:200]}"


class ModelPlanner(ModelEngine):
    """`PlanEngine` over a model client; one instance per process, safe across threads."""

    ROLE = "planner"

    def __init__(self, client: ModelClient, prompt: Prompt, *, max_attempts: int = 2,
                 json_schema_format: bool = False, fallback: EmbeddedPlanner | None = None) -> None:
        self._client = client
        self._prompt = prompt
        self._max_attempts = max(1, max_attempts)
        self._json_schema_format = json_schema_format
        self._fallback = fallback or EmbeddedPlanner()

    def create_plan(
        self,
        query: str,
        now: datetime,
        mode: str = "NORMAL",
        retry_context: RetryContext | None = None,
        *,
        time_remaining: TimeRemaining | None = None,
        follow_up: FollowUpReading | None = None,
        intent: QuestionIntent | None = None,
    ) -> PlanRun:
        now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
        intent = intent or classify_question(query)  # the planner servicer passes its reading
        triage = mode == "NORMAL" and follow_up is None and intent.triage
        tally = ModelCallTally()
        zone_name, zone = self._fallback.zone_name, self._fallback.zone
        # A follow-up's window (its own, or the inherited one moved by a shift) is read by our code.
        asked = follow_up.window if follow_up is not None else read_window(query, now, zone)
        messages = [
            {"role": "system", "content": self._prompt.text},
            {"role": "user", "content": planner_input_text(query, now, mode, retry_context, zone_name=zone_name,
                                                           zone=zone, question_window=asked, follow_up=follow_up,
                                                           triage=triage)},
        ]
        response_format = planner_response_format(mode, self._json_schema_format, triage)
        # Services the plan may name besides the question's: a gap's on the retry, a follow-up's
        # inherited ones.
        gap_services = [s for gap in (retry_context.gaps if retry_context else []) for s in gap.services]
        if follow_up is not None:
            gap_services += follow_up.services

        def run(plan: Plan, fallback_reason: str = "") -> PlanRun:
            return PlanRun(plan, ModelCallAudit.of_calls(self.prompt_ref, self._client, tally),
                           fallback_reason=fallback_reason)

        def parse(reply: ModelReply) -> Plan:
            plan = parse_plan_reply(reply.content or "", mode=mode, now=now, query=query, gap_services=gap_services,
                                    triage=triage)
            if mode == "NORMAL" and follow_up is not None and follow_up.services and not plan.services:
                # The question names no service and inherits some: a plan for none checks nothing.
                raise PlanReplyError("the plan names none of the inherited services")
            return plan

        if mode == "NORMAL" and asked.future:
            # A window that has not begun: no model is asked; the plan says what is missing.
            return run(self._fallback.plan(query, now, mode, retry_context, follow_up=follow_up, intent=intent))
        try:
            # Transport failures and unusable replies share the one `max_attempts` budget.
            plan = run_attempts(self._client, messages, parse, tally=tally, max_attempts=self._max_attempts,
                                rejects=(PlanReplyError,), time_remaining=time_remaining,
                                response_format=response_format)
        except ModelAttemptsFailed as failed:
            failure = _why_not_used(failed.last)
        else:
            if mode == "NORMAL" and asked.named:
                plan = follow_question_window(plan, asked, zone_name)
            if follow_up is not None:
                plan = inherit_services(plan, follow_up)
            return run(plan)
        log.info("planner fell back to the embedded plan after %d attempt(s): %s", tally.attempts, failure)
        plan = self._fallback.plan(query, now, mode, retry_context, follow_up=follow_up, intent=intent)
        note = FALLBACK_NOTE.format(reason=failure[:300])
        plan.rationale = f"{note}; {plan.rationale}" if plan.rationale else note
        return run(plan, failure)
