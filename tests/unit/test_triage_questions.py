"""Triage questions (「现在线上哪个服务有问题？」): read from the question, planned without a service
(the executor picks the catalogue's), and answered naming the abnormal services and what was
checked; a question without a service that is no triage is still refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from services.executor.service_catalogue import (
    MAX_TRIAGE_UNCHECKED_LISTED,
    Catalogue,
    steps_per_service,
    triage_bound,
    triage_plan,
    triage_resolution,
)
from services.planner.model_planner import PlanReplyError, parse_plan_reply, plan_json_schema, planner_input_text
from services.planner.servicer import triage_plan as planner_triage_plan
from shared.core.contracts import Plan, PlannedToolCall, ServiceCoverage
from shared.core.direct_answer import FOUND, NOTHING_FOUND, first_line, make_finding
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.question_intent import classify_question, is_triage
from shared.core.templates import TRIAGE_PARTIAL_LINE, coverage_lines

NOW = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)

TRIAGE_QUESTIONS = [
    "现在线上哪个服务有问题？",
    "线上有什么异常吗",
    "哪些服务不正常",
    "哪个服务在报错？",
    "最近一小时哪些服务出了问题？",
    "生产环境有问题吗？",
    "帮我巡检一下线上服务",
    "which service is broken right now",
    "Which services are down?",
    "are any services unhealthy?",
    "is anything broken in prod?",
]
REFUSED_QUESTIONS = [
    "为什么报错？",
    "为什么 CPU 这么高?",
    "为什么线上哪个服务都报错？",
    "有没有异常？",
    "最近一小时错误日志是什么",
    "why are there so many errors?",
]


@pytest.mark.parametrize("query", TRIAGE_QUESTIONS)
def test_a_question_asking_which_services_are_abnormal_is_a_triage(query: str) -> None:
    intent = classify_question(query)
    assert is_triage(query) and intent.triage and intent.kind == "health", intent


@pytest.mark.parametrize("query", REFUSED_QUESTIONS)
def test_a_question_without_a_service_that_asks_no_triage_is_none(query: str) -> None:
    assert not is_triage(query) and not classify_question(query).triage


@pytest.mark.parametrize("query", ["线上 payment-service 有什么异常吗", "哪个服务有问题，payment-service 吗？",
                                   "is payment-service broken in prod?"])
def test_a_question_that_names_a_service_is_no_triage(query: str) -> None:
    assert not is_triage(query)


@pytest.mark.parametrize("query", TRIAGE_QUESTIONS)
def test_the_embedded_planner_plans_a_triage_without_services_and_without_refusing(query: str) -> None:
    plan = EmbeddedPlanner(local_timezone="UTC").plan(query, NOW)
    assert plan.triage and plan.mode == "NORMAL", plan
    assert plan.services == [] and "service" not in plan.missing_context, plan
    assert not [step for step in plan.steps if step.arguments.get("service")], plan.steps
    assert plan.window is not None and plan.window.end == "2026-11-29T11:00:00Z", plan.window
    assert "triage" in plan.rationale


@pytest.mark.parametrize("query", REFUSED_QUESTIONS)
def test_the_embedded_planner_still_refuses_a_question_without_a_service(query: str) -> None:
    plan = EmbeddedPlanner(local_timezone="UTC").plan(query, NOW)
    assert not plan.triage and plan.steps == [] and plan.missing_context == ["service"], plan


def test_the_planner_servicer_marks_any_engines_plan_of_a_triage_and_drops_guessed_service_steps() -> None:
    guessed = Plan(missing_context=["service"], steps=[
        PlannedToolCall(tool_name="query_logs", arguments={"service": "x-y"}),
        PlannedToolCall(tool_name="lookup_knowledge", arguments={"query": "报错"}),
    ])
    plan = planner_triage_plan(guessed)
    assert plan.triage and plan.missing_context == [] and [s.tool_name for s in plan.steps] == ["lookup_knowledge"]


def test_the_model_planner_is_told_of_a_triage_and_may_return_no_step_for_it() -> None:
    query = "现在线上哪个服务有问题？"
    sent = json.loads(planner_input_text(query, NOW, "NORMAL", None, triage=classify_question(query).triage))
    assert sent["triage"] is True
    why = "为什么报错？"
    assert "triage" not in json.loads(planner_input_text(why, NOW, "NORMAL", None, triage=classify_question(why).triage))
    reply = json.dumps({"services": [], "symptoms": [], "window": None, "steps": [], "missing_context": [],
                        "rationale": "triage"})
    assert parse_plan_reply(reply, mode="NORMAL", now=NOW, query=query, triage=True).steps == []
    with pytest.raises(PlanReplyError):
        parse_plan_reply(reply, mode="NORMAL", now=NOW, query="为什么报错？")
    assert plan_json_schema("NORMAL", triage=True)["properties"]["steps"]["minItems"] == 0
    assert plan_json_schema("NORMAL")["properties"]["steps"]["minItems"] == 1


# --- the executor's side: the catalogue, bounded --------------------------------------------------


def test_a_triage_checks_the_catalogue_in_name_order_up_to_its_bound() -> None:
    catalogue = Catalogue(names=frozenset({"d-svc", "a-svc", "c-svc", "b-svc"}))
    coverage = triage_resolution(catalogue, 2).coverage
    assert coverage.triage and coverage.catalogue_size == 4 and coverage.limit == 2
    assert coverage.checked == ["a-svc", "b-svc"] and coverage.unchecked == ["c-svc", "d-svc"]
    assert coverage.partial, "the rest of the catalogue is named as not checked"


def test_a_triage_lists_a_bounded_number_of_unchecked_services() -> None:
    catalogue = Catalogue(names=frozenset(f"svc-{i:04d}" for i in range(1000)))
    coverage = triage_resolution(catalogue, 5).coverage
    assert coverage.catalogue_size == 1000 and len(coverage.unchecked) == MAX_TRIAGE_UNCHECKED_LISTED


def test_a_triage_checks_nothing_when_the_catalogue_cannot_be_read() -> None:
    coverage = triage_resolution(Catalogue(available=False, error="down"), 5).coverage
    assert coverage.triage and coverage.checked == [] and coverage.catalogue_unavailable


def test_a_triage_bound_fits_the_plan_step_limit() -> None:
    per = steps_per_service()
    assert per == 3
    assert triage_bound(12, 32, per) == 10, "32 steps hold 10 services of 3 steps"
    assert triage_bound(12, 200, per) == 12
    assert triage_bound(12, 32, per, reserved_steps=2) == 10
    assert triage_bound(12, 2, per) == 0


def test_a_triage_plan_gives_each_checked_service_its_steps_before_the_runbook_lookup() -> None:
    plan = EmbeddedPlanner(local_timezone="UTC").plan("线上 CPU 有问题吗？", NOW)
    assert plan.triage and [s.tool_name for s in plan.steps] == ["lookup_knowledge"]
    resolution = triage_resolution(Catalogue(names=frozenset({"b-svc", "a-svc", "c-svc"})), 2)
    planned = triage_plan(plan, resolution)
    assert planned.services == ["a-svc", "b-svc"]
    assert [(s.tool_name, s.arguments.get("service")) for s in planned.steps] == [
        ("query_metrics", "a-svc"), ("query_logs", "a-svc"), ("query_changes", "a-svc"),
        ("query_metrics", "b-svc"), ("query_logs", "b-svc"), ("query_changes", "b-svc"),
        ("lookup_knowledge", None)]


# --- the answer ---------------------------------------------------------------------------------------


def test_the_triage_scope_says_which_services_and_window_were_checked_and_never_calls_the_rest_healthy() -> None:
    coverage = ServiceCoverage(named=["a-svc", "b-svc", "c-svc"], checked=["a-svc", "b-svc"], unchecked=["c-svc"],
                               limit=2, triage=True, catalogue_size=3)
    lines = coverage_lines(coverage, "2026-11-29 18:00 至 19:00")
    assert lines[0] == ("问题没有指明服务，本次按服务目录巡检：目录共 3 个服务，检查了其中 2 个"
                        "（时间窗口：2026-11-29 18:00 至 19:00）：a-svc、b-svc。")
    assert "其余 1 个服务本次未检查：c-svc" in lines[1] and "未检查不代表正常" in lines[1]
    whole = ServiceCoverage(named=["a-svc"], checked=["a-svc"], limit=12, triage=True, catalogue_size=1)
    assert len(coverage_lines(whole)) == 1 and "未检查" not in coverage_lines(whole)[0]
    assert "部分服务" in TRIAGE_PARTIAL_LINE


def test_the_first_line_of_a_triage_names_every_abnormal_service() -> None:
    intent = classify_question("现在线上哪个服务有问题？")
    findings = [
        make_finding("payment-service 的 cpu_usage_percent 达到 97.2%", " [证据: query_metrics #1]", "abnormal", True),
        make_finding("user-service 的 cpu_usage_percent 保持在 30% 左右", " [证据: query_metrics #2]", "normal", True),
        make_finding("order-service 出现 12 条 ERROR 日志：调用 account-service 超时", " [证据: query_logs #3]", "abnormal",
                     True),
        make_finding("media-service 出现 3 条 ERROR 日志", " [证据: query_logs #4]", "abnormal", False),
    ]
    line = first_line(intent, "现在线上哪个服务有问题？", findings, "PASS")
    assert line.startswith(f"{FOUND}payment-service、order-service 有已核实的异常——payment-service"), line
    assert "user-service" not in line and "media-service" not in line, "neither a normal nor an unconfirmed one"
    assert "account-service" not in line, "a dependency a finding mentions is not its subject"
    quiet = first_line(intent, "现在线上哪个服务有问题？", findings[1:2], "PASS", "a-svc、b-svc；窗口")
    assert quiet.startswith(NOTHING_FOUND)
