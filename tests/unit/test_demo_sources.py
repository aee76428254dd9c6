"""No silent demo data: which tools are disabled when, how a disabled tool is
refused and never planned, and how the answer names the unconfigured sources and the source of
every fact. The six real processes: tests/integration/test_demo_sources.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from attest.common.v1 import evidence_pb2
from attest.executor.v1 import executor_pb2
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.engine import EmbeddedEngine
from services.executor.estate import load_estate
from services.executor.servicer import ExecutorServicer, ToolRunner, build_react_agent
from services.executor.tools.backend_factory import build_backends, disabled_tools, is_demo_knowledge_dir
from services.executor.tools.backends import Unconfigured
from services.executor.tools.registry import (
    ToolArgumentError,
    ToolDisabledError,
    build_default_registry,
)
from services.executor.tools.sql_backends import SqlLogsBackend, SqlMetricsBackend
from shared.config import ExecutorSettings
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    ComposerInput,
    EvidenceBinding,
    EvidenceGap,
    EvidenceRef,
    ExecutorEvidenceV2,
    RetryContext,
    ToolInvocation,
    VerifiedSource,
)
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.templates import compose_answer, release_source_lines
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.evidence_source import disabled_lines, refs_source_kind, source_kind
from shared.failed_calls import failed_calls
from shared.proto_convert import plain_to_message
from tests.monitoring_api_server import Guarded

REPO_ROOT = Path(__file__).resolve().parents[2]
EVIDENCE_TOOLS = {"query_metrics", "query_logs", "query_changes", "lookup_knowledge"}


def _settings(monkeypatch, **env: str) -> ExecutorSettings:
    for name in ("PROMETHEUS_URL", "LOKI_URL", "CHANGES_DATABASE_URL", "KNOWLEDGE_DIR", "DEMO_TOOLS"):
        monkeypatch.delenv(f"ATTEST_{name}", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return ExecutorSettings(_env_file=None)  # type: ignore[call-arg]


# --- which tools are disabled -------------------------------------------------------------------


def test_with_no_real_backend_nothing_is_disabled(monkeypatch) -> None:
    assert disabled_tools(_settings(monkeypatch)) == frozenset()
    # Choosing demo tools changes nothing when everything is the demo estate anyway.
    assert disabled_tools(_settings(monkeypatch, ATTEST_DEMO_TOOLS="query_logs")) == frozenset()


def test_with_only_prometheus_every_tool_without_its_own_backend_is_disabled(monkeypatch) -> None:
    settings = _settings(monkeypatch, ATTEST_PROMETHEUS_URL="http://prom:9090")
    assert disabled_tools(settings) == {"query_logs", "query_changes", "lookup_knowledge"}


def test_with_only_loki_metrics_are_disabled_too(monkeypatch) -> None:
    settings = _settings(monkeypatch, ATTEST_LOKI_URL="http://loki:3100")
    assert disabled_tools(settings) == {"query_metrics", "query_changes", "lookup_knowledge"}


def test_a_changes_database_and_an_own_knowledge_dir_are_backends_of_their_own(monkeypatch, tmp_path) -> None:
    settings = _settings(monkeypatch, ATTEST_PROMETHEUS_URL="http://prom:9090", ATTEST_LOKI_URL="http://loki:3100",
                         ATTEST_CHANGES_DATABASE_URL=f"sqlite:///{tmp_path / 'changes.db'}",
                         ATTEST_KNOWLEDGE_DIR=str(tmp_path))
    assert disabled_tools(settings) == frozenset()


@pytest.mark.parametrize("spelling", ["demo/knowledge", "demo/knowledge/", "./demo/../demo/knowledge"])
def test_the_shipped_knowledge_dir_is_demo_however_it_is_spelt(spelling) -> None:
    assert is_demo_knowledge_dir(spelling)


def test_demo_tools_bring_the_demo_source_back_one_by_one_or_all(monkeypatch) -> None:
    settings = _settings(monkeypatch, ATTEST_PROMETHEUS_URL="http://prom:9090",
                         ATTEST_DEMO_TOOLS="query_logs, query_changes")
    assert settings.demo_tools == ["query_logs", "query_changes"]
    assert disabled_tools(settings) == {"lookup_knowledge"}
    everything = _settings(monkeypatch, ATTEST_PROMETHEUS_URL="http://prom:9090", ATTEST_DEMO_TOOLS="all")
    assert disabled_tools(everything) == frozenset()


def test_an_unknown_demo_tool_is_refused_at_start_up(monkeypatch) -> None:
    with pytest.raises(ValidationError, match="query_traces"):
        _settings(monkeypatch, ATTEST_DEMO_TOOLS="query_logs,query_traces")


# --- the backends and the registry --------------------------------------------------------------


@pytest.fixture()
def prometheus():
    server = Guarded()
    yield server
    server.close()


def test_the_factory_gives_a_disabled_tool_no_demo_backend(monkeypatch, prometheus, tmp_path) -> None:
    settings = _settings(monkeypatch, ATTEST_PROMETHEUS_URL=prometheus.url,
                         ATTEST_ESTATE_DATABASE_URL=f"sqlite:///{tmp_path / 'estate.db'}")
    backends = build_backends(settings)
    assert backends.disabled == {"query_logs", "query_changes", "lookup_knowledge"}
    assert isinstance(backends.logs, Unconfigured) and isinstance(backends.changes, Unconfigured)
    assert isinstance(backends.knowledge, Unconfigured)
    assert backends.metrics.source_name.startswith("prometheus:")


def test_opting_in_serves_the_demo_estate_and_names_it(monkeypatch, prometheus, tmp_path) -> None:
    settings = _settings(monkeypatch, ATTEST_PROMETHEUS_URL=prometheus.url, ATTEST_DEMO_TOOLS="all",
                         ATTEST_ESTATE_DATABASE_URL=f"sqlite:///{tmp_path / 'estate.db'}")
    backends = build_backends(settings)
    assert backends.disabled == frozenset()
    assert isinstance(backends.logs, SqlLogsBackend)
    assert source_kind(backends.logs.source_name) == "estate"
    assert source_kind(backends.changes.source_name) == "estate"  # the estate's change records
    assert source_kind(backends.knowledge.source_name) == "demo_knowledge"


def test_the_embedded_default_is_unchanged_but_labelled(monkeypatch, tmp_path) -> None:
    settings = _settings(monkeypatch, ATTEST_ESTATE_DATABASE_URL=f"sqlite:///{tmp_path / 'estate.db'}")
    backends = build_backends(settings)
    assert backends.disabled == frozenset()
    assert isinstance(backends.metrics, SqlMetricsBackend) and isinstance(backends.logs, SqlLogsBackend)
    assert {source_kind(b.source_name) for b in (backends.metrics, backends.logs, backends.changes)} == {"estate"}
    assert source_kind(backends.knowledge.source_name) == "demo_knowledge"
    assert set(build_default_registry(backends).names()) >= EVIDENCE_TOOLS


def test_a_changes_database_of_its_own_is_named_as_such(monkeypatch, tmp_path) -> None:
    settings = _settings(monkeypatch, ATTEST_ESTATE_DATABASE_URL=f"sqlite:///{tmp_path / 'estate.db'}",
                         ATTEST_CHANGES_DATABASE_URL=f"sqlite:///{tmp_path / 'estate.db'}")
    assert source_kind(build_backends(settings).changes.source_name) == "changes_db"


def test_a_disabled_tool_is_not_offered_and_asking_for_it_is_a_refusal_not_a_failure(monkeypatch, prometheus) -> None:
    registry = build_default_registry(build_backends(_settings(monkeypatch, ATTEST_PROMETHEUS_URL=prometheus.url)))
    assert registry.disabled() == ["query_logs", "lookup_knowledge", "query_changes"]
    assert set(registry.names()) == {"query_metrics", "get_current_time"}
    assert {s["function"]["name"] for s in registry.function_schemas()} == {"query_metrics", "get_current_time"}
    with pytest.raises(ToolDisabledError) as caught:
        registry.invoke("query_logs", {"service": "x", "start": "2026-11-30T11:00:00Z", "end": "2026-11-30T12:00:00Z"})
    assert isinstance(caught.value, ToolArgumentError)
    assert "disabled" in str(caught.value) and "ATTEST_DEMO_TOOLS" in str(caught.value)
    assert "backend failure" not in str(caught.value)
    # Had it been recorded, it would not read as a failed backend call.
    row = ToolInvocation(invocation_id=1, run_id="r", tool_name="query_logs", lifecycle="ERROR",
                         evidence_status="ERROR", error=str(caught.value), request={"service": "x"})
    assert failed_calls([row]) == []


# --- the planner ------------------------------------------------------------------------------


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_the_embedded_planner_never_plans_a_disabled_tool() -> None:
    query = "payment-service 最近一小时 CPU 为什么这么高？"
    full = EmbeddedPlanner("UTC").plan(query, NOW)
    assert {s.tool_name for s in full.steps} == EVIDENCE_TOOLS
    planner = EmbeddedPlanner("UTC", disabled_tools=["query_logs", "query_changes", "lookup_knowledge"])
    plan = planner.plan(query, NOW)
    assert {s.tool_name for s in plan.steps} == {"query_metrics"}
    assert "query_logs" in plan.rationale
    gaps = RetryContext(gaps=[EvidenceGap(claim_id="c1", claim_text="payment-service 日志", verification="unsupported",
                                          services=["payment-service"], tool_names=["query_logs"])])
    retry = planner.plan(query, NOW, "EVIDENCE_GAP_ONLY", gaps)
    assert retry.steps == [] and "evidence_gap" in retry.missing_context


# --- the answer -------------------------------------------------------------------------------


CPU = Claim(
    claim_id="c1", claim_type="symptom", claim_text="payment-service CPU 使用率 92%", support_level="direct",
    evidence_bindings=[EvidenceBinding(tool_name="query_metrics", source_invocation_id=12,
                                       raw_path="series[0].points[41]", evidence_excerpt="cpu_usage=92%")],
)
LOG = Claim(
    claim_id="c2", claim_type="observation", claim_text="payment-service 日志出现 upstream timeout",
    support_level="direct",
    evidence_bindings=[EvidenceBinding(tool_name="query_logs", source_invocation_id=13, raw_path="hits[0]",
                                       evidence_excerpt="upstream timeout")],
)
SCOPE = "服务 payment-service，全部指标，2026-11-30T11:00:00Z 至 2026-11-30T12:00:00Z"


def _input(verdict: str | None, claims, sources, disabled=(), **extra) -> ComposerInput:
    return ComposerInput(
        query="为什么 payment-service 的 CPU 这么高?", effective_verdict=verdict,
        verified_executor_output=ExecutorEvidenceV2(claims=list(claims)),
        claim_checks=[ClaimCheck(claim_id=c.claim_id, verification="direct_observation", detail="") for c in claims],
        verified_sources=list(sources), disabled_tools=list(disabled), **extra,
    )


PROM = VerifiedSource(tool_name="query_metrics", invocation_id=12, scope=SCOPE, source_kind="prometheus")
ESTATE_LOGS = VerifiedSource(tool_name="query_logs", invocation_id=13, scope="服务 payment-service", source_kind="estate")


@pytest.mark.parametrize("verdict", ["PASS", "LOW_CONFID", "REJECT"])
def test_unconfigured_sources_are_named_in_the_scope_without_capping_the_verdict(verdict) -> None:
    out = compose_answer(_input(verdict, [CPU], [PROM], ["query_logs", "query_changes", "lookup_knowledge"]))
    scope = out.sections["检查范围"]
    assert "未配置日志源（query_logs 未启用），本回答不包含日志数据" in scope
    assert any(line.startswith("未配置变更记录源") for line in scope)
    assert any(line.startswith("未配置知识库") for line in scope)
    assert "查询失败" not in out.answer
    if verdict == "PASS":
        assert out.answer.startswith("可信度：高"), out.answer  # no cap for a disabled tool


def test_every_fact_names_its_source_and_demo_data_says_it_is_demo() -> None:
    out = compose_answer(_input("PASS", [CPU, LOG], [PROM, ESTATE_LOGS]))
    assert "来源：" in out.sections["结论"][0], out.sections["结论"]  # the first line's fact too
    facts = out.sections["依据"]
    assert any("query_metrics #12" in line and "来源：Prometheus]" in line for line in facts), facts
    assert any("query_logs #13" in line and "来源：演示数据 estate]" in line for line in facts), facts
    scope = out.sections["检查范围"]
    assert any("query_metrics #12，来源 Prometheus" in line for line in scope), scope
    assert any("不是真实环境的数据" in line for line in scope), scope


def test_without_demo_material_there_is_no_demo_note() -> None:
    out = compose_answer(_input("PASS", [CPU], [PROM]))
    assert "演示" not in out.answer and "来源：Prometheus" in out.answer


def test_a_fallback_names_the_unconfigured_sources_and_its_sources_kind() -> None:
    out = compose_answer(_input(None, [], [PROM], ["query_logs"], fallback_type="PRE_VERIFICATION",
                                fallback_cause="NO_VERIFIED_CLAIM"))
    assert any("来源 Prometheus" in line for line in out.sections["已核实的数据来源"])
    assert out.sections["检查范围"] == ["未配置日志源（query_logs 未启用），本回答不包含日志数据"]


def test_the_single_react_release_lines_group_calls_by_source() -> None:
    lines = release_source_lines([PROM, ESTATE_LOGS, VerifiedSource(tool_name="query_metrics", invocation_id=14,
                                                                    source_kind="prometheus")])
    assert lines[0] == "指标：来源 Prometheus（query_metrics #12、#14）"
    assert lines[1] == "日志：来源 演示数据 estate（query_logs #13）"
    assert "不是真实环境的数据" in lines[2]


def test_a_source_kind_never_carries_the_url() -> None:
    refs = [EvidenceRef(raw_path="docs[0].chunks[0]", text="t", source="runbooks/cpu.md"),
            EvidenceRef(raw_path="summary", text="s", source="demo-knowledge:knowledge")]
    assert refs_source_kind(refs) == "demo_knowledge"
    assert source_kind("prometheus:https://user@prom.example:9090") == "prometheus"
    assert source_kind("runbooks/cpu.md") is None and source_kind("") is None
    assert disabled_lines(["query_logs", "query_traces", "query_logs"]) == [
        "未配置日志源（query_logs 未启用），本回答不包含日志数据"]


# --- the executor: a disabled tool is never called, in either mode --------------------------------


@pytest.fixture()
def executor(tmp_path):
    """The real servicer over the demo estate with logs, changes and knowledge disabled, and a
    SQLite audit store."""
    estate = f"sqlite:///{tmp_path / 'estate.db'}"
    load_estate(estate, REPO_ROOT / "demo" / "estate", anchor=NOW)
    backends = replace(build_backends(ExecutorSettings(estate_database_url=estate, _env_file=None)),
                       disabled=frozenset({"query_logs", "query_changes", "lookup_knowledge"}))
    registry = build_default_registry(backends)
    audit = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(audit)
    engine = make_engine(audit)
    sessions = make_session_factory(engine)
    runs, store = RunStore(sessions), InvocationStore(sessions)
    servicer = ExecutorServicer(store, registry, EmbeddedEngine(EmbeddedExecutorAgent()),
                                react_agent=build_react_agent(SimpleNamespace(provider="embedded"), registry))
    yield SimpleNamespace(servicer=servicer, registry=registry, runs=runs, store=store)
    engine.dispose()


def test_the_runner_refuses_a_disabled_tool_before_recording_it(executor) -> None:
    run_id = executor.runs.create_run(executor.runs.create_session("t"), "q", "MULTI_AGENT")
    runner = ToolRunner(executor.store, executor.registry, run_id, 0)
    with pytest.raises(ToolDisabledError):
        runner("query_logs", {"service": "payment-service", "start": "2026-11-30T11:00:00Z",
                              "end": "2026-11-30T12:00:00Z"})
    assert executor.store.list_for_run(run_id) == []


@pytest.mark.parametrize("mode", ["MULTI_AGENT", "SINGLE_REACT"])
def test_the_executor_never_calls_a_disabled_tool_and_says_which_are_disabled(executor, mode) -> None:
    query = "payment-service 最近一小时 CPU 为什么这么高？"
    run_id = executor.runs.create_run(executor.runs.create_session("t"), query, mode)
    if mode == "MULTI_AGENT":
        plan = EmbeddedPlanner("UTC").plan(query, NOW)  # a planner that does not know: all four tools
        response = executor.servicer.ExecutePlan(executor_pb2.ExecutePlanRequest(
            run_id=run_id, query=query, plan=plain_to_message(plan, evidence_pb2.Plan)), None)
    else:
        response = executor.servicer.RunAgent(executor_pb2.RunAgentRequest(run_id=run_id, query=query), None)
    called = {i.tool_name for i in executor.store.list_for_run(run_id)}
    assert "query_metrics" in called
    assert called & {"query_logs", "query_changes", "lookup_knowledge"} == set(), called
    assert list(response.disabled_tools) == ["query_logs", "lookup_knowledge", "query_changes"]
