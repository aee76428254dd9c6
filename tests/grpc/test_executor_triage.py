"""Triage questions, the executor's servicer called in process (grpcio-testing): a plan marked `triage` (ExecutePlan) or
a triage question (RunAgent) checks the catalogue's services, at most the triage bound and no more
than fit in the step limit, and the coverage names the rest as not checked. The estate is the demo
estate (the tests may know it; the code does not)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from attest.common.v1 import evidence_pb2
from attest.executor.v1 import executor_pb2
from services.executor.plan_limits import PlanLimits
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.service_catalogue import catalogue_of
from services.executor.servicer import ExecutorServicer, build_engine
from services.executor.tools.registry import build_default_registry
from shared.config import ModelSettings
from shared.core.contracts import ServiceCoverage
from shared.core.embedded_planner import EmbeddedPlanner
from shared.proto_convert import message_to_model, plain_to_message

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)  # the demo estate's "now" (conftest.DEMO_ANCHOR)
CALL_TIMEOUT = 60
TRIAGE = "现在线上哪个服务有问题？"


@pytest.fixture()
def executor(demo_backends, stores, in_process):
    """`executor(triage=12, max_steps=32)` → (stub, new_run, catalogue names in order)."""
    runs, invocations = stores
    registry = build_default_registry(demo_backends)
    catalogue = catalogue_of(demo_backends)

    def start(triage: int = 12, max_steps: int = 32):
        servicer = ExecutorServicer(
            invocations, registry, build_engine(ModelSettings(), registry),
            react_agent=EmbeddedReactAgent(clock=lambda: ANCHOR), catalogue=catalogue,
            plan_limits=PlanLimits(max_steps=max_steps), triage_max_services=triage,
        )
        stub = in_process("executor", servicer)

        def new_run(query: str, mode: str = "MULTI_AGENT") -> str:
            return runs.create_run(runs.create_session("test"), query, mode)

        return stub, new_run, sorted(catalogue.snapshot().names)

    return start


def _execute(stub, run_id: str, query: str) -> executor_pb2.ExecutePlanResponse:
    plan = EmbeddedPlanner().plan(query, ANCHOR)
    request = executor_pb2.ExecutePlanRequest(run_id=run_id, query=query, plan=plain_to_message(plan, evidence_pb2.Plan))
    return stub.ExecutePlan(request, timeout=CALL_TIMEOUT)


def _coverage(response) -> ServiceCoverage:
    return message_to_model(response.service_coverage, ServiceCoverage)


def _services(invocations) -> set[str]:
    return {inv.request["service"] for inv in invocations if inv.request.get("service")}


def test_execute_plan_of_a_triage_checks_every_catalogued_service_within_the_bound(executor, stores):
    stub, new_run, names = executor()
    assert len(names) <= 10, "the demo estate fits in one plan of 32 steps"
    run_id = new_run(TRIAGE)
    response = _execute(stub, run_id, TRIAGE)
    coverage = _coverage(response)
    assert coverage.triage and coverage.checked == names and coverage.unchecked == []
    assert coverage.catalogue_size == len(names)
    assert _services(stores[1].list_for_run(run_id)) == set(names)
    assert response.output_text, "the per-service findings"


def test_execute_plan_of_a_triage_names_the_services_beyond_its_bound_as_not_checked(executor, stores):
    stub, new_run, names = executor(triage=3)
    run_id = new_run(TRIAGE)
    coverage = _coverage(_execute(stub, run_id, TRIAGE))
    assert coverage.checked == names[:3] and coverage.unchecked == names[3:] and coverage.limit == 3
    assert coverage.partial and coverage.catalogue_size == len(names)
    assert _services(stores[1].list_for_run(run_id)) == set(names[:3])


def test_a_triage_checks_no_more_services_than_fit_in_the_plan_step_limit(executor, stores):
    stub, new_run, names = executor(triage=12, max_steps=7)
    run_id = new_run(TRIAGE)
    coverage = _coverage(_execute(stub, run_id, TRIAGE))
    assert coverage.checked == names[:2] and coverage.limit == 2, "7 steps hold 2 services of 3 steps"
    assert _services(stores[1].list_for_run(run_id)) == set(names[:2])


def test_run_agent_on_a_triage_question_checks_the_catalogue(executor, stores):
    stub, new_run, names = executor(triage=4)
    run_id = new_run(TRIAGE, "SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=TRIAGE, max_steps=50),
                             timeout=CALL_TIMEOUT)
    coverage = _coverage(response)
    assert coverage.triage and coverage.checked == names[:4] and coverage.unchecked == names[4:]
    assert _services(stores[1].list_for_run(run_id)) == set(names[:4]), "the unchecked ones are never queried"
    assert response.HasField("draft")


def test_run_agent_on_a_question_without_a_service_that_is_no_triage_runs_nothing(executor, stores):
    stub, new_run, _ = executor()
    run_id = new_run("为什么报错？", "SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query="为什么报错？"), timeout=CALL_TIMEOUT)
    assert not _coverage(response).triage and not _coverage(response).named
    assert list(response.tool_call_ids) == [] and stores[1].list_for_run(run_id) == []
    assert [item for item in response.draft.missing_context if item.startswith("服务名")], response.draft
