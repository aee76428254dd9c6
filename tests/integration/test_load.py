"""Load: many diagnoses at once through the six processes, then the audit store is
counted: every call answered (a typed fallback counts as an answer), every run finished and
persisted with all the tool invocations its executor reported, both self_evaluation channels kept.

Scaled down by default (120 diagnoses, 16 in flight) so `make test` stays quick on two cores;
`ATTEST_LOAD_FULL=1` runs the full size of the issue (1,000 diagnoses, 32 in flight).
"""

from __future__ import annotations

import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from sqlalchemy import select

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.models import OrchestrationEventRow, RunRow, ToolInvocationRow
from shared.proto_convert import spec_value

pytestmark = pytest.mark.integration

FULL = os.environ.get("ATTEST_LOAD_FULL", "") not in ("", "0")
DIAGNOSES, IN_FLIGHT = (1000, 32) if FULL else (120, 16)
# A mix that takes every common route: answered questions about several services, a question
# with no service in it (missing-context fallback), a single-ReAct one.
QUERIES = [
    ("payment-service 最近一小时 CPU 为什么这么高？", "MULTI_AGENT"),
    ("order-service 最近一小时有什么异常？", "MULTI_AGENT"),
    ("checkout-api 的错误率为什么上升了？", "MULTI_AGENT"),
    ("inventory-service 延迟高吗？", "MULTI_AGENT"),
    ("为什么这么慢？", "MULTI_AGENT"),
    ("payment-service 最近一小时 CPU 为什么这么高？", "SINGLE_REACT"),
]


def test_load_every_call_answered_and_every_run_persisted_whole(cluster, auth_metadata):
    failures: list[str] = []
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)

        def diagnose(i: int) -> gateway_pb2.DiagnoseResponse | None:
            query, mode = QUERIES[i % len(QUERIES)]
            try:
                return stub.Diagnose(
                    gateway_pb2.DiagnoseRequest(query=query, mode=enums_pb2.DiagnosisMode.Value(f"DIAGNOSIS_MODE_{mode}"),
                                                client_label=f"load-{i}"),
                    timeout=300, metadata=auth_metadata)
            except grpc.RpcError as exc:
                failures.append(f"call {i}: {exc.code().name}: {exc.details()}")
                return None

        with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
            responses = list(pool.map(diagnose, range(DIAGNOSES)))

    assert failures == [], f"{len(failures)} calls failed, first: {failures[:3]}"
    untyped = [r.run_id for r in responses if r.status == "FALLBACK" and not spec_value(
        enums_pb2.FallbackType.DESCRIPTOR, r.fallback_type)]
    assert untyped == [], "every fallback names its type"
    assert all(r.status in {"COMPLETED", "FALLBACK"} and r.answer for r in responses)
    run_ids = {r.run_id for r in responses}
    assert len(run_ids) == DIAGNOSES

    sessions = make_session_factory(make_engine(cluster.database_url))
    with sessions() as session:
        runs = {row.run_id: row for row in session.scalars(select(RunRow).where(RunRow.run_id.in_(run_ids)))}
        persisted: dict[str, set[int]] = defaultdict(set)
        for run_id, invocation_id in session.execute(
                select(ToolInvocationRow.run_id, ToolInvocationRow.invocation_id).where(
                    ToolInvocationRow.run_id.in_(run_ids))):
            persisted[run_id].add(invocation_id)
        reported: dict[str, set[int]] = defaultdict(set)
        for run_id, node, phase, payload in session.execute(
                select(OrchestrationEventRow.run_id, OrchestrationEventRow.node, OrchestrationEventRow.phase,
                       OrchestrationEventRow.payload).where(OrchestrationEventRow.run_id.in_(run_ids))):
            if node == "executor" and phase == "EXIT":
                reported[run_id].update((payload or {}).get("invocation_ids", []))

    assert set(runs) == run_ids, "every answered run is persisted"
    by_response = {r.run_id: r for r in responses}
    for run_id, row in runs.items():
        response = by_response[run_id]
        assert row.status == response.status and row.finished_at is not None, run_id
        assert (row.fallback_type or None) == spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type)
        assert row.answer == response.answer, run_id
        channels = row.self_evaluation or {}
        assert "verifier_evaluation" in channels, f"{run_id} lost verifier_evaluation"
        if persisted[run_id]:
            assert "rule_evaluation" in channels, f"{run_id} lost rule_evaluation"
            assert channels["rule_evaluation"]["evidence_calls"] > 0
        # Every invocation the executor reported exists as a row of this very run.
        assert reported[run_id] <= persisted[run_id], run_id
    answered_with_tools = [run_id for run_id in run_ids if persisted[run_id]]
    assert len(answered_with_tools) >= DIAGNOSES * 0.6, "most questions name a service and run tools"
