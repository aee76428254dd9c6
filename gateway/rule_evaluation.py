"""The `rule_evaluation` channel: deterministic evidence accounting over a run's invocations.

No model is involved: it counts what the tools actually returned (calls, hits, no-hits, failures,
deduplicated knowledge lookups), per tool and per round, so an audit can see at a glance whether
an answer rests on evidence or on its absence.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from shared.core.contracts import EVIDENCE_TOOLS
from shared.db.invocation_store import InvocationAccount

RULE_EVALUATION_VERSION = "evidence-accounting/1"


def _outcome(invocation: InvocationAccount) -> str:
    if invocation.lifecycle != "READY" or invocation.evidence_status == "ERROR":
        return "failures"
    if invocation.deduped:
        return "deduped"
    if invocation.evidence_status == "NO_EVIDENCE":
        return "no_hits"
    return "hits"


def evaluate_evidence(invocations: list[InvocationAccount]) -> dict[str, Any]:
    evidence = [inv for inv in invocations if inv.tool_name in EVIDENCE_TOOLS]
    totals = {"evidence_calls": len(evidence), "hits": 0, "no_hits": 0, "failures": 0, "deduped": 0}
    by_tool: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "hits": 0, "no_hits": 0,
                                                               "failures": 0, "deduped": 0})
    by_round: dict[str, int] = defaultdict(int)
    evidence_refs = 0
    for invocation in evidence:
        outcome = _outcome(invocation)
        totals[outcome] += 1
        by_tool[invocation.tool_name]["calls"] += 1
        by_tool[invocation.tool_name][outcome] += 1
        by_round[str(invocation.round)] += 1
        if outcome == "hits":
            evidence_refs += invocation.evidence_refs
    return {
        "version": RULE_EVALUATION_VERSION,
        **totals,
        "helper_calls": len(invocations) - len(evidence),
        "evidence_refs": evidence_refs,
        "has_evidence": totals["hits"] > 0,
        "by_tool": dict(sorted(by_tool.items())),
        "calls_by_round": dict(sorted(by_round.items())),
    }
