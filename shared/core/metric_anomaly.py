"""Whether a metric series moved the bad way: the one rule for a rise, a fall and a normal series.

    read_series(metric, unit, values, direction=None) -> SeriesReading   # rise | fall | quiet | unclear
    read_summary(profile, unit, low, median, high) -> SeriesReading      # from a summary alone

Every reader of a series uses it: the embedded executor's findings, the metrics tool's order, the
facts a verifier and the answer guard read from a cited series summary
(`shared.core.evidence_facts`, `RefFacts.series_state`), and the check of a statement that a series
rose, fell or is normal.

Which way is bad comes from the signal's semantics (`shared.core.symptom_lexicon.metric_profile`
over `shared/core/signal_semantics.json`): latency, errors and utilisation are bad when they rise,
a hit ratio, availability, a success rate or free bytes when they fall; the question may state the
direction instead (`direction`). A fall is assessed like a rise, mirrored.

Two tests, either flags the series:

1. A step. Robust baseline: the median of the earlier part of the window, with a MAD-based spread.
   The later part moves the bad way well beyond that baseline: many spreads (`MIN_Z`), an
   absolute move worth reporting for the kind of metric (`min_delta`), and a material ratio
   (`MIN_RATIO`: a rise to 1.5× the baseline; a fall to two thirds of it, or, for a share, a
   complement — the missed share of a hit ratio — grown 1.5×). A rise may also cross a level
   that is abnormal for the kind of metric whatever the baseline (utilisation ≥ 85 %). A single
   point a material move beyond the baseline that the next point leaves again, where the
   change-point detector finds no onset, is a blip, not a step.
2. A trend (a slow ramp the first third already partly holds). Theil–Sen slope with the
   Mann–Kendall test: the ranks agree strongly (Kendall's tau ≥ `MIN_TAU`, and the
   Mann–Kendall statistic ≥ `MIN_MK_Z` standard deviations, so a handful of points never
   suffices), and the fitted line moves the bad way by at least `min_delta` and by the material
   ratio `MIN_TREND_RATIO`, many residual spreads beyond the noise around it. A flat noisy series
   has tau near 0; a drifting one moves too little.

A series too short for either test (fewer than `MIN_POINTS` points), and a summary that states
only its min, median and max, are read by `read_summary`: the detector's baseline lies between the
window's min and max, so a peak that is a rise over the median (or crosses the absolute level) is a
rise; a peak that is no rise even over the minimum is quiet; anything between is unclear. A fall
is read mirrored (the minimum against the median, then against the maximum).

The onset is the change point in the bad direction (`shared.core.change_point.find_onset`, the
detector the metrics tool's `series[i].onset` ref uses with the same parameters, so the two
agree): where the move starts, not where it crosses a level. Only when the detector finds none (a
series that crept past an absolute level, a ramp from the window's start) is the onset the first
later point beyond the anomaly level.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

import numpy as np

from shared.core.change_point import find_onset
from shared.core.contracts import RefFacts
from shared.core.signal_semantics import Direction
from shared.core.symptom_lexicon import MetricProfile, metric_profile

MIN_POINTS = 6
MIN_Z = 6.0
MIN_RATIO = 1.5
# The trend test (see the module docstring).
MIN_TAU = 0.6
MIN_MK_Z = 4.0
MIN_TREND_RATIO = 1.4
MIN_TREND_SPREADS = 4.0
# A change point is reported only when its level shift is at least this share of the larger
# level (the metrics tool's onset ref uses the same value).
ONSET_MIN_RELATIVE = 0.1
_CACHED_SERIES = 256
# Units whose values are shares: a fall is also measured on its complement (the missed share).
_SHARE_SCALE = {"percent": 100.0, "%": 100.0, "ratio": 1.0}


@dataclass(frozen=True)
class MetricAnomaly:
    peak_index: int  # the worst point: highest for a rise, lowest for a fall
    baseline_index: int  # the baseline-part point closest to the baseline median
    onset_index: int | None  # where the move starts (its change point; see the module docstring)
    baseline_median: float
    score: float
    relative: bool  # moved well beyond the window's own baseline (a step)
    threshold_crossed: float | None  # the absolute level crossed, if any
    baseline_already_high: bool  # the window started beyond the absolute level
    direction: Direction = "up"  # the bad direction the series moved in
    trend: bool = False  # a gradual change over the window (the trend test)


@dataclass(frozen=True)
class SeriesAssessment:
    metric: str
    unit: str
    point_count: int
    anomaly: MetricAnomaly | None
    insufficient: bool = False
    direction: Direction = "up"  # the bad direction it was assessed in


def assess_series(metric: str, unit: str, values: Sequence[float], direction: Direction | None = None) -> SeriesAssessment:
    """One series' assessment, in `direction` when the question states one (else the signal's
    bad direction). A diagnosis assesses each series several times (the metrics tool orders by
    it, the agent reads it, the quiet-series text asks it): a series of floats is assessed once,
    by its values' bits (-0.0 and 0.0 differ; an int 2 is not a float 2.0)."""
    if all(type(value) is float for value in values):
        return _assessed(metric, unit, array("d", values).tobytes(), direction)
    return _assess(metric, unit, values, direction)


@lru_cache(maxsize=_CACHED_SERIES)
def _assessed(metric: str, unit: str, bits: bytes, direction: Direction | None = None) -> SeriesAssessment:
    return _assess(metric, unit, array("d", bits).tolist(), direction)


def _ratio(worst: float, base: float, sign: int, unit: str) -> float:
    """How many times worse `worst` is than `base`: a rise's multiple; a fall's divisor, or for a
    share the growth of its complement when that is larger."""
    high, low = (worst, base) if sign > 0 else (base, worst)
    if low > 0:
        ratio = high / low
    else:
        ratio = math.inf if high > 0 else 1.0
    scale = _SHARE_SCALE.get(unit.lower())
    if sign < 0 and scale is not None and base <= scale:
        missed_before, missed_after = scale - base, scale - worst
        if missed_before > 0:
            ratio = max(ratio, missed_after / missed_before)
        elif missed_after > 0:
            ratio = math.inf
    return ratio


def _assess(metric: str, unit: str, values: Sequence[float], direction: Direction | None = None) -> SeriesAssessment:
    n = len(values)
    profile = metric_profile(metric, unit, direction=direction)
    bad = profile.bad_direction
    if n < MIN_POINTS:
        return SeriesAssessment(metric, unit, n, None, insufficient=True, direction=bad)
    sign = 1 if bad == "up" else -1
    split = max(3, n // 3)
    baseline = values[:split]
    median = statistics.median(baseline)
    mad = statistics.median(abs(v - median) for v in baseline)
    # The spread's floor is a share of the level, of the missed share for a share that falls
    # (an availability of 99.9 % is judged by its 0.1 % missed, not by 2 % of 99.9).
    scale = _SHARE_SCALE.get(unit.lower())
    floor_level = scale - median if sign < 0 and scale is not None and median <= scale else median
    spread = max(1.4826 * mad, 0.02 * abs(floor_level), 1e-9)

    later_worst = max(range(split, n), key=lambda k: (sign * values[k], -k))
    delta = sign * (values[later_worst] - median)
    z = delta / spread
    ratio = _ratio(values[later_worst], median, sign, unit)
    relative = z >= MIN_Z and delta >= profile.min_delta and ratio >= MIN_RATIO

    threshold = profile.absolute_threshold
    overall_worst = max(range(n), key=lambda k: (sign * values[k], -k))
    crossed = threshold if threshold is not None and values[overall_worst] >= threshold else None
    trend = False
    if not relative and crossed is None:
        trend = _trend(values, sign, profile, unit)
        if not trend:
            return SeriesAssessment(metric, unit, n, None, direction=bad)

    peak = later_worst if relative else overall_worst
    if relative or trend:
        level: float | None = median + sign * max(3 * spread, profile.min_delta / 2)
    else:
        level = threshold
    change = find_onset(values, direction=bad, min_relative=ONSET_MIN_RELATIVE)
    if relative and not trend and crossed is None and change is None:
        beyond = [k for k in range(split, n) if sign * (values[k] - median) >= profile.min_delta]
        if len(beyond) == 1 and beyond[0] < n - 1:
            # One point a material move (`min_delta`) beyond the baseline that the next one leaves
            # again, with no change point: a blip (a pool's 2 connections once 4), no step. The
            # window's last point stays a possible start.
            return SeriesAssessment(metric, unit, n, None, direction=bad)
    if change is not None and change.index <= peak:
        onset: int | None = change.index
    else:
        onset = next((k for k in range(split, n) if level is not None and sign * (values[k] - level) >= 0), None)
    baseline_high = threshold is not None and median >= threshold
    if baseline_high:
        onset = None
    score = min(max(z, 0.0), 60.0) / 6 + (3.0 if crossed is not None else 0.0) + min(math.log2(max(ratio, 1.0)), 5.0)
    base_index = min(range(split), key=lambda k: (abs(values[k] - median), k))
    return SeriesAssessment(
        metric, unit, n,
        MetricAnomaly(
            peak_index=peak,
            baseline_index=base_index,
            onset_index=onset,
            baseline_median=median,
            score=round(score, 3),
            relative=relative,
            threshold_crossed=crossed,
            baseline_already_high=baseline_high,
            direction=bad,
            trend=trend,
        ),
        direction=bad,
    )


def _trend(values: Sequence[float], sign: int, profile: MetricProfile, unit: str) -> bool:
    """The trend test of the module docstring: a monotonic move the bad way, material and well
    beyond the noise around the fitted line."""
    data = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(data)) or float(np.max(np.abs(data))) > 1e150:
        return False  # no slope can be computed (and no square may overflow)
    n = len(data)
    left, right = np.triu_indices(n, k=1)
    rises = data[right] - data[left]
    # Mann–Kendall: S = Σ sign(x_j − x_i) over i < j; its variance without ties' correction is a
    # slight overestimate when ties exist, which only makes the test stricter.
    s = float(np.sum(np.sign(rises)))
    pairs = n * (n - 1) / 2
    tau = s / pairs
    variance = n * (n - 1) * (2 * n + 5) / 18
    mk_z = (abs(s) - 1) / math.sqrt(variance)
    if sign * tau < MIN_TAU or mk_z < MIN_MK_Z:
        return False
    slope = float(np.median(rises / (right - left)))
    if sign * slope <= 0:
        return False
    positions = np.arange(n, dtype=float)
    intercept = float(np.median(data - slope * positions))
    start, end = intercept, intercept + slope * (n - 1)
    moved = sign * (end - start)
    residuals = data - (intercept + slope * positions)
    noise = max(1.4826 * float(np.median(np.abs(residuals - np.median(residuals)))), 1e-9)
    return (moved >= profile.min_delta and moved >= MIN_TREND_SPREADS * noise
            and _ratio(end, start, sign, unit) >= MIN_TREND_RATIO)


SeriesState = Literal["rise", "fall", "quiet", "unclear"]
_STATES: dict[str, SeriesState] = {state: state for state in get_args(SeriesState)}


@dataclass(frozen=True)
class SeriesReading:
    state: SeriesState  # rise / fall: moved the bad way; quiet: did not; unclear: cannot tell
    detail: str


def read_series(metric: str, unit: str, values: Sequence[float], direction: Direction | None = None) -> SeriesReading:
    """Whether the series moved the bad way (module docstring): the detector where it has enough
    points, else its summary."""
    if len(values) >= MIN_POINTS:
        anomaly = assess_series(metric, unit, values, direction).anomaly
        if anomaly is None:
            return SeriesReading("quiet", f"{metric}: the detector flags no move over {len(values)} points")
        moved: SeriesState = "rise" if anomaly.direction == "up" else "fall"
        return SeriesReading(moved, f"{metric}: the detector flags a {moved} over {len(values)} points")
    if not values:
        return SeriesReading("unclear", f"{metric}: no points")
    return read_summary(metric_profile(metric, unit, direction=direction), unit,
                        min(values), statistics.median(values), max(values))


_MiB = 1024.0 * 1024.0
# The normalised units of `shared.core.evidence_facts` back to the tool units `metric_profile` reads
# (a ratio was rescaled to %; bytes to MB, so the byte-sized min_delta is rescaled too).
_PROFILE_UNIT = {"%": "percent", "MB": "bytes", "ms": "ms", "s": "s"}


def summary_profile(facts: RefFacts) -> MetricProfile:
    """The detector's profile for a cited summary's metric, in its (normalised) unit."""
    unit = facts.values[0].unit if facts.values else ""
    profile = metric_profile(facts.metric, _PROFILE_UNIT.get(unit, unit))
    if unit == "MB":
        return MetricProfile(profile.kind, profile.absolute_threshold, profile.min_delta / _MiB, profile.bad_direction)
    return profile


def summary_reading(facts: RefFacts) -> SeriesReading | None:
    """What a cited metric_summary shows (None: not a readable one): its series' reading
    (`RefFacts.series_state`, set where the facts were read from the stored series), else what its
    min, median and max alone show."""
    if facts.kind != "metric_summary":
        return None
    stats = {value.name: value.value for value in facts.values if math.isfinite(value.value)}
    low, mid, high = stats.get("min"), stats.get("median"), stats.get("max")
    if low is None or mid is None or high is None:
        return None
    read = _STATES.get(facts.series_state)
    if read is not None:
        return SeriesReading(read, f"the detector reads its series as {read}")
    return read_summary(summary_profile(facts), facts.values[0].unit, low, mid, high)


def read_summary(profile: MetricProfile, unit: str, low: float, mid: float, high: float) -> SeriesReading:
    """What a summary's min, median and max alone show, in the profile's bad direction (module
    docstring)."""
    shown = f"min {low:g}{unit}, median {mid:g}{unit}, max {high:g}{unit}"
    if profile.bad_direction == "down":
        if _is_fall(low, mid, profile, unit):
            return SeriesReading("fall", f"{shown}: the lowest is a fall under the median (≥ {profile.min_delta:g}{unit})")
        if not _is_fall(low, high, profile, unit):
            return SeriesReading("quiet", f"{shown}: the lowest is no fall even under the window's maximum")
        return SeriesReading("unclear", f"{shown}: the range is too wide for the summary alone to show no fall")
    threshold = profile.absolute_threshold
    if threshold is not None and high >= threshold:
        return SeriesReading("rise", f"{shown} reaches the {profile.kind} level {threshold:g}{unit}")
    if _is_rise(high, mid, profile):
        return SeriesReading("rise", f"{shown}: the peak is a rise over the median (≥ {profile.min_delta:g}{unit} "
                                     f"and ≥ {MIN_RATIO:g}x)")
    if not _is_rise(high, low, profile):
        return SeriesReading("quiet", f"{shown}: the peak is no rise even over the window's minimum")
    return SeriesReading("unclear", f"{shown}: the range is too wide for the summary alone to show no rise")


def _is_rise(peak: float, baseline: float, profile: MetricProfile) -> bool:
    return peak - baseline >= profile.min_delta and _ratio(peak, baseline, 1, "") >= MIN_RATIO


def _is_fall(trough: float, baseline: float, profile: MetricProfile, unit: str) -> bool:
    """A fall worth reporting: `min_delta` down, and `MIN_RATIO` worse (for a share, measured on
    its missed part too)."""
    return baseline - trough >= profile.min_delta and _ratio(trough, baseline, -1, unit) >= MIN_RATIO
