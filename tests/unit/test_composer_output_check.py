"""The composer's output check: a composed answer may contain nothing the allowed material lacks."""

from __future__ import annotations

import pytest

from shared.core.contracts import ComposerInput, ExecutorEvidenceV2, Hypothesis, RecommendedAction
from shared.core.output_check import check_composed, terms_of, ungrounded
from shared.core.templates import template_answer
from tests.unit.test_composer_templates import LOGS, ROOT, SYMPTOM, check

ALLOWED = [
    "本次运行的工具证据直接表明：payment-service CPU 使用率 92%。",
    "payment-service CPU 使用率 92% [证据: query_metrics #12 series[0].points[41]]",
    "补充 query_logs 的查询，核实症状类说法（c3）。",
]
TITLES = ["结论", "依据", "下一步"]
TEMPLATE = dict(zip(TITLES, [[line] for line in ALLOWED]))


def sections(*lines_per_section):
    return list(zip(TITLES, [list(lines) for lines in lines_per_section]))


def test_a_faithful_rephrasing_passes():
    composed = sections(
        ["payment-service 的 CPU 使用率为 92%，这是本次运行中直接观察到的。"],
        ["payment-service CPU 使用率 92% [证据: query_metrics #12 series[0].points[41]]"],
        ["建议补充 query_logs 查询，核实 c3。"],
    )
    assert check_composed(composed, TEMPLATE, "PASS") == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("payment-service CPU 使用率 95%", "number 95"),
        ("payment-service CPU 使用率９５％", "number 95"),  # full-width digits are the same number
        ("order-service 也受到影响", "name order-service"),
        ("建议重启 redis", "name redis"),
        ("见 query_metrics #13", "citation query_metrics #13"),
        ("见 series[0].points[40]", "raw path series[0].points[40]"),
        ('{"claims": []}', "raw JSON"),
        ("user_facing_answer 已省略", "removed field user_facing_answer"),
        ("payment-service CPU 使用率 92% 导致请求变慢", "cause"),
        # Chinese noun phrases and events a rephrasing adds are refused too.
        ("payment-service 的缓存集群 CPU 使用率 92%", "cjk_noun 缓存集群"),
        ("payment-service 回滚后 CPU 使用率 92%", "event 回滚"),
    ],
)
def test_anything_the_material_lacks_is_a_problem(line, problem):
    composed = sections([line], [ALLOWED[1]], ["补充 query_logs 的查询。"])
    problems = check_composed(composed, TEMPLATE, "PASS")
    assert any(problem in p for p in problems), problems


def test_a_reject_answer_states_no_cause_even_one_from_the_material():
    template = {**TEMPLATE, "下一步": [ALLOWED[2], "尚未证实：「发布导致 payment-service CPU 升高」"]}
    composed = sections(["payment-service CPU 使用率 92%。"], [ALLOWED[1]], ["发布导致 payment-service CPU 升高，尚未证实。"])
    assert check_composed(composed, template, "LOW_CONFID") == []
    assert any("REJECT" in p for p in check_composed(composed, template, "REJECT"))


def test_unconfirmed_material_cannot_move_into_a_confirmed_section():
    template = {"已确认": ["payment-service CPU 使用率 92%"], "证据缺口": ["尚未证实：「db-primary 连接数 500」"]}
    moved = [("已确认", ["payment-service CPU 使用率 92%，db-primary 连接数 500"]), ("证据缺口", ["db-primary 连接数 500 尚未证实"])]
    problems = check_composed(moved, template, "LOW_CONFID")
    assert any("section 已确认" in p and "db-primary" in p and "500" in p for p in problems)
    kept = [("已确认", ["payment-service 的 CPU 使用率为 92%"]), ("证据缺口", ["db-primary 连接数 500 尚未证实"])]
    assert check_composed(kept, template, "LOW_CONFID") == []


@pytest.mark.parametrize(
    "composed",
    [
        list(zip(["结论", "依据"], [["payment-service CPU 使用率 92%"], [ALLOWED[1]]])),  # a section dropped
        list(zip(["依据", "结论", "下一步"], [[ALLOWED[1]], ["payment-service"], ["c3"]])),  # reordered
        sections([], [ALLOWED[1]], ["c3"]),  # an empty section
        sections(["x" * 500], [ALLOWED[1]], ["c3"]),  # an over-long line
    ],
)
def test_the_template_layout_is_kept(composed):
    assert check_composed(composed, TEMPLATE, "PASS")


def test_numbers_compare_by_value():
    allowed = terms_of(["cpu_usage=92.0%"])
    assert ungrounded("CPU 92%", allowed) == []
    assert ungrounded("CPU 92.5%", allowed) == ["number 92.5"]


@pytest.mark.parametrize(
    ("verdict", "verifications"),
    [
        ("PASS", ["direct_observation", "direct_observation", "reasonable_inference"]),
        ("LOW_CONFID", ["direct_observation", "reasonable_inference", "unsupported"]),
        ("REJECT", ["direct_observation", "contradicted", "overstated"]),
    ],
)
def test_the_template_itself_passes_its_own_check(verdict, verifications):
    answer = template_answer(ComposerInput(
        query="q", effective_verdict=verdict,
        verified_executor_output=ExecutorEvidenceV2(
            claims=[SYMPTOM, LOGS, ROOT], hypotheses=[Hypothesis(text="db-primary 的连接数可能接近上限")],
            recommended_actions=[RecommendedAction(text="检查 db-primary 的连接池配置")],
        ),
        claim_checks=[check(c, v) for c, v in zip((SYMPTOM, LOGS, ROOT), verifications)],
    ))
    assert answer.verdict == verdict
    assert check_composed(list(answer.sections.items()), answer.sections, verdict) == []
