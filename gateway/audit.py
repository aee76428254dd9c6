"""What one run leaves behind: orchestration events, progress, and `verifier_evaluation`.

`verifier_evaluation` holds the verified projection, gatekeeper audit, claim checks, verdicts,
prompt audit and a compact composer output. It never holds raw executor text or the complete
tool_trace_summary, and on a fallback path it never holds an invented verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from attest.common.v1 import audit_pb2
from attest.gateway.v1 import gateway_pb2
from gateway.clients import ReportedPrompts
from gateway.progress_events import PROGRESS_KEY, Typed, stored_form, to_progress_event
from gateway.rule_evaluation import evaluate_evidence
from shared.core.contracts import (
    ComposerOutput,
    EffectiveVerdict,
    ExecutorEvidenceV2,
    GatekeeperResult,
    PromptAudit,
    PromptRef,
    ServiceCoverage,
    VerifiedEvidence,
    VerifierOutput,
)
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore

log = logging.getLogger(__name__)

PROMPT_AUDIT_VERSION = "chat-prompts/1"
TRACEABILITY_VERSION = "verified-evidence/1"
MAX_VERIFIED_EVIDENCE = 200
MAX_MATCHED_TEXT = 500
MAX_COMPOSER_ANSWER = 4000
# The roles whose prompts are audited. A role the run never reached is named with the prompts it
# reported for its configured engine (`DescribePrompts`, gateway/clients.py: PromptDescriptions);
# never with a guess.
AUDITED_ROLES: tuple[str, ...] = ("planner", "executor", "verifier", "composer")
UNKNOWN_PROMPT = "unknown"  # the role could not be asked which prompts it uses
UNUSED_PROMPT = "unused"  # the run's mode does not call the role (single-ReAct: planner, composer)
NO_VERSION = "-"

DescribedPrompts = Callable[[], ReportedPrompts]
# The described prompts of the run being served. The servicer sets them around `graph.run`, which
# builds the RunAudit (`described_prompts_for_run`); a RunAudit built outside one names every role
# it did not hear from `unknown`.
_RUN_PROMPTS: ContextVar[DescribedPrompts | None] = ContextVar("attest_run_prompts", default=None)


@contextmanager
def described_prompts_for_run(described: DescribedPrompts) -> Iterator[None]:
    token = _RUN_PROMPTS.set(described)
    try:
        yield
    finally:
        _RUN_PROMPTS.reset(token)


def audited_prompts(described: ReportedPrompts, reported: list[PromptRef]) -> list[PromptRef]:
    """Every audited role's prompts: what it described for the run's mode (or `unknown` /
    `unused`), then what the run's calls reported. A reported prompt replaces the described one of
    the same role and name; a role that reports a prompt it did not describe (its configuration
    changed) is named by its reports alone."""
    entries: list[PromptRef] = []
    for role in AUDITED_ROLES:
        listed = described.get(role)
        if listed is None or not listed:
            entries.append(PromptRef(role=role, name=UNKNOWN_PROMPT if listed is None else UNUSED_PROMPT,
                                     version=NO_VERSION))
        else:
            entries.extend(listed)
    for role in dict.fromkeys(ref.role for ref in reported):
        used = {ref.name: ref for ref in reported if ref.role == role}  # the last report of a name wins
        known = {entry.name for entry in entries if entry.role == role and entry.version != NO_VERSION}
        if known and set(used) <= known:
            entries = [used.get(entry.name, entry) if entry.role == role else entry for entry in entries]
            continue
        at = next((i for i, entry in enumerate(entries) if entry.role == role), len(entries))
        entries = [entry for entry in entries if entry.role != role]
        entries[at:at] = used.values()
    return entries

# Where a run's ProgressEvents go as they happen (DiagnoseStream's queue; nowhere for Diagnose).
ProgressSink = Callable[[gateway_pb2.ProgressEvent], None]


# Verifications that keep a claim out of the confirmed facts.
_CUT_BY_VERIFIER = {"unsupported", "external_unknown", "contradicted", "overstated"}


class RunAudit:
    def __init__(self, runs: RunStore, run_id: str, emit: ProgressSink, *,
                 invocations: InvocationStore | None = None, background: Executor | None = None,
                 described_prompts: DescribedPrompts | None = None, new_run: bool = False) -> None:
        self._runs = runs
        self.run_id = run_id
        self._emit = emit
        self._invocations = invocations
        self._background = background
        self._pending: list[Future[None]] = []
        self._unwritten: list[dict[str, Any]] = []  # events not yet in the orchestration log
        self._final_evaluation: dict[str, Any] | None = None  # verifier_evaluation, written by finish_run
        # Known after the first write (the audit is the run's writer); a run just created has none.
        self._last_seq: int | None = 0 if new_run else None
        self.rounds = 0
        self.parse_status: str | None = None
        self.verifier_status: str | None = None
        self.verdict_ceiling: str | None = None
        # What the roles say they use for this run's mode, read when the audit is written (the
        # question runs beside the diagnosis), and the prompts the run's calls reported.
        self._described = described_prompts if described_prompts is not None else _RUN_PROMPTS.get()
        self._described_result: ReportedPrompts | None = None
        self._reported: list[PromptRef] = []
        self._gatekeeper: GatekeeperResult | None = None
        self._verified_output: ExecutorEvidenceV2 | None = None
        self._verified_evidence: list[VerifiedEvidence] = []
        self._verifier_output: VerifierOutput | None = None
        self._effective: EffectiveVerdict | None = None
        self._composer: ComposerOutput | None = None
        # Single-ReAct mode: what the guards decided (codes and statuses, never Draft text).
        self.react: dict[str, Any] = {}
        # The evidence retry: how round 1 was merged into round 0, or how it failed.
        self.retry: dict[str, Any] = {}
        self._guard_violations: dict[str, list[Any]] = {}
        self._semantic_findings: list[Any] = []
        self._answer_findings: list[Any] = []
        # Per role: which model answered and what its calls cost, summed over the run's calls.
        self._model_calls: dict[str, dict[str, Any]] = {}
        # Which named services were checked (the first round's resolution), and whether the
        # verdict was capped because some were not.
        self.service_coverage: ServiceCoverage | None = None
        self._coverage_cap: dict[str, str] | None = None
        self._failed_call_cap: dict[str, Any] | None = None
        self._empty_scope_cap: dict[str, Any] | None = None

    # -- collection ----------------------------------------------------------------------------

    def event(self, node: str, phase: str, status: str = "", reason: str = "", *, typed: Typed, kind: str = "",
              round_: int | None = None, payload: dict[str, Any] | None = None) -> None:
        """Log a node's entry, exit or note, and stream it to the client (every event is
        both, with the same seq). `kind` is today's kind string where one was sent before; the
        typed kind's name otherwise.

        Events are written in batches: an ENTER (the graph is about to wait on a downstream
        service) writes it with everything before it, and the run's last write
        (`finish_run`) writes the rest. A run whose gateway dies mid-call
        therefore still shows which node it was waiting on. The audit is the run's only writer
        of events: it numbers them itself, and (unless the run is new) its first event is
        written at once to learn where the run's log starts."""
        round_number = self.rounds - 1 if round_ is None else round_
        message = f"{node} {phase.lower()} {status}".strip() + (f": {reason}" if reason else "")
        record: dict[str, Any] = {
            "node": node, "phase": phase, "status": status, "reason": reason, "created_at": datetime.now(UTC),
            "payload": {"round": round_number, **(payload or {}),
                        PROGRESS_KEY: stored_form(typed, node=node, phase=phase, kind=kind, message=message)},
        }
        if self._last_seq is None:
            self._unwritten.append(record)
            self.flush_events()
        else:
            self._last_seq += 1
            record["seq"] = self._last_seq
            self._unwritten.append(record)
            if phase == "ENTER":
                self.flush_events()
        self._emit(to_progress_event(record))

    def flush_events(self) -> None:
        if self._unwritten:
            batch, self._unwritten = self._unwritten, []
            seqs = self._runs.record_events(self.run_id, batch)
            for record, seq in zip(batch, seqs, strict=True):
                record["seq"] = seq
            self._last_seq = seqs[-1]

    def prompt(self, ref: audit_pb2.PromptRef) -> None:
        if ref.role:
            self._reported.append(PromptRef(role=ref.role, name=ref.name, version=ref.version))

    def model_call(self, info: audit_pb2.ModelCallInfo) -> None:
        """Record one role call's model use: provider, model, attempts and token usage (summed
        per role over the run, e.g. the executor's rounds). Names and counts only, never text."""
        if not info.role:
            return
        entry = self._model_calls.setdefault(info.role, {
            "provider": info.provider, "model": info.model, "calls": 0, "attempts": 0,
            "token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        })
        entry["provider"], entry["model"] = info.provider or entry["provider"], info.model or entry["model"]
        entry["calls"] += 1
        entry["attempts"] += info.attempts
        usage = entry["token_usage"]
        usage["prompt_tokens"] += info.token_usage.prompt_tokens
        usage["completion_tokens"] += info.token_usage.completion_tokens
        usage["total_tokens"] += info.token_usage.total_tokens

    def model_calls(self) -> dict[str, dict[str, Any]]:
        return {role: {**entry, "token_usage": dict(entry["token_usage"])} for role, entry in self._model_calls.items()}

    def gatekeeper(self, result: GatekeeperResult, ceiling: str | None, verified_output: ExecutorEvidenceV2,
                   verified_evidence: list[VerifiedEvidence]) -> None:
        self._gatekeeper = result
        self.verdict_ceiling = ceiling
        self._verified_output = verified_output
        self._verified_evidence = verified_evidence
        # A new round's verdict must come from that round's verifier, never a stale one.
        self._verifier_output = None
        self._effective = None

    def verifier(self, output: VerifierOutput, effective: EffectiveVerdict) -> None:
        self._verifier_output = output
        self._effective = effective

    # -- the evidence retry ---------------------------------------------------------------------

    _ROUND_FIELDS = ("parse_status", "verifier_status", "verdict_ceiling", "_gatekeeper", "_verified_output",
                     "_verified_evidence", "_verifier_output", "_effective")

    def round_state(self) -> dict[str, Any]:
        """What a round leaves in the audit: kept before the retry round, restored if it fails."""
        return {name: getattr(self, name) for name in self._ROUND_FIELDS}

    def retry_failed(self, state: dict[str, Any], *, edge: str, reason: str, round_: int = 1) -> None:
        """The retry round ended without a verdict: round 0's verified result is the answer, and the
        audit says so — round 0's verdict, checks and projection, round 1's failure beside them."""
        round_gatekeeper = self._gatekeeper
        for name, value in state.items():
            setattr(self, name, value)
        failure: dict[str, Any] = {"round": round_, "edge": edge, "reason": reason[:500],
                                   "answer_rests_on": "round 0"}
        if round_gatekeeper is not None and round_gatekeeper is not state.get("_gatekeeper"):
            failure["gatekeeper_result"] = round_gatekeeper.model_dump()
        self.retry["round_failure"] = failure

    def rounds_merged(self, output: ExecutorEvidenceV2, evidence: list[VerifiedEvidence], verifier: VerifierOutput,
                      effective: EffectiveVerdict, summary: dict[str, Any]) -> None:
        """The answer rests on the union of both rounds: the audit holds that union."""
        self._verified_output = output
        self._verified_evidence = evidence
        self._verifier_output = verifier
        self._effective = effective
        self.retry["merge"] = summary

    def composer(self, output: ComposerOutput) -> None:
        self._composer = output

    def coverage(self, coverage: ServiceCoverage) -> None:
        """The question's services as the executor resolved them (kept from the first round)."""
        if self.service_coverage is None:
            self.service_coverage = coverage

    def cap_verdict(self, verdict: str, capped: str) -> None:
        """The effective verdict was lowered because named services were not checked."""
        self._coverage_cap = {"verdict_before_cap": verdict, "verdict": capped, "reason": "partial service coverage"}

    def cap_for_failed_calls(self, verdict: str, capped: str, invocation_ids: list[int]) -> None:
        """The effective verdict was lowered because evidence calls failed;
        applied after the coverage cap, so `verdict_before_cap` is the verdict it received."""
        self._failed_call_cap = {"verdict_before_cap": verdict, "verdict": capped,
                                 "reason": "failed evidence calls", "invocation_ids": list(invocation_ids)}

    def cap_for_empty_scopes(self, verdict: str, capped: str, invocation_ids: list[int]) -> None:
        """The effective verdict was lowered because a checked scope had no data (or logs of
        unknown level); applied after the other caps."""
        self._empty_scope_cap = {"verdict_before_cap": verdict, "verdict": capped,
                                 "reason": "checked scope without data", "invocation_ids": list(invocation_ids)}

    def guard(self, label: str, result: Any) -> None:
        self._guard_violations[label] = list(result.violations)
        self.react[label] = {
            "passed": result.passed,
            "violations": sorted({violation.code for violation in result.violations}),
            "excluded_tool_call_ids": len(result.excluded_tool_call_ids),
            "snapshot_analyses": len(result.snapshot.analyses),
        }

    # -- persistence ---------------------------------------------------------------------------

    def refresh_rule_evaluation(self) -> None:
        """Recompute `rule_evaluation` from the persisted invocations, off the graph's path.

        It is written concurrently with `verifier_evaluation`; the store's per-channel optimistic
        writes keep both intact.
        """
        invocations = self._invocations
        if invocations is None:
            return

        def write() -> None:
            value = evaluate_evidence(invocations.accounts_for_run(self.run_id))
            self._runs.write_channel(self.run_id, "rule_evaluation", value)

        if self._background is None:
            write()
        else:
            self._pending.append(self._background.submit(write))

    def wait_background(self) -> None:
        for future in self._pending:
            try:
                future.result()
            except Exception:  # an audit channel must never turn an answer into a failure
                log.exception("run %s: rule_evaluation write failed", self.run_id, extra={"run_id": self.run_id})
        self._pending.clear()

    def rejection_ledger(self) -> list[dict[str, Any]]:
        """Everything kept from the user, and why: every entry names its `stage`, the `item` (a
        claim id, a side-text item such as `hypotheses[0]`, a Draft section), the `check` (a
        gatekeeper rule, a guard violation code or a grounding check id) and a `detail`."""
        ledger: list[dict[str, Any]] = []
        if self.parse_status not in (None, "valid"):
            rule = f"parse_status:{self.parse_status}"
            ledger.append({"stage": "executor_contract", "item": "*", "claim_id": "*", "check": rule, "rule": rule,
                           "detail": "the executor output was not a legal executor_evidence_v2 contract"})
        verified_ids = {claim.claim_id for claim in self._verified_output.claims} if self._verified_output else set()
        if self._gatekeeper is not None:
            for binding in self._gatekeeper.checked_bindings:
                if binding.outcome == "failed":
                    ledger.append({
                        "stage": "gatekeeper", "item": binding.claim_id, "claim_id": binding.claim_id,
                        "binding_index": binding.binding_index, "check": binding.rule, "rule": binding.rule,
                        "severity": binding.severity, "detail": binding.detail,
                        "claim_removed": binding.claim_id not in verified_ids,
                    })
        if self._verifier_output is not None:
            for check in self._verifier_output.claim_checks:
                if check.verification in _CUT_BY_VERIFIER:
                    ledger.append({"stage": "verifier", "item": check.claim_id, "claim_id": check.claim_id,
                                   "check": check.check_id or check.verification, "rule": check.verification,
                                   "fabricated_key": check.fabricated_key, "detail": check.detail})
            for side in self._verifier_output.side_text_checks:
                if not side.shown or side.check_id:
                    ledger.append({"stage": "side_text", "item": side.item, "claim_id": "", "check": side.check_id,
                                   "rule": side.check_id, "shown": side.shown, "detail": side.detail})
        for label, violations in self._guard_violations.items():
            for violation in violations:
                ledger.append({"stage": "evidence_guard", "item": violation.analysis_id or violation.tool_call_id,
                               "claim_id": "", "check": violation.code, "rule": violation.code,
                               "attempt": label, "detail": violation.detail})
        for finding in self._answer_findings:
            ledger.append({"stage": "answer_guard", "item": finding.item, "claim_id": "",
                           "check": finding.check_id, "rule": finding.check_id, "detail": finding.detail})
        for finding in self._semantic_findings:
            ledger.append({"stage": "semantic_guard", "item": finding.item, "claim_id": "",
                           "check": finding.check_id, "rule": finding.check_id, "detail": finding.detail})
        return ledger

    def answer_findings(self, findings: list[Any]) -> None:
        """The single-ReAct answer guard's findings: check ids and reasons, no Draft text."""
        self._answer_findings = list(findings)

    def semantic_findings(self, findings: list[Any]) -> None:
        self._semantic_findings = list(findings)

    def prompt_audit(self) -> PromptAudit:
        if self._described_result is None:
            self._described_result = self._described() if self._described is not None else {}
        return PromptAudit(version=PROMPT_AUDIT_VERSION, prompts=audited_prompts(self._described_result, self._reported))

    def verifier_evaluation(self, failure_reason: str = "") -> dict[str, Any]:
        evaluation: dict[str, Any] = {
            "verifier_status": self.verifier_status or "SKIPPED",
            "executor_output_parse_status": self.parse_status,
            "rounds": self.rounds,
            "prompt_audit": self.prompt_audit().model_dump(),
            "model_calls": self.model_calls(),
            "traceability_version": TRACEABILITY_VERSION,
            "rejection_ledger": self.rejection_ledger(),
        }
        if failure_reason:
            evaluation["failure_reason"] = failure_reason
        if self.react:
            evaluation["single_react"] = dict(self.react)
        if self.retry:
            evaluation["evidence_retry"] = dict(self.retry)
        if self._gatekeeper is not None:
            evaluation["gatekeeper_result"] = self._gatekeeper.model_dump()
            evaluation["verdict_ceiling"] = self.verdict_ceiling
        if self._verified_output is not None:
            # Compatibility field: at most the verified projection, never raw executor output.
            verified_output = self._verified_output.model_dump()  # stored as JSON: one dump serves both keys
            evaluation["executor_structured_output"] = verified_output
            evaluation["verified_executor_output"] = verified_output
            evaluation["verified_evidence"] = [
                {**item.model_dump(), "matched_text": item.matched_text[:MAX_MATCHED_TEXT]}
                for item in self._verified_evidence[:MAX_VERIFIED_EVIDENCE]
            ]
        if self._verifier_output is not None and self._effective is not None:
            evaluation.update(
                model_verdict=self._verifier_output.verdict,
                effective_verdict=self._effective.effective_verdict,
                verdict=self._effective.effective_verdict,
                groundedness_score=self._effective.groundedness_score,
                critical_fact_count=self._effective.critical_fact_count,
                claim_checks=[check.model_dump() for check in self._verifier_output.claim_checks],
                facts_checked=[fact.model_dump() for fact in self._effective.facts_checked],
                rationale=self._verifier_output.rationale,
            )
        if self._coverage_cap is not None and "effective_verdict" in evaluation:
            evaluation.update(effective_verdict=self._coverage_cap["verdict"], verdict=self._coverage_cap["verdict"],
                              coverage_cap=dict(self._coverage_cap))
        if self._failed_call_cap is not None and "effective_verdict" in evaluation:
            evaluation.update(effective_verdict=self._failed_call_cap["verdict"],
                              verdict=self._failed_call_cap["verdict"], failed_call_cap=dict(self._failed_call_cap))
        if self._empty_scope_cap is not None and "effective_verdict" in evaluation:
            evaluation.update(effective_verdict=self._empty_scope_cap["verdict"],
                              verdict=self._empty_scope_cap["verdict"], empty_scope_cap=dict(self._empty_scope_cap))
        if self.service_coverage is not None:
            evaluation["service_coverage"] = self.service_coverage.model_dump()
        if self._composer is not None:
            evaluation["composer_output"] = {
                "template": self._composer.template,
                "used_fallback_template": self._composer.used_fallback_template,
                "fallback_reason": self._composer.fallback_reason,
                "answer": self._composer.answer[:MAX_COMPOSER_ANSWER],
                "sections": {name: len(lines) for name, lines in self._composer.sections.items()},
            }
        return evaluation

    def prepare_verifier_evaluation(self, failure_reason: str = "") -> None:
        """Settle the run's verifier_evaluation; `finish_run` writes it."""
        self._final_evaluation = self.verifier_evaluation(failure_reason)

    def finish_run(self, *, status: str, effective_verdict: str | None = None, fallback_type: str | None = None,
                   answer: str | None = None, channels: dict[str, dict[str, Any]] | None = None) -> None:
        """The run's last write, in one transaction: the events not yet written, the prepared
        verifier_evaluation and any other `channels`, and the outcome. If it fails, the events
        stay unwritten for the next `flush_events`."""
        if any("seq" not in record for record in self._unwritten):
            self.flush_events()  # not numbered yet: the store numbers them first
        written = dict(channels or {})
        if self._final_evaluation is not None:
            written["verifier_evaluation"] = self._final_evaluation
        batch = list(self._unwritten)
        self._runs.finish_run(self.run_id, status=status, effective_verdict=effective_verdict,
                              fallback_type=fallback_type, answer=answer, channels=written, events=batch)
        del self._unwritten[:len(batch)]
        if batch:
            self._last_seq = batch[-1]["seq"]
