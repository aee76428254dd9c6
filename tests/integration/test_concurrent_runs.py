"""Many diagnoses at once: every run keeps both self_evaluation channels, written concurrently."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc

pytestmark = pytest.mark.integration
SERVICES = ["payment-service", "order-service", "checkout-api", "inventory-service", "user-service"]


def test_fifty_concurrent_runs_keep_both_channels(cluster, auth_metadata, run_store):
    with grpc.insecure_channel(cluster.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)

        def diagnose(i: int) -> gateway_pb2.DiagnoseResponse:
            query = f"{SERVICES[i % len(SERVICES)]} 最近一小时有什么异常？"
            return stub.Diagnose(gateway_pb2.DiagnoseRequest(query=query), timeout=180, metadata=auth_metadata)

        with ThreadPoolExecutor(max_workers=16) as pool:
            responses = list(pool.map(diagnose, range(50)))

    assert len({r.run_id for r in responses}) == 50
    for response in responses:
        run = run_store.get_run(response.run_id)
        channels = run["self_evaluation"]
        assert {"rule_evaluation", "verifier_evaluation"} <= set(channels), response.run_id
        assert channels["rule_evaluation"]["evidence_calls"] > 0
        assert channels["verifier_evaluation"]["prompt_audit"]["prompts"]
        assert run["status"] in {"COMPLETED", "FALLBACK"}
