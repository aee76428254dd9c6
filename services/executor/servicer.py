"""ExecutorService: runs the plan's tools, persists every invocation before its result is used,
and returns the executor's final text with its parse status."""

from __future__ import annotations

import json
import logging

import grpc
from opentelemetry import trace

from attest.common.v1 import audit_pb2, enums_pb2, evidence_pb2, executor_contract_pb2
from attest.executor.v1 import executor_pb2, executor_pb2_grpc
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.tools.registry import ToolError, ToolRegistry
from services.executor.trace_summary import build_tool_trace_summary
from shared.contracts import Plan, ToolInvocation
from shared.db.invocation_store import InvocationStore
from shared.errors import InvalidInput
from shared.executor_contract import parse_executor_output
from shared.proto_convert import enum_number, message_to_model, plain_to_message

log = logging.getLogger(__name__)
PROMPT = audit_pb2.PromptRef(role="executor", name="executor.embedded", version="1")
MAX_REQUEST_VALUE_CHARS = 500


def _bounded_request(tool_name: str, arguments: dict) -> dict:
    """The request scope stored with an invocation: the arguments, each value bounded."""
    scope = {"tool": tool_name}
    for key, value in arguments.items():
        text = value if isinstance(value, (int, float, bool)) or value is None else str(value)
        if isinstance(text, str) and len(text) > MAX_REQUEST_VALUE_CHARS:
            text = text[:MAX_REQUEST_VALUE_CHARS]
        scope[key] = text
    return scope


class ToolRunner:
    """Persists each call as PROJECTING before running it, then READY or ERROR."""

    def __init__(self, store: InvocationStore, registry: ToolRegistry, run_id: str, round_: int,
                 context: grpc.ServicerContext | None = None) -> None:
        self._store = store
        self._registry = registry
        self._run_id = run_id
        self._round = round_
        self._context = context
        self._count = 0
        self.invocations: list[ToolInvocation] = []
        self._tracer = trace.get_tracer("attest.executor")

    def __call__(self, tool_name: str, arguments: dict) -> ToolInvocation:
        if self._context is not None and not self._context.is_active():
            raise InterruptedError("the diagnosis was cancelled")
        self._count += 1
        tool_call_id = f"r{self._round}-call-{self._count}"
        with self._tracer.start_as_current_span(f"tool {tool_name}") as span:
            invocation_id = self._store.begin(
                self._run_id, tool_call_id, tool_name, self._round, _bounded_request(tool_name, arguments)
            )
            span.set_attribute("attest.run_id", self._run_id)
            span.set_attribute("attest.tool.name", tool_name)
            span.set_attribute("attest.invocation_id", invocation_id)
            try:
                result = self._registry.invoke(tool_name, arguments)
            except ToolError as exc:
                invocation = self._store.fail(invocation_id, str(exc))
            except Exception as exc:  # a backend failure is recorded, never raised into the agent
                log.exception("tool %s failed", tool_name)
                invocation = self._store.fail(invocation_id, f"{type(exc).__name__}: {exc}")
            else:
                invocation = self._store.complete(
                    invocation_id,
                    evidence_status=result.evidence_status,
                    agent_result=result.agent_result,
                    evidence_refs=result.evidence_refs,
                )
            span.set_attribute("attest.evidence_status", invocation.evidence_status or "")
        self.invocations.append(invocation)
        return invocation


class ExecutorServicer(executor_pb2_grpc.ExecutorServiceServicer):
    def __init__(self, store: InvocationStore, registry: ToolRegistry, agent: EmbeddedExecutorAgent) -> None:
        self._store = store
        self._registry = registry
        self._agent = agent

    def ExecutePlan(self, request: executor_pb2.ExecutePlanRequest, context: grpc.ServicerContext):
        if not request.run_id:
            raise InvalidInput("run_id is required")
        plan = message_to_model(request.plan, Plan)
        runner = ToolRunner(self._store, self._registry, request.run_id, request.round, context)
        output_text = self._agent.run(plan, runner, request.query)
        parsed = parse_executor_output(output_text)
        response = executor_pb2.ExecutePlanResponse(
            parse_status=enum_number(enums_pb2.ParseStatus.DESCRIPTOR, parsed.parse_status),
            parse_detail=parsed.detail,
            output_text=output_text,
            invocation_ids=[inv.invocation_id for inv in runner.invocations],
            tool_trace_summary=[
                plain_to_message(entry, evidence_pb2.ToolTraceSummaryEntry)
                for entry in build_tool_trace_summary(runner.invocations)
            ],
            prompt=PROMPT,
            model_call=audit_pb2.ModelCallInfo(role="executor", provider="embedded", model="executor.embedded", attempts=1),
        )
        if parsed.parse_status == "valid" and parsed.raw is not None:
            response.structured.CopyFrom(_typed_view(parsed.raw))
        return response


def _typed_view(raw: dict) -> executor_contract_pb2.ExecutorEvidenceV2:
    """Best-effort typed view of the raw output; values outside the contract read as UNSPECIFIED."""
    try:
        return plain_to_message(json.loads(json.dumps(raw, default=str)), executor_contract_pb2.ExecutorEvidenceV2)
    except Exception:  # the raw text stays authoritative; a view that cannot be built is left empty
        return executor_contract_pb2.ExecutorEvidenceV2(answer_version="executor_evidence_v2")
