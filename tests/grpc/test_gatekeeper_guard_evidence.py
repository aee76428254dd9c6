"""GatekeeperService.GuardEvidence over a real gRPC server on an ephemeral port, with the
invocations in a migrated SQLite store: the caller sends only the run id and the Draft; what a
tool call id means is read from the store."""

from __future__ import annotations

import grpc
import pytest

from attest.common.v1 import enums_pb2, single_react_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2
from services.gatekeeper.rule_catalog import load_rule_catalog
from services.gatekeeper.servicer import GatekeeperServicer
from shared.config import GatekeeperSettings
from shared.core import guard_violations as codes
from shared.core.contracts import EvidenceRef, ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.unit.test_evidence_guard import TIMEOUT_LINE, logs_invocation


def _persist(store: InvocationStore, run_id: str, template: ToolInvocation, *, complete: bool = True) -> None:
    invocation_id = store.begin(run_id, template.tool_call_id, template.tool_name, 0, template.request)
    if complete:
        store.complete(
            invocation_id,
            evidence_status=template.evidence_status,
            agent_result=template.agent_result,
            evidence_refs=[EvidenceRef.model_validate(ref.model_dump()) for ref in evidence_view(template).refs()],
        )


@pytest.fixture(scope="module")
def gatekeeper(tmp_path_factory, role_server):
    url = f"sqlite:///{tmp_path_factory.mktemp('guard') / 'attest.db'}"
    upgrade(url)
    sessions = make_session_factory(make_engine(url))
    runs, store = RunStore(sessions), InvocationStore(sessions)
    session_id = runs.create_session("guard-grpc")
    current = runs.create_run(session_id, "why is payment-service slow?", "SINGLE_REACT")
    other = runs.create_run(session_id, "another question", "SINGLE_REACT")
    _persist(store, current, logs_invocation(0, "call-logs", [TIMEOUT_LINE]))
    _persist(store, current, logs_invocation(0, "call-nohit", []))
    _persist(store, current, logs_invocation(0, "call-pending", [TIMEOUT_LINE]), complete=False)
    _persist(store, other, logs_invocation(0, "call-foreign", ["FOREIGN-MARKER refused"]))

    servicer = GatekeeperServicer(store, load_rule_catalog())
    with role_server("gatekeeper", servicer, GatekeeperSettings(port=0, max_workers=4, shutdown_grace_seconds=0.5)) as stub:
        yield stub, current


def _analysis(analysis_id: str, kind: str, text: str, *calls: str) -> single_react_pb2.Analysis:
    return single_react_pb2.Analysis(
        analysis_id=analysis_id, kind=enums_pb2.AnalysisKind.Value(f"ANALYSIS_KIND_{kind}") if kind else 0,
        text=text, tool_call_ids=list(calls),
    )


def _draft(*analyses, conclusion=True) -> single_react_pb2.Draft:
    draft = single_react_pb2.Draft(analyses=list(analyses))
    if conclusion:
        draft.conclusion.CopyFrom(single_react_pb2.Conclusion(text="db-primary 超时", analysis_refs=[a.analysis_id for a in analyses]))
    return draft


def _guard(stub, run_id, draft) -> single_react_pb2.EvidenceGuardResult:
    return stub.GuardEvidence(gatekeeper_pb2.GuardEvidenceRequest(run_id=run_id, draft=draft), timeout=10).result


def test_concluded_draft_with_genuine_calls_passes_with_its_snapshot(gatekeeper):
    stub, run_id = gatekeeper
    result = _guard(stub, run_id, _draft(
        _analysis("a1", "NORMAL", "upstream timeout calling db-primary", "call-logs"),
        _analysis("a2", "NEGATIVE_OBSERVATION", "没有其他 ERROR 日志", "call-nohit"),
    ))
    assert result.passed and list(result.violations) == []
    assert [group.analysis_id for group in result.snapshot.analyses] == ["a1", "a2"]
    found, none = (group.evidence[0] for group in result.snapshot.analyses)
    assert spec_value(enums_pb2.EvidenceStatus.DESCRIPTOR, found.evidence_status) == "EVIDENCE_FOUND"
    assert spec_value(enums_pb2.EvidenceStatus.DESCRIPTOR, none.evidence_status) == "NO_EVIDENCE"
    assert TIMEOUT_LINE in found.excerpt and "0 matching lines" in none.excerpt
    assert "call-" not in str(result.snapshot)


@pytest.mark.parametrize("call, code", [
    ("call-foreign", codes.TOOL_REF_OTHER_RUN),  # another run's call: reported as such, its content never read
    ("call-made-up", codes.TOOL_REF_NOT_FOUND),
    ("call-pending", codes.TOOL_REF_NOT_READY),
    ("call-nohit", codes.KIND_NORMAL_WITHOUT_EVIDENCE),
])
def test_concluded_draft_with_a_bad_reference_is_rejected(gatekeeper, call, code):
    stub, run_id = gatekeeper
    result = _guard(stub, run_id, _draft(_analysis("a1", "NORMAL", "upstream timeout", "call-logs", call)))
    assert not result.passed
    assert [(v.code, v.analysis_id, v.tool_call_id) for v in result.violations] == [(code, "a1", call)]
    assert len(result.snapshot.analyses) == 0
    assert "FOREIGN-MARKER" not in str(result)


def test_unspecified_kind_over_the_wire_is_an_unsupported_kind(gatekeeper):
    stub, run_id = gatekeeper
    result = _guard(stub, run_id, _draft(_analysis("a1", "", "upstream timeout", "call-logs")))
    assert not result.passed and [v.code for v in result.violations] == [codes.ANALYSIS_KIND_UNSUPPORTED]


def test_no_conclusion_draft_excludes_fabricated_and_cross_run_references(gatekeeper):
    stub, run_id = gatekeeper
    result = _guard(stub, run_id, _draft(
        _analysis("a1", "NORMAL", "upstream timeout", "call-foreign", "call-logs", "call-made-up"), conclusion=False,
    ))
    assert result.passed
    assert list(result.excluded_tool_call_ids) == ["call-foreign", "call-made-up"]
    evidence, = result.snapshot.analyses[0].evidence
    assert TIMEOUT_LINE in evidence.excerpt and "FOREIGN-MARKER" not in str(result)


def test_another_runs_id_sees_only_that_runs_invocations(gatekeeper):
    stub, _ = gatekeeper
    result = _guard(stub, "no-such-run", _draft(_analysis("a1", "NORMAL", "upstream timeout", "call-logs")))
    assert not result.passed and [v.code for v in result.violations] == [codes.TOOL_REF_OTHER_RUN]


@pytest.mark.parametrize("request_", [
    gatekeeper_pb2.GuardEvidenceRequest(draft=single_react_pb2.Draft()),
    gatekeeper_pb2.GuardEvidenceRequest(run_id="r"),
])
def test_missing_run_id_or_draft_is_invalid_argument(gatekeeper, request_):
    stub, _ = gatekeeper
    with pytest.raises(grpc.RpcError) as caught:
        stub.GuardEvidence(request_, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
