"""PlannerService: proto in -> plan -> proto out.

The engine is chosen by `model_settings_for("planner")`: the embedded planner (default) or the
model planner, which falls back to the embedded plan when the model's plan is unusable. The
response records the prompt and the model call either way (a fallback shows in the attempts,
the token usage and the plan's rationale).

Whatever the engine planned, the plan is cut to its first `max_plan_steps` steps (the
executor refuses a longer plan, so a question naming many services is never refused): a
service left without a step is named as not checked, and the rationale says what was cut.

A triage question (names no service, asks which are abnormal: `shared.core.question_intent`) is marked
`triage` here, whatever engine planned, when the plan names no service: the executor then checks
the services of its catalogue. Our code reads the question, never a model.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, tzinfo

import grpc

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.planner.v1 import planner_pb2, planner_pb2_grpc
from services.planner.engine import EmbeddedPlanEngine, PlanEngine
from services.planner.model_planner import ModelPlanner
from services.planner.prompts import load_prompt
from shared.config import DEFAULT_MAX_PLAN_STEPS, ModelSettings, configured_time_zone
from shared.core.contracts import Plan, RetryContext, TimeWindow
from shared.core.embedded_planner import MAX_SERVICES, EmbeddedPlanner
from shared.core.follow_up import FollowUpReading, InheritedContext, read_follow_up
from shared.core.question_intent import classify_question
from shared.core.service_mentions import extract_service_names
from shared.errors import InvalidInput, Reason
from shared.local_time import load_zone
from shared.model_calls import deadline_budget, model_call_info, prompt_ref_info
from shared.model_client import ModelClient
from shared.proto_convert import message_to_model, plain_to_message, spec_value

log = logging.getLogger(__name__)


def _parse_now(text: str) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        now = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInput(f"now is not an ISO-8601 timestamp: {text[:40]!r}", reason=Reason.INVALID_TIMESTAMP,
                           field="now") from exc
    return now if now.tzinfo else now.replace(tzinfo=UTC)


def build_planner(settings: ModelSettings, client: ModelClient | None = None) -> PlanEngine:
    """The engine the planner's model settings name: embedded (default) or the model planner."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai planner needs a model client")
        return ModelPlanner(client, load_prompt(), max_attempts=settings.max_attempts,
                            json_schema_format=settings.json_schema_format)
    return EmbeddedPlanEngine()


def bounded_plan(plan: Plan, max_steps: int) -> Plan:
    """The plan's first `max_steps` steps; the services no kept step checks move to
    `unchecked_services` (the answer names them), and the rationale says what was cut."""
    if len(plan.steps) <= max_steps:
        return plan
    kept = plan.steps[:max_steps]
    stepped = {str(step.arguments.get("service", "")).lower() for step in kept}
    dropped = [s for s in plan.services if s.lower() not in stepped]
    note = f"plan cut to its first {max_steps} of {len(plan.steps)} steps (the executor's limit)"
    if dropped:
        note += f"; not checked: {', '.join(dropped)}"
    log.info("planner: %s", note)
    return plan.model_copy(update={
        "steps": kept,
        "services": [s for s in plan.services if s not in dropped],
        "unchecked_services": list(dict.fromkeys([*dropped, *plan.unchecked_services])),
        "rationale": f"{plan.rationale}; {note}" if plan.rationale else note,
    })


def triage_plan(plan: Plan) -> Plan:
    """A plan for a triage question: no service is missing, the executor picks the services."""
    return plan.model_copy(update={
        "triage": True,
        "missing_context": [c for c in plan.missing_context if c != "service"],
        "steps": [step for step in plan.steps if not step.arguments.get("service")],
    })


def _inherited(request: planner_pb2.CreatePlanRequest) -> InheritedContext | None:
    if not request.HasField("inherited"):
        return None
    given = request.inherited
    window = None
    if given.HasField("window") and given.window.start and given.window.end:
        for moment in (given.window.start, given.window.end):
            _parse_now(moment)  # INVALID_ARGUMENT unless ISO-8601
        window = TimeWindow(start=given.window.start, end=given.window.end)
    return InheritedContext(run_id=given.run_id, services=tuple(s.lower() for s in given.services[:MAX_SERVICES]),
                            window=window)


def _follow_up_info(reading: FollowUpReading) -> planner_pb2.FollowUp:
    info = planner_pb2.FollowUp(from_run_id=reading.from_run_id, services=reading.services,
                                shift_phrase=reading.shift.phrase if reading.shift else "",
                                shift_seconds=reading.shift_seconds, note=reading.note)
    if reading.window_inherited:
        info.window.start = reading.window.start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        info.window.end = reading.window.end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return info


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, planner: PlanEngine | EmbeddedPlanner | None = None,
                 max_plan_steps: int = DEFAULT_MAX_PLAN_STEPS, zone: tzinfo | None = None) -> None:
        """`zone`: where a follow-up's inherited window is read and described (default
        ATTEST_TIME_ZONE, as the embedded planner's)."""
        if planner is None or isinstance(planner, EmbeddedPlanner):
            planner = EmbeddedPlanEngine(planner)
        self._planner: PlanEngine = planner
        self._max_plan_steps = max_plan_steps
        self._zone = zone or load_zone(configured_time_zone())

    def CreatePlan(
        self, request: planner_pb2.CreatePlanRequest, context: grpc.ServicerContext
    ) -> planner_pb2.CreatePlanResponse:
        if not request.query.strip():
            raise InvalidInput("query is empty", reason=Reason.QUERY_EMPTY, field="query")
        mode = spec_value(enums_pb2.PlannerMode.DESCRIPTOR, request.mode) or "NORMAL"
        retry_context = (
            message_to_model(request.retry_context, RetryContext)
            if request.HasField("retry_context")
            else None
        )
        if mode == "EVIDENCE_GAP_ONLY" and retry_context is None:
            raise InvalidInput("EVIDENCE_GAP_ONLY planning needs a retry_context", reason=Reason.FIELD_REQUIRED,
                               field="retry_context")
        now = _parse_now(request.now)
        # A follow-up in a session: what the question inherits is read here,
        # once, by our code; whichever engine plans applies it.
        follow_up = read_follow_up(request.query, now, self._zone, _inherited(request),
                                   extract_service_names(request.query, MAX_SERVICES))
        # What the question asks for is read here, once, by our code (never taken from a model);
        # the executor and the composer take it from the plan.
        intent = classify_question(request.query)
        if follow_up is None:
            run = self._planner.create_plan(request.query, now, mode, retry_context,
                                            time_remaining=deadline_budget(context), intent=intent)
        else:
            run = self._planner.create_plan(request.query, now, mode, retry_context,
                                            time_remaining=deadline_budget(context), follow_up=follow_up, intent=intent)
        plan = bounded_plan(run.plan, self._max_plan_steps).model_copy(update={"intent": intent})
        if mode == "NORMAL" and intent.triage and not plan.services and not plan.unchecked_services:
            plan = triage_plan(plan)
        response = planner_pb2.CreatePlanResponse(
            plan=plain_to_message(plan, evidence_pb2.Plan),
            prompt=prompt_ref_info(run.audit.prompt),
            model_call=model_call_info(run.audit),
        )
        if follow_up is not None:
            response.follow_up.CopyFrom(_follow_up_info(follow_up))
        return response

    def DescribePrompts(
        self, request: planner_pb2.DescribePromptsRequest, context: grpc.ServicerContext
    ) -> planner_pb2.DescribePromptsResponse:
        """The plan prompt of the configured engine; none in single-ReAct mode, which runs no planner."""
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        engines = [] if mode == "SINGLE_REACT" else [self._planner]
        return planner_pb2.DescribePromptsResponse(
            provider=self._planner.provider,
            prompts=[prompt_ref_info(engine.prompt_ref) for engine in engines],
        )
