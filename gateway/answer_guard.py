"""Single-ReAct answer guard: the Draft's conclusion is the direct answer to the question, and
its opening agrees with what the Draft's Analyses show.

A released Draft is never edited, so a Draft whose conclusion does not answer the question is
not released. The guard is deterministic (no model) and runs in the gateway after EvidenceGuard,
on the verified snapshot, for every agent and SemanticGuard engine:

1. Opening (`answer.opening_missing`): the conclusion opens with one of `OPENINGS[kind]` for the
   question's kind (the `QuestionIntent` the gateway read): yes_no 是：/证据不支持：/无法确认：,
   why 最可能的原因：/原因尚未由证据确认, health 在所查范围内未发现异常/发现异常：/无法确认：.
   A `what` question has no fixed opening. A compound question's other parts
   (`QuestionIntent.parts`) are answered on lines 「另问「<part>」：…」, each checked like an opening
   by the rules below, about its own part.
2. Consistency (`answer.opening_contradicted`), from each Analysis' verified evidence, read from
   the snapshot's typed facts and never from the Draft's words (DESIGN §5: the model may lie):
   an Analysis *shows an anomaly* when its evidence holds an ERROR/FATAL/CRITICAL log line, a
   metric summary that crosses the abnormal level for its kind of metric in the window, or an onset ref
   into a regime well above the one before, or well below it for a series whose bad direction is
   down (the detector's profile: `_material_move`) — a wide
   range in a summary alone is no anomaly, since noisy series show one; it *is quiet* when its
   calls found nothing or its summaries are quiet (`quiet_series.summary_state`), and it *shows a
   change* when it cites a change record. An anomaly the snapshot does not show (an onset ref left
   out of a long excerpt) is not seen: the check is conservative, never a proof of health.
   - 「在所查范围内未发现异常」: no Analysis of the Draft (cited or not) shows an anomaly, and
     the conclusion cites at least one quiet Analysis (something was read);
   - 「发现异常：」 and 「是：」: some cited Analysis is not merely quiet; for 「是：」, when the
     hypothesis names signals (symptoms) and the cited evidence shows them, one of those is not
     quiet;
   - 「证据不支持：」: no Analysis of the Draft shows an anomaly on the hypothesis' signals, and the
     conclusion cites a quiet Analysis on them (or, when the evidence names none, a quiet one);
   - 「最可能的原因：」: the cited evidence establishes a checked causal link
     (`shared.core.grounding.causal_link.check_link`: a change that precedes the effect within the
     bounded window and shares a distinctive token with its error signatures, or an error
     signature coinciding with an anomaly onset).
   WARN lines are readings (routine noise), neither an anomaly nor quiet.
3. Failed evidence (`answer.opening_contradicted`): while an evidence call of
   the run failed (its backend refused, timed out, answered an HTTP error or not in its format —
   read from the stored invocations, `shared.failed_calls`), the Draft denies nothing: the
   conclusion opens neither 「在所查范围内未发现异常」 nor 「证据不支持：」, and no text the release
   would show (conclusion, analyses, action plan, recommendations, limitations) denies an anomaly
   or passes a verdict on health in any wording (未发现异常, 未显示异常, 没有异常, 运行正常, 均正常,
   一切正常, 健康 …: `shared.core.health_denials`); 「无法确认：」 names what failed. The released answer
   names each failed call.
4. No data is not health (`answer.opening_contradicted`): a conclusion that passes a verdict on
   health — 「在所查范围内未发现异常」, 「证据不支持：」, or any health wording of
   `shared.core.health_denials` in a conclusion that reports no anomaly — is unsupported
   - while a checked service and window of the run had no data, or logs of unknown level (read
     from the stored invocations, `shared.no_data`), and
   - when every evidence item of the Analyses it cites comes from calls that found nothing
     (`evidence_status` NO_EVIDENCE in the verified snapshot): an absence alone is no reading.

A finding keeps the Draft from release as `SEMANTIC_UNSUPPORTED`, one of the spec's types: the
spec's semantic review judges the Draft against the query, and a conclusion that does not answer
the query, or answers it against the evidence, is not a supported answer. No SemanticGuard model
call is made for it. Findings name the check and the item, never Draft text, and go to the
rejection ledger (stage `answer_guard`), which tells a missing opening from a contradicted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.config import configured_failure_modes
from shared.core.contracts import EmptyScope, FailedCall, QuestionIntent, RefFacts, VerifiedEvidence
from shared.core.direct_answer import (
    CAUSE_UNCONFIRMED,
    FOUND,
    MOST_LIKELY_CAUSE,
    NOT_SUPPORTED,
    NOTHING_FOUND,
    OPENINGS,
    PART_PREFIX,
    YES,
    part_line,
)
from shared.core.grounding.causal_link import Link, corpus_of, link_of, names_service
from shared.core.grounding.quiet_series import summary_state
from shared.core.health_denials import denials
from shared.core.metric_anomaly import MIN_RATIO, summary_profile
from shared.core.symptom_lexicon import SYMPTOMS_BY_ID, bad_direction, symptoms_for_log, symptoms_for_metric
from shared.draft_contract import Draft, SnapshotEvidence, VerifiedSnapshot
from shared.failed_calls import open_failures

OPENING_MISSING = "answer.opening_missing"
OPENING_CONTRADICTED = "answer.opening_contradicted"
ANOMALY_LEVELS = frozenset({"ERROR", "FATAL", "CRITICAL"})
_NOT_SHOWN_PREFIX = "(+"


@dataclass(frozen=True)
class AnswerFinding:
    item: str  # "conclusion"
    check_id: str
    detail: str


@dataclass
class _Reading:
    """What one Analysis' verified evidence shows."""

    abnormal: set[str] = field(default_factory=set)  # symptom ids of the anomalies ("" when none is named)
    quiet: set[str] = field(default_factory=set)  # symptom ids of the quiet signals ("" for a no-hit)
    change: bool = False
    items: list[VerifiedEvidence] = field(default_factory=list)
    # What the failure-mode catalogue types the abnormal and the quiet evidence as (entities:
    # db_connection_pool, thread_pool, disk …), for a hypothesis about one such thing.
    abnormal_entities: set[str] = field(default_factory=set)
    quiet_entities: set[str] = field(default_factory=set)

    @property
    def shows_anomaly(self) -> bool:
        return bool(self.abnormal)

    @property
    def only_quiet(self) -> bool:
        return bool(self.quiet) and not self.abnormal and not self.change


def _stat(facts: RefFacts, index: int) -> float | None:
    return facts.values[index].value if len(facts.values) > index else None


def _beyond_level(facts: RefFacts) -> bool:
    """A summary that crosses, within the window, the level that is abnormal for its kind of metric
    (a series above it throughout is the detector's "already high" case, which a summary cannot
    tell from a metric where high is good, such as a hit ratio)."""
    low, peak = _stat(facts, 0), _stat(facts, 2)
    threshold = summary_profile(facts).absolute_threshold
    return low is not None and peak is not None and threshold is not None and low < threshold <= peak


def _material_move(facts: RefFacts) -> bool:
    """An onset (the change-point detector's, `series[i].onset`) into a regime well above the one
    before it, by the detector's profile: what `metric_anomaly` calls a rise — or, for a series
    whose bad direction is down (a hit ratio, free memory), well below it: a fall. A wide range
    in a summary alone is no anomaly (noisy series are)."""
    before, after = _stat(facts, 0), _stat(facts, 1)
    if before is None or after is None or facts.level not in ("up", "down"):
        return False
    if facts.level == "down":
        if bad_direction(facts.metric) != "down":
            return False
        before, after = after, before  # a fall, measured as the rise it mirrors
    profile = summary_profile(RefFacts(kind="metric_summary", metric=facts.metric, values=facts.values))
    ratio = after / before if before > 0 else (float("inf") if after > 0 else 1.0)
    return after - before >= profile.min_delta and ratio >= MIN_RATIO


def _lines(item: SnapshotEvidence) -> list[tuple[str, RefFacts | None]]:
    lines = [line for line in item.excerpt.split("\n") if line.strip() and not line.startswith(_NOT_SHOWN_PREFIX)]
    if len(lines) == len(item.facts):
        return list(zip(lines, item.facts))
    return [("", facts) for facts in item.facts]


def _read(snapshot: VerifiedSnapshot) -> dict[str, _Reading]:
    catalogue = configured_failure_modes()
    readings: dict[str, _Reading] = {}
    for group_index, group in enumerate(snapshot.analyses):
        reading = readings.setdefault(group.analysis_id, _Reading())
        for item_index, item in enumerate(group.evidence):
            if item.evidence_status == "NO_EVIDENCE":
                reading.quiet.add("")
                continue
            for line_index, (line, facts) in enumerate(_lines(item)):
                if facts is None:
                    continue
                reading.items.append(VerifiedEvidence(
                    claim_id=group.analysis_id, source_invocation_id=group_index * 1000 + item_index,
                    tool_name=item.tool_name, raw_path=f"line[{line_index}]", matched_text=line, facts=facts))
                signals = set(symptoms_for_metric(facts.metric)) or {""}
                typed = set(catalogue.entities_in("", [facts.metric])) if facts.metric else set()
                if facts.kind == "metric_summary":
                    state = summary_state(facts)
                    if _beyond_level(facts):
                        reading.abnormal |= signals
                        reading.abnormal_entities |= typed
                    elif state is not None and state.state == "quiet":
                        reading.quiet |= signals
                        reading.quiet_entities |= typed
                elif facts.kind == "metric_onset" and _material_move(facts):
                    reading.abnormal |= signals
                    reading.abnormal_entities |= typed
                elif facts.kind == "log_line" and facts.level.upper() in ANOMALY_LEVELS:
                    reading.abnormal |= set(symptoms_for_log(line)) | {""}
                    reading.abnormal_entities |= set(catalogue.entities_in(line))
                elif facts.kind == "log_line" and facts.level.upper() in ("WARN", "WARNING"):
                    # A warning that names a failure mode (a Full GC pause, a pool at its limit)
                    # shows that thing, though it is no error: what a typed hypothesis rests on.
                    reading.abnormal_entities |= set(catalogue.entities_in(line))
                elif facts.kind == "change":
                    reading.change = True
                elif facts.kind.endswith("_scope") and facts.empty:
                    reading.quiet.add("")
    return readings


def _wanted(intent: QuestionIntent) -> set[str]:
    specific = {s for s in intent.hypothesis_symptoms if not SYMPTOMS_BY_ID[s].generic}
    return specific or set(intent.hypothesis_symptoms)


def _contradiction(intent: QuestionIntent, text: str, draft: Draft, readings: dict[str, _Reading]) -> str:
    """Why the opening disagrees with the Analyses' evidence ("" when it agrees)."""
    assert draft.conclusion is not None
    cited = [readings.get(ref, _Reading()) for ref in dict.fromkeys(draft.conclusion.analysis_refs)]
    every = [readings.get(a.analysis_id, _Reading()) for a in draft.analyses]
    first = text.split("\n", 1)[0]
    if NOTHING_FOUND in first:
        if any(r.shows_anomaly for r in every):
            return "says no anomaly was found, but an analysis' evidence shows one"
        if not any(r.quiet for r in cited):
            return "says no anomaly was found without citing a quiet series or a search that found nothing"
        return ""
    if first.startswith(FOUND) and cited and all(r.only_quiet for r in cited):
        return "says an anomaly was found, but every cited analysis' evidence is quiet"
    typed = _typed_contradiction(intent, first, cited, every)
    if typed is not None:
        return typed
    wanted = _wanted(intent)
    if first.startswith(YES):
        if cited and all(r.only_quiet for r in cited):
            return "answers yes, but every cited analysis' evidence is quiet"
        on_signal = [r for r in cited if wanted & (r.abnormal | r.quiet)]
        if wanted and on_signal and not any(wanted & r.abnormal for r in on_signal):
            return "answers yes, but the cited evidence shows the hypothesis' signal quiet"
        return ""
    if first.startswith(NOT_SUPPORTED):
        if any((wanted & r.abnormal) if wanted else r.shows_anomaly for r in every):
            return "answers that the evidence does not support the hypothesis, but an analysis shows it abnormal"
        if not any((wanted & r.quiet) if wanted else r.quiet for r in cited):
            return "answers that the evidence does not support the hypothesis without citing its signal read quiet"
        return ""
    if first.startswith(MOST_LIKELY_CAUSE):
        link = _cited_link(cited, list(readings.values()))
        if not link.linked:
            return f"names a most likely cause without a checked causal link: {link.detail}"
    return ""


def _cited_link(cited: list[_Reading], every: list[_Reading], kind: str = "") -> Link:
    """The causal link one cited analysis establishes by its own evidence (a conclusion also cites
    the analyses of what it saw besides the cause, whose earlier lines are no end of that link);
    else the link all of them together would make, for its reason."""
    corpus = corpus_of([item for r in every for item in r.items])
    for reading in cited:
        link = link_of(reading.items, corpus)
        if link.linked and (not kind or link.kind == kind):
            return link
    return link_of([item for r in cited for item in r.items], corpus)


def _typed_contradiction(intent: QuestionIntent, first: str, cited: list[_Reading],
                         every: list[_Reading]) -> str | None:
    """The opening of a yes/no question about a change or about a thing the failure-mode catalogue
    types (a thread pool is no database connection pool), judged by the same rule as the first line
    (`shared.core.direct_answer`); None when the hypothesis is neither (the symptom rule judges)."""
    if intent.hypothesis_change:
        if first.startswith(YES):
            link = _cited_link(cited, every, kind="change")
            if not link.linked or link.kind != "change":
                return f"answers yes to a change hypothesis without a checked link to a change: {link.detail}"
        if first.startswith(NOT_SUPPORTED) and not any("" in r.quiet for r in cited) \
                and not _cited_link(cited, every, kind="change").linked:
            return "answers that no change caused it without citing a change search that found none or another linked change"
        return ""
    # A hypothesis that blames a host or service (「是 pay.internal 不可用的问题吗」): yes stands on
    # an anomaly whose cited evidence names it, whatever the hypothesis' words type.
    peers = [s.lower() for s in intent.blamed]
    if first.startswith(YES) and peers and any(
            r.shows_anomaly and any(names_service(item.matched_text, p) for item in r.items for p in peers) for r in cited):
        return ""
    asked = {mention.entity for mention in configured_failure_modes().hypothesis_in(intent.hypothesis)}
    if not asked or not any(r.abnormal_entities or r.quiet_entities for r in every):
        return None
    if first.startswith(YES) and not any(r.abnormal_entities & asked for r in cited):
        return "answers yes, but no cited evidence shows the thing the hypothesis names"
    if first.startswith(NOT_SUPPORTED):
        if any(r.abnormal_entities & asked for r in every):
            return "answers that the evidence does not support the hypothesis, but an analysis shows it abnormal"
        if not any(r.quiet_entities & asked or r.abnormal_entities for r in cited):
            return "answers that the evidence does not support the hypothesis without citing its signal quiet or another failure"
    return ""


def _concludes_health(first: str, text: str) -> bool:
    """The conclusion passes a verdict on health: it denies an anomaly and reports none."""
    if NOTHING_FOUND in first or first.startswith(NOT_SUPPORTED):
        return True
    reports = first.startswith((FOUND, YES, MOST_LIKELY_CAUSE, CAUSE_UNCONFIRMED + "；"))
    return not reports and bool(denials(text))


def _found_nothing(draft: Draft, snapshot: VerifiedSnapshot) -> bool:
    """Every evidence item of the Analyses the conclusion cites comes from a call that found
    nothing (typed: the snapshot's evidence_status, never the Draft's words)."""
    assert draft.conclusion is not None
    cited = set(draft.conclusion.analysis_refs)
    statuses = [item.evidence_status for group in snapshot.analyses if group.analysis_id in cited
                for item in group.evidence]
    return bool(statuses) and all(status == "NO_EVIDENCE" for status in statuses)


def _no_data_finding(first: str, text: str, draft: Draft, snapshot: VerifiedSnapshot,
                     empty: Sequence[EmptyScope]) -> str:
    if not _concludes_health(first, text):
        return ""
    if empty:
        named = ", ".join(f"{scope.service} ({scope.state})" for scope in empty[:3])
        return f"concludes health while checked scopes had no readable data: {named}"
    if _found_nothing(draft, snapshot):
        return "concludes health from calls that found nothing alone"
    return ""


def check_answer(intent: QuestionIntent, draft: Draft, snapshot: VerifiedSnapshot,
                 failed: Sequence[FailedCall] = (), empty: Sequence[EmptyScope] = ()) -> list[AnswerFinding]:
    """The guard's findings for a concluded Draft (empty: the conclusion answers the question).
    `failed`: the run's failed evidence calls, from the store; `empty`: the run's checked scopes
    without data (`shared.no_data.empty_scopes`)."""
    if draft.conclusion is None:
        return []
    text = draft.conclusion.text.strip()
    openings = OPENINGS.get(intent.kind, ())
    if openings and not text.startswith(openings):
        shown = " / ".join(openings)
        return [AnswerFinding("conclusion", OPENING_MISSING,
                              f"a {intent.kind} question's conclusion must open with {shown}")]
    first = text.split("\n", 1)[0]
    said = [text, *(a.text for a in draft.analyses), *(i.text for i in draft.action_plan),
            *(r.text for r in draft.recommendations), *draft.limitations]
    if (stand := open_failures(failed)) and (
            first.startswith(NOT_SUPPORTED) or any(denials(t) for t in said)):
        calls = ", ".join(f"{call.tool_name} #{call.invocation_id}" for call in stand)
        return [AnswerFinding("conclusion", OPENING_CONTRADICTED,
                              f"denies an anomaly while evidence calls failed: {calls}")]
    readings = _read(snapshot)
    why = _no_data_finding(first, text, draft, snapshot, empty) or _contradiction(intent, text, draft, readings)
    if why:
        return [AnswerFinding("conclusion", OPENING_CONTRADICTED, why)]
    # A compound question's other parts: each line 「另问「<part>」：…」 by the same rules, about its part.
    asked = _part_answers(intent, text)
    if sum(line.startswith(PART_PREFIX + "「") for line in text.split("\n")[1:]) > len(asked):
        # The part's words are the user's (the statement checks leave them out): never the model's.
        return [AnswerFinding("conclusion", OPENING_CONTRADICTED, "answers a part the question did not ask")]
    for part, answer in asked:
        if stand and answer.startswith(NOT_SUPPORTED):
            return [AnswerFinding("conclusion", OPENING_CONTRADICTED, "a part's answer denies an anomaly while evidence calls failed")]
        why = _no_data_finding(answer, answer, draft, snapshot, empty) or _contradiction(
            part, answer, draft, readings)
        if why:
            return [AnswerFinding("conclusion", OPENING_CONTRADICTED, f"the answer to another part of the question {why}")]
    return []


def _part_answers(intent: QuestionIntent, text: str) -> list[tuple[QuestionIntent, str]]:
    """(part, its answer) for each line of the conclusion that answers another part of a compound
    question (`shared.core.direct_answer.part_line`)."""
    found = []
    for line in text.split("\n")[1:]:
        for part in intent.parts:
            head = part_line(part.text, "")
            if line.startswith(head):
                found.append((part, line[len(head):]))
    return found

