"""A metric stated as quiet (「… 未见明显升高」, 「平稳」, no significant rise), checked against the
typed facts of the summary it cites (issue 15, point 3: healthy is an answer).

A summary ref states a series' min, median and max over the window (`shared.core.evidence_facts`,
kind `metric_summary`). A rise is what the executor's detector (`services/executor/
metric_anomaly.py`) would flag for that kind of metric (`shared.core.symptom_lexicon.metric_profile`):
a peak at or beyond the profile's absolute level, or a peak at least `min_delta` above AND
`RISE_RATIO` times its baseline. The detector's baseline is the median of the window's first
third, which a summary does not state; it lies between the window's min and max, so:

- the peak is a rise over the window's *median* (or crosses the absolute level) → the summary
  shows a rise: a claim that the series is quiet is `contradicted` (a lie the numbers refute);
- the peak is no rise even over the window's *minimum* (the lowest baseline there can be) and
  stays below the absolute level → no baseline can make it a rise: the summary itself shows the
  series quiet, and the claim is `direct_observation`;
- otherwise (a wide range without a clear rise over the median) the summary alone cannot show
  it: `reasonable_inference`, never confirmed.

A signal whose fall is the trouble (a hit ratio, free bytes: its profile's `bad_direction` is
"down") is read mirrored: its quiet claim is 「… 未见明显下降」, and the summary's minimum against
its median (a fall there: `contradicted`) and against its maximum (no fall even there: shown quiet).

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

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.core.contracts import RefFacts
from shared.core.grounding import check_ids
from shared.core.grounding.claim_features import extract
from shared.core.grounding.number_words import normalise
from shared.core.grounding.polarity import find_negations
from shared.core.grounding.statement_check import Finding
from shared.core.symptom_lexicon import MetricProfile, metric_profile

# The check id (the lead adds it to `check_ids.py`; spelled here so this module stands alone).
CHECK_ID = check_ids.QUIET_SERIES
# services/executor/metric_anomaly.py MIN_RATIO: a rise is at least this multiple of its baseline.
RISE_RATIO = 1.5
_MiB = 1024.0 * 1024.0
# The normalised units of `shared.core.evidence_facts` back to the tool units `metric_profile` reads
# (a ratio was rescaled to %; bytes to MB, so the byte-sized min_delta is rescaled too).
_PROFILE_UNIT = {"%": "percent", "MB": "bytes", "ms": "ms", "s": "s"}
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


def _stat(facts: RefFacts, name: str) -> float | None:
    value = next((v.value for v in facts.values if v.name == name), None)
    return value if value is not None and math.isfinite(value) else None


def summary_profile(facts: RefFacts) -> MetricProfile:
    """The detector's profile for the summary's metric, in the summary's (normalised) unit."""
    unit = facts.values[0].unit if facts.values else ""
    profile = metric_profile(facts.metric, _PROFILE_UNIT.get(unit, unit))
    if unit == "MB":
        return MetricProfile(profile.kind, profile.absolute_threshold, profile.min_delta / _MiB, profile.bad_direction)
    return profile


def _is_rise(peak: float, baseline: float, profile: MetricProfile) -> bool:
    if baseline > 0:
        ratio = peak / baseline
    else:
        ratio = math.inf if peak > 0 else 1.0
    return peak - baseline >= profile.min_delta and ratio >= RISE_RATIO


def _is_fall(trough: float, baseline: float, profile: MetricProfile, unit: str) -> bool:
    """A fall worth reporting (a signal whose fall is the trouble): `min_delta` down, to a
    `RISE_RATIO`-th of the baseline or, for a share, its missed part grown `RISE_RATIO` times."""
    if baseline - trough < profile.min_delta:
        return False
    ratio = baseline / trough if trough > 0 else (math.inf if baseline > 0 else 1.0)
    if unit == "%" and baseline <= 100.0:
        missed = 100.0 - baseline
        ratio = max(ratio, (100.0 - trough) / missed if missed > 0 else math.inf)
    return ratio >= RISE_RATIO


@dataclass(frozen=True)
class SeriesState:
    state: str  # "rise" | "fall" (a signal whose fall is the trouble) | "quiet" | "unclear"
    detail: str


def summary_state(facts: RefFacts) -> SeriesState | None:
    """What a metric_summary's min/median/max show (None: not a readable metric summary)."""
    if facts.kind != "metric_summary":
        return None
    low, mid, high = _stat(facts, "min"), _stat(facts, "median"), _stat(facts, "max")
    if low is None or mid is None or high is None:
        return None
    profile = summary_profile(facts)
    unit = facts.values[0].unit
    shown = f"{facts.metric}: min {low:g}{unit}, median {mid:g}{unit}, max {high:g}{unit}"
    if profile.bad_direction == "down":
        if _is_fall(low, mid, profile, unit):
            return SeriesState("fall", f"{shown}: the lowest is a fall under the median (≥ {profile.min_delta:g}{unit})")
        if not _is_fall(low, high, profile, unit):
            return SeriesState("quiet", f"{shown}: the lowest is no fall even under the window's maximum")
        return SeriesState("unclear", f"{shown}: the range is too wide for the summary alone to show no fall")
    threshold = profile.absolute_threshold
    if threshold is not None and high >= threshold:
        return SeriesState("rise", f"{shown} reaches the {profile.kind} level {threshold:g}{unit}")
    if _is_rise(high, mid, profile):
        return SeriesState("rise", f"{shown}: the peak is a rise over the median (≥ {profile.min_delta:g}{unit} "
                                   f"and ≥ {RISE_RATIO:g}x)")
    if not _is_rise(high, low, profile):
        return SeriesState("quiet", f"{shown}: the peak is no rise even over the window's minimum")
    return SeriesState("unclear", f"{shown}: the range is too wide for the summary alone to show no rise")


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
