"""ExecutorService: runs the plan's tools, persists every invocation before its result is used,
and returns the executor's final text with its parse status (ExecutePlan). In single-ReAct mode
it runs the diagnosis agent to a Draft (RunAgent) and makes the single-turn EvidenceRepair
(RepairDraft), which never runs a tool.

Before any step of ExecutePlan or RunAgent, the services the plan (or the question) names are
resolved against the backends' catalogue (`service_catalogue.py`): unknown names are never
queried, at most `max_services_per_question` are checked, and the response's `service_coverage`
says which were checked, unknown (with close matches) or not checked. A single word of the
question (`frontend`) that the catalogue knows is checked like a planned service (ExecutePlan adds
its steps to a NORMAL plan); one it does not know is no service. When the plan (the question)
then names no service at all, nothing runs and the coverage names none: the gateway answers as
for a question without a service.

A triage question (Plan.triage in ExecutePlan; the question intent's `triage` in RunAgent), which
names no service and asks which are abnormal, checks the catalogue's services instead
(`service_catalogue.triage_resolution`): at most `triage_max_services`, and no more than their
steps fit in the plan's (the agent's) step limit; the coverage, marked `triage`, names the
ones checked and the rest of the catalogue as not checked. When the catalogue cannot be read,
nothing is checked and the answer is as for a question without a service.

Every RPC acts on an open run the gateway started: an unknown run is NOT_FOUND
and a finished one FAILED_PRECONDITION, also when the run is finished while the RPC runs (the
invocation store refuses the write; the RPC then returns nothing of what it found). A plan is
checked against `plan_limits.py` before any step runs, and the run's budget of invocations and
evidence bytes before any tool runs (RESOURCE_EXHAUSTED when it is used up or the plan would
exceed it). An agent that reaches the budget while running stops calling tools: the embedded
executor answers with what it has and names the checks it did not run in missing_info, the model
executor gets its final turn without tools (as at `max_tool_steps`), and a ReAct agent stops with
RUN_BUDGET_EXHAUSTED (as at its step bound), released from what its recorded steps verified.

ExecutePlan and RunAgent carry the attempt of (run, round): 0, or 1 for the
gateway's one retry after the replica running attempt 0 was lost. Before any tool runs the attempt
is started in the store, which marks the earlier attempt's invocations abandoned; a stale attempt
(not above the one started) is FAILED_PRECONDITION, and a superseded attempt's later writes are
refused, so the RPC of a replica that was only cut off returns FAILED_PRECONDITION and nothing of
what it found. Nothing here answers UNAVAILABLE: that code means the replica itself was lost."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, cast

import grpc
from opentelemetry import trace
from pydantic import ValidationError

from attest.common.v1 import enums_pb2, evidence_pb2, executor_contract_pb2, single_react_pb2
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from services.executor.citation_self_check import check_output_text, log_report
from services.executor.draft_render import ref_texts, render_draft
from services.executor.draft_repair import DraftRepair, EmbeddedDraftRepair, ModelDraftRepair
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.engine import EmbeddedAgent, EmbeddedEngine, ExecutorEngine
from services.executor.openai_agent import OpenAIExecutorAgent
from services.executor.plan_limits import PlanLimits, check_plan
from services.executor.prompts import DRAFT_REPAIR_PROMPT, REACT_AGENT_PROMPT, load_prompt
from services.executor.react_agent import (
    DEFAULT_AGENT_STEPS,
    MAX_AGENT_STEPS,
    EmbeddedReactAgent,
    ReactAgent,
)
from services.executor.react_model_agent import OpenAIReactAgent
from services.executor.service_catalogue import (
    Catalogue,
    Resolution,
    ServiceCatalogue,
    confirm_checked,
    known_single_words,
    plan_service_names,
    resolve_services,
    restrict_plan,
    steps_per_service,
    triage_bound,
    triage_plan,
    triage_resolution,
    with_single_words,
)
from services.executor.tools.backends import utc_now
from services.executor.tools.knowledge_dedupe import earlier_knowledge_hits, knowledge_hit_keys, mark_deduped
from services.executor.tools.redacting_store import RedactingInvocationStore
from services.executor.tools.registry import ToolArgumentError, ToolError, ToolRegistry, ToolResult
from services.executor.trace_summary import build_tool_trace_summary
from shared.config import ModelSettings, configured_failure_modes
from shared.core.contracts import Plan, QuestionIntent, TimeWindow, ToolInvocation
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.question_intent import classify_question, plan_intent
from shared.core.question_window import DEFAULT_WINDOW
from shared.core.service_mentions import extract_service_names
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE as KNOWLEDGE_TOOL
from shared.db.invocation_store import InvocationStore
from shared.draft_contract import Draft, GuardViolation
from shared.errors import Cancelled, FailedPrecondition, InvalidInput, NotFound, Reason, ResourceExhausted
from shared.executor_contract import parse_executor_output
from shared.model_calls import deadline_budget, model_call_info, prompt_ref_info
from shared.model_client import ModelClient
from shared.proto_convert import enum_member, message_to_model, plain_to_message, spec_value

log = logging.getLogger(__name__)
MAX_REQUEST_VALUE_CHARS = 500
MAX_TOOL_CALL_ID_CHARS = 200
MAX_QUERY_CHARS = 8000
MAX_REPAIR_VIOLATIONS = 500
# The gateway retries a round once (attempt 1): the highest attempt, so that a run stores at most
# twice its budget of invocations (an abandoned attempt's are not charged to the retry).
MAX_ATTEMPT = 1
# ExecutorSettings.max_services_per_question's default, for servicers built without settings.
DEFAULT_MAX_SERVICES = 10
# ExecutorSettings.triage_max_services' default.
DEFAULT_TRIAGE_MAX_SERVICES = 12


def _bounded_request(tool_name: str, arguments: Any) -> dict[str, Any]:
    """The request scope stored with an invocation: the arguments, each value bounded. Arguments
    that are not an object (a model's unparsable text) are kept, bounded, as `raw_arguments`."""
    scope: dict[str, Any] = {"tool": tool_name}
    if not isinstance(arguments, dict):
        scope["raw_arguments"] = str(arguments)[:MAX_REQUEST_VALUE_CHARS]
        return scope
    for key, value in arguments.items():
        text = value if isinstance(value, (int, float, bool)) or value is None else str(value)
        if isinstance(text, str) and len(text) > MAX_REQUEST_VALUE_CHARS:
            text = text[:MAX_REQUEST_VALUE_CHARS]
        scope[key] = text
    return scope


class ServiceNotInCatalogue(ToolArgumentError):
    """A call for a service the backends do not know, or one the question named but that is left
    unchecked: refused before anything is persisted or queried."""


class ToolRunner:
    """Persists each call as PROJECTING before running it, then READY or ERROR. With a service
    resolution, a call naming a service it does not allow is refused before anything happens."""

    def __init__(self, store: InvocationStore, registry: ToolRegistry, run_id: str, round_: int,
                 context: grpc.ServicerContext | None = None, resolution: Resolution | None = None,
                 attempt: int = 0) -> None:
        # Every request, result and error is redacted on its way into the store.
        self._store = RedactingInvocationStore(store, registry.redactor)
        self._registry = registry
        self._run_id = run_id
        self._round = round_
        self._attempt = attempt
        self._context = context
        self._resolution = resolution
        self._count = 0
        self.invocations: list[ToolInvocation] = []
        # The run could not be written to (unknown, or finished meanwhile): every later call is
        # refused the same way, and the RPC raises it once the agent returns.
        self.refusal: NotFound | FailedPrecondition | None = None
        # The run's budget is used up: no further tool is run.
        self.exhausted: ResourceExhausted | None = None
        self._tracer = trace.get_tracer("attest.executor")
        # Knowledge hits already returned in this run (any round); loaded at the first lookup.
        self._knowledge_seen: set[str] | None = None

    @property
    def resolution(self) -> Resolution | None:
        """The run's service resolution: an agent following a dependency asks it which names are
        services it may call."""
        return self._resolution

    def _dedupe_knowledge(self, result: ToolResult) -> ToolResult:
        """DESIGN §2: a lookup_knowledge hit returned earlier in the run is no new evidence."""
        if result.tool_name != KNOWLEDGE_TOOL:
            return result
        if self._knowledge_seen is None:
            self._knowledge_seen = earlier_knowledge_hits(self._store.list_for_run(self._run_id, KNOWLEDGE_TOOL))
        result = mark_deduped(result, self._knowledge_seen)
        self._knowledge_seen |= knowledge_hit_keys(result)
        return result

    def __call__(self, tool_name: str, arguments: Any, tool_call_id: str | None = None) -> ToolInvocation:
        """`tool_call_id` is the model's id of the call, when a model made it."""
        if self._context is not None and not self._context.is_active():
            raise Cancelled("the diagnosis was cancelled")
        if self.refusal is not None:
            raise self.refusal
        if self.exhausted is not None:
            raise self.exhausted
        # A disabled tool is refused before anything is persisted or queried.
        self._registry.refuse_disabled(tool_name)
        arguments = self._allowed_arguments(tool_name, arguments)
        self._count += 1
        tool_call_id = (tool_call_id or f"r{self._round}-call-{self._count}")[:MAX_TOOL_CALL_ID_CHARS]
        with self._tracer.start_as_current_span(f"tool {tool_name}") as span:
            invocation_id = self._guarded(
                self._store.begin,
                self._run_id, tool_call_id, tool_name, self._round, _bounded_request(tool_name, arguments),
                attempt=self._attempt,
            )
            span.set_attribute("attest.run_id", self._run_id)
            span.set_attribute("attest.tool.name", tool_name)
            span.set_attribute("attest.round", self._round)
            span.set_attribute("attest.attempt", self._attempt)
            span.set_attribute("attest.invocation_id", invocation_id)
            invocation: ToolInvocation
            try:
                result = self._dedupe_knowledge(self._registry.invoke(tool_name, arguments))
            except ToolError as exc:
                invocation = self._guarded(self._store.fail, invocation_id, str(exc))
            except Exception as exc:  # a backend failure is recorded, never raised into the agent
                log.exception("tool %s failed", tool_name)
                invocation = self._guarded(self._store.fail, invocation_id, f"{type(exc).__name__}: {exc}")
            else:
                invocation = self._complete(invocation_id, result)
            span.set_attribute("attest.evidence_status", invocation.evidence_status or "")
        self.invocations.append(invocation)
        return invocation

    def _complete(self, invocation_id: int, result: ToolResult) -> ToolInvocation:
        """READY with the result. A result the run's evidence budget cannot hold is not stored:
        the store records the invocation as failed saying so, and no further tool is run."""
        try:
            invocation: ToolInvocation = self._guarded(
                self._store.complete, invocation_id, evidence_status=result.evidence_status,
                agent_result=result.agent_result, source=result.source, ref_count=result.ref_count,
                deduped=result.deduped,
            )
        except ResourceExhausted:
            (invocation,) = self._store.get_many([invocation_id])
        return invocation

    def _guarded(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A store write; a refusal of the run is remembered, so that the RPC raises it in the end."""
        try:
            return write(*args, **kwargs)
        except (NotFound, FailedPrecondition) as exc:
            self.refusal = exc
            raise
        except ResourceExhausted as exc:
            self.exhausted = exc
            raise

    def raise_if_refused(self) -> None:
        """The run's refusal, if a write met one: the RPC then returns nothing it found."""
        if self.refusal is not None:
            raise self.refusal

    def _allowed_arguments(self, tool_name: str, arguments: Any) -> Any:
        """The arguments with the service spelled as the catalogue spells it; ServiceNotInCatalogue
        for a service no tool may be called for."""
        if self._resolution is None or not isinstance(arguments, dict):
            return arguments
        service = arguments.get("service")
        if not isinstance(service, str) or not service.strip():
            return arguments
        spelled = self._resolution.callable_name(service)
        if spelled is None:
            raise ServiceNotInCatalogue(
                tool_name, f"service {service[:60]!r} is not a known service of this run; nothing was queried"
            )
        return arguments if spelled == service else {**arguments, "service": spelled}


def build_engine(settings: ModelSettings, registry: ToolRegistry, client: ModelClient | None = None,
                 embedded_agent: Any = None) -> ExecutorEngine:
    """The engine the executor's model settings name: the embedded engine (the default), or the
    OpenAI-compatible tool-calling agent over `client`."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai executor engine needs a model client")
        return OpenAIExecutorAgent(
            client, registry, load_prompt(), settings.max_tool_steps,
            max_attempts=settings.max_attempts, json_schema_format=settings.json_schema_format,
        )
    return EmbeddedEngine(embedded_agent if embedded_agent is not None else EmbeddedExecutorAgent())


def build_react_agent(settings: ModelSettings, registry: ToolRegistry, client: ModelClient | None = None) -> ReactAgent:
    """The single-ReAct agent the executor's model settings name: embedded (the default) or the
    model-backed agent over `client`."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai react agent needs a model client")
        return OpenAIReactAgent(
            client, registry, load_prompt(REACT_AGENT_PROMPT),
            max_attempts=settings.max_attempts, json_schema_format=settings.json_schema_format,
        )
    return EmbeddedReactAgent(planner=EmbeddedPlanner(disabled_tools=registry.disabled()))


def build_draft_repair(settings: ModelSettings, client: ModelClient | None = None) -> DraftRepair:
    """The EvidenceRepair the executor's model settings name: embedded or one model call."""
    if settings.provider == "openai":
        if client is None:
            raise ValueError("the openai draft repair needs a model client")
        return ModelDraftRepair(client, load_prompt(DRAFT_REPAIR_PROMPT), json_schema_format=settings.json_schema_format)
    return EmbeddedDraftRepair()


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    def __init__(
        self,
        store: InvocationStore,
        registry: ToolRegistry,
        engine: ExecutorEngine | Any,
        react_agent: ReactAgent | None = None,
        draft_repair: DraftRepair | None = None,
        catalogue: ServiceCatalogue | None = None,
        max_services_per_question: int = DEFAULT_MAX_SERVICES,
        plan_limits: PlanLimits | None = None,
        triage_max_services: int = DEFAULT_TRIAGE_MAX_SERVICES,
    ) -> None:
        """Without a `catalogue` names are not resolved (nothing is refused); the per-question
        limit on checked services still applies. The run budget is the `store`'s."""
        self._store = store
        self._plan_limits = plan_limits if plan_limits is not None else PlanLimits()
        self._registry = registry
        self._catalogue = catalogue
        self._max_services = max_services_per_question
        self._triage_max_services = triage_max_services
        # An agent with only `run(plan, call_tool, query)` is the embedded engine.
        self._engine: ExecutorEngine = engine if hasattr(engine, "execute") else EmbeddedEngine(cast(EmbeddedAgent, engine))
        self._react_agent: ReactAgent = react_agent if react_agent is not None else EmbeddedReactAgent()
        self._draft_repair: DraftRepair = draft_repair if draft_repair is not None else EmbeddedDraftRepair()

    def _catalogue_snapshot(self) -> Catalogue:
        if self._catalogue is None:
            return Catalogue(available=False, error="no service catalogue configured")
        return self._catalogue.snapshot()

    def _resolve(self, named: list[str], plannable: set[str] | None) -> Resolution:
        """The names resolved against the backends' catalogue before any step runs."""
        resolution = resolve_services(named, self._catalogue_snapshot(), self._max_services, plannable)
        coverage = resolution.coverage
        span = trace.get_current_span()
        span.set_attribute("attest.services.checked", len(coverage.checked))
        span.set_attribute("attest.services.unknown", len(coverage.unknown))
        span.set_attribute("attest.services.unchecked", len(coverage.unchecked))
        if coverage.unknown or coverage.unchecked or coverage.catalogue_unavailable:
            log.info("services: checked %s, unknown %s, not checked %s%s", coverage.checked,
                     [u.name for u in coverage.unknown], coverage.unchecked,
                     f" (catalogue unavailable: {resolution.catalogue.error})" if coverage.catalogue_unavailable else "")
        return resolution

    def _triage(self, limit: int) -> Resolution:
        """A triage's services from the catalogue (at most `limit` checked)."""
        resolution = triage_resolution(self._catalogue_snapshot(), limit)
        coverage = resolution.coverage
        span = trace.get_current_span()
        span.set_attribute("attest.triage.catalogue_size", coverage.catalogue_size)
        span.set_attribute("attest.services.checked", len(coverage.checked))
        span.set_attribute("attest.services.unchecked", len(coverage.unchecked))
        log.info("triage: checked %s of %d catalogued service(s)%s", coverage.checked, coverage.catalogue_size,
                 " (catalogue unavailable)" if coverage.catalogue_unavailable else "")
        return resolution

    def _triage_plan(self, plan: Plan) -> tuple[Plan, Resolution]:
        """A triage plan over the catalogue's services, within the plan step limit."""
        window = plan.window
        if window is None:  # a model planner may leave it out: the hour ending now
            end = utc_now()
            window = TimeWindow(start=(end - DEFAULT_WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                end=end.strftime("%Y-%m-%dT%H:%M:%SZ"))
            plan = plan.model_copy(update={"window": window})
        reserved = sum(1 for step in plan.steps if not step.arguments.get("service"))
        limit = triage_bound(self._triage_max_services, self._plan_limits.max_steps,
                             steps_per_service(window, plan.symptoms), reserved)
        resolution = self._triage(limit)
        return triage_plan(plan, resolution), resolution

    def ExecutePlan(
        self, request: executor_pb2.ExecutePlanRequest, context: grpc.ServicerContext
    ) -> executor_pb2.ExecutePlanResponse:
        if not request.run_id:
            raise InvalidInput("run_id is required", reason=Reason.FIELD_REQUIRED, field="run_id")
        if len(request.query) > MAX_QUERY_CHARS:
            raise InvalidInput(f"query is longer than {MAX_QUERY_CHARS} characters", reason=Reason.QUERY_TOO_LONG,
                               field="query", metadata={"limit": MAX_QUERY_CHARS})
        _check_attempt(request.attempt)
        try:  # a plan that breaks the contract (an absent one too) is the caller's mistake
            plan = message_to_model(request.plan, Plan)
        except ValidationError as exc:
            raise InvalidInput(f"the plan does not follow the contract ({exc.error_count()} error(s))",
                               reason=Reason.MALFORMED_REQUEST, field="plan") from None
        plan = plan.model_copy(update={"intent": plan_intent(plan, request.query)})
        # The question's single words that the backends know are services the planner could not tell.
        plan = with_single_words(plan, known_single_words(request.query, self._catalogue_snapshot()),
                                 self._plan_limits.max_steps)
        named, stepped = plan_service_names(plan)
        # A triage plan names no service: the catalogue's are checked (its steps are ours).
        triage = plan.triage and plan.mode == "NORMAL" and not named
        if named or plan.steps or ("service" not in plan.missing_context and not triage):
            # Only a plan that read no service in the question may come without steps (answered
            # below); any other plan without steps is the caller's mistake.
            check_plan(plan, self._plan_limits)
        # Refused as `require_open` would refuse it (NotFound, or a finished run), or as stale.
        self._store.start_attempt(request.run_id, request.round, request.attempt)
        if triage:
            plan, resolution = self._triage_plan(plan)
            if not resolution.coverage.checked:
                return self._no_service("triage: the backends' catalogue lists no service it could check; nothing was run")
        else:
            resolution = self._resolve(named, stepped)
        if not resolution.coverage.named and (named or not plan.steps):
            # Nothing to run, or only single words the backends do not know: nothing is a service.
            return self._no_service("the plan names no service the backends know; nothing was run")
        coverage = plain_to_message(resolution.coverage, evidence_pb2.ServiceCoverage)
        if resolution.coverage.nothing_known:
            # Every named service is unknown: no step runs, nothing is said about them.
            return executor_pb2.ExecutePlanResponse(
                parse_status=enum_member(enums_pb2.ParseStatus, "missing"),
                parse_detail="no service the plan names is known to the backends; nothing was run",
                service_coverage=coverage,
                disabled_tools=self._registry.disabled(),
            )
        plan = restrict_plan(plan, resolution)
        # A disabled tool's steps are not run (the answer names the tool).
        plan = plan.model_copy(update={"steps": [s for s in plan.steps if not self._registry.is_disabled(s.tool_name)]})
        self._store.require_open(request.run_id, planned_calls=len(plan.steps))
        runner = ToolRunner(self._store, self._registry, request.run_id, request.round, context, resolution,
                            attempt=request.attempt)
        run = self._engine.execute(
            plan, runner, request.query,
            time_remaining=deadline_budget(context),
            is_active=context.is_active if context is not None else None,
        )
        runner.raise_if_refused()
        # No citation leaves the executor that the gatekeeper's own check would refuse.
        checked = check_output_text(run.text, self._store.list_for_run(request.run_id), request.run_id)
        log_report(checked.report, request.run_id)
        run.text = checked.text
        coverage = plain_to_message(confirm_checked(resolution.coverage, runner.invocations),
                                    evidence_pb2.ServiceCoverage)
        parsed = checked.parsed if checked.parsed is not None else parse_executor_output(run.text)
        detail = parsed.detail if not run.failure else f"{run.failure}; {parsed.detail}"
        detail = "; ".join(part for part in (detail, checked.report.summary()) if part)
        response = executor_pb2.ExecutePlanResponse(
            parse_status=enum_member(enums_pb2.ParseStatus, parsed.parse_status),
            parse_detail=detail,
            output_text=run.text,
            invocation_ids=[inv.invocation_id for inv in runner.invocations],
            tool_trace_summary=[
                plain_to_message(entry, evidence_pb2.ToolTraceSummaryEntry)
                for entry in build_tool_trace_summary(runner.invocations)
            ],
            prompt=prompt_ref_info(run.audit.prompt),
            model_call=model_call_info(run.audit),
            service_coverage=coverage,
            disabled_tools=self._registry.disabled(),
        )
        if parsed.parse_status == "valid" and parsed.raw is not None:
            response.structured.CopyFrom(_typed_view(parsed.raw))
        return response

    def _no_service(self, detail: str) -> executor_pb2.ExecutePlanResponse:
        """Nothing named is a service: no step runs, and the (empty) coverage says so."""
        return executor_pb2.ExecutePlanResponse(
            parse_status=enum_member(enums_pb2.ParseStatus, "missing"),
            parse_detail=detail,
            service_coverage=evidence_pb2.ServiceCoverage(limit=self._max_services),
            disabled_tools=self._registry.disabled(),
        )

    def RunAgent(
        self, request: executor_pb2.RunAgentRequest, context: grpc.ServicerContext
    ) -> executor_pb2.RunAgentResponse:
        """Single-ReAct mode: the agent's Draft (absent when it failed strict parsing or the agent
        stopped in a controlled way, see `stop_reason`) and its verified ProgressSnapshot."""
        if not request.run_id:
            raise InvalidInput("run_id is required", reason=Reason.FIELD_REQUIRED, field="run_id")
        if not request.query.strip():
            raise InvalidInput("query is required", reason=Reason.QUERY_EMPTY, field="query")
        if len(request.query) > MAX_QUERY_CHARS:
            raise InvalidInput(f"query is longer than {MAX_QUERY_CHARS} characters", reason=Reason.QUERY_TOO_LONG,
                               field="query", metadata={"limit": MAX_QUERY_CHARS})
        if request.max_steps < 0 or request.max_steps > MAX_AGENT_STEPS:
            raise InvalidInput(f"max_steps must be between 0 (default {DEFAULT_AGENT_STEPS}) and {MAX_AGENT_STEPS}",
                               reason=Reason.VALUE_OUT_OF_RANGE, field="max_steps", metadata={"limit": MAX_AGENT_STEPS})
        _check_attempt(request.attempt)
        intent = _request_intent(request)
        # The run's one agent round is round 0; its attempt starts before the budget is read, since
        # an abandoned attempt is not charged to the retry.
        self._store.start_attempt(request.run_id, 0, request.attempt)
        self._store.require_open(request.run_id, planned_calls=0)  # refused once its budget is used up
        named = [*extract_service_names(request.query), *known_single_words(request.query, self._catalogue_snapshot())]
        if not named and intent.triage:
            # A triage question: the catalogue's services, as many as the agent's steps can check
            # (one step is left for the runbook lookup).
            steps = request.max_steps or DEFAULT_AGENT_STEPS
            resolution = self._triage(triage_bound(self._triage_max_services, steps, steps_per_service(), 1))
        else:
            resolution = self._resolve(named, None)
        coverage = plain_to_message(resolution.coverage, evidence_pb2.ServiceCoverage)
        if resolution.coverage.nothing_known:
            # Every named service is unknown: the agent does not run, no tool is called.
            return executor_pb2.RunAgentResponse(
                draft_parse_detail="no service the question names is known to the backends; the agent did not run",
                service_coverage=coverage,
                disabled_tools=self._registry.disabled(),
            )
        runner = ToolRunner(self._store, self._registry, request.run_id, 0, context, resolution,
                            attempt=request.attempt)
        # An abandoned attempt's ids are free again: the retry may reuse them (the guard resolves
        # a tool call id among the run's current invocations only).
        taken = {inv.tool_call_id for inv in self._store.list_for_run(request.run_id)}
        run = self._react_agent.run(  # a caller gone raises shared.errors.Cancelled: CANCELLED
            request.query, runner,
            max_steps=request.max_steps or DEFAULT_AGENT_STEPS,
            taken_tool_call_ids=taken,
            time_remaining=deadline_budget(context),
            is_active=context.is_active if context is not None else None,
            services=list(resolution.coverage.checked) if resolution.coverage.named else None,
            intent=intent,
        )
        runner.raise_if_refused()
        response = executor_pb2.RunAgentResponse(
            draft_parse_detail=run.draft_parse_detail,
            progress=plain_to_message(run.progress, single_react_pb2.ProgressSnapshot),
            tool_call_ids=run.tool_call_ids,
            stop_reason=run.stop_reason,
            prompt=prompt_ref_info(run.audit.prompt),
            model_call=model_call_info(run.audit),
            service_coverage=plain_to_message(confirm_checked(resolution.coverage, runner.invocations),
                                              evidence_pb2.ServiceCoverage),
            disabled_tools=self._registry.disabled(),
        )
        if run.draft is not None:
            draft = render_draft(run.draft, ref_texts(runner.invocations), configured_failure_modes())
            response.draft.CopyFrom(plain_to_message(draft, single_react_pb2.Draft))
        return response

    def RepairDraft(
        self, request: executor_pb2.RepairDraftRequest, context: grpc.ServicerContext
    ) -> executor_pb2.RepairDraftResponse:
        """The single-turn EvidenceRepair: identifiers and references only, no tool, no agent.
        `draft` is absent when no usable repair was produced."""
        if not request.run_id:
            raise InvalidInput("run_id is required", reason=Reason.FIELD_REQUIRED, field="run_id")
        if not request.HasField("draft"):
            raise InvalidInput("draft is required", reason=Reason.FIELD_REQUIRED, field="draft")
        if len(request.violations) > MAX_REPAIR_VIOLATIONS:
            raise InvalidInput(f"more than {MAX_REPAIR_VIOLATIONS} violations", reason=Reason.TOO_MANY_ITEMS,
                               field="violations", metadata={"limit": MAX_REPAIR_VIOLATIONS})
        self._store.require_open(request.run_id)  # a finished run's evidence is not read back
        draft = message_to_model(request.draft, Draft)
        violations = [message_to_model(v, GuardViolation) for v in request.violations]
        invocations = self._store.list_for_run(request.run_id)
        run = self._draft_repair.repair(draft, violations, invocations, time_remaining=deadline_budget(context))
        response = executor_pb2.RepairDraftResponse(
            prompt=prompt_ref_info(run.audit.prompt), model_call=model_call_info(run.audit),
        )
        if run.draft is not None:
            # A typed Draft's texts are Attest's, written again from the repaired statements.
            repaired = render_draft(run.draft, ref_texts(invocations), configured_failure_modes())
            response.draft.CopyFrom(plain_to_message(repaired, single_react_pb2.Draft))
        return response

    def DescribePrompts(
        self, request: executor_pb2.DescribePromptsRequest, context: grpc.ServicerContext
    ) -> executor_pb2.DescribePromptsResponse:
        """The prompts of the configured engines, in call order: ExecutePlan's in multi-agent mode;
        RunAgent's, then RepairDraft's, in single-ReAct mode."""
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        engines: list[ReactAgent | DraftRepair | ExecutorEngine] = (
            [self._react_agent, self._draft_repair] if mode == "SINGLE_REACT" else [self._engine])
        return executor_pb2.DescribePromptsResponse(
            provider=engines[0].provider, prompts=[prompt_ref_info(engine.prompt_ref) for engine in engines],
        )


def _request_intent(request: executor_pb2.RunAgentRequest) -> QuestionIntent:
    """What the question asks for: the gateway's reading it sends, or, from a caller that sends only
    the query, the query read once here."""
    if not request.HasField("intent"):
        return classify_question(request.query)
    try:
        return message_to_model(request.intent, QuestionIntent)
    except ValidationError as exc:
        raise InvalidInput(f"the question intent does not follow the contract ({exc.error_count()} error(s))",
                           reason=Reason.MALFORMED_REQUEST, field="intent") from None


def _check_attempt(attempt: int) -> None:
    if not 0 <= attempt <= MAX_ATTEMPT:
        raise InvalidInput(f"attempt must be between 0 (the first) and {MAX_ATTEMPT} (the gateway's one retry)",
                           reason=Reason.VALUE_OUT_OF_RANGE, field="attempt", metadata={"limit": MAX_ATTEMPT})


def _typed_view(raw: dict[str, Any]) -> executor_contract_pb2.ExecutorEvidenceV2:
    """Best-effort typed view of the raw output; values outside the contract read as UNSPECIFIED."""
    try:
        return plain_to_message(json.loads(json.dumps(raw, default=str)), executor_contract_pb2.ExecutorEvidenceV2)
    except Exception:  # the raw text stays authoritative; a view that cannot be built is left empty
        return executor_contract_pb2.ExecutorEvidenceV2(answer_version="executor_evidence_v2")
