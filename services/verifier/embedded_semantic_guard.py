"""The embedded SemanticGuard: a deterministic review of a Draft's user-visible text against the
verified evidence snapshot, with the same feature comparison as the embedded verifier.

SemanticGuard spec, "Isolated single-turn SemanticGuard": it reads only the Draft (no tool call
ids) and the snapshot, and answers SUPPORTED or UNSUPPORTED with a non-blank reason.

What makes a Draft UNSUPPORTED (each found problem is named in the reason):
- an analysis or the conclusion without verified evidence (for the conclusion: the snapshot
  groups of the analyses it references);
- a number, service / host / time, error code or metric family in an analysis or in the
  conclusion that its evidence lacks (`find_absent`);
- for statements resting on found evidence: a value, direction, state or status code the
  evidence contradicts (`find_conflicts`);
- a stated cause (因为 / 导致 / root cause …) that the incident evidence itself does not state —
  runbooks and past incidents (`lookup_knowledge`) never state the current incident's cause —
  unless the sentence marks it as a possibility (a hedge token: 可能 / 疑似 / may …; 不可能 is none);
- a finding resting only on searches that found nothing which reports something found, or reads
  the empty result as health or as a cause ruled out;
- a service, host or error code in an action-plan item or recommendation that the evidence of
  the analyses it references lacks (advice may carry its own numbers, so only names are checked).

Limitations and missing context describe what is not known and are not checked. Relative time
phrases with digits ("过去 1 小时") are compared like any quantity, so such a Draft is rejected
unless the evidence shows that value: the guard fails closed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from services.verifier.embedded_verifier import find_absent, find_conflicts
from shared.core.grounding.answer_words import blank_answer_words
from shared.core.grounding.claim_features import Features, extract
from shared.core.grounding.polarity import is_hedged
from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE
from shared.draft_contract import ActionPlanItem, Draft, Recommendation, VerifiedSnapshot

MAX_REASON_CHARS = 600
MAX_PROBLEMS_SHOWN = 4
# How a finding of absence reads ("未发现 OOMKilled 日志", "no ERROR lines").
_ABSENCE = re.compile(
    r"未发现|未见|未出现|未查询到|未检索到|未观察到|未检测到|没有|不存在|无任何|无匹配|零条|0 ?条"
    r"|(?<![a-z])(?:no|not|none|zero|without)(?![a-z])",
    re.IGNORECASE,
)
_HEALTH_OR_EXCLUSION = re.compile(
    r"正常|健康|稳定|没有问题|无问题|排除|不是原因|并非原因"
    r"|(?<![a-z])(?:normal|healthy|stable|ruled out|not the cause)(?![a-z])",
    re.IGNORECASE,
)


# The health answer's fixed opening: its own rule is in `statement_check`, and the answer guard
# (gateway/answer_guard.py) checks it against the Analyses' evidence; here it is no state word.
_NOTHING_FOUND = re.compile(r"在所查范围内未发现异常")


@dataclass(frozen=True)
class SemanticReview:
    verdict: str  # SUPPORTED | UNSUPPORTED
    reason: str


@dataclass
class _Evidence:
    text: str  # what a reader may rely on: tool, source, scope, timestamp, excerpt
    incident_text: str  # the same without knowledge lookups: what can state this incident's cause
    found: bool  # at least one EVIDENCE_FOUND item (else only searches that found nothing)


def _evidence_by_analysis(snapshot: VerifiedSnapshot) -> dict[str, _Evidence]:
    groups: dict[str, _Evidence] = {}
    for group in snapshot.analyses:
        texts, incident = [], []
        found = False
        for item in group.evidence:
            text = "\n".join(part for part in (item.tool_name, item.source, item.scope, item.timestamp, item.excerpt) if part)
            texts.append(text)
            if item.tool_name != LOOKUP_KNOWLEDGE:
                incident.append(text)
            found = found or item.evidence_status == "EVIDENCE_FOUND"
        if texts:
            groups[group.analysis_id] = _Evidence("\n".join(texts), "\n".join(incident), found)
    return groups


def _union(groups: dict[str, _Evidence], refs: list[str]) -> _Evidence | None:
    chosen = [groups[ref] for ref in dict.fromkeys(refs) if ref in groups]
    if not chosen:
        return None
    return _Evidence(
        "\n".join(e.text for e in chosen),
        "\n".join(e.incident_text for e in chosen if e.incident_text),
        any(e.found for e in chosen),
    )


def _statement_problems(where: str, text: str, evidence: _Evidence | None, *, negative: bool = False) -> list[str]:
    """What one user-visible statement says that its evidence does not support."""
    if not text.strip():
        return []  # blank text is a structural defect, EvidenceGuard's to report
    if evidence is None:
        return [f"{where} has no verified evidence"]
    # The health answer's fixed opening is checked by the grounding overlay (`statement_check`:
    # no ERROR line cited, something read) and by the answer guard; here it is no state word.
    said = _NOTHING_FOUND.sub(" ", blank_answer_words(text)) if where == "the conclusion" else text
    stated, shown = extract(said), extract(evidence.text)
    problems: list[str] = []
    if evidence.found and not negative:
        problems += [f"{where} contradicts its evidence ({c})" for c in find_conflicts(stated, shown)[:2]]
    else:
        if "abnormal" in stated.state and not _ABSENCE.search(text):
            problems.append(f"{where} reports a finding, but its searches found nothing")
        if _HEALTH_OR_EXCLUSION.search(text):
            problems.append(f"{where} reads a search that found nothing as health or as a cause ruled out")
    missing = find_absent(stated, shown)
    if missing:
        problems.append(f"{where} states what its evidence lacks: {', '.join(missing[:4])}")
    if stated.causal and not is_hedged(text) and not (evidence.incident_text and extract(evidence.incident_text).causal):
        problems.append(f"{where} asserts a cause that its evidence does not state")
    return problems


def _name_problems(where: str, text: str, evidence: _Evidence | None) -> list[str]:
    """Advice may carry its own numbers; only its names and error codes must be in the evidence."""
    stated = extract(text)
    names = Features(text=stated.text, entities=stated.entities, codes=stated.codes)
    if not (names.entities or names.codes):
        return []
    if evidence is None:
        return [f"{where} names {', '.join((names.entities + [c.value for c in names.codes])[:3])} without evidence"]
    missing = find_absent(names, extract(evidence.text))
    return [f"{where} names what the evidence lacks: {', '.join(missing[:4])}"] if missing else []


def review_draft(draft: Draft, snapshot: VerifiedSnapshot) -> SemanticReview:
    """SUPPORTED when every user-visible statement rests on its verified evidence."""
    if draft.conclusion is None:
        return SemanticReview("UNSUPPORTED", "the Draft has no conclusion to review")
    groups = _evidence_by_analysis(snapshot)
    problems: list[str] = []
    # A typed item's text is Attest's rendering of its statement, which the deterministic
    # grounding checks field by field against the snapshot's typed facts (`draft_grounding`).
    for index, analysis in enumerate(draft.analyses):
        if analysis.statement is not None:
            continue
        where = f"analysis {analysis.analysis_id or index}"
        problems += _statement_problems(
            where, analysis.text, groups.get(analysis.analysis_id), negative=analysis.kind == "NEGATIVE_OBSERVATION"
        )
    conclusion_evidence = _union(groups, draft.conclusion.analysis_refs)
    if draft.conclusion.kind is None and draft.conclusion.statement is None:
        problems += _statement_problems("the conclusion", draft.conclusion.text, conclusion_evidence)
    everything = _union(groups, list(groups))
    sides: tuple[tuple[str, Sequence[ActionPlanItem | Recommendation]], ...] = (
        ("action plan item", draft.action_plan), ("recommendation", draft.recommendations))
    for kind, items in sides:
        for index, item in enumerate(items):
            if item.statement is not None:
                continue
            evidence = _union(groups, item.analysis_refs) if item.analysis_refs else everything
            problems += _name_problems(f"{kind} {index + 1}", item.text, evidence)
    if problems:
        shown = "; ".join(problems[:MAX_PROBLEMS_SHOWN])
        more = f" (+{len(problems) - MAX_PROBLEMS_SHOWN} more)" if len(problems) > MAX_PROBLEMS_SHOWN else ""
        return SemanticReview("UNSUPPORTED", (shown + more)[:MAX_REASON_CHARS])
    return SemanticReview(
        "SUPPORTED",
        "every name, value and error code in the conclusion and the analyses occurs in their verified "
        "evidence, nothing contradicts it, and no cause is asserted beyond it",
    )
