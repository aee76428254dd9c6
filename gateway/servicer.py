"""GatewayService: validates requests, opens a run, drives the graph, and maps the outcome."""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import grpc
from google.protobuf import struct_pb2
from opentelemetry import trace
from sqlalchemy.exc import DBAPIError

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import answer_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.audit import ProgressSink, described_prompts_for_run
from gateway.clients import Deadline, PromptDescriptions
from gateway.graph import DiagnosisGraph, DiagnosisOutcome
from gateway.progress_events import to_progress_event
from gateway.quotas import PrincipalQuotas
from gateway.request_checks import check_enum, check_identifier, validate_query
from gateway.run_listing import decode_list_token, encode_list_token, run_summary_message
from gateway.run_reaper import RunKeeper
from gateway.run_replay import check_same_request, claim_is_live, response_from_run, retention_start
from gateway.run_views import PageCursor, audit_page, decode_page_token, encode_page_token, run_summary
from shared.config import GatewaySettings
from shared.core.follow_up import InheritedContext
from shared.db.models import utcnow
from shared.db.run_store import ConcurrentWriteError, RequestIdTaken, RunNotRunning, RunStore
from shared.errors import Aborted, Cancelled, InvalidInput, NotFound, Reason, Unauthenticated, Unavailable
from shared.principals import current_principal
from shared.proto_convert import enum_member, plain_to_message, spec_value
from shared.redaction import Redactor

PRINCIPAL_SPAN_ATTRIBUTE = "attest.principal"
# A request_id whose run keeps being cancelled or raced for is tried this often, then refused.
MAX_REQUEST_ID_ROUNDS = 5


def _current_trace_id() -> str:
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def _verdict(value: str | None) -> enums_pb2.Verdict:
    return enum_member(enums_pb2.Verdict, value)


def _caller() -> str:
    """The authenticated principal of this call (set by the auth interceptor), also put on the
    request's span. No principal means the interceptor is missing: refuse rather than guess."""
    principal = current_principal()
    if principal is None:
        raise Unauthenticated("the caller is not authenticated")
    trace.get_current_span().set_attribute(PRINCIPAL_SPAN_ATTRIBUTE, principal)
    return principal


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(self, graph: DiagnosisGraph, runs: RunStore, settings: GatewaySettings,
                 prompts: PromptDescriptions | None = None, keeper: RunKeeper | None = None,
                 redactor: Redactor | None = None) -> None:
        """`prompts` asks the roles which prompts they use; without it the audit names every role
        a run did not reach `unknown`. `keeper` heartbeats this process's runs (and drains them at
        shutdown); `redactor` takes secrets out of questions before anything keeps or sends them."""
        self._graph = graph
        self._runs = runs
        self._settings = settings
        self._prompts = prompts
        self.keeper = keeper or RunKeeper(runs, reap_after_seconds=settings.run_reap_after_seconds,
                                          heartbeat_seconds=settings.run_heartbeat_seconds)
        self._redactor = redactor or Redactor()
        self._quotas = PrincipalQuotas(settings.max_runs_in_flight_per_principal,
                                       settings.max_runs_per_minute_per_principal,
                                       settings.quota_busy_retry_seconds)

    # -- shared by Diagnose and DiagnoseStream ---------------------------------------------------

    def _diagnose(self, request: gateway_pb2.DiagnoseRequest | gateway_pb2.DiagnoseStreamRequest,
                  context: grpc.ServicerContext,
                  emit: ProgressSink) -> gateway_pb2.DiagnoseResponse:
        principal = _caller()
        if self.keeper.stopping.is_set():
            raise Unavailable("the gateway is shutting down and starts no new diagnosis; send the request again "
                              "(another replica will take it)", reason=Reason.GATEWAY_STOPPING)
        limits = self._settings
        # A secret typed into the question is redacted before it is stored, sent to a role or
        # shown: the same redaction as tool results.
        query = self._redactor.redact(validate_query(request.query, limits.max_query_chars))
        check_enum("mode", enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode)
        mode = spec_value(enums_pb2.DiagnosisMode.DESCRIPTOR, request.mode) or "MULTI_AGENT"
        check_identifier("session_id", request.session_id, limits.max_session_id_chars)
        check_identifier("client_label", request.client_label, limits.max_client_label_chars)
        check_identifier("request_id", request.request_id, limits.max_request_id_chars)
        # Another principal's session is answered exactly like one that does not exist.
        if request.session_id and self._runs.session_principal(request.session_id) != principal:
            raise NotFound(f"unknown session {request.session_id[:40]!r}", reason=Reason.SESSION_NOT_FOUND,
                           field="session_id")
        # A replay takes a slot like a new diagnosis: replaying cannot get round the quotas.
        with self._quotas.run_slot(principal):
            try:
                return self._diagnose_in_slot(request, context, emit, principal, query, mode)
            except DBAPIError as exc:
                reason = self.keeper.store_failed(exc)
                if reason is None:
                    raise
                raise Unavailable(f"{reason}: the diagnosis cannot be recorded, and the gateway reports NOT_SERVING "
                                  "until the store takes writes again", reason=Reason.AUDIT_STORE_UNWRITABLE) from None

    def _diagnose_in_slot(self, request: gateway_pb2.DiagnoseRequest | gateway_pb2.DiagnoseStreamRequest,
                          context: grpc.ServicerContext, emit: ProgressSink,
                          principal: str, query: str, mode: str) -> gateway_pb2.DiagnoseResponse:
        if not request.request_id:
            return self._run(request, context, emit, principal, query, mode)
        for _ in range(MAX_REQUEST_ID_ROUNDS):
            replayed = self._replay(request, emit, principal, query, mode)
            if replayed is not None:
                return replayed
            try:
                return self._run(request, context, emit, principal, query, mode)
            except RequestIdTaken:
                continue  # a concurrent request with the same id started its run first: replay it
        raise InvalidInput(f"request_id {request.request_id[:40]!r} keeps naming runs that end cancelled; "
                           "send a new request_id", reason=Reason.REQUEST_ID_REUSED, field="request_id")

    def _replay(self, request: gateway_pb2.DiagnoseRequest | gateway_pb2.DiagnoseStreamRequest,
                emit: ProgressSink, principal: str, query: str, mode: str) -> gateway_pb2.DiagnoseResponse | None:
        """The result of the run the principal's request_id names; None when the id names no live
        run (absent, cancelled, or older than the retention window), so that it starts a new one.
        A run still running is never waited for: ABORTED at once, with its run id in the
        ErrorInfo, so that the client follows it with GetRun. A stream gets the run's persisted
        events first, as GetRun replays them, then the result."""
        claim = self._runs.request_claim(principal, request.request_id)
        since = retention_start(utcnow(), self._settings.request_id_retention_hours)
        if claim is None or not claim_is_live(claim, since):
            return None
        check_same_request(claim, request.request_id, query, mode, request.session_id)
        run_id = claim["run_id"]
        trace.get_current_span().set_attribute("attest.replayed_run_id", run_id)
        if claim["status"] == "RUNNING":
            raise Aborted(f"run {run_id} of this request_id is still running; follow it with GetRun, or send "
                          "the request again once it has ended", reason=Reason.REQUEST_ID_RUN_RUNNING,
                          metadata={"run_id": run_id, "session_id": claim["session_id"]})
        run = self._runs.get_run(run_id) or {}
        for record in run.get("events") or []:
            emit(to_progress_event(record, run_id=run_id, session_id=run.get("session_id") or "",
                                   trace_id=run.get("trace_id") or ""))
        return response_from_run(claim)

    def _run(self, request: gateway_pb2.DiagnoseRequest | gateway_pb2.DiagnoseStreamRequest,
             context: grpc.ServicerContext, emit: ProgressSink,
             principal: str, query: str, mode: str) -> gateway_pb2.DiagnoseResponse:
        trace_id = _current_trace_id()
        # A follow-up inherits from the session's last planned run; the
        # single-ReAct mode runs no planner and inherits nothing.
        inherited = (self._runs.last_planned_context(request.session_id)
                     if request.session_id and mode != "SINGLE_REACT" else None)
        request_id = request.request_id or None
        since = retention_start(utcnow(), self._settings.request_id_retention_hours) if request_id else None
        session_id, run_id = self._runs.start_run(request.session_id or None, query, mode, trace_id=trace_id or None,
                                                  client_label=request.client_label, principal=principal,
                                                  request_id=request_id, request_ids_since=since,
                                                  gateway_instance=self.keeper.instance_id)
        self.keeper.started(run_id, query)
        finished = False
        try:
            outcome = self._run_graph(request, context, emit, run_id, session_id, trace_id, query, mode, inherited)
            finished = True
        except (RunNotRunning, ConcurrentWriteError):
            # Another writer ended the run first (the reaper, while this gateway could not beat;
            # its terminal event then holds the seq this gateway meant to write): that outcome
            # stands, and is the answer.
            header = self._runs.run_header(run_id)
            if header is None or header["status"] == "RUNNING":
                raise
            finished = True
            return response_from_run(header)
        finally:
            self.keeper.ended(run_id, finished)
        if outcome.status == "CANCELLED":
            raise Cancelled("the diagnosis was cancelled")
        return self._response(outcome, session_id, trace_id)

    def _run_graph(self, request: gateway_pb2.DiagnoseRequest | gateway_pb2.DiagnoseStreamRequest,
                   context: grpc.ServicerContext, emit: ProgressSink, run_id: str, session_id: str, trace_id: str,
                   query: str, mode: str, inherited: InheritedContext | None) -> DiagnosisOutcome:

        def stamped(event: gateway_pb2.ProgressEvent) -> None:
            event.run_id, event.session_id, event.trace_id = run_id, session_id, trace_id
            emit(event)

        remaining = context.time_remaining()
        budget = self._settings.diagnosis_timeout_seconds
        if remaining is not None:
            budget = min(budget, remaining)
        # The graph builds the run's audit; it starts from what the roles say they use.
        described = nullcontext() if self._prompts is None else described_prompts_for_run(self._prompts.start(mode))
        with described:
            return self._graph.run(run_id, query, Deadline.after(budget), self.keeper.is_active(context.is_active),
                                   stamped, mode, inherited=inherited, stopping=self.keeper.interrupting.is_set)

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
            structured_answer=(plain_to_message(outcome.structured_answer, answer_pb2.StructuredAnswer)
                               if outcome.structured_answer is not None else None),
            outcome_status=enum_member(answer_pb2.OutcomeStatus, outcome.status),
            retryable=outcome.retryable,
        )

    # -- RPCs ----------------------------------------------------------------------------------

    def Diagnose(self, request: gateway_pb2.DiagnoseRequest,
                 context: grpc.ServicerContext) -> gateway_pb2.DiagnoseResponse:
        return self._diagnose(request, context, lambda event: None)

    def DiagnoseStream(self, request: gateway_pb2.DiagnoseStreamRequest,
                       context: grpc.ServicerContext) -> Iterator[gateway_pb2.DiagnoseStreamResponse]:
        events: queue.Queue[gateway_pb2.ProgressEvent | None] = queue.Queue()
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = self._diagnose(request, context, events.put)
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
        principal = _caller()
        limits = self._settings
        if not request.run_id:
            raise InvalidInput("run_id is required", reason=Reason.FIELD_REQUIRED, field="run_id")
        check_identifier("run_id", request.run_id, limits.max_run_id_chars)
        check_identifier("session_id", request.session_id, limits.max_session_id_chars)
        view = check_enum("view", gateway_pb2.RunView.DESCRIPTOR, request.view)
        paged = bool(request.page_size or request.page_token)
        if view == gateway_pb2.RUN_VIEW_SUMMARY and paged:
            raise InvalidInput("page_size and page_token apply to view RUN_VIEW_FULL only",
                               reason=Reason.PAGING_NEEDS_FULL_VIEW,
                               field="page_size" if request.page_size else "page_token")
        if request.page_size < 0:
            raise InvalidInput(f"page_size is {request.page_size}; it cannot be negative",
                               reason=Reason.INVALID_PAGE_SIZE, field="page_size")
        header = self._runs.run_header(request.run_id)
        if (header is None or header["principal"] != principal
                or (request.session_id and header["session_id"] != request.session_id)):
            # One answer for "absent", "another session's" and "another caller's": run ids are
            # not enumerable and a caller learns nothing of others' runs.
            raise NotFound(f"no run {request.run_id[:40]!r} in this session", reason=Reason.RUN_NOT_FOUND,
                           field="run_id")
        document, next_page_token = self._run_view(request, header, view, paged)
        audit = struct_pb2.Struct()
        audit.update(_json_safe(document))
        # The replay: the run's events typed exactly as DiagnoseStream sent them.
        replay = [to_progress_event(event, run_id=header["run_id"], session_id=header["session_id"],
                                    trace_id=header["trace_id"] or "")
                  for event in document.get("events") or [] if view != gateway_pb2.RUN_VIEW_SUMMARY]
        return gateway_pb2.GetRunResponse(
            run_id=header["run_id"], session_id=header["session_id"], status=header["status"], audit=audit,
            next_page_token=next_page_token, events=replay, time_zone=self._settings.time_zone,
        )

    def ListRuns(self, request: gateway_pb2.ListRunsRequest,
                 context: grpc.ServicerContext) -> gateway_pb2.ListRunsResponse:
        """The runs of one of the caller's sessions, or (no session named) the caller's runs across
        its sessions; newest first, a page at a time. Every read is filtered by the caller."""
        principal = _caller()
        limits = self._settings
        check_identifier("session_id", request.session_id, limits.max_session_id_chars)
        check_identifier("page_token", request.page_token, limits.max_session_id_chars + 200)
        if request.page_size < 0:
            raise InvalidInput(f"page_size is {request.page_size}; it cannot be negative",
                               reason=Reason.INVALID_PAGE_SIZE, field="page_size")
        if request.session_id and self._runs.session_principal(request.session_id) != principal:
            # As Diagnose answers it: another principal's session is one that does not exist.
            raise NotFound(f"unknown session {request.session_id[:40]!r}", reason=Reason.SESSION_NOT_FOUND,
                           field="session_id")
        before = decode_list_token(request.page_token, request.session_id) if request.page_token else None
        page_size = min(request.page_size or limits.list_runs_default_page_size, limits.list_runs_max_page_size)
        rows = self._runs.list_runs(request.session_id or None, page_size + 1, before, principal=principal)
        page = rows[:page_size]
        return gateway_pb2.ListRunsResponse(
            runs=[run_summary_message(row) for row in page],
            next_page_token=encode_list_token(request.session_id, page[-1]) if len(rows) > page_size else "",
            time_zone=limits.time_zone,
        )

    def _run_view(self, request: gateway_pb2.GetRunRequest, header: dict[str, Any], view: int,
                  paged: bool) -> tuple[dict[str, Any], str]:
        """The audit document the request's view asks for, and the next page's token ("" if none)."""
        limits = self._settings
        if view == gateway_pb2.RUN_VIEW_SUMMARY:
            return run_summary(self._runs, header, limits.run_summary_max_answer_chars), ""
        if not paged:
            return self._runs.get_run(request.run_id) or {}, ""
        page_size = min(request.page_size or limits.get_run_default_page_size, limits.get_run_max_page_size)
        cursor = decode_page_token(request.page_token, request.run_id) if request.page_token else PageCursor()
        document, next_cursor = audit_page(self._runs, header, cursor, not request.page_token, page_size,
                                           limits.get_run_max_page_bytes)
        return document, encode_page_token(request.run_id, next_cursor) if next_cursor else ""


def _json_safe(value: Any) -> Any:
    """Struct accepts only JSON types; timestamps and other values become strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)
