"""Run limits, behind the executor's real gRPC server wired as its process wires it
(`services/executor/__main__.py: build_servicer`): internal RPCs cannot corrupt runs.

As an attacker reaching the executor would: ExecutePlan naming a finished run, an unknown run,
a plan too long, an argument too big, a window too wide, a run past its budgets. Each is refused
with the status a caller can act on, and the audit of the run is left as it was; nothing found
is returned. A run the gateway finishes while ExecutePlan runs gets nothing more either. An agent
that reaches the budget while running stops calling tools and says what it did not check."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from attest.common.v1 import evidence_pb2
from attest.executor.v1 import executor_pb2
from services.executor import __main__ as executor_main
from services.executor.engine import BUDGET_EXHAUSTED_NOTE
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.service_catalogue import catalogue_of
from services.executor.servicer import ExecutorServicer, build_engine, build_react_agent
from services.executor.tools.registry import build_default_registry
from shared.config import ExecutorSettings, ModelSettings
from shared.core.agent_stop_reasons import RUN_BUDGET_EXHAUSTED
from shared.core.contracts import Plan, PlannedToolCall
from shared.core.embedded_planner import EmbeddedPlanner
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.error_details import error_details
from shared.model_client import OpenAIChatClient
from shared.proto_convert import plain_to_message
from tests.scripted_model_server import completion, tool_call

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)  # the demo estate's "now" (conftest.DEMO_ANCHOR)
QUERY = "为什么 payment-service 的 CPU 这么高？"
CALL_TIMEOUT = 30


class Lab:
    """The executor's real server over a SQLite audit database, and that database's stores."""

    def __init__(self, url: str, stub: Any) -> None:
        sessions = make_session_factory(make_engine(url))
        self.runs, self.invocations, self.stub = RunStore(sessions), InvocationStore(sessions), stub

    def new_run(self, query: str = QUERY, mode: str = "MULTI_AGENT") -> str:
        return self.runs.create_run(self.runs.create_session("limits"), query, mode)

    def audit(self, run_id: str) -> list[dict]:
        return [invocation.model_dump() for invocation in self.invocations.list_for_run(run_id)]

    def execute(self, run_id: str, plan: Plan | None = None, query: str = QUERY,
                round_: int = 0) -> executor_pb2.ExecutePlanResponse:
        plan = plan if plan is not None else EmbeddedPlanner().plan(query, ANCHOR)
        request = executor_pb2.ExecutePlanRequest(run_id=run_id, query=query, round=round_,
                                                  plan=plain_to_message(plan, evidence_pb2.Plan))
        return self.stub.ExecutePlan(request, timeout=CALL_TIMEOUT)

    def refused(self, run_id: str, plan: Plan | None = None, round_: int = 0) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as caught:
            self.execute(run_id, plan, round_=round_)
        return caught.value


@pytest.fixture()
def lab(tmp_path, demo_backends, serve_role):
    """`lab(**executor_settings)` → a Lab whose executor is built by the process's own wiring."""

    def start(**overrides: Any) -> Lab:
        url = f"sqlite:///{tmp_path / 'attest.db'}"
        upgrade(url)
        settings = ExecutorSettings(port=0, database_url=url, **overrides)
        servicer = executor_main.build_servicer(settings, ModelSettings(), None, backends=demo_backends)
        return Lab(url, serve_role("executor", servicer, settings))

    return start


def _plan(steps: list[PlannedToolCall]) -> Plan:
    return Plan(services=["payment-service"], steps=steps)


def _logs(**arguments: Any) -> PlannedToolCall:
    return PlannedToolCall(tool_name="query_logs", arguments={
        "service": "payment-service", "start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z", **arguments})


def test_execute_plan_into_a_finished_run_is_refused_and_changes_nothing(lab):
    lab = lab()
    run_id = lab.new_run()
    assert lab.execute(run_id).invocation_ids  # the run's own diagnosis
    lab.runs.finish_run(run_id, status="COMPLETED")
    before = lab.audit(run_id)
    error = lab.refused(run_id)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"run {run_id} is COMPLETED: a finished run is immutable" in error.details()
    assert lab.audit(run_id) == before


def test_execute_plan_naming_an_unknown_run_is_not_found(lab):
    lab = lab()
    error = lab.refused("f" * 32)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == f"run {'f' * 32} does not exist"
    assert lab.audit("f" * 32) == []


def test_a_forty_step_plan_is_refused_before_any_step_runs(lab):
    lab = lab()
    run_id = lab.new_run()
    start = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    steps = [_logs(start=(start + timedelta(minutes=n)).isoformat(), end=ANCHOR.isoformat()) for n in range(40)]
    error = lab.refused(run_id, _plan(steps))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "the plan has 40 steps; at most 32 are accepted"
    assert lab.audit(run_id) == []


@pytest.mark.parametrize(("step", "details"), [
    (_logs(contains="x" * 5000), "step 2 (query_logs): argument 'contains' is 5002 bytes; at most 1024 are accepted"),
    (_logs(start="2026-10-30T11:00:00Z"),
     "step 2 (query_logs): the window from start to end spans 720 hours; at most 168 are accepted"),
    (_logs(start="2026-11-29T11:00:00Z", end="2026-11-29T10:00:00Z"),
     "step 2 (query_logs): the window ends (2026-11-29T10:00:00+00:00) before it starts (2026-11-29T11:00:00+00:00)"),
    (_logs(limit=100000), "step 2 (query_logs): argument limit is 100000; at most 500 is accepted"),
    (_logs(contains="c" * 1000, level="l" * 1000, extra="e" * 1000, other="o" * 1000),
     "step 2 (query_logs): its arguments are 4149 bytes; at most 4096 are accepted"),
], ids=["argument-bytes", "thirty-day-window", "window-backwards", "limit", "request-bytes"])
def test_a_step_beyond_a_limit_is_refused_naming_the_step_argument_and_limit(lab, step, details):
    lab = lab()
    run_id = lab.new_run()
    error = lab.refused(run_id, _plan([_logs(), step]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == details
    assert lab.audit(run_id) == []  # not even the step within the limits ran


def test_the_invocation_budget_refuses_the_round_that_would_exceed_it(lab):
    lab = lab(max_run_invocations=8)
    run_id = lab.new_run()
    first = lab.execute(run_id)
    # The plan's four calls, one read of every level around the anomaly's onset (events) and one
    # read of the error levels around each of the two changes before it (what started after each).
    assert len(first.invocation_ids) == 7
    before = lab.audit(run_id)
    error = lab.refused(run_id, round_=1)  # the next round: 4 more calls than the 1 left
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == (f"4 more tool calls would take run {run_id} past its budget of 8 tool invocations "
                               "(7 used); nothing was run")
    # Waiting does not help: the reason, and no retry time.
    assert error_details(error) == {"reason": "RUN_INVOCATION_BUDGET", "domain": "attest.dev",
                                    "metadata": {"limit": "8"}}
    assert lab.audit(run_id) == before


def test_the_evidence_budget_stops_the_round_that_reaches_it_and_refuses_the_next(lab):
    lab = lab(max_run_evidence_bytes=20_000)  # the demo question's evidence is about 43 kB
    run_id = lab.new_run()
    response = lab.execute(run_id)  # not refused: the round answers with what it has
    audit = lab.invocations.list_for_run(run_id)
    assert len(audit) < 4, "no tool runs once the budget is used up"
    refused = audit[-1]
    assert refused.lifecycle == "ERROR" and refused.agent_result is None
    assert "bytes of evidence" in refused.error and "it was not stored" in refused.error
    assert BUDGET_EXHAUSTED_NOTE in response.output_text  # the unchecked tools are named as missing
    stored = sum(len((inv.agent_result or "").encode()) for inv in audit)
    assert stored <= 20_000
    before = lab.audit(run_id)
    error = lab.refused(run_id, round_=1)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"run {run_id} has used its budget of 20000 bytes of evidence" in error.details()
    assert lab.audit(run_id) == before


class FinishingRegistry:
    """The demo tools, except that the gateway finishes the run during the first tool call (as
    when its deadline passes while the executor still runs)."""

    def __init__(self, registry: Any, finish: Any) -> None:
        self._registry, self._finish = registry, finish

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)

    def invoke(self, tool_name: str, arguments: Any) -> Any:
        if self._finish is not None:
            self._finish()
            self._finish = None
        return self._registry.invoke(tool_name, arguments)


def test_a_run_finished_while_execute_plan_runs_gets_nothing_more(tmp_path, demo_backends, serve_role):
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    sessions = make_session_factory(make_engine(url))
    runs, invocations = RunStore(sessions), InvocationStore(sessions)
    run_id = runs.create_run(runs.create_session("limits"), QUERY, "MULTI_AGENT")
    registry = FinishingRegistry(build_default_registry(demo_backends),
                                 lambda: runs.finish_run(run_id, status="FALLBACK", fallback_type="TIMEOUT"))
    servicer = ExecutorServicer(invocations, registry, build_engine(ModelSettings(), registry),  # type: ignore[arg-type]
                                catalogue=catalogue_of(demo_backends))
    lab = Lab(url, serve_role("executor", servicer, ExecutorSettings(port=0)))
    error = lab.refused(run_id)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"run {run_id} is FALLBACK" in error.details()
    # Begun before the finish, never completed: ending the run closed it, with the reason.
    (in_flight,) = invocations.list_for_run(run_id)
    assert in_flight.lifecycle == "ERROR" and in_flight.agent_result is None and "ended FALLBACK" in in_flight.error


def test_a_react_agent_reaching_the_budget_stops_with_what_it_verified(tmp_path, demo_backends, serve_role):
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    settings = ExecutorSettings(port=0, database_url=url, max_run_invocations=2)
    sessions = make_session_factory(make_engine(url))
    runs = RunStore(sessions)
    invocations = InvocationStore(sessions, executor_main.run_budget(settings))
    registry = build_default_registry(demo_backends)
    servicer = ExecutorServicer(invocations, registry, build_engine(ModelSettings(), registry),
                                react_agent=EmbeddedReactAgent(clock=lambda: ANCHOR),
                                catalogue=catalogue_of(demo_backends))
    stub = serve_role("executor", servicer, settings)
    run_id = runs.create_run(runs.create_session("limits"), QUERY, "SINGLE_REACT")
    response = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY), timeout=CALL_TIMEOUT)
    assert len(response.tool_call_ids) == 2 and len(invocations.list_for_run(run_id)) == 2
    # A controlled stop, as at the step bound: the release publishes what the two calls verified.
    assert response.stop_reason == RUN_BUDGET_EXHAUSTED and not response.HasField("draft")
    assert len(response.progress.observed_facts) >= 1
    first = {i.invocation_id for i in invocations.list_for_run(run_id)}
    with pytest.raises(grpc.RpcError) as caught:  # the same attempt again: it ran once
        stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY), timeout=CALL_TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "attempt 0 was already started" in caught.value.details()
    # The retry of a lost attempt is not charged for it; the first attempt's two calls
    # are abandoned, and the retry's two are the run's current ones.
    retry = stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY, attempt=1), timeout=CALL_TIMEOUT)
    assert len(retry.tool_call_ids) == 2 and retry.stop_reason == RUN_BUDGET_EXHAUSTED
    current = invocations.list_for_run(run_id)
    assert len(current) == 2 and not first & {i.invocation_id for i in current}
    assert invocations.abandoned_invocation_ids(run_id, first) == first


def _model_lab(tmp_path, demo_backends, serve_role, settings: ModelSettings, max_run_invocations: int) -> Lab:
    """An executor whose engines talk to the scripted model, over a store with a small budget."""
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    executor_settings = ExecutorSettings(port=0, database_url=url, max_run_invocations=max_run_invocations)
    registry = build_default_registry(demo_backends)
    client = OpenAIChatClient(settings)
    servicer = ExecutorServicer(
        InvocationStore(make_session_factory(make_engine(url)), executor_main.run_budget(executor_settings)),
        registry, build_engine(settings, registry, client),
        react_agent=build_react_agent(settings, registry, client), catalogue=catalogue_of(demo_backends),
    )
    return Lab(url, serve_role("executor", servicer, executor_settings))


def _log_calls(count: int) -> list[dict]:
    arguments = {"service": "payment-service", "start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z",
                 "level": "ERROR", "limit": 5}
    return [tool_call("query_logs", arguments, f"call_{n}") for n in range(count)]


def test_a_model_executor_reaching_the_budget_is_asked_for_its_answer_without_tools(
        tmp_path, demo_backends, serve_role, model_server, scripted_settings):
    final = {"answer_version": "executor_evidence_v2", "claims": [], "hypotheses": [], "recommended_actions": [],
             "missing_info": [{"text": "budget used up: not every log was read"}]}
    model_server.add(completion(None, tool_calls=_log_calls(3)), completion(json.dumps(final)))
    lab = _model_lab(tmp_path, demo_backends, serve_role, scripted_settings(), max_run_invocations=2)
    run_id = lab.new_run()
    response = lab.execute(run_id, _plan([_logs(limit=5)]))
    assert len(lab.invocations.list_for_run(run_id)) == 2
    assert "budget used up" in response.output_text
    first, last = model_server.requests  # the tool turn, then the final turn: no further tool turn
    assert "tools" not in last
    refused = [m for m in last["messages"] if m["role"] == "tool"][-1]
    assert "not run: this diagnosis has used up its budget of tool calls" in refused["content"]
    assert any(m["role"] == "user" and "used up its budget of tool calls" in (m["content"] or "")
               for m in last["messages"])


def test_a_model_react_agent_reaching_the_budget_stops_in_a_controlled_way(
        tmp_path, demo_backends, serve_role, model_server, scripted_settings):
    model_server.add(completion(None, tool_calls=_log_calls(3)))
    lab = _model_lab(tmp_path, demo_backends, serve_role, scripted_settings(), max_run_invocations=2)
    run_id = lab.new_run(mode="SINGLE_REACT")
    response = lab.stub.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=QUERY), timeout=CALL_TIMEOUT)
    assert response.stop_reason == RUN_BUDGET_EXHAUSTED and not response.HasField("draft")
    assert len(response.tool_call_ids) == 2 and len(lab.invocations.list_for_run(run_id)) == 2
    assert len(model_server.requests) == 1  # no model turn after the budget was used up


def test_a_plan_naming_more_services_than_a_question_can_is_refused(lab):
    lab = lab()
    run_id = lab.new_run()
    error = lab.refused(run_id, Plan(services=[f"svc{n}-service" for n in range(101)], steps=[_logs()]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "the plan names 101 services; at most 100 are accepted"
    assert lab.audit(run_id) == []
