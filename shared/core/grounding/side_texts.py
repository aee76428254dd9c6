"""Side texts a model writes besides its claims — hypotheses, recommended actions, action plans,
limitations, missing info — checked before a user may see them.

- A hypothesis (and a Draft limitation or missing-context item) is shown only when every key
  term and number in it occurs in the verified evidence (or, for limitations and missing
  context, in the question the user asked, or in a clause saying it was not checked): it may
  propose a cause, never an object the run did not see.
- A recommended action or action-plan item proposes events rather than reporting them, so events
  are not required. Read-only advice (检查, 查看 …) may name things and tools to inspect in its
  own words (慢查询, jstack): its identifiers (services, hosts), versions, people and numbers
  must occur in the verified evidence. An action that changes state must also be about things the run saw: every
  noun phrase too, except the general vocabulary of advice (`ADVICE_VOCABULARY`: 配置, 日志 …).
- Whether an action changes state (删除, 重启, 回滚, 扩缩容 …) is decided here
  (`shared.core.grounding.actions`), never by the model: such an action always requires human
  confirmation.
- Model-written missing info is never shown: the gaps an answer names come from the verifier.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.grounding import check_ids
from shared.core.grounding.actions import needs_confirmation
from shared.core.grounding.claim_features import normalise
from shared.core.grounding.polarity import find_negations
from shared.core.grounding.statement_check import CitedRef, Finding, check_statement, clause_of

# Things advice may name without the evidence naming them: where to look, not what was seen.
ADVICE_VOCABULARY = frozenset(
    "配置 日志 指标 监控 告警 流程 记录 变更 发布 内容 现象 文档 手册 预案 方案 步骤 情况 原因 影响 范围 时间 窗口 "
    "时间点 名称 服务 实例 版本 参数 阈值 容量 趋势 状态 结果 数据 信息 问题 负责人 团队 值班 工单 链路 依赖 "
    "上下游 调用 请求 错误 异常 耗时 延迟 资源 使用率".split()
)


@dataclass(frozen=True)
class SideVerdict:
    shown: bool
    check_id: str = ""
    detail: str = ""
    requires_human_confirmation: bool = False


def _first(findings: list[Finding]) -> Finding | None:
    return findings[0] if findings else None


def _without_terms(findings: list[Finding], allowed_text: str) -> list[Finding]:
    """Drop key-term findings whose term occurs in `allowed_text` (e.g. the user's question)."""
    if not allowed_text:
        return findings
    allowed = normalise(allowed_text)
    return [f for f in findings if not (f.check_id == check_ids.KEY_TERM_ABSENT and f.term and f.term in allowed)]


def _in_negated_clause(text: str, finding: Finding) -> bool:
    """The term or value stands in a clause that says it was not checked or not found (未查询 …,
    变更记录中没有 … 前 60 分钟内的变更)."""
    if finding.span is None:
        return False
    normal = normalise(text)
    clause = clause_of(normal, finding.span)
    return any(clause_of(normal, n.span) == clause for n in find_negations(normal))


def check_possibility(text: str, refs: list[CitedRef], *, also_allowed: str = "", states_unknowns: bool = False
                      ) -> SideVerdict:
    """A hypothesis, limitation or missing-context item: shown only when grounded.

    `states_unknowns` (limitations, missing context): a term in a clause that says it was not
    checked or not found (本次未查询变更记录（发布、配置变更）) and advice vocabulary need no evidence;
    everything the item asserts does."""
    findings = _without_terms(check_statement(text, refs, claim_type="context"), also_allowed)
    if states_unknowns:
        findings = [
            f for f in findings
            if not ((f.check_id == check_ids.KEY_TERM_ABSENT and f.term in ADVICE_VOCABULARY)
                    or _in_negated_clause(text, f))
        ]
    # A hypothesis proposes; what it may not do is name what the run never saw or state numbers.
    relevant = [f for f in findings if f.check_id in (
        check_ids.KEY_TERM_ABSENT, check_ids.VALUE_BINDING, check_ids.NUMBER_WORDS, check_ids.VALUE_COMPARISON,
        check_ids.NUMBER_VAGUE)]
    first = _first(relevant)
    if first is None:
        return SideVerdict(True)
    return SideVerdict(False, check_ids.SIDE_TEXT_UNGROUNDED, f"{first.check_id}: {first.detail}")


def check_action(text: str, refs: list[CitedRef], *, model_confirmation: bool) -> SideVerdict:
    """A recommended action or action-plan item: grounded names and numbers; state-changing
    actions always need human confirmation (decided here)."""
    findings = check_statement(text, refs, claim_type="context")
    changes_state = needs_confirmation(text)
    relevant = []
    for finding in findings:
        if finding.check_id == check_ids.KEY_TERM_ABSENT:
            if finding.term_kind == "event" or finding.term in ADVICE_VOCABULARY:
                continue
            if finding.term_kind in ("cjk_noun", "ascii_word") and not changes_state:
                continue  # read-only advice names what to inspect (jstack, 慢查询) in its own words
            relevant.append(finding)
        elif finding.check_id in (check_ids.VALUE_BINDING, check_ids.NUMBER_WORDS):
            relevant.append(finding)
    first = _first(relevant)
    if first is not None:
        return SideVerdict(False, check_ids.SIDE_TEXT_UNGROUNDED, f"{first.check_id}: {first.detail}", changes_state)
    if changes_state and not model_confirmation:
        return SideVerdict(True, check_ids.ACTION_STATE_CHANGE,
                           "a state-changing action the model did not mark for human confirmation", True)
    return SideVerdict(True, requires_human_confirmation=changes_state or model_confirmation)
