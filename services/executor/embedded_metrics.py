"""Metric findings of the embedded executor agent: a series' rise (or, for a signal whose fall is
the trouble, its fall) past its window's baseline or a level abnormal for its kind, with its onset,
end and top instance, each cited; a quiet series as a negative observation; a series too short for
a trend stated as read; and one finding per series read twice (a zoomed-out read).
"""

from __future__ import annotations

from services.executor.checked_scope import quiet_series_statement
from services.executor.embedded_findings import Candidate, Findings, binding, load_result, read_scope, ref_texts
from services.executor.tools.metrics_tool import no_series_text
from shared.config import configured_signal_semantics
from shared.core.contracts import (
    EvidenceBinding,
    MissingInfo,
    Quantity,
    QuantityAggregate,
    QuantityRole,
    Signal,
    Statement,
    StatementRef,
    ToolInvocation,
)
from shared.core.evidence_facts import normalise_unit, ref_facts
from shared.core.grounding.quiet_series import summary_state
from shared.core.metric_anomaly import assess_series
from shared.core.signal_semantics import Direction
from shared.core.statement_render import render_statement
from shared.core.symptom_lexicon import metric_profile, symptoms_for_metric
from shared.core.tool_results import MetricSeriesResult, MetricsResult
from shared.core.value_format import as_written, format_value

# A metric anomaly outranks a log burst of the same relevance: it measures the symptom itself.
ANOMALY_BASE_SCORE = 20.0
# A level past the abnormal one read from too few points for a trend: below a detected rise.
FEW_POINTS_ANOMALY_SCORE = 1.0


def metrics_findings(invocation: ToolInvocation, findings: Findings) -> None:
    refs = ref_texts(invocation)
    data = load_result(invocation, findings, MetricsResult)
    if data is None:
        return
    service, start, end = read_scope(invocation, data)
    if invocation.evidence_status == "NO_EVIDENCE":
        text = refs.get("summary")
        if text:
            findings.candidates.append(Candidate(
                kind="negative", service=service, no_hit=True, score=0.5, bindings=[binding(invocation, "summary", text)],
                text=no_series_text(service, start, end, data.absent),
            ))
        return
    unexamined = data.not_examined
    if unexamined.count > 0:
        names = "、".join(unexamined.names)
        findings.missing.append(MissingInfo(
            text=f"{service} 另有 {unexamined.count} 条指标序列未检查（{names}{'等' if unexamined.count > len(unexamined.names) else ''}）。",
            tool_name=invocation.tool_name,
        ))
    for i, series in enumerate(data.series):
        metric, unit = series.metric, series.unit
        points = series.points
        values = series.values
        asked_direction = _stated_direction(metric, findings.stated)
        assessment = assess_series(metric, unit, values, asked_direction)
        if assessment.insufficient:
            findings.missing.append(MissingInfo(
                text=f"{service} 的 {metric} 只有 {len(values)} 个数据点，不足以判断趋势。", tool_name=invocation.tool_name
            ))
            _few_points(invocation, refs, service, series, i, start, end, findings, assessment.direction)
            continue
        anomaly = assessment.anomaly
        if anomaly is None:
            _normal_series(invocation, refs, service, series, i, start, end, findings, assessment.direction)
            continue
        peak_path = f"series[{i}].points[{anomaly.peak_index}]"
        if peak_path not in refs:
            continue  # the fact cannot be cited: state nothing
        falling = anomaly.direction == "down"
        # The worst point is the clue: the highest of a rise, the lowest of a fall (never the
        # healthy level the fall started from).
        peak_ts, peak_value = points[anomaly.peak_index]
        episode = _Episode(invocation, refs, series)
        episode.add(peak_path, peak_value, peak_ts, "peak")
        base_ts, base_value = points[anomaly.baseline_index]
        beyond = base_value > peak_value if falling else base_value < peak_value
        if (anomaly.relative or anomaly.trend) and beyond:
            episode.add(f"series[{i}].points[{anomaly.baseline_index}]", base_value, base_ts, "baseline")
        if anomaly.baseline_already_high:
            findings.missing.append(MissingInfo(
                text=f"{service} 的 {metric} 在窗口起点已处于高位，异常开始时间不在本次时间窗口内，建议扩大窗口。",
                tool_name=invocation.tool_name,
            ))
        onset = points[anomaly.onset_index][0] if anomaly.onset_index is not None else None
        # The tool's onset ref (the same detector) when it marks this rise: citable.
        stated = series.onset
        onset_path = f"series[{i}].onset"
        onset_ref = None
        if stated is not None and stated.direction == anomaly.direction and stated.at == onset and onset_path in refs:
            onset_ref = (invocation, onset_path, refs[onset_path])
            _ended(episode, i, stated.after, stated.at)
        _top(episode, i, falling)
        statement = Statement(
            subject=service, signal=Signal(kind="metric", name=metric),
            state=("fall" if falling else "rise") if onset_ref is not None else "level",
            quantities=episode.quantities, refs=[StatementRef(source_invocation_id=invocation.invocation_id,
                                                              raw_path=item.raw_path or "") for item in episode.bindings],
        )
        findings.candidates.append(Candidate(
            kind="anomaly", service=service, text=render_statement(statement, None) + "。", bindings=episode.bindings,
            score=ANOMALY_BASE_SCORE + anomaly.score, symptoms=set(symptoms_for_metric(metric)), metric=metric,
            onset_ts=onset, onset_ref=onset_ref, moved="下降" if falling else "升高",
            already_high=anomaly.baseline_already_high, statement=statement,
        ))


class _Episode:
    """The quantities of one series' episode, each with the binding of the ref that states it."""

    def __init__(self, invocation: ToolInvocation, refs: dict[str, str], series: MetricSeriesResult) -> None:
        self.invocation, self.refs, self.series = invocation, refs, series
        self.unit, self.factor = normalise_unit(series.unit) or ("", 1.0)
        self.quantities: list[Quantity] = []
        self.bindings: list[EvidenceBinding] = []

    def add(self, path: str, value: float, at: str, role: QuantityRole, *, aggregate: QuantityAggregate = "point",
            instance: str = "") -> bool:
        """The quantity `role` at `at`, cited by `path` (False when the ref cannot be cited)."""
        if path not in self.refs:
            return False
        stated, precision = as_written(value, self.series.unit, self.factor)
        self.quantities.append(Quantity(value=stated, unit=self.unit, aggregate=aggregate, at=at, role=role,
                                        precision=precision, instance=instance))
        if all(item.raw_path != path for item in self.bindings):
            self.bindings.append(binding(self.invocation, path, self.refs[path]))
        return True


def _ended(episode: _Episode, i: int, after: float, onset_at: str) -> None:
    """When the move began (the tool's onset) and whether it ended (its end), else where it stands
    at the window's last point, each from a ref of the tool's."""
    series = episode.series
    episode.add(f"series[{i}].onset", after, onset_at, "onset", aggregate="median")
    if series.end is not None and episode.add(f"series[{i}].end", series.end.level, series.end.at, "end",
                                              aggregate="median"):
        return
    if series.points:
        last_ts, last_value = series.points[-1]
        episode.add(f"series[{i}].points[{len(series.points) - 1}]", last_value, last_ts, "latest")


def _top(episode: _Episode, i: int, falling: bool) -> None:
    """Which instance was highest at a rise's peak (it says nothing of a fall)."""
    top = episode.series.top
    if top is not None and top.instances > 1 and not falling:
        episode.add(f"series[{i}].top", top.level, top.at, "peak", instance=f"{top.label}={top.value}")


def _normal_series(invocation: ToolInvocation, refs: dict[str, str], service: str, series: MetricSeriesResult,
                   i: int, start: str, end: str, findings: Findings, direction: Direction = "up") -> None:
    path = f"series[{i}].summary"
    statement = quiet_series_statement(invocation, i, service, series, start, end, direction)
    if path not in refs or statement is None:
        return
    metric = series.metric
    kind = metric_profile(metric, series.unit, direction=direction).kind
    findings.candidates.append(Candidate(
        kind="negative", service=service, score=1.0, metric=metric,
        symptoms=set(symptoms_for_metric(metric)),
        bindings=[binding(invocation, path, refs[path])],
        text=render_statement(statement, None) + "。", statement=statement,
        preferred_negative={"error_rate": 0, "utilisation": 1, "latency": 2}.get(kind, 3),
    ))

def _few_points(invocation: ToolInvocation, refs: dict[str, str], service: str, series: MetricSeriesResult,
                i: int, start: str, end: str, findings: Findings, direction: Direction = "up") -> None:
    """A series too short for the detector still has a level, and an SRE asks for it (「CPU 多高」).
    Its summary ref is read as the verifier reads a cited summary (`summary_state` over the
    ref's facts, in the same normalised units): past the level abnormal for its kind, or risen
    over its median, it is an anomaly whose onset is unknown; no rise even over its minimum, it
    reads quiet; anything between is stated as read, never as normal. A signal whose fall is
    the trouble is stated as read (its lowest and its median), never as a rise nor as quiet:
    the summary's rise test says nothing of a fall."""
    summary_path = f"series[{i}].summary"
    stats = series.summary
    if stats is None or not series.points or summary_path not in refs:
        return
    facts = ref_facts(invocation, summary_path)
    state = summary_state(facts) if facts is not None else None
    if state is None:
        return
    reading = state.state
    metric, unit = series.metric, series.unit
    profile = metric_profile(metric, unit, direction=direction)
    bindings = [binding(invocation, summary_path, refs[summary_path])]
    symptoms = set(symptoms_for_metric(metric))
    if direction == "down":
        findings.candidates.append(Candidate(
            kind="negative", service=service, score=0.9, metric=metric, bindings=bindings, symptoms=symptoms,
            preferred_negative=3,
            text=(f"{service} 的 {metric} 在 {start} 至 {end} 期间共 {stats.count} 个数据点，最低为 "
                  f"{format_value(stats.min, unit)}，中位数 {format_value(stats.median, unit)}；"
                  "数据点太少，无法判断趋势。"),
        ))
        return
    level = (f"{service} 的 {metric} 在 {start} 至 {end} 期间共 {stats.count} 个数据点，最高为 "
             f"{format_value(stats.max, unit)}（{stats.max_at}），中位数 {format_value(stats.median, unit)}")
    if reading == "rise":
        peak = max(range(len(series.points)), key=lambda k: (series.points[k][1], -k))
        peak_path = f"series[{i}].points[{peak}]"
        if peak_path in refs:
            bindings.insert(0, binding(invocation, peak_path, refs[peak_path]))
        findings.candidates.append(Candidate(
            kind="anomaly", service=service, bindings=bindings, metric=metric, symptoms=symptoms,
            score=ANOMALY_BASE_SCORE + FEW_POINTS_ANOMALY_SCORE, text=f"{level}；数据点太少，无法判断何时开始升高。",
        ))
        return
    findings.candidates.append(Candidate(
        kind="negative", service=service, score=0.9, metric=metric, bindings=bindings, symptoms=symptoms,
        preferred_negative={"error_rate": 0, "utilisation": 1, "latency": 2}.get(profile.kind, 3),
        text=f"{level}，未见明显升高；数据点太少，无法判断趋势。" if reading == "quiet"
        else f"{level}；数据点太少，无法判断趋势。",
    ))


def _stated_direction(metric: str, stated: dict[str, Direction]) -> Direction | None:
    """The direction the question says `metric`'s kind of signal moved, if it says one."""
    if not stated:
        return None
    found = configured_signal_semantics().classify(metric)
    return stated.get(found.kind) if found is not None else None


def keep_zoomed_out(findings: Findings) -> None:
    """A series read twice (the planned window, and a read reaching further back because it was
    already high at the window's start) is one finding: the read that shows where the move began,
    and no note asking to widen the window that was widened."""
    dated = {(c.service, c.metric) for c in findings.candidates if c.kind == "anomaly" and c.onset_ts}
    findings.candidates = [c for c in findings.candidates
                           if not ((c.service, c.metric) in dated and c.kind in ("anomaly", "negative")
                                   and not c.onset_ts)]
    findings.missing = [m for m in findings.missing if not any(
        f"{service} 的 {metric} 在窗口起点已处于高位" in m.text for service, metric in dated)]
