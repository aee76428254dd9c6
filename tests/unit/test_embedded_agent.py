"""The embedded executor engine derives executor_evidence_v2 from the invocations it made: every
claim cites real refs with exact excerpts, anomalies are found, healthy services stay healthy."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate, metric_point, read_estate_description
from services.executor.tools.backends import Contributor, LogQueryResult, MetricSeries, ToolBackends
from services.executor.tools.registry import ToolError, ToolRegistry, build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from shared.core.contracts import (
    ExecutorEvidenceV2,
    Plan,
    PlannedToolCall,
    RetrievalDetails,
    TimeWindow,
    ToolInvocation,
)
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.evidence_view import evidence_view
from shared.core.value_format import format_value

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)


class InMemoryInvocations:
    """A call_tool that records each invocation under an increasing id, as the store would."""

    def __init__(self, registry: ToolRegistry, run_id: str = "run-1") -> None:
        self.registry = registry
        self.run_id = run_id
        self.invocations: dict[int, ToolInvocation] = {}

    def __call__(self, tool_name: str, arguments: dict) -> ToolInvocation:
        if isinstance(self.registry, ToolRegistry):
            self.registry.refuse_disabled(tool_name)  # as the executor does: nothing recorded
        invocation_id = 100 + len(self.invocations) + 1
        try:
            result = self.registry.invoke(tool_name, arguments)
        except ToolError as exc:
            invocation = ToolInvocation(
                invocation_id=invocation_id, run_id=self.run_id, tool_name=tool_name, lifecycle="ERROR",
                evidence_status="ERROR", request=arguments, error=str(exc),
            )
        else:
            invocation = ToolInvocation(
                invocation_id=invocation_id, run_id=self.run_id, tool_name=tool_name, lifecycle="READY",
                evidence_status=result.evidence_status, request=result.request_scope, agent_result=result.agent_result,
                retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()),
            )
        self.invocations[invocation_id] = invocation
        return invocation


def _ask(registry: ToolRegistry, query: str, now: datetime = ANCHOR) -> tuple[ExecutorEvidenceV2, str, InMemoryInvocations]:
    calls = InMemoryInvocations(registry)
    plan = EmbeddedPlanner().plan(query, now)
    text = EmbeddedExecutorAgent().run(plan, calls, query)
    return ExecutorEvidenceV2.model_validate_json(text), text, calls


def _assert_grounded(output: ExecutorEvidenceV2, calls: InMemoryInvocations) -> None:
    for claim in output.claims:
        assert claim.evidence_bindings, claim
        for binding in claim.evidence_bindings:
            invocation = calls.invocations[binding.source_invocation_id]
            assert invocation.run_id == calls.run_id and invocation.lifecycle == "READY"
            assert binding.tool_name == invocation.tool_name
            assert binding.source_invocation_ids == [binding.source_invocation_id]
            refs = {ref.raw_path: ref.text for ref in evidence_view(invocation).refs()}
            assert binding.raw_path in refs, binding
            assert binding.evidence_excerpt and binding.evidence_excerpt in refs[binding.raw_path], binding


def _window_max(url: str, service: str, metric: str, end: datetime, minutes: int = 60) -> tuple[float, str]:
    engine = create_engine(url)
    with engine.connect() as connection:
        peak = connection.execute(
            select(func.max(metric_point.c.value), metric_point.c.unit)
            .where(metric_point.c.service == service, metric_point.c.metric == metric,
                   metric_point.c.ts >= end - timedelta(minutes=minutes), metric_point.c.ts <= end)
        ).one()
    engine.dispose()
    return peak[0], peak[1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ToolRegistry]:
    url = f"sqlite:///{tmp_path_factory.mktemp('agent') / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    return url, build_default_registry(build_sql_backends(url))


DESCRIPTION = read_estate_description(DEFAULT_ESTATE_DIR)
INCIDENTS = DESCRIPTION.incidents
HEALTHY = [s.name for s in DESCRIPTION.services if s.name not in {i.service for i in INCIDENTS}]


def test_output_is_one_contract_json_object_without_removed_fields(demo) -> None:
    _, registry = demo
    output, text, calls = _ask(registry, f"{INCIDENTS[0].service} 最近一小时怎么了?")
    assert text.startswith("{") and text.endswith("}")
    raw = json.loads(text)
    assert raw["answer_version"] == "executor_evidence_v2"
    assert {"claims", "hypotheses", "recommended_actions", "missing_info"} <= set(raw)
    assert "diagnosis_summary" not in text and "user_facing_answer" not in text
    assert output.claims and len(output.claims) <= 6
    _assert_grounded(output, calls)


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.kind for i in INCIDENTS])
def test_each_incident_yields_a_grounded_claim_with_its_peak_value(demo, incident) -> None:
    url, registry = demo
    output, _, calls = _ask(registry, f"为什么 {incident.service} 出问题了?")
    _assert_grounded(output, calls)
    effect = incident.metrics[0]
    peak, unit = _window_max(url, incident.service, effect.metric, ANCHOR)
    expected = f"{incident.service} {effect.metric}={format_value(peak, unit)} at "
    claims = [c for c in output.claims if any(b.evidence_excerpt.startswith(expected) for b in c.evidence_bindings)
              and c.claim_type != "root_cause"]  # a cause may cite the peak of a series without an onset ref
    assert claims, f"no claim cites the peak {expected!r}: {[c.claim_text for c in output.claims]}"
    assert claims[0].claim_type == "symptom"
    assert format_value(peak, unit) in claims[0].claim_text
    # A cause is claimed only as a checked link: indirect, citing both ends.
    for cause in (c for c in output.claims if c.claim_type == "root_cause"):
        assert cause.support_level == "indirect"
        tools = {b.tool_name for b in cause.evidence_bindings}
        assert "query_logs" in tools and tools & {"query_changes", "query_metrics"}, cause
    assert output.hypotheses and output.recommended_actions
    assert any(c.claim_type == "observation" and c.evidence_bindings[0].tool_name == "query_logs" for c in output.claims)


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.kind for i in INCIDENTS])
def test_actions_that_change_the_system_need_a_human(demo, incident) -> None:
    _, registry = demo
    output, _, _ = _ask(registry, f"为什么 {incident.service} 出问题了?")
    changing = [a for a in output.recommended_actions if any(w in a.text for w in ("回滚", "重启", "扩容", "调整", "调高", "清理"))]
    assert all(a.requires_human_confirmation for a in changing)


def test_some_incident_gets_an_action_that_needs_a_human(demo) -> None:
    """Keeps the test above meaningful."""
    _, registry = demo
    outputs = [_ask(registry, f"为什么 {i.service} 出问题了?")[0] for i in INCIDENTS]
    assert any(a.requires_human_confirmation for o in outputs for a in o.recommended_actions)


def test_a_narrow_confirmation_question_stays_narrow(demo) -> None:
    _, registry = demo
    incident = next(i for i in INCIDENTS if any(e.metric.startswith("cpu") for e in i.metrics))
    output, _, calls = _ask(registry, f"{incident.service} 的 CPU 告警是真的吗?")
    _assert_grounded(output, calls)
    assert 1 <= len(output.claims) <= 2
    assert {c.claim_type for c in output.claims} <= {"observation", "negative_observation"}
    assert "cpu" in output.claims[0].evidence_bindings[0].evidence_excerpt
    assert not any(b.tool_name == "query_changes" for c in output.claims for b in c.evidence_bindings)  # no "why"
    assert len(output.hypotheses) <= 1


def test_a_multi_service_question_states_every_troubled_services_anomaly(demo) -> None:
    # One service's many findings never crowd out another service's anomaly.
    _, registry = demo
    troubled = list(dict.fromkeys(i.service for i in INCIDENTS))
    output, _, calls = _ask(registry, f"{'、'.join(troubled + HEALTHY[:2])} 最近一小时有没有异常？")
    _assert_grounded(output, calls)
    positive = [c for c in output.claims if c.claim_type != "negative_observation"]
    for service in troubled:
        assert any(c.claim_text.startswith(service) for c in positive), (service, [c.claim_text for c in output.claims])


def test_a_narrow_question_about_two_services_confirms_each(demo) -> None:
    _, registry = demo
    first, second = list(dict.fromkeys(i.service for i in INCIDENTS))[:2]
    output, _, calls = _ask(registry, f"{first} 和 {second} 的问题是同一个问题吗？")
    _assert_grounded(output, calls)
    for service in (first, second):
        assert any(c.claim_text.startswith(service) for c in output.claims), [c.claim_text for c in output.claims]
    assert len(output.claims) <= 4


def test_a_yes_no_question_shows_the_hypothesis_signal_read_in_full_when_it_is_quiet(demo) -> None:
    # 「X 报错是不是因为 CPU 打满了？」 on a service whose trouble is elsewhere — the
    # premise (errors) is shown and so is the CPU series, quiet, for 「证据不支持」.
    _, registry = demo
    incident = next(i for i in INCIDENTS if not any(e.metric.startswith("cpu") for e in i.metrics))
    output, _, calls = _ask(registry, f"{incident.service} 报错是不是因为 CPU 打满了？")
    _assert_grounded(output, calls)
    quiet = [c for c in output.claims if c.claim_type == "negative_observation" and "cpu" in c.claim_text.lower()]
    assert quiet, [c.claim_text for c in output.claims]
    assert output.claims[0] is quiet[0]
    assert quiet[0].evidence_bindings[0].raw_path.endswith(".summary")


@pytest.mark.parametrize("service", HEALTHY)
def test_a_healthy_service_yields_only_negative_observations(demo, service: str) -> None:
    _, registry = demo
    output, _, calls = _ask(registry, f"{service} 最近一小时有什么问题")
    _assert_grounded(output, calls)
    assert output.claims and any(c.claim_type == "negative_observation" for c in output.claims)
    # Besides them, at most the change records of the window, as observations (mentioned, not blamed).
    others = [c for c in output.claims if c.claim_type != "negative_observation"]
    assert all(c.claim_type == "observation" and [b.tool_name for b in c.evidence_bindings] == ["query_changes"]
               for c in others), [c.claim_text for c in others]
    assert not any("回滚" in a.text for a in output.recommended_actions)
    assert output.hypotheses == []
    assert all(not a.requires_human_confirmation for a in output.recommended_actions)


INCIDENT_FILES = sorted((DEFAULT_ESTATE_DIR / "incidents").glob("*.json"))
CHANGE_WINDOW_MIN = 60  # "just before": within the hour before the onset (embedded_causes.CHANGE_BEFORE_ONSET_MIN)


def _incident(path: Path):
    return next(i for i in INCIDENTS if i.id == json.loads(path.read_text(encoding="utf-8"))["id"])


@pytest.mark.parametrize("path", INCIDENT_FILES, ids=[p.stem for p in INCIDENT_FILES])
@pytest.mark.parametrize("question", ["为什么 {service} 出问题了?", "{service} 最近一小时有什么异常，原因是什么?"])
def test_every_incident_is_diagnosed_from_this_runs_evidence_only(demo, path: Path, question: str) -> None:
    incident = _incident(path)
    _, registry = demo
    output, _, calls = _ask(registry, question.format(service=incident.service))
    _assert_grounded(output, calls)
    tools = {i.tool_name for i in calls.invocations.values()}
    assert {"query_metrics", "query_logs", "query_changes", "lookup_knowledge"} <= tools
    assert output.claims
    # Runbooks are guidance: they shape the next steps, never a claim.
    assert not any(b.tool_name == "lookup_knowledge" for c in output.claims for b in c.evidence_bindings)
    assert any("runbooks/" in a.text for a in output.recommended_actions)
    assert not any("未查询变更记录" in m.text for m in output.missing_info)  # changes were queried

    change_claims = [c for c in output.claims if c.evidence_bindings[0].tool_name == "query_changes"]
    causes = [c for c in change_claims if c.claim_type == "root_cause"]
    before = [ch for ch in incident.changes if -CHANGE_WINDOW_MIN < ch.offset_minutes <= 0 and not ch.service]
    if before and causes:
        # A change linked to the anomaly (it came first AND its record shares a distinctive token
        # with the error lines) is the root cause, citing both ends and the onset.
        assert len(causes) == 1 and causes[0].support_level == "indirect"
        paths = [(b.tool_name, b.raw_path) for b in causes[0].evidence_bindings]
        assert paths[0][0] == "query_changes" and before[-1].summary in causes[0].evidence_bindings[0].evidence_excerpt
        assert paths[1][0] == "query_logs" and paths[1][1].startswith("hits[")
        # The effect's onset (or, for a series whose onset has no ref of its own, its cited level).
        assert any(tool == "query_metrics" and (path.endswith(".onset") or ".points[" in path) for tool, path in paths)
        # It says the link: the shared token, and the two instants (the change's, the onset's).
        change_at = causes[0].evidence_bindings[0].evidence_excerpt.split(" ")[0]
        assert "很可能" in causes[0].claim_text and change_at in causes[0].claim_text
        assert any(said in causes[0].claim_text for said in ("都出现", "变更内容提到", "变更后才开始出现"))
        assert "开始升高（约 " in causes[0].claim_text or "首次出现（" in causes[0].claim_text
        assert any("回滚" in a.text and a.requires_human_confirmation for a in output.recommended_actions)
    elif before:
        # The change recorded just before the onset is an observation citing its change record…
        assert len(change_claims) == 1 and change_claims[0].claim_type == "observation"
        binding = change_claims[0].evidence_bindings[0]
        assert binding.raw_path.startswith("changes[") and before[-1].summary in binding.evidence_excerpt
        assert before[-1].summary in change_claims[0].claim_text
        # …and that it may explain the anomaly is only a hypothesis; no rollback is advised.
        linked = [h for h in output.hypotheses if change_claims[0].claim_id in h.related_claim_ids]
        assert linked and "可能" in linked[0].text and "不能证明因果" in linked[0].text
        assert not any("回滚" in text for text in [a.text for a in output.recommended_actions] + [h.text for h in output.hypotheses])
    else:
        assert change_claims == []
        assert any(m.tool_name == "query_changes" and incident.service in m.text for m in output.missing_info)


def test_the_demos_linked_releases_become_root_causes_that_pass_the_gatekeeper(demo) -> None:
    """Keeps the test above meaningful: some demo release is linked by its record's words, and
    the gatekeeper accepts every end it cites, the series onset ref included (read as metric_onset)."""
    from services.gatekeeper.engine import check_executor_output

    _, registry = demo
    linked = 0
    for incident in INCIDENTS:
        output, text, calls = _ask(registry, f"为什么 {incident.service} 出问题了?")
        causes = [c for c in output.claims if c.claim_type == "root_cause" and c.evidence_bindings[0].tool_name == "query_changes"]
        if not causes:
            continue
        linked += 1
        check = check_executor_output(calls.run_id, text, list(calls.invocations.values()))
        assert check.verdict_ceiling == "PASS", check.gatekeeper_result.errors
        cited = {(e.raw_path, e.facts.kind if e.facts else None) for e in check.verified_evidence if e.claim_id == causes[0].claim_id}
        assert len(cited) == len(causes[0].evidence_bindings)
        assert {kind for _, kind in cited} in ({"change", "log_line", "metric_onset"}, {"change", "log_line", "metric_point"})
    assert linked


@pytest.mark.parametrize("service", HEALTHY)
def test_a_healthy_service_with_a_routine_change_mentions_it_and_does_not_blame_it(demo, service: str) -> None:
    _, registry = demo
    output, _, calls = _ask(registry, f"为什么 {service} 最近一小时出问题了?")
    _assert_grounded(output, calls)
    assert not any(c.claim_type == "root_cause" for c in output.claims)
    assert any(c.claim_type == "negative_observation" for c in output.claims)
    changes = [c for c in output.claims if any(b.tool_name == "query_changes" and b.raw_path != "summary" for b in c.evidence_bindings)]
    read = [json.loads(i.agent_result) for i in calls.invocations.values() if i.tool_name == "query_changes"]
    if any(r.get("changes") for r in read):
        assert len(changes) == 1 and changes[0].claim_type == "observation"  # mentioned …
    assert output.hypotheses == [] and not any("回滚" in a.text for a in output.recommended_actions)  # … not blamed
    assert not any("lookup_knowledge" == i.tool_name for i in calls.invocations.values())  # nothing to look up


def test_the_demo_has_a_healthy_service_whose_change_falls_in_the_window() -> None:
    """Keeps the test above meaningful: a change in the window, and still no claim about it."""
    assert any(c.minutes_ago < 60 for s in DESCRIPTION.services if s.name in HEALTHY for c in s.changes)


def test_an_unknown_service_is_a_no_hit_not_a_fault(demo) -> None:
    _, registry = demo
    output, _, calls = _ask(registry, "never-deployed-svc 怎么了")
    _assert_grounded(output, calls)
    assert output.claims and all(c.claim_type == "negative_observation" for c in output.claims)
    assert {b.raw_path for c in output.claims for b in c.evidence_bindings} == {"summary"}
    assert len(output.claims) <= 2


def test_error_invocations_become_missing_info_not_claims(demo) -> None:
    _, registry = demo
    service = INCIDENTS[0].service
    plan = Plan(
        services=[service],
        window=TimeWindow(start="2026-11-29T10:00:00Z", end="2026-11-29T11:00:00Z"),
        steps=[
            PlannedToolCall(tool_name="query_logs", arguments={"service": service, "start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z", "level": "LOUD"}),
            PlannedToolCall(tool_name="query_metrics", arguments={"service": service, "start": "2026-11-29T10:00:00Z", "end": "2026-11-29T11:00:00Z"}),
        ],
    )
    calls = InMemoryInvocations(registry)
    output = ExecutorEvidenceV2.model_validate_json(EmbeddedExecutorAgent().run(plan, calls, f"{service} 怎么了"))
    failed = [i for i in calls.invocations.values() if i.lifecycle == "ERROR"]
    assert len(failed) == 1
    gaps = [m for m in output.missing_info if m.tool_name == "query_logs"]
    assert gaps and "LOUD" in gaps[0].text
    cited = {b.source_invocation_id for c in output.claims for b in c.evidence_bindings}
    assert failed[0].invocation_id not in cited
    assert output.claims  # the metrics still speak
    _assert_grounded(output, calls)


def test_a_call_tool_that_raises_does_not_crash_the_engine(demo) -> None:
    def broken(tool_name: str, arguments: dict) -> ToolInvocation:
        raise ConnectionError("invocation store unavailable")

    plan = EmbeddedPlanner().plan(f"{INCIDENTS[0].service} 怎么了", ANCHOR)
    output = ExecutorEvidenceV2.model_validate_json(EmbeddedExecutorAgent().run(plan, broken, "q"))
    assert output.claims == []
    assert any("invocation store unavailable" in m.text for m in output.missing_info)


def test_no_service_in_the_query_gives_no_claims_and_says_why(demo) -> None:
    _, registry = demo
    output, _, calls = _ask(registry, "为什么 CPU 这么高?")
    assert calls.invocations == {} and output.claims == []
    assert any("服务" in m.text for m in output.missing_info)


def test_a_synthetic_estate_never_seen_by_the_code_is_diagnosed_the_same_way(tmp_path: Path) -> None:
    """Proves the logic is not keyed to the demo data: new names, a new metric, new messages."""
    estate = tmp_path / "estate"
    (estate / "incidents").mkdir(parents=True)
    (estate / "services.json").write_text(json.dumps({
        "history_minutes": 90,
        "metrics": {
            "ledger_backlog_items": {"unit": "count", "decimals": 0},
            "cpu_usage_percent": {"unit": "percent", "decimals": 1, "max": 100},
        },
        "services": [
            {"name": "zephyr-ledger", "hosts": ["zl-a1"],
             "metrics": {"ledger_backlog_items": {"baseline": 40, "noise": 4}, "cpu_usage_percent": {"baseline": 30, "noise": 2}},
             "logs": [{"level": "INFO", "rate_per_min": 2, "template": "ledger batch committed seq={int:1:99999}"}]},
            {"name": "quiet-hollow", "hosts": ["qh-b2"],
             "metrics": {"ledger_backlog_items": {"baseline": 12, "noise": 2}, "cpu_usage_percent": {"baseline": 20, "noise": 2}},
             "logs": [{"level": "INFO", "rate_per_min": 2, "template": "heartbeat ok"}]},
        ],
    }))
    (estate / "incidents" / "stall.json").write_text(json.dumps({
        "id": "SYN-1", "service": "zephyr-ledger", "kind": "ledger_stall", "start_offset_minutes": 20, "duration_minutes": 40,
        "metrics": [{"metric": "ledger_backlog_items", "shape": "ramp", "target": 2600, "ramp_minutes": 5, "noise": 60}],
        "logs": [{"level": "ERROR", "rate_per_min": 2, "template": "ledger commit rejected: sequence gap detected expected={int:1000:2000} got={int:3000:4000}"}],
        "changes": [
            {"offset_minutes": -70, "kind": "deploy", "summary": "ledger schema v7", "author": "old.hand"},
            {"offset_minutes": -4, "kind": "flag", "summary": "commit protocol switched to batch-v3", "author": "new.hand"},
        ],
    }))
    demo_text = "".join(p.read_text(encoding="utf-8") for p in DEFAULT_ESTATE_DIR.rglob("*.json"))
    assert "zephyr-ledger" not in demo_text and "ledger_backlog_items" not in demo_text

    anchor = datetime(2027, 3, 4, 5, 6, tzinfo=UTC)
    url = f"sqlite:///{tmp_path / 'synthetic.db'}"
    load_estate(url, estate, anchor=anchor, seed=3)
    registry = build_default_registry(build_sql_backends(url))

    output, _, calls = _ask(registry, "zephyr-ledger 过去一小时为什么处理不过来?", now=anchor)
    _assert_grounded(output, calls)
    peak, unit = _window_max(url, "zephyr-ledger", "ledger_backlog_items", anchor)
    backlog = [c for c in output.claims if f"ledger_backlog_items={format_value(peak, unit)}" in c.evidence_bindings[0].evidence_excerpt]
    assert backlog and backlog[0].claim_type == "symptom" and format_value(peak, unit) in backlog[0].claim_text
    logs = [c for c in output.claims if c.evidence_bindings[0].tool_name == "query_logs"]
    assert logs and "ledger commit rejected: sequence gap detected" in logs[0].claim_text
    assert not any("cpu_usage_percent" in c.claim_text for c in output.claims if c.claim_type == "symptom")
    # The change four minutes before the onset is the cause: the error lines it cites are a new kind
    # that started after it (none in the read before); the one seventy minutes before is not blamed.
    read = [json.loads(i.agent_result) for i in calls.invocations.values() if i.tool_name == "query_changes"]
    assert [r["total_matches"] for r in read] == [2]  # both were read
    changes = [c for c in output.claims if c.evidence_bindings[0].tool_name == "query_changes"]
    assert [c.claim_type for c in changes] == ["root_cause"]
    assert "flag zephyr-ledger by new.hand: commit protocol switched to batch-v3" in changes[0].evidence_bindings[0].evidence_excerpt
    assert "变更后才开始出现" in changes[0].claim_text and "sequence gap detected" in changes[0].claim_text
    assert not any("ledger schema v7" in c.claim_text for c in output.claims)

    healthy, _, calls = _ask(registry, "quiet-hollow 过去一小时正常吗?", now=anchor)
    _assert_grounded(healthy, calls)
    assert healthy.claims and {c.claim_type for c in healthy.claims} == {"negative_observation"}


def test_a_second_round_with_deduped_runbook_hits_still_points_to_the_runbook(demo) -> None:
    """Round 1 of a retry repeats the lookup: its hits are deduped (no text, no refs), yet the
    next steps can still name the runbook; they never become claims."""
    from services.executor.tools.knowledge_dedupe import knowledge_hit_keys, mark_deduped

    _, registry = demo
    incident = next(i for i in INCIDENTS if any("disk" in e.metric for e in i.metrics))
    query = f"{incident.service} 磁盘满了，为什么?"
    seen: set[str] = set()

    class DedupingRegistry:
        def invoke(self, tool_name: str, arguments: dict):
            result = mark_deduped(registry.invoke(tool_name, arguments), seen)
            seen.update(knowledge_hit_keys(result))
            return result

    first, _, _ = _ask(DedupingRegistry(), query)  # type: ignore[arg-type]
    second, _, calls = _ask(DedupingRegistry(), query)  # type: ignore[arg-type]
    lookup = next(i for i in calls.invocations.values() if i.tool_name == "lookup_knowledge")
    assert lookup.evidence_status == "NO_EVIDENCE" and [r.raw_path for r in evidence_view(lookup).refs()] == ["summary"]
    _assert_grounded(second, calls)
    pointers = [a.text for a in second.recommended_actions if "runbooks/disk-full.md" in a.text]
    assert pointers and any("runbooks/disk-full.md" in a.text for a in first.recommended_actions)
    assert [c.claim_text for c in second.claims] == [c.claim_text for c in first.claims]


class _ReadSeries:
    """A metrics backend answering as the Prometheus reader does: golden signals with a top
    instance, more series than one call shows, and some it never read."""

    source_name = "prometheus:http://127.0.0.1:9090"

    def __init__(self, now: datetime) -> None:
        self.now = now

    def query_range(self, service, metric, start, end, step_seconds):
        stamps = [end - timedelta(minutes=59 - k) for k in range(60)]

        def series(values, name, unit, **extra):
            return MetricSeries(name, unit, list(zip(stamps, values)), **extra)

        burn = [0.05 + (k % 3) * 0.002 if not 20 <= k < 40 else 0.9 + (k % 2) * 0.01 for k in range(60)]
        top = Contributor("pod", f"{service}-7f9c", stamps[30], 0.91, 2)
        flat = [[3.0 + (k % 4) * 0.01 for k in range(60)] for _ in range(12)]
        return [
            series(burn, "process_cpu_seconds_total:rate", "cores", signal="cpu", top=top),
            *(series(values, f"queue_{i:02d}_depth", "") for i, values in enumerate(flat)),
            MetricSeries("never_read_total:rate", "per_second", [], examined=False),
        ]


class _NoLogs:
    source_name = "loki:http://127.0.0.1:3100"

    def query_range(self, service, start, end, levels, contains, limit):
        return LogQueryResult(total_matches=0)


def test_a_read_series_states_its_onset_its_end_and_its_hot_instance_and_what_was_not_examined() -> None:
    """Prometheus and Loki only (changes and runbooks disabled), as a real deployment may be."""
    registry = build_default_registry(ToolBackends(
        metrics=_ReadSeries(ANCHOR), logs=_NoLogs(), disabled=frozenset({"query_changes", "lookup_knowledge"})))
    output, _, calls = _ask(registry, "ledger-api 最近一小时 CPU 为什么高？")
    # No source is configured for changes or runbooks: never called, and nothing said missing.
    assert {i.tool_name for i in calls.invocations.values()} == {"query_metrics", "query_logs"}
    assert not any("调用" in m.text for m in output.missing_info), output.missing_info
    _assert_grounded(output, calls)
    claim = next(c for c in output.claims if "process_cpu_seconds_total:rate" in c.claim_text and "升高" in c.claim_text)
    assert "约自" in claim.claim_text and "已于" in claim.claim_text and "恢复" in claim.claim_text, claim.claim_text
    assert "峰值时 pod=ledger-api-7f9c 最高" in claim.claim_text, claim.claim_text
    paths = {b.raw_path for b in claim.evidence_bindings}
    assert {p.split(".", 1)[1] for p in paths if p.startswith("series[0].")} >= {"onset", "end", "top"}
    assert any("另有 2 条指标序列未检查" in m.text and "never_read_total:rate" in m.text for m in output.missing_info), \
        [m.text for m in output.missing_info]



class _ShortSeries:
    """A metrics backend whose series hold three points each (a scrape that just started, a short
    retention): (name, unit, values) as given."""

    source_name = "prometheus:http://127.0.0.1:9090"

    def __init__(self, *series: tuple[str, str, list[float]]) -> None:
        self.series = series

    def query_range(self, service, metric, start, end, step_seconds):
        stamps = [end - timedelta(minutes=12 - k) for k in range(3)]
        return [MetricSeries(name, unit, list(zip(stamps, values))) for name, unit, values in self.series]


def _ask_short(query: str, *series: tuple[str, str, list[float]]) -> tuple[ExecutorEvidenceV2, InMemoryInvocations]:
    registry = build_default_registry(ToolBackends(
        metrics=_ShortSeries(*series), logs=_NoLogs(), disabled=frozenset({"query_changes", "lookup_knowledge"})))
    output, _, calls = _ask(registry, query)
    _assert_grounded(output, calls)
    # The gap is said whatever the level: too few points for a trend.
    assert any("只有 3 个数据点" in m.text for m in output.missing_info), output.missing_info
    return output, calls


def test_a_flat_series_too_short_for_a_trend_states_its_level_as_quiet() -> None:
    output, _ = _ask_short("tally-svc 最近一小时 CPU 为什么这么高？", ("cpu_usage_percent", "percent", [42.0, 42.0, 42.0]))
    [claim] = [c for c in output.claims if "cpu_usage_percent" in c.claim_text]
    assert claim.claim_type == "negative_observation", claim
    assert "共 3 个数据点" in claim.claim_text and "最高为 42.0%" in claim.claim_text, claim.claim_text
    assert "未见明显升高" in claim.claim_text and "无法判断趋势" in claim.claim_text, claim.claim_text
    assert [b.raw_path for b in claim.evidence_bindings] == ["series[0].summary"]


def test_a_short_series_past_the_abnormal_level_is_an_anomaly_without_an_onset() -> None:
    output, _ = _ask_short("tally-svc 最近一小时内存为什么这么高？",
                           ("cpu_usage_percent", "percent", [42.0, 42.0, 42.0]),
                           ("memory_used_percent", "percent", [91.0, 95.5, 93.0]))
    memory = next(c for c in output.claims if "memory_used_percent" in c.claim_text)
    assert memory.claim_type == "symptom", memory
    assert "最高为 95.5%" in memory.claim_text and "无法判断何时开始升高" in memory.claim_text, memory.claim_text
    assert [b.raw_path for b in memory.evidence_bindings] == ["series[1].points[1]", "series[1].summary"]
    assert not any("cpu_usage_percent" in c.claim_text for c in output.claims), output.claims


def test_a_short_series_whose_range_shows_neither_is_stated_as_read_never_as_quiet() -> None:
    # 2 to 5: no rise over its median, but a rise over its minimum: three points cannot show it quiet.
    output, _ = _ask_short("tally-svc 最近一小时正常吗？", ("queue_depth", "", [2.0, 4.0, 5.0]))
    [claim] = [c for c in output.claims if "queue_depth" in c.claim_text]
    assert "最高为 5" in claim.claim_text and "无法判断趋势" in claim.claim_text, claim.claim_text
    assert "未见明显升高" not in claim.claim_text, claim.claim_text
