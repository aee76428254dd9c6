"""A follow-up's evidence is its own: the gatekeeper checks a run's citations
against that run's persisted invocations only, so a follow-up that cites the previous run's tool
call, in the same session and with the very same text, is refused."""

from __future__ import annotations

from services.gatekeeper.engine import check_executor_output
from shared.core.contracts import EvidenceRef
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore

TEXT = "2026-11-30T02:35:00Z zz-ledger-7 memory_usage=91%"


def _output(invocation_id: int) -> dict:
    binding = {"source_type": "tool", "tool_name": "query_metrics", "source_invocation_id": invocation_id,
               "raw_path": "series[0].points[3]", "evidence_excerpt": "memory_usage=91%"}
    return {"answer_version": "executor_evidence_v2", "hypotheses": [], "recommended_actions": [], "missing_info": [],
            "claims": [{"claim_id": "c1", "claim_type": "symptom", "claim_text": "zz-ledger-7 memory 91%",
                        "support_level": "direct", "evidence_bindings": [binding]}]}


def test_a_follow_up_cannot_cite_the_previous_runs_invocation(tmp_path):
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    factory = make_session_factory(make_engine(url))
    runs, invocations = RunStore(factory), InvocationStore(factory)
    session_id, before = runs.start_run(None, "zz-ledger-7 内存高吗", "MULTI_AGENT")
    _, follow_up = runs.start_run(session_id, "那再往前看一小时呢", "MULTI_AGENT")
    ids = {}
    for run_id in (before, follow_up):
        ids[run_id] = invocations.begin(run_id, "call-1", "query_metrics", 0, {"service": "zz-ledger-7"})
        invocations.complete(ids[run_id], evidence_status="EVIDENCE_FOUND", agent_result=TEXT,
                             evidence_refs=[EvidenceRef(raw_path="series[0].points[3]", text=TEXT, source="prometheus")])

    own = check_executor_output(follow_up, _output(ids[follow_up]), invocations.list_for_run(follow_up))
    assert own.gatekeeper_result.status == "pass" and own.verified_executor_output.claims

    earlier = check_executor_output(follow_up, _output(ids[before]), invocations.list_for_run(follow_up))
    assert "evidence.invocation_ref" in earlier.gatekeeper_result.failed_rules
    assert earlier.verdict_ceiling != "PASS" and not earlier.verified_executor_output.claims
