"""The embedded single-ReAct agent's Draft, built from what its tool calls actually returned.

The findings are the embedded executor agent's (`embedded_agent.py`: metric anomalies, error
log clusters, changes before an onset, no-hit results, runbook-shaped next steps); this module
only lays them out as a Draft that passes EvidenceGuard when the evidence is honest:

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

Side texts pass the same checks SemanticGuard runs (`shared.grounding.side_texts`) before they
enter the Draft, against the Analyses' own sentences (what the snapshot will show of each cited
call): an action naming what no Analysis shows, or a limitation asserting it, is left out, and a
state-changing action always carries human confirmation — so the agent's honest Draft never fails
its own review.
"""

from __future__ import annotations

from shared.contracts import ExecutorEvidenceV2, ToolInvocation
from shared.draft_contract import ActionPlanItem, Analysis, Conclusion, Draft, Recommendation
from shared.grounding.actions import needs_confirmation
from shared.grounding.side_texts import check_action, check_possibility
from shared.grounding.statement_check import CitedRef

MAX_CONCLUSION_ANALYSES = 3
MAX_LIMITATIONS = 6
RUNBOOK_POINTER_PREFIX = "参考运行手册"  # embedded_agent._runbook_actions
MISSING_SERVICE = "服务名：问题中没有可识别的服务名（如 xxx-service），无法确定要检查哪个服务的指标、日志与变更。"
ROOT_CAUSE_UNCONFIRMED = "以上只陈述本次工具调用查到的现象；根因尚未由证据确认。"
# Findings that show something wrong (not a change record, not a quiet series).
_ANOMALY_TOOLS = frozenset({"query_metrics", "query_logs"})


def missing_service_draft() -> Draft:
    """No service named: nothing can be checked, so nothing is concluded and nothing is called."""
    return Draft(conclusion=None, missing_context=[MISSING_SERVICE])


def _sentence(text: str) -> str:
    return text.strip().rstrip("。.；;")


def draft_from_evidence(output: ExecutorEvidenceV2, invocations: list[ToolInvocation]) -> Draft:
    """The Draft of the derived `output`, whose bindings cite `invocations` by invocation id."""
    by_id = {invocation.invocation_id: invocation for invocation in invocations}
    analyses: list[Analysis] = []
    anomalies: list[Analysis] = []
    changes: list[Analysis] = []
    for claim in output.claims:
        cited = [by_id.get(binding.source_invocation_id) for binding in claim.evidence_bindings]
        if not cited or any(inv is None or inv.lifecycle != "READY" for inv in cited):
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
        tools = {inv.tool_name for inv in cited}
        if kind == "NORMAL" and claim.claim_type != "negative_observation" and tools <= _ANOMALY_TOOLS:
            anomalies.append(analysis)
        elif kind == "NORMAL" and tools == {"query_changes"}:
            changes.append(analysis)

    limitations = list(dict.fromkeys(item.text for item in output.missing_info))[:MAX_LIMITATIONS]
    conclusion = None
    if anomalies:
        shown = anomalies[:MAX_CONCLUSION_ANALYSES]
        conclusion = Conclusion(
            text="本次检查查到以下异常表现：" + "；".join(_sentence(a.text) for a in shown) + "。",
            analysis_refs=[a.analysis_id for a in shown],
        )
        limitations = limitations[: MAX_LIMITATIONS - 1] + [ROOT_CAUSE_UNCONFIRMED]

    by_analysis = {analysis.analysis_id: CitedRef(analysis.text) for analysis in analyses}
    limitations = [
        text for text in limitations if check_possibility(text, list(by_analysis.values()), states_unknowns=True).shown
    ]
    action_plan: list[ActionPlanItem] = []
    recommendations: list[Recommendation] = []
    for action in output.recommended_actions:
        if action.text.startswith(RUNBOOK_POINTER_PREFIX):
            continue  # a runbook is guidance, not evidence of this incident: no Analysis shows it
        confirm = action.requires_human_confirmation or needs_confirmation(action.text)
        if conclusion is not None:
            refs = list(conclusion.analysis_refs)
            if "变更" in action.text:
                refs += [a.analysis_id for a in changes if a.analysis_id not in refs]
            if check_action(action.text, [by_analysis[r] for r in refs], model_confirmation=confirm).shown:
                action_plan.append(ActionPlanItem(text=action.text, analysis_refs=refs, requires_human_confirmation=confirm))
        elif analyses and not confirm and check_action(action.text, list(by_analysis.values()),
                                                        model_confirmation=False).shown:
            # Without a conclusion nothing is to be acted on; read-only advice only.
            recommendations.append(Recommendation(text=action.text, analysis_refs=[a.analysis_id for a in analyses]))
    return Draft(
        conclusion=conclusion,
        analyses=analyses,
        action_plan=action_plan,
        recommendations=recommendations,
        limitations=limitations,
    )
