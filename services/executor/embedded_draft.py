"""The embedded single-ReAct agent's Draft, built from what its tool calls actually returned.

The findings are the embedded executor agent's (`embedded_agent.py` and the `embedded_*.py`
modules beside it: metric anomalies, error log clusters, changes before an onset, no-hit results,
runbook-shaped next steps); this module only lays them out as a Draft that passes EvidenceGuard
when the evidence is honest:

- one Analysis per finding, citing the `tool_call_id`s of the invocations its evidence comes
  from. Its kind follows those invocations' evidence status, never the wording: NORMAL for
  EVIDENCE_FOUND (an anomaly, an error burst, a change record, and also a metric series read in
  full that shows no rise), NEGATIVE_OBSERVATION for NO_EVIDENCE (a query that matched nothing);
- a Conclusion only when some Analysis shows an anomaly (a metric rise or a log burst). Its text
  is made of those Analyses' own sentences and references exactly them: it states what was
  observed and never a cause — possible causes stay out of the Draft, and the limitations say
  that the root cause is not confirmed;
- with a Conclusion, the next steps as Action Plan items referencing the Analyses they follow
  from, each with its human-confirmation flag (true for anything that changes the running
  system); without one, only read-only advice, as Recommendations. Runbook pointers are left
  out: a runbook is guidance, and no Analysis shows it;
- what the evidence could not show as limitations.

A failed evidence call (its backend refused, timed out, answered an HTTP error or not in its
format: `shared.failed_calls`) is no ground for denying anything: the
conclusion then opens 「无法确认：<日志/指标>查询失败，…」 (`first_line` with `failed`) unless a
confirmed anomaly answers the question, the checks that did complete follow it as 「已完成的检查：
<scope>」 and stay shown as Analyses, and no side text says 未发现异常 / 运行正常 … (`shared.
health_denials`) — so the Draft passes the answer guard instead of ending in a fallback. The failed
calls themselves are named by the release (【查询失败】, in the gateway's words), and the raw error
text the executor put into its missing info never reaches the Draft.

No data is not health: while a checked service and window had no data, or logs whose level could
not be read (`shared.no_data`), and nothing abnormal was found, the Draft has no conclusion; the
run ends INSUFFICIENT_EVIDENCE, whose text names what was empty.

Side texts pass the same checks SemanticGuard runs (`shared.core.grounding.side_texts`) before they
enter the Draft, against the Analyses' own sentences (what the snapshot will show of each cited
call): an action naming what no Analysis shows, or a limitation asserting it, is left out, and a
state-changing action always carries human confirmation — so the agent's honest Draft never fails
its own review.
"""

from __future__ import annotations

from services.executor.checked_scope import CHANGE_STATE, NORMAL_STATE, checked_items, scope_text
from shared.core.contracts import ExecutorEvidenceV2, QuestionIntent, ToolInvocation
from shared.core.direct_answer import (
    ABNORMAL,
    CAUSE,
    CHANGE,
    FINDING_STATES,
    FOUND,
    NORMAL,
    NOT_SUPPORTED,
    UNKNOWN,
    finding_signals,
    first_line,
    gist,
    make_finding,
    part_lines,
)
from shared.core.grounding.actions import needs_confirmation
from shared.core.grounding.side_texts import check_action, check_possibility
from shared.core.grounding.statement_check import CitedRef
from shared.core.health_denials import denials
from shared.core.tool_catalogue import QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.draft_contract import ActionPlanItem, Analysis, Conclusion, Draft, Recommendation
from shared.failed_calls import failed_calls, failure_summary, open_failures
from shared.no_data import empty_scopes

MAX_CONCLUSION_ANALYSES = 3
MAX_LIMITATIONS = 6
MAX_QUIET_PER_SERVICE = 2  # quiet reads shown for a checked service with nothing wrong, beside anomalies
RUNBOOK_POINTER_PREFIX = "参考运行手册"  # embedded_side_lists._runbook_actions
MISSING_SERVICE = "服务名：问题中没有可识别的服务名（如 xxx-service），无法确定要检查哪个服务的指标、日志与变更。"
ROOT_CAUSE_UNCONFIRMED = "以上只陈述本次工具调用查到的现象；根因尚未由证据确认。"
SCOPE_ONLY = "「未发现异常」只针对上述指标、日志级别、变更记录与时间窗口；范围之外的问题无法排除。"
SUPPORTING_PREFIX = "同时查到："
CHECKED_PREFIX = "已完成的检查（逐项见分析）："
# With a failed call, in place of SCOPE_ONLY: what the answer does not cover.
FAILED_SCOPE = "{kinds}失败，相应的证据没有取得：结论只涵盖已完成的检查，失败的查询所涉及的问题无法排除。"
_READING = "reading"  # routine log lines: shown, neither an anomaly nor a quiet signal
_SCOPE_STATES = frozenset({NORMAL, CHANGE, _READING})
# Findings that show something wrong (not a change record, not a quiet series).
_ANOMALY_TOOLS = frozenset({QUERY_METRICS, QUERY_LOGS})


def missing_service_draft() -> Draft:
    """No service named: nothing can be checked, so nothing is concluded and nothing is called."""
    return Draft(conclusion=None, missing_context=[MISSING_SERVICE])


def _sentence(text: str) -> str:
    return text.strip().rstrip("。.；;")


def _state(claim_type: str, kind: str, tools: set[str]) -> str | None:
    """What a derived finding shows, for the first line (`shared.core.direct_answer`)."""
    if claim_type == "root_cause":
        return CAUSE  # a cause whose link the derive checked
    if claim_type == "negative_observation":
        return NORMAL  # a quiet series read in full, or a search that matched nothing
    if kind == "NORMAL" and tools <= _ANOMALY_TOOLS:
        return ABNORMAL  # a metric rise or a log burst
    if kind == "NORMAL" and tools == {QUERY_CHANGES}:
        return CHANGE
    return None  # guidance (runbooks) or a mixed finding: not an answer


def _refs_of(text: str, analyses: list[Analysis], states: dict[str, str | None], scoped: bool) -> list[str]:
    """The Analyses a conclusion rests on: those whose sentences it repeats, and with a scope
    (「在所查范围内未发现异常（…）」) every Analysis of a check inside that scope."""
    refs = [a.analysis_id for a in analyses if _sentence(gist(a.text)).rstrip("…") in text]
    if scoped:
        refs += [a.analysis_id for a in analyses if states.get(a.analysis_id) in _SCOPE_STATES]
    if not refs:
        refs = [a.analysis_id for a in analyses if states.get(a.analysis_id) is not None]
    return list(dict.fromkeys(refs))


def draft_from_evidence(output: ExecutorEvidenceV2, invocations: list[ToolInvocation], query: str,
                        intent: QuestionIntent) -> Draft:
    """The Draft of the derived `output`, whose bindings cite `invocations` by invocation id;
    its conclusion answers `query`, which asks what `intent` reads (`shared.core.direct_answer`)."""
    by_id = {invocation.invocation_id: invocation for invocation in invocations}
    failed = open_failures(failed_calls(invocations))
    failed_tools = {call.tool_name for call in failed}
    analyses: list[Analysis] = []
    states: dict[str, str | None] = {}
    anomalies: list[Analysis] = []
    changes: list[Analysis] = []
    stated: dict[str, list[str]] = {}
    tools_of: dict[str, set[str]] = {}
    for claim in output.claims:
        found = [by_id.get(binding.source_invocation_id) for binding in claim.evidence_bindings
                 if binding.source_invocation_id is not None]
        cited = [inv for inv in found if inv is not None and inv.lifecycle == "READY"]
        if not cited or len(cited) < len(claim.evidence_bindings):
            continue  # a finding whose evidence is not a ready call of this run is not stated
        statuses = {inv.evidence_status for inv in cited}
        if statuses == {"EVIDENCE_FOUND"}:
            kind = "NORMAL"
        elif statuses == {"NO_EVIDENCE"}:
            kind = "NEGATIVE_OBSERVATION"
        else:
            continue
        analysis = Analysis(
            analysis_id=f"a{len(analyses) + 1}",
            kind=kind,
            text=claim.claim_text,
            tool_call_ids=list(dict.fromkeys(inv.tool_call_id for inv in cited)),
        )
        analyses.append(analysis)
        for tool_call_id in analysis.tool_call_ids:
            stated.setdefault(tool_call_id, []).append(analysis.text)
        tools = {inv.tool_name for inv in cited}
        tools_of[analysis.analysis_id] = tools
        states[analysis.analysis_id] = _state(claim.claim_type, kind, tools)
        if states[analysis.analysis_id] in (ABNORMAL, CAUSE):
            anomalies.append(analysis)
        elif states[analysis.analysis_id] == CHANGE:
            changes.append(analysis)

    # Nothing abnormal: the answer is what was checked, so every check is shown.
    # With anomalies, a yes/no question still gets the quiet series of its hypothesis' signal
    # (「证据不支持：…（<metric> 正常…）」 needs the series that shows it).
    troubled = bool(anomalies)
    wanted = set(intent.hypothesis_symptoms).union(*(part.hypothesis_symptoms for part in intent.parts))
    # A checked service with nothing wrong is said to look normal, next to another's anomalies
    # (「A 和 B 有没有异常」 answers for B too): its quiet reads, at most MAX_QUIET_PER_SERVICE.
    service_of = {inv.tool_call_id: str(inv.request.get("service") or "") for inv in invocations}
    abnormal_services = {service_of.get(tc, "") for a in anomalies for tc in a.tool_call_ids}
    quiet_shown: dict[str, int] = {}
    for item in checked_items(invocations, stated):
        service = service_of.get(item.tool_call_id, "")
        quiet_service = (item.state == NORMAL_STATE and service and service not in abnormal_services
                         and quiet_shown.get(service, 0) < MAX_QUIET_PER_SERVICE)
        if troubled and not quiet_service and not (item.state == NORMAL_STATE and not item.negative
                                                   and wanted & finding_signals(item.text)[0]):
            continue
        if quiet_service:
            quiet_shown[service] = quiet_shown.get(service, 0) + 1
        analysis = Analysis(
            analysis_id=f"a{len(analyses) + 1}",
            kind="NEGATIVE_OBSERVATION" if item.negative else "NORMAL",
            text=item.text,
            tool_call_ids=[item.tool_call_id],
        )
        analyses.append(analysis)
        tools_of[analysis.analysis_id] = {inv.tool_name for inv in invocations if inv.tool_call_id == item.tool_call_id}
        states[analysis.analysis_id] = {NORMAL_STATE: NORMAL, CHANGE_STATE: CHANGE}.get(item.state, _READING)
        if item.state == CHANGE_STATE:
            changes.append(analysis)

    # A failed call's missing info carries the backend's error text; the failure is named in our
    # words instead (FAILED_SCOPE here, 【查询失败】 in the release).
    limitations = list(dict.fromkeys(
        item.text for item in output.missing_info if item.tool_name not in failed_tools))[:MAX_LIMITATIONS]
    kinds = failure_summary(failed)
    conclusion = None
    # A conclusion needs something read: an anomaly, a change, a cause, or a series read in full
    # (searches that matched nothing alone are no answer: INSUFFICIENT_EVIDENCE, as before) — or,
    # when a call failed, anything read at all: 「无法确认：…查询失败」 is then the answer.
    answerable = troubled or changes or any(
        states.get(a.analysis_id) == NORMAL and a.kind == "NORMAL" for a in analyses) or bool(failed and analyses)
    if not troubled and empty_scopes(invocations):
        # No data is not health: a checked scope without data (or with logs of unknown level) and
        # no anomaly is no answer; the gateway's INSUFFICIENT_EVIDENCE names what was empty.
        answerable = False
    if answerable:
        conclusion = _conclusion(intent, query, analyses, states, anomalies, invocations, kinds, tools_of)
        if troubled:
            if not any(states.get(ref) == CAUSE for ref in conclusion.analysis_refs):
                limitations = limitations[: MAX_LIMITATIONS - 1] + [ROOT_CAUSE_UNCONFIRMED]
        elif not failed:
            limitations = limitations[: MAX_LIMITATIONS - 1] + [SCOPE_ONLY]
    if failed:
        limitations = [FAILED_SCOPE.format(kinds=kinds)] + limitations[: MAX_LIMITATIONS - 1]

    by_analysis = {analysis.analysis_id: CitedRef(analysis.text) for analysis in analyses}
    limitations = [
        text for text in limitations if check_possibility(text, list(by_analysis.values()), states_unknowns=True).shown
        and not (failed and denials(text))
    ]
    action_plan: list[ActionPlanItem] = []
    recommendations: list[Recommendation] = []
    for action in output.recommended_actions:
        if action.text.startswith(RUNBOOK_POINTER_PREFIX):
            continue  # a runbook is guidance, not evidence of this incident: no Analysis shows it
        if failed and denials(action.text):
            continue  # 「当前证据未显示异常；…」: a failed query is no ground for it
        confirm = action.requires_human_confirmation or needs_confirmation(action.text)
        if conclusion is not None and troubled:
            refs = [r for r in conclusion.analysis_refs if states.get(r) in (ABNORMAL, CAUSE, CHANGE)] \
                or list(conclusion.analysis_refs)
            if "变更" in action.text:
                refs += [a.analysis_id for a in changes if a.analysis_id not in refs]
            if check_action(action.text, [by_analysis[r] for r in refs], model_confirmation=confirm).shown:
                action_plan.append(ActionPlanItem(text=action.text, analysis_refs=refs, requires_human_confirmation=confirm))
        elif analyses and not confirm and check_action(action.text, list(by_analysis.values()),
                                                        model_confirmation=False).shown:
            # Nothing abnormal (or no conclusion): nothing is to be acted on — a routine change is
            # mentioned, never rolled back; read-only advice only.
            recommendations.append(Recommendation(text=action.text, analysis_refs=[a.analysis_id for a in analyses]))
    return Draft(
        conclusion=conclusion,
        analyses=analyses,
        action_plan=action_plan,
        recommendations=recommendations,
        limitations=limitations,
    )


def _conclusion(intent: QuestionIntent, query: str, analyses: list[Analysis], states: dict[str, str | None],
                anomalies: list[Analysis], invocations: list[ToolInvocation], failed: str = "",
                tools_of: dict[str, set[str]] | None = None) -> Conclusion:
    """First line: the direct answer to the question; then, if there are any, the other abnormal
    findings it rests on, in their own words. `failed` names the kinds of query that failed
    (「日志查询」): the line then denies nothing, and when it cannot tell, what was checked follows."""
    tools = tools_of or {}
    findings = [make_finding(_sentence(a.text), "", states[a.analysis_id], True,  # type: ignore[arg-type]
                             tools.get(a.analysis_id, set()))
                for a in analyses if states.get(a.analysis_id) in FINDING_STATES]
    named = {metric for a in analyses if states.get(a.analysis_id) == NORMAL and a.kind == "NORMAL"
             for metric in finding_signals(a.text)[2]}
    scope = scope_text(invocations, named)
    line = first_line(intent, query, findings, "SUCCESS", scope, failed)
    # A compound question's other parts, a line each, right after the first.
    parts = [part.rstrip("。") + "。" for part in part_lines(intent, findings, "SUCCESS", failed, above=line)]
    # After 是 / 发现异常 / a cause or its lead, the other anomalies it rests on; after an answer
    # that denies or cannot tell (证据不支持 / 无法确认), nothing: they are in the analyses — unless
    # it cannot tell because a query failed: then what did complete is said after it.
    unanswered = bool(failed) and f"{failed}失败" in line
    denies = line.startswith((NOT_SUPPORTED, UNKNOWN)) and not unanswered
    supporting = [] if denies else [
        _sentence(a.text) for a in anomalies[:MAX_CONCLUSION_ANALYSES]
        if not any(_sentence(gist(a.text)) in said for said in (line, *parts))]
    text = "\n".join([line.rstrip("。") + "。", *parts])
    if supporting:
        text += "\n" + SUPPORTING_PREFIX + "；".join(supporting) + "。"
    if unanswered and scope:
        text += "\n" + CHECKED_PREFIX + scope + "。"
    refs = _refs_of(text, analyses, states, scoped=bool(scope) and scope in text)
    if intent.triage and line.startswith(FOUND):
        # The line names every service an abnormal finding names: it rests on all of them.
        refs += [a.analysis_id for a in analyses if states.get(a.analysis_id) in (ABNORMAL, CAUSE)]
    return Conclusion(text=text, analysis_refs=list(dict.fromkeys(refs)))
