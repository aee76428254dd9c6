"""How raw Prometheus series become the signals an SRE reads.

A service's series are grouped into metric families and each family is read by its type:

| type | how it is read | aggregated over instances |
|---|---|---|
| counter | `rate(x[range])` per second (a reset is PromQL's business); `<x>:rate` | sum (CPU seconds: max, in cores) |
| counter with a status label | also the error ratio, `100 * rate(errors) / rate(all)`; `<x>:error_ratio` | one series |
| histogram | `histogram_quantile(q, sum by (le) (rate(x_bucket[range])))` for p50/p95/p99; `rate(x_sum)/rate(x_count)`: `<x>:mean` | one series |
| summary | its `quantile` label (`<x>:p99`) and the mean | max / one series |
| gauge (and untyped) | as it is | max |
| `up` | targets down, `1 - up`: `up:targets_down` | sum |

The type comes from `/api/v1/metadata` (a scraped target's TYPE lines); a family without metadata
(a backfilled or federated series) is typed by the naming conventions: `_bucket` with an `le`
label is a histogram, a `quantile` label a summary, `_total` (or a lone `_count`) a counter.
`_created`, `scrape_*`, `*_info`, `process_start_time_seconds` and `target_info` are skipped.
Units come from the metadata's unit, else from the name with `_total` stripped first
(`process_cpu_seconds_total` is in seconds; its rate is CPU seconds per second: cores).

Series read per instance (`sum by (<instance labels>)`) are combined here, point by point, and the
instance highest at the combined peak is named: the hot pod is never lost in a `max`.

Golden signals (error ratio, latency quantiles, request rate, CPU, memory, saturation, targets
down) come first, in that order; PromQL templates from the settings (`{selector}` is the service
matcher, `{range}` the rate window) are queried by their names before anything else, and one
named like a built-in signal replaces it. Nothing here knows any estate's metric names: the
readings follow from types, units, label names and a few words every exporter uses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from services.executor.tools.backends import Contributor

SELECTOR = "{selector}"
RANGE = "{range}"
QUANTILES = ((0.99, "p99"), (0.95, "p95"), (0.5, "p50"))
# The order golden signals are shown in; any other series comes after them.
SIGNAL_ORDER = (
    "error_ratio", "latency_p99", "latency_p95", "latency_p50", "latency_mean", "request_rate",
    "cpu", "memory", "saturation", "targets_down",
)
_SKIPPED_NAMES = frozenset({"process_start_time_seconds", "target_info"})
_UNIT_SUFFIXES = (
    ("_seconds", "seconds"), ("_milliseconds", "ms"), ("_ms", "ms"), ("_bytes", "bytes"),
    ("_percent", "percent"), ("_ratio", "ratio"), ("_per_second", "per_second"),
)
_METADATA_UNITS = {"seconds": "seconds", "milliseconds": "ms", "bytes": "bytes", "percent": "percent", "ratio": "ratio"}
_MEMORY_WORDS = ("memory", "resident", "rss", "heap")
_SATURATION_WORDS = (
    "inflight", "in_flight", "queue", "pool", "connections", "threads", "pending", "saturation",
    "utilization", "utilisation", "backlog", "waiting",
)
_LATENCY_WORDS = ("latency", "duration", "response_time", "request_time")
_QUANTILE_NAME = re.compile(r"^0?\.(\d+)$|^1(?:\.0*)?$")


@dataclass(frozen=True)
class SeriesReading:
    """The settings of the reading: instance and status labels, the error pattern, templates."""

    instance_labels: tuple[str, ...] = ("pod", "instance")
    status_labels: tuple[str, ...] = ("status", "code", "status_code")
    error_status_pattern: str = "5.."
    signals: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # name -> (template, unit)


@dataclass(frozen=True)
class Family:
    """One metric family of a service: its type, base unit and the label names its series carry."""

    name: str  # histogram/summary: the base name; counter and gauge: the sampled name
    kind: str  # counter | gauge | histogram | summary
    unit: str  # seconds | ms | bytes | percent | ratio | ""
    labels: frozenset[str]
    typed_by: str  # metadata | name
    quantiles: tuple[str, ...] = ()  # a summary's quantile label values


@dataclass(frozen=True)
class SignalQuery:
    """One series to ask for: its PromQL (placeholders unfilled) and how to read the answer."""

    name: str  # the series' name in the evidence (`<family>:<reading>`, a gauge's own name, a template's name)
    signal: str  # a golden signal of SIGNAL_ORDER, or "" for any other series
    family: str
    template: str
    unit: str
    combine: str = ""  # "sum" | "max": combine the per-instance series; "": the query gives one series
    instance_labels: tuple[str, ...] = ()

    def promql(self, selector: str, range_: str) -> str:
        # {range} first: the selector holds a quoted service name, which is never re-scanned.
        return self.template.replace(RANGE, range_).replace(SELECTOR, selector)


# --- families ---------------------------------------------------------------------------------


def skipped(name: str) -> bool:
    return (name in _SKIPPED_NAMES or name.endswith("_created") or name.startswith("scrape_")
            or name.endswith("_info"))


def _strip(name: str, suffix: str) -> str:
    return name[: -len(suffix)] if name.endswith(suffix) else name


def _metadata_entry(name: str, metadata: Mapping[str, Sequence[Mapping[str, str]]]) -> Mapping[str, str] | None:
    for key in (name, _strip(name, "_total")):
        entries = metadata.get(key)
        if entries:
            return entries[0]
    return None


def unit_of(name: str, metadata_unit: str = "") -> str:
    """The base unit: the metadata's, else the name's suffix once `_total` is stripped."""
    if metadata_unit:
        return _METADATA_UNITS.get(metadata_unit.lower(), metadata_unit.lower())
    base = _strip(name.lower(), "_total")
    return next((unit for suffix, unit in _UNIT_SUFFIXES if base.endswith(suffix)), "")


def families(
    labelsets: Iterable[Mapping[str, str]], metadata: Mapping[str, Sequence[Mapping[str, str]]]
) -> list[Family]:
    """The families among a service's series (label sets as `/api/v1/series` gives them)."""
    labels: dict[str, set[str]] = {}
    quantiles: dict[str, set[str]] = {}
    for labelset in labelsets:
        name = labelset.get("__name__", "")
        if not name or skipped(name):
            continue
        labels.setdefault(name, set()).update(k for k in labelset if k != "__name__")
        if "quantile" in labelset:
            quantiles.setdefault(name, set()).add(labelset["quantile"])
    consumed: set[str] = set()
    found: list[Family] = []

    def meta(name: str) -> Mapping[str, str]:
        return _metadata_entry(name, metadata) or {}

    def take(base: str, kind: str, extra: Iterable[str], typed_by: str, qs: Iterable[str] = ()) -> None:
        members = [n for n in (base, *extra) if n in labels]
        consumed.update(members)
        seen = set().union(*(labels[n] for n in members)) - {"le", "quantile"}
        found.append(Family(base, kind, unit_of(base, meta(base).get("unit", "")), frozenset(seen), typed_by,
                            tuple(sorted(qs, key=_quantile_value))))

    for name in sorted(labels):
        if name.endswith("_bucket") and "le" in labels[name]:
            base = name[: -len("_bucket")]
            typed = "metadata" if meta(base).get("type") == "histogram" else "name"
            take(base, "histogram", (f"{base}_bucket", f"{base}_sum", f"{base}_count"), typed)
    for name in sorted(quantiles):
        if name not in consumed:
            typed = "metadata" if meta(name).get("type") == "summary" else "name"
            take(name, "summary", (f"{name}_sum", f"{name}_count"), typed, quantiles[name])
    for name in sorted(labels):
        if name in consumed or not name.endswith("_sum"):
            continue
        base = name[: -len("_sum")]
        if f"{base}_count" in labels and f"{base}_count" not in consumed:
            typed = "metadata" if meta(base).get("type") in ("summary", "histogram") else "name"
            take(base, "summary", (f"{base}_sum", f"{base}_count"), typed)
    for name in sorted(labels):
        if name in consumed:
            continue
        declared = meta(name).get("type", "")
        if declared == "counter" or (not declared and (name.endswith("_total") or name.endswith("_count"))):
            kind = "counter"
        else:
            kind = "gauge"  # gauge, unknown, untyped, info-less stateset: read as they are
        take(name, kind, (), "metadata" if declared else "name")
    return found


def _quantile_value(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.inf


def _quantile_name(text: str) -> str | None:
    """`0.99` -> `p99`, `0.5` -> `p50`, `0.999` -> `p999`; None for anything else."""
    match = _QUANTILE_NAME.match(text.strip())
    if match is None:
        return None
    digits = match.group(1) or "100"
    return "p" + (digits + "0" if len(digits) == 1 else digits)


# --- signal queries ---------------------------------------------------------------------------


def _select(metric: str, extra: str = "") -> str:
    """`metric{<service matcher>[, extra]}` with the matcher left as the {selector} placeholder."""
    return metric + "{" + SELECTOR + (f", {extra}" if extra else "") + "}"


def _rate(metric: str, extra: str = "") -> str:
    return f"rate({_select(metric, extra)}[{RANGE}])"


def _by(inner: str, labels: Sequence[str], how: str = "sum") -> str:
    return f"{how} by ({', '.join(labels)}) ({inner})" if labels else f"{how}({inner})"


def _has_word(name: str, words: Sequence[str]) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in words)


def signal_queries(
    found: Sequence[Family], reading: SeriesReading, promql_string: Callable[[str], str]
) -> list[SignalQuery]:
    """The readings of a service's families, golden signals first (SIGNAL_ORDER), then the rest
    in name order. `promql_string` quotes a label value."""
    queries: list[SignalQuery] = []
    for family in found:
        instance = tuple(label for label in reading.instance_labels if label in family.labels)
        name, unit = family.name, family.unit
        if family.kind == "counter":
            cpu = unit == "seconds" and "cpu" in name.lower()
            rate_unit = "cores" if cpu else {"seconds": "s/s", "bytes": "bytes/s", "ms": "ms/s"}.get(unit, "per_second")
            status = next((label for label in reading.status_labels if label in family.labels), None)
            signal = "cpu" if cpu else ("request_rate" if status else "")
            queries.append(SignalQuery(f"{name}:rate", signal, name, _by(_rate(name), instance), rate_unit,
                                       "max" if cpu else "sum", instance))
            if status is not None:
                errors = f"{status}=~{promql_string(reading.error_status_pattern)}"
                template = f"100 * (sum({_rate(name, errors)}) or vector(0)) / sum({_rate(name)})"
                queries.append(SignalQuery(f"{name}:error_ratio", "error_ratio", name, template, "percent"))
        elif family.kind == "histogram":
            latency = unit in ("seconds", "ms") or _has_word(name, _LATENCY_WORDS)
            for q, label in QUANTILES:
                template = f"histogram_quantile({q}, sum by (le) ({_rate(name + '_bucket')}))"
                queries.append(SignalQuery(f"{name}:{label}", f"latency_{label}" if latency else "", name, template, unit))
            queries.append(_mean(family, latency))
        elif family.kind == "summary":
            latency = unit in ("seconds", "ms") or _has_word(name, _LATENCY_WORDS)
            for quantile in family.quantiles:
                quantile_label = _quantile_name(quantile)
                if quantile_label is None:
                    continue
                wanted = f"latency_{quantile_label}"
                signal = wanted if latency and wanted in SIGNAL_ORDER else ""
                template = _by(_select(name, f"quantile={promql_string(quantile)}"), instance, "max")
                queries.append(SignalQuery(f"{name}:{quantile_label}", signal, name, template, unit, "max", instance))
            queries.append(_mean(family, latency))
        elif name == "up":
            queries.append(SignalQuery("up:targets_down", "targets_down", name,
                                       _by(f"1 - {_select(name)}", instance, "max"), "count", "sum", instance))
        else:
            if unit == "bytes" and _has_word(name, _MEMORY_WORDS):
                signal = "memory"
            elif _has_word(name, _SATURATION_WORDS) or unit in ("percent", "ratio"):
                signal = "saturation"
            else:
                signal = ""
            queries.append(SignalQuery(name, signal, name, _by(_select(name), instance, "max"), unit, "max", instance))
    return _with_templates(queries, reading)


def _mean(family: Family, latency: bool) -> SignalQuery:
    name = family.name
    template = f"sum({_rate(name + '_sum')}) / sum({_rate(name + '_count')})"
    return SignalQuery(f"{name}:mean", "latency_mean" if latency else "", name, template, family.unit)


def _with_templates(queries: list[SignalQuery], reading: SeriesReading) -> list[SignalQuery]:
    """Configured templates first (a built-in signal of the same name is replaced), then the
    golden signals in SIGNAL_ORDER, then every other series by name."""
    configured = [
        SignalQuery(name, name if name in SIGNAL_ORDER else "", name, template, unit)
        for name, (template, unit) in reading.signals.items()
    ]
    replaced = set(reading.signals)
    kept = [q for q in queries if q.signal not in replaced]
    rank = {signal: i for i, signal in enumerate(SIGNAL_ORDER)}
    golden = sorted((q for q in kept if q.signal), key=lambda q: (rank[q.signal], q.name))
    others = sorted((q for q in kept if not q.signal), key=lambda q: q.name)
    return configured + golden + others


def matching(queries: Sequence[SignalQuery], metric: str) -> list[SignalQuery]:
    """The queries a `metric` argument asks for: a series' name, its family (a histogram's
    `_bucket`/`_sum`/`_count` name included) or a signal's name."""
    family = metric
    for suffix in ("_bucket", "_sum", "_count"):
        if metric.endswith(suffix) and any(q.family == metric[: -len(suffix)] for q in queries):
            family = metric[: -len(suffix)]
    return [q for q in queries if metric in (q.name, q.signal) or q.family == family]


# --- combining per-instance series ------------------------------------------------------------


def combine(
    query: SignalQuery, parts: Sequence[tuple[Mapping[str, str], list[tuple[datetime, float]]]]
) -> tuple[list[tuple[datetime, float]], Contributor | None]:
    """One series from the query's answer (label set, points) and the instance highest at its peak."""
    if not parts:
        return [], None
    if len(parts) == 1 and not query.combine:
        return list(parts[0][1]), None
    how = sum if query.combine == "sum" else max
    by_time: dict[datetime, list[float]] = {}
    for _, points in parts:
        for at, value in points:
            by_time.setdefault(at, []).append(value)
    points = [(at, how(values)) for at, values in sorted(by_time.items())]
    if not points or not query.instance_labels or len(parts) < 2:
        return points, None
    peak_at, _ = max(points, key=lambda p: (p[1], p[0]))
    best: tuple[float, Mapping[str, str]] | None = None
    for labels, series in parts:
        level = next((v for at, v in series if at == peak_at), None)
        if level is not None and (best is None or level > best[0]):
            best = (level, labels)
    if best is None:
        return points, None
    label = next((name for name in query.instance_labels if best[1].get(name)), None)
    if label is None:
        return points, None
    return points, Contributor(label, best[1][label], peak_at, best[0], len(parts))
