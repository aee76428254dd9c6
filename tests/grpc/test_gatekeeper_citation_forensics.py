"""GatekeeperService's servicer called in process (grpcio-testing), with invocations of two runs in a
migrated SQLite store: the servicer loads only the current run's invocations, yet a citation of
the other run's is reported as belonging to another run (CheckEvidence and GuardEvidence), never
with the other run's content; verified evidence carries the facts of its ref over the wire; unknown
fields of the executor output are audit warnings."""

from __future__ import annotations

import json

import pytest

from attest.common.v1 import enums_pb2, single_react_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2
from services.gatekeeper.rule_catalog import load_rule_catalog
from services.gatekeeper.servicer import GatekeeperServicer
from shared.core import guard_violations as codes
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.grpc.test_gatekeeper_guard_evidence import _analysis, _draft, _persist
from tests.unit.test_evidence_guard import TIMEOUT_LINE, logs_invocation, metrics_invocation


@pytest.fixture(scope="module")
def gatekeeper(tmp_path_factory, in_process):
    url = f"sqlite:///{tmp_path_factory.mktemp('forensics') / 'attest.db'}"
    upgrade(url)
    sessions = make_session_factory(make_engine(url))
    runs, store = RunStore(sessions), InvocationStore(sessions)
    session_id = runs.create_session("forensics-grpc")
    current = runs.create_run(session_id, "why is payment-service slow?", "MULTI_AGENT")
    other = runs.create_run(session_id, "another question", "MULTI_AGENT")
    _persist(store, current, logs_invocation(0, "call-logs", [TIMEOUT_LINE]))
    _persist(store, current, metrics_invocation(0, "call-cpu", [41.0, 63.5, 92.0]))
    _persist(store, other, logs_invocation(0, "call-foreign", ["FOREIGN-MARKER connection refused"]))
    ids = {inv.tool_call_id: inv.invocation_id for run in (current, other) for inv in store.list_for_run(run)}

    servicer = GatekeeperServicer(store, load_rule_catalog())
    return in_process("gatekeeper", servicer), current, ids


def _binding(tool, invocation_id, raw_path, excerpt, **extra):
    return {"source_type": "tool", "tool_name": tool, "source_invocation_id": invocation_id, "raw_path": raw_path,
            "evidence_excerpt": excerpt, **extra}


def _output(*claims, **extra) -> str:
    return json.dumps({"answer_version": "executor_evidence_v2", "claims": list(claims), "hypotheses": [],
                       "recommended_actions": [], "missing_info": [], **extra}, ensure_ascii=False)


def _claim(claim_id, *bindings, **extra):
    return {"claim_id": claim_id, "claim_type": "symptom", "claim_text": "payment-service CPU 92%",
            "support_level": "direct", "evidence_bindings": list(bindings), **extra}


def _check(stub, run_id, text) -> gatekeeper_pb2.CheckEvidenceResponse:
    return stub.CheckEvidence(gatekeeper_pb2.CheckEvidenceRequest(run_id=run_id, executor_output_text=text), timeout=10)


def test_check_evidence_reports_another_runs_invocation_as_such(gatekeeper):
    stub, run_id, ids = gatekeeper
    foreign = ids["call-foreign"]
    response = _check(stub, run_id, _output(
        _claim("c1", _binding("query_logs", foreign, "hits[0]", "connection refused")),
        _claim("c2", _binding("query_logs", 987_654, "hits[0]", "connection refused")),
    ))
    errors = list(response.gatekeeper_result.errors)
    assert f"claims[0].evidence_bindings[0]: evidence.invocation_ref: invocation {foreign} belongs to another run" in errors
    assert f"claims[1].evidence_bindings[0]: evidence.invocation_ref: invocation 987654 does not exist in run {run_id!r}" in errors
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.verdict_ceiling) == "REJECT"
    assert spec_value(enums_pb2.GatekeeperRoute.DESCRIPTOR, response.route) == "PRE_VERIFICATION_FALLBACK"
    assert len(response.verified_evidence) == 0 and "FOREIGN-MARKER" not in str(response)


def test_check_evidence_passes_facts_and_warns_of_unknown_fields(gatekeeper):
    stub, run_id, ids = gatekeeper
    response = _check(stub, run_id, _output(
        _claim("c1", _binding("query_metrics", ids["call-cpu"], "series[0].points[2]", "cpu_usage=92.0%", weight=2),
               confidence=0.9),
        model_notes="…",
    ))
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.verdict_ceiling) == "PASS", response.gatekeeper_result.errors
    # By position only; the names travel escaped in the persisted values, never to a verifier.
    assert list(response.gatekeeper_result.warnings) == [
        "output.keys[5]: unknown field ignored",
        "claims[0].keys[5]: unknown field ignored",
        "claims[0].evidence_bindings[0].keys[5]: unknown field ignored",
    ]
    assert [(v.at, v.value) for v in response.gatekeeper_result.executor_values] == [
        ("output.keys[5]", "'model_notes'"), ("claims[0].keys[5]", "'confidence'"),
        ("claims[0].evidence_bindings[0].keys[5]", "'weight'"),
    ]
    assert spec_value(enums_pb2.GatekeeperStatus.DESCRIPTOR, response.gatekeeper_result.status) == "warn"
    evidence, = response.verified_evidence
    facts = evidence.facts
    assert (facts.kind, facts.subject, facts.metric, facts.at) == ("metric_point", "payment-service", "cpu_usage", "2026-11-29T10:32:00Z")
    assert [(v.name, v.value, v.unit, v.at) for v in facts.values] == [("value", 92.0, "%", "2026-11-29T10:32:00Z")]


def _guard(stub, run_id, draft) -> single_react_pb2.EvidenceGuardResult:
    return stub.GuardEvidence(gatekeeper_pb2.GuardEvidenceRequest(run_id=run_id, draft=draft), timeout=10).result


def test_guard_evidence_reports_another_runs_tool_call_as_other_run(gatekeeper):
    stub, run_id, _ = gatekeeper
    result = _guard(stub, run_id, _draft(_analysis("a1", "NORMAL", "upstream timeout", "call-logs", "call-foreign", "call-made-up")))
    assert not result.passed
    assert [(v.code, v.tool_call_id) for v in result.violations] == [
        (codes.TOOL_REF_OTHER_RUN, "call-foreign"), (codes.TOOL_REF_NOT_FOUND, "call-made-up")]
    assert "FOREIGN-MARKER" not in str(result)


def test_guard_evidence_snapshot_carries_facts(gatekeeper):
    stub, run_id, _ = gatekeeper
    result = _guard(stub, run_id, _draft(_analysis("a1", "NORMAL", "upstream timeout calling db-primary", "call-logs")))
    assert result.passed, result.violations
    evidence, = result.snapshot.analyses[0].evidence
    assert [(f.kind, f.subject) for f in evidence.facts] == [("log_scope", "payment-service"), ("log_line", "payment-service")]
    assert evidence.facts[0].level == "ERROR" and evidence.facts[0].item_count == 1
