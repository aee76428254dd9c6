"""Follow-up questions in a session: what a question inherits from the
session's last planned run, and how a relative shift moves the inherited window.

「那它的内存呢？」 after a question about payment-service names no service: it inherits the last
run's services and window. 「再往前看一小时」 moves the inherited window an hour earlier. The rules,
in order:

1. Nothing is inherited without a previous run (`InheritedContext`) that planned services.
2. A shift phrase is read first and removed from the question, so that 「前一天」 (the day before
   the inherited window) is not read as 「最近一天」 (`question_window.py`). Chinese: 「(再)往前/
   往后/往回 (看/查/推…) N 小时/分钟/天」, 「提前/提早/推后/推迟/延后/早/晚 N 小时」, 「前一天」
   「后一个小时」; English: `an hour earlier`, `2 hours later`, `go back 30 minutes`, `shift
   forward a day`, `the previous hour`, `the day before`. Without an amount (「再往前看看」) the
   window moves by its own length.
3. Services: inherited when the question names none; a question naming its own keeps them.
4. Window: a window the question names (any phrase `read_window` reads) is kept. Otherwise the
   inherited window is used, moved by the shift, when the services are inherited or the question
   asks for a shift; a question that names its own service and no shift gets the default window.
5. A moved window is cut at now; one moved wholly past now cannot be checked: the inherited
   window is kept and the note says so. A shift is at most MAX_SHIFT.

Nothing here knows a service: the names come from the previous run's plan, whatever they are.
Evidence is never inherited: the new run's plan runs its own tool calls.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from shared.core.contracts import TimeWindow
from shared.core.question_window import QuestionWindow, read_number, read_window

MAX_SHIFT = timedelta(days=7)

_NUM_CN = r"(?P<num>\d+(?:\.\d+)?|[零一二两三四五六七八九十]+|半)"
_UNIT_CN = r"(?P<unit>个小时|个钟头|小时|钟头|分钟|天|日)"
_UNIT_CN_MINUTES = {"个小时": 60, "个钟头": 60, "小时": 60, "钟头": 60, "分钟": 1, "天": 1440, "日": 1440}
_EARLIER_CN = frozenset({"往前", "向前", "朝前", "往回", "提前", "提早", "早", "前"})
_LATER_CN = frozenset({"往后", "向后", "朝后", "推后", "推迟", "延后", "晚", "后"})
_NUM_EN = r"(?P<num>\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten|twelve|half\s+an?)"
_UNIT_EN = r"(?P<unit>minutes?|mins?|hours?|hrs?|h|days?|d)"
_EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
               "eight": 8, "nine": 9, "ten": 10, "twelve": 12}
_EARLIER_EN = frozenset({"earlier", "before", "back", "backward", "backwards", "previous", "prior"})
_LATER_EN = frozenset({"later", "after", "forward", "forwards", "ahead", "next", "following"})

_SHIFTS = (
    # 「再往前看一小时」「往后两小时」「往回推半天」「再往前看看」
    re.compile(r"再?\s*(?P<dir>往前|向前|朝前|往回|往后|向后|朝后)\s*再?\s*(?:看看|看|查查|查|推|挪|移|翻|找|追溯|回溯)?"
               r"\s*(?:" + _NUM_CN + r"\s*" + _UNIT_CN + r")?"),
    # 「提前一小时」「早半个小时」「推迟两小时」
    re.compile(r"(?P<dir>提前|提早|推后|推迟|延后|早|晚)\s*" + _NUM_CN + r"\s*" + _UNIT_CN),
    # 「前一天」「后一个小时」 (not 「最后一天」「过去一天」「之前一天」)
    re.compile(r"(?<![最过近之以然落背往向朝提])(?P<dir>前|后)\s*(?P<num>一)\s*" + _UNIT_CN),
    # `an hour earlier`, `2 hours later`, `30 minutes back`
    re.compile(r"\b" + _NUM_EN + r"\s*" + _UNIT_EN + r"\s+(?P<dir>earlier|before|back|later|after|forward)\b"),
    # `go back 30 minutes`, `shift the window forward by a day`, `look earlier`
    re.compile(r"\b(?:shift|move|go|look|step|scroll)\s+(?:the\s+window\s+)?"
               r"(?P<dir>back|backwards?|forwards?|earlier|later|ahead)\b"
               r"(?:\s+(?:by\s+)?" + _NUM_EN + r"\s*" + _UNIT_EN + r"\b)?"),
    # `the previous hour`, `the next day`
    re.compile(r"\bthe\s+(?P<dir>previous|prior|next|following)\s+(?P<unit>hour|day)\b"),
    # `the hour before`, `the day after`
    re.compile(r"\bthe\s+(?P<unit>hour|day)\s+(?P<dir>before|after)\b"),
)


@dataclass(frozen=True)
class InheritedContext:
    """The services and window of the session's last planned run (the gateway reads them from
    that run's planner event)."""

    run_id: str
    services: tuple[str, ...] = ()
    window: TimeWindow | None = None


@dataclass(frozen=True)
class WindowShift:
    """A relative shift the question asks for: earlier (-1) or later (+1), by `amount` (None: by
    the window's own length)."""

    direction: int
    amount: timedelta | None
    phrase: str
    start: int  # where the phrase is in the normalized question
    end: int


@dataclass(frozen=True)
class FollowUpReading:
    """What a question takes from the inherited context."""

    from_run_id: str
    # The window to plan over: the inherited one (moved or not) when `window_inherited`, else the
    # one the question names (read without the shift phrase) or the default.
    window: QuestionWindow
    services: list[str] = field(default_factory=list)
    window_inherited: bool = False
    shift: WindowShift | None = None
    shift_seconds: int = 0
    note: str = ""


def normalized(query: str) -> str:
    return unicodedata.normalize("NFKC", query).lower()


def _amount(number: str | None, unit: str | None) -> timedelta | None:
    if number is None or unit is None:
        return None
    number = re.sub(r"\s+", " ", number)
    if number.startswith("half"):
        value: float | None = 0.5
    elif number in _EN_NUMBERS:
        value = float(_EN_NUMBERS[number])
    else:
        value = read_number(number)
    if not value:
        return None
    minutes = _UNIT_CN_MINUTES.get(unit)
    if minutes is None:
        minutes = 1440 if unit.startswith("d") else 60 if unit.startswith("h") else 1
    return min(timedelta(minutes=value * minutes), MAX_SHIFT)


def read_shift(query: str) -> WindowShift | None:
    """The first relative shift the question asks for (see the module docstring), or None."""
    text = normalized(query)
    found: list[WindowShift] = []
    for pattern in _SHIFTS:
        for match in pattern.finditer(text):
            groups = match.groupdict()
            word = groups["dir"]
            direction = -1 if word in _EARLIER_CN or word in _EARLIER_EN else 1
            unit = groups.get("unit")
            number = groups.get("num")
            if unit in ("hour", "day") and number is None:
                number = "one"  # `the previous hour`
            found.append(WindowShift(direction, _amount(number, unit), match.group(0).strip(),
                                     match.start(), match.end()))
            break
    if not found:
        return None
    return min(found, key=lambda shift: (shift.start, -(shift.end - shift.start)))


def _parse(moment: str) -> datetime:
    parsed = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def local_span(start: datetime, end: datetime, now: datetime, zone: tzinfo) -> str:
    """「10:00–11:00」 in the zone; with the date when the window is not today's, or the ends'
    dates when it spans two local days."""
    local_start, local_end = start.astimezone(zone), end.astimezone(zone)
    if local_start.date() != local_end.date():
        return f"{local_start:%m-%d %H:%M}–{local_end:%m-%d %H:%M}"
    day = "" if local_start.date() == now.astimezone(zone).date() else f"{local_start:%m-%d} "
    return f"{day}{local_start:%H:%M}–{local_end:%H:%M}"


def _duration_words(delta: timedelta) -> str:
    minutes = int(abs(delta.total_seconds()) // 60)
    if minutes % 1440 == 0:
        return f"{minutes // 1440} 天"
    if minutes % 60 == 0:
        return f"{minutes // 60} 小时"
    return f"{minutes} 分钟"


def read_follow_up(query: str, now: datetime, zone: tzinfo, inherited: InheritedContext | None,
                   named_services: Sequence[str]) -> FollowUpReading | None:
    """What `query` inherits from `inherited` (the module docstring's rules), or None when nothing."""
    if inherited is None or not inherited.services:
        return None
    now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    text = normalized(query)
    shift = read_shift(text)
    rest = text if shift is None else text[:shift.start] + " " + text[shift.end:]
    own = read_window(rest, now, zone)
    services = [] if named_services else list(inherited.services)
    window = own
    inherit_window = not own.named and inherited.window is not None and (bool(services) or shift is not None)
    moved = timedelta()
    window_note = ""
    if inherit_window and inherited.window is not None:
        start, end = _parse(inherited.window.start), _parse(inherited.window.end)
        how = "inherited"
        if shift is not None:
            moved = shift.direction * (shift.amount or (end - start))
            new_start, new_end = start + moved, end + moved
            if new_start >= now - timedelta(minutes=1):
                window_note = f"「{shift.phrase}」超出当前时间，沿用原窗口"
                moved = timedelta()
            else:
                if new_end > now:
                    new_end, window_note = now, "截至当前时间"
                start, end = new_start, new_end
                how = f"inherited, shifted by {shift.phrase!r}"
        window = QuestionWindow(start, end, how, named=True, note=window_note)
    if not services and not inherit_window:
        return None
    parts: list[str] = []
    if services:
        parts.append("、".join(services))
    if inherit_window:
        span = local_span(window.start, window.end, now, zone)
        if moved and shift is not None:
            parts.append(f"窗口按「{shift.phrase}」{'前' if moved < timedelta() else '后'}移 "
                         f"{_duration_words(moved)}：{span}" + (f"（{window_note}）" if window_note else ""))
        else:
            parts.append(f"窗口 {span}" + (f"（{window_note}）" if window_note else ""))
    note = "沿用上一轮：" + "，".join(parts)
    return FollowUpReading(from_run_id=inherited.run_id, window=window, services=services,
                           window_inherited=inherit_window, shift=shift if moved else None,
                           shift_seconds=int(moved.total_seconds()), note=note)
