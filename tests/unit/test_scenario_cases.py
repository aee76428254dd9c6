"""The scenario evaluation's own parts, without processes: the case set and estate load and cover
the minimums the case set must meet, and the judge reads answers the way tests/eval/scenario_eval.py
documents (a wrong judge would pass or fail every case for the wrong reason)."""

from __future__ import annotations

import pytest
import yaml

from services.executor.estate import read_estate_description
from tests.eval.scenario_eval import (
    ESTATE_DIR,
    Case,
    CaseError,
    answer_parts,
    coverage_problems,
    judge,
    judge_issue15,
    load_cases,
)

MULTI_AGENT_PASS = """可信度：高（以下结论均由本次运行的工具证据支持）

【结论】
- 本次运行的工具证据直接表明：ledger-api 的 sqlalchemy_pool_checked_out 达到 40。

【依据】
- ledger-api 在 18:41 多次出现 ERROR 日志：「pool checkout timed out」 [证据: query_logs #2 hits[4]]

【建议】
- 可考虑：检查 ledgr-api 的配置（需人工确认后执行）"""

FALLBACK = """【说明】
- 没有找到服务 ledgr-api，是否指 ledger-api？

【下一步建议】
- 请补充要排查的服务名称后重试。"""

SINGLE_REACT_FALLBACK_WITH_FACTS = """【说明】
- 本次查询没有获得足以支持结论的证据。

【已完成的检查中观察到】
- ledgr-api 在 18:00 至 19:00 期间没有变更记录（0 条）。"""


def _case(**fields) -> Case:
    base = {"id": "unit-case", "question": "q", "tags": ["why"],
            "expect": {"multi_agent": ["PASS", "LOW_CONFID"], "single_react": ["SUCCESS"]}}
    return Case.model_validate({**base, **fields})


def test_the_case_set_covers_issue_14_point_5():
    cases = load_cases()
    assert coverage_problems(cases) == []
    assert any(case.concerns for case in cases), "some cases must be binding in make test"
    assert {p for case in cases for p in case.concerns} == {1, 2, 3, 4}


def test_the_scenario_estate_loads_with_its_incidents():
    estate = read_estate_description(ESTATE_DIR)
    kinds = {incident.kind for incident in estate.incidents}
    assert {"disk_full", "db_connection_pool_exhaustion", "bad_deploy_errors"} <= kinds
    incident_services = {incident.service for incident in estate.incidents}
    assert len([s for s in estate.services if s.name not in incident_services]) >= 4, "healthy services"


def test_answer_parts():
    parts = answer_parts(MULTI_AGENT_PASS)
    assert parts.opening.startswith("可信度：高") and "sqlalchemy_pool_checked_out" in parts.opening
    assert "ERROR 日志" not in parts.opening  # the second section is not the opening
    assert parts.first_line.startswith("本次运行的工具证据直接表明")
    assert len(parts.confirmed_lines) == 2 and not any("ledgr-api" in line for line in parts.confirmed_lines)
    fallback = answer_parts(FALLBACK)
    assert fallback.opening == "没有找到服务 ledgr-api，是否指 ledger-api？"
    assert fallback.first_line == fallback.opening and fallback.confirmed_lines == ()


def test_judge_outcome_opening_answer_and_confirmed():
    case = _case(opening={"must_contain": [["sqlalchemy_pool", "连接池"]], "must_not_contain": ["请稍后重试"]},
                 answer={"must_contain": ["ledgr-api"]},
                 confirmed={"must_contain": ["POOL CHECKOUT"], "must_not_contain": ["ledgr-api"]})
    assert judge(case, "multi_agent", "PASS", MULTI_AGENT_PASS) == []
    reasons = judge(case, "multi_agent", "REJECT", MULTI_AGENT_PASS.replace("sqlalchemy_pool_checked_out", "x"))
    assert reasons[0] == "outcome REJECT, expected PASS/LOW_CONFID"
    assert any(r.startswith("opening lacks one of") for r in reasons)
    # ledgr-api outside the confirmed sections is fine; inside them it is not
    only_confirmed = _case(confirmed={"must_not_contain": ["ledgr-api"]})
    assert judge(only_confirmed, "single_react", "SUCCESS", SINGLE_REACT_FALLBACK_WITH_FACTS) \
        == ["confirmed shows 'ledgr-api': ledgr-api 在 18:00 至 19:00 期间没有变更记录（0 条）。"]


def test_a_line_saying_the_name_was_not_found_is_no_confirmation():
    case = _case(expect={"multi_agent": ["UNKNOWN_SERVICE"], "single_react": ["UNKNOWN_SERVICE"]},
                 confirmed={"must_not_contain": ["ledgr-api"]})
    answer = "【结论】\n没有找到服务 ledgr-api，是否指 ledger-api？"
    assert judge(case, "single_react", "UNKNOWN_SERVICE", answer) == []


def test_words_match_across_width_and_case():
    case = _case(opening={"must_contain": ["ledger-api"]})
    assert judge(case, "multi_agent", "PASS", "【说明】\n- ＬＥＤＧＥＲ-ＡＰＩ 异常") == []


def test_issue15_rules_are_judged_separately():
    case = _case(issue15={"kind": "yes_no", "outcome": {"multi_agent": ["PASS"], "single_react": ["SUCCESS"]},
                          "first_line": {"must_contain": ["是："]}})
    assert judge(case, "multi_agent", "LOW_CONFID", MULTI_AGENT_PASS) == []
    assert judge_issue15(case, "multi_agent", "LOW_CONFID", MULTI_AGENT_PASS) == [
        "outcome LOW_CONFID, issue 15 expects PASS", "first line lacks '是：'"]
    assert judge_issue15(_case(), "multi_agent", "PASS", MULTI_AGENT_PASS) is None


@pytest.mark.parametrize("bad, message", [
    ({"expect": {"multi_agent": ["SUCCESS"], "single_react": ["SUCCESS"]}}, "unknown outcome"),
    ({"tags": ["nonsense"]}, "unknown tag"),
    ({"concerns": [5]}, "points 1-4"),
    ({"surprise": 1}, "Extra inputs"),
])
def test_a_malformed_case_is_refused(tmp_path, bad, message):
    item = {"id": "bad-case", "question": "q", "tags": ["why"],
            "expect": {"multi_agent": ["PASS"], "single_react": ["SUCCESS"]}, **bad}
    (tmp_path / "x.yaml").write_text(yaml.safe_dump([item], allow_unicode=True), encoding="utf-8")
    with pytest.raises(CaseError, match=message):
        load_cases(tmp_path)
