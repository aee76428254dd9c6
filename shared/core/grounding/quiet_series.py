"""A metric stated as quiet (「… 未见明显升高」, 「平稳」, no significant rise), checked against the
typed facts of the summary it cites (healthy is an answer).

A summary ref states a series' min, median and max over the window (`shared.core.evidence_facts`,
kind `metric_summary`) and, where it was read from the stored series, what the one rule for a
series reads it as (`shared.core.metric_anomaly.read_series`: the executor's detector, so what the
executor states as quiet and what this check confirms never disagree). A summary read without its
series is read from its min, median and max alone (`read_summary`). So:

- the series rose (the detector flags it, or its peak is a rise over the median) → a claim that
  the series is quiet is `contradicted` (a lie the numbers refute);
- the series is quiet (the detector flags nothing, or its peak is no rise even over the minimum)
  → the summary itself shows the series quiet, and the claim is `direct_observation`;
- otherwise (the summary alone cannot tell) → `reasonable_inference`, never confirmed.

A signal whose fall is the trouble (a hit ratio, free bytes: its profile's `bad_direction` is
"down") is read mirrored: its quiet claim is 「… 未见明显下降」.

Only a claim whose every trend and state word is negated (未见明显升高, 没有上升, 平稳, 正常, no
increase) is a quiet claim; a claim that also asserts a rise, or cites no metric summary, is not
this check's business (`None`). The polarity reader is `shared.core.grounding.polarity.find_negations`,
over the claim with quoted evidence blanked, so a quoted log line («no space left») is not a
statement of the claim.

Two callers: the embedded verifier's `classify` (a quiet claim gets this verification instead of
"the evidence does not itself show: up"), and the grounding overlay after every engine
(`quiet_series_findings`: a model verifier cannot confirm a quiet claim the summary refutes, or
one the summary cannot show).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.core.contracts import RefFacts
from shared.core.grounding import check_ids
from shared.core.grounding.claim_features import extract
from shared.core.grounding.number_words import normalise
from shared.core.grounding.polarity import find_negations
from shared.core.grounding.statement_check import Finding
from shared.core.metric_anomaly import summary_reading

# The check id (the lead adds it to `check_ids.py`; spelled here so this module stands alone).
CHECK_ID = check_ids.QUIET_SERIES
_QUOTED = re.compile(r"「[^」]*」|“[^”]*”|\"[^\"]*\"|『[^』]*』")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:[_:.][a-z0-9]+)+")
# What a negation must deny for the claim to be about the series staying quiet.
_RISE_OBJECT = re.compile(
    r"升高|上升|增长|增加|升|飙升|突增|激增|上涨|暴涨|抬升|走高|突刺|尖峰|毛刺|异常|波动|变化|"
    r"下降|降低|下跌|下滑|骤降|暴跌|走低|"
    r"(?<![a-z])(?:rise|rising|increase|increasing|spike|spikes|growth|jump|anomal\w*|change|fall|falling|drop|drops|decrease|decreasing|decline)(?![a-z])"
)
# Words of trouble left outside every negation: the claim is not only about quiet.
_TROUBLE = re.compile(
    r"失败|错误|报错|超时|异常|告警|告急|耗尽|打满|满了|"
    r"(?<![a-z_])(?:error|errors|fatal|exception|traceback|timeout|failed|failure|fail)(?![a-z_])"
)


@dataclass(frozen=True)
class QuietReading:
    """What a sentence says about a series staying quiet."""

    quiet: bool  # every trend and state word is negated, and at least one negation denies a rise/anomaly
    normal: bool  # it states absence or health (of anything) and asserts nothing abnormal outside it


def read_quiet(text: str) -> QuietReading:
    """Whether `text` states that something stayed quiet/normal and nothing else (its own words)."""
    normal = normalise(_QUOTED.sub(lambda m: " " * len(m.group(0)), text))
    negations = find_negations(normal)
    if not negations:
        return QuietReading(False, False)
    rest = list(normal)
    for negation in negations:
        start, end = negation.span
        rest[start:end] = " " * (end - start)
    # Metric names (an `…_error_ratio` series) are what the sentence is about, not what it says of it.
    outside = _IDENTIFIER.sub(lambda m: " " * len(m.group(0)), "".join(rest))
    features = extract(outside)
    troubled = bool(features.trend or "abnormal" in features.state or _TROUBLE.search(outside))
    if troubled:
        return QuietReading(False, False)
    denies_rise = any(n.kind == "health" or _RISE_OBJECT.search(n.object) for n in negations)
    return QuietReading(quiet=denies_rise, normal=True)


@dataclass(frozen=True)
class SeriesState:
    state: str  # "rise" | "fall" (a signal whose fall is the trouble) | "quiet" | "unclear"
    detail: str


def summary_state(facts: RefFacts) -> SeriesState | None:
    """What a cited metric_summary shows (None: not a readable metric summary), by the one rule
    for a series (`shared.core.metric_anomaly.summary_reading`)."""
    reading = summary_reading(facts)
    return None if reading is None else SeriesState(reading.state, f"{facts.metric}: {reading.detail}")


@dataclass(frozen=True)
class QuietVerdict:
    verification: str  # direct_observation | reasonable_inference | contradicted
    detail: str
    check_id: str = CHECK_ID


def check_quiet_series(text: str, cited: Sequence[RefFacts | None]) -> QuietVerdict | None:
    """The verification of a quiet claim from the metric summaries it cites, or None when the
    claim is no quiet claim or cites no readable metric summary. When the claim names metric
    identifiers, only the summaries of those metrics count."""
    if not read_quiet(text).quiet:
        return None
    named = set(_IDENTIFIER.findall(normalise(text)))
    summaries = [f for f in cited if f is not None and f.kind == "metric_summary"]
    if named:
        summaries = [f for f in summaries if f.metric.lower() in named]
    states = [(f, s) for f in summaries if (s := summary_state(f)) is not None]
    if not states:
        return None
    rising = [s for _, s in states if s.state in ("rise", "fall")]
    if rising:
        return QuietVerdict("contradicted", f"{CHECK_ID}: states no rise or fall, but the cited summary shows one: "
                                            f"{rising[0].detail}")
    unclear = [s for _, s in states if s.state == "unclear"]
    if unclear:
        return QuietVerdict("reasonable_inference", f"{CHECK_ID}: {unclear[0].detail}")
    return QuietVerdict("direct_observation", f"{CHECK_ID}: the cited summary shows no rise ({states[0][1].detail})")


def quiet_series_findings(text: str, cited: Sequence[RefFacts | None]) -> list[Finding]:
    """For the grounding overlay (after any engine; the lower classification wins): a quiet claim
    the cited summary refutes is contradicted; one it cannot show is at most an inference."""
    verdict = check_quiet_series(text, cited)
    if verdict is None or verdict.verification == "direct_observation":
        return []
    return [Finding(verdict.check_id, verdict.verification, verdict.detail[:200])]
