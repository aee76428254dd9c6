"""The metric instruments count what an operator would chart: diagnoses by outcome, hop latency,
and gatekeeper rule failures by rule id (read through an in-memory reader on the provider passed in)."""

from __future__ import annotations

import json

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from attest.gatekeeper.v1 import gatekeeper_pb2
from gateway.diagnosis_metrics import DIAGNOSES, HOP_DURATION, DiagnosisMetrics
from services.gatekeeper.rule_catalog import load_rule_catalog
from services.gatekeeper.servicer import FAILED_RULES, GatekeeperServicer
from tests.unit.test_gatekeeper_rules import RUN, binding, claim, invocations, output


def _points(reader: InMemoryMetricReader, name: str) -> list:
    data = reader.get_metrics_data()
    return [point for resource in data.resource_metrics for scope in resource.scope_metrics
            for metric in scope.metrics if metric.name == name for point in metric.data.data_points]


def test_diagnoses_are_counted_by_outcome_and_hops_timed_by_node():
    reader = InMemoryMetricReader()
    metrics = DiagnosisMetrics(MeterProvider(metric_readers=[reader]))
    metrics.diagnosis_finished(status="COMPLETED", mode="MULTI_AGENT", effective_verdict="PASS", fallback_type=None)
    metrics.diagnosis_finished(status="COMPLETED", mode="MULTI_AGENT", effective_verdict="PASS", fallback_type=None)
    metrics.diagnosis_finished(status="FALLBACK", mode="MULTI_AGENT", effective_verdict=None,
                               fallback_type="PRE_VERIFICATION")
    metrics.hop_finished("verifier", "UNAVAILABLE", 0.25)
    counts = {(p.attributes["effective_verdict"], p.attributes["fallback_type"]): p.value
              for p in _points(reader, DIAGNOSES)}
    assert counts == {("PASS", "NONE"): 2, ("NONE", "PRE_VERIFICATION"): 1}
    (hop,) = _points(reader, HOP_DURATION)
    assert dict(hop.attributes) == {"node": "verifier", "grpc_status": "UNAVAILABLE"}
    assert (hop.count, hop.sum) == (1, 0.25)


class _Store:
    def list_for_run(self, run_id):
        return invocations()


def test_gatekeeper_counts_each_failed_rule_by_id():
    reader = InMemoryMetricReader()
    servicer = GatekeeperServicer(_Store(), load_rule_catalog(), meter_provider=MeterProvider(metric_readers=[reader]))
    foreign = json.dumps(output(claim(evidence_bindings=[binding(source_invocation_ids=[12, 99])])))
    servicer.CheckEvidence(gatekeeper_pb2.CheckEvidenceRequest(run_id=RUN, executor_output_text=foreign), None)
    counts = {p.attributes["rule_id"]: p.value for p in _points(reader, FAILED_RULES)}
    assert counts.get("evidence.invocation_ref") == 1, counts


def test_gatekeeper_without_a_meter_provider_still_checks():
    servicer = GatekeeperServicer(_Store(), load_rule_catalog())
    passing = json.dumps(output(claim(evidence_bindings=[binding(source_invocation_ids=[12])])))
    servicer.CheckEvidence(gatekeeper_pb2.CheckEvidenceRequest(run_id=RUN, executor_output_text=passing), None)
