"""GatewayService: validates requests, opens a run, drives the graph, and maps the outcome."""

from __future__ import annotations

import contextvars
import queue
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import grpc
from google.protobuf import struct_pb2
from opentelemetry import trace

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.audit import described_prompts_for_run
from gateway.clients import Deadline, PromptDescriptions
from gateway.graph import DiagnosisGraph, DiagnosisOutcome
from shared.config import GatewaySettings
from shared.db.run_store import RunStore
from shared.errors import InvalidInput, NotFound
from shared.proto_convert import enum_member, spec_value

MAX_SESSION_ID_CHARS = 128
MAX_LABEL_CHARS = 200
_ALLOWED_CONTROL = frozenset({"\n", "\t", "\r"})


def _has_control_characters(text: str, allowed: frozenset[str] = frozenset()) -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in allowed for ch in text)


def validate_query(query: str, max_chars: int) -> str:
    text = query.strip()
    if not text:
        raise InvalidInput("query is empty")
    if len(text) > max_chars:
        raise InvalidInput(f"query is {len(text)} characters; the limit is {max_chars}")
    if _has_control_characters(text, _ALLOWED_CONTROL):
        raise InvalidInput("query contains control characters")
    return text


def _current_trace_id() -> str:
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def _verdict(value: str | None) -> enums_pb2.Verdict:
    return enum_member(enums_pb2.Verdict, value)


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(self, graph: DiagnosisGraph, runs: RunStore, settings: GatewaySettings,
                 prompts: PromptDescriptions | None = None) -> None:
        """`prompts` asks the roles which prompts they use; without it the audit names every role
        a run did not reach `unknown`."""
        self._graph = graph
        self._runs = runs
        self._settings = settings
        self._prompts = prompts

    # -- shared by Diagnose and DiagnoseStream ---------------------------------------------------

    def _diagnose(self, request: gateway_pb2.DiagnoseRequest | gateway_pb2.DiagnoseStreamRequest,
                  context: grpc.ServicerContext,
                  emit: Callable[[str, str, str, int, dict[str, Any]], None]) -> gateway_pb2.DiagnoseResponse:
        query = validate_query(request.query, self._settings.max_query_chars)
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        if len(request.session_id) > MAX_SESSION_ID_CHARS or len(request.client_label) > MAX_LABEL_CHARS:
            raise InvalidInput("session_id or client_label is too long")
        # Stored as text and used as a key: PostgreSQL refuses NUL in text, so refuse it here.
        if _has_control_characters(request.session_id) or _has_control_characters(request.client_label):
            raise InvalidInput("session_id or client_label contains control characters")
        if request.session_id and not self._runs.session_exists(request.session_id):
            raise NotFound(f"unknown session {request.session_id[:40]!r}")
        trace_id = _current_trace_id()
        session_id, run_id = self._runs.start_run(request.session_id or None, query, mode, trace_id=trace_id or None,
                                                  client_label=request.client_label)
        remaining = context.time_remaining()
        budget = self._settings.diagnosis_timeout_seconds
        if remaining is not None:
            budget = min(budget, remaining)
        # The graph builds the run's audit; it starts from what the roles say they use (issue 17, 3c).
        described = nullcontext() if self._prompts is None else described_prompts_for_run(self._prompts.start(mode))
        with described:
            outcome = self._graph.run(run_id, query, Deadline.after(budget), context.is_active, emit, mode)
        if outcome.status == "CANCELLED":
            context.abort(grpc.StatusCode.CANCELLED, "the diagnosis was cancelled")
        return self._response(outcome, session_id, trace_id)

    @staticmethod
    def _response(outcome: DiagnosisOutcome, session_id: str, trace_id: str) -> gateway_pb2.DiagnoseResponse:
        return gateway_pb2.DiagnoseResponse(
            run_id=outcome.run_id,
            session_id=session_id,
            answer=outcome.answer,
            effective_verdict=_verdict(outcome.effective_verdict),
            model_verdict=_verdict(outcome.model_verdict),
            verdict_ceiling=_verdict(outcome.verdict_ceiling),
            groundedness_score=outcome.groundedness_score,
            fallback_type=enum_member(enums_pb2.FallbackType, outcome.fallback_type),
            release_outcome=enum_member(
                enums_pb2.ReleaseOutcome,
                outcome.release_outcome or ("FALLBACK" if outcome.fallback_type else "SUCCESS"),
            ),
            trace_id=trace_id,
            rounds=outcome.rounds,
            status=outcome.status,
        )

    # -- RPCs ----------------------------------------------------------------------------------

    def Diagnose(self, request: gateway_pb2.DiagnoseRequest,
                 context: grpc.ServicerContext) -> gateway_pb2.DiagnoseResponse:
        return self._diagnose(request, context, lambda *event: None)

    def DiagnoseStream(self, request: gateway_pb2.DiagnoseStreamRequest,
                       context: grpc.ServicerContext) -> Iterator[gateway_pb2.DiagnoseStreamResponse]:
        events: queue.Queue[gateway_pb2.ProgressEvent | None] = queue.Queue()
        outcome: dict[str, Any] = {}

        def emit(kind: str, node: str, message: str, round_: int, details: dict[str, Any]) -> None:
            struct = struct_pb2.Struct()
            struct.update({k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, list))})
            events.put(gateway_pb2.ProgressEvent(kind=kind, node=node, message=message, round=round_, details=struct))

        def work() -> None:
            try:
                outcome["result"] = self._diagnose(request, context, emit)
            except BaseException as exc:  # re-raised on the RPC's own thread below
                outcome["error"] = exc
            finally:
                events.put(None)

        # The worker carries this RPC's OpenTelemetry context, so its spans join the same trace.
        worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True)
        worker.start()
        while (event := events.get()) is not None:
            yield gateway_pb2.DiagnoseStreamResponse(event=event)
        worker.join()
        if "error" in outcome:
            raise outcome["error"]
        yield gateway_pb2.DiagnoseStreamResponse(result=outcome["result"])

    def GetRun(self, request: gateway_pb2.GetRunRequest, context: grpc.ServicerContext) -> gateway_pb2.GetRunResponse:
        if not request.run_id or len(request.run_id) > 128:
            raise InvalidInput("run_id is required")
        run = self._runs.get_run(request.run_id)
        if run is None or (request.session_id and run["session_id"] != request.session_id):
            # The same answer for "absent" and "another session's": run ids are not enumerable.
            raise NotFound(f"no run {request.run_id[:40]!r} in this session")
        audit = struct_pb2.Struct()
        audit.update(_json_safe(run))
        return gateway_pb2.GetRunResponse(
            run_id=run["run_id"], session_id=run["session_id"], status=run["status"], audit=audit
        )


def _json_safe(value: Any) -> Any:
    """Struct accepts only JSON types; timestamps and other values become strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)
