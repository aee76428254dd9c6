"""The sentence a typed statement says, written by Attest (DESIGN §3, 2026-12-03).

    render_statement(statement, zone, language="zh", modes=None) -> str

The words are data (`render_words.json`, validated when first read), each table keyed by a typed
value (state, aggregate, standing, language), never by a sentence. Times are shown in `zone` with
the date; values with the precision the statement states. Chinese is the answer language the specs
require; English exists for operators who set it, as a departure.

    checkout-api 的 http_5xx_ratio 上升：中位数 由 0.2% 升至 12.5%（2026-12-01 01:49）
    checkout-api 的 cpu_usage 最高为 96.7%（2026-12-01 01:52）
    （推断）checkout-api 的 deploy 变更发生，导致 checkout-api 的 http_5xx_ratio 上升 …
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict

from shared.core.contracts import (
    Quantity,
    QuantityAggregate,
    Signal,
    Standing,
    Statement,
    StatementState,
    TimeWindow,
)
from shared.core.data_files import read_model_file
from shared.core.failure_modes import FailureModes
from shared.core.value_format import format_value

Language = Literal["zh", "en"]
WORDS_FILE = Path(__file__).with_name("render_words.json")
_WORD_KEYS = frozenset({"of", "log", "change", "caused", "mechanism", "colon", "list", "span", "open", "close",
                        "count_unit", "ratio_unit", "quote", "from_to", "up", "down"})
# An episode's words, keyed by a quantity's role and the way the series moved (`_up` / `_down`).
_EPISODE_KEYS = ("peak_up", "peak_down", "baseline_up", "baseline_down", "onset_up", "onset_down", "end", "latest",
                 "latest_at_peak_up", "latest_at_peak_down", "instance", "join", "instance_join", "window", "quiet_up",
                 "quiet_down", "line_at", "lines_over", "event_at", "actor",
                 "none_log", "none_change", "any_level", "containing")


class RenderWordsError(ValueError):
    """The renderer's word file cannot be read or lacks a word."""


def _every(keys: tuple[str, ...]) -> Callable[[dict[str, str]], dict[str, str]]:
    def check(table: dict[str, str]) -> dict[str, str]:
        missing = [key for key in keys if key not in table]
        if missing:
            raise ValueError(f"no word for {', '.join(missing)}")
        return table
    return check


class _Phrases(BaseModel):
    """One language's words, each table keyed by a typed value (never by a sentence)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    state: Annotated[dict[str, str], AfterValidator(_every(get_args(StatementState)))]
    aggregate: Annotated[dict[str, str], AfterValidator(_every(get_args(QuantityAggregate)))]
    # Chinese names a level by its aggregate (最高为 96.7%); a language without it states the level.
    level: Annotated[dict[str, str], AfterValidator(_every(get_args(QuantityAggregate)))] | None = None
    standing: Annotated[dict[str, str], AfterValidator(_every(get_args(Standing)))]
    words: Annotated[dict[str, str], AfterValidator(_every(tuple(sorted(_WORD_KEYS))))]
    gap: Annotated[dict[str, str], AfterValidator(_every(("limitation", "missing", "log", "change")))]
    episode: Annotated[dict[str, str], AfterValidator(_every(_EPISODE_KEYS))]


class _WordsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1]
    about: str = ""
    languages: dict[Language, _Phrases]


@lru_cache(maxsize=1)
def _phrases() -> dict[Language, _Phrases]:
    languages = read_model_file(WORDS_FILE, _WordsFile, RenderWordsError, "renderer words").languages
    if set(languages) != set(get_args(Language)):
        raise RenderWordsError(f"renderer words file {WORDS_FILE} must hold zh and en")
    return languages


def render_statement(
    statement: Statement, zone: tzinfo | None, language: Language = "zh", modes: FailureModes | None = None,
    quote: str = "", quote_at: str = "", side_quotes: tuple[tuple[str, str], tuple[str, str]] | None = None,
) -> str:
    """The one sentence `statement` says (module docstring). `zone` None: times stay ISO-8601 UTC,
    for the answer's display step to show in the configured zone. `quote`: a verified excerpt of
    the evidence, shown after the statement (never words a model wrote that no check compared);
    `quote_at`: the UTC instant of the quoted record, shown (in the zone) before the quote.
    `side_quotes`: for a cause, (quote, quote_at) of its cause and of its effect."""
    words = _phrases()[language].words
    if statement.action is not None and modes is not None:
        return _action(statement, modes, language)
    if statement.cause is not None:
        link = statement.cause
        (cause_quote, cause_at), (effect_quote, effect_at) = side_quotes or (("", ""), ("", ""))
        text = _phrases()[language].standing[statement.standing] + _plain(link.cause, zone, language)
        text += _quoted(cause_quote, cause_at, zone, language) + words["caused"]
        text = _joined(text, _plain(link.effect, zone, language) + _quoted(effect_quote, effect_at, zone, language))
        if link.mechanism and modes is not None and link.mechanism in modes.ids:
            name = modes.by_id(link.mechanism).name_zh if language == "zh" else link.mechanism
            text += words["mechanism"].format(name)
        return text
    return _phrases()[language].standing[statement.standing] + _plain(statement, zone, language) + _quoted(
        quote, quote_at, zone, language)


def _quoted(quote: str, at: str, zone: tzinfo | None, language: Language) -> str:
    """A verified excerpt after a statement: its record's instant, then the excerpt (or nothing)."""
    if not quote:
        return ""
    words = _phrases()[language].words
    when = f"{words['open']}{local_time(at, zone)}{words['close']}" if at else ""
    return f"{when}{words['colon']}{words['quote'].format(' '.join(quote.split()))}"


_MiB = 1024.0 * 1024.0  # a normalised "MB" is this many bytes (shared.core.evidence_facts)
# Units written against their number, as the evidence spells them (`96.7%`, `1577ms`).
_UNSPACED_UNITS = frozenset({"%", "", "count", "ms", "s"})

# A signal name a gap may show: a metric id or a change kind, never words.
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:.\-]{0,119}")


def render_gap(statement: Statement, gap: Literal["limitation", "missing"], language: Language = "zh") -> str:
    """What a typed gap says: what was not checked (`limitation`) or what the question lacks
    (`missing`), as its subject and signal; a log line's words are never shown."""
    words = _phrases()[language].gap
    signal = statement.signal
    if signal is None:
        thing = statement.subject
    elif signal.kind == "metric" and _NAME.fullmatch(signal.name):
        thing = _joined(statement.subject + _phrases()[language].words["of"], signal.name)
    else:
        thing = _joined(statement.subject + _phrases()[language].words["of"], words["log" if signal.kind == "log" else "change"])
    return words[gap].format(thing.strip()) if thing.strip() else ""


def _plain(statement: Statement, zone: tzinfo | None, language: Language) -> str:
    words = _phrases()[language].words
    text = _thing(statement, language)
    level = _phrases()[language].level
    if any(item.role is not None for item in statement.quantities):
        return _episode(statement, text, zone, language)
    if statement.signal is not None and (statement.at or statement.span is not None):
        return _dated(statement, zone, language)
    if statement.state == "absent" and statement.signal is not None and statement.signal.kind != "metric" and (
            window := _one_window(statement)) is not None:
        return _joined(statement.subject, _none(statement.signal, window, zone, language))
    if statement.state in ("level", "normal") and _one_window(statement) is not None and level is not None:
        return _over_window(statement, text, zone, language)
    if statement.state == "level" and statement.quantities and level is not None:
        # Values read as levels: 最高为 96.7%（…），中位数为 41%
        levels = (level[item.aggregate] + _quantity(item, zone, language, aggregate=False) for item in statement.quantities)
        return _joined(text, words["list"].join(levels))
    if statement.state is not None:
        state = _phrases()[language].state[statement.state]
        if statement.state == "event" and statement.signal is not None and statement.signal.kind == "log":
            state = _phrases()[language].state["present"]  # a line appears; a change happens
        text = _joined(text, state) if language == "zh" else f"{text} {state}"
    quantities = statement.quantities
    if statement.state in ("rise", "fall") and len(quantities) == 2 and quantities[0].aggregate == quantities[1].aggregate:
        # A move between two levels: 中位数由 0.08% 升至 1.84%（…）
        before, after = (_quantity(item, zone, language, aggregate=False) for item in quantities)
        move = words["from_to"].format(before, words["up" if statement.state == "rise" else "down"], after)
        return text + words["colon"] + _phrases()[language].aggregate[quantities[0].aggregate] + move
    if quantities:
        text += words["colon"] + words["list"].join(_quantity(item, zone, language) for item in quantities)
    return text


def _episode(statement: Statement, thing: str, zone: tzinfo | None, language: Language) -> str:
    """A series' episode, one clause per quantity role: 在 T 达到 V，高于窗口前段的 V0（T0），约自 T1
    起升高，至 T2 仍为 V2，尚未恢复；峰值时 pod=x 最高. The way it moved is the statement's state, or
    for a level the peak against its baseline (up when there is none)."""
    words = _phrases()[language].episode
    roles = {item.role: item for item in statement.quantities if item.role is not None and not item.instance}
    peak, baseline = roles.get("peak"), roles.get("baseline")
    falling = statement.state == "fall" or (
        statement.state not in ("rise", "fall") and peak is not None and baseline is not None and peak.value < baseline.value)
    way = "_down" if falling else "_up"

    def said(key: str, item: Quantity) -> str:
        return words[key].format(at=local_time(item.at, zone), value=_value(item, language))

    clauses = [said(role + way, roles[role]) for role in ("peak", "baseline", "onset") if role in roles]
    if "end" in roles:
        clauses.append(said("end", roles["end"]))
    elif "latest" in roles:
        latest = roles["latest"]
        clauses.append(words["latest_at_peak" + way] if peak is not None and latest.at == peak.at
                       else said("latest", latest))
    text = _joined(thing, words["join"].join(clauses)) if clauses else thing
    top = next((item for item in statement.quantities if item.role == "peak" and item.instance), None)
    if top is not None:
        text += words["instance_join"] + words["instance"].format(instance=top.instance)
    plain = [item for item in statement.quantities if item.role is None]
    if plain:
        text += _phrases()[language].words["colon"] + _phrases()[language].words["list"].join(
            _quantity(item, zone, language) for item in plain)
    return text


def _dated(statement: Statement, zone: tzinfo | None, language: Language) -> str:
    """Lines or a record with their time: 在 T 出现 ERROR 日志, 在 T0 至 T1 期间多次出现 WARN 日志,
    (the deploy change) 在 T 发生（执行人 A）."""
    words = _phrases()[language].episode
    signal = statement.signal
    assert signal is not None
    if signal.kind == "log":
        level = (f" {signal.level} " if language == "zh" else f"{signal.level} ") if signal.level else ""
        if statement.span is not None:
            said = words["lines_over"].format(start=local_time(statement.span.start, zone),
                                              end=local_time(statement.span.end, zone), level=level)
        else:
            said = words["line_at"].format(at=local_time(statement.at, zone), level=level)
        return _joined(statement.subject, said)
    actor = words["actor"].format(actor=statement.actor) if statement.actor else ""
    return _joined(_thing(statement, language), words["event_at"].format(at=local_time(statement.at, zone))) + actor


def _none(signal: Signal, window: TimeWindow, zone: tzinfo | None, language: Language) -> str:
    """A search over `window` that found nothing: 在 T0 至 T1 期间没有 ERROR/WARN 日志, 没有包含「x」的…
    日志 (the words searched for, which the cited search records), 没有变更记录."""
    words = _phrases()[language].episode
    start, end = local_time(window.start, zone), local_time(window.end, zone)
    if signal.kind == "change":
        return words["none_change"].format(start=start, end=end)
    what = signal.level or words["any_level"]
    if signal.name:
        what = words["containing"].format(text=signal.name) + what
    return words["none_log"].format(start=start, end=end, what=what)


def _one_window(statement: Statement) -> TimeWindow | None:
    """The window every quantity of the statement is over, when they share one."""
    windows = {(item.window.start, item.window.end) if item.window is not None else None for item in statement.quantities}
    if len(windows) != 1 or None in windows:
        return None
    return statement.quantities[0].window


def _over_window(statement: Statement, thing: str, zone: tzinfo | None, language: Language) -> str:
    """Levels over one window: 在 T0 至 T1 期间最高为 V（T），中位数为 M; a normal statement adds that
    it did not move the bad way (a fall when it states the lowest value, else a rise)."""
    words, level = _phrases()[language].episode, _phrases()[language].level
    assert level is not None
    window = _one_window(statement)
    assert window is not None
    span = words["window"].format(start=local_time(window.start, zone), end=local_time(window.end, zone))
    joiner = _phrases()[language].words["list"]
    levels = joiner.join(level[item.aggregate] + _value(item, language) + (
        f"{_phrases()[language].words['open']}{local_time(item.at, zone)}{_phrases()[language].words['close']}"
        if item.at else "") for item in statement.quantities)
    text = _joined(thing, span) + levels
    if statement.state == "normal":
        text += joiner + words["quiet_down" if any(item.aggregate == "min" for item in statement.quantities) else "quiet_up"]
    return text


def _thing(statement: Statement, language: Language) -> str:
    words = _phrases()[language].words
    signal = statement.signal
    if signal is None:
        return statement.subject
    owner = statement.subject + words["of"]
    if signal.kind == "metric":
        return _joined(owner, signal.name)
    if signal.kind == "log":  # its words are the model's: a quote comes from a verified excerpt only
        return _joined(owner, words["log"])
    kind = f"{signal.name} " if signal.name else ""
    return _joined(owner, kind + words["change"])


def _value(quantity: Quantity, language: Language) -> str:
    """The value with its unit, to the precision stated: `96.7%`, `1577ms`, `4.01GiB`, `3 条`."""
    words = _phrases()[language].words
    number = f"{quantity.value:.{quantity.precision}f}"
    if quantity.aggregate == "count":
        unit = words["count_unit"]
    elif quantity.aggregate == "ratio":
        unit = words["ratio_unit"]
    elif quantity.unit == "MB":
        return format_value(quantity.value * _MiB, "bytes")  # as the evidence spells a size: 4.01GiB
    elif quantity.unit in _UNSPACED_UNITS or quantity.unit.startswith("/"):
        unit = "" if quantity.unit == "count" else quantity.unit
    else:
        unit = f" {quantity.unit}"
    return number + unit


def _quantity(quantity: Quantity, zone: tzinfo | None, language: Language, aggregate: bool = True) -> str:
    words = _phrases()[language].words
    text = f"{_phrases()[language].aggregate[quantity.aggregate] if aggregate else ''}{_value(quantity, language)}"
    if quantity.at:
        text += f"{words['open']}{local_time(quantity.at, zone)}{words['close']}"
    elif quantity.window is not None:
        span = local_time(quantity.window.start, zone) + words["span"] + local_time(quantity.window.end, zone)
        text += f"{words['open']}{span}{words['close']}"
    return text


def _joined(left: str, right: str) -> str:
    """Two pieces, with a space where a Latin word meets Chinese."""
    if left and right and left[-1].isascii() != right[0].isascii() and (left[-1].isalnum() or right[0].isalnum()):
        return f"{left} {right}"
    return left + right


def local_time(stamp: str, zone: tzinfo | None) -> str:
    """An ISO-8601 UTC instant as wall time in `zone`: `2026-12-01 01:49` (seconds when it has them);
    with no zone, as ISO-8601 UTC (`2026-11-30T17:49:00Z`)."""
    try:
        instant = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(zone or UTC)
    except (ValueError, AttributeError):
        return stamp
    if zone is None:
        return instant.strftime("%Y-%m-%dT%H:%M:%SZ")
    return instant.strftime("%Y-%m-%d %H:%M:%S" if instant.second else "%Y-%m-%d %H:%M")


def _action(statement: Statement, modes: FailureModes, language: Language) -> str:
    action = statement.action
    assert action is not None
    if action.mechanism not in modes.ids:
        return ""
    mechanism = modes.by_id(action.mechanism)
    steps = mechanism.next_steps_zh if action.kind == "next_step" else mechanism.remedies_zh
    if action.index >= len(steps):
        return ""
    return steps[action.index]  # a remedy's need for confirmation is the item's typed flag
