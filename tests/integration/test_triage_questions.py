"""「现在线上哪个服务有问题？」 through the six real services in both modes, on the demo estate:

- a triage question (no service named, asks which are abnormal) checks the executor's catalogued
  services instead of being refused; the answer names the abnormal services, each one a service
  the demo estate has an incident on (`demo/estate/incidents/*.json`), never a healthy one, and
  says what it checked (which services, which window);
- with a catalogue larger than the bound (ATTEST_TRIAGE_MAX_SERVICES), the answer names the
  services it did not check and says nothing about them;
- a question without a service that is no triage (「为什么报错？」) is still refused, nothing called.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attest.common.v1 import enums_pb2
from gateway.launcher import REPO_ROOT
from shared.core.direct_answer import FOUND
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.proto_convert import spec_value
from tests.integration.conftest import running_cluster
from tests.integration.failed_call_answers import MODES, conclusion_line, diagnose

pytestmark = pytest.mark.integration

BOTH_MODES = pytest.mark.parametrize("mode", list(MODES))
ESTATE = Path(REPO_ROOT) / "demo" / "estate"
CATALOGUE = sorted(service["name"] for service in json.loads((ESTATE / "services.json").read_text("utf-8"))["services"])
WITH_INCIDENT = {json.loads(path.read_text("utf-8"))["service"] for path in (ESTATE / "incidents").glob("*.json")}
HEALTHY = set(CATALOGUE) - WITH_INCIDENT
TRIAGE = "现在线上哪个服务有问题？"
BOUND = 3


@dataclass
class Lab:
    gateway_addr: str
    runs: RunStore


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("triage")
    with running_cluster(root, otlp_receiver.endpoint, new_database(root)) as running:
        yield Lab(running.gateway_addr, RunStore(make_session_factory(make_engine(running.database_url))))


@pytest.fixture(scope="module")
def bounded_lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("triage-bounded")
    with running_cluster(root, otlp_receiver.endpoint, new_database(root),
                         {"ATTEST_TRIAGE_MAX_SERVICES": str(BOUND)}) as running:
        yield Lab(running.gateway_addr, RunStore(make_session_factory(make_engine(running.database_url))))


def _ask(lab: Lab, query: str, auth_metadata, mode: str):
    response = diagnose(lab.gateway_addr, query, auth_metadata, MODES[mode])
    return response, lab.runs.get_run(response.run_id), spec_value(enums_pb2.FallbackType.DESCRIPTOR,
                                                                    response.fallback_type)


def _queried(run: dict) -> set[str]:
    return {inv["request"]["service"] for inv in run["invocations"] if inv["request"].get("service")}


def _coverage(run: dict) -> dict:
    return run["self_evaluation"]["verifier_evaluation"]["service_coverage"]


def _named_abnormal(line: str) -> list[str]:
    """The services the first line names as abnormal: 「发现异常：a、b 有已核实的异常——…」."""
    assert line.startswith(FOUND), line
    head = line.removeprefix(FOUND).split(" 有已核实的异常", 1)
    assert len(head) == 2, f"the first line names no abnormal service: {line}"
    return head[0].split("、")


def _section(answer: str, title: str) -> str:
    match = re.search(rf"【{title}】\n(.*?)(?:\n【|\Z)", answer, re.S)
    return match.group(1) if match else ""


def test_the_demo_estate_has_healthy_and_troubled_services() -> None:
    assert HEALTHY and WITH_INCIDENT <= set(CATALOGUE), (HEALTHY, WITH_INCIDENT)


@BOTH_MODES
def test_a_triage_question_names_the_abnormal_services_and_what_it_checked(lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(lab, TRIAGE, auth_metadata, mode)
    answer = response.answer
    assert fallback is None, answer
    # Every catalogued service was checked (the estate has fewer than the bound) and nothing else.
    assert _queried(run) == set(CATALOGUE), run["invocations"]
    coverage = _coverage(run)
    assert coverage["triage"] is True and sorted(coverage["checked"]) == CATALOGUE, coverage
    assert not coverage["unchecked"], coverage
    # The direct answer names abnormal services: each one has an incident, none is healthy.
    named = _named_abnormal(conclusion_line(answer))
    assert named and set(named) <= WITH_INCIDENT, (named, answer)
    assert not set(named) & HEALTHY, (named, answer)
    assert len(named) >= 2, f"several incidents are on: {answer}"
    # What it checked: the catalogue's services, and the window.
    scope = _section(answer, "服务范围")
    assert "本次按服务目录巡检" in scope and f"目录共 {len(CATALOGUE)} 个服务" in scope, answer
    assert all(service in scope for service in CATALOGUE), answer
    assert "未检查" not in scope, answer
    assert re.search(r"时间窗口：\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?::\d{2})? 至 ", scope), answer
    assert "请补充要排查的服务名称" not in answer, answer


@BOTH_MODES
@pytest.mark.parametrize("query", ["线上有什么异常吗", "哪些服务不正常", "which service is broken right now"])
def test_variants_of_the_triage_question_check_the_catalogue(lab, auth_metadata, mode, query) -> None:
    response, run, fallback = _ask(lab, query, auth_metadata, mode)
    assert fallback is None, response.answer
    assert _coverage(run)["triage"] is True, _coverage(run)
    assert _queried(run) == set(CATALOGUE), run["invocations"]
    line = conclusion_line(response.answer)
    if line.startswith(FOUND):
        assert not set(_named_abnormal(line)) & HEALTHY, response.answer


@BOTH_MODES
def test_a_bounded_triage_names_the_services_it_did_not_check(bounded_lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(bounded_lab, TRIAGE, auth_metadata, mode)
    answer = response.answer
    assert fallback is None, answer
    checked, rest = CATALOGUE[:BOUND], CATALOGUE[BOUND:]
    assert _queried(run) == set(checked), run["invocations"]
    coverage = _coverage(run)
    assert coverage["checked"] == checked and coverage["unchecked"] == rest, coverage
    scope = _section(answer, "服务范围")
    assert f"检查了其中 {BOUND} 个" in scope and f"其余 {len(rest)} 个服务本次未检查" in scope, answer
    assert all(service in scope for service in rest) and "未检查不代表正常" in scope, answer
    # Nothing is said about a service that was not checked, nor is it called healthy.
    line = conclusion_line(answer)
    assert not any(service in line for service in rest), answer
    if line.startswith(FOUND):
        assert set(_named_abnormal(line)) <= set(checked) & WITH_INCIDENT, answer
    assert "可信度：高" not in answer, answer


@BOTH_MODES
def test_a_question_without_a_service_that_is_no_triage_is_still_refused(lab, auth_metadata, mode) -> None:
    response, run, fallback = _ask(lab, "为什么报错？", auth_metadata, mode)
    assert fallback == "MISSING_REQUIRED_CONTEXT", response.answer
    assert "请补充要排查的服务名称" in response.answer, response.answer
    assert run["invocations"] == []
