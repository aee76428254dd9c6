"""The multi-agent diagnosis graph: explicit nodes and conditional edges.

planner -> executor -> gatekeeper -> verifier -> composer, with one EVIDENCE_GAP_ONLY retry round
and a deterministic pre-verification fallback. Each edge is named after the spec scenario that
decides it (chat-verifier-agent.graph.md), so a reader can find the requirement behind a route.
Nothing unverified reaches the answer: the composer only ever sees the gatekeeper's verified
projection and the verifier's claim checks, and every fallback uses a fixed template.

Typed outcomes besides verdicts (issue 14): a question that names no service ends in
MISSING_REQUIRED_CONTEXT before any tool call, unless it is a triage question (Plan.triage: which
services are abnormal?), for which the executor checks its catalogue's services; one whose named services are all unknown to the
executor's backends ends in UNKNOWN_SERVICE (the executor ran nothing); a pre-verification
fallback carries its cause (technical failure, citation check with the failed rules, invalid
executor output) so that its text says whether a retry can help. When named services were left
out (unknown, or beyond the per-question limit) the answer names them and its verdict is at most
LOW_CONFID (`cap_for_coverage`).

No data is not health: a checked service and window with no series and no log line of any level,
or logs whose level could not be read (`shared/no_data.py`, from the stored invocations), reach the
composer (ComposerInput.empty_scopes), whose first line then says 无法确认 and names them; unless
something confirmed abnormal remains, the verdict is at most LOW_CONFID (`cap_for_empty_scopes`).

Failed evidence calls (issue 16, point 4): the gatekeeper lists them in its audit, which the
verifier's input carries; in round 0 one is a critical gap that triggers the one retry (which runs
the call again); one that no later round recovered caps the verdict at LOW_CONFID
(`cap_for_failed_calls`) and every answer names it.

No silent demo data (issue 16, point 5): the executor says which evidence tools are disabled for
want of a source (`disabled_tools`); they reach the composer (ComposerInput.disabled_tools, in
every layout and fallback after the executor answered) and, in single-ReAct mode, a line of ours
under the released text; they cap nothing. Each verified source carries the kind of source its
stored evidence refs name (`shared/evidence_source.py`), so every fact names where it came from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc
from opentelemetry import trace

from attest.common.v1 import composer_types_pb2, enums_pb2, verifier_types_pb2
from attest.composer.v1 import composer_pb2
from attest.executor.v1 import executor_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2
from attest.planner.v1 import planner_pb2
from attest.verifier.v1 import verifier_pb2
from gateway import progress_events as events
from gateway.answer_structure import checked_citations, localized, release_citations
from gateway.audit import ProgressSink, RunAudit
from gateway.clients import Deadline, DownstreamClients, DownstreamFailed, RequestT, ResponseT
from gateway.diagnosis_metrics import DiagnosisMetrics
from gateway.release_policy import Release, fallback, future_window_fallback, release_structure, unavailable_fallback
from gateway.replica_retry import with_replica_retry
from gateway.round_merge import merge_rounds
from gateway.single_react import SingleReactFlow
from shared.call_scope import call_scope as _scope
from shared.call_scope import unexamined_series
from shared.config import configured_time_zone
from shared.core.contracts import (
    ClaimCheck,
    ComposerInput,
    ComposerOutput,
    DiagnosisContext,
    ExecutorEvidenceV2,
    FailedCall,
    GatekeeperResult,
    Plan,
    RetryContext,
    ServiceCoverage,
    ToolInvocation,
    VerifiedEvidence,
    VerifiedSource,
    VerifierInput,
    VerifierOutput,
)
from shared.core.effective_verdict import (
    build_retry_context,
    cap_for_coverage,
    cap_for_failed_calls,
    compute_effective_verdict,
    should_retry_evidence,
)
from shared.core.follow_up import InheritedContext
from shared.core.question_window import QuestionWindow, read_window
from shared.core.structured_answer import StructuredAnswer, render, retryable, section
from shared.core.templates import (
    CHECKED_SECTION,
    compose_answer,
    confirmed_anomaly,
    future_window_answer,
    release_source_lines,
    source_window,
)
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.errors import Cancelled
from shared.evidence_source import disabled_lines, invocation_source_kind
from shared.failed_calls import failed_calls, open_failures
from shared.local_time import LocalTimeDisplay
from shared.no_data import cap_for_empty_scopes, empty_scopes
from shared.proto_convert import enum_member, message_to_model, message_to_plain, plain_to_message, spec_value
from shared.service_mentions import plain_word_mentions

log = logging.getLogger(__name__)

# Edge names: the spec scenario each conditional edge implements.
EDGE_NO_PLAN = "missing_context_ends_without_tool_calls"
EDGE_UNKNOWN_SERVICE = "unknown_service_ends_without_tool_calls"
EDGE_INVALID_OUTPUT = "executor_output_is_invalid"
EDGE_GATEKEEPER_REJECT = "gatekeeper_reject_bypasses_verifier"
EDGE_VERIFIER_FAILS = "verifier_execution_fails"
EDGE_RETRY = "low_confid_qualifies_for_evidence_retry"
EDGE_TO_COMPOSER = "verdict_routes_to_composer"
EDGE_DOWNSTREAM_FAILURE = "downstream_failure_is_handled"
EDGE_INTERRUPTED = "run_interrupted"

@dataclass
class DiagnosisOutcome:
    run_id: str
    status: str  # COMPLETED | FALLBACK | CANCELLED
    answer: str = ""
    effective_verdict: str | None = None
    model_verdict: str | None = None
    verdict_ceiling: str | None = None
    groundedness_score: float = 0.0
    fallback_type: str | None = None
    rounds: int = 0
    release_outcome: str | None = None
    # The answer as a structure; `answer` is its rendering (issue 22, point 2).
    structured_answer: StructuredAnswer | None = None
    # The cause that chose a fallback's text (FallbackCause), when one did.
    fallback_cause: str | None = None
    # How many of the run's evidence calls failed with no later round recovering them.
    open_failed_calls: int = 0

    @property
    def retryable(self) -> bool:
        """Whether asking the same question again may help (`structured_answer.retryable`)."""
        return retryable(self.status, self.fallback_type, self.fallback_cause, self.open_failed_calls)


@dataclass
class _RoundResult:
    plan: Plan
    verifier_input: VerifierInput
    verifier_output: VerifierOutput
    effective: Any
    claim_checks: list[ClaimCheck] = field(default_factory=list)
    # The evidence tools the executor reported disabled (issue 16, point 5).
    disabled_tools: list[str] = field(default_factory=list)


@dataclass
class _RoundFailure:
    """A round that ended before a verdict: the fallback it would give on its own."""

    edge: str
    reason: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, edge: str, reason: str, **options: Any) -> _RoundFailure:
        return cls(edge, reason, options)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class DiagnosisGraph:
    def __init__(self, clients: DownstreamClients, runs: RunStore, invocations: InvocationStore | None = None,
                 background: Executor | None = None, metrics: DiagnosisMetrics | None = None,
                 display: LocalTimeDisplay | None = None) -> None:
        self._clients = clients
        # Times people read (issue 15 point 4): the one display step, in `_finish`.
        self._display = display or LocalTimeDisplay(configured_time_zone())
        self._metrics = metrics
        self._runs = runs
        self._invocations = invocations
        self._background = background

    # -- plumbing ------------------------------------------------------------------------------

    def _call(self, node: str, method: grpc.UnaryUnaryMultiCallable[RequestT, ResponseT], request: RequestT,
              deadline: Deadline, is_active: Callable[[], bool]) -> ResponseT:
        if not is_active():
            raise Cancelled()
        if deadline.expired():
            raise DownstreamFailed(node, grpc.StatusCode.DEADLINE_EXCEEDED, "diagnosis deadline passed")
        started = time.monotonic()
        status = "OK"
        future = method.future(request, timeout=deadline.remaining())
        try:
            while True:
                try:
                    return future.result(timeout=0.1)
                except grpc.FutureTimeoutError:
                    if not is_active():
                        future.cancel()  # the client cancelled: abandon the downstream work too
                        status = grpc.StatusCode.CANCELLED.name
                        raise Cancelled() from None
                except grpc.RpcError as exc:
                    status = exc.code().name if exc.code() else "UNKNOWN"
                    if not is_active():
                        raise Cancelled() from exc
                    raise DownstreamFailed(node, exc.code(), exc.details() or "") from exc
        finally:
            if self._metrics is not None:
                self._metrics.hop_finished(node, status, time.monotonic() - started)

    # -- the graph -----------------------------------------------------------------------------

    def run(self, run_id: str, query: str, deadline: Deadline, is_active: Callable[[], bool],
            emit: ProgressSink, mode: str = "MULTI_AGENT", inherited: InheritedContext | None = None,
            stopping: Callable[[], bool] | None = None) -> DiagnosisOutcome:
        """`run_id`: a run just opened, with no event yet (its events are numbered from 1).
        `inherited`: the services and window of the session's last planned run, which the
        planner uses for a follow-up question that names no service (issue 22, point 3).
        `stopping`: true when the gateway itself stopped the run (shutdown), not the caller: the
        run then ends RUN_INTERRUPTED rather than CANCELLED."""
        audit = RunAudit(self._runs, run_id, emit, invocations=self._invocations, background=self._background,
                         new_run=True)
        # The run and its session exist (the servicer opened them, with no event): the first event says so.
        audit.event("gateway", "INFO", "STARTED", mode, typed=events.started(mode), kind="started", round_=0)
        span = trace.get_current_span()
        span.set_attribute("attest.run_id", run_id)
        span.set_attribute("attest.mode", mode)
        try:
            outcome = self._run_mode(run_id, query, deadline, is_active, audit, mode, inherited, stopping)
        finally:
            audit.flush_events()  # whatever ended the run, its log is complete
        log.info("run %s finished: %s, verdict %s, fallback %s", run_id, outcome.status,
                 outcome.effective_verdict or "-", outcome.fallback_type or "-", extra={"run_id": run_id})
        if self._metrics is not None:
            self._metrics.diagnosis_finished(status=outcome.status, mode=mode,
                                             effective_verdict=outcome.effective_verdict,
                                             fallback_type=outcome.fallback_type)
        return outcome

    def _run_mode(self, run_id: str, query: str, deadline: Deadline, is_active: Callable[[], bool],
                  audit: RunAudit, mode: str, inherited: InheritedContext | None = None,
                  stopping: Callable[[], bool] | None = None) -> DiagnosisOutcome:
        try:
            # A window wholly in the future: nothing can be checked, in either mode, and no other
            # window stands in for it. Decided here, before any role is called.
            window = read_window(query, datetime.now(UTC), self._display.zone)
            if window.future:
                return self._future_window(audit, query, mode, window)
            if mode == "SINGLE_REACT":
                flow = SingleReactFlow(self._clients, self._call, self._failed_calls, self._verified_sources,
                                       lambda run: self._run_invocations(run) or [])
                return self._release(audit, flow.run(
                    run_id, query, deadline, is_active, audit))
            return self._run(run_id, query, deadline, is_active, audit, inherited)
        except Cancelled:
            if stopping is not None and stopping():
                return self._fallback(audit, query, EDGE_INTERRUPTED, "the gateway stopped before the run finished",
                                      fallback_type="RUN_INTERRUPTED")
            audit.event("graph", "INFO", "CANCELLED", "client cancelled the diagnosis", typed=events.cancelled())
            audit.refresh_rule_evaluation()
            audit.wait_background()
            audit.prepare_verifier_evaluation(failure_reason="cancelled")
            audit.finish_run(status="CANCELLED")
            return DiagnosisOutcome(run_id=run_id, status="CANCELLED", rounds=audit.rounds)
        except DownstreamFailed as exc:
            log.warning("run %s: %s", run_id, exc, extra={"run_id": run_id})
            reason = f"{exc.node} failed: {exc.code.name if exc.code else 'ERROR'}"
            if mode == "SINGLE_REACT":
                # An outage is typed by the role that was lost, never as a failed validation.
                audit.react["failure"] = reason
                return self._release(audit, fallback(unavailable_fallback(exc.node), cause="TECHNICAL_FAILURE",
                                                     coverage=audit.service_coverage))
            return self._fallback(audit, query, EDGE_DOWNSTREAM_FAILURE, reason, cause="TECHNICAL_FAILURE")

    def _future_window(self, audit: RunAudit, query: str, mode: str, window: QuestionWindow) -> DiagnosisOutcome:
        """MISSING_REQUIRED_CONTEXT with a fixed text naming the window (in the configured zone,
        by the display step); no tool is called."""
        answer = future_window_answer(window.start, window.end)
        reason = (f"missing context: the window {window.start.isoformat()}..{window.end.isoformat()} "
                  "lies wholly in the future")
        if mode == "SINGLE_REACT":
            audit.react["missing_context"] = ["window"]
            return self._release(audit, future_window_fallback(answer))
        return self._fallback(audit, query, EDGE_NO_PLAN, reason, fallback_type="MISSING_REQUIRED_CONTEXT",
                              answer=answer)

    def _release(self, audit: RunAudit, release: Release) -> DiagnosisOutcome:
        """Single-ReAct Release: persist what the guards decided, then publish. The run's failed
        evidence calls are named in the answer by a line of ours (the Draft is never edited)."""
        invocations = self._run_invocations(audit.run_id)
        release.failed_calls = self._failed_calls(audit.run_id, invocations=invocations)
        citations = None
        if release.draft is not None and release.snapshot is not None:
            citations = release_citations(release.draft, release.snapshot, invocations or [])
        verified = self._verified_sources(audit.run_id, invocations=invocations or [])
        release.window = source_window(verified)
        structured = release_structure(release, citations)
        # Issue 16, point 5: the tools with no source configured, and where the evidence came from.
        scope = disabled_lines(audit.react.get("disabled_tools") or [])
        scope = release_source_lines(verified) + scope
        if scope:
            structured.sections.append(section(CHECKED_SECTION, scope))
        answer = render(structured)
        audit.react["release_outcome"] = release.outcome
        if release.fallback_type:
            audit.react["fallback_type"] = release.fallback_type
        audit.composer(ComposerOutput(answer=answer, template=f"release:{release.outcome.lower()}",
                                      used_fallback_template=release.outcome == "FALLBACK",
                                      fallback_reason=release.fallback_type or ""))
        typed = (events.fallback(release.fallback_type) if release.fallback and release.fallback_type
                 else events.answer_released())
        audit.event("release", "INFO", release.outcome, release.fallback_type or "", typed=typed,
                    kind="fallback" if release.fallback else "answer",
                    payload={"fallback_type": release.fallback_type} if release.fallback_type else {})
        audit.prepare_verifier_evaluation()
        # A released Draft passed both guards: PASS, under the caps every answer has (named services
        # left unchecked, a failed evidence call); a SafeFallback invents no verdict.
        verdict = None
        if release.fallback is None:
            verdict = cap_for_failed_calls(cap_for_coverage("PASS", release.coverage), release.failed_calls)
        outcome = DiagnosisOutcome(
            run_id=audit.run_id,
            status="FALLBACK" if release.fallback else "COMPLETED",
            answer=answer,
            effective_verdict=verdict,
            fallback_type=release.fallback_type,
            rounds=audit.rounds,
            release_outcome=release.outcome,
            structured_answer=structured,
            fallback_cause=release.fallback.cause if release.fallback else None,
            open_failed_calls=len(open_failures(release.failed_calls)),
        )
        self._finish(audit, outcome, invocations)
        return outcome

    def _run(self, run_id: str, query: str, deadline: Deadline, is_active: Callable[[], bool],
             audit: RunAudit, inherited: InheritedContext | None = None) -> DiagnosisOutcome:
        """Round 0, and at most one EVIDENCE_GAP_ONLY round that adds to it (issue 17, point 1):
        its claims are merged into round 0's (`round_merge.py`); if it fails, round 0's verified
        result is the answer. Either way the run ends once, with one terminal event."""
        retry_context: RetryContext | None = None
        previous: _RoundResult | None = None
        saved: dict[str, Any] = {}
        for round_ in (0, 1):
            audit.rounds = round_ + 1
            try:
                result = self._one_round(run_id, query, round_, retry_context, deadline, is_active, audit,
                                         inherited)
            except DownstreamFailed as exc:
                if previous is None:
                    raise
                log.warning("run %s: retry round: %s", run_id, exc, extra={"run_id": run_id})
                result = _RoundFailure.of(EDGE_DOWNSTREAM_FAILURE, f"{exc.node} failed: "
                                          f"{exc.code.name if exc.code else 'ERROR'}", cause="TECHNICAL_FAILURE")
            if isinstance(result, _RoundFailure):
                if previous is None:
                    return self._fallback(audit, query, result.edge, result.reason, **result.options)
                audit.retry_failed(saved, edge=result.edge, reason=result.reason)
                audit.event("graph", "INFO", "RETRY_FAILED",
                            f"round 1 ended before a verdict ({result.edge}: {result.reason}); the answer rests on round 0",
                            typed=events.retry_failed(result.edge), kind="retry")
                return self._compose(audit, query, previous, deadline, is_active)
            claims = result.verifier_input.verified_executor_output.claims
            if round_ == 0 and should_retry_evidence(
                result.effective.effective_verdict,
                result.verifier_input.verdict_ceiling,
                claims,
                result.claim_checks,
                0,
                result.verifier_input.gatekeeper_audit.failed_calls,
            ):
                retry_context = build_retry_context(claims, result.claim_checks, result.plan.services,
                                                    failed_calls=result.verifier_input.gatekeeper_audit.failed_calls)
                audit.event("graph", "INFO", EDGE_RETRY, f"{len(retry_context.gaps)} critical evidence gap(s)",
                            typed=events.retry_gap(len(retry_context.gaps)), kind="retry", payload={"gaps": len(retry_context.gaps)})
                previous = result
                saved = audit.round_state()
                continue
            if previous is not None and retry_context is not None:
                result = self._merge(audit, previous, result, retry_context)
            return self._compose(audit, query, result, deadline, is_active)
        raise AssertionError("unreachable: the graph allows one retry round")

    @staticmethod
    def _merge(audit: RunAudit, round0: _RoundResult, round1: _RoundResult,
               retry_context: RetryContext) -> _RoundResult:
        ceiling = round1.verifier_input.verdict_ceiling
        merged = merge_rounds(
            (round0.verifier_input.verified_executor_output, round0.claim_checks,
             round0.verifier_input.verified_evidence, round0.verifier_output),
            (round1.verifier_input.verified_executor_output, round1.claim_checks,
             round1.verifier_input.verified_evidence, round1.verifier_output),
            retry_context, ceiling,
        )
        audit.rounds_merged(merged.output, merged.verified_evidence, merged.verifier_output, merged.effective,
                            merged.summary())
        audit.event("graph", "INFO", "ROUNDS_MERGED",
                    f"{len(merged.closed)} gap(s) closed, {len(merged.open_gaps)} still open; "
                    f"effective {merged.effective.effective_verdict} over {len(merged.output.claims)} claim(s)",
                    typed=events.rounds_merged(len(merged.closed), len(merged.open_gaps)), kind="retry", payload={"closed_gaps": merged.closed, "open_gaps": merged.open_gaps})
        verifier_input = round1.verifier_input.model_copy(update={
            "verified_executor_output": merged.output, "verified_evidence": merged.verified_evidence,
        })
        return _RoundResult(plan=round1.plan, verifier_input=verifier_input, verifier_output=merged.verifier_output,
                            effective=merged.effective, claim_checks=merged.claim_checks,
                            disabled_tools=list(dict.fromkeys(round0.disabled_tools + round1.disabled_tools)))

    def _one_round(self, run_id: str, query: str, round_: int, retry_context: RetryContext | None,
                   deadline: Deadline, is_active: Callable[[], bool], audit: RunAudit,
                   inherited: InheritedContext | None = None) -> _RoundResult | _RoundFailure:
        """One round up to its verdict, or why it ended before one (the caller decides what that
        means: a fallback in round 0, round 0's answer after a failed retry round)."""
        mode = "EVIDENCE_GAP_ONLY" if retry_context else "NORMAL"
        # planner
        audit.event("planner", "ENTER", mode, typed=events.planner_enter(mode), kind="planning", round_=round_)
        plan_request = planner_pb2.CreatePlanRequest(
            run_id=run_id, query=query, mode=enum_member(enums_pb2.PlannerMode, mode),
            now=datetime.now(UTC).isoformat(),
        )
        if retry_context:
            plan_request.retry_context.CopyFrom(plain_to_message(retry_context, verifier_types_pb2.RetryContext))
        if inherited is not None:
            # A follow-up: the planner decides what the question takes from the last run; the
            # executor fetches every piece of evidence afresh for this run.
            plan_request.inherited.run_id = inherited.run_id
            plan_request.inherited.services.extend(inherited.services)
            if inherited.window is not None:
                plan_request.inherited.window.start = inherited.window.start
                plan_request.inherited.window.end = inherited.window.end
        plan_response = self._call("planner", self._clients.planner.CreatePlan, plan_request, deadline, is_active)
        audit.prompt(plan_response.prompt)
        audit.model_call(plan_response.model_call)
        plan = message_to_model(plan_response.plan, Plan)
        # The plan's services and window are what the session's next question may inherit
        # (RunStore.last_planned_context reads them from this event).
        planned: dict[str, Any] = {"services": plan.services, "steps": len(plan.steps)}
        if plan.window is not None:
            planned["window"] = plan.window.model_dump()
        if plan_response.HasField("follow_up"):
            planned["follow_up"] = message_to_plain(plan_response.follow_up)
        audit.event("planner", "EXIT", "OK", f"{len(plan.steps)} tool call(s) planned",
                    typed=events.planner_exit(len(plan.steps), list(plan.services)), kind="planning",
                    round_=round_, payload=planned)
        if round_ == 0 and plan_response.HasField("follow_up"):
            follow_up = plan_response.follow_up
            audit.event("planner", "INFO", "FOLLOW_UP", follow_up.note,
                        typed=events.follow_up(list(follow_up.services), shifted=bool(follow_up.shift_seconds)),
                        kind="planning", round_=round_,
                        payload={"from_run_id": follow_up.from_run_id, "services": list(follow_up.services),
                                 "window": {"start": follow_up.window.start, "end": follow_up.window.end}
                                 if follow_up.HasField("window") else None,
                                 "shift_phrase": follow_up.shift_phrase, "shift_seconds": follow_up.shift_seconds})
        # A single word of the question may name a service only the executor's catalogue knows.
        single_words = round_ == 0 and not plan.services and bool(plain_word_mentions(query))
        # A triage question names no service: the executor checks its catalogue's services.
        triage = round_ == 0 and plan.triage and not plan.services
        if round_ == 0 and not plan.services and not plan.unchecked_services and not single_words and not triage:
            # No service named: nothing can be checked, and nothing is called (graph and
            # single-ReAct alike end in MISSING_REQUIRED_CONTEXT).
            reason = "missing context: " + ", ".join(plan.missing_context or ["service"])
            return _RoundFailure.of(EDGE_NO_PLAN, reason, fallback_type="MISSING_REQUIRED_CONTEXT")
        if round_ == 0 and "window" in plan.missing_context and plan.window is not None:
            # The planner read a window wholly in the future (a follow-up's, or one that the
            # gateway's earlier reading did not find): the same outcome, nothing called.
            return _RoundFailure.of(EDGE_NO_PLAN, "missing context: window in the future",
                                    fallback_type="MISSING_REQUIRED_CONTEXT",
                                    answer=future_window_answer(_utc(plan.window.start), _utc(plan.window.end)))
        if not plan.steps and not single_words and not triage:
            if round_ == 0:
                reason = "missing context: " + ", ".join(plan.missing_context or ["nothing to check"])
                return _RoundFailure.of(EDGE_NO_PLAN, reason)
            return _RoundFailure.of(EDGE_NO_PLAN, "the retry planner found no new checks")

        if single_words and not plan.steps and not triage and "service" not in plan.missing_context:
            # The executor runs a plan without steps only as this reading: no service was named.
            plan_response.plan.missing_context.append("service")
        # executor
        audit.event("executor", "ENTER", "", typed=events.executor_enter(len(plan.steps)), kind="tool_call",
                    round_=round_)
        exec_response = with_replica_retry(
            self._call, audit, self._clients.executor.ExecutePlan,
            lambda attempt: executor_pb2.ExecutePlanRequest(run_id=run_id, query=query, plan=plan_response.plan,
                                                            round=round_, attempt=attempt),
            deadline, is_active, round_=round_, channel=self._clients.executor_channel,
        )
        audit.prompt(exec_response.prompt)
        audit.model_call(exec_response.model_call)
        disabled = list(exec_response.disabled_tools)
        coverage = message_to_model(exec_response.service_coverage, ServiceCoverage)
        if not coverage.named and not exec_response.invocation_ids:
            # Nothing the plan or the question names is a service the backends know: no tool ran.
            if round_ == 0:
                return _RoundFailure.of(EDGE_NO_PLAN, "missing context: service", fallback_type="MISSING_REQUIRED_CONTEXT")
            return _RoundFailure.of(EDGE_NO_PLAN, "the retry planner found no new checks")
        if round_ == 0:
            audit.coverage(coverage)
        if coverage.nothing_known:
            # Every named service is unknown to the backends: the executor ran nothing.
            names = ", ".join(u.name for u in coverage.unknown)
            audit.event("executor", "EXIT", "UNKNOWN_SERVICE", exec_response.parse_detail,
                        typed=events.unknown_services([u.name for u in coverage.unknown], agent=False),
                        kind="tool_call", round_=round_, payload={"unknown_services": [u.name for u in coverage.unknown]})
            return _RoundFailure.of(EDGE_UNKNOWN_SERVICE, f"unknown service(s): {names}",
                                  fallback_type="UNKNOWN_SERVICE", disabled_tools=disabled)
        if coverage.named:
            # What the verifier and the retry planner see as the run's services: the checked ones.
            plan = plan.model_copy(update={"services": list(coverage.checked)})
        parse_status = spec_value(enums_pb2.ParseStatus.DESCRIPTOR, exec_response.parse_status) or "missing"
        audit.parse_status = parse_status
        audit.event("executor", "EXIT", parse_status, exec_response.parse_detail,
                    typed=events.executor_exit(parse_status, list(exec_response.invocation_ids), list(coverage.checked),
                                               [u.name for u in coverage.unknown], disabled),
                    kind="tool_call", round_=round_,
                    payload={"invocation_ids": list(exec_response.invocation_ids),
                             "services_checked": list(coverage.checked),
                             "services_unknown": [u.name for u in coverage.unknown],
                             "services_unchecked": list(coverage.unchecked),
                             "disabled_tools": disabled})
        audit.refresh_rule_evaluation()
        recorded = {i.invocation_id: i for i in self._run_invocations(run_id) or []}
        for entry in exec_response.tool_trace_summary:
            ids = list(entry.source_invocation_ids)
            audit.event("executor", "INFO", entry.evidence_level, f"{entry.tool_name}: {entry.evidence_level}",
                        typed=events.tool_call(entry.tool_name, [recorded[i] for i in ids if i in recorded], ids,
                                               entry.evidence_level),
                        kind="tool_call", round_=round_,
                        payload={"tool_name": entry.tool_name, "evidence_level": entry.evidence_level,
                                 "invocation_ids": ids, "success": entry.success})
        if parse_status != "valid":
            return _RoundFailure.of(EDGE_INVALID_OUTPUT, f"INVALID_OUTPUT ({parse_status})",
                                  cause="INVALID_OUTPUT", disabled_tools=disabled)

        # gatekeeper
        audit.event("gatekeeper", "ENTER", "", typed=events.gatekeeper_enter("CHECK_EVIDENCE"), kind="gatekeeper",
                    round_=round_)
        gk = self._call(
            "gatekeeper", self._clients.gatekeeper.CheckEvidence,
            gatekeeper_pb2.CheckEvidenceRequest(run_id=run_id, executor_output_text=exec_response.output_text),
            deadline, is_active,
        )
        gatekeeper_result = message_to_model(gk.gatekeeper_result, GatekeeperResult)
        ceiling = spec_value(enums_pb2.Verdict.DESCRIPTOR, gk.verdict_ceiling)
        route = spec_value(enums_pb2.GatekeeperRoute.DESCRIPTOR, gk.route)
        verified_output = message_to_model(gk.verified_executor_output, ExecutorEvidenceV2)
        verified_evidence = [message_to_model(item, VerifiedEvidence) for item in gk.verified_evidence]
        audit.gatekeeper(gatekeeper_result, ceiling, verified_output, verified_evidence)
        audit.event("gatekeeper", "EXIT", gatekeeper_result.status,
                    f"ceiling {ceiling}; failed rules: {', '.join(gatekeeper_result.failed_rules) or 'none'}",
                    typed=events.gatekeeper_exit(gatekeeper_result.status, ceiling, gatekeeper_result.failed_rules),
                    kind="gatekeeper", round_=round_,
                    payload={"verdict_ceiling": ceiling, "failed_rules": gatekeeper_result.failed_rules})
        if route != "VERIFIER" or ceiling is None:
            if ceiling is not None and ceiling != "REJECT":
                # No claim kept a passed binding (issue 17): nothing verified is left to verify.
                # The answer names the failed rules and the run's completed tool calls.
                return _RoundFailure.of(EDGE_GATEKEEPER_REJECT,
                                      f"gatekeeper ceiling {ceiling}: no claim kept a passed binding",
                                      cause="NO_VERIFIED_CLAIM", failed_rules=gatekeeper_result.failed_rules,
                                      sources=self._verified_sources(run_id), disabled_tools=disabled)
            return _RoundFailure.of(EDGE_GATEKEEPER_REJECT, f"gatekeeper {gatekeeper_result.severity}",
                                  cause="CITATION_CHECK_FAILED", failed_rules=gatekeeper_result.failed_rules,
                                  disabled_tools=disabled)

        # verifier
        verifier_input = VerifierInput(
            diagnosis_context=DiagnosisContext(query=query, services=plan.services, window=plan.window, round=round_),
            verified_executor_output=verified_output,
            verified_evidence=verified_evidence,
            gatekeeper_audit=gatekeeper_result.for_verifier(),  # positions only: no executor string
            verdict_ceiling=ceiling,
            retry_context=retry_context,
        )
        audit.event("verifier", "ENTER", "", typed=events.verifier_enter("VERIFY_CLAIMS"), kind="verifier",
                    round_=round_)
        ver = self._call(
            "verifier", self._clients.verifier.VerifyClaims,
            verifier_pb2.VerifyClaimsRequest(input=plain_to_message(verifier_input, verifier_types_pb2.VerifierInput)),
            deadline, is_active,
        )
        audit.prompt(ver.prompt)
        audit.model_call(ver.model_call)
        status = spec_value(enums_pb2.VerifierStatus.DESCRIPTOR, ver.verifier_status)
        audit.verifier_status = status
        if status != "COMPLETED" or not ver.HasField("output"):
            audit.event("verifier", "EXIT", status or "FAILED", ver.failure_reason,
                        typed=events.verifier_failed("VERIFY_CLAIMS", status), kind="verifier", round_=round_)
            return _RoundFailure.of(EDGE_VERIFIER_FAILS, "verifier failed after its technical attempts",
                                  cause="TECHNICAL_FAILURE", disabled_tools=disabled)
        output = message_to_model(ver.output, VerifierOutput)
        # The effective verdict is recomputed here from the claim checks: the gateway never trusts
        # a downstream's own verdict arithmetic.
        effective = compute_effective_verdict(verified_output.claims, output.claim_checks, output.verdict, ceiling)
        audit.verifier(output, effective)
        audit.event("verifier", "EXIT", effective.effective_verdict,
                    f"model {output.verdict}, groundedness {effective.groundedness_score:.2f}",
                    typed=events.verifier_exit(effective.effective_verdict, output.verdict, effective.groundedness_score),
                    kind="verdict", round_=round_,
                    payload={"model_verdict": output.verdict, "effective_verdict": effective.effective_verdict})
        return _RoundResult(plan=plan, verifier_input=verifier_input, verifier_output=output,
                            effective=effective, claim_checks=output.claim_checks, disabled_tools=disabled)

    def _compose(self, audit: RunAudit, query: str, result: _RoundResult, deadline: Deadline,
                 is_active: Callable[[], bool]) -> DiagnosisOutcome:
        verdict = cap_for_coverage(result.effective.effective_verdict, audit.service_coverage)
        if verdict != result.effective.effective_verdict:
            audit.cap_verdict(result.effective.effective_verdict, verdict)
            audit.event("graph", "INFO", "COVERAGE_CAP", f"{result.effective.effective_verdict} -> {verdict}: "
                        "named services were not checked",
                        typed=events.coverage_cap(result.effective.effective_verdict, verdict))
        invocations = self._run_invocations(audit.run_id)  # read once for the failures and the sources
        failed = self._failed_calls(audit.run_id, result.verifier_input.gatekeeper_audit.failed_calls, invocations)
        capped = cap_for_failed_calls(verdict, failed)
        if capped != verdict:
            open_ids = [c.invocation_id for c in open_failures(failed)]
            audit.cap_for_failed_calls(verdict, capped, open_ids)
            audit.event("graph", "INFO", "FAILED_CALL_CAP", f"{verdict} -> {capped}: "
                        f"{len(open_ids)} evidence call(s) failed", typed=events.failed_calls_cap(verdict, capped, open_ids),
                        payload={"invocation_ids": open_ids})
            verdict = capped
        # No data is not health: a checked scope without data caps the answer unless something
        # confirmed abnormal remains (the composer's first line then says 无法确认 and names it).
        empty = empty_scopes(invocations or [], audit.run_id)
        claims = result.verifier_input.verified_executor_output.claims
        capped = cap_for_empty_scopes(verdict, empty, confirmed_anomaly(claims, result.claim_checks, verdict))
        if capped != verdict:
            ids = [i for scope in empty for i in scope.invocation_ids]
            audit.cap_for_empty_scopes(verdict, capped, ids)
            audit.event("graph", "INFO", "EMPTY_SCOPE_CAP", f"{verdict} -> {capped}: "
                        f"{len(empty)} checked scope(s) without data", typed=events.empty_scope_cap(verdict, capped, ids),
                        payload={"invocation_ids": ids, "services": [scope.service for scope in empty]})
            verdict = capped
        composer_input = ComposerInput(
            query=query,
            effective_verdict=verdict,
            verified_executor_output=result.verifier_input.verified_executor_output,
            claim_checks=result.claim_checks,
            side_text_checks=result.verifier_output.side_text_checks,
            service_coverage=audit.service_coverage,
            verified_sources=self._verified_sources(audit.run_id, invocations=invocations or []),
            question_kind=result.plan.question_kind,
            hypothesis=result.plan.hypothesis,
            hypothesis_symptoms=list(result.plan.hypothesis_symptoms),
            failed_calls=failed,
            disabled_tools=result.disabled_tools,
            empty_scopes=empty,
        )
        audit.event("composer", "ENTER", verdict, f"edge {EDGE_TO_COMPOSER}", typed=events.composer_enter(verdict))
        try:
            response = self._call(
                "composer", self._clients.composer.ComposeAnswer,
                composer_pb2.ComposeAnswerRequest(input=plain_to_message(composer_input, composer_types_pb2.ComposerInput)),
                deadline, is_active,
            )
            audit.prompt(response.prompt)
            audit.model_call(response.model_call)
            composed = ComposerOutput(
                answer=response.output.answer,
                sections={k: list(v.lines) for k, v in response.output.sections.items()},
                template=response.output.template,
                used_fallback_template=response.output.used_fallback_template,
                fallback_reason=response.output.fallback_reason,
                structured_answer=(message_to_model(response.structured_answer, StructuredAnswer)
                                   if response.HasField("structured_answer") else None),
            )
        except DownstreamFailed as exc:
            # Handled composer fallback: the fixed template renders the same verified material.
            audit.event("composer", "INFO", "COMPOSER_FALLBACK", str(exc), typed=events.composer_unavailable())
            composed = compose_answer(composer_input)
            composed.used_fallback_template = True
            composed.fallback_reason = f"composer unavailable: {exc.code.name if exc.code else 'ERROR'}"
        audit.composer(composed)
        audit.event("composer", "EXIT", "OK", typed=events.answer_composed(verdict, composed.used_fallback_template),
                    kind="answer")
        audit.prepare_verifier_evaluation()
        outcome = DiagnosisOutcome(
            run_id=audit.run_id,
            status="COMPLETED",
            answer=composed.answer,
            effective_verdict=verdict,
            model_verdict=result.verifier_output.verdict,
            verdict_ceiling=result.verifier_input.verdict_ceiling,
            groundedness_score=result.effective.groundedness_score,
            rounds=audit.rounds,
            structured_answer=composed.structured_answer,
            open_failed_calls=len(open_failures(failed)),
        )
        self._finish(audit, outcome, invocations)
        return outcome

    def _fallback(self, audit: RunAudit, query: str, edge: str, reason: str, *,
                  fallback_type: str = "PRE_VERIFICATION", cause: str | None = None,
                  failed_rules: list[str] | None = None,
                  sources: list[VerifiedSource] | None = None,
                  disabled_tools: list[str] | None = None,
                  answer: StructuredAnswer | None = None) -> DiagnosisOutcome:
        """Deterministic fallback before a verdict: fixed template (chosen by the type and the
        cause, or `answer` when the caller chose one), no verdict invented. `reason` is for the
        audit only; it never reaches the answer."""
        failed = self._failed_calls(audit.run_id)
        composed = compose_answer(ComposerInput(
            query=query, fallback_type=fallback_type, fallback_reason=reason, fallback_cause=cause,
            failed_rules=list(failed_rules or []), service_coverage=audit.service_coverage,
            verified_sources=list(sources or []), failed_calls=failed,
            disabled_tools=list(disabled_tools or []),
        ))
        if answer is not None:
            composed.structured_answer, composed.answer = answer, render(answer)
        payload = {"fallback_type": fallback_type, **({"fallback_cause": cause} if cause else {})}
        audit.event("fallback", "INFO", edge, reason, typed=events.fallback(fallback_type, cause, edge), kind="fallback",
                    payload=payload)
        audit.composer(composed)
        audit.prepare_verifier_evaluation(failure_reason=reason)
        outcome = DiagnosisOutcome(
            run_id=audit.run_id,
            status="FALLBACK",
            answer=composed.answer,
            fallback_type=fallback_type,
            verdict_ceiling=audit.verdict_ceiling,
            rounds=audit.rounds,
            structured_answer=composed.structured_answer,
            fallback_cause=cause,
            open_failed_calls=len(open_failures(failed)),
        )
        self._finish(audit, outcome)
        return outcome

    def _run_invocations(self, run_id: str) -> list[ToolInvocation] | None:
        """The run's invocations from the store; None when there is no store or it cannot be read
        (what is built from them is a courtesy or a floor, never a reason to fail the answer)."""
        if self._invocations is None:
            return None
        try:
            return self._invocations.list_for_run(run_id)
        except Exception:
            log.warning("could not list the invocations of run %s", run_id, exc_info=True)
            return None

    def _verified_sources(self, run_id: str, tool_call_ids: list[str] | None = None,
                          invocations: list[ToolInvocation] | None = None) -> list[VerifiedSource]:
        """The run's completed tool calls as the store recorded them (tool, id, the scope of the
        persisted request): never model text. With `tool_call_ids`, those calls only, in that order.
        `invocations`: the run's, when the caller has just read them."""
        if invocations is None:
            invocations = self._run_invocations(run_id) or []
        completed = [i for i in invocations if i.lifecycle == "READY" and i.evidence_status != "ERROR"]
        if tool_call_ids is not None:
            by_call = {i.tool_call_id: i for i in completed if i.tool_call_id}
            completed = [by_call[call_id] for call_id in tool_call_ids if call_id in by_call]
        return [VerifiedSource(tool_name=i.tool_name, invocation_id=i.invocation_id, scope=_scope(i.request, unexamined_series(i.agent_result)),
                               source_kind=invocation_source_kind(i) or "")
                for i in completed]

    def _failed_calls(self, run_id: str, known: list[FailedCall] | None = None,
                      invocations: list[ToolInvocation] | None = None) -> list[FailedCall]:
        """The run's failed evidence calls as the store recorded them (issue 16, point 4). If the
        store cannot be read, what the gatekeeper recorded (`known`) stands: never fewer failures."""
        if invocations is None:
            invocations = self._run_invocations(run_id)
        return list(known or []) if invocations is None else failed_calls(invocations, run_id)

    def _finish(self, audit: RunAudit, outcome: DiagnosisOutcome,
                invocations: list[ToolInvocation] | None = None) -> None:
        """Every answer of both modes (composed, released or fallback) passes here once. The
        display step runs last, after every check ran on the UTC text: the answer the user gets,
        and the run's stored `answer`, show times in the configured zone and name it; the audit's
        claims, evidence, tool results and `composer_output` keep UTC. `invocations`: the run's,
        when the caller read them after its last tool call (none is made after that)."""
        channels: dict[str, dict[str, Any]] = {}
        if outcome.structured_answer is None:  # a composer that sent no structure: the text as it came
            outcome.answer = self._display.localize_answer(outcome.answer)
        else:
            # Citations of this run's invocations only, metric ones with their stored series; then
            # the display step on the structure, and the text rendered from it.
            if invocations is None:
                invocations = self._run_invocations(outcome.run_id)
            structured = checked_citations(outcome.structured_answer, invocations)
            outcome.structured_answer = localized(structured, self._display)
            outcome.answer = render(outcome.structured_answer)
            channels["answer"] = {"structured_answer": outcome.structured_answer.model_dump(),
                                  "retryable": outcome.retryable}
        audit.wait_background()
        span = trace.get_current_span()
        span.set_attribute("attest.rounds", outcome.rounds)
        for key, value in (
            ("attest.verdict_ceiling", outcome.verdict_ceiling),
            ("attest.model_verdict", outcome.model_verdict),
            ("attest.effective_verdict", outcome.effective_verdict),
            ("attest.fallback_type", outcome.fallback_type),
        ):
            if value:
                span.set_attribute(key, value)
        audit.finish_run(status=outcome.status, effective_verdict=outcome.effective_verdict,
                         fallback_type=outcome.fallback_type, answer=outcome.answer, channels=channels)
