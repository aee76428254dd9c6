"""Single-ReAct mode: agent → EvidenceGuard → (one EvidenceRepair → EvidenceGuard) → SemanticGuard
→ Release. Which release each path leads to is decided in `gateway/release_policy.py`.

Between the two guards, the answer guard (`gateway/answer_guard.py`) checks that the conclusion
opens with the direct answer to the question and agrees with its Analyses' evidence.

The executor resolves the question's services before the agent runs: when every named service is
unknown the agent does not run and the release is UNKNOWN_SERVICE; otherwise every release
carries the coverage, so the answer names the services that were not checked."""

from __future__ import annotations

from collections.abc import Callable

from attest.common.v1 import enums_pb2, question_pb2, single_react_pb2
from attest.executor.v1 import executor_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2
from attest.verifier.v1 import verifier_pb2
from gateway import progress_events as events
from gateway.answer_guard import check_answer
from gateway.audit import RunAudit
from gateway.clients import Deadline, DownstreamCall, DownstreamClients
from gateway.release_policy import Release, fallback, success, verified_sources, verified_tool_call_ids
from gateway.replica_retry import with_replica_retry
from shared.core.agent_stop_reasons import MODEL_UNAVAILABLE
from shared.core.contracts import FailedCall, QuestionIntent, ServiceCoverage, ToolInvocation, VerifiedSource
from shared.core.question_intent import classify_question
from shared.core.service_mentions import extract_service_names
from shared.draft_contract import Draft, EvidenceGuardResult, SemanticFinding, for_semantic_guard
from shared.draft_semantics import repair_changes_semantics
from shared.no_data import empty_scopes
from shared.proto_convert import message_to_model, plain_to_message, spec_value

DEFAULT_MAX_STEPS = 12
# The agent checks a service in about three steps (metrics, logs, changes): a question naming
# several services gets a budget that covers them, within the executor's bound.
STEPS_PER_SERVICE = 3
MAX_STEPS = 50


def step_budget(intent: QuestionIntent, query: str) -> int:
    """The agent's step budget: enough for every service the question names (a
    multi-service question is checked up to the executor's limit), never below the default."""
    if intent.triage:
        # Which services are abnormal: the executor checks as many catalogued services as fit.
        return MAX_STEPS
    needed = STEPS_PER_SERVICE * len(extract_service_names(query)) + 1
    return min(MAX_STEPS, max(DEFAULT_MAX_STEPS, needed))


def _citation_failed(guard: EvidenceGuardResult, coverage: ServiceCoverage) -> Release:
    """EVIDENCE_VALIDATION_FAILED naming the guard's failed checks (codes, never Draft text)."""
    failed = sorted({violation.code for violation in guard.violations})
    return fallback("EVIDENCE_VALIDATION_FAILED", cause="CITATION_CHECK_FAILED", failed_rules=failed, coverage=coverage)


class SingleReactFlow:
    def __init__(self, clients: DownstreamClients, call: DownstreamCall,
                 failed_calls: Callable[[str], list[FailedCall]] | None = None,
                 sources: Callable[[str, list[str]], list[VerifiedSource]] | None = None,
                 invocations: Callable[[str], list[ToolInvocation]] | None = None) -> None:
        self._clients = clients
        # The run's persisted tool calls: one progress event each.
        self._invocations = invocations
        self._call = call
        # The run's failed evidence calls, from the store.
        self._failed_calls = failed_calls
        # The store's records of given tool calls of the run: what a fallback names as verified.
        self._sources = sources

    def _verified_sources(self, run_id: str, draft: Draft, guard: EvidenceGuardResult) -> list[str]:
        """The sources of the calls the guard verified, as the store recorded them."""
        if self._sources is None:
            return []
        return verified_sources(self._sources(run_id, verified_tool_call_ids(draft, guard)))

    def _guard(self, run_id: str, draft: Draft, deadline: Deadline, is_active: Callable[[], bool], audit: RunAudit,
               label: str) -> EvidenceGuardResult:
        check = "EVIDENCE_GUARD_AFTER_REPAIR" if label == "guard_after_repair" else "EVIDENCE_GUARD"
        audit.event("gatekeeper", "ENTER", "EVIDENCE_GUARD", label, typed=events.gatekeeper_enter(check),
                    kind="gatekeeper")
        response = self._call(
            "gatekeeper", self._clients.gatekeeper.GuardEvidence,
            gatekeeper_pb2.GuardEvidenceRequest(run_id=run_id, draft=plain_to_message(draft, single_react_pb2.Draft)),
            deadline, is_active,
        )
        result = message_to_model(response.result, EvidenceGuardResult)
        audit.guard(label, result)
        audit.event("gatekeeper", "EXIT", "passed" if result.passed else "failed",
                    f"{label}: {len(result.violations)} violation(s)",
                    typed=events.guard_exit(check, result.passed, [v.code for v in result.violations],
                                            len(result.violations)),
                    kind="gatekeeper",
                    payload={"violations": sorted({v.code for v in result.violations})})
        return result

    def _tool_calls(self, run_id: str, tool_call_ids: list[str], audit: RunAudit) -> None:
        """One event per tool call the agent made, as the store recorded it."""
        if self._invocations is None:
            return
        by_call = {i.tool_call_id: i for i in self._invocations(run_id) if i.tool_call_id and not i.abandoned}
        for call_id in dict.fromkeys(tool_call_ids):
            if (invocation := by_call.get(call_id)) is not None:
                audit.event("executor", "INFO", invocation.evidence_status or "ERROR",
                            f"{invocation.tool_name}: {invocation.evidence_status or 'ERROR'}",
                            typed=events.tool_call(invocation.tool_name, [invocation], [invocation.invocation_id]),
                            kind="tool_call",
                            payload={"tool_name": invocation.tool_name, "invocation_ids": [invocation.invocation_id],
                                     "tool_call_id": call_id})

    def run(self, run_id: str, query: str, deadline: Deadline, is_active: Callable[[], bool],
            audit: RunAudit) -> Release:
        audit.rounds = 1
        # What the question asks for is read here, once: the agent opens its answer by it and the
        # answer guard checks the opening against it.
        intent = classify_question(query)
        max_steps = step_budget(intent, query)
        audit.event("executor", "ENTER", "SINGLE_REACT", typed=events.agent_enter(max_steps), kind="planning")
        agent = with_replica_retry(
            self._call, audit, self._clients.executor.RunAgent,
            lambda attempt: executor_pb2.RunAgentRequest(
                run_id=run_id, query=query, max_steps=max_steps, attempt=attempt,
                intent=plain_to_message(intent, question_pb2.QuestionIntent)),
            deadline, is_active, channel=self._clients.executor_channel,
        )
        audit.prompt(agent.prompt)
        audit.model_call(agent.model_call)
        coverage = message_to_model(agent.service_coverage, ServiceCoverage)
        audit.coverage(coverage)
        if agent.disabled_tools:
            # Tools with no source configured; the release names them (graph.py).
            audit.react["disabled_tools"] = list(agent.disabled_tools)
        if coverage.nothing_known:
            audit.event("executor", "EXIT", "UNKNOWN_SERVICE", agent.draft_parse_detail,
                        typed=events.unknown_services([u.name for u in coverage.unknown], agent=True), kind="tool_call",
                        payload={"unknown_services": [u.name for u in coverage.unknown]})
            return fallback("UNKNOWN_SERVICE", coverage=coverage)
        facts = list(agent.progress.observed_facts)
        self._tool_calls(run_id, list(agent.tool_call_ids), audit)
        audit.event("executor", "EXIT", agent.stop_reason or ("draft" if agent.HasField("draft") else "no_draft"),
                    agent.draft_parse_detail,
                    typed=events.agent_exit(agent.stop_reason, agent.HasField("draft"), len(agent.tool_call_ids),
                                            len(facts)),
                    kind="tool_call",
                    payload={"tool_calls": len(agent.tool_call_ids), "observed_facts": len(facts)})
        audit.react["stop_reason"] = agent.stop_reason
        audit.react["tool_calls"] = len(agent.tool_call_ids)
        # The agent's tool calls are persisted by now: their rule evaluation is a channel of this
        # run exactly as in the multi-agent graph.
        audit.refresh_rule_evaluation()

        # No data is not health: the checked scopes without data are named by INSUFFICIENT_EVIDENCE,
        # and a Draft may not conclude health over them (the answer guard).
        invocations = [i for i in self._invocations(run_id) if not i.abandoned] if self._invocations else []
        empty = empty_scopes(invocations, run_id)

        # Controlled stops (protocol saturation, budgets, a model outage) release what finite
        # checks showed; an unparseable Draft does too when it has verified progress.
        # Deterministic: no model call. INSUFFICIENT_EVIDENCE only with verified progress; with an
        # empty snapshot the type says what happened.
        if agent.stop_reason:
            if facts:
                return fallback("INSUFFICIENT_EVIDENCE", facts=facts, coverage=coverage, empty=empty)
            stopped = "AGENT_UNAVAILABLE" if agent.stop_reason == MODEL_UNAVAILABLE else "NO_VERIFIED_PROGRESS"
            return fallback(stopped, coverage=coverage)
        if not agent.HasField("draft"):
            # A missing or unparseable Draft is no validation failure: nothing was guarded. What
            # the verified progress shows is released, else the agent made no verified progress.
            if facts:
                return fallback("INSUFFICIENT_EVIDENCE", facts=facts, coverage=coverage, empty=empty)
            return fallback("NO_VERIFIED_PROGRESS", coverage=coverage)
        draft = message_to_model(agent.draft, Draft)

        if draft.conclusion is None:
            if not agent.tool_call_ids and draft.missing_context:
                return fallback("MISSING_REQUIRED_CONTEXT", coverage=coverage)
            # Reference authenticity is still checked; nothing unverified is published.
            guard = self._guard(run_id, draft, deadline, is_active, audit, "guard")
            sources = self._verified_sources(run_id, draft, guard)
            if not facts and not sources:
                return fallback("NO_VERIFIED_PROGRESS", coverage=coverage)
            return fallback("INSUFFICIENT_EVIDENCE", facts=facts, sources=sources, coverage=coverage, empty=empty)

        guard = self._guard(run_id, draft, deadline, is_active, audit, "guard")
        if not guard.passed:
            audit.event("executor", "ENTER", "REPAIR", "one EvidenceRepair attempt",
                        typed=events.repair_enter(len(guard.violations)), kind="repair")
            repaired = self._call(
                "executor", self._clients.executor.RepairDraft,
                executor_pb2.RepairDraftRequest(
                    run_id=run_id, draft=agent.draft,
                    violations=[plain_to_message(v, single_react_pb2.GuardViolation) for v in guard.violations],
                ),
                deadline, is_active,
            )
            audit.prompt(repaired.prompt)
            audit.model_call(repaired.model_call)
            if not repaired.HasField("draft"):
                audit.react["repair"] = "no draft returned"
                audit.event("executor", "EXIT", "REPAIR_REJECTED", "no draft returned", typed=events.repair_exit(False),
                            kind="repair")
                return _citation_failed(guard, coverage)
            candidate = message_to_model(repaired.draft, Draft)
            changed = repair_changes_semantics(draft, candidate)
            if changed:
                audit.react["repair"] = f"rejected: {changed}"
                audit.event("executor", "EXIT", "REPAIR_REJECTED", "the repair changes what a reader sees",
                            typed=events.repair_exit(False), kind="repair")
                return _citation_failed(guard, coverage)
            audit.event("executor", "EXIT", "REPAIR", "structure-only repair", typed=events.repair_exit(True),
                        kind="repair")
            guard = self._guard(run_id, candidate, deadline, is_active, audit, "guard_after_repair")
            if not guard.passed:
                audit.react["repair"] = "still failing EvidenceGuard"
                return _citation_failed(guard, coverage)
            audit.react["repair"] = "accepted"
            draft = candidate

        # The conclusion is the direct answer, and its opening agrees with the
        # Analyses' evidence (deterministic; no model call when it does not).
        answer = check_answer(intent, draft, guard.snapshot,
                              self._failed_calls(run_id) if self._failed_calls else [], empty)
        audit.answer_findings(answer)
        audit.react["answer_guard"] = {"passed": not answer, "checks": sorted({f.check_id for f in answer})}
        if answer:
            audit.event("gateway", "INFO", "ANSWER_GUARD", answer[0].check_id,
                        typed=events.answer_guard_fail([f.check_id for f in answer]), kind="verdict")
            return fallback("SEMANTIC_UNSUPPORTED", sources=self._verified_sources(run_id, draft, guard), coverage=coverage)

        audit.event("verifier", "ENTER", "SEMANTIC_GUARD", typed=events.verifier_enter("SEMANTIC_GUARD"),
                    kind="verifier")
        review = self._call(
            "verifier", self._clients.verifier.ReviewDraft,
            verifier_pb2.ReviewDraftRequest(
                query=query,
                draft=plain_to_message(for_semantic_guard(draft), single_react_pb2.Draft),  # no tool call ids
                snapshot=plain_to_message(guard.snapshot, single_react_pb2.VerifiedSnapshot),
            ),
            deadline, is_active,
        )
        audit.prompt(review.prompt)
        audit.model_call(review.model_call)
        status = spec_value(enums_pb2.VerifierStatus.DESCRIPTOR, review.verifier_status)
        verdict = spec_value(enums_pb2.SemanticVerdict.DESCRIPTOR, review.verdict)
        # The reason is kept for the audit only; it never reaches a released answer.
        audit.react["semantic_guard"] = {"status": status, "verdict": verdict, "attempts": review.attempts,
                                         "reason": review.reason[:500]}
        audit.semantic_findings([message_to_model(f, SemanticFinding) for f in review.findings])
        audit.event("verifier", "EXIT", verdict or status or "FAILED",
                    typed=(events.semantic_exit(verdict) if status == "COMPLETED" and verdict
                           else events.verifier_failed("SEMANTIC_GUARD", status)),
                    kind="verdict")
        if status != "COMPLETED" or verdict is None:
            return fallback("SEMANTIC_UNAVAILABLE", coverage=coverage)
        if verdict == "UNSUPPORTED":
            return fallback("SEMANTIC_UNSUPPORTED", sources=self._verified_sources(run_id, draft, guard), coverage=coverage)
        return success(draft, coverage, guard.snapshot)
