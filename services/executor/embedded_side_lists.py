"""The lists beside the embedded executor agent's claims: hypotheses (possible causes, never
facts), recommended actions (pointers to the runbooks looked up, whose hits are read here, the
read-only first steps of the failure modes seen, rollback advice only with a linked change) and
missing info (what the evidence cannot show).
"""

from __future__ import annotations

import re

from services.executor.embedded_findings import Candidate, Findings, RunbookHit, load_result, parse_ts
from services.executor.embedded_wording import moved_metrics, short
from shared.config import configured_failure_modes
from shared.core.contracts import (
    EVIDENCE_TOOLS,
    Claim,
    Hypothesis,
    MissingInfo,
    Plan,
    RecommendedAction,
    ToolInvocation,
)
from shared.core.failure_modes import Mechanism
from shared.core.grounding.causal_link import advises_rollback
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, by_specificity, find_symptoms
from shared.core.tool_catalogue import QUERY_CHANGES, QUERY_METRICS
from shared.core.tool_results import KnowledgeResult

MAX_HYPOTHESES = 4
MAX_ACTIONS = 5
MAX_MISSING = 6
CORRELATION_BEFORE_MIN = 10
CORRELATION_AFTER_MIN = 15
MAX_RUNBOOK_ACTIONS = 2
MAX_MECHANISM_ACTIONS = 2  # failure modes whose first read-only step is advised
MAX_STEP_CHARS = 90
# Words of an action that changes the running system: such an action needs a human.
_SYSTEM_CHANGING = re.compile(r"回滚|重启|扩容|缩容|清理|删除|截断|替换|调大|调小|调高|调整|限流|降级|熔断|kill|restart|rollback|scale", re.I)
_STEP_SECTION = re.compile(r"排查|处置|处理|步骤|止血|mitigat|troubleshoot|remediat", re.I)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)、])\s+")


def knowledge_findings(invocation: ToolInvocation, findings: Findings) -> None:
    """Runbook hits, kept only to shape recommended_actions: never a claim, never a fact."""
    data = load_result(invocation, findings, KnowledgeResult)
    if data is None:
        return
    for doc in data.docs:
        for chunk in doc.chunks:
            # A deduped chunk (returned earlier in the run) has no text here, but its
            # runbook can still be pointed to.
            findings.runbooks.append(RunbookHit(
                title=doc.title, path=doc.path, kind=doc.kind, heading=chunk.heading, text=chunk.text or "",
            ))


def hypotheses_for(selected: list[Candidate], claims: list[Claim], candidates: list[Candidate],
                   narrow: bool) -> list[Hypothesis]:
    """Possible explanations, never confirmed facts: a log burst that starts near a metric's
    onset may be related; the usual causes of each observed symptom."""
    ids = {id(c): claim.claim_id for c, claim in zip(selected, claims)}
    hypotheses: list[Hypothesis] = []
    onsets = {id(c): at for c in selected if c.kind == "anomaly" and (at := parse_ts(c.onset_ts or "")) is not None}
    anomalies = [c for c in selected if id(c) in onsets]
    firsts = {id(c): at for c in candidates if c.kind == "log_cluster" and (at := parse_ts(c.first_ts or "")) is not None}
    clusters = [c for c in candidates if id(c) in firsts]
    for service in dict.fromkeys(c.service for c in anomalies):
        own = sorted((c for c in anomalies if c.service == service), key=lambda c: onsets[id(c)])
        onset = onsets[id(own[0])]
        near: list[tuple[float, float, Candidate]] = []
        for cluster in (c for c in clusters if c.service == service):
            minutes = (firsts[id(cluster)] - onset).total_seconds() / 60
            if -CORRELATION_BEFORE_MIN <= minutes <= CORRELATION_AFTER_MIN:
                near.append((abs(minutes), -cluster.score, cluster))
        if not near:
            continue
        # The burst that starts closest to the onset is the likeliest companion.
        cluster = min(near, key=lambda item: item[:2])[2]
        related = [ids[id(c)] for c in own] + ([ids[id(cluster)]] if id(cluster) in ids else [])
        hypotheses.append(Hypothesis(
            text=(
                f"{service} 的 {moved_metrics(own)}（最早约自 {own[0].onset_ts} 起）与 "
                f"{cluster.level} 日志「{short(cluster.excerpt)}」（首次出现于 {cluster.first_ts}）时间接近，"
                f"二者可能相关；是否为根因需结合变更记录与代码进一步确认。"
            ),
            related_claim_ids=related,
        ))
    for change in (c for c in selected if c.kind == "change" and c.related is not None):
        anomaly = change.related
        assert anomaly is not None  # chosen for having one
        related = [ids[id(anomaly)]] if id(anomaly) in ids else []
        hypotheses.append(Hypothesis(
            text=(
                f"{change.service} 的变更（{change.first_ts}）发生在异常开始（约 "
                f"{anomaly.onset_ts or anomaly.first_ts} 起）前约 {round(change.minutes_before)} 分钟，变更可能与异常相关；"
                f"但变更内容与错误日志没有共同的关键标识，时间接近不能证明因果，需对照变更内容与错误日志确认。"
            ),
            related_claim_ids=related + [ids[id(change)]],
        ))
    if not narrow:
        # The usual causes of what the metrics show (of what the logs show, when metrics show nothing).
        sources = [c for c in selected if c.kind == "anomaly"] or [c for c in selected if c.kind == "log_cluster"]
        seen: set[tuple[str, str]] = set()
        for candidate in sources:
            for symptom in sorted(candidate.symptoms):
                if (candidate.service, symptom) in seen:
                    continue
                seen.add((candidate.service, symptom))
                info = SYMPTOMS_BY_ID[symptom]
                hypotheses.append(Hypothesis(
                    text=(
                        f"{candidate.service} 的 {info.label_zh} 异常的常见原因包括："
                        f"{'、'.join(info.possible_causes_zh)}；本次证据尚不能确认是哪一种。"
                    ),
                    related_claim_ids=[ids[id(candidate)]],
                ))
    return hypotheses[: 1 if narrow else MAX_HYPOTHESES]

def actions_for(positives: list[Candidate], asked: set[str], narrow: bool,
                runbooks: list[RunbookHit]) -> list[RecommendedAction]:
    order: list[str] = [s for s in sorted(asked) if any(s in c.symptoms for c in positives)]
    for candidate in positives:
        order += [s for s in sorted(candidate.symptoms) if s not in order and (not narrow or not asked or s in asked)]
    actions: list[RecommendedAction] = []
    linked = [c for c in positives if c.kind == "cause" and c.change_linked]
    if positives and not narrow:
        actions += _runbook_actions(runbooks, by_specificity(order), allow_rollback=bool(linked))
    for cause in linked:
        what = f"中与 {cause.link_token} 相关的内容" if cause.link_token else "内容与其后首次出现的日志"
        actions.append(RecommendedAction(
            text=f"核对 {cause.first_ts} 的变更{what}；确认是该变更引起后，按变更回滚流程处理。",
            requires_human_confirmation=True,
        ))
    for change in (c for c in positives if c.kind == "change" and c.related is not None):
        actions.append(RecommendedAction(
            text=f"核对 {change.service} 在 {change.first_ts} 的变更内容与异常现象是否相关。",
            requires_human_confirmation=False,
        ))
    # The read-only first steps of the failure modes the findings show (the catalogue's), the
    # cause's first: what an SRE checks for this kind of failure.
    for mechanism in _mechanisms(positives)[:MAX_MECHANISM_ACTIONS]:
        step = mechanism.next_steps_zh[0]
        if all(a.text != step for a in actions):
            actions.append(RecommendedAction(text=step, requires_human_confirmation=False))
    for symptom in order:
        for action in SYMPTOMS_BY_ID[symptom].actions:
            if action.after_linked_change and not linked:
                continue  # rollback advice follows only from a checked link
            if all(a.text != action.text for a in actions):
                actions.append(RecommendedAction(text=action.text, requires_human_confirmation=action.changes_system))
    if not linked:
        # No rollback advice without a linked change, whatever a runbook's first step says.
        actions = [a for a in actions if not advises_rollback(a.text)]
    if not actions and any(c.kind in ("anomaly", "log_cluster", "cause") for c in positives):
        # Something is wrong, of no kind we know a step for: compare it with what changed.
        actions.append(RecommendedAction(
            text="对照异常开始的时间，核对同期的发布、配置变更与上下游服务状态。",
            requires_human_confirmation=False,
        ))
    if not actions:
        actions.append(RecommendedAction(
            text="当前证据未显示异常；如仍有疑虑，请提供告警名称或具体时间点以缩小排查范围。",
            requires_human_confirmation=False,
        ))
    return actions[: 2 if narrow else MAX_ACTIONS]


def _runbook_actions(runbooks: list[RunbookHit], symptoms: list[str], allow_rollback: bool = False) -> list[RecommendedAction]:
    """Pointers to the best-ranked runbook (a past-incident note is no procedure) about each
    symptom seen, the most specific symptom first, at most MAX_RUNBOOK_ACTIONS, each with the
    first step of its investigation or remediation section when that section was among the hits
    (not a step that rolls back, unless `allow_rollback`: a linked change). Guidance, not evidence."""
    actions: list[RecommendedAction] = []
    used: set[str] = set()
    for symptom in symptoms:
        if len(actions) >= MAX_RUNBOOK_ACTIONS:
            break
        hit = next(
            (h for h in runbooks if h.kind != "incident" and h.path not in used and symptom in find_symptoms(h.title)),
            None,
        )
        if hit is None:
            continue  # no runbook about what the evidence shows
        used.add(hit.path)
        step_hit = next(
            (h for h in runbooks if h.path == hit.path and _STEP_SECTION.search(h.heading) and _first_step(h.text)
             and (allow_rollback or not advises_rollback(_first_step(h.text)))),
            None,
        )
        text = f"参考运行手册《{hit.title}》（{hit.path}）"
        if step_hit is not None:
            text += f"「{step_hit.heading.split(' > ')[0]}」：{_first_step(step_hit.text)}"
        else:
            text += "中的排查步骤与处置方法。"
        actions.append(RecommendedAction(text=text, requires_human_confirmation=bool(_SYSTEM_CHANGING.search(text))))
    return actions


def _first_step(chunk_text: str) -> str:
    """The chunk's first list item, without its marker, bounded."""
    for line in chunk_text.splitlines():
        if _LIST_MARKER.match(line):
            step = _LIST_MARKER.sub("", line).strip()
            return step if len(step) <= MAX_STEP_CHARS else step[: MAX_STEP_CHARS - 1] + "…"
    return ""


def _mechanisms(positives: list[Candidate]) -> list[Mechanism]:
    """The failure modes (`shared/core/failure_modes.json`) the findings show, causes first, then
    anomalies by their metric, then log lines by their words; each once."""
    catalogue = configured_failure_modes()
    rank = {"cause": 0, "anomaly": 1, "log_cluster": 2}
    found: dict[str, Mechanism] = {}
    for candidate in sorted((c for c in positives if c.kind in rank), key=lambda c: rank[c.kind]):
        matches = [m.mechanism for m in catalogue.for_metric(candidate.metric)] if candidate.metric else []
        matches += [m.mechanism for m in catalogue.line_mentions(candidate.excerpt or candidate.text)]
        for mechanism in matches[:1]:
            found.setdefault(mechanism.id, mechanism)
    return list(found.values())


def missing_for(plan: Plan, findings: Findings, positives: list[Candidate], asked: set[str],
                invocations: list[ToolInvocation]) -> list[MissingInfo]:
    """What the evidence cannot show: a question with no service name first, then the gaps the
    findings noted, the change records not read (when something is wrong) and each asked symptom
    nothing read shows; each once, at most MAX_MISSING."""
    evidence = [inv for inv in invocations if inv.tool_name in EVIDENCE_TOOLS]
    missing = findings.missing
    if "service" in plan.missing_context:
        missing.insert(0, MissingInfo(text="问题中没有可识别的服务名（如 xxx-service），无法查询指标与日志；请指明服务。"))
    if positives and QUERY_CHANGES not in findings.queried_tools:
        missing.append(MissingInfo(
            text="本次未查询变更记录（发布、配置变更），无法判断异常开始前是否有相关变更。", tool_name=QUERY_CHANGES
        ))
    for symptom in sorted(asked):
        if not any(symptom in c.symptoms for c in findings.candidates) and evidence:
            missing.append(MissingInfo(
                text=f"本次查询结果中没有与「{SYMPTOMS_BY_ID[symptom].label_zh}」直接对应的指标或日志。",
                tool_name=QUERY_METRICS,
            ))
    return _dedupe_missing(missing)[:MAX_MISSING]


def _dedupe_missing(items: list[MissingInfo]) -> list[MissingInfo]:
    seen: set[str] = set()
    unique: list[MissingInfo] = []
    for item in items:
        if item.text not in seen:
            seen.add(item.text)
            unique.append(item)
    return unique
