"""The retry of a lost executor replica's round, over real gRPC servers on ephemeral ports sharing
one migrated SQLite store: the retry of an ExecutePlan whose executor replica was lost.

- The executor, called directly: attempt 0 writes invocations; attempt 1 of the same (run, round)
  marks them abandoned before its own run; a stale attempt 0 (a replica only cut off) is refused
  and writes nothing; the gatekeeper refuses an output citing an abandoned invocation.
- The whole diagnosis through the gateway: the first ExecutePlan does its work and then its
  replica is lost (the call fails UNAVAILABLE); the run still ends with a verified answer, with
  exactly one REPLICA_LOST event, rule_evaluation counting the retry's calls only, and GetRun
  showing every invocation once, the lost attempt's flagged abandoned."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from attest.common.v1 import enums_pb2, evidence_pb2
from attest.executor.v1 import executor_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.__main__ import auth_interceptor
from gateway.__main__ import build_servicer as build_gateway
from services.composer.servicer import ComposerServicer, build_composer
from services.executor.estate import load_estate
from services.executor.service_catalogue import catalogue_of
from services.executor.servicer import ExecutorServicer, build_engine
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.registry import build_default_registry
from services.gatekeeper.rule_catalog import load_rule_catalog
from services.gatekeeper.servicer import GatekeeperServicer
from services.planner.servicer import PlannerServicer, build_planner
from services.verifier.__main__ import build_servicer as build_verifier
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from shared.config import (
    ComposerSettings,
    ExecutorSettings,
    GatekeeperSettings,
    GatewaySettings,
    ModelSettings,
    PlannerSettings,
    VerifierSettings,
)
from shared.core.embedded_planner import EmbeddedPlanner
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.proto_convert import plain_to_message, spec_value
from shared.server import build_server
from tests.grpc.conftest import DEMO_ANCHOR, REPO_ROOT

QUERY = "为什么 payment-service 的 CPU 这么高？"
CALL_TIMEOUT = 60


class LosingExecutor(ExecutorServicer):
    """The real executor, except that its first ExecutePlan or RunAgent is lost after it did its
    work (as when the replica is killed just before it answers): the gateway sees UNAVAILABLE."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attempts: list[tuple[str, int, int]] = []

    def _lose_first(self, name: str, round_: int, attempt: int, response: Any, context: Any) -> Any:
        self.attempts.append((name, round_, attempt))
        if len(self.attempts) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        return response

    def ExecutePlan(self, request, context):  # noqa: N802 - the gRPC method
        response = super().ExecutePlan(request, context)
        return self._lose_first("ExecutePlan", request.round, request.attempt, response, context)

    def RunAgent(self, request, context):  # noqa: N802 - the gRPC method
        response = super().RunAgent(request, context)
        return self._lose_first("RunAgent", 0, request.attempt, response, context)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('replicas') / 'attest.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="module")
def stores(store_url) -> Iterator[tuple[RunStore, InvocationStore]]:
    engine = make_engine(store_url)
    sessions = make_session_factory(engine)
    yield RunStore(sessions), InvocationStore(sessions)
    engine.dispose()


def _estate_backends(directory, anchor=None):
    url = f"sqlite:///{directory / 'estate.db'}"
    load_estate(url, REPO_ROOT / "demo" / "estate", anchor=anchor)
    return build_backends(ExecutorSettings(estate_database_url=url))


def _executor(store: InvocationStore, backends: Any, servicer_class: type = ExecutorServicer) -> ExecutorServicer:
    registry = build_default_registry(backends)
    return servicer_class(store, registry, build_engine(ModelSettings(), registry), catalogue=catalogue_of(backends))


class Cluster:
    """Role servers on ephemeral ports; `address(role)` of each."""

    def __init__(self) -> None:
        self._servers: dict[str, Any] = {}

    def serve(self, role: str, servicer: Any, settings: Any, pb2: Any, pb2_grpc: Any,
              interceptors: tuple[Any, ...] = ()) -> str:
        (service,) = pb2.DESCRIPTOR.services_by_name.values()
        add = getattr(pb2_grpc, f"add_{service.name}Servicer_to_server")
        running = build_server(service_name=role, settings=settings, extra_interceptors=interceptors,
                               register=lambda server: add(servicer, server), service_names=[service.full_name])
        self._servers[role] = running
        return f"127.0.0.1:{running.port}"

    def stop(self) -> None:
        for running in self._servers.values():
            running.stop(None)


@pytest.fixture(scope="module")
def executor_and_gatekeeper(tmp_path_factory, stores) -> Iterator[tuple[Any, Any]]:
    from attest.executor.v1 import executor_pb2_grpc
    from attest.gatekeeper.v1 import gatekeeper_pb2_grpc
    _, invocations = stores
    backends = _estate_backends(tmp_path_factory.mktemp("estate"), DEMO_ANCHOR)
    cluster = Cluster()
    executor = cluster.serve("executor", _executor(invocations, backends), ExecutorSettings(port=0),
                             executor_pb2, executor_pb2_grpc)
    gatekeeper = cluster.serve("gatekeeper", GatekeeperServicer(invocations, load_rule_catalog()),
                               GatekeeperSettings(port=0), gatekeeper_pb2, gatekeeper_pb2_grpc)
    channels = [grpc.insecure_channel(executor), grpc.insecure_channel(gatekeeper)]
    try:
        yield executor_pb2_grpc.ExecutorServiceStub(channels[0]), gatekeeper_pb2_grpc.GatekeeperServiceStub(channels[1])
    finally:
        for channel in channels:
            channel.close()
        cluster.stop()


def _execute(stub, run_id: str, attempt: int) -> executor_pb2.ExecutePlanResponse:
    plan = EmbeddedPlanner().plan(QUERY, DEMO_ANCHOR)
    return stub.ExecutePlan(executor_pb2.ExecutePlanRequest(
        run_id=run_id, query=QUERY, round=0, attempt=attempt, plan=plain_to_message(plan, evidence_pb2.Plan),
    ), timeout=CALL_TIMEOUT)


def test_attempt_one_abandons_attempt_zero_and_a_stale_attempt_zero_is_refused(executor_and_gatekeeper, stores):
    executor, gatekeeper = executor_and_gatekeeper
    runs, invocations = stores
    run_id = runs.create_run(runs.create_session("replicas"), QUERY, "MULTI_AGENT")
    lost = _execute(executor, run_id, attempt=0)
    assert lost.invocation_ids and spec_value(enums_pb2.ParseStatus.DESCRIPTOR, lost.parse_status) == "valid"
    retry = _execute(executor, run_id, attempt=1)
    assert retry.invocation_ids and not set(lost.invocation_ids) & set(retry.invocation_ids)
    assert [i.invocation_id for i in invocations.list_for_run(run_id)] == list(retry.invocation_ids)

    # The replica that ran attempt 0 was only cut off: it comes back and asks again.
    before = runs.get_run(run_id)
    with pytest.raises(grpc.RpcError) as stale:
        _execute(executor, run_id, attempt=0)
    assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"attempt 0 of run {run_id} round 0 is stale: attempt 1 was already started" in stale.value.details()
    assert runs.get_run(run_id) == before

    # The lost attempt's own output cites its invocations: the gatekeeper refuses every citation.
    check = gatekeeper.CheckEvidence(gatekeeper_pb2.CheckEvidenceRequest(
        run_id=run_id, executor_output_text=lost.output_text), timeout=CALL_TIMEOUT)
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, check.verdict_ceiling) == "REJECT"
    assert list(check.gatekeeper_result.failed_rules) == ["evidence.invocation_ref"]
    assert any(f"invocation {lost.invocation_ids[0]} belongs to an abandoned attempt" in error
               for error in check.gatekeeper_result.errors)
    assert len(check.verified_evidence) == 0
    # The retry's output, over the same store, passes.
    passed = gatekeeper.CheckEvidence(gatekeeper_pb2.CheckEvidenceRequest(
        run_id=run_id, executor_output_text=retry.output_text), timeout=CALL_TIMEOUT)
    assert list(passed.gatekeeper_result.failed_rules) == [] and len(passed.verified_evidence) > 0


def test_an_attempt_outside_the_one_retry_is_invalid(executor_and_gatekeeper, stores):
    executor, _ = executor_and_gatekeeper
    runs, invocations = stores
    run_id = runs.create_run(runs.create_session("replicas"), QUERY, "MULTI_AGENT")
    for attempt in (-1, 2):
        with pytest.raises(grpc.RpcError) as caught:
            _execute(executor, run_id, attempt=attempt)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert invocations.list_for_run(run_id) == []


@pytest.fixture()
def gateway(tmp_path, store_url, stores) -> Iterator[tuple[Any, LosingExecutor]]:
    """Planner, a losing executor, gatekeeper, verifier and composer (embedded engines) and the
    gateway, over one store; the demo estate anchored at now, as the gateway's planner reads it."""
    from attest.composer.v1 import composer_pb2, composer_pb2_grpc
    from attest.executor.v1 import executor_pb2_grpc
    from attest.gatekeeper.v1 import gatekeeper_pb2_grpc
    from attest.planner.v1 import planner_pb2, planner_pb2_grpc
    from attest.verifier.v1 import verifier_pb2, verifier_pb2_grpc
    _, invocations = stores
    executor = _executor(invocations, _estate_backends(tmp_path), LosingExecutor)
    cluster = Cluster()
    embedded = ModelSettings()
    addresses = {
        "planner_addr": cluster.serve("planner", PlannerServicer(build_planner(embedded)), PlannerSettings(port=0),
                                      planner_pb2, planner_pb2_grpc),
        "executor_addr": cluster.serve("executor", executor, ExecutorSettings(port=0), executor_pb2, executor_pb2_grpc),
        "gatekeeper_addr": cluster.serve("gatekeeper", GatekeeperServicer(invocations, load_rule_catalog()),
                                         GatekeeperSettings(port=0), gatekeeper_pb2, gatekeeper_pb2_grpc),
        "verifier_addr": cluster.serve("verifier", build_verifier(embedded, SemanticGuardSettings(), TracerProvider()),
                                       VerifierSettings(port=0), verifier_pb2, verifier_pb2_grpc),
        "composer_addr": cluster.serve("composer", ComposerServicer(build_composer(embedded)),
                                       ComposerSettings(port=0), composer_pb2, composer_pb2_grpc),
    }
    settings = GatewaySettings(port=0, database_url=store_url, insecure=True, **addresses)
    servicer = build_gateway(settings, TracerProvider(), MeterProvider())
    address = cluster.serve("gateway", servicer, settings, gateway_pb2, gateway_pb2_grpc,
                            (auth_interceptor(settings),))  # no token configured: the caller is `default`
    channel = grpc.insecure_channel(address)
    try:
        yield gateway_pb2_grpc.GatewayServiceStub(channel), executor
    finally:
        channel.close()
        cluster.stop()


def test_a_lost_replica_is_retried_once_and_the_run_ends_verified(gateway, stores):
    stub, executor = gateway
    runs, invocations = stores
    answer = stub.Diagnose(gateway_pb2.DiagnoseRequest(query=QUERY), timeout=CALL_TIMEOUT)
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, answer.effective_verdict)
    assert verdict in ("PASS", "LOW_CONFID") and not answer.fallback_type, answer
    assert executor.attempts[:2] == [("ExecutePlan", 0, 0), ("ExecutePlan", 0, 1)]

    audit = MessageToDict(stub.GetRun(gateway_pb2.GetRunRequest(run_id=answer.run_id), timeout=CALL_TIMEOUT).audit)
    lost_events = [e for e in audit["events"] if e["status"] == "REPLICA_LOST"]
    assert len(lost_events) == 1
    assert lost_events[0]["node"] == "executor" and "attempt 1 follows" in lost_events[0]["reason"]

    shown = audit["invocations"]
    ids = [int(i["invocation_id"]) for i in shown]
    assert len(ids) == len(set(ids)), "every invocation is shown once"
    abandoned = [i for i in shown if i["abandoned"]]
    current = [i for i in shown if not i["abandoned"]]
    assert abandoned and {i["attempt"] for i in abandoned} == {0}
    assert current and {(i["round"], i["attempt"]) for i in current if i["round"] == 0} == {(0, 1)}
    assert [i.invocation_id for i in invocations.list_for_run(answer.run_id)] == [int(i["invocation_id"]) for i in current]

    # Nothing of the lost attempt is counted, cited or named as a source.
    rule_evaluation = audit["self_evaluation"]["rule_evaluation"]
    evidence_calls = [i for i in current if i["tool_name"] != "get_current_time"]
    assert rule_evaluation["evidence_calls"] + rule_evaluation["helper_calls"] == len(current)
    assert rule_evaluation["evidence_calls"] <= len(evidence_calls)
    cited = json.dumps(audit["self_evaluation"]["verifier_evaluation"], ensure_ascii=False)
    for lost in abandoned:
        assert f'"source_invocation_id": {lost["invocation_id"]}' not in cited
        assert f"#{lost['invocation_id']}" not in answer.answer
    run = runs.get_run(answer.run_id)
    assert run is not None and run["status"] == "COMPLETED"


def test_a_lost_single_react_agent_is_retried_once(gateway, stores):
    stub, executor = gateway
    _, invocations = stores
    answer = stub.Diagnose(gateway_pb2.DiagnoseRequest(
        query=QUERY, mode=enums_pb2.DiagnosisMode.Value("DIAGNOSIS_MODE_SINGLE_REACT")), timeout=CALL_TIMEOUT)
    assert executor.attempts == [("RunAgent", 0, 0), ("RunAgent", 0, 1)]
    audit = MessageToDict(stub.GetRun(gateway_pb2.GetRunRequest(run_id=answer.run_id), timeout=CALL_TIMEOUT).audit)
    assert [e["node"] for e in audit["events"] if e["status"] == "REPLICA_LOST"] == ["executor"]
    assert audit["self_evaluation"]["verifier_evaluation"]["single_react"]["release_outcome"] == "SUCCESS", answer.answer
    shown = audit["invocations"]
    abandoned = {int(i["invocation_id"]) for i in shown if i["abandoned"]}
    current = [int(i["invocation_id"]) for i in shown if not i["abandoned"]]
    assert abandoned and current and [i.invocation_id for i in invocations.list_for_run(answer.run_id)] == current
    assert {i["attempt"] for i in shown if not i["abandoned"]} == {1}
