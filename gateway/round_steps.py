"""The steps of one multi-agent round and the decisions between them.

A round is planner -> executor -> gatekeeper -> verifier (`DiagnosisGraph._one_round` runs the
steps in that order). Each step records its node's audit entries and progress events and returns
what the next step needs, or a `RoundFailure`: the edge by which the round ended before a verdict
and the fallback it would give on its own. What a failure means (a fallback in round 0, round 0's
answer after a failed retry round) is the graph's to decide, not the steps'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from attest.common.v1 import enums_pb2, verifier_types_pb2
from attest.executor.v1 import executor_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2
from attest.planner.v1 import planner_pb2
from attest.verifier.v1 import verifier_pb2
from gateway import progress_events as events
from gateway.audit import RunAudit
from gateway.clients import Deadline, DownstreamCall, DownstreamClients
from gateway.graph_edges import (
    EDGE_GATEKEEPER_REJECT,
    EDGE_INVALID_OUTPUT,
    EDGE_NO_PLAN,
    EDGE_UNKNOWN_SERVICE,
    EDGE_VERIFIER_FAILS,
)
from gateway.replica_retry import with_replica_retry
from shared.core.contracts import (
    ClaimCheck,
    DiagnosisContext,
    ExecutorEvidenceV2,
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
from shared.core.effective_verdict import compute_effective_verdict
from shared.core.follow_up import InheritedContext
from shared.core.service_mentions import plain_word_mentions
from shared.core.templates import future_window_answer
from shared.proto_convert import enum_member, message_to_model, message_to_plain, plain_to_message, spec_value


@dataclass
class RoundResult:
    """A round that reached its verdict: what the retry decision, the merge of two rounds and the
    composer read."""

    plan: Plan
    verifier_input: VerifierInput
    verifier_output: VerifierOutput
    effective: Any
    claim_checks: list[ClaimCheck] = field(default_factory=list)
    # The evidence tools the executor reported disabled.
    disabled_tools: list[str] = field(default_factory=list)


@dataclass
class RoundFailure:
    """A round that ended before a verdict: the fallback it would give on its own."""

    edge: str
    reason: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, edge: str, reason: str, **options: Any) -> RoundFailure:
        return cls(edge, reason, options)


@dataclass(frozen=True)
class RoundCall:
    """What every step of a round works with: the run, its question, the round (0, or 1 for the
    evidence retry), the run's deadline and liveness check, and its audit."""

    run_id: str
    query: str
    round_: int
    deadline: Deadline
    is_active: Callable[[], bool]
    audit: RunAudit


@dataclass
class Executed:
    """The executor's answer to a round's plan, for the gatekeeper and the verifier: the response,
    the plan (its services the ones the executor checked, when any was named) and the evidence
    tools it reported disabled."""

    response: executor_pb2.ExecutePlanResponse
    plan: Plan
    disabled_tools: list[str]


@dataclass
class Gated:
    """What the gatekeeper passed on to the verifier: its result, the verdict ceiling and the
    verified executor output and evidence."""

    result: GatekeeperResult
    ceiling: str
    verified_output: ExecutorEvidenceV2
    verified_evidence: list[VerifiedEvidence]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def check_plan(r: RoundCall, plan_response: planner_pb2.CreatePlanResponse, plan: Plan) -> RoundFailure | None:
    """Between planner and executor: why the round ends here with nothing called (a RoundFailure),
    or None when the executor is to run the plan. A plan without steps that the executor is to read
    from single words of the question is marked, in `plan_response`, as naming no service."""
    # A single word of the question may name a service only the executor's catalogue knows.
    single_words = r.round_ == 0 and not plan.services and bool(plain_word_mentions(r.query))
    # A triage question names no service: the executor checks its catalogue's services.
    triage = r.round_ == 0 and plan.triage and not plan.services
    if r.round_ == 0 and not plan.services and not plan.unchecked_services and not single_words and not triage:
        # No service named: nothing can be checked, and nothing is called (graph and
        # single-ReAct alike end in MISSING_REQUIRED_CONTEXT).
        reason = "missing context: " + ", ".join(plan.missing_context or ["service"])
        return RoundFailure.of(EDGE_NO_PLAN, reason, fallback_type="MISSING_REQUIRED_CONTEXT")
    if r.round_ == 0 and "window" in plan.missing_context and plan.window is not None:
        # The planner read a window wholly in the future (a follow-up's, or one that the
        # gateway's earlier reading did not find): the same outcome, nothing called.
        return RoundFailure.of(EDGE_NO_PLAN, "missing context: window in the future",
                               fallback_type="MISSING_REQUIRED_CONTEXT",
                               answer=future_window_answer(_utc(plan.window.start), _utc(plan.window.end)))
    if not plan.steps and not single_words and not triage:
        if r.round_ == 0:
            reason = "missing context: " + ", ".join(plan.missing_context or ["nothing to check"])
            return RoundFailure.of(EDGE_NO_PLAN, reason)
        return RoundFailure.of(EDGE_NO_PLAN, "the retry planner found no new checks")

    if single_words and not plan.steps and not triage and "service" not in plan.missing_context:
        # The executor runs a plan without steps only as this reading: no service was named.
        plan_response.plan.missing_context.append("service")
    return None


def _plan_request(r: RoundCall, mode: str, retry_context: RetryContext | None,
                  inherited: InheritedContext | None) -> planner_pb2.CreatePlanRequest:
    """The planner's request for the round: the question, the evidence gaps of a retry round, and
    a follow-up's inherited context."""
    request = planner_pb2.CreatePlanRequest(
        run_id=r.run_id, query=r.query, mode=enum_member(enums_pb2.PlannerMode, mode),
        now=datetime.now(UTC).isoformat(),
    )
    if retry_context:
        request.retry_context.CopyFrom(plain_to_message(retry_context, verifier_types_pb2.RetryContext))
    if inherited is not None:
        # A follow-up: the planner decides what the question takes from the last run; the
        # executor fetches every piece of evidence afresh for this run.
        request.inherited.run_id = inherited.run_id
        request.inherited.services.extend(inherited.services)
        if inherited.window is not None:
            request.inherited.window.start = inherited.window.start
            request.inherited.window.end = inherited.window.end
    return request


def _record_planned(r: RoundCall, plan_response: planner_pb2.CreatePlanResponse, plan: Plan) -> None:
    """The planner's exit event and, in round 0, the follow-up it read from the session's last run."""
    # The plan's services and window are what the session's next question may inherit
    # (RunStore.last_planned_context reads them from this event).
    planned: dict[str, Any] = {"services": plan.services, "steps": len(plan.steps)}
    if plan.window is not None:
        planned["window"] = plan.window.model_dump()
    if plan_response.HasField("follow_up"):
        planned["follow_up"] = message_to_plain(plan_response.follow_up)
    r.audit.event("planner", "EXIT", "OK", f"{len(plan.steps)} tool call(s) planned",
                  typed=events.planner_exit(len(plan.steps), list(plan.services)), kind="planning",
                  round_=r.round_, payload=planned)
    if r.round_ == 0 and plan_response.HasField("follow_up"):
        follow_up = plan_response.follow_up
        r.audit.event("planner", "INFO", "FOLLOW_UP", follow_up.note,
                      typed=events.follow_up(list(follow_up.services), shifted=bool(follow_up.shift_seconds)),
                      kind="planning", round_=r.round_,
                      payload={"from_run_id": follow_up.from_run_id, "services": list(follow_up.services),
                               "window": {"start": follow_up.window.start, "end": follow_up.window.end}
                               if follow_up.HasField("window") else None,
                               "shift_phrase": follow_up.shift_phrase, "shift_seconds": follow_up.shift_seconds})


def _check_coverage(r: RoundCall, response: executor_pb2.ExecutePlanResponse, coverage: ServiceCoverage,
                    disabled: list[str]) -> RoundFailure | None:
    """Between executor and gatekeeper: why the round ends when the executor checked no service (a
    RoundFailure), or None. Round 0's coverage is recorded as the run's."""
    if not coverage.named and not response.invocation_ids:
        # Nothing the plan or the question names is a service the backends know: no tool ran.
        if r.round_ == 0:
            return RoundFailure.of(EDGE_NO_PLAN, "missing context: service", fallback_type="MISSING_REQUIRED_CONTEXT")
        return RoundFailure.of(EDGE_NO_PLAN, "the retry planner found no new checks")
    if r.round_ == 0:
        r.audit.coverage(coverage)
    if coverage.nothing_known:
        # Every named service is unknown to the backends: the executor ran nothing.
        names = ", ".join(u.name for u in coverage.unknown)
        r.audit.event("executor", "EXIT", "UNKNOWN_SERVICE", response.parse_detail,
                      typed=events.unknown_services([u.name for u in coverage.unknown], agent=False),
                      kind="tool_call", round_=r.round_, payload={"unknown_services": [u.name for u in coverage.unknown]})
        return RoundFailure.of(EDGE_UNKNOWN_SERVICE, f"unknown service(s): {names}",
                               fallback_type="UNKNOWN_SERVICE", disabled_tools=disabled)
    return None


def _record_executor_exit(r: RoundCall, response: executor_pb2.ExecutePlanResponse, coverage: ServiceCoverage,
                          disabled: list[str]) -> str:
    """The executor's parse status, recorded in the audit and its exit event."""
    parse_status = spec_value(enums_pb2.ParseStatus.DESCRIPTOR, response.parse_status) or "missing"
    r.audit.parse_status = parse_status
    r.audit.event("executor", "EXIT", parse_status, response.parse_detail,
                  typed=events.executor_exit(parse_status, list(response.invocation_ids), list(coverage.checked),
                                             [u.name for u in coverage.unknown], disabled),
                  kind="tool_call", round_=r.round_,
                  payload={"invocation_ids": list(response.invocation_ids),
                           "services_checked": list(coverage.checked),
                           "services_unknown": [u.name for u in coverage.unknown],
                           "services_unchecked": list(coverage.unchecked),
                           "disabled_tools": disabled})
    return parse_status


class RoundSteps:
    """The round's calls to the downstream roles (planner, executor, gatekeeper, verifier)."""

    def __init__(self, clients: DownstreamClients, call: DownstreamCall,
                 invocations: Callable[[str], list[ToolInvocation] | None],
                 sources: Callable[[str], list[VerifiedSource]]) -> None:
        self._clients = clients
        self._call = call
        # The run's invocations from the store (None when it cannot be read): one tool-call event each.
        self._invocations = invocations
        # The run's completed tool calls as the store recorded them: what a fallback names as verified.
        self._sources = sources

    def plan(self, r: RoundCall, retry_context: RetryContext | None,
             inherited: InheritedContext | None) -> tuple[planner_pb2.CreatePlanResponse, Plan]:
        """The planner's plan for the round (EVIDENCE_GAP_ONLY when `retry_context` names gaps),
        with the planner's entry and exit events."""
        mode = "EVIDENCE_GAP_ONLY" if retry_context else "NORMAL"
        r.audit.event("planner", "ENTER", mode, typed=events.planner_enter(mode), kind="planning", round_=r.round_)
        plan_request = _plan_request(r, mode, retry_context, inherited)
        plan_response = self._call("planner", self._clients.planner.CreatePlan, plan_request, r.deadline, r.is_active)
        r.audit.prompt(plan_response.prompt)
        r.audit.model_call(plan_response.model_call)
        plan = message_to_model(plan_response.plan, Plan)
        _record_planned(r, plan_response, plan)
        return plan_response, plan

    def execute(self, r: RoundCall, plan_response: planner_pb2.CreatePlanResponse,
                plan: Plan) -> Executed | RoundFailure:
        """The executor's run of the planned calls, with its entry, exit and tool-call events; a
        RoundFailure when it checked no service or its output is invalid."""
        r.audit.event("executor", "ENTER", "", typed=events.executor_enter(len(plan.steps)), kind="tool_call",
                      round_=r.round_)
        exec_response = with_replica_retry(
            self._call, r.audit, self._clients.executor.ExecutePlan,
            lambda attempt: executor_pb2.ExecutePlanRequest(run_id=r.run_id, query=r.query, plan=plan_response.plan,
                                                            round=r.round_, attempt=attempt),
            r.deadline, r.is_active, round_=r.round_, channel=self._clients.executor_channel,
        )
        r.audit.prompt(exec_response.prompt)
        r.audit.model_call(exec_response.model_call)
        disabled = list(exec_response.disabled_tools)
        coverage = message_to_model(exec_response.service_coverage, ServiceCoverage)
        ended = _check_coverage(r, exec_response, coverage, disabled)
        if ended is not None:
            return ended
        if coverage.named:
            # What the verifier and the retry planner see as the run's services: the checked ones.
            plan = plan.model_copy(update={"services": list(coverage.checked)})
        parse_status = _record_executor_exit(r, exec_response, coverage, disabled)
        r.audit.refresh_rule_evaluation()
        self._record_tool_calls(r, exec_response)
        if parse_status != "valid":
            return RoundFailure.of(EDGE_INVALID_OUTPUT, f"INVALID_OUTPUT ({parse_status})",
                                   cause="INVALID_OUTPUT", disabled_tools=disabled)
        return Executed(response=exec_response, plan=plan, disabled_tools=disabled)

    def _record_tool_calls(self, r: RoundCall, exec_response: executor_pb2.ExecutePlanResponse) -> None:
        """One progress event per tool the executor ran, with the invocations the store recorded."""
        recorded = {i.invocation_id: i for i in self._invocations(r.run_id) or []}
        for entry in exec_response.tool_trace_summary:
            ids = list(entry.source_invocation_ids)
            r.audit.event("executor", "INFO", entry.evidence_level, f"{entry.tool_name}: {entry.evidence_level}",
                          typed=events.tool_call(entry.tool_name, [recorded[i] for i in ids if i in recorded], ids,
                                                 entry.evidence_level),
                          kind="tool_call", round_=r.round_,
                          payload={"tool_name": entry.tool_name, "evidence_level": entry.evidence_level,
                                   "invocation_ids": ids, "success": entry.success})

    def gate(self, r: RoundCall, executed: Executed) -> Gated | RoundFailure:
        """The gatekeeper's check of the executor's output, with its entry and exit events; a
        RoundFailure when it routes past the verifier (nothing verified is left to verify)."""
        r.audit.event("gatekeeper", "ENTER", "", typed=events.gatekeeper_enter("CHECK_EVIDENCE"), kind="gatekeeper",
                      round_=r.round_)
        gk = self._call(
            "gatekeeper", self._clients.gatekeeper.CheckEvidence,
            gatekeeper_pb2.CheckEvidenceRequest(run_id=r.run_id, executor_output_text=executed.response.output_text),
            r.deadline, r.is_active,
        )
        gatekeeper_result = message_to_model(gk.gatekeeper_result, GatekeeperResult)
        ceiling = spec_value(enums_pb2.Verdict.DESCRIPTOR, gk.verdict_ceiling)
        route = spec_value(enums_pb2.GatekeeperRoute.DESCRIPTOR, gk.route)
        verified_output = message_to_model(gk.verified_executor_output, ExecutorEvidenceV2)
        verified_evidence = [message_to_model(item, VerifiedEvidence) for item in gk.verified_evidence]
        r.audit.gatekeeper(gatekeeper_result, ceiling, verified_output, verified_evidence)
        r.audit.event("gatekeeper", "EXIT", gatekeeper_result.status,
                      f"ceiling {ceiling}; failed rules: {', '.join(gatekeeper_result.failed_rules) or 'none'}",
                      typed=events.gatekeeper_exit(gatekeeper_result.status, ceiling, gatekeeper_result.failed_rules),
                      kind="gatekeeper", round_=r.round_,
                      payload={"verdict_ceiling": ceiling, "failed_rules": gatekeeper_result.failed_rules})
        if route != "VERIFIER" or ceiling is None:
            return self._gatekeeper_reject(r, ceiling, gatekeeper_result, executed.disabled_tools)
        return Gated(result=gatekeeper_result, ceiling=ceiling, verified_output=verified_output,
                     verified_evidence=verified_evidence)

    def _gatekeeper_reject(self, r: RoundCall, ceiling: str | None, result: GatekeeperResult,
                           disabled: list[str]) -> RoundFailure:
        """The round's end when the gatekeeper routes past the verifier: the failed rules, and the
        run's completed tool calls when some claim was checked but none kept a passed binding."""
        if ceiling is not None and ceiling != "REJECT":
            # No claim kept a passed binding: nothing verified is left to verify.
            # The answer names the failed rules and the run's completed tool calls.
            return RoundFailure.of(EDGE_GATEKEEPER_REJECT,
                                   f"gatekeeper ceiling {ceiling}: no claim kept a passed binding",
                                   cause="NO_VERIFIED_CLAIM", failed_rules=result.failed_rules,
                                   sources=self._sources(r.run_id), disabled_tools=disabled)
        return RoundFailure.of(EDGE_GATEKEEPER_REJECT, f"gatekeeper {result.severity}",
                               cause="CITATION_CHECK_FAILED", failed_rules=result.failed_rules,
                               disabled_tools=disabled)

    def verify(self, r: RoundCall, executed: Executed, gated: Gated,
               retry_context: RetryContext | None) -> RoundResult | RoundFailure:
        """The verifier's claim checks over what the gatekeeper verified, with its entry and exit
        events, and the effective verdict the gateway recomputes from them; a RoundFailure when the
        verifier failed."""
        verifier_input = VerifierInput(
            diagnosis_context=DiagnosisContext(query=r.query, services=executed.plan.services,
                                               window=executed.plan.window, round=r.round_),
            verified_executor_output=gated.verified_output,
            verified_evidence=gated.verified_evidence,
            gatekeeper_audit=gated.result.for_verifier(),  # positions only: no executor string
            verdict_ceiling=gated.ceiling,
            retry_context=retry_context,
        )
        r.audit.event("verifier", "ENTER", "", typed=events.verifier_enter("VERIFY_CLAIMS"), kind="verifier",
                      round_=r.round_)
        ver = self._call(
            "verifier", self._clients.verifier.VerifyClaims,
            verifier_pb2.VerifyClaimsRequest(input=plain_to_message(verifier_input, verifier_types_pb2.VerifierInput)),
            r.deadline, r.is_active,
        )
        r.audit.prompt(ver.prompt)
        r.audit.model_call(ver.model_call)
        status = spec_value(enums_pb2.VerifierStatus.DESCRIPTOR, ver.verifier_status)
        r.audit.verifier_status = status
        if status != "COMPLETED" or not ver.HasField("output"):
            r.audit.event("verifier", "EXIT", status or "FAILED", ver.failure_reason,
                          typed=events.verifier_failed("VERIFY_CLAIMS", status), kind="verifier", round_=r.round_)
            return RoundFailure.of(EDGE_VERIFIER_FAILS, "verifier failed after its technical attempts",
                                   cause="TECHNICAL_FAILURE", disabled_tools=executed.disabled_tools)
        output = message_to_model(ver.output, VerifierOutput)
        # The effective verdict is recomputed here from the claim checks: the gateway never trusts
        # a downstream's own verdict arithmetic.
        effective = compute_effective_verdict(gated.verified_output.claims, output.claim_checks, output.verdict,
                                              gated.ceiling)
        r.audit.verifier(output, effective)
        r.audit.event("verifier", "EXIT", effective.effective_verdict,
                      f"model {output.verdict}, groundedness {effective.groundedness_score:.2f}",
                      typed=events.verifier_exit(effective.effective_verdict, output.verdict, effective.groundedness_score),
                      kind="verdict", round_=r.round_,
                      payload={"model_verdict": output.verdict, "effective_verdict": effective.effective_verdict})
        return RoundResult(plan=executed.plan, verifier_input=verifier_input, verifier_output=output,
                           effective=effective, claim_checks=output.claim_checks, disabled_tools=executed.disabled_tools)
