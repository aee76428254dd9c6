"""The step/progress protocol: which progress records are accepted, what an invalid one is told,
when violations saturate, and what the ProgressSnapshot may contain."""

from __future__ import annotations

import json

import pytest

from services.executor.progress_protocol import (
    INVALID_PROGRESS_PROTOCOL,
    MAX_OBSERVED_FACTS,
    ProgressLedger,
)
from shared.core.contracts import EvidenceRef, RetrievalDetails, ToolInvocation

NO_HIT_LOGS = json.dumps({
    "tool": "query_logs", "service": "payment-service", "level": ["ERROR"], "contains": None,
    "start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z", "total_matches": 0, "returned": 0, "hits": [],
    "summary": "query_logs service=payment-service level=ERROR 2026-11-29T10:00:00Z..2026-11-29T11:00:00Z: 0 matching lines",
})
SUMMARY_REF = EvidenceRef(
    raw_path="summary",
    text="query_logs service=payment-service level=ERROR 2026-11-29T10:00:00Z..2026-11-29T11:00:00Z: 0 matching lines",
)


def invocation(invocation_id: int, tool_call_id: str, *, status: str = "NO_EVIDENCE", lifecycle: str = "READY",
               tool: str = "query_logs") -> ToolInvocation:
    ready = lifecycle == "READY"
    return ToolInvocation(
        invocation_id=invocation_id, run_id="run-1", tool_call_id=tool_call_id, tool_name=tool, lifecycle=lifecycle,
        evidence_status=status if ready else "ERROR", request={"tool": tool, "service": "payment-service"},
        agent_result=NO_HIT_LOGS if ready else None,
        retrieval_details=RetrievalDetails(evidence_refs=[SUMMARY_REF]) if ready else None,
        error="" if ready else "query_logs: backend failure",
    )


def record(step: int = 1, ids: list[str] | None = None, status: str = "NO_EVIDENCE", **overrides) -> dict:
    body = {"step": step, "tool_call_ids": ids if ids is not None else ["c1"],
            "observation_summary": "没有匹配的 ERROR 日志", "status": status}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not ...}


def ledger_with_step(*calls: ToolInvocation) -> ProgressLedger:
    ledger = ProgressLedger()
    step = ledger.begin_step()
    for call in calls or (invocation(1, "c1"),):
        ledger.add_call(step, call)
    return ledger


def test_a_complete_record_of_the_pending_step_is_accepted() -> None:
    ledger = ledger_with_step()
    assert ledger.pending_step == 1
    check = ledger.submit(json.dumps(record()))
    assert check.accepted and check.problems == []
    assert ledger.pending_step is None and ledger.violations == 0


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("not json", "not valid JSON"),
        ([1, 2], "must be a JSON object"),
        (record(observation_summary=...), "missing field(s): observation_summary"),
        (record(status=...), "missing field(s): status"),
        (record(step="1"), "step must be an integer"),
        (record(step=True), "step must be an integer"),
        (record(ids=[]), "non-empty list"),
        (record(ids=["  "]), "non-empty list"),
        (record(observation_summary="  "), "non-blank"),
        (record(status="DONE"), "status must be one of"),
        (record(extra="x"), "unknown field(s): extra"),
        (record(step=2), "not the step awaiting its record; record step 1"),
        (record(ids=["c1", "invented"]), "unknown tool_call_id 'invented'"),
        (record(status="EVIDENCE_FOUND"), "no call of step 1 found evidence"),
    ],
    ids=[
        "not-json", "not-object", "missing-summary", "missing-status", "step-string", "step-bool", "no-ids",
        "blank-id", "blank-summary", "unknown-status", "unknown-field", "wrong-step", "unknown-id",
        "status-overclaims",
    ],
)
def test_an_invalid_record_is_refused_with_the_problem_named(raw, problem) -> None:
    ledger = ledger_with_step()
    check = ledger.submit(raw)
    assert not check.accepted
    assert any(problem in p for p in check.problems), check.problems
    assert ledger.pending_step == 1  # still awaiting a valid record


def test_a_record_may_not_cite_a_call_of_another_step_nor_leave_one_out() -> None:
    ledger = ledger_with_step(invocation(1, "c1"))
    assert ledger.submit(record(ids=["c1"])).accepted
    step = ledger.begin_step()
    ledger.add_call(step, invocation(2, "c2"))
    ledger.add_call(step, invocation(3, "c3"))

    other_step = ledger.submit(record(step=2, ids=["c1", "c2", "c3"]))
    assert any("'c1' is a call of step 1, not of step 2" in p for p in other_step.problems)
    left_out = ledger.submit(record(step=2, ids=["c2"]))
    assert any("leaves out call(s) of step 2: c3" in p for p in left_out.problems)
    assert ledger.submit(record(step=2, ids=["c3", "c2"])).accepted


def test_recording_when_no_step_awaits_a_record_is_refused() -> None:
    ledger = ProgressLedger()
    check = ledger.submit(record())
    assert not check.accepted and "no step awaits" in check.problems[0]


def test_a_new_step_cannot_begin_before_the_pending_one_is_recorded() -> None:
    ledger = ledger_with_step()
    with pytest.raises(RuntimeError):
        ledger.begin_step()


def test_the_invalid_observation_says_what_is_expected_and_counts_violations() -> None:
    ledger = ledger_with_step(invocation(1, "c1"), invocation(2, "c2"))
    problems = ledger.submit(record(ids=["c1"])).problems
    ledger.violation()
    body = ledger.invalid_observation(problems)
    assert body["error"] == INVALID_PROGRESS_PROTOCOL
    assert body["expected"]["step"] == 1 and body["expected"]["tool_call_ids"] == ["c1", "c2"]
    assert body["violations"] == 1 and body["max_violations"] == 3
    assert any("c2" in p for p in body["problems"])


def test_violations_saturate_at_the_bound() -> None:
    ledger = ProgressLedger(max_violations=3)
    for expected in (False, False, True):
        ledger.violation()
        assert ledger.saturated is expected


def test_the_snapshot_holds_facts_of_verified_calls_of_recorded_steps_only() -> None:
    ledger = ledger_with_step(invocation(1, "c1"), invocation(2, "c2", lifecycle="ERROR"))
    assert ledger.snapshot().observed_facts == []  # nothing recorded yet
    assert ledger.submit(record(ids=["c1", "c2"])).accepted
    step = ledger.begin_step()
    ledger.add_call(step, invocation(3, "c3"))  # made, never recorded

    snapshot = ledger.snapshot()
    assert snapshot.completed_checks == 1  # the failed call is no completed check
    assert snapshot.observed_facts == [
        "payment-service 在 2026-11-29T10:00:00Z 至 2026-11-29T11:00:00Z 期间没有匹配的 ERROR 日志（0 条）。"
    ]


def test_the_snapshot_is_bounded() -> None:
    ledger = ProgressLedger()
    for n in range(1, 15):
        step = ledger.begin_step()
        call = invocation(n, f"c{n}")
        call = call.model_copy(update={"agent_result": NO_HIT_LOGS.replace("payment-service", f"svc-{n}")})
        ledger.add_call(step, call)
        assert ledger.submit(record(step=step, ids=[f"c{n}"])).accepted
    snapshot = ledger.snapshot()
    assert snapshot.completed_checks == 14
    assert len(snapshot.observed_facts) == MAX_OBSERVED_FACTS
