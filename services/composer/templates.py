"""Fixed Chinese templates: the answer, rendered only from verifier-allowed material.

Graph spec, "User-facing verifier outputs SHALL follow Composer-safe protocols", "Verifier
low-confidence output SHALL not present unsupported claims as confirmed", "REJECT produces
bounded output", "User-facing Chat answers SHALL remain readable Chinese"; SemanticGuard spec,
"Fail-closed release policy" (fixed SafeFallback content).

Material: the verified projection (claims with passed bindings, hypotheses, recommended actions,
missing info) and the verifier's claim checks. Verified facts are the claims whose check is
direct_observation (and, on PASS, reasonable_inference, labelled as an inference); each carries a
compact citation of its verified bindings, e.g. `[证据: query_metrics #12 series[0].points[41]]`.
Model-written side texts are shown only when the verifier's `side_text_checks` let them through
(issue 13: every sentence shown is checked or ours): a hypothesis or recommended action whose
check is missing, names another text, or is not `shown` is left out; an action gets
（需人工确认后执行） when the verifier's code says it changes state; model-written missing info is
never shown. As a second layer, a shown side text must also use only the numbers and names of the
grounded vocabulary (the verified facts' texts, every verified binding's excerpt and the
citations, `output_check.ungrounded`). An unconfirmed claim's text is never shown, not even
quoted as a gap: gaps are described in our own words (type, claim id, reason).

- PASS: 结论 (one paragraph: the cause if one was verified, what was observed, what is inferred,
  the risks) / 依据 (each verified fact with its citation) / 证据缺口 (only when a non-critical
  claim was not confirmed) / 建议. A PASS without one confirmed claim renders as LOW_CONFID.
- LOW_CONFID: 已确认 (direct observations) / 可能方向 (inferences and checked hypotheses, phrased
  as possibilities) / 证据缺口 (only the verifier's gaps, described without their content) / 下一步.
- REJECT: 说明 ("当前证据不足以支持可靠结论") / 已确认 (direct observations, never a root-cause
  claim or a causal sentence) / 证据缺口 (described without content) / 下一步 (from the gaps);
  no hypotheses, no executor recommendations.
- Fallback (a fallback type, or no verdict at all): a fixed text per type; no executor or Draft
  content, not the fallback reason (it may carry arbitrary text); no verdict is invented.

Text that looks like serialised JSON or names the removed executor fields never reaches a line.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.composer.output_check import CAUSAL, Terms, raw_material_problems, terms_of, ungrounded
from shared.contracts import Claim, ClaimCheck, ComposerInput, ComposerOutput
from shared.effective_verdict import checks_by_claim

TEMPLATE_VERSION = "v1"
MAX_LINES = 20
MAX_TEXT = 300
MAX_CITES = 3
MAX_SUMMARY_ITEMS = 3
MAX_GIST = 80
VERDICT_SECTION = "可信度"
CONFIRMED = frozenset({"direct_observation", "reasonable_inference"})

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
_GAP_REASON = {
    "unsupported": "当前证据不足以支持这一说法",
    "overstated": "说法超出了现有证据能够支持的范围",
    "external_unknown": "涉及证据中没有出现的对象或数值，需要补充查询后再判断",
    "contradicted": "与已获取的证据不一致，未予采纳",
    "reasonable_inference": "只能由证据间接推断，未作为已确认的信息",
}
FALLBACK_TEXT = {
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


@dataclass
class TemplateAnswer:
    """One template rendering before it becomes a ComposerOutput."""

    name: str  # pass | low_confid | reject | fallback.<type>
    verdict: str | None  # the verdict rendered (None for a fallback)
    sections: dict[str, list[str]]  # without the verdict line
    fallback_type: str | None = None

    @property
    def verdict_line(self) -> str | None:
        return VERDICT_LINE.get(self.verdict or "")

    @property
    def template(self) -> str:
        return f"{self.name}.{TEMPLATE_VERSION}"


def _clean(text: str) -> str | None:
    """One readable line, or None when the text must not reach the user."""
    line = " ".join(text.split())
    if not line or raw_material_problems(line):
        return None
    return line if len(line) <= MAX_TEXT else line[: MAX_TEXT - 1] + "…"


def _sentence(text: str) -> str:
    return text.rstrip("。．.；;!！ ")


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
    return f"{_sentence(text)}{note}{_cite(claim)}"


def _label(claim: Claim, degraded: bool) -> str:
    # A degraded (REJECT) answer does not even name a root cause as such.
    if degraded and claim.claim_type == "root_cause":
        return "原因推断"
    return TYPE_LABEL.get(claim.claim_type, "相关")


def _grounding(claims: list[Claim], facts: list[Claim]) -> Terms:
    """Verified facts, every verified binding's excerpt and the citations."""
    texts = [claim.claim_text for claim in facts]
    texts += [binding.evidence_excerpt for claim in claims for binding in claim.evidence_bindings]
    texts += [_cite(claim) for claim in claims]
    return terms_of(texts)


def _grounded(text: str | None, grounding: Terms) -> str | None:
    return text if text is not None and not ungrounded(text, grounding) else None


def _gap_line(claim: Claim, check: ClaimCheck, degraded: bool) -> str:
    """A gap in our own words: an unconfirmed claim's text is never shown, not even as quoted."""
    reason = _GAP_REASON.get(check.verification, _GAP_REASON["unsupported"])
    return f"{_label(claim, degraded)}类说法（{claim.claim_id}）{reason}。"


def _bounded(lines: list[str | None]) -> list[str]:
    return [line for line in lines if line][:MAX_LINES]


def _gist(text: str) -> str:
    """The head of a claim for the summary paragraph: before a quoted excerpt, at most
    MAX_GIST characters (the full claim with its citation is listed under 依据)."""
    head = _sentence(text)
    for mark in ("：「", "「", ": \""):
        cut = head.find(mark)
        if cut >= 8:
            head = head[:cut]
            break
    if len(head) <= MAX_GIST:
        return head
    # Too long: end at the last clause boundary that keeps it within bounds.
    cut = max(head.rfind(mark, 0, MAX_GIST) for mark in ("：", "，", "；", ", "))
    return _sentence(head[:cut]) if cut >= 8 else head[: MAX_GIST - 1] + "…"


def _join(claims: list[Claim]) -> str:
    texts = [_gist(t) for c in claims[:MAX_SUMMARY_ITEMS] if (t := _clean(c.claim_text))]
    more = "等" if len(claims) > MAX_SUMMARY_ITEMS else ""
    return "；".join(texts) + more


def _summary(confirmed: list[tuple[Claim, ClaimCheck]]) -> str:
    """The PASS conclusion: one paragraph that answers first and then says what it rests on."""
    causes = [(c, k) for c, k in confirmed if c.claim_type == "root_cause"]
    risks = [c for c, _ in confirmed if c.claim_type == "risk"]
    rest = [(c, k) for c, k in confirmed if c.claim_type not in ("root_cause", "risk")]
    observed = [c for c, k in rest if k.verification == "direct_observation"]
    inferred = [c for c, k in rest if k.verification != "direct_observation"]
    parts: list[str] = []
    if causes:
        hedge = "（由证据推断，非直接观察）" if any(k.verification != "direct_observation" for _, k in causes) else ""
        parts.append(f"本次诊断的结论是：{_join([c for c, _ in causes])}{hedge}。")
        if observed:
            parts.append(f"这一判断基于本次运行中直接观察到的现象：{_join(observed)}。")
    elif observed:
        parts.append(f"本次运行的工具证据直接表明：{_join(observed)}。")
    if inferred:
        parts.append(f"结合这些证据可以推断：{_join(inferred)}。")
    if risks:
        parts.append(f"需要留意的风险是：{_join(risks)}。")
    parts.append("各项依据及其证据出处见下。")
    return "".join(parts)


def _gap_steps(gaps: list[tuple[Claim, ClaimCheck]], degraded: bool) -> list[str | None]:
    steps: list[str | None] = []
    for claim, check in gaps:
        if check.verification == "contradicted":
            continue
        tools = list(dict.fromkeys(b.tool_name for b in claim.evidence_bindings if b.tool_name))
        where = "、".join(tools) if tools else "相关工具"
        steps.append(f"补充 {where} 的查询，核实{_label(claim, degraded)}类说法（{claim.claim_id}）。")
    return steps


def _shown_side_texts(inp: ComposerInput, kind: str, texts: list[str]) -> list[tuple[str, bool]]:
    """(text, requires human confirmation) of the side texts of `kind` the verifier let through:
    a side text without its check, or whose check names another text, is never shown."""
    checks = {check.item: check for check in inp.side_text_checks}
    shown: list[tuple[str, bool]] = []
    for index, text in enumerate(texts):
        check = checks.get(f"{kind}[{index}]")
        if check is not None and check.shown and check.text == text:
            shown.append((text, check.requires_human_confirmation))
    return shown


def _actions(inp: ComposerInput, grounding: Terms) -> list[str | None]:
    """Recommended actions the verifier found grounded; human confirmation where our code says
    the action changes state. Model-written missing info is never shown."""
    actions = [a.text for a in inp.verified_executor_output.recommended_actions]
    lines: list[str | None] = []
    for text, confirm in _shown_side_texts(inp, "recommended_actions", actions):
        if line := _grounded(_clean(text), grounding):
            lines.append(f"可考虑：{_sentence(line)}" + ("（需人工确认后执行）" if confirm else "。"))
    return lines


def _hypotheses(inp: ComposerInput, grounding: Terms) -> list[str | None]:
    texts = [h.text for h in inp.verified_executor_output.hypotheses]
    return [
        f"可能：{_sentence(line)}（推测，尚未被证据证实）"
        for text, _ in _shown_side_texts(inp, "hypotheses", texts)
        if (line := _grounded(_clean(text), grounding))
    ]


def render_answer(verdict_line: str | None, sections: dict[str, list[str]]) -> str:
    """The answer text: the verdict line, then each non-empty section as 【title】 and bullets."""
    out: list[str] = [verdict_line] if verdict_line else []
    for name, lines in sections.items():
        if name == VERDICT_SECTION or not lines:
            continue
        out.append("")
        out.append(f"【{name}】")
        out.extend(f"- {line}" for line in lines)
    return "\n".join(out).strip()


def to_output(answer: TemplateAnswer, sections: dict[str, list[str]] | None = None, *, template: str | None = None,
              used_fallback_template: bool = False, fallback_reason: str = "") -> ComposerOutput:
    """A ComposerOutput of `answer` (or of `sections` laid out like it, e.g. a model's rephrasing)."""
    body = answer.sections if sections is None else sections
    verdict_line = answer.verdict_line
    full = {VERDICT_SECTION: [verdict_line], **body} if verdict_line else dict(body)
    return ComposerOutput(
        answer=render_answer(verdict_line, full),
        sections=full,
        template=template or answer.template,
        used_fallback_template=used_fallback_template,
        fallback_reason=fallback_reason,
    )


def template_answer(inp: ComposerInput) -> TemplateAnswer:
    """The fixed-template rendering of one verdict (or fallback) from verifier-allowed material."""
    if inp.fallback_type is not None or inp.effective_verdict is None:
        fallback_type = inp.fallback_type or "PRE_VERIFICATION"
        summary, steps = FALLBACK_TEXT.get(fallback_type, FALLBACK_TEXT["PRE_VERIFICATION"])
        return TemplateAnswer(
            f"fallback.{fallback_type.lower()}", None, {"说明": [summary], "下一步建议": list(steps)}, fallback_type
        )

    claims = inp.verified_executor_output.claims
    chosen = checks_by_claim(claims, inp.claim_checks)
    pairs = [(claim, chosen[claim.claim_id]) for claim in claims]
    direct = [(c, k) for c, k in pairs if k.verification == "direct_observation"]
    inferred = [(c, k) for c, k in pairs if k.verification == "reasonable_inference"]
    confirmed = [(c, k) for c, k in pairs if k.verification in CONFIRMED]
    gaps = [(c, k) for c, k in pairs if k.verification not in CONFIRMED]
    verdict = inp.effective_verdict
    if verdict == "PASS" and not confirmed:
        verdict = "LOW_CONFID"  # an inconsistent PASS is never rendered as confident

    if verdict == "PASS":
        grounding = _grounding(claims, [c for c, _ in confirmed])
        sections = {
            "结论": [_summary(confirmed)],
            "依据": _bounded([_fact_line(c, k) for c, k in confirmed]),
        }
        if gaps:
            sections["证据缺口"] = _bounded([_gap_line(c, k, False) for c, k in gaps])
        sections["建议"] = _bounded(_actions(inp, grounding)) or ["如需进一步确认，可扩大时间范围复查相关指标与日志。"]
        return TemplateAnswer("pass", "PASS", sections)

    if verdict == "LOW_CONFID":
        grounding = _grounding(claims, [c for c, _ in direct])
        possible = [f"由证据推断（尚待进一步确认）：{_sentence(t)}{_cite(c)}" for c, _ in inferred if (t := _clean(c.claim_text))]
        possible += _hypotheses(inp, grounding)
        sections = {
            "已确认": _bounded([_fact_line(c, k) for c, k in direct]) or ["暂无可直接确认的信息。"],
            "可能方向": _bounded(possible) or ["暂无可供参考的方向。"],
            "证据缺口": _bounded([_gap_line(c, k, False) for c, k in gaps]) or ["核验未指出具体的证据缺口。"],
            "下一步": _bounded(_gap_steps(gaps, degraded=False) + _actions(inp, grounding))
            or ["请补充相关服务的指标与日志后重新诊断。"],
        }
        return TemplateAnswer("low_confid", "LOW_CONFID", sections)

    # REJECT: degraded, bounded; never a root cause, never unconfirmed content.
    facts = [
        _fact_line(c, k) for c, k in direct if c.claim_type != "root_cause" and not CAUSAL.search(c.claim_text)
    ]
    unconfirmed = gaps + inferred
    sections = {
        "说明": ["当前证据不足以支持可靠结论，以下仅列出已核实的信息与证据缺口，不对故障原因下结论。"],
        "已确认": _bounded(facts) or ["暂无可确认的信息。"],
        "证据缺口": _bounded([_gap_line(c, k, True) for c, k in unconfirmed]) or ["核验未指出具体的证据缺口。"],
        "下一步": _bounded(_gap_steps(unconfirmed, degraded=True)) + ["请人工核对相关服务的指标、日志与近期变更后再下结论。"],
    }
    return TemplateAnswer("reject", "REJECT", sections)


def compose_answer(inp: ComposerInput) -> ComposerOutput:
    """Render the final answer for one verdict (or fallback) from verifier-allowed material only."""
    answer = template_answer(inp)
    if answer.fallback_type is not None:
        return to_output(
            answer, used_fallback_template=True,
            fallback_reason=f"fallback type {answer.fallback_type}: fixed safe template",
        )
    return to_output(answer)
