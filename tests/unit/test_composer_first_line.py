"""The composer's first line answers the question, in every verdict
(multi-agent): 【结论】 opens with the decision table's line built from the verified claims; health
answers name what was checked (first line and 【检查范围】)."""

from __future__ import annotations

import pytest

from services.composer.model_composer import composer_input_text
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    ComposerInput,
    EvidenceBinding,
    ExecutorEvidenceV2,
    QuestionIntent,
    VerifiedSource,
)
from shared.core.templates import compose_answer, finding_state, template_answer

WINDOW = "2026-11-30T10:00:00Z 至 2026-11-30T11:00:00Z"
SOURCES = [
    VerifiedSource(tool_name="query_metrics", invocation_id=21, scope=f"服务 cart-api，全部指标，{WINDOW}"),
    VerifiedSource(tool_name="query_logs", invocation_id=22, scope=f"服务 cart-api，级别 ERROR/WARN，{WINDOW}"),
    VerifiedSource(tool_name="query_changes", invocation_id=23,
                   scope="服务 cart-api，2026-11-30T09:30:00Z 至 2026-11-30T11:00:00Z"),
]


def claim(claim_id, claim_type, text, *bindings):
    return Claim(claim_id=claim_id, claim_type=claim_type, claim_text=text, support_level="direct",
                 evidence_bindings=[EvidenceBinding(tool_name=t, source_invocation_id=i, raw_path=p, evidence_excerpt="x")
                                    for t, i, p in bindings])


POOL_HIGH = claim("c1", "observation", "cart-api 的 db_pool_active_connections 在 2026-11-30T10:40:00Z 达到 50，高于窗口前段的 10。",
                  ("query_metrics", 21, "series[2].points[40]"), ("query_metrics", 21, "series[2].points[1]"))
ERRORS = claim("c2", "observation", "cart-api 在 2026-11-30T10:41:00Z 至 10:59:00Z 期间多次出现 ERROR 日志：「request failed: upstream 503」。",
               ("query_logs", 22, "hits[0]"), ("query_logs", 22, "hits[9]"))
DISK_QUIET = claim("c3", "negative_observation",
                   "cart-api 的 fs_avail_bytes 在 2026-11-30T10:00:00Z 至 2026-11-30T11:00:00Z 期间最高为 40GiB，中位数 39GiB，未见明显升高。",
                   ("query_metrics", 21, "series[0].summary"))
CPU_QUIET = claim("c4", "negative_observation",
                  "cart-api 的 process_cpu_usage 在 2026-11-30T10:00:00Z 至 2026-11-30T11:00:00Z 期间最高为 24%，中位数 20%，未见明显升高。",
                  ("query_metrics", 21, "series[1].summary"))
NO_ERRORS = claim("c5", "negative_observation", "cart-api 在 2026-11-30T10:00:00Z 至 2026-11-30T11:00:00Z 期间没有 ERROR/WARN 日志（0 matching lines）。",
                  ("query_logs", 22, "summary"))
RELEASE = claim("c6", "observation", "cart-api 在 2026-11-30T10:35:00Z 发布 v2.1（pool.max_size 由 50 调整为 10）。",
                ("query_changes", 23, "changes[0]"))
CAUSE = claim("c7", "root_cause",
              "cart-api 在 2026-11-30T10:35:00Z 发布的 v2.1 把 pool.max_size 调整为 10，5 分钟后 ERROR 日志出现 request failed：最可能的原因是这次发布。",
              ("query_changes", 23, "changes[0]"), ("query_logs", 22, "hits[0]"))


def compose(query, verdict, pairs, **fields):
    claims = [c for c, _ in pairs]
    checks = [ClaimCheck(claim_id=c.claim_id, verification=v, detail="") for c, v in pairs]
    inp = ComposerInput(query=query, effective_verdict=verdict, verified_executor_output=ExecutorEvidenceV2(claims=claims),
                        claim_checks=checks, verified_sources=SOURCES, **fields)
    return compose_answer(inp)


def first(out) -> str:
    return out.sections["结论"][0]


# --- yes/no ------------------------------------------------------------------------------------------


def test_yes_when_the_hypothesis_signal_is_verified_abnormal_with_its_citation():
    out = compose("cart-api 报错很多，是数据库连接池的问题吗？", "PASS",
                  [(ERRORS, "direct_observation"), (POOL_HIGH, "direct_observation")])
    assert first(out).startswith("是：数据库连接池有已核实的异常——cart-api 的 db_pool_active_connections")
    assert first(out).endswith("[证据: query_metrics #21 series[2].points[40]；query_metrics #21 series[2].points[1]]")
    assert out.answer.splitlines()[3] == f"- {first(out)}", "the first line after the verdict line"


def test_evidence_does_not_support_when_the_signal_is_verified_quiet():
    out = compose("cart-api 报错是不是因为磁盘满了？", "PASS",
                  [(ERRORS, "direct_observation"), (DISK_QUIET, "direct_observation")])
    assert first(out).startswith("证据不支持：") and "fs_avail_bytes 正常" in first(out)
    assert "[证据: query_metrics #21 series[0].summary]" in first(out)


def test_cannot_confirm_when_the_signal_was_not_checked_or_not_confirmed():
    out = compose("cart-api 是不是内存泄漏了？", "PASS", [(ERRORS, "direct_observation")])
    assert first(out).startswith("无法确认：缺少「内存")
    unconfirmed = compose("cart-api 报错很多，是数据库连接池的问题吗？", "LOW_CONFID",
                          [(ERRORS, "direct_observation"), (POOL_HIGH, "reasonable_inference")])
    assert first(unconfirmed).startswith("无法确认：")
    assert POOL_HIGH.claim_text not in first(unconfirmed)


def test_the_plans_reading_is_used_when_given():
    out = compose("cart-api 报错很多，怎么看？", "PASS", [(ERRORS, "direct_observation"), (POOL_HIGH, "direct_observation")],
                  intent=QuestionIntent(kind="yes_no", hypothesis="是数据库连接池的问题吗",
                                        hypothesis_symptoms=("db_pool", "no_such_id")))
    assert first(out).startswith("是：数据库连接池有已核实的异常——cart-api 的 db_pool_active_connections")


@pytest.mark.parametrize("query", ["cart-api 报错很多，是数据库连接池的问题吗？", "cart-api 报错是不是因为磁盘满了？",
                                   "cart-api 为什么一直报错？", "cart-api 最近一小时正常吗？"])
def test_reject_never_says_yes_never_names_a_cause_never_denies(query):
    pairs = [(ERRORS, "contradicted"), (POOL_HIGH, "direct_observation"), (DISK_QUIET, "direct_observation"),
             (CAUSE, "direct_observation")]
    out = compose(query, "REJECT", pairs)
    line = first(out)
    assert not line.startswith(("是：", "最可能的原因", "证据不支持", "在所查范围内未发现异常")), line
    assert CAUSE.claim_text not in out.answer
    assert list(out.sections)[:3] == ["可信度", "结论", "说明"]


# --- why ---------------------------------------------------------------------------------------------


def test_why_with_a_checked_cause_names_it_with_both_citations():
    out = compose("cart-api 为什么一直报错？", "PASS",
                  [(ERRORS, "direct_observation"), (RELEASE, "direct_observation"), (CAUSE, "reasonable_inference")])
    line = first(out)
    assert line.startswith("最可能的原因：cart-api 在 2026-11-30T10:35:00Z 发布的 v2.1")
    assert "query_changes #23 changes[0]" in line and "query_logs #22 hits[0]" in line
    assert "最可能的原因是这次发布" not in out.sections["结论"][1], "the paragraph after it does not repeat the cause"


def test_why_without_a_checked_cause_says_so_and_gives_the_lead():
    out = compose("cart-api 为什么一直报错？", "LOW_CONFID",
                  [(ERRORS, "direct_observation"), (RELEASE, "direct_observation"), (CAUSE, "unsupported")])
    line = first(out)
    assert line.startswith("原因尚未由证据确认；最明显的线索：cart-api 在 2026-11-30T10:41:00Z")
    assert "[证据: query_logs #22 hits[0]" in line
    assert CAUSE.claim_text not in out.answer


# --- health (point 3) --------------------------------------------------------------------------------


def test_a_quiet_service_is_an_answer_with_its_scope_and_what_was_checked():
    out = compose("cart-api 最近一小时正常吗？", "PASS",
                  [(DISK_QUIET, "direct_observation"), (CPU_QUIET, "direct_observation"), (NO_ERRORS, "direct_observation"),
                   (RELEASE, "direct_observation")])
    assert out.template == "pass.v1" and "可信度：高" in out.answer
    line = first(out)
    assert line == (f"在所查范围内未发现异常（cart-api：指标 2 条序列、日志查询 1 次（ERROR/WARN）、变更查询 1 次；{WINDOW}）")
    assert "健康" not in out.answer and "排除" not in out.answer
    checked = out.sections["检查范围"]
    assert checked[0] == (f"指标：cart-api，全部指标，{WINDOW}（query_metrics #21）；已核对的序列：fs_avail_bytes、process_cpu_usage")
    assert checked[1] == f"日志：cart-api，ERROR/WARN，{WINDOW}（query_logs #22）"
    assert checked[2].startswith("变更：cart-api，2026-11-30T09:30:00Z 至") and "query_changes #23" in checked[2]
    # The answer reads top-down: the answer, its evidence, what was checked, then advice; the
    # routine change is mentioned (依据), not blamed.
    assert list(out.sections) == ["可信度", "结论", "依据", "检查范围", "建议"]
    assert any("v2.1" in line for line in out.sections["依据"])


def test_checked_scope_appears_in_low_confid_too_and_unconfirmed_anomalies_are_counted():
    out = compose("cart-api 最近一小时正常吗？", "LOW_CONFID", [(CPU_QUIET, "direct_observation"), (POOL_HIGH, "unsupported")])
    assert first(out).startswith("在所查范围内未发现异常（cart-api：")
    assert first(out).endswith("；另有 1 项异常说法未能核实，见【证据缺口】")
    assert POOL_HIGH.claim_text not in out.answer
    assert list(out.sections) == ["可信度", "结论", "已确认", "可能方向", "检查范围", "证据缺口", "下一步"]


def test_a_service_with_anomalies_says_what_was_found():
    out = compose("cart-api 最近一小时有没有异常？", "PASS",
                  [(CPU_QUIET, "direct_observation"), (ERRORS, "direct_observation"), (POOL_HIGH, "direct_observation")])
    assert first(out).startswith("发现异常：") and "另有 1 项异常" in first(out)


def test_the_claims_own_words_decide_normality_not_its_type():
    normal_observation = claim("c8", "observation", "cart-api 的 process_cpu_usage 运行平稳，未见异常。",
                               ("query_metrics", 21, "series[1].summary"))
    lying_negative = claim("c9", "negative_observation", "cart-api 的 process_cpu_usage 在 10:40 升高到 95%。",
                           ("query_metrics", 21, "series[1].points[40]"))
    assert finding_state(normal_observation) == "normal"
    assert finding_state(lying_negative) is None
    assert finding_state(RELEASE) == "change" and finding_state(ERRORS) == "abnormal" and finding_state(CAUSE) == "cause"
    # A rise typed as a negative observation cannot make a health answer read 「未发现异常」.
    out = compose("cart-api 正常吗？", "PASS", [(lying_negative, "direct_observation")])
    assert not first(out).startswith("在所查范围内未发现异常")


def test_the_first_line_and_checked_scope_are_never_given_to_a_model_composer():
    pairs = [(DISK_QUIET, "direct_observation"), (CPU_QUIET, "direct_observation")]
    inp = ComposerInput(query="cart-api 正常吗？", effective_verdict="PASS",
                        verified_executor_output=ExecutorEvidenceV2(claims=[c for c, _ in pairs]),
                        claim_checks=[ClaimCheck(claim_id=c.claim_id, verification=v) for c, v in pairs],
                        verified_sources=SOURCES)
    answer = template_answer(inp)
    sent = composer_input_text(inp.query, answer)
    assert answer.first_line.startswith("在所查范围内未发现异常") and answer.first_line not in sent
    assert "检查范围" not in sent and "query_logs #22" not in sent
