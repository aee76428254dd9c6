"""The onset of a sustained change in one metric series: one detector for every caller (the
embedded executor's anomaly assessment, the metrics tool's `series[i].onset` ref, the Prometheus
reader).

DESIGN §3: "Onsets are change points of the series, not the first point above median." The
detector, deterministic, in plain Python and numpy:

1. Binary segmentation on mean shift. A segment is split where the summed squared error of its
   two parts is least (or, when no single split passes, at the start of the block whose level
   differs from the rest: a change that came and went inside the window, tested `BLOCK_Z_FACTOR`
   times stricter); the split stands only
   when both parts hold at least `MIN_SEGMENT` points and their means differ by `min_z` standard
   errors, the noise read robustly (the pooled MAD of
   each part around its own median, × 1.4826). Each part is split again (breadth first), at most
   `MAX_CHANGES` boundaries in all. A split may isolate an outlier; step 2 judges segments by
   their medians, so an outlier never becomes an onset.
2. The baseline is the first segment. The onset belongs to the first boundary whose next segment
   departs from the baseline by `DEPART_SPREADS` spreads in median, of the baseline and of the two
   together (a few quiet points at the window's start are no yardstick for later jitter), and by
   `min_z` baseline spreads (a spike that returns counts:
   its own segment departs) and, when asked, by `min_relative` of the larger level. The level
   `after` is the most extreme median of the consecutive segments that depart the same way (a
   ramp cut into steps reaches its plateau; a spike is its own segment).
3. The onset is the first point of that new regime that departs beyond `DEPART_SPREADS` baseline
   spreads: walking back from the boundary over the contiguous departing points (least squares
   puts a ramp's boundary half way up; the rise starts earlier), or forward to the first
   departing point whose next point departs too when the boundary sits before it (a lone uptick
   of a noisy baseline is not the start). The baseline is then re-read from the points
   before that onset and the walk repeated once, so an early ramp point inside the first segment
   cannot widen the spread it is judged by.

4. The end (`find_end`): the first point after which the series stays back within a quarter of
   the shift (`RECOVERED_SHARE`) from the baseline for at least `MIN_SEGMENT` points up to the
   window's end. A series still away from its baseline at the end is ongoing (no end).

Rises and falls are handled alike (`direction`: "up" or "down"; a caller may ask for one). The
spread has a floor (`SPREAD_FLOOR` of the baseline level; half the series' resolution, 1 for a
series of whole numbers, so a count wobbling between 4 and 5 is no change; and an absolute
epsilon), so a noiseless baseline still has a defined departure.
Values are floats in time order; timestamps are the caller's business.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

MIN_POINTS = 6
MIN_SEGMENT = 3
MIN_Z = 5.0
DEPART_SPREADS = 3.0
MAX_CHANGES = 6
RECOVERED_SHARE = 0.25
# A block is chosen among far more candidates than a split, so pure noise shows a larger best
# shift: its test is this much stricter (noise of 60-240 points reaches ~7 standard errors).
BLOCK_Z_FACTOR = 1.6
RESOLUTION_SHARE = 0.5  # of the series' resolution: the spread's floor
SPREAD_FLOOR = 0.001  # of the baseline level's magnitude
EPSILON = 1e-9
MAD_TO_SIGMA = 1.4826


Direction = Literal["up", "down"]


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the onset: first point of the new regime beyond the baseline spread
    boundary: int  # where segmentation put the change (first index of the new segment)
    direction: Direction
    before: float  # median of the baseline (the points before the onset)
    after: float  # median of the new regime's segment
    spread: float  # robust spread of the baseline
    z: float  # |after - before| / spread


def resolution(values: Sequence[float]) -> float:
    """1 for a series of whole numbers (a count: nothing finer can be seen), else 0."""
    return 1.0 if values and all(float(v).is_integer() for v in values) else 0.0


def _spread(values: Sequence[float], level: float, floor: float = 0.0) -> float:
    if not values:
        return max(SPREAD_FLOOR * abs(level), floor, EPSILON)
    mad = statistics.median(abs(v - level) for v in values)
    return max(MAD_TO_SIGMA * mad, SPREAD_FLOOR * abs(level), floor, EPSILON)


def _pooled_spread(left: Sequence[float], right: Sequence[float], floor: float = 0.0) -> float:
    ml, mr = statistics.median(left), statistics.median(right)
    residuals = [abs(v - ml) for v in left] + [abs(v - mr) for v in right]
    level = max(abs(ml), abs(mr))
    return max(MAD_TO_SIGMA * statistics.median(residuals), SPREAD_FLOOR * level, floor, EPSILON)


def _best_split(values: Sequence[float], lo: int, hi: int, min_z: float, floor: float = 0.0) -> int | None:
    """The least-squares split of values[lo:hi] if it passes the robust test, else None."""
    n = hi - lo
    if n < 2 * MIN_SEGMENT:
        return None
    prefix, squares = [0.0], [0.0]
    for v in values[lo:hi]:
        prefix.append(prefix[-1] + v)
        squares.append(squares[-1] + v * v)

    def sse(a: int, b: int) -> float:
        total, count = prefix[b] - prefix[a], b - a
        return squares[b] - squares[a] - total * total / count

    best_k, best_cost = None, None
    for k in range(MIN_SEGMENT, n - MIN_SEGMENT + 1):
        cost = sse(0, k) + sse(k, n)
        if best_cost is None or cost < best_cost - 1e-12:
            best_k, best_cost = k, cost
    if best_k is None:
        return None
    left, right = values[lo:lo + best_k], values[lo + best_k:hi]
    if _differ(left, right, min_z, floor):
        return lo + best_k
    return _best_block(values, lo, hi, min_z, floor)


def _differ(left: Sequence[float], right: Sequence[float], min_z: float, floor: float) -> bool:
    """Whether two parts' means differ by `min_z` standard errors of the robust pooled spread."""
    shift = abs(statistics.fmean(right) - statistics.fmean(left))
    return shift >= min_z * _pooled_spread(left, right, floor) * math.sqrt(1 / len(left) + 1 / len(right))


def _best_block(values: Sequence[float], lo: int, hi: int, min_z: float, floor: float) -> int | None:
    """The start of the least-squares block of values[lo:hi] whose level differs from the rest
    (a change that came and went inside the window: no single split separates it, since either
    part would hold both levels), if it passes the robust test, else None."""
    n = hi - lo
    if n < 3 * MIN_SEGMENT:
        return None
    data = np.asarray(values[lo:hi], dtype=float)
    with np.errstate(over="ignore"):
        squares = np.concatenate(([0.0], np.cumsum(data * data)))
        # Any part's squared sum is at most its length times the sum of squares (Cauchy-Schwarz).
        largest_squared_sum = n * squares[-1]
    if not np.isfinite(largest_squared_sum):
        # A NaN, an infinity, or values whose squares overflow: no block level can be computed.
        return None
    prefix = np.concatenate(([0.0], np.cumsum(data)))
    starts = np.arange(MIN_SEGMENT, n - 2 * MIN_SEGMENT + 1)[:, None]
    ends = np.arange(2 * MIN_SEGMENT, n - MIN_SEGMENT + 1)[None, :]
    inside = (ends - starts).astype(float)
    inside_sum, inside_squares = prefix[ends] - prefix[starts], squares[ends] - squares[starts]
    outside = n - inside  # at least 2 * MIN_SEGMENT
    outside_sum, outside_squares = prefix[n] - inside_sum, squares[n] - inside_squares
    # Only a pair that leaves a block of MIN_SEGMENT points is costed: the others (an end at or
    # before the start) are never divided by their empty or negative length, and cost infinity.
    valid = inside >= MIN_SEGMENT
    inside_mean_square = np.divide(inside_sum ** 2, inside, out=np.zeros_like(inside), where=valid)
    cost = np.where(valid, (inside_squares - inside_mean_square) + (outside_squares - outside_sum ** 2 / outside),
                    np.inf)
    row, column = np.unravel_index(int(np.argmin(cost)), cost.shape)
    start, end = lo + int(starts[row, 0]), lo + int(ends[0, column])
    block, rest = values[start:end], [*values[lo:start], *values[end:hi]]
    return start if _differ(rest, block, BLOCK_Z_FACTOR * min_z, floor) else None


def segment_boundaries(values: Sequence[float], min_z: float = MIN_Z, floor: float = 0.0) -> list[int]:
    """Binary segmentation: the first index of every new segment, ascending."""
    return list(_segment_boundaries(values, min_z, floor))


# One series is segmented more than once (the metrics tool's onset ref, then the agent's anomaly
# assessment, each with its own direction): the boundaries of a run's recent series are kept.
@lru_cache(maxsize=64)
def _float_series_boundaries(data: tuple[float, ...], min_z: float, floor: float) -> tuple[int, ...]:
    return _segment_boundaries(data, min_z, floor)


def _segment_boundaries(values: Sequence[float], min_z: float, floor: float) -> tuple[int, ...]:
    found: list[int] = []
    pending = [(0, len(values))]
    while pending and len(found) < MAX_CHANGES:
        lo, hi = pending.pop(0)
        split = _best_split(values, lo, hi, min_z, floor)
        if split is None:
            continue
        found.append(split)
        pending += [(lo, split), (split, hi)]
    return tuple(sorted(found))


def _departs(value: float, level: float, spread: float, sign: int) -> bool:
    return sign * (value - level) > DEPART_SPREADS * spread


def _walk(values: Sequence[float], boundary: int, level: float, spread: float, sign: int, end: int) -> int | None:
    """The first departing point of the regime around `boundary` (see the module docstring)."""
    index = boundary
    # Forward, a departing point counts only when the next one departs too: a noisy baseline's
    # lone uptick just before a jump is not where the jump starts.
    while index < end and not (_departs(values[index], level, spread, sign)
                               and (index + 1 >= end or _departs(values[index + 1], level, spread, sign))):
        index += 1
    if index >= end:
        return None
    while index > 0 and _departs(values[index - 1], level, spread, sign):
        index -= 1
    return index


def find_onset(
    values: Sequence[float],
    *,
    direction: str | None = None,
    min_z: float = MIN_Z,
    min_relative: float = 0.0,
) -> ChangePoint | None:
    """The onset of the first sustained change (in `direction` when given), or None."""
    data = [float(v) for v in values]
    if len(data) < MIN_POINTS:
        return None
    floor = RESOLUTION_SHARE * resolution(data)
    boundaries = _float_series_boundaries(tuple(data), min_z, floor)
    if not boundaries:
        return None
    edges = [0, *boundaries, len(data)]
    baseline = data[: edges[1]]
    level = statistics.median(baseline)
    spread = _spread(baseline, level, floor)
    medians = [statistics.median(data[a:b]) for a, b in zip(edges, edges[1:])]
    for position, boundary in enumerate(boundaries, start=1):
        after = medians[position]
        sign = 1 if after > level else -1
        if not _departs(after, level, spread, sign):
            continue  # a segment within the baseline's noise (a slightly raised stretch) is no regime
        if not _departs(after, level, _pooled_spread(baseline, data[boundary:edges[position + 1]], floor), sign):
            # ... nor within the noise the baseline and it show together: a few quiet points at
            # the window's start make a tight spread that any later jitter departs from.
            continue
        for later in medians[position + 1:]:
            if not _departs(later, level, spread, sign):
                break
            after = max(after, later) if sign > 0 else min(after, later)
        if direction is not None and (direction == "up") != (sign > 0):
            continue
        if abs(after - level) < min_z * spread:
            continue
        if abs(after - level) < min_relative * max(abs(after), abs(level)):
            continue
        onset = _walk(data, boundary, level, spread, sign, edges[position + 1])
        if onset is None:
            continue
        if onset >= MIN_SEGMENT // 2 + 1:
            # Re-read the baseline from the points before the onset and walk once more.
            level2 = statistics.median(data[:onset])
            spread2 = _spread(data[:onset], level2, floor)
            again = _walk(data, onset, level2, spread2, sign, edges[position + 1])
            if again is not None and abs(after - level2) >= min_z * spread2:
                onset, level, spread = again, level2, spread2
        if onset == 0:
            return None  # the window starts inside the change: no onset in it
        return ChangePoint(
            index=onset,
            boundary=boundary,
            direction="up" if sign > 0 else "down",
            before=level,
            after=after,
            spread=spread,
            z=round(abs(after - level) / spread, 3),
        )
    return None


def find_end(values: Sequence[float], change: ChangePoint) -> int | None:
    """The index where the series is back near its baseline for good after `change`, or None
    while the change lasts to the window's end (see the module docstring, step 4)."""
    data = [float(v) for v in values]
    sign = 1 if change.direction == "up" else -1
    tolerance = RECOVERED_SHARE * abs(change.after - change.before)
    away = [k for k in range(change.index, len(data)) if sign * (data[k] - change.before) >= tolerance]
    if not away:
        return None
    end = away[-1] + 1
    return end if len(data) - end >= MIN_SEGMENT else None
