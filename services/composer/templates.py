"""Fixed Chinese templates: the answer, rendered only from verifier-allowed material.

Graph spec, "User-facing verifier outputs SHALL follow Composer-safe protocols", "Verifier
low-confidence output SHALL not present unsupported claims as confirmed", "REJECT produces bounded
output", "User-facing Chat answers SHALL remain readable Chinese".

Material: the verified projection (claims with passed bindings, hypotheses, recommended actions,
missing info) and the verifier's claim checks. A claim counts as confirmed only when its check is
direct_observation or reasonable_inference (the latter is labelled as an inference); a claim with
no check is a gap. Each confirmed fact carries a compact citation of its verified bindings, e.g.
`[证据: query_metrics #12 series[0].points[41]]`.

- PASS: 结论 / 已确认的事实 / 建议的下一步 (and 证据缺口 if a non-critical claim was not confirmed).
  A PASS without a single confirmed claim is inconsistent and is rendered as LOW_CONFID.
- LOW_CONFID: 已确认的信息 / 可能的方向 (hypotheses, phrased as possibilities) / 证据缺口 (only the
  verifier's gaps: unsupported and overstated claims are quoted as "尚未证实"; external_unknown
  and contradicted claims are described without repeating their content) / 下一步建议.
- REJECT: "当前证据不足以支持可靠结论" + confirmed facts without any root-cause claim or causal
  sentence + gaps described without repeating any unconfirmed content + next steps derived from
  the gaps; no hypotheses, no executor recommendations.
- Fallback (fallback_type set, or no verdict at all): a fixed text per type; no executor or draft
  content, and not the fallback reason (which may carry arbitrary text); no verdict is invented.

The answer never contains raw JSON: any text that looks like serialised JSON or names the removed
executor fields is left out.
"""

from __future__ import annotations

import re

from shared.contracts import Claim, ClaimCheck, ComposerInput, ComposerOutput
from shared.effective_verdict import checks_by_claim, is_critical

TEMPLATE_VERSION = "v1"
MAX_LINES = 20
MAX_TEXT = 300
MAX_CITES = 3

VERDICT_LINE = {
    "PASS": "可信度：高（以下结论均由本次运行的工具证据支持）",
    "LOW_CONFID": "可信度：中（部分内容缺少证据支持，请结合证据缺口阅读）",
    "REJECT": "可信度：低（当前证据不足以支持可靠结论）",
}
TYPE_LABEL = {
    "observation": "观察",
    "negative_observation": "未发现项",
    "symptom": "症状",
    "root_cause": "根因",
    "impact": "影响",
    "risk": "风险",
    "context": "背景",
}
CONFIRMED = frozenset({"direct_observation", "reasonable_inference"})
_GAP_REASON = {
    "unsupported": "当前证据不足以支持这一说法",
    "overstated": "说法超出了现有证据能够支持的范围",
    "external_unknown": "涉及证据中没有出现的对象或数值，需要补充查询后再判断",
    "contradicted": "与已获取的证据不一致，未予采纳",
}
_NO_DRAFT_FALLBACK = {
    "PRE_VERIFICATION": (
        "本次诊断未能完成证据核验，因此不给出诊断结论。",
        ["请稍后重试；如问题持续，请人工查看相关服务的指标、日志与近期变更。"],
    ),
    "EVIDENCE_VALIDATION_FAILED": (
        "诊断草稿中的证据引用未能通过校验，因此不发布其中的内容。",
        ["请重试本次诊断，或人工查看相关服务的指标与日志。"],
    ),
    "SEMANTIC_UNSUPPORTED": (
        "诊断草稿的结论未得到已核验证据的支持，因此不发布。",
        ["请人工核对相关指标与日志，或补充更具体的问题后重试。"],
    ),
    "SEMANTIC_UNAVAILABLE": (
        "语义核验暂时不可用，为避免发布未经核验的内容，本次不给出结论。",
        ["请稍后重试。"],
    ),
    "MISSING_REQUIRED_CONTEXT": (
        "问题缺少必要的上下文（例如服务名称或时间范围），无法开始诊断。",
        ["请补充要排查的服务名称和大致时间范围后重试。"],
    ),
    "INSUFFICIENT_EVIDENCE": (
        "本次查询没有获得足以支持结论的证据。",
        ["请扩大时间范围或补充服务名称后重试，或人工查看相关指标与日志。"],
    ),
}
_JSONISH = re.compile(r"[{\[]\s*\"|\"\s*:\s*[{\[\"\d]|user_facing_answer|diagnosis_summary|answer_version|executor_evidence_v2")
_CAUSAL = re.compile(r"因为|导致|由于|根因|根本原因|引起|造成|所致|引发|caused by|due to|because|root cause", re.IGNORECASE)


def _clean(text: str) -> str | None:
    """One readable line, or None when the text must not reach the user."""
    line = " ".join(text.split())
    if not line or _JSONISH.search(line):
        return None
    return line if len(line) <= MAX_TEXT else line[: MAX_TEXT - 1] + "…"


def _cite(claim: Claim) -> str:
    parts = []
    for binding in claim.evidence_bindings[:MAX_CITES]:
        invocation = binding.source_invocation_id
        if invocation is None and binding.source_invocation_ids:
            invocation = binding.source_invocation_ids[0]
        piece = binding.tool_name or "tool"
        if invocation is not None:
            piece += f" #{invocation}"
        if binding.raw_path:
            piece += f" {binding.raw_path}"
        parts.append(piece)
    if not parts:
        return ""
    more = "；等" if len(claim.evidence_bindings) > MAX_CITES else ""
    return f" [证据: {'；'.join(parts)}{more}]"


def _fact_line(claim: Claim, check: ClaimCheck) -> str | None:
    text = _clean(claim.claim_text)
    if text is None:
        return None
    note = "（由证据推断，非直接观察）" if check.verification == "reasonable_inference" else ""
    return f"{text}{note}{_cite(claim)}"


def _label(claim: Claim, degraded: bool) -> str:
    # A degraded (REJECT) answer does not even name a root cause as such.
    if degraded and claim.claim_type == "root_cause":
        return "原因推断"
    return TYPE_LABEL.get(claim.claim_type, "相关")


def _gap_line(claim: Claim, check: ClaimCheck, quote: bool) -> str:
    reason = _GAP_REASON.get(check.verification, _GAP_REASON["unsupported"])
    label = _label(claim, degraded=not quote)
    if quote and check.verification in ("unsupported", "overstated"):
        text = _clean(claim.claim_text)
        if text is not None:
            return f"尚未证实：「{text}」——{reason}。"
    return f"{label}类说法（{claim.claim_id}）{reason}。"


def _bounded(lines: list[str | None]) -> list[str]:
    kept = [line for line in lines if line]
    return kept[:MAX_LINES]


def _render(verdict_line: str | None, sections: dict[str, list[str]]) -> str:
    out: list[str] = [verdict_line] if verdict_line else []
    for name, lines in sections.items():
        if name == "可信度" or not lines:
            continue
        out.append("")
        out.append(f"【{name}】")
        out.extend(f"- {line}" for line in lines)
    return "\n".join(out).strip()


def _output(template: str, verdict_line: str | None, sections: dict[str, list[str]], fallback: bool) -> ComposerOutput:
    if verdict_line:
        sections = {"可信度": [verdict_line], **sections}
    return ComposerOutput(
        answer=_render(verdict_line, sections),
        sections=sections,
        template=f"{template}.{TEMPLATE_VERSION}",
        used_fallback_template=fallback,
    )


def _fallback(fallback_type: str) -> ComposerOutput:
    summary, steps = _NO_DRAFT_FALLBACK.get(fallback_type, _NO_DRAFT_FALLBACK["PRE_VERIFICATION"])
    sections = {"说明": [summary], "下一步建议": list(steps)}
    return _output(f"fallback.{fallback_type.lower()}", None, sections, fallback=True)


def _gap_steps(gaps: list[tuple[Claim, ClaimCheck]], degraded: bool) -> list[str | None]:
    steps: list[str | None] = []
    for claim, check in gaps:
        if check.verification == "contradicted":
            continue
        tools = list(dict.fromkeys(b.tool_name for b in claim.evidence_bindings if b.tool_name))
        where = "、".join(tools) if tools else "相关工具"
        steps.append(f"补充 {where} 的查询，核实{_label(claim, degraded)}类说法（{claim.claim_id}）。")
    return steps


def _actions(inp: ComposerInput) -> list[str | None]:
    lines: list[str | None] = []
    for action in inp.verified_executor_output.recommended_actions:
        text = _clean(action.text)
        if text:
            lines.append(f"可考虑：{text}" + ("（需人工确认后执行）" if action.requires_human_confirmation else ""))
    for info in inp.verified_executor_output.missing_info:
        text = _clean(info.text)
        if text:
            lines.append(f"可补充的信息：{text}")
    return lines


def compose_answer(inp: ComposerInput) -> ComposerOutput:
    """Render the final answer for one verdict (or fallback) from verifier-allowed material only."""
    if inp.fallback_type is not None or inp.effective_verdict is None:
        return _fallback(inp.fallback_type or "PRE_VERIFICATION")

    claims = inp.verified_executor_output.claims
    chosen = checks_by_claim(claims, inp.claim_checks)
    confirmed = [(c, chosen[c.claim_id]) for c in claims if chosen[c.claim_id].verification in CONFIRMED]
    gaps = [(c, chosen[c.claim_id]) for c in claims if chosen[c.claim_id].verification not in CONFIRMED]
    verdict = inp.effective_verdict
    if verdict == "PASS" and not confirmed:
        verdict = "LOW_CONFID"  # an inconsistent PASS is never rendered as confident

    if verdict == "PASS":
        root = [(c, k) for c, k in confirmed if c.claim_type == "root_cause"]
        lead = root or [(c, k) for c, k in confirmed if is_critical(c.claim_type)] or confirmed
        conclusion = [
            f"{TYPE_LABEL.get(c.claim_type, '结论')}：{t}" for c, k in lead[:3] if (t := _clean(c.claim_text))
        ]
        sections = {
            "结论": _bounded(conclusion) or ["已确认的事实见下。"],
            "已确认的事实": _bounded([_fact_line(c, k) for c, k in confirmed]),
        }
        if gaps:
            sections["证据缺口"] = _bounded([_gap_line(c, k, quote=True) for c, k in gaps])
        sections["建议的下一步"] = _bounded(_actions(inp)) or ["如需进一步确认，可扩大时间范围复查相关指标与日志。"]
        return _output("pass", VERDICT_LINE["PASS"], sections, fallback=False)

    if verdict == "LOW_CONFID":
        possible = [
            f"可能：{t}（推测，尚未被证据证实）"
            for h in inp.verified_executor_output.hypotheses
            if (t := _clean(h.text))
        ]
        sections = {
            "已确认的信息": _bounded([_fact_line(c, k) for c, k in confirmed]) or ["暂无可直接确认的信息。"],
            "可能的方向": _bounded(possible) or ["暂无可供参考的方向。"],
            "证据缺口": _bounded([_gap_line(c, k, quote=True) for c, k in gaps]) or ["核验未指出具体的证据缺口。"],
            "下一步建议": _bounded(_gap_steps(gaps, degraded=False) + _actions(inp))
            or ["请补充相关服务的指标与日志后重新诊断。"],
        }
        return _output("low_confid", VERDICT_LINE["LOW_CONFID"], sections, fallback=False)

    # REJECT: degraded, bounded; never a root cause, never unconfirmed content.
    facts = [
        _fact_line(c, k)
        for c, k in confirmed
        if c.claim_type != "root_cause" and not _CAUSAL.search(c.claim_text)
    ]
    sections = {
        "说明": ["当前证据不足以支持可靠结论，以下仅列出已核实的信息与证据缺口，不对故障原因下结论。"],
        "已确认的信息": _bounded(facts) or ["暂无可确认的信息。"],
        "证据缺口": _bounded([_gap_line(c, k, quote=False) for c, k in gaps]) or ["核验未指出具体的证据缺口。"],
        "下一步建议": _bounded(_gap_steps(gaps, degraded=True))
        + ["请人工核对相关服务的指标、日志与近期变更后再下结论。"],
    }
    return _output("reject", VERDICT_LINE["REJECT"], sections, fallback=False)
