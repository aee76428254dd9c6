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
(every sentence shown is checked or ours): a hypothesis or recommended action whose
check is missing, names another text, or is not `shown` is left out; an action gets
（需人工确认后执行） when the verifier's code says it changes state; model-written missing info is
never shown. As a second layer, a shown side text must also use only the numbers and names of the
grounded vocabulary (the verified facts' texts, every verified binding's excerpt and the
citations, `output_check.ungrounded`). An unconfirmed claim's text is never shown, not even
quoted as a gap: gaps are described in our own words (type, claim id, reason).

Every verdict opens with 结论, whose first line answers the question: the decision
table of `shared/core/direct_answer.py` over a finding per verified claim (`finding_state`: its type,
the tools it cites and its own words; confirmed when direct_observation, a cause also as a checked
reasonable_inference except under REJECT). The line is ours: `TemplateAnswer.first_line`, never
given to a model composer; `to_output` puts it first. 【检查范围】 lists the run's completed tool
calls (store data, like 【服务范围】 never given to a model), before the gaps.

- PASS: 结论 (the first line; then, when it adds something, a paragraph on what the answer rests
  on: what was observed, what is inferred, the risks — not after 「在所查范围内未发现异常」, where
  依据 says it all) / 依据 (each verified fact with its citation) / 检查范围 / 证据缺口 (only when
  a non-critical claim was not confirmed) / 建议. A PASS without one confirmed claim renders as
  LOW_CONFID.
- LOW_CONFID: 结论 (the first line) / 已确认 (direct observations) / 可能方向 (inferences and
  checked hypotheses, phrased as possibilities) / 检查范围 / 证据缺口 (only the verifier's gaps,
  described without their content) / 下一步.
- REJECT: 结论 (the first line: never 「是」, never a cause, never a denial) / 说明
  ("当前证据不足以支持可靠结论") / 已确认 (direct observations, never a root-cause claim or a
  causal sentence) / 证据缺口 (described without content) / 下一步 (from the gaps); no
  hypotheses, no executor recommendations.
- Fallback (a fallback type, or no verdict at all): a fixed text per type that says what
  happened and whether a retry can help (for PRE_VERIFICATION, per cause: a technical failure
  may pass on a retry; citations that failed the citation check will not, and the failed rules
  are named in our words); no executor or Draft content, not the fallback reason (it may carry
  arbitrary text); no verdict is invented. UNKNOWN_SERVICE names the unknown services and the
  catalogue's close matches (「没有找到服务 x，是否指 y？」).
- Sources: every confirmed fact's citation names the kind of source it was
  read from (Prometheus, Loki, the demo estate, the changes database, a knowledge directory or the
  demo knowledge directory: `shared/evidence_source.py`, from the stored evidence refs, never a
  URL), and so does each call in 【检查范围】; demo material is labelled as such. A tool disabled
  for want of a source (a real backend is configured, none for it) is named in 【检查范围】
  (「未配置日志源（query_logs 未启用）…」) in every layout; it is no failure and caps nothing.
- Service coverage: when the question named services that were not checked (unknown
  to the backends, or beyond the per-question limit), a 【服务范围】 section after the first one
  names them, rendered
  here from the coverage data and never given to a model composer; such an answer is never
  「可信度：高」 (a PASS renders as LOW_CONFID). A triage question (no service named; the executor
  checked the catalogue's services) always gets the section: the services checked and the window
  (`triage_lines`), and the rest of the catalogue as not checked, never as healthy.

- No data is not health: a checked service and window with no series and no log line of any level,
  or with logs whose level could not be read (ComposerInput.empty_scopes, `shared/no_data.py`),
  turns the first line into 「无法确认：<service> 在 <window> 没有数据（…）…」 unless a confirmed
  anomaly answers the question; such an answer is never 「可信度：高」, names each scope under
  【证据缺口】 and denies nothing (no 「当前证据未显示异常」 advice). INSUFFICIENT_EVIDENCE names
  them too.

Text that looks like serialised JSON or names the removed executor fields never reaches a line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from shared.call_scope import UNEXAMINED
from shared.core.contracts import (
    Claim,
    ClaimCheck,
    ComposerInput,
    ComposerOutput,
    Hypothesis,
    QuestionIntent,
    RecommendedAction,
    ServiceCoverage,
    Statement,
    VerifiedSource,
)
from shared.core.direct_answer import (
    ABNORMAL,
    CAUSE,
    CHANGE,
    NORMAL,
    NOTHING_FOUND,
    Finding,
    first_line,
    make_finding,
    part_lines,
)
from shared.core.effective_verdict import checks_by_claim
from shared.core.grounding.quiet_series import read_quiet
from shared.core.output_check import CAUSAL, Terms, raw_material_problems, terms_of, ungrounded
from shared.core.question_intent import classify_question
from shared.core.structured_answer import (
    CONFIDENCE_TITLE,
    AnswerLine,
    AnswerSection,
    Citation,
    StructuredAnswer,
    item_of,
    render,
    section,
)
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, bad_direction
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.evidence_source import disabled_lines, source_label
from shared.failed_calls import failed_call_line, failure_summary, open_failures
from shared.no_data import empty_gap_line, empty_step, empty_summary

TEMPLATE_VERSION = "v1"
MAX_LINES = 20
MAX_TEXT = 300
MAX_CITES = 3
MAX_SUMMARY_ITEMS = 3
MAX_GIST = 80
VERDICT_SECTION = CONFIDENCE_TITLE
COVERAGE_SECTION = "服务范围"
CONCLUSION_SECTION = "结论"
CHECKED_SECTION = "检查范围"
# Each failed evidence call, in our words from the stored invocation.
FAILED_SECTION = "查询失败"
# 【检查范围】 goes before the first of these (after the facts, before the gaps and the advice).
_CHECKED_BEFORE = ("证据缺口", "建议", "下一步")
MAX_HYPOTHESIS_CHARS = 60
MAX_NAMES = 20
CONFIRMED = frozenset({"direct_observation", "reasonable_inference"})
# Source kinds that are demo material (shared/evidence_source.py).
DEMO_KINDS = ("estate", "demo_knowledge")

VERDICT_LINE = {
    "PASS": "可信度：高（以下结论均由本次运行的工具证据支持）",
    "LOW_CONFID": "可信度：中（部分内容缺少证据支持，请结合证据缺口阅读）",
    "REJECT": "可信度：低（当前证据不足以支持可靠结论）",
}
# LOW_CONFID when the question named services that were not checked (a PASS is capped to it).
PARTIAL_COVERAGE_LINE = "可信度：中（本次只检查了问题所列的部分服务，见【服务范围】；其余内容请结合证据缺口阅读）"
TRIAGE_PARTIAL_LINE = "可信度：中（本次只巡检了服务目录中的部分服务，见【服务范围】；其余内容请结合证据缺口阅读）"
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
        "诊断草稿中的证据引用未能通过引用核验，因此不发布其中的内容。",
        ["同样的证据再次核验会得到同样的结果，直接重试通常无济于事；请人工查看相关服务的指标与日志，或换一种问法（例如缩小时间范围）。"],
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
        "请补充要排查的服务名称（例如 xxx-service）：问题中没有可识别的服务名，因此没有查询任何数据，也没有给出结论。",
        ["补充服务名称（以及大致时间范围，默认最近一小时）后重新提问即可；原样重试会得到同样的结果。"],
    ),
    "INSUFFICIENT_EVIDENCE": (
        "本次查询没有获得足以支持结论的证据。",
        ["请扩大时间范围或补充服务名称后重试，或人工查看相关指标与日志。"],
    ),
    # A controlled stop with an empty verified snapshot says what happened.
    "AGENT_UNAVAILABLE": (
        "诊断所用的模型暂时不可用，本次没有完成任何经过核验的检查，因此不给出诊断结论。",
        ["这类故障通常是暂时的，可以稍后重试；如反复出现，请联系平台维护人员，并人工查看相关服务的指标与日志。"],
    ),
    "NO_VERIFIED_PROGRESS": (
        "诊断过程在取得任何经过核验的检查结果之前就停止了（步数用尽、未按约定记录检查进度，或没有给出结论），因此不给出诊断结论。",
        ["可以重试一次，或换一种更具体的问法（例如指明指标或缩小时间范围）；如反复出现，请人工查看相关服务的指标与日志。"],
    ),
    "RUN_INTERRUPTED": (
        "本次诊断在完成前被中断（处理它的网关进程停止或失去响应），没有完成证据核验，因此不给出诊断结论。",
        ["这类中断通常是暂时的，请用新的请求重新提问；如反复出现，请联系平台维护人员。"],
    ),
    "GUARD_UNAVAILABLE": (
        "证据核验服务暂时不可用，诊断结果未能经过引用核验，因此不给出诊断结论。",
        ["这类故障通常是暂时的，可以稍后重试；如反复出现，请联系平台维护人员，并人工查看相关服务的指标与日志。"],
    ),
}


# AGENT_UNAVAILABLE when the role running the agent could not be reached (not its model).
AGENT_SERVICE_UNAVAILABLE_TEXT = (
    "诊断服务暂时无法访问，本次没有完成任何经过核验的检查，因此不给出诊断结论。",
    ["这类故障通常是暂时的，可以稍后重试；如反复出现，请联系平台维护人员，并人工查看相关服务的指标与日志。"],
)


# PRE_VERIFICATION by cause: what happened, and whether a retry can help.
PRE_VERIFICATION_TEXT = {
    "TECHNICAL_FAILURE": (
        "本次诊断因技术故障（某个环节失败或超时）未能完成证据核验，因此不给出诊断结论。",
        ["这类故障通常是暂时的，可以稍后重试；如反复出现，请联系平台维护人员，并人工查看相关服务的指标、日志与近期变更。"],
    ),
    "CITATION_CHECK_FAILED": (
        "本次取得的证据引用未能通过引用核验，因此不给出诊断结论。",
        ["同样的证据再次核验会得到同样的结果，直接重试通常无济于事；请人工查看相关服务的指标、日志与近期变更。"],
    ),
    "INVALID_OUTPUT": (
        "取证环节的输出不符合约定的证据格式，无法核验，因此不给出诊断结论。",
        ["可以重试一次；如反复出现，请人工查看相关服务的指标、日志与近期变更。"],
    ),
    # A LOW_CONFID ceiling left no claim with a binding that passed.
    "NO_VERIFIED_CLAIM": (
        "本次取得的证据引用没有一条通过引用核验，没有可供核验的结论，因此不给出诊断结论。",
        ["可以重试一次（取证环节可能给出更准确的引用）；也可以直接人工查看下列已核实的数据来源。"],
    ),
}
NO_CLAIM_LINE = "取证环节没有给出任何带证据引用的结论。"
NO_SOURCE_LINE = "本次运行没有成功完成的工具调用。"
SOURCES_SECTION = "已核实的数据来源"
# The scope of a source as gateway/graph.py `_scope` renders it from the store: these words only.
_SCOPE = re.compile(r"(?:[A-Za-z0-9 ._:/=@+\-，]|服务|全部指标|指标|全部级别|级别|变更类型|至|未检查序列){0,200}")
_SCOPE_WINDOW = re.compile(r"^(\S+) 至 (\S+)$")
TOOL_LABEL = {QUERY_METRICS: "指标", QUERY_LOGS: "日志", QUERY_CHANGES: "变更", LOOKUP_KNOWLEDGE: "知识库"}
UNKNOWN_SERVICE_STEPS = ["请核对服务名称后重新提问；名称正确时即可正常诊断，原样重试会得到同样的结果。"]
# The citation rules and guard checks, in our words (ids come from the gatekeeper, never a model).
RULE_TEXT = {
    "schema.executor_v2": "证据输出的结构不符合约定",
    "evidence.invocation_ref": "引用指向的工具调用不属于本次运行，或工具名称不符",
    "evidence.invocation_state": "引用指向的工具调用没有成功完成",
    "evidence.polarity": "引用了没有结果的查询来支持肯定的说法",
    "evidence.raw_path": "引用的证据位置在工具结果中不存在",
    "evidence.excerpt_too_short": "引用的摘录过短，无法确定所指的事实",
    "evidence.excerpt_mismatch": "引用的摘录与工具结果原文不一致",
}
RULE_PREFIX_TEXT = {
    "tool_ref.": "引用的工具调用不存在、不属于本次运行或没有成功完成",
    "projection.": "引用的工具结果与记录不一致",
    "kind.": "分析的类型与所引用查询的结果不符",
    "analysis.": "分析缺少内容或引用",
    "report.": "结论或建议缺少内容或对分析的引用（含不在故障模式目录中的建议）",
    "statement.": "类型化陈述引用了其条目无权引用或不存在的证据",
    "draft.": "草稿不可读或超出大小限制",
    "guard.": "校验过程出错，按未通过处理",
}
_RULE_ID = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+")
_SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")


@dataclass
class TemplateAnswer:
    """One template rendering before it becomes a ComposerOutput."""

    name: str  # pass | low_confid | reject | fallback.<type>
    verdict: str | None  # the verdict rendered (None for a fallback)
    # Without the verdict line, the first line, the coverage and the checked scope: what a model
    # composer may rephrase. 【结论】 is here only when it has lines after the first.
    sections: dict[str, list[str]]
    fallback_type: str | None = None
    # 【服务范围】 lines: ours, from the coverage data; never given to a model composer.
    coverage: list[str] = field(default_factory=list)
    # The direct answer: ours, from the decision table; the first line of 【结论】,
    # never given to a model composer, never replaced by one.
    first_line: str = ""  # an AnswerLine when built here
    # A compound question's other parts, answered a line each after the first (ours, like it).
    part_lines: list[AnswerLine] = field(default_factory=list)
    # 【检查范围】 lines: ours, from the run's completed tool calls; never given to a model composer.
    checked: list[str] = field(default_factory=list)
    # 【查询失败】 lines: ours, from the run's failed tool calls; never given to a model composer.
    failed: list[str] = field(default_factory=list)
    # The verdict line of a LOW_CONFID answer with 【服务范围】 lines ("": the plain one; a triage
    # that checked the whole catalogue left nothing out).
    coverage_verdict_line: str = PARTIAL_COVERAGE_LINE

    @property
    def verdict_line(self) -> str | None:
        if self.verdict == "LOW_CONFID" and self.coverage and self.coverage_verdict_line:
            return self.coverage_verdict_line
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


INFERENCE_LABEL = "由证据推断，非直接观察"
POSSIBLE_LABEL = "由证据推断（尚待进一步确认）"
HYPOTHESIS_LABEL = "推测，尚未被证据证实"
CONFIRM_LABEL = "需人工确认后执行"


def citations(claim: Claim) -> list[Citation]:
    """The claim's bindings as structured citations: in the verified projection every binding
    passed the gatekeeper, so each carries the invocation, tool, path and excerpt it verified."""
    cited: list[Citation] = []
    for binding in claim.evidence_bindings:
        ids = [binding.source_invocation_id] if binding.source_invocation_id is not None else binding.source_invocation_ids
        cited += [Citation(invocation_id=i, tool_name=binding.tool_name, raw_path=binding.raw_path or "",
                           excerpt=binding.evidence_excerpt) for i in ids]
    return cited


def _claim_line(text: str, claim: Claim, check: ClaimCheck, marker: str, label: str = "") -> AnswerLine:
    return AnswerLine(text, "CHECKED_CLAIM", verification=check.verification, label=label,
                      citations=citations(claim) if marker else (), marker=marker)


def _fact_line(claim: Claim, check: ClaimCheck, sources: dict[int, str] | None = None,
               stated: bool = False) -> AnswerLine | None:
    """A verified fact with its citation; `stated`: the first line already says it in full, so
    its line here only points back to it (with its label and citation), never says it twice."""
    text = _clean(claim.claim_text)
    if text is None:
        return None
    inferred = check.verification == "reasonable_inference"
    note = f"（{INFERENCE_LABEL}）" if inferred else ""
    marker = _sourced(_cite(claim), claim, sources)
    said = STATED_ABOVE if stated else _sentence(text)
    return _claim_line(f"{said}{note}{marker}", claim, check, marker, INFERENCE_LABEL if inferred else "")


def source_kinds(inp: ComposerInput) -> dict[int, str]:
    """Invocation id -> the kind of source it read (from the store, via the gateway)."""
    return {s.invocation_id: s.source_kind for s in inp.verified_sources if source_label(s.source_kind)}


def _sourced(cite: str, claim: Claim, sources: dict[int, str] | None) -> str:
    """The citation with the kinds of source its bindings read, e.g. `[证据: query_metrics #3
    series[0]；来源：Prometheus]`."""
    if not cite or not sources:
        return cite
    ids = [b.source_invocation_id for b in claim.evidence_bindings]
    ids += [i for b in claim.evidence_bindings for i in b.source_invocation_ids]
    kinds = list(dict.fromkeys(sources[i] for i in ids if i is not None and i in sources))
    if not kinds:
        return cite
    return f"{cite[:-1]}；来源：{'、'.join(source_label(k, short=True) for k in kinds)}]"


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


def _possible_line(claim: Claim, check: ClaimCheck, sources: dict[int, str]) -> AnswerLine | None:
    """LOW_CONFID: an inference, phrased as a possibility."""
    text = _clean(claim.claim_text)
    if text is None:
        return None
    marker = _sourced(_cite(claim), claim, sources)
    return _claim_line(f"{POSSIBLE_LABEL}：{_sentence(text)}{marker}", claim, check, marker, POSSIBLE_LABEL)


def _gap_line(claim: Claim, check: ClaimCheck, degraded: bool) -> AnswerLine:
    """A gap in our own words: an unconfirmed claim's text is never shown, not even as quoted (nor
    are its citations: the claim stands unconfirmed)."""
    reason = _GAP_REASON.get(check.verification, _GAP_REASON["unsupported"])
    return _claim_line(f"{_label(claim, degraded)}类说法（{claim.claim_id}）{reason}。", claim, check, "")


def _bounded(lines: Sequence[str | None]) -> list[str]:
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
    # Too long: end at the last clause boundary that keeps it within bounds, else at the first one
    # within twice that (a clause cut mid-way reads as a broken sentence: 「…期间共…」), else at the
    # last space (a timestamp or a name is never cut in two: the display step must still read it whole).
    cut = max(head.rfind(mark, 0, MAX_GIST) for mark in ("：", "，", "；", ", "))
    if cut < 8:
        cut = min((at for mark in ("：", "，", "；", ", ") if 8 <= (at := head.find(mark, 0, 2 * MAX_GIST))),
                  default=-1)
    if cut >= 8:
        return _sentence(head[:cut])
    space = head.rfind(" ", 0, MAX_GIST - 1)
    return (head[:space] if space >= 8 else head[: MAX_GIST - 1]).rstrip() + "…"


STATED_ABOVE = "见上方【结论】"


def _stated_in_full(claim: Claim, line: str) -> bool:
    """Whether a line of 【结论】 ours holds the claim's whole sentence (not a cut gist)."""
    text = _clean(claim.claim_text)
    return text is not None and text.rstrip("。.；;") in line


def _join(claims: list[Claim]) -> str:
    texts = [_gist(t) for c in claims[:MAX_SUMMARY_ITEMS] if (t := _clean(c.claim_text))]
    more = "等" if len(claims) > MAX_SUMMARY_ITEMS else ""
    return "；".join(texts) + more


def _summary(confirmed: list[tuple[Claim, ClaimCheck]], answered: set[str]) -> str | None:
    """The PASS paragraph after the first line: what the answer rests on (observed, inferred,
    risks). `answered`: ids of the claims the first line already states; None when nothing is left
    to say."""
    rest_of = [(c, k) for c, k in confirmed if c.claim_id not in answered]
    causes = [(c, k) for c, k in rest_of if c.claim_type == "root_cause"]
    risks = [c for c, _ in rest_of if c.claim_type == "risk"]
    rest = [(c, k) for c, k in rest_of if c.claim_type not in ("root_cause", "risk")]
    observed = [c for c, k in rest if k.verification == "direct_observation"]
    inferred = [c for c, k in rest if k.verification != "direct_observation"]
    parts: list[str] = []
    if causes:
        hedge = "（由证据推断，非直接观察）" if any(k.verification != "direct_observation" for _, k in causes) else ""
        parts.append(f"另一项原因判断：{_join([c for c, _ in causes])}{hedge}。")
    if observed:
        lead = "这一回答基于本次运行中直接观察到的现象" if answered else "本次运行的工具证据直接表明"
        parts.append(f"{lead}：{_join(observed)}。")
    if inferred:
        parts.append(f"结合这些证据可以推断：{_join(inferred)}。")
    if risks:
        parts.append(f"需要留意的风险是：{_join(risks)}。")
    if not parts:
        return None
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


# What no line may say while an evidence call failed: the failed query is no
# ground for denying anything.
FAILED_DENIALS = ("未发现异常", "未显示异常", "没有发现异常", "无异常")


def _denies_over_failure(inp: ComposerInput, text: str) -> bool:
    """A failed call, or a checked scope without data, is no ground for denying anything."""
    return bool(open_failures(inp.failed_calls) or inp.empty_scopes) and any(word in text for word in FAILED_DENIALS)


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
    recommended = inp.verified_executor_output.recommended_actions
    actions = [a.text for a in recommended]
    catalogued = _attest_written(recommended)
    lines: list[str | None] = []
    for text, confirm in _shown_side_texts(inp, "recommended_actions", actions):
        line = _clean(text) if text in catalogued else _grounded(_clean(text), grounding)
        if line and not _denies_over_failure(inp, line):
            text = f"可考虑：{_sentence(line)}" + (f"（{CONFIRM_LABEL}）" if confirm else "。")
            lines.append(AnswerLine(text, "CHECKED_SIDE_TEXT", label=CONFIRM_LABEL if confirm else ""))
    return lines


def _attest_written(items: Sequence[Hypothesis | RecommendedAction]) -> set[str]:
    """The texts the gatekeeper wrote from typed statements (docs/statements.md): ours, so the
    second layer that holds a model's words to the evidence's names does not apply."""
    return {item.text for item in items if item.statement is not None}


def _hypotheses(inp: ComposerInput, grounding: Terms) -> list[str | None]:
    hypotheses = inp.verified_executor_output.hypotheses
    texts = [h.text for h in hypotheses]
    typed = _attest_written(hypotheses)
    return [
        AnswerLine(f"可能：{_sentence(line)}（{HYPOTHESIS_LABEL}）", "CHECKED_SIDE_TEXT", label=HYPOTHESIS_LABEL)
        for text, _ in _shown_side_texts(inp, "hypotheses", texts)
        if (line := _clean(text) if text in typed else _grounded(_clean(text), grounding))
        and not _denies_over_failure(inp, line)
    ]


def _names(names: list[str]) -> str:
    shown = [name for name in names if _SERVICE_NAME.fullmatch(name)][:MAX_NAMES]
    more = f" 等 {len(names)} 个" if len(names) > len(shown) else ""
    return "、".join(shown) + more


def coverage_lines(coverage: ServiceCoverage | None, window: str = "") -> list[str]:
    """What the answer says about the named services it did not check, from the coverage data
    (names from the question, suggestions from the backends' catalogue), in our words. For a
    triage question: which of the catalogue's services were checked (over `window`, when given)
    and which were not — never as healthy."""
    if coverage is None:
        return []
    if coverage.triage:
        return triage_lines(coverage, window)
    lines: list[str] = []
    for unknown in coverage.unknown[:MAX_NAMES]:
        if not _SERVICE_NAME.fullmatch(unknown.name):
            lines.append("问题中有一个服务名称没有找到对应的服务。")
            continue
        close = [name for name in unknown.suggestions if _SERVICE_NAME.fullmatch(name)]
        if close:
            options = close[0] if len(close) == 1 else "、".join(close[:-1]) + " 或 " + close[-1]
            lines.append(f"没有找到服务 {unknown.name}，是否指 {options}？")
        else:
            lines.append(f"没有找到服务 {unknown.name}，也没有找到名称相近的服务。")
    if coverage.unknown:
        lines.append("没有找到的服务没有被查询，本回答不对它们作任何陈述。")
    if coverage.unchecked:
        over_limit = coverage.limit and len(coverage.checked) + len(coverage.unchecked) > coverage.limit
        limit = f"每个问题最多检查 {coverage.limit} 个服务，" if over_limit else ""
        lines.append(f"{limit}以下服务本次未检查：{_names(coverage.unchecked)}。如需检查，请单独提问。")
    if coverage.checked and lines:
        lines.append(f"本次检查的服务：{_names(coverage.checked)}。")
    return lines


def triage_lines(coverage: ServiceCoverage, window: str = "") -> list[str]:
    """【服务范围】 of a triage question: the catalogue's services checked, over which window, and
    those left unchecked (the answer says nothing about them)."""
    size = max(coverage.catalogue_size, len(coverage.checked) + len(coverage.unchecked))
    over = f"（时间窗口：{window}）" if window else ""
    if not coverage.checked:
        return ["问题没有指明服务；服务目录不可用，本次没有检查任何服务。"]
    lines = [f"问题没有指明服务，本次按服务目录巡检：目录共 {size} 个服务，检查了其中 {len(coverage.checked)} 个"
             f"{over}：{_names(coverage.checked)}。"]
    rest = size - len(coverage.checked)
    if rest > 0:
        shown = [name for name in coverage.unchecked if _SERVICE_NAME.fullmatch(name)][:MAX_NAMES]
        listed = "、".join(shown) + (" 等" if rest > len(shown) else "") if shown else ""
        bound = f"每次巡检最多检查 {coverage.limit} 个服务，" if coverage.limit else ""
        lines.append(f"{bound}其余 {rest} 个服务本次未检查" + (f"：{listed}" if listed else "")
                     + "。未检查不代表正常，本回答不对它们作任何陈述；如需检查，请指明服务名单独提问。")
    return lines


def failed_rules_line(rules: list[str]) -> str | None:
    """The failed citation rules, in our words (an id we have no words for is named as it is)."""
    texts: list[str] = []
    for rule in rules:
        if not _RULE_ID.fullmatch(rule):
            continue
        text = RULE_TEXT.get(rule) or next((t for p, t in RULE_PREFIX_TEXT.items() if rule.startswith(p)), None)
        item = f"{text}（{rule}）" if text else rule
        if item not in texts:
            texts.append(item)
    return f"未通过的核验规则：{'；'.join(texts[:MAX_NAMES])}。" if texts else None


def future_window_answer(start: datetime, end: datetime) -> StructuredAnswer:
    """MISSING_REQUIRED_CONTEXT for a question whose window lies wholly in the future, naming the
    window. Its ends are written in UTC; the display step shows them in the configured zone."""
    span = f"{_utc_minute(start)} 至 {_utc_minute(end)}"
    return structure(None, {
        "说明": [f"所问的时间段（{span}）还没有到来，其中没有可以查询的数据，因此没有查询任何数据，也没有给出结论。"],
        "下一步建议": ["请改问一个已经过去的时间段（例如最近一小时，或今天一个已经结束的时段）后重新提问；原样重试会得到同样的结果。"],
    }, fallback=True)


def _utc_minute(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def _fallback_answer(inp: ComposerInput) -> TemplateAnswer:
    fallback_type = inp.fallback_type or "PRE_VERIFICATION"
    coverage = coverage_lines(inp.service_coverage, main_window(inp))
    if fallback_type == "UNKNOWN_SERVICE":
        # The answer is about the names: the coverage lines come first, then what happens next.
        explanation = coverage or ["问题中的服务名称没有找到对应的服务，因此没有查询任何数据。"]
        return TemplateAnswer("fallback.unknown_service", None, {"说明": explanation, "下一步建议": list(UNKNOWN_SERVICE_STEPS)},
                              fallback_type)
    summary, steps = FALLBACK_TEXT.get(fallback_type, FALLBACK_TEXT["PRE_VERIFICATION"])
    if inp.fallback_cause in PRE_VERIFICATION_TEXT and fallback_type in ("PRE_VERIFICATION", "EVIDENCE_VALIDATION_FAILED"):
        summary, steps = PRE_VERIFICATION_TEXT[inp.fallback_cause]
    if fallback_type == "AGENT_UNAVAILABLE" and inp.fallback_cause == "TECHNICAL_FAILURE":
        summary, steps = AGENT_SERVICE_UNAVAILABLE_TEXT
    if fallback_type == "INSUFFICIENT_EVIDENCE" and inp.empty_scopes:
        # No data is not health: what was empty is the answer.
        summary = f"无法确认：{empty_summary(inp.empty_scopes)}，不能据此判断是否有异常。"
        steps = empty_step(inp.empty_scopes) + ["也可以人工查看相关服务的指标与日志。"]
    no_verified = inp.fallback_cause == "NO_VERIFIED_CLAIM" and fallback_type == "PRE_VERIFICATION"
    failed_kinds = failure_summary(open_failures(inp.failed_calls)) if no_verified else ""
    if failed_kinds:
        # Nothing checkable because a query failed: that is the answer, not the citations.
        summary = f"无法确认：{failed_kinds}失败，其余已完成的检查没有给出可核验的结论，因此不给出诊断结论。"
        steps = failed_step(inp) + ["也可以直接人工查看下列已核实的数据来源。"]
    explained = [summary]
    rules = failed_rules_line(inp.failed_rules) if inp.fallback_cause in ("CITATION_CHECK_FAILED", "NO_VERIFIED_CLAIM") else None
    if rules:
        explained.append(rules)
    elif no_verified and not failed_kinds:
        explained.append(NO_CLAIM_LINE)
    # What happened comes first; which named services were left out follows it.
    sections: dict[str, list[str]] = {"说明": explained + coverage}
    if no_verified:
        sections[SOURCES_SECTION] = source_lines(inp) or [NO_SOURCE_LINE]
    sections["下一步建议"] = list(steps)
    return TemplateAnswer(f"fallback.{fallback_type.lower()}", None, sections, fallback_type,
                          failed=failed_lines(inp))


def failed_gap(inp: ComposerInput) -> list[str]:
    """The failed queries as the first evidence gap."""
    kinds = failure_summary(open_failures(inp.failed_calls))
    return [f"{kinds}失败，这部分数据没有取得（见【{FAILED_SECTION}】）。"] if kinds else []


def empty_gaps(inp: ComposerInput) -> list[str]:
    """The checked scopes without data (or with logs of unknown level) as evidence gaps."""
    return [empty_gap_line(scope) for scope in inp.empty_scopes[:MAX_LINES]]


def failed_step(inp: ComposerInput) -> list[str]:
    kinds = failure_summary(open_failures(inp.failed_calls))
    return [f"确认{kinds}的后端可以访问后重新诊断。"] if kinds else []


def failed_lines(inp: ComposerInput) -> list[str]:
    """【查询失败】: every failed evidence call of the run (the ones a retry recovered say so)."""
    return [failed_call_line(call) for call in inp.failed_calls[:MAX_LINES]]


def source_lines(inp: ComposerInput, *, demo_note_line: bool = True) -> list[str]:
    """The run's completed tool calls (tool, invocation id, scope), from the store's records: no
    model text. A scope that does not look like our own rendering is left out. The demo note
    follows unless the answer states it elsewhere (`demo_note_line=False`)."""
    lines: list[str] = []
    for source in inp.verified_sources[:MAX_LINES]:
        if not _RULE_ID.fullmatch(f"tool.{source.tool_name}"):
            continue
        scope = source.scope if _SCOPE.fullmatch(source.scope) else ""
        label = source_label(source.source_kind, short=True)
        detail = "，".join(p for p in (scope, f"来源 {label}" if label else "") if p)
        lines.append(f"{source.tool_name} #{source.invocation_id}" + (f"（{detail}）" if detail else ""))
    return lines + (demo_note(s.source_kind for s in inp.verified_sources) if demo_note_line else [])


def structure(verdict_line: str | None, sections: dict[str, list[str]], *, direct_answer: str = "",
              fallback: bool = False) -> StructuredAnswer:
    """The answer as a structure: the verdict line, then each non-empty section with its items
    (an `AnswerLine` keeps its citations and verification; any other line is ours)."""
    parts = [AnswerSection(kind="CONFIDENCE", title=VERDICT_SECTION, items=[item_of(verdict_line)], plain=True)
             ] if verdict_line else []
    parts += [section(name, lines, fallback=fallback) for name, lines in sections.items()
              if name != VERDICT_SECTION and lines]
    if not direct_answer:
        # A fallback: its first explanatory line says what happened.
        direct_answer = next((part.items[0].text for part in parts if part.kind != "CONFIDENCE"), "")
    return StructuredAnswer(direct_answer=direct_answer, sections=parts)


def _rephrased(model: dict[str, list[str]], template: dict[str, list[str]]) -> dict[str, list[str]]:
    """A model composer's lines with what they carry over from the template's: a line equal to a
    template line is that line; one that shows template lines' citations (the output check lets no
    other citation through) carries their citations and verification; any other line is the
    model's rephrasing with no citation."""
    carried: dict[str, list[str]] = {}
    for name, lines in model.items():
        ours = [line for line in template.get(name, []) if isinstance(line, AnswerLine)]
        out: list[str] = []
        for line in lines:
            same = next((t for t in ours if str(t) == line), None)
            if same is not None:
                out.append(same)
                continue
            cited = [t for t in ours if t.marker and t.marker.strip() in line]
            first = cited[0] if cited else None
            out.append(AnswerLine(
                line, "COMPOSED_REPHRASING",
                verification=first.verification if first else None,
                label=first.label if first and first.label and first.label in line else "",
                citations=[c for t in cited for c in t.citations],
                marker=first.marker if first and len(cited) == 1 and first.marker in line else "",
            ))
        carried[name] = out
    return carried


def to_output(answer: TemplateAnswer, sections: dict[str, list[str]] | None = None, *, template: str | None = None,
              used_fallback_template: bool = False, fallback_reason: str = "") -> ComposerOutput:
    """A ComposerOutput of `answer` (or of `sections` laid out like it, e.g. a model's rephrasing).
    Our own lines go in here, whatever `sections` holds: the verdict line, the first line of
    【结论】 (the direct answer), 【服务范围】 after 【结论】 and 【检查范围】 before the gaps. The
    structure is built first; the text is its rendering."""
    body = answer.sections if sections is None else _rephrased(sections, answer.sections)
    verdict_line = answer.verdict_line
    full: dict[str, list[str]] = {VERDICT_SECTION: [verdict_line]} if verdict_line else {}
    ordered = [(n, list(v)) for n, v in body.items() if n not in (COVERAGE_SECTION, CHECKED_SECTION, FAILED_SECTION)]
    if answer.first_line:
        after = next((lines for name, lines in ordered if name == CONCLUSION_SECTION), [])
        ordered = [(CONCLUSION_SECTION, [answer.first_line, *answer.part_lines, *after])] + [
            (n, v) for n, v in ordered if n != CONCLUSION_SECTION
        ]
    # The answer first (its first section), then the queries that failed and which named services
    # it leaves out, then the rest.
    for index, (name, lines) in enumerate(ordered):
        if index == 1 and answer.failed:
            full[FAILED_SECTION] = list(answer.failed)
        if index == 1 and answer.coverage:
            full[COVERAGE_SECTION] = list(answer.coverage)
        if answer.checked and name in _CHECKED_BEFORE and CHECKED_SECTION not in full:
            full[CHECKED_SECTION] = list(answer.checked)
        full[name] = lines
    if answer.failed and FAILED_SECTION not in full:
        full[FAILED_SECTION] = list(answer.failed)
    if answer.coverage and COVERAGE_SECTION not in full:
        full[COVERAGE_SECTION] = list(answer.coverage)
    if answer.checked and CHECKED_SECTION not in full:
        full[CHECKED_SECTION] = list(answer.checked)
    structured = structure(verdict_line, full, direct_answer=answer.first_line,
                           fallback=answer.fallback_type is not None)
    return ComposerOutput(
        answer=render(structured),
        sections={name: [str(line) for line in lines] for name, lines in full.items()},
        template=template or answer.template,
        used_fallback_template=used_fallback_template,
        fallback_reason=fallback_reason,
        structured_answer=structured,
    )


# --- the first line: the direct answer, from verified claims only ---------------------------------


def question_intent(inp: ComposerInput) -> QuestionIntent:
    """The plan's reading of the question (ComposerInput.intent), or the query read here for a
    caller that sends only the query. The hypothesis is shown in the answer, so it is cleaned and
    bounded, and symptom ids the lexicon does not hold are dropped. A health question is a triage
    when the executor checked the catalogue's services, whatever the plan read."""
    intent = inp.intent or classify_question(inp.query)
    coverage = inp.service_coverage
    return intent.model_copy(update={
        "hypothesis": (_clean(intent.hypothesis) or "")[:MAX_HYPOTHESIS_CHARS],
        "hypothesis_symptoms": tuple(dict.fromkeys(s for s in intent.hypothesis_symptoms if s in SYMPTOMS_BY_ID)),
        "triage": intent.kind == "health" and (intent.triage or (coverage is not None and coverage.triage)),
    })


def finding_state(claim: Claim) -> str | None:
    """What a claim is for the first line: a cause, a statement that something is normal, a change,
    or an abnormality; None when it is none of these (guidance, context). Its own words decide
    normality, not its type alone: a model may type a statement of health as an `observation`
    (→ normal), or a rise as a `negative_observation` (→ not a finding at all)."""
    tools = {b.tool_name for b in claim.evidence_bindings if b.tool_name}
    if claim.claim_type == "context" or not tools or tools <= {LOOKUP_KNOWLEDGE}:
        return None
    if claim.statement is not None:
        return typed_finding_state(claim.claim_type, claim.statement)
    normal = read_quiet(claim.claim_text).normal
    if claim.claim_type == "root_cause":
        return None if normal else CAUSE
    if normal:
        return NORMAL
    if claim.claim_type == "negative_observation":
        return None  # typed as absence, but its words state none: not a ground for the answer
    if tools <= {QUERY_CHANGES}:
        return CHANGE
    return ABNORMAL


def typed_finding_state(claim_type: str, statement: Statement) -> str | None:
    """`finding_state` of a typed claim, from its statement's fields (no words read): a cause; a
    series without an onset or a search that found nothing is normal; a move is abnormal in its
    signal's bad direction (a hit ratio falling, a latency rising) and no finding the other way (a
    recovery answers nothing); a change record is a change; any other reading is abnormal."""
    if statement.cause is not None or claim_type == "root_cause":
        return CAUSE if statement.state not in ("normal", "absent") else None
    if statement.state in ("normal", "absent"):
        return NORMAL
    if claim_type == "negative_observation":
        return None
    signal = statement.signal
    if signal is not None and signal.kind == "change":
        return CHANGE
    if statement.state in ("rise", "fall") and signal is not None and signal.kind == "metric":
        if bad_direction(signal.name) != ("up" if statement.state == "rise" else "down"):
            return None
    return ABNORMAL


def _findings(pairs: list[tuple[Claim, ClaimCheck]], verdict: str,
              sources: dict[int, str] | None = None) -> list[tuple[Claim, Finding]]:
    """A finding per claim whose text may be shown. Confirmed: direct_observation; a cause also as a
    checked reasonable_inference, except under REJECT (where no cause and no causal sentence is
    confirmed)."""
    rejected = verdict == "REJECT"
    found: list[tuple[Claim, Finding]] = []
    for claim, check in pairs:
        state = finding_state(claim)
        text = _clean(claim.claim_text)
        if state is None or text is None:
            continue
        confirmed = check.verification == "direct_observation" or (
            state == CAUSE and check.verification == "reasonable_inference"
        )
        if rejected and (state == CAUSE or CAUSAL.search(text)):
            confirmed = False
        found.append((claim, make_finding(_sentence(text), _sourced(_cite(claim), claim, sources), state, confirmed)))
    return found


def _anomaly(findings: list[tuple[Claim, Finding]]) -> bool:
    return any(f.confirmed and f.state in (ABNORMAL, CAUSE) for _, f in findings)


def confirmed_anomaly(claims: list[Claim], claim_checks: list[ClaimCheck], verdict: str) -> bool:
    """Whether a confirmed finding of these checked claims is abnormal (or a cause): what the first
    line reports as found. The gateway asks it before capping an answer over an empty scope."""
    chosen = checks_by_claim(claims, claim_checks)
    return _anomaly(_findings([(claim, chosen[claim.claim_id]) for claim in claims], verdict))


def _source_scopes(inp: ComposerInput) -> list[tuple[str, int, dict[str, str]]]:
    """(tool, invocation id, scope fields) of the run's completed tool calls. The scope is the
    gateway's own rendering of the stored request (`gateway/graph.py:_scope`); one that does not
    look like it is left out."""
    return _scopes(inp.verified_sources)


def _scopes(verified: list[VerifiedSource]) -> list[tuple[str, int, dict[str, str]]]:
    sources: list[tuple[str, int, dict[str, str]]] = []
    for source in verified[:MAX_LINES]:
        if not _RULE_ID.fullmatch(f"tool.{source.tool_name}"):
            continue
        fields: dict[str, str] = {}
        if _SCOPE.fullmatch(source.scope):
            for part in (p.strip() for p in source.scope.split("，")):
                if _SCOPE_WINDOW.match(part):
                    fields["window"] = part
                elif part.startswith("服务 "):
                    fields["service"] = part[3:]
                elif part.startswith("指标 ") or part == "全部指标":
                    fields["metric"] = part.removeprefix("指标 ")
                elif part.startswith("级别 ") or part == "全部级别":
                    fields["levels"] = part.removeprefix("级别 ")
                elif part.startswith("变更类型 "):
                    fields["kind"] = part[5:]
                elif part.startswith(f"{UNEXAMINED} ") and part[len(UNEXAMINED) + 1:].isdigit():
                    fields["unexamined"] = part[len(UNEXAMINED) + 1:]
        sources.append((source.tool_name, source.invocation_id, fields))
    return sources


_SERIES_PATH = re.compile(r"^(series\[\d+\])")


def scope_summary(inp: ComposerInput, findings: list[tuple[Claim, Finding]], intent: QuestionIntent) -> str:
    """What was checked, in one phrase for the first line: services, metric series / log and change
    queries, the window (the one most calls covered)."""
    sources = [s for s in _source_scopes(inp) if s[0] in (QUERY_METRICS, QUERY_LOGS, QUERY_CHANGES)]
    services = list(dict.fromkeys(f["service"] for _, _, f in sources if "service" in f)) or list(intent.subject_services)
    series = {
        (b.source_invocation_id, m.group(1))
        for claim, finding in findings if finding.confirmed
        for b in claim.evidence_bindings
        if b.tool_name == QUERY_METRICS and (m := _SERIES_PATH.match(b.raw_path or ""))
    }
    count = {tool: sum(1 for t, _, _ in sources if t == tool) for tool in (QUERY_METRICS, QUERY_LOGS, QUERY_CHANGES)}
    parts: list[str] = []
    if series:
        parts.append(f"指标 {len(series)} 条序列")
    elif count[QUERY_METRICS]:
        parts.append(f"指标查询 {count['query_metrics']} 次")
    if count[QUERY_LOGS]:
        levels = list(dict.fromkeys(f["levels"] for t, _, f in sources if t == QUERY_LOGS and "levels" in f))
        parts.append(f"日志查询 {count['query_logs']} 次" + (f"（{'、'.join(levels)}）" if levels else ""))
    if count[QUERY_CHANGES]:
        parts.append(f"变更查询 {count['query_changes']} 次")
    window = main_window(inp)
    head = _names(services)
    what = "、".join(parts)
    text = "：".join(p for p in (head, what) if p)
    return "；".join(p for p in (text, window) if p)


def main_window(inp: ComposerInput) -> str:
    """The window most of the run's metrics, logs and changes calls covered, as 【检查范围】 writes it."""
    return source_window(inp.verified_sources)


def source_window(verified: list[VerifiedSource]) -> str:
    """The window most of these metrics, logs and changes calls covered ("" when none says)."""
    windows = [f["window"] for t, _, f in _scopes(verified)
               if t in (QUERY_METRICS, QUERY_LOGS, QUERY_CHANGES) and "window" in f]
    return max(dict.fromkeys(windows), key=windows.count) if windows else ""


def checked_lines(inp: ComposerInput, findings: list[tuple[Claim, Finding]]) -> list[str]:
    """【检查范围】: each completed tool call with its scope (from the store) and the kind of source it
    read, for a metrics query the series that confirmed findings are about; then, when any of it was
    demo material, a line saying so."""
    lines: list[str] = []
    kinds = source_kinds(inp)
    for tool, invocation, fields in _source_scopes(inp):
        scope = "，".join(fields[key] for key in ("service", "metric", "levels", "kind", "window") if key in fields)
        ref = f"{tool} #{invocation}" + (f"，来源 {label}" if (label := source_label(kinds.get(invocation, ""), short=True)) else "")
        line = f"{TOOL_LABEL.get(tool, tool)}：" + (f"{scope}（{ref}）" if scope else ref)
        if tool == QUERY_METRICS:
            names = list(dict.fromkeys(
                metric for claim, finding in findings if finding.confirmed
                for b in claim.evidence_bindings if b.tool_name == tool and b.source_invocation_id == invocation
                for metric in finding.metrics if _SERVICE_NAME.fullmatch(metric)
            ))
            if names:
                line += f"；已核对的序列：{'、'.join(names[:MAX_NAMES])}"
            if "unexamined" in fields:
                line += f"；另有 {fields['unexamined']} 条序列未检查"
        lines.append(line)
    return lines + demo_note(kinds.values())


def release_source_lines(sources: list[VerifiedSource]) -> list[str]:
    """Single-ReAct: where the run's completed calls read their evidence, one
    line per tool and kind of source, e.g. 「指标：来源 Prometheus（query_metrics #3、#5）」; then the
    demo note. The released Draft is never edited: these lines follow it."""
    groups: dict[tuple[str, str], list[int]] = {}
    for source in sources:
        if _RULE_ID.fullmatch(f"tool.{source.tool_name}") and source_label(source.source_kind):
            groups.setdefault((source.tool_name, source.source_kind), []).append(source.invocation_id)
    lines = [
        f"{TOOL_LABEL.get(tool, tool)}：来源 {source_label(kind, short=True)}（{tool} "
        + "、".join(f"#{i}" for i in ids[:MAX_NAMES]) + ("等" if len(ids) > MAX_NAMES else "") + "）"
        for (tool, kind), ids in groups.items()
    ]
    unexamined = sum(int(fields.get("unexamined", "0")) for tool, _, fields in _scopes(sources) if tool == QUERY_METRICS)
    if unexamined:
        lines.append(f"指标查询另有 {unexamined} 条序列未检查（黄金信号优先，其余按异常程度排序后展示）")
    return lines + demo_note(kind for _, kind in groups)


def demo_note(kinds: Iterable[str]) -> list[str]:
    """What the demo labels mean, once, when the answer shows demo material."""
    demo = [k for k in dict.fromkeys(kinds) if k in DEMO_KINDS]
    if not demo:
        return []
    short = "」「".join(source_label(k, short=True) for k in demo)
    return [f"标有「{short}」的内容来自 Attest 内置的演示数据，不是真实环境的数据。"]


def _first_line(inp: ComposerInput, findings: list[tuple[Claim, Finding]], verdict: str,
                checks: dict[str, ClaimCheck]) -> tuple[AnswerLine, set[str]]:
    """The direct answer and the ids of the claims it states. The line is ours (the decision
    table's); its citations are those of the confirmed findings whose citation it shows."""
    intent = question_intent(inp)
    scope = scope_summary(inp, findings, intent) if intent.kind in ("health", "why") else ""
    failed = failure_summary(open_failures(inp.failed_calls))
    empty = empty_summary(inp.empty_scopes) if inp.empty_scopes else ""
    line = first_line(intent, inp.query, [f for _, f in findings], verdict, scope, failed, empty)
    return _answer_line(line, findings, checks)


def _part_lines(inp: ComposerInput, findings: list[tuple[Claim, Finding]], verdict: str,
                checks: dict[str, ClaimCheck], above: str) -> tuple[list[AnswerLine], set[str]]:
    """The lines answering a compound question's other parts, and the ids of the claims they state."""
    failed = failure_summary(open_failures(inp.failed_calls))
    empty = empty_summary(inp.empty_scopes) if inp.empty_scopes else ""
    lines: list[AnswerLine] = []
    answered: set[str] = set()
    for text in part_lines(question_intent(inp), [f for _, f in findings], verdict, failed, empty, above):
        line, stated = _answer_line(text, findings, checks)
        lines.append(line)
        answered |= stated
    return lines, answered


def _answer_line(line: str, findings: list[tuple[Claim, Finding]],
                 checks: dict[str, ClaimCheck]) -> tuple[AnswerLine, set[str]]:
    """A line of ours with the citations of the confirmed findings it shows, and their claim ids."""
    answered = {claim.claim_id for claim, finding in findings if finding.confirmed and finding.text[:40] in line}
    shown = [(claim, finding) for claim, finding in findings if finding.confirmed and finding.cite and finding.cite in line]
    cited = [(claim, finding) for claim, finding in shown if claim.claim_id in answered] or shown
    check = checks.get(cited[0][0].claim_id) if cited else None
    markers = {finding.cite for _, finding in cited}
    structured = AnswerLine(line, "OURS", verification=check.verification if check else None,
                            citations=[c for claim, _ in cited for c in citations(claim)],
                            marker=markers.pop() if len(markers) == 1 else "")
    return structured, answered


def template_answer(inp: ComposerInput) -> TemplateAnswer:
    """The fixed-template rendering of one verdict (or fallback) from verifier-allowed material."""
    if inp.fallback_type is not None or inp.effective_verdict is None:
        answer = _fallback_answer(inp)
    else:
        answer = _verdict_answer(inp)
        answer.coverage = coverage_lines(inp.service_coverage, main_window(inp))
        if inp.service_coverage is not None and inp.service_coverage.triage:
            answer.coverage_verdict_line = TRIAGE_PARTIAL_LINE if inp.service_coverage.partial else ""
        answer.failed = failed_lines(inp)
    # The tools with no source configured, in the scope of every layout.
    answer.checked = answer.checked + disabled_lines(inp.disabled_tools)
    return answer


def _verdict_answer(inp: ComposerInput) -> TemplateAnswer:
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
    if verdict == "PASS" and inp.service_coverage is not None and inp.service_coverage.partial:
        verdict = "LOW_CONFID"  # named services were left out: partial coverage is never 「可信度：高」
    if verdict == "PASS" and open_failures(inp.failed_calls):
        verdict = "LOW_CONFID"  # a failed evidence call is never 「可信度：高」
    sources = source_kinds(inp)
    findings = _findings(pairs, verdict or "", sources)
    if verdict == "PASS" and inp.empty_scopes and not _anomaly(findings):
        verdict = "LOW_CONFID"  # no data is not health: never 「可信度：高」 for an empty scope
    line, answered = _first_line(inp, findings, verdict or "", chosen)
    parts, answered_by_parts = _part_lines(inp, findings, verdict or "", chosen, line)
    stated_lines = [line, *parts]
    answered |= answered_by_parts

    if verdict == "PASS":
        grounding = _grounding(claims, [c for c, _ in confirmed])
        sections: dict[str, list[str]] = {}
        # After 「在所查范围内未发现异常」 the list under 【依据】 says it all; otherwise a paragraph
        # says what the answer rests on.
        if not line.startswith(NOTHING_FOUND) and (rest := _summary(confirmed, answered)):
            sections[CONCLUSION_SECTION] = [rest]
        # What the first line states in full is not said again (one voice: no sentence twice).
        said = {c.claim_id for c, _ in confirmed
                if c.claim_id in answered and any(_stated_in_full(c, str(shown)) for shown in stated_lines)}
        sections["依据"] = _bounded([_fact_line(c, k, sources, c.claim_id in said) for c, k in confirmed])
        if gaps or inp.empty_scopes:
            sections["证据缺口"] = empty_gaps(inp) + _bounded([_gap_line(c, k, False) for c, k in gaps])
        sections["建议"] = _bounded(_actions(inp, grounding)) or ["如需进一步确认，可扩大时间范围复查相关指标与日志。"]
        return TemplateAnswer("pass", "PASS", sections, first_line=line, part_lines=parts,
                              checked=checked_lines(inp, findings))

    if verdict == "LOW_CONFID":
        grounding = _grounding(claims, [c for c, _ in direct])
        possible: list[str | None] = [_possible_line(c, k, sources) for c, k in inferred]
        possible += _hypotheses(inp, grounding)
        sections = {
            "已确认": _bounded([_fact_line(c, k, sources) for c, k in direct]) or ["暂无可直接确认的信息。"],
            "可能方向": _bounded(possible) or ["暂无可供参考的方向。"],
            "证据缺口": failed_gap(inp) + empty_gaps(inp) + _bounded([_gap_line(c, k, False) for c, k in gaps])
            or ["核验未指出具体的证据缺口。"],
            "下一步": failed_step(inp) + empty_step(inp.empty_scopes)
            + _bounded(_gap_steps(gaps, degraded=False) + _actions(inp, grounding))
            or ["请补充相关服务的指标与日志后重新诊断。"],
        }
        return TemplateAnswer("low_confid", "LOW_CONFID", sections, first_line=line, part_lines=parts,
                              checked=checked_lines(inp, findings))

    # REJECT: degraded, bounded; never a root cause, never unconfirmed content, never 「是」.
    facts = [
        _fact_line(c, k, sources) for c, k in direct if c.claim_type != "root_cause" and not CAUSAL.search(c.claim_text)
    ]
    unconfirmed = gaps + inferred
    sections = {
        "说明": ["当前证据不足以支持可靠结论，以下仅列出已核实的信息与证据缺口，不对故障原因下结论。"],
        "已确认": _bounded(facts) or ["暂无可确认的信息。"],
        "证据缺口": failed_gap(inp) + empty_gaps(inp) + _bounded([_gap_line(c, k, True) for c, k in unconfirmed])
        or ["核验未指出具体的证据缺口。"],
        "下一步": failed_step(inp) + empty_step(inp.empty_scopes) + _bounded(_gap_steps(unconfirmed, degraded=True))
        + ["请人工核对相关服务的指标、日志与近期变更后再下结论。"],
    }
    return TemplateAnswer("reject", "REJECT", sections, first_line=line, part_lines=parts)


def compose_answer(inp: ComposerInput) -> ComposerOutput:
    """Render the final answer for one verdict (or fallback) from verifier-allowed material only."""
    answer = template_answer(inp)
    if answer.fallback_type is not None:
        return to_output(
            answer, used_fallback_template=True,
            fallback_reason=f"fallback type {answer.fallback_type}: fixed safe template",
        )
    return to_output(answer)
