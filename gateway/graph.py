"""The multi-agent diagnosis graph: explicit nodes and conditional edges.

planner -> executor -> gatekeeper -> verifier -> composer, with one EVIDENCE_GAP_ONLY retry round
and a deterministic pre-verification fallback. Each edge is named after the spec scenario that
decides it (chat-verifier-agent.graph.md; the names are in `graph_edges.py`), so a reader can find
the requirement behind a route. The steps of one round, and the decisions between them, are
`round_steps.py`'s; this module runs the rounds, merges them and composes or falls back.
Nothing unverified reaches the answer: the composer only ever sees the gatekeeper's verified
projection and the verifier's claim checks, and every fallback uses a fixed template.

Typed outcomes besides verdicts: a question that names no service ends in
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

Failed evidence calls: the gatekeeper lists them in its audit, which the
verifier's input carries; in round 0 one is a critical gap that triggers the one retry (which runs
the call again); one that no later round recovered caps the verdict at LOW_CONFID
(`cap_for_failed_calls`) and every answer names it.

No silent demo data: the executor says which evidence tools are disabled for
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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from opentelemetry import trace

from attest.common.v1 import composer_types_pb2
from attest.composer.v1 import composer_pb2
from gateway import progress_events as events
from gateway.answer_structure import checked_citations, localized, release_citations
from gateway.audit import ProgressSink, RunAudit
from gateway.clients import Deadline, DownstreamClients, DownstreamFailed, RequestT, ResponseT
from gateway.diagnosis_metrics import DiagnosisMetrics
from gateway.graph_edges import (
    EDGE_DOWNSTREAM_FAILURE,
    EDGE_INTERRUPTED,
    EDGE_NO_PLAN,
    EDGE_RETRY,
    EDGE_TO_COMPOSER,
)
from gateway.release_policy import Release, fallback, future_window_fallback, release_structure, unavailable_fallback
from gateway.round_merge import merge_rounds
from gateway.round_steps import RoundCall, RoundFailure, RoundResult, RoundSteps, check_plan
from gateway.single_react import SingleReactFlow
from shared.call_scope import call_scope as _scope
from shared.call_scope import unexamined_series
from shared.config import configured_time_zone
from shared.core.contracts import (
    ComposerInput,
    ComposerOutput,
    EmptyScope,
    FailedCall,
    RetryContext,
    ToolInvocation,
    Verdict,
    VerifiedSource,
)
from shared.core.effective_verdict import (
    build_retry_context,
    cap_for_coverage,
    cap_for_failed_calls,
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
from shared.proto_convert import message_to_model, plain_to_message

log = logging.getLogger(__name__)


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
    # The answer as a structure; `answer` is its rendering.
    structured_answer: StructuredAnswer | None = None
    # The cause that chose a fallback's text (FallbackCause), when one did.
    fallback_cause: str | None = None
    # How many of the run's evidence calls failed with no later round recovering them.
    open_failed_calls: int = 0

    @property
    def retryable(self) -> bool:
        """Whether asking the same question again may help (`structured_answer.retryable`)."""
        return retryable(self.status, self.fallback_type, self.fallback_cause, self.open_failed_calls)


def _coverage_cap(audit: RunAudit, verdict: str) -> Verdict:
    """The verdict capped for named services that were not checked (`cap_for_coverage`); a cap is
    recorded in the audit and the run's events."""
    capped = cap_for_coverage(verdict, audit.service_coverage)
    if capped != verdict:
        audit.cap_verdict(verdict, capped)
        audit.event("graph", "INFO", "COVERAGE_CAP", f"{verdict} -> {capped}: "
                    "named services were not checked",
                    typed=events.coverage_cap(verdict, capped))
    return capped


def _failed_call_cap(audit: RunAudit, verdict: Verdict, failed: list[FailedCall]) -> Verdict:
    """The verdict capped for evidence calls that failed with no later round recovering them
    (`cap_for_failed_calls`); a cap is recorded in the audit and the run's events."""
    capped = cap_for_failed_calls(verdict, failed)
    if capped != verdict:
        open_ids = [c.invocation_id for c in open_failures(failed)]
        audit.cap_for_failed_calls(verdict, capped, open_ids)
        audit.event("graph", "INFO", "FAILED_CALL_CAP", f"{verdict} -> {capped}: "
                    f"{len(open_ids)} evidence call(s) failed", typed=events.failed_calls_cap(verdict, capped, open_ids),
                    payload={"invocation_ids": open_ids})
    return capped


def _empty_scope_cap(audit: RunAudit, verdict: Verdict, empty: list[EmptyScope], anomaly_confirmed: bool) -> Verdict:
    """The verdict capped for checked scopes without data unless a confirmed anomaly remains
    (`cap_for_empty_scopes`); a cap is recorded in the audit and the run's events."""
    capped = cap_for_empty_scopes(verdict, empty, anomaly_confirmed)
    if capped != verdict:
        ids = [i for scope in empty for i in scope.invocation_ids]
        audit.cap_for_empty_scopes(verdict, capped, ids)
        audit.event("graph", "INFO", "EMPTY_SCOPE_CAP", f"{verdict} -> {capped}: "
                    f"{len(empty)} checked scope(s) without data", typed=events.empty_scope_cap(verdict, capped, ids),
                    payload={"invocation_ids": ids, "services": [scope.service for scope in empty]})
    return capped


class DiagnosisGraph:
    def __init__(self, clients: DownstreamClients, runs: RunStore, invocations: InvocationStore | None = None,
                 background: Executor | None = None, metrics: DiagnosisMetrics | None = None,
                 display: LocalTimeDisplay | None = None) -> None:
        self._clients = clients
        # Times people read: the one display step, in `_finish`.
        self._display = display or LocalTimeDisplay(configured_time_zone())
        self._metrics = metrics
        self._runs = runs
        self._invocations = invocations
        self._background = background
        self._steps = RoundSteps(clients, self._call, self._run_invocations, self._verified_sources)

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
        planner uses for a follow-up question that names no service.
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
        # The tools with no source configured, and where the evidence came from.
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
        """Round 0, and at most one EVIDENCE_GAP_ONLY round that adds to it:
        its claims are merged into round 0's (`round_merge.py`); if it fails, round 0's verified
        result is the answer. Either way the run ends once, with one terminal event."""
        retry_context: RetryContext | None = None
        previous: RoundResult | None = None
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
                result = RoundFailure.of(EDGE_DOWNSTREAM_FAILURE, f"{exc.node} failed: "
                                         f"{exc.code.name if exc.code else 'ERROR'}", cause="TECHNICAL_FAILURE")
            if isinstance(result, RoundFailure):
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
    def _merge(audit: RunAudit, round0: RoundResult, round1: RoundResult,
               retry_context: RetryContext) -> RoundResult:
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
        return RoundResult(plan=round1.plan, verifier_input=verifier_input, verifier_output=merged.verifier_output,
                           effective=merged.effective, claim_checks=merged.claim_checks,
                           disabled_tools=list(dict.fromkeys(round0.disabled_tools + round1.disabled_tools)))

    def _one_round(self, run_id: str, query: str, round_: int, retry_context: RetryContext | None,
                   deadline: Deadline, is_active: Callable[[], bool], audit: RunAudit,
                   inherited: InheritedContext | None = None) -> RoundResult | RoundFailure:
        """One round up to its verdict, or why it ended before one (the caller decides what that
        means: a fallback in round 0, round 0's answer after a failed retry round). The steps and
        the decisions between them are `round_steps.py`'s."""
        r = RoundCall(run_id=run_id, query=query, round_=round_, deadline=deadline, is_active=is_active, audit=audit)
        plan_response, plan = self._steps.plan(r, retry_context, inherited)
        ended = check_plan(r, plan_response, plan)
        if ended is not None:
            return ended
        executed = self._steps.execute(r, plan_response, plan)
        if isinstance(executed, RoundFailure):
            return executed
        gated = self._steps.gate(r, executed)
        if isinstance(gated, RoundFailure):
            return gated
        return self._steps.verify(r, executed, gated, retry_context)

    def _compose(self, audit: RunAudit, query: str, result: RoundResult, deadline: Deadline,
                 is_active: Callable[[], bool]) -> DiagnosisOutcome:
        """The answer over a round's verdict, capped first for what the run could not check (named
        services left out, failed evidence calls, checked scopes without data), then composed."""
        verdict = _coverage_cap(audit, result.effective.effective_verdict)
        invocations = self._run_invocations(audit.run_id)  # read once for the failures and the sources
        failed = self._failed_calls(audit.run_id, result.verifier_input.gatekeeper_audit.failed_calls, invocations)
        verdict = _failed_call_cap(audit, verdict, failed)
        # No data is not health: a checked scope without data caps the answer unless something
        # confirmed abnormal remains (the composer's first line then says 无法确认 and names it).
        empty = empty_scopes(invocations or [], audit.run_id)
        claims = result.verifier_input.verified_executor_output.claims
        verdict = _empty_scope_cap(audit, verdict, empty, confirmed_anomaly(claims, result.claim_checks, verdict))
        composer_input = self._composer_input(audit, query, result, verdict, failed, empty, invocations)
        composed = self._composed(audit, composer_input, verdict, deadline, is_active)
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

    def _composer_input(self, audit: RunAudit, query: str, result: RoundResult, verdict: Verdict,
                        failed: list[FailedCall], empty: list[EmptyScope],
                        invocations: list[ToolInvocation] | None) -> ComposerInput:
        """What the composer is given: the verified material of the round under the capped verdict,
        and what the run could not check."""
        return ComposerInput(
            query=query,
            effective_verdict=verdict,
            verified_executor_output=result.verifier_input.verified_executor_output,
            claim_checks=result.claim_checks,
            side_text_checks=result.verifier_output.side_text_checks,
            service_coverage=audit.service_coverage,
            verified_sources=self._verified_sources(audit.run_id, invocations=invocations or []),
            intent=result.plan.intent,
            failed_calls=failed,
            disabled_tools=result.disabled_tools,
            empty_scopes=empty,
        )

    def _composed(self, audit: RunAudit, composer_input: ComposerInput, verdict: Verdict, deadline: Deadline,
                  is_active: Callable[[], bool]) -> ComposerOutput:
        """The composer's answer, with its entry and exit events; when the composer is unavailable,
        the fixed template's over the same verified material."""
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
        return composed

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
        """The run's failed evidence calls as the store recorded them. If the
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
