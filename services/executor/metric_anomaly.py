"""Anomaly detection on one metric series, for the embedded executor agent.

Robust baseline: the median of the earlier part of the window, with a MAD-based spread. A series
is anomalous when its later part rises well above that baseline (a rise many spreads high, a
material ratio and an absolute delta worth reporting for the kind of metric), or when it crosses
a level that is abnormal for the kind of metric whatever the baseline (e.g. utilisation ≥ 85%).
Only rises are detected: for the metrics an SRE asks about, higher is worse.

The onset is the rise's change point (`shared.change_point.find_onset`, the detector the metrics
tool's `series[i].onset` ref uses with the same parameters, so the two agree): where the rise
starts, not where it crosses a level. Only when the detector finds no rise (a series that crept
past an absolute level) is the onset the first later point at or beyond the anomaly level.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from shared.change_point import find_onset
from shared.core.symptom_lexicon import metric_profile

MIN_POINTS = 6
MIN_Z = 6.0
MIN_RATIO = 1.5
# A change point is reported only when its level shift is at least this share of the larger
# level (the metrics tool's onset ref uses the same value).
ONSET_MIN_RELATIVE = 0.1
_CACHED_SERIES = 256


@dataclass(frozen=True)
class MetricAnomaly:
    peak_index: int
    baseline_index: int  # the baseline-part point closest to the baseline median
    onset_index: int | None  # where the rise starts (its change point; see the module docstring)
    baseline_median: float
    score: float
    relative: bool  # risen well above the window's own baseline
    threshold_crossed: float | None  # the absolute level crossed, if any
    baseline_already_high: bool  # the window started above the absolute level


@dataclass(frozen=True)
class SeriesAssessment:
    metric: str
    unit: str
    point_count: int
    anomaly: MetricAnomaly | None
    insufficient: bool = False


def assess_series(metric: str, unit: str, values: Sequence[float]) -> SeriesAssessment:
    """One series' assessment. A diagnosis assesses each series several times (the metrics tool
    orders by it, the agent reads it, the quiet-series text asks it): a series of floats is
    assessed once, by its values' bits (-0.0 and 0.0 differ; an int 2 is not a float 2.0)."""
    if all(type(value) is float for value in values):
        return _assessed(metric, unit, array("d", values).tobytes())
    return _assess(metric, unit, values)


@lru_cache(maxsize=_CACHED_SERIES)
def _assessed(metric: str, unit: str, bits: bytes) -> SeriesAssessment:
    return _assess(metric, unit, array("d", bits).tolist())


def _assess(metric: str, unit: str, values: Sequence[float]) -> SeriesAssessment:
    n = len(values)
    if n < MIN_POINTS:
        return SeriesAssessment(metric, unit, n, None, insufficient=True)
    profile = metric_profile(metric, unit)
    split = max(3, n // 3)
    baseline = values[:split]
    median = statistics.median(baseline)
    mad = statistics.median(abs(v - median) for v in baseline)
    spread = max(1.4826 * mad, 0.02 * abs(median), 1e-9)

    later_peak = max(range(split, n), key=lambda k: (values[k], -k))
    delta = values[later_peak] - median
    z = delta / spread
    ratio = values[later_peak] / median if median > 0 else (math.inf if values[later_peak] > 0 else 1.0)
    relative = z >= MIN_Z and delta >= profile.min_delta and ratio >= MIN_RATIO

    threshold = profile.absolute_threshold
    overall_peak = max(range(n), key=lambda k: (values[k], -k))
    crossed = threshold if threshold is not None and values[overall_peak] >= threshold else None
    if not relative and crossed is None:
        return SeriesAssessment(metric, unit, n, None)

    peak = later_peak if relative else overall_peak
    level = median + max(3 * spread, profile.min_delta / 2) if relative else threshold
    change = find_onset(values, direction="up", min_relative=ONSET_MIN_RELATIVE)
    if change is not None and change.index <= peak:
        onset: int | None = change.index
    else:
        onset = next((k for k in range(split, n) if level is not None and values[k] >= level), None)
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
        ),
    )
