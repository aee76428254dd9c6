"""GatekeeperService: deterministic checks against the invocations persisted for the run.

Invocation contents are always read from the store; the caller only names the run (and sends the
executor output or the Draft to check). Only the current run's invocations are loaded, never an
abandoned one (a lost executor attempt's); for a cited id (or tool call id) the run does
not have, the checks ask the store once whether another run has it, and for a cited invocation id
whether it is an abandoned one of this run — ids only, never content — so that such a citation is
reported as belonging to another run, or to an abandoned attempt.
"""

from __future__ import annotations

import grpc
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

from attest.common.v1 import enums_pb2, executor_contract_pb2, gatekeeper_types_pb2, single_react_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from services.gatekeeper.engine import check_executor_output
from services.gatekeeper.evidence_guard import guard_draft
from services.gatekeeper.rule_catalog import RuleCatalog
from shared.db.invocation_store import InvocationStore
from shared.errors import InvalidInput, Reason
from shared.proto_convert import enum_member, message_to_plain, plain_to_message

MAX_OUTPUT_CHARS = 2 * 1024 * 1024
FAILED_RULES = "attest.gatekeeper.failed_rules"


class GatekeeperServicer(gatekeeper_pb2_grpc.GatekeeperServiceServicer):
    def __init__(self, store: InvocationStore, catalog: RuleCatalog,
                 meter_provider: MeterProvider | None = None) -> None:
        self._store = store
        self._catalog = catalog
        self._tracer = trace.get_tracer("attest.gatekeeper")
        meter = (meter_provider or NoOpMeterProvider()).get_meter("attest.gatekeeper")
        self._failed_rules = meter.create_counter(
            FAILED_RULES, unit="{rule}", description="Gatekeeper rule failures, by rule id"
        )

    def CheckEvidence(
        self, request: gatekeeper_pb2.CheckEvidenceRequest, context: grpc.ServicerContext
    ) -> gatekeeper_pb2.CheckEvidenceResponse:
        if not request.run_id:
            raise InvalidInput("run_id is required", reason=Reason.FIELD_REQUIRED, field="run_id")
        if len(request.executor_output_text) > MAX_OUTPUT_CHARS:
            raise InvalidInput(f"executor_output_text exceeds {MAX_OUTPUT_CHARS} characters", reason=Reason.TEXT_TOO_LONG,
                               field="executor_output_text", metadata={"limit": MAX_OUTPUT_CHARS})
        invocations = self._store.list_for_run(request.run_id)
        with self._tracer.start_as_current_span("gatekeeper.rules") as span:
            check = check_executor_output(
                request.run_id, request.executor_output_text, invocations, self._catalog,
                other_run_ids=lambda ids: self._store.other_run_invocation_ids(request.run_id, ids),
                abandoned_ids=lambda ids: self._store.abandoned_invocation_ids(request.run_id, ids),
            )
            span.set_attribute("attest.run_id", request.run_id)
            span.set_attribute("attest.parse_status", check.parse_status)
            span.set_attribute("attest.route", check.route)
            if check.verdict_ceiling:
                span.set_attribute("attest.verdict_ceiling", check.verdict_ceiling)
            if check.gatekeeper_result:
                span.set_attribute("attest.failed_rules", check.gatekeeper_result.failed_rules)
                for rule_id in check.gatekeeper_result.failed_rules:
                    self._failed_rules.add(1, {"rule_id": rule_id})
        response = gatekeeper_pb2.CheckEvidenceResponse(
            parse_status=enum_member(enums_pb2.ParseStatus, check.parse_status),
            route=enum_member(enums_pb2.GatekeeperRoute, check.route),
            verdict_ceiling=enum_member(enums_pb2.Verdict, check.verdict_ceiling),
            verified_evidence=[
                plain_to_message(item, gatekeeper_types_pb2.VerifiedEvidence)
                for item in check.verified_evidence
            ],
        )
        if check.gatekeeper_result is not None:
            response.gatekeeper_result.CopyFrom(
                plain_to_message(check.gatekeeper_result, gatekeeper_types_pb2.GatekeeperResult)
            )
        if check.verified_executor_output is not None:
            response.verified_executor_output.CopyFrom(
                plain_to_message(check.verified_executor_output, executor_contract_pb2.ExecutorEvidenceV2)
            )
        return response

    def GuardEvidence(
        self, request: gatekeeper_pb2.GuardEvidenceRequest, context: grpc.ServicerContext
    ) -> gatekeeper_pb2.GuardEvidenceResponse:
        if not request.run_id:
            raise InvalidInput("run_id is required", reason=Reason.FIELD_REQUIRED, field="run_id")
        if not request.HasField("draft"):
            raise InvalidInput("draft is required", reason=Reason.FIELD_REQUIRED, field="draft")
        invocations = self._store.list_for_run(request.run_id)
        with self._tracer.start_as_current_span("gatekeeper.evidence_guard") as span:
            # The Draft goes in as its plain JSON: the guard validates it and never raises.
            result = guard_draft(
                request.run_id, message_to_plain(request.draft), invocations,
                other_run_tool_call_ids=lambda ids: self._store.other_run_tool_call_ids(request.run_id, ids),
            )
            span.set_attribute("attest.run_id", request.run_id)
            span.set_attribute("attest.guard.passed", result.passed)
            span.set_attribute("attest.guard.violations", sorted({v.code for v in result.violations}))
            span.set_attribute("attest.guard.excluded_count", len(result.excluded_tool_call_ids))
        return gatekeeper_pb2.GuardEvidenceResponse(
            result=plain_to_message(result, single_react_pb2.EvidenceGuardResult)
        )

    def ListRules(
        self, request: gatekeeper_pb2.ListRulesRequest, context: grpc.ServicerContext
    ) -> gatekeeper_pb2.ListRulesResponse:
        return gatekeeper_pb2.ListRulesResponse(
            rule_set_version=self._catalog.rule_set_version,
            rules=[plain_to_message(rule, gatekeeper_types_pb2.RuleMetadata) for rule in self._catalog.enabled_rules()],
        )
