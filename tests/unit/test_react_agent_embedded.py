"""The embedded single-ReAct agent over the loaded demo estate, with every call persisted by the
real ToolRunner into a SQLite audit database, and its Draft checked by the real EvidenceGuard."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.answer_guard import check_answer
from services.executor.draft_repair import repair_references
from services.executor.estate import load_estate, read_estate_description
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.servicer import ToolRunner
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.registry import ToolRegistry, build_default_registry
from services.gatekeeper.evidence_guard import guard_draft
from services.verifier.draft_grounding import ground_draft
from services.verifier.embedded_semantic_guard import review_draft
from shared.config import ExecutorSettings
from shared.core import guard_violations as codes
from shared.core.agent_stop_reasons import STEP_BUDGET_EXHAUSTED
from shared.core.direct_answer import MOST_LIKELY_CAUSE, NOT_SUPPORTED, NOTHING_FOUND, OPENINGS, UNKNOWN, gist
from shared.core.evidence_view import evidence_view
from shared.core.question_intent import classify_question
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.migrate import upgrade
from shared.db.run_store import RunStore
from shared.draft_semantics import repair_changes_semantics

REPO_ROOT = Path(__file__).resolve().parents[2]
ESTATE_DIR = REPO_ROOT / "demo" / "estate"
ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
DESCRIPTION = read_estate_description(ESTATE_DIR)
INCIDENTS = DESCRIPTION.incidents
HEALTHY = [s.name for s in DESCRIPTION.services if s.name not in {i.service for i in INCIDENTS}]
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> ToolRegistry:
    url = f"sqlite:///{tmp_path_factory.mktemp('estate') / 'estate.db'}"
    load_estate(url, ESTATE_DIR, anchor=ANCHOR)
    return build_default_registry(build_backends(ExecutorSettings(estate_database_url=url)))


@pytest.fixture()
def stores(tmp_path):
    url = f"sqlite:///{tmp_path / 'attest.db'}"
    upgrade(url)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    yield RunStore(factory), InvocationStore(factory)
    engine.dispose()


@pytest.fixture()
def ask(registry, stores):
    """`ask(query, max_steps=20)` → (AgentRun, run_id, persisted invocations of the run)."""
    runs, invocations = stores

    def run(query: str, max_steps: int = 20):
        run_id = runs.create_run(runs.create_session("test"), query, "SINGLE_REACT")
        result = EmbeddedReactAgent(clock=lambda: ANCHOR).run(
            query, ToolRunner(invocations, registry, run_id, 0), max_steps=max_steps,
        )
        return result, run_id, invocations.list_for_run(run_id)

    return run


@pytest.mark.parametrize("incident", INCIDENTS, ids=[i.kind for i in INCIDENTS])
def test_an_incident_question_gets_a_concluded_draft_that_passes_evidence_guard(ask, incident) -> None:
    result, run_id, persisted = ask(f"为什么 {incident.service} 出问题了？")

    assert result.stop_reason == ""
    draft = result.draft
    assert draft is not None and draft.conclusion is not None
    guard = guard_draft(run_id, draft, persisted)
    assert guard.passed, guard.violations
    # Every persisted call carries the agent's own tool_call_id, reported in call order.
    assert result.tool_call_ids == [inv.tool_call_id for inv in persisted]
    assert len(set(result.tool_call_ids)) == len(persisted) and all(persisted_id for persisted_id in result.tool_call_ids)
    # The conclusion opens with the direct answer to a why-question: a cause the
    # evidence links, or 「原因尚未由证据确认」 and the strongest lead; then what it rests on, in
    # the analyses' own words, about the service asked about, and no more.
    text = draft.conclusion.text
    assert text.startswith(OPENINGS["why"]), text
    by_id = {a.analysis_id: a for a in draft.analyses}
    referenced = [by_id[ref] for ref in draft.conclusion.analysis_refs]
    assert referenced and all(a.kind == "NORMAL" for a in referenced)
    for analysis in referenced:
        assert gist(analysis.text).rstrip("…") in text
    assert incident.service in text
    assert not re.search(r"根因是|原因是|由于|导致", text)
    # Without a linked cause, the limitations say that the root cause is not confirmed.
    unconfirmed = any("根因" in limitation and "未" in limitation for limitation in draft.limitations)
    assert unconfirmed == (not text.startswith(MOST_LIKELY_CAUSE))
    # Kinds follow the cited calls' evidence status.
    status = {inv.tool_call_id: inv.evidence_status for inv in persisted}
    for analysis in draft.analyses:
        wanted = "EVIDENCE_FOUND" if analysis.kind == "NORMAL" else "NO_EVIDENCE"
        assert {status[t] for t in analysis.tool_call_ids} == {wanted}, analysis
    # Actions reference the analyses and anything changing the system needs a human.
    assert draft.action_plan
    for item in draft.action_plan:
        assert item.analysis_refs and set(item.analysis_refs) <= set(by_id)
        # (a check of a policy, 「检查日志轮转与清理策略」, changes nothing)
        if re.search(r"回滚|重启|扩容|调整|调高|调大|清理|删除", item.text) and not item.text.startswith(("检查", "查看", "核对")):
            assert item.requires_human_confirmation, item


def test_progress_snapshot_states_only_facts_of_verified_calls_in_chinese(ask) -> None:
    incident = INCIDENTS[0]
    result, _, persisted = ask(f"为什么 {incident.service} 出问题了？")

    verified = [inv for inv in persisted if inv.lifecycle == "READY" and inv.evidence_status in ("EVIDENCE_FOUND", "NO_EVIDENCE")]
    assert result.progress.completed_checks == len(verified) > 0
    facts = result.progress.observed_facts
    assert 0 < len(facts) <= 8
    ref_texts = " ".join(ref.text for inv in verified for ref in evidence_view(inv).refs())
    for fact in facts:
        assert CJK.search(fact) and len(fact) <= 200, fact
        # Every timestamp a fact names is one the evidence refs state.
        for stamp in re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fact):
            assert stamp in ref_texts, (stamp, fact)
        assert "正常" not in fact and "根因" not in fact


@pytest.mark.parametrize("service", HEALTHY)
def test_a_healthy_service_gets_a_conclusion_that_says_what_was_checked(ask, service) -> None:
    """Healthy is an answer. Nothing abnormal → 「在所查范围内未发现异常（scope）」,
    the scope naming the service, the metrics and window read, the log levels and the change window;
    every check is an Analysis (NORMAL for a series read in full, NEGATIVE_OBSERVATION for a search
    that matched nothing), the conclusion cites them, and nothing is to be acted on."""
    result, run_id, persisted = ask(f"{service} 最近一小时有什么问题")

    assert result.stop_reason == "" and result.draft is not None
    draft = result.draft
    assert draft.conclusion is not None
    text = draft.conclusion.text
    assert text.startswith(NOTHING_FOUND), text
    assert "健康" not in text and "排除" not in text
    metrics = next(inv for inv in persisted if inv.tool_name == "query_metrics")
    assert service in text and metrics.request["start"] in text and metrics.request["end"] in text
    assert "ERROR/WARN 日志" in text and "变更记录" in text
    kinds = {inv.tool_call_id: inv.evidence_status for inv in persisted}
    for analysis in draft.analyses:
        wanted = "EVIDENCE_FOUND" if analysis.kind == "NORMAL" else "NO_EVIDENCE"
        assert {kinds[t] for t in analysis.tool_call_ids} == {wanted}, analysis
    # Every metric the scope names is stated by a cited NORMAL analysis with its maximum and median.
    cited = [a for a in draft.analyses if a.analysis_id in draft.conclusion.analysis_refs]
    quiet = [a for a in cited if a.kind == "NORMAL" and "未见明显升高" in a.text]
    assert quiet and all("最高为" in a.text and "中位数" in a.text for a in quiet)
    assert not draft.action_plan
    assert all(not item.requires_human_confirmation for item in draft.action_plan)
    guard = guard_draft(run_id, draft, persisted)
    assert guard.passed and not guard.violations
    assert check_answer(classify_question(f"{service} 最近一小时有什么问题"), draft, guard.snapshot) == []
    assert ground_draft(f"{service} 最近一小时有什么问题", draft, guard.snapshot) == []
    assert review_draft(draft, guard.snapshot).verdict == "SUPPORTED"


@pytest.mark.parametrize("service", HEALTHY)
def test_a_false_hypothesis_about_a_healthy_service_is_answered_evidence_does_not_support(ask, service) -> None:
    query = f"{service} 是不是内存泄漏了？"
    result, run_id, persisted = ask(query)

    draft = result.draft
    assert draft is not None and draft.conclusion is not None
    guard = guard_draft(run_id, draft, persisted)
    assert guard.passed
    text = draft.conclusion.text
    if text.startswith(NOT_SUPPORTED):  # the service has a memory series, read quiet
        assert "正常" in text and "是：" not in text
    else:  # no memory series to read: the answer says what is missing, never 是
        assert text.startswith(UNKNOWN), text
    assert check_answer(classify_question(query), draft, guard.snapshot) == []
    assert ground_draft(query, draft, guard.snapshot) == []


def test_an_unknown_service_gets_only_negative_observations_of_its_empty_queries(ask) -> None:
    result, run_id, persisted = ask("never-deployed-svc 怎么了")

    draft = result.draft
    assert draft is not None and draft.conclusion is None
    assert draft.analyses and {a.kind for a in draft.analyses} == {"NEGATIVE_OBSERVATION"}
    assert {inv.evidence_status for inv in persisted} == {"NO_EVIDENCE"}
    assert not guard_draft(run_id, draft, persisted).violations
    assert all("0 条" in fact or "0 series" in fact for fact in result.progress.observed_facts)


def test_no_service_in_the_question_makes_no_tool_call(ask) -> None:
    result, _, persisted = ask("为什么 CPU 这么高？")

    assert persisted == [] and result.tool_call_ids == []
    assert result.draft is not None and result.draft.conclusion is None
    assert result.draft.analyses == [] and result.draft.missing_context
    assert "服务" in result.draft.missing_context[0]
    assert result.progress.observed_facts == [] and result.progress.completed_checks == 0
    assert result.stop_reason == ""


def test_the_step_bound_is_a_controlled_stop_with_the_progress_so_far(ask) -> None:
    incident = INCIDENTS[0]
    result, _, persisted = ask(f"为什么 {incident.service} 出问题了？", max_steps=2)

    assert result.stop_reason == STEP_BUDGET_EXHAUSTED
    assert result.draft is None
    assert len(persisted) == 2 and result.tool_call_ids == [inv.tool_call_id for inv in persisted]
    assert result.progress.completed_checks == 2 and len(result.progress.observed_facts) == 2


def test_embedded_repair_restores_mangled_references_without_changing_semantics(ask) -> None:
    """A Draft whose ids were mangled (case/whitespace of an analysis ref, a truncated tool call
    id) fails EvidenceGuard; the embedded repair, from the violations only, makes it pass."""
    result, run_id, persisted = ask(f"为什么 {INCIDENTS[0].service} 出问题了？")
    original = result.draft
    assert original is not None and original.conclusion is not None

    broken = original.model_copy(deep=True)
    first = broken.analyses[0]
    real_id = first.tool_call_ids[0]
    first.tool_call_ids = [real_id[-9:], *first.tool_call_ids[1:]]  # the model kept only the first id's tail
    broken.conclusion.analysis_refs = [f" {ref.upper()}" for ref in broken.conclusion.analysis_refs]
    guard = guard_draft(run_id, broken, persisted)
    assert not guard.passed
    assert {v.code for v in guard.violations} >= {codes.TOOL_REF_NOT_FOUND, codes.REPORT_REF_UNKNOWN}

    repaired = repair_references(broken, guard.violations, [inv.tool_call_id for inv in persisted])

    assert repair_changes_semantics(broken, repaired) is None
    assert repaired.analyses[0].tool_call_ids == original.analyses[0].tool_call_ids
    assert repaired.conclusion.analysis_refs == original.conclusion.analysis_refs
    assert guard_draft(run_id, repaired, persisted).passed
    assert repaired == original


def test_embedded_repair_leaves_what_it_cannot_be_sure_of(ask) -> None:
    result, run_id, persisted = ask(f"为什么 {INCIDENTS[0].service} 出问题了？")
    broken = result.draft.model_copy(deep=True)
    broken.analyses[0].tool_call_ids = ["call_"]  # a prefix of every call of the run: ambiguous
    guard = guard_draft(run_id, broken, persisted)

    repaired = repair_references(broken, guard.violations, [inv.tool_call_id for inv in persisted])

    assert repaired == broken
    assert not guard_draft(run_id, repaired, persisted).passed
