"""A metric citation's series drawn as a terminal sparkline: `attest ask` prints it on a line of
its own under the fact that cites the series, labelled with the metric and the window's range
(`cpu_usage_percent ▁▁▁▂▅████ 30–96.7%`).

The scale must not turn noise into spikes. Min–max scaling stretches any series to the full
height, so a healthy series wandering between 20 % and 30 % looks like an incident. Here:

1. A longer series is averaged into at most `MAX_WIDTH` buckets.
2. Each inner bucket is drawn as the median of itself and its two neighbours: a step or a ramp
   keeps its shape, a lone jitter does not. The printed range still gives the true extremes.
3. The bars span at least `NOISE_SPAN` times the series' own jitter and at least `LEVEL_SPAN`
   times its mean level: a series whose movement is small against either is drawn near-flat on
   the lowest bars; a change well above both still reaches the top bar. The jitter is the median
   of the buckets' second differences (halved): a step moves two of them and a steady ramp none,
   so neither is mistaken for noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean, median

from rich.cells import cell_len

from attest.gateway.v1 import answer_pb2
from gateway.terminal_text import printable

BARS = "▁▂▃▄▅▆▇█"
MAX_WIDTH = 24
NOISE_SPAN = 12.0
LEVEL_SPAN = 0.5
# Fewer buckets cannot tell jitter from change: a step is two of the few second differences.
MIN_FOR_JITTER = 8
UNITS = {"percent": "%", "%": "%"}


def _buckets(values: Sequence[float], width: int) -> list[float]:
    if len(values) <= width:
        return list(values)
    groups = [values[len(values) * k // width: len(values) * (k + 1) // width] for k in range(width)]
    return [fmean(group) for group in groups]


def sparkline(values: Sequence[float], width: int = MAX_WIDTH) -> str:
    """One bar per bucket (see the module docstring for the scale); empty for no values."""
    if not values:
        return ""
    raw = _buckets(values, max(width, 1))
    drawn = [raw[0], *(median(raw[k - 1:k + 2]) for k in range(1, len(raw) - 1)), raw[-1]] if len(raw) > 2 else raw
    jitter = (median(abs(raw[k - 1] - 2 * raw[k] + raw[k + 1]) / 2 for k in range(1, len(raw) - 1))
              if len(raw) >= MIN_FOR_JITTER else 0.0)
    low = min(drawn)
    scale = max(max(drawn) - low, NOISE_SPAN * jitter, LEVEL_SPAN * abs(fmean(raw)))
    if scale <= 0:
        return BARS[0] * len(drawn)
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / scale * len(BARS)))] for v in drawn)


def number(value: float) -> str:
    """A value as a person reads it: whole from 1000 up, else at most three significant digits."""
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.3g}"


def series_range(series: answer_pb2.SeriesWindow) -> str:
    """`low–high` of the window's values with the unit (`30–96.7%`, `148–1577 ms`)."""
    values = [point.value for point in series.points]
    unit = UNITS.get(series.unit, f" {series.unit}" if series.unit else "")
    low, high = min(values), max(values)
    return f"{number(low)}{unit}" if low == high else f"{number(low)}–{number(high)}{unit}"


def series_line(series: answer_pb2.SeriesWindow, width: int | None) -> str:
    """The labelled line of one series: metric, sparkline, range; the sparkline narrows (down to 8
    bars) to keep the line within `width` cells."""
    label = f"{printable(series.metric, one_line=True) or '指标'} "
    tail = f" {printable(series_range(series), one_line=True)}"
    bars = MAX_WIDTH if width is None else max(8, min(MAX_WIDTH, width - cell_len(label) - cell_len(tail)))
    return f"{label}{sparkline([point.value for point in series.points], bars)}{tail}"
