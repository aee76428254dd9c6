"""The stored result of each evidence tool, typed, and the one renderer of its evidence texts.

An evidence tool stores two things per call: its result (`agent_result`, the JSON projection an
agent reads) and its evidence refs, each a `raw_path` into that result with a text. The models
here are the result's schema; `ref_text(result, raw_path)` is the only code that turns a result
and a raw_path into evidence text (the tools build their refs with it), and every reader of a
stored result — the executor's findings and scope, the gatekeeper's projection check, the facts
the fabrication checks bind numbers to — parses it with `read_result` and reads typed fields.
Nothing re-parses a rendered text.

raw_paths, by tool (the grammar every ref follows):

| tool | raw_path | item |
|---|---|---|
| query_metrics | `series[i].points[j]` | one point: `<service> <metric>=<value> at <ts>` |
| query_metrics | `series[i].summary` | `<service> <metric> <start>..<end>: <n> points, min=…, median=…, max=… at <ts>` |
| query_metrics | `series[i].onset` | the change point: `… onset at <ts>: rising from <before> (median before) to <after> (median after)` |
| query_metrics | `series[i].end` | where the change ended: `… back at <ts>: <level> (median since) after <after> (median during)` |
| query_metrics | `series[i].top` | the instance highest at the peak: `… top <label>=<value>: <level> at <ts> (highest of <n> instances at the peak)` |
| query_logs | `hits[k]` | one line: `<ts> <LEVEL> <service> host=<host> <message>` |
| query_changes | `changes[k]` | one record: `<ts> <kind> <service> by <author>: <summary>` |
| lookup_knowledge | `docs[i].chunks[j]` | one section of a runbook, as written |
| every tool | `summary` | the call's scope and counts (the result's `summary`) |

Values are spelled by `format_value` (the value with its unit) and timestamps by the tools'
`iso_utc`; a result that does not validate reads as None, never as a partial result.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from shared.core.tool_catalogue import LOOKUP_KNOWLEDGE, QUERY_CHANGES, QUERY_LOGS, QUERY_METRICS
from shared.core.value_format import format_value

MAX_REF_TEXT_CHARS = 500
# A finite number: a stored result never holds NaN or Infinity (nor a bool or a numeric string).
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, ge=0)]
# A call-level text (service, query, summary): null reads as "".
Text = Annotated[str, BeforeValidator(lambda value: "" if value is None else value)]
_PATH = re.compile(
    r"^(?:(?P<list>series|hits|changes|docs)\[(?P<i>\d{1,9})\]"
    r"(?:\.(?P<part>points|chunks)\[(?P<j>\d{1,9})\]|\.(?P<field>summary|onset|end|top))?|(?P<summary>summary))$"
)


def bounded_text(text: str, limit: int = MAX_REF_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Result(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


# --- query_metrics ---------------------------------------------------------------------------------


class SeriesSummary(_Result):
    count: Count
    min: Number
    median: Number
    max: Number
    max_at: str


class SeriesOnset(_Result):
    """The change point (`shared.core.change_point.find_onset`): the median before and after it."""

    index: Count
    at: str
    direction: Literal["up", "down"]
    before: Number
    after: Number


class SeriesEnd(_Result):
    """Where the change ended: the median level from there on."""

    index: Count
    at: str
    level: Number


class SeriesTop(_Result):
    """The instance (`label=value`) highest at the peak of a series combined over instances."""

    label: str
    value: str
    at: str
    level: Number
    instances: Count


class MetricSeriesResult(_Result):
    metric: str
    unit: str = ""
    points: list[tuple[str, Number]]
    summary: SeriesSummary | None = None
    signal: str | None = None  # the golden signal this series is (a backend's reading), if any
    query: str | None = None  # the backend's query (PromQL), if any
    onset: SeriesOnset | None = None
    end: SeriesEnd | None = None
    top: SeriesTop | None = None

    @property
    def values(self) -> list[float]:
        return [value for _, value in self.points]


class NotExamined(_Result):
    count: Count = 0
    names: list[str] = Field(default_factory=list)


class AbsentSeries(_Result):
    """A service without any series: the label asked, whether it has series outside the window,
    and the label values closest to its name."""

    backend: str = ""
    label: str
    elsewhere: bool = False
    close_values: list[str] = Field(default_factory=list)


class MetricsResult(_Result):
    tool: Literal["query_metrics"]
    service: str | None = None
    metric: str | None = None
    start: str | None = None
    end: str | None = None
    step_seconds: Count = 0
    series: list[MetricSeriesResult]
    series_truncated: bool = False
    not_examined: NotExamined = Field(default_factory=NotExamined)
    absent: AbsentSeries | None = None
    summary: Text = ""

    @property
    def point_count(self) -> int:
        return sum(len(series.points) for series in self.series)


# --- query_logs ------------------------------------------------------------------------------------


class LogHit(_Result):
    ts: str
    level: str
    host: str = ""
    message: str
    # The line's service where it is not the one asked for (a search over several services).
    service: str = ""


class _RecordsResult(_Result):
    """A search over a window that returns the most recent of its matching records."""

    tool: str
    start: str | None = None
    end: str | None = None
    total_matches: Count  # every matching record, of which `returned` (the most recent) are listed
    returned: Count | None = None
    summary: Text = ""


class LogsResult(_RecordsResult):
    tool: Literal["query_logs"]
    service: str | None = None
    level: list[str] | None = None
    contains: str | None = None
    hits: list[LogHit]
    # Lines of any level the backend holds for the service over the whole window, whatever the
    # filters asked (None: not counted). 0 means the service logged nothing there: no data, never
    # a sign of health.
    window_lines: Count | None = None
    # Lines in the window whose level could be read neither from a label nor from the line
    # (None: not counted). Lines of unknown level may hide errors: their absence proves nothing.
    unclassified_lines: Count | None = None
    # The first and the last matching line of the whole window (not of the returned hits only).
    first_ts: str | None = None
    last_ts: str | None = None


# --- query_changes ---------------------------------------------------------------------------------


class ChangeRecord(_Result):
    ts: str
    service: str
    kind: str = ""
    author: str = ""
    summary: str = ""


class ChangesResult(_RecordsResult):
    tool: Literal["query_changes"]
    service: str | None = None
    kind: str | None = None
    changes: list[ChangeRecord]


# --- lookup_knowledge ------------------------------------------------------------------------------


class KnowledgeChunk(_Result):
    heading: str = ""
    score: Number = 0.0
    text: str | None = None  # None: a deduped chunk (its evidence is the earlier call's)
    hit_id: str = ""
    # Returned earlier in the run: no new evidence (services/executor/tools/knowledge_dedupe.py).
    deduped: bool = False


class KnowledgeDoc(_Result):
    path: str = ""
    title: str = ""
    kind: str = ""
    score: Number = 0.0
    chunks: list[KnowledgeChunk]


class KnowledgeResult(_Result):
    tool: Literal["lookup_knowledge"]
    query: Text = ""
    top_k: Count = 0
    docs: list[KnowledgeDoc]
    deduped_chunks: Count | None = None
    summary: Text = ""

    @property
    def fresh_chunk_count(self) -> int:
        """Chunks that are new evidence (not returned earlier in the run)."""
        return sum(1 for doc in self.docs for chunk in doc.chunks if not chunk.deduped)


ToolResultData = MetricsResult | LogsResult | ChangesResult | KnowledgeResult
_MODELS: dict[str, type[MetricsResult] | type[LogsResult] | type[ChangesResult] | type[KnowledgeResult]] = {
    QUERY_METRICS: MetricsResult,
    QUERY_LOGS: LogsResult,
    QUERY_CHANGES: ChangesResult,
    LOOKUP_KNOWLEDGE: KnowledgeResult,
}
RESULT_TOOLS = frozenset(_MODELS)  # the tools whose results are evidence, each with its schema


class _ParsedResults:
    """Recently read results by (tool, stored text), bounded by the text's total size. A result is
    frozen, so every reader of the same stored text may share one parse: the executor's readers,
    the gatekeeper's view and its fact reader each ask for the same few results."""

    MAX_CHARS = 64_000_000

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str], ToolResultData | None] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> tuple[bool, ToolResultData | None]:
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def put(self, key: tuple[str, str], result: ToolResultData | None) -> None:
        if len(key[1]) > self.MAX_CHARS // 4:
            return  # one huge text is read again rather than evicting everything else
        with self._lock:
            if key not in self._entries:
                self._chars += len(key[1])
            self._entries[key] = result
            while self._chars > self.MAX_CHARS:
                (_, text), _ = self._entries.popitem(last=False)
                self._chars -= len(text)


    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


_PARSED = _ParsedResults()


def forget_parsed_results() -> None:
    """Drop every remembered parse and rendering (benchmarks time a cold read with it)."""
    _PARSED.clear()
    _RENDERED.clear()


def read_result(tool_name: str, agent_result: str | None) -> ToolResultData | None:
    """The stored result of an evidence tool's call, typed; None when `tool_name` is no evidence
    tool, the text is no JSON object, names another tool, or does not follow its schema."""
    model = _MODELS.get(tool_name)
    if model is None or not agent_result or not isinstance(agent_result, str):
        return None
    key = (tool_name, agent_result)
    known, result = _PARSED.get(key)
    if not known:
        try:
            result = model.model_validate_json(agent_result)
        except (ValidationError, ValueError, RecursionError):
            result = None
        _PARSED.put(key, result)
    return result


def dump_result(result: ToolResultData) -> str:
    """The stored JSON of a result: compact, Chinese kept as written, unset optional parts left out."""
    return json.dumps(result.model_dump(mode="json", exclude_none=True), ensure_ascii=False, separators=(",", ":"))


# --- raw_paths -------------------------------------------------------------------------------------



def parse_path(raw_path: str) -> tuple[str, int, int, str] | None:
    """(list name or "summary", i, j, part) for a raw_path of the grammar above, else None.
    `part` is "points"/"chunks" (with j), "summary"/"onset"/"end"/"top", or "" for a list item."""
    match = _PATH.match(raw_path) if isinstance(raw_path, str) and len(raw_path) <= 300 else None
    if match is None:
        return None
    if match["summary"]:
        return "summary", -1, -1, ""
    i = int(match["i"])
    if match["part"]:
        return match["list"], i, int(match["j"]), match["part"]
    return match["list"], i, -1, match["field"] or ""


def _series_text(result: MetricsResult, series: MetricSeriesResult, part: str, j: int = -1) -> str | None:
    subject = f"{result.service} {series.metric}"
    unit = series.unit
    if part == "points":
        if not 0 <= j < len(series.points):
            return None
        stamp, value = series.points[j]
        return f"{subject}={format_value(value, unit)} at {stamp}"
    if part == "summary" and series.summary is not None:
        stats = series.summary
        return (
            f"{subject} {result.start or ''}..{result.end or ''}: {stats.count} points, "
            f"min={format_value(stats.min, unit)}, median={format_value(stats.median, unit)}, "
            f"max={format_value(stats.max, unit)} at {stats.max_at}"
        )
    onset = series.onset
    if part == "onset" and onset is not None:
        verb = "rising" if onset.direction == "up" else "falling"
        return (
            f"{subject} onset at {onset.at}: {verb} from {format_value(onset.before, unit)} "
            f"(median before) to {format_value(onset.after, unit)} (median after)"
        )
    if part == "end" and series.end is not None and onset is not None:
        return (
            f"{subject} back at {series.end.at}: {format_value(series.end.level, unit)} (median since) "
            f"after {format_value(onset.after, unit)} (median during)"
        )
    top = series.top
    if part == "top" and top is not None:
        return (
            f"{subject} top {top.label}={top.value}: {format_value(top.level, unit)} at {top.at} "
            f"(highest of {top.instances} instances at the peak)"
        )
    return None


def hit_prefix(result: LogsResult, hit: LogHit) -> str:
    """What a log line's text says before its message (the message starts right after it)."""
    return f"{hit.ts} {hit.level} {hit.service or result.service or ''} host={hit.host} "


def _change_text(change: ChangeRecord) -> str:
    return f"{change.ts} {change.kind} {change.service} by {change.author}: {change.summary}"


def ref_text(result: ToolResultData, raw_path: str) -> str | None:
    """The evidence text of the ref at `raw_path` of this result; None for a path it lacks."""
    ref = ref_at(result, raw_path)
    return None if ref is None else ref.text


@dataclass(frozen=True)
class RenderedRef:
    """One evidence ref of a result, rendered: its path, text and timestamp (the time it is
    about; the window's end for a scope), and for a knowledge chunk its document's path."""

    raw_path: str
    text: str
    timestamp: str = ""
    document: str = ""


class _RenderedLists:
    """The rendered ref lists of the last few results, by the result object (a result is frozen,
    and the parse cache hands every reader of the same stored text the same object)."""

    SIZE = 64

    def __init__(self) -> None:
        self._entries: OrderedDict[int, tuple[ToolResultData, tuple[RenderedRef, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, result: ToolResultData) -> tuple[RenderedRef, ...] | None:
        with self._lock:
            entry = self._entries.get(id(result))
            if entry is None or entry[0] is not result:
                return None
            self._entries.move_to_end(id(result))
            return entry[1]

    def put(self, result: ToolResultData, refs: tuple[RenderedRef, ...]) -> None:
        with self._lock:  # the entry holds the result, so its id() is not reused while it is here
            self._entries[id(result)] = (result, refs)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_RENDERED = _RenderedLists()


def rendered_refs(result: ToolResultData) -> list[RenderedRef]:
    """Every ref of a result in stored order: its items, then the call's `summary`."""
    known = _RENDERED.get(result)
    if known is None:
        known = tuple(_render_all(result))
        _RENDERED.put(result, known)
    return list(known)


def _render_all(result: ToolResultData) -> list[RenderedRef]:
    refs: list[RenderedRef] = []

    def add(path: str, text: str | None, stamp: str = "", document: str = "") -> None:
        if text is not None:
            refs.append(RenderedRef(path, bounded_text(text), stamp, document))

    if isinstance(result, MetricsResult):
        for i, series in enumerate(result.series):
            for j, (stamp, _) in enumerate(series.points):
                add(f"series[{i}].points[{j}]", _series_text(result, series, "points", j), stamp)
            add(f"series[{i}].summary", _series_text(result, series, "summary"), result.end or "")
            for part, moment in (("onset", series.onset), ("end", series.end), ("top", series.top)):
                if moment is not None:
                    add(f"series[{i}].{part}", _series_text(result, series, part), moment.at)
        add("summary", result.summary, result.end or "")
    elif isinstance(result, LogsResult):
        for k, hit in enumerate(result.hits):
            add(f"hits[{k}]", hit_prefix(result, hit) + hit.message, hit.ts)
        add("summary", result.summary, result.end or "")
    elif isinstance(result, ChangesResult):
        for k, change in enumerate(result.changes):
            add(f"changes[{k}]", _change_text(change), change.ts)
        add("summary", result.summary, result.end or "")
    else:
        for i, doc in enumerate(result.docs):
            for j, chunk in enumerate(doc.chunks):
                if not chunk.deduped:
                    add(f"docs[{i}].chunks[{j}]", chunk.text, document=doc.path)
        add("summary", result.summary)
    return refs


def ref_at(result: ToolResultData, raw_path: str) -> RenderedRef | None:
    """The one ref of `rendered_refs(result)` whose raw_path is `raw_path` (compared exactly), or
    None: a single ref rendered without laying out the others."""
    parsed = parse_path(raw_path)
    if parsed is None:
        return None
    name, i, j, part = parsed
    if name == "summary":
        return RenderedRef("summary", bounded_text(result.summary),
                           "" if isinstance(result, KnowledgeResult) else result.end or "")
    if f"{name}[{i}]" + (f".{part}[{j}]" if j >= 0 else f".{part}" if part else "") != raw_path:
        return None  # hits[01], hits[1 ]: a spelling no stored ref has
    if isinstance(result, MetricsResult) and name == "series" and part and i < len(result.series):
        series = result.series[i]
        text = _series_text(result, series, part, j)
        if text is None:
            return None
        if part == "points":
            stamp = series.points[j][0]
        elif part == "summary":
            stamp = result.end or ""
        else:
            moment = {"onset": series.onset, "end": series.end, "top": series.top}[part]
            stamp = moment.at if moment is not None else ""
        return RenderedRef(raw_path, bounded_text(text), stamp)
    if isinstance(result, LogsResult) and name == "hits" and not part and i < len(result.hits):
        hit = result.hits[i]
        return RenderedRef(raw_path, bounded_text(hit_prefix(result, hit) + hit.message), hit.ts)
    if isinstance(result, ChangesResult) and name == "changes" and not part and i < len(result.changes):
        change = result.changes[i]
        return RenderedRef(raw_path, bounded_text(_change_text(change)), change.ts)
    if isinstance(result, KnowledgeResult) and name == "docs" and part == "chunks" and i < len(result.docs):
        doc = result.docs[i]
        chunk = doc.chunks[j] if j < len(doc.chunks) else None
        if chunk is None or chunk.deduped or chunk.text is None:
            return None
        return RenderedRef(raw_path, bounded_text(chunk.text), document=doc.path)
    return None


def ref_count(result: ToolResultData) -> int:
    """How many refs `rendered_refs(result)` holds, counted without rendering them."""
    if isinstance(result, MetricsResult):
        count = 0
        for series in result.series:
            count += len(series.points) + (series.summary is not None) + (series.onset is not None)
            count += (series.end is not None and series.onset is not None) + (series.top is not None)
        return count + 1
    if isinstance(result, LogsResult):
        return len(result.hits) + 1
    if isinstance(result, ChangesResult):
        return len(result.changes) + 1
    return sum(1 for doc in result.docs for chunk in doc.chunks if not chunk.deduped and chunk.text is not None) + 1


_SEGMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d{1,9}\])*)$")
_INDEX = re.compile(r"\[(\d+)\]")


def path_reader(result: ToolResultData) -> Callable[[str], bool]:
    """Whether a raw_path (`a.b[2].c`) addresses a value the stored result holds; the result is
    laid out once, for every path asked."""
    tree: object = result.model_dump(mode="json", exclude_none=True)

    def holds(raw_path: str) -> bool:
        if not isinstance(raw_path, str) or not raw_path or len(raw_path) > 300:
            return False
        node = tree
        for segment in raw_path.split("."):
            match = _SEGMENT.match(segment)
            if match is None or not isinstance(node, dict) or match.group(1) not in node:
                return False
            node = node[match.group(1)]
            for index in _INDEX.findall(match.group(2)):
                if not isinstance(node, list) or int(index) >= len(node):
                    return False
                node = node[int(index)]
        return True

    return holds


def point_values(result: ToolResultData | None) -> dict[str, float]:
    """raw_path -> value of every metric point of a result (none for other results)."""
    if not isinstance(result, MetricsResult):
        return {}
    return {f"series[{i}].points[{j}]": value
            for i, series in enumerate(result.series) for j, (_, value) in enumerate(series.points)}
