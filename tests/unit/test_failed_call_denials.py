"""No path turns a failed evidence call into 「未发现异常」 — in any wording.

- the vocabulary (`shared.core.health_denials`): denials and verdicts on health, paraphrased, are
  caught; findings about one series, searches that returned nothing, and our own 「无法确认」 are not;
- the embedded single-ReAct Draft over the demo estate with one backend refusing: the conclusion
  opens 「无法确认：<日志/指标>查询失败…」 (or reports the anomaly the other backends show), the
  completed checks stay as Analyses, no text denies anything, the backend's error text is not
  shown — and the Draft passes EvidenceGuard, the answer guard and the embedded SemanticGuard;
- the answer guard refuses a paraphrased denial in any released text while a call failed;
- the model composer, given a lying model over real HTTP that slips a denial into any section
  while a call failed, falls back to the template text.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.answer_guard import OPENING_CONTRADICTED, check_answer
from services.composer.servicer import build_composer
from services.executor.estate import load_estate
from services.executor.react_agent import EmbeddedReactAgent
from services.executor.servicer import ToolRunner
from services.executor.tools.backend_factory import build_backends
from services.executor.tools.backends import BackendError
from services.executor.tools.registry import build_default_registry
from services.gatekeeper.evidence_guard import guard_draft
from services.verifier.embedded_semantic_guard import review_draft
from shared.config import ExecutorSettings, ModelSettings
from shared.core.direct_answer import FOUND, NOTHING_FOUND
from shared.core.health_denials import denials
from shared.core.output_check import check_composed
from shared.core.question_intent import classify_question
from shared.core.templates import compose_answer, template_answer
from shared.draft_contract import Draft, VerifiedSnapshot
from shared.failed_calls import failed_calls
from shared.model_client import OpenAIChatClient
from tests.scripted_model_server import ScriptedModelServer, completion
from tests.unit.test_failed_calls import _composer_input, _failed
from tests.unit.test_react_agent_embedded import stores  # noqa: F401 - a pytest fixture

REPO_ROOT = Path(__file__).resolve().parents[2]
ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
REFUSED = "loki query_range: request failed: ConnectError: [Errno 111] Connection refused"

DENYING = [
    "未发现异常", "当前证据未显示异常", "payment-service 没有异常", "无异常", "运行正常", "各项指标均正常",
    "一切正常", "服务健康", "没有发现任何问题", "未见异常", "可以排除数据库问题", "状态正常", "都正常",
    "没有报错", "正常运行中", "The service is healthy", "no anomalies found",
]
NOT_DENYING = [
    "cpu_usage_percent 最高为 31.2%，中位数 25.1%，未见明显升高。",
    "payment-service 在 10:00 至 11:00 期间没有 ERROR/WARN 日志（0 matching lines）。",
    "无法确认：日志查询失败，不能据此判断所查范围内是否有异常",
    "已于 10:30 恢复正常", "不正常", "检查健康检查端点", "范围之外的问题无法排除", "未见错误率上升",
    "另有 1 项异常说法未能核实", "无法连接后端", "没有证据显示「CPU 使用率」",
]


@pytest.mark.parametrize("text", DENYING)
def test_a_denial_in_any_wording_is_caught(text):
    assert denials(text), text


@pytest.mark.parametrize("text", NOT_DENYING)
def test_a_finding_about_what_was_read_is_no_denial(text):
    assert denials(text) == [], text


# --- the embedded single-ReAct Draft ---------------------------------------------------------------


class _Refusing:
    """A backend whose every query is refused (the registry records an ERROR invocation)."""

    def __getattr__(self, name: str):
        def refuse(*args, **kwargs):
            raise BackendError(REFUSED)
        return refuse


@pytest.fixture(scope="module")
def estate_backends(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('estate') / 'estate.db'}"
    load_estate(url, REPO_ROOT / "demo" / "estate", anchor=ANCHOR)
    return build_backends(ExecutorSettings(estate_database_url=url))


@pytest.fixture()
def ask(estate_backends, stores):  # noqa: F811 - the imported fixture
    """`ask(query, refused_tool)` → (Draft, run_id, persisted invocations)."""
    runs, invocations = stores

    def run(query: str, refused: str | None):
        field = {"query_logs": "logs", "query_metrics": "metrics"}.get(refused or "")
        backends = dataclasses.replace(estate_backends, **{field: _Refusing()}) if field else estate_backends
        run_id = runs.create_run(runs.create_session("test"), query, "SINGLE_REACT")
        result = EmbeddedReactAgent(clock=lambda: ANCHOR).run(
            query, ToolRunner(invocations, build_default_registry(backends), run_id, 0), max_steps=20)
        assert result.stop_reason == "" and result.draft is not None
        return result.draft, run_id, invocations.list_for_run(run_id)

    return run


def _shown(draft: Draft) -> list[str]:
    assert draft.conclusion is not None
    return [draft.conclusion.text, *(a.text for a in draft.analyses), *(i.text for i in draft.action_plan),
            *(r.text for r in draft.recommendations), *draft.limitations]


@pytest.mark.parametrize(("refused", "kind"), [("query_logs", "日志查询"), ("query_metrics", "指标查询")])
@pytest.mark.parametrize("query", ["user-service 最近一小时正常吗？", "user-service 为什么报错？",
                                   "user-service 的错误率上升了吗？"])
def test_a_quiet_service_with_a_refused_backend_cannot_be_confirmed_and_says_which_query_failed(
        ask, query, refused, kind):
    quiet, _, _ = ask(query, None)
    assert quiet.conclusion is not None and not quiet.conclusion.text.startswith(f"无法确认：{kind}")

    draft, run_id, persisted = ask(query, refused)
    failed = failed_calls(persisted)
    assert [call.tool_name for call in failed] == [refused]
    assert draft.conclusion is not None
    first, *rest = draft.conclusion.text.split("\n")
    assert first.startswith((f"无法确认：{kind}失败，不能据此", f"原因尚未由证据确认：{kind}失败，不能据此")), first
    # What did complete is said after it and stays shown, each check as an Analysis it cites.
    assert rest and rest[0].startswith("已完成的检查（逐项见分析）：user-service：")
    assert draft.analyses and set(draft.conclusion.analysis_refs) <= {a.analysis_id for a in draft.analyses}
    assert draft.conclusion.analysis_refs
    # Nothing is denied anywhere, and the backend's own error text is not shown.
    shown = _shown(draft)
    assert not [text for text in shown if denials(text)], shown
    assert not any(word in text for text in shown for word in ("ConnectError", "refused", "backend failure"))
    assert draft.limitations[0].startswith(f"{kind}失败，相应的证据没有取得")
    assert not draft.recommendations and not draft.action_plan

    # It is released: every guard before Release passes it.
    guard = guard_draft(run_id, draft, persisted)
    assert guard.passed, guard.violations
    assert check_answer(classify_question(query), draft, guard.snapshot, failed) == []
    review = review_draft(draft, guard.snapshot)
    assert review.verdict == "SUPPORTED", review.reason


def test_the_same_service_answered_whole_is_quiet(ask):
    """The control: with every backend answering, the same question gets 「在所查范围内未发现异常」."""
    draft, _, _ = ask("user-service 最近一小时正常吗？", None)
    assert draft.conclusion is not None and draft.conclusion.text.startswith(NOTHING_FOUND)


def test_an_anomaly_the_other_backend_shows_is_still_reported(ask):
    draft, run_id, persisted = ask("payment-service 正常吗？", "query_logs")
    assert draft.conclusion is not None and draft.conclusion.text.startswith(FOUND), draft.conclusion.text
    guard = guard_draft(run_id, draft, persisted)
    assert guard.passed and check_answer(classify_question("payment-service 正常吗？"), draft, guard.snapshot, failed_calls(persisted)) == []


# --- the answer guard ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["conclusion", "analysis", "recommendation", "limitation"])
@pytest.mark.parametrize("denial", ["各项指标均正常", "payment-service 运行正常", "没有异常", "服务健康"])
def test_the_answer_guard_refuses_a_paraphrased_denial_while_a_call_failed(where, denial):
    draft = {
        "conclusion": {"text": "无法确认：日志查询失败，不能据此判断所查范围内是否有异常。", "analysis_refs": ["a1"]},
        "analyses": [{"analysis_id": "a1", "kind": "NORMAL", "text": "payment-service 的 cpu 最高 31%，未见明显升高。"}],
        "recommendations": [{"text": "确认日志后端可以访问后重新诊断。", "analysis_refs": ["a1"]}],
        "limitations": ["日志查询失败。"],
    }
    if where == "conclusion":
        draft["conclusion"]["text"] += f"\n{denial}。"
    elif where == "analysis":
        draft["analyses"][0]["text"] += f"{denial}。"
    elif where == "recommendation":
        draft["recommendations"][0]["text"] = f"{denial}；如仍有疑虑请重试。"
    else:
        draft["limitations"].append(f"{denial}。")
    lying = Draft.model_validate(draft)
    findings = check_answer(classify_question("payment-service 正常吗？"), lying, VerifiedSnapshot(), [_failed()])
    assert [f.check_id for f in findings] == [OPENING_CONTRADICTED]
    # The rule is about failed calls: once a later round recovered the call, this check is silent.
    assert check_answer(classify_question("payment-service 正常吗？"), lying, VerifiedSnapshot(), [_failed(recovered=True)]) == []


# --- the model composer --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_composer():
    with ScriptedModelServer() as server:
        settings = ModelSettings(provider="openai", base_url=server.base_url, model="lying-composer",
                                 timeout_seconds=10.0, api_key="test-key")
        yield server, build_composer(settings, OpenAIChatClient(settings))


def _lying_model(section: str, lie: str):
    """A model that rephrases faithfully except for one sentence slipped into `section`."""

    def reply(body: dict) -> dict:
        [user] = [m for m in body["messages"] if m["role"] == "user"]
        sections = [{"title": s["title"], "lines": [*s["lines"], lie] if s["title"] == section else s["lines"]}
                    for s in json.loads(user["content"])["sections"]]
        return completion(json.dumps({"sections": sections}, ensure_ascii=False))

    return reply


LIES = ["payment-service 没有异常。", "payment-service 运行正常。", "各项指标均正常。", "当前证据未显示异常。",
        "没有发现任何问题。", "无异常。"]


@pytest.mark.parametrize("verdict", ["LOW_CONFID", "REJECT"])
@pytest.mark.parametrize("lie", LIES)
def test_a_lying_model_composer_cannot_deny_over_a_failed_call_in_any_section(model_composer, verdict, lie):
    server, composer = model_composer
    inp = _composer_input(verdict, "payment-service 正常吗？", [_failed()])
    template = compose_answer(inp)
    for section in template_answer(inp).sections:
        server.add(_lying_model(section, lie))
        output = composer.compose(inp).output
        assert output.used_fallback_template, (section, lie)
        assert "denies an anomaly" in output.fallback_reason and "while an evidence call failed" in output.fallback_reason
        assert output.answer == template.answer  # fail closed: the template's own text
        assert not denials(output.answer), output.answer


def test_an_honest_model_composer_is_used_while_a_call_failed(model_composer):
    """The control: the check refuses denials, not every rephrasing over a failed call."""
    server, composer = model_composer
    inp = _composer_input("LOW_CONFID", "payment-service 正常吗？", [_failed()])
    server.add(_lying_model("no such section", "一切正常。"))  # a faithful copy of what it was given
    output = composer.compose(inp).output
    assert not output.used_fallback_template, output.fallback_reason
    assert output.template.startswith("model:") and "日志查询失败" in output.answer


def test_a_denial_the_material_states_is_refused_only_while_a_call_failed():
    """「运行正常」 in the template's own material may be repeated by the model — unless an
    evidence call failed: then no wording of it may be shown from the model."""
    template = {"已确认": ["payment-service 的 cpu_usage_percent 运行正常，最高 31%"], "下一步": ["复查日志。"]}
    composed = list(template.items())
    assert check_composed(composed, template, "LOW_CONFID") == []
    problems = check_composed(composed, template, "LOW_CONFID", failed=True)
    assert problems == ["section 已确认 denies an anomaly (运行正常) while an evidence call failed"]
    # Without a failure a paraphrase the material lacks is still refused (a verdict on health).
    lie = [("已确认", ["payment-service 各项指标均正常"]), ("下一步", ["复查日志。"])]
    assert any("verdict on health" in p for p in check_composed(lie, template, "LOW_CONFID"))
