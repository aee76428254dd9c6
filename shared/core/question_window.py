"""The time window a question names, read in the user's zone and handed to tools in UTC
("the planner accepts absolute windows and relative ones in that zone").

What is read, most specific first:
1. A clock time, alone or as a range, with an optional day: 「10:00 到 10:30」, 「10点到10点半」,
   「今天上午9点到10点」, 「昨天下午三点」, 「11月29日 14:00-15:00」, 「2026-11-30 10:00 至 11:00」,
   `from 10:00 to 10:30`, `yesterday 3pm`. Days: 今天/今日/today, 昨天/昨日/yesterday, 前天,
   今早/今晚/昨晚, days ahead 明天/明日/tomorrow/明早/明晚/后天 (read to be recognised as the
   future), `M月D日`, `YYYY-MM-DD`, `YYYY/MM/DD`, `YYYY年M月D日`. Periods (上午, 下午,
   晚上 …) and am/pm make a 12-hour clock a 24-hour one; a range's second end inherits the first
   end's day and period (「下午3点到4点」 is 15:00-16:00).
   A bare 「三点」/「3点」 is read as a clock time only with a period, a day, a minute part (半, 一刻,
   15分), 钟/整/左右/前后, or as an end of a range, so that 「慢了一点」 is not one o'clock.
2. A relative duration ending now: 最近一小时, 过去 30 分钟, 半小时内, last 15 minutes.
3. A day alone: 今天 = local midnight to now, 昨天/前天/a date = that local day; with a period,
   that part of the day (昨天下午 = 12:00-18:00).
4. 刚才 = the last 30 minutes; otherwise the hour ending now (`default`). A day ahead named alone
   in a question about now (现在, 目前 …) is context, not the window.

Decisions (documented in the README's "Time zones" section):
- A point in time becomes the window POINT_HALF_WIDTH either side of it (「昨天下午三点」 =
  14:30-15:30): an incident "at three" is rarely exactly at three.
- A clock time without a day is its most recent occurrence: when the time (a range's start) is
  still ahead today, it is yesterday's (「23:00 到 23:30」 asked at 00:20 means last night).
- A range whose end is not after its start: a 12-hour clock end without its own period moves to
  the afternoon when that makes a span of at most 12 hours (「11点到1点」 = 11:00-13:00); otherwise
  a span across midnight of at most 12 hours (「23:30 到 00:30」); otherwise the ends were written
  the wrong way round and are swapped (「11:00 到 10:00」 = 10:00-11:00).
- A window that ends after now is cut at now. One that lies wholly in the future (「明天晚上8点到
  9点」, 「今天 23:00」 asked at 10:00, a future date) cannot be checked: it is returned as asked
  with `future` set, and the run ends in MISSING_REQUIRED_CONTEXT naming it before any tool call
  (never silently replaced by the last hour, which would answer a question nobody asked).
- A window longer than MAX_WINDOW keeps its most recent MAX_WINDOW.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo

DEFAULT_WINDOW = timedelta(minutes=60)
MAX_WINDOW = timedelta(hours=24)
MIN_RELATIVE_WINDOW = timedelta(minutes=5)
POINT_HALF_WIDTH = timedelta(minutes=30)
JUST_NOW = timedelta(minutes=30)
# The longest span a reversed range is read as the afternoon or as crossing midnight.
LONGEST_WRAPPED_SPAN = timedelta(hours=12)

_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CN_NUMBER = "[零〇一二两三四五六七八九十]+"
_NUMBER = r"(\d+|[零一二两三四五六七八九十]+|半)"
_UNIT_MINUTES = {
    "分钟": 1, "分": 1, "min": 1, "mins": 1, "minute": 1, "minutes": 1, "m": 1,
    "小时": 60, "个小时": 60, "钟头": 60, "个钟头": 60, "h": 60, "hr": 60, "hrs": 60, "hour": 60, "hours": 60,
    "天": 1440, "d": 1440, "day": 1440, "days": 1440,
}
_RELATIVE_CN = re.compile(
    r"(?:过去|最近|近|前)\s*的?\s*" + _NUMBER
    + r"\s*(个小时|个钟头|小时|钟头|分钟|分|天|hours?|hrs?|h|minutes?|mins?|m|days?|d)(?![a-z])"
)
_RELATIVE_EN = re.compile(r"\b(?:last|past|previous|recent)\s+(\d+)?\s*(minutes?|mins?|m|hours?|hrs?|h|days?|d)\b")
_RELATIVE_CN_BARE = re.compile(_NUMBER + r"\s*(个小时|个钟头|小时|钟头|分钟)(?:内|以内|之内|里)")
_HALF_HOUR = re.compile(r"半\s*个?\s*(?:小时|钟头)")
_JUST_NOW = re.compile(r"刚才|刚刚|just now")
# The question asks about the present: a day ahead named alone (「明天要发布，现在正常吗」) is context.
_PRESENT = re.compile(r"现在|目前|当前|此刻|眼下|\bnow\b|\bcurrently\b|\bright now\b")

# --- absolute expressions ------------------------------------------------------------------------

_DAY_WORDS = {
    "今天": 0, "今日": 0, "today": 0, "今早": 0, "今晨": 0, "今晚": 0, "今夜": 0,
    "昨天": 1, "昨日": 1, "yesterday": 1, "昨晚": 1, "昨夜": 1,
    "前天": 2,
    # Days ahead: read so that a question about them is recognised as one about the future.
    "明天": -1, "明日": -1, "tomorrow": -1, "明早": -1, "明晚": -1, "后天": -2,
}
# Day words that also name a part of the day.
_DAY_WORD_PERIODS = {"今早": "早上", "今晨": "早上", "今晚": "晚上", "今夜": "晚上", "昨晚": "晚上", "昨夜": "晚上",
                     "明早": "早上", "明晚": "晚上"}
# Parts of the day: whether a 12-hour clock in them is afternoon, and the span they name alone.
_PERIODS: dict[str, tuple[bool, int, int]] = {
    "凌晨": (False, 0, 6), "半夜": (False, 0, 3), "清晨": (False, 5, 9), "早上": (False, 6, 9), "早晨": (False, 6, 9),
    "上午": (False, 6, 12), "中午": (False, 11, 13), "午后": (True, 12, 18), "下午": (True, 12, 18),
    "傍晚": (True, 17, 19), "晚上": (True, 18, 24), "夜里": (True, 18, 24), "夜间": (True, 18, 24),
}
_DAY = (
    r"(?P<{p}day>今天|今日|today|今早|今晨|今晚|今夜|昨天|昨日|yesterday|昨晚|昨夜|前天|明天|明日|tomorrow|明早|明晚|后天"
    r"|(?P<{p}y>\d{{4}})[-/](?P<{p}mo>\d{{1,2}})[-/](?P<{p}d>\d{{1,2}})"
    r"|(?:(?P<{p}y2>\d{{4}})\s*年\s*)?(?P<{p}mo2>\d{{1,2}})\s*月\s*(?P<{p}d2>\d{{1,2}})\s*[日号]?)"
)
_PERIOD = r"(?P<{p}period>" + "|".join(sorted(_PERIODS, key=len, reverse=True)) + ")"
_CLOCK = (
    r"(?:"
    # 10:00, 10:00:30, 3:30pm
    # (an ISO offset only right after seconds, or z: 「14:00-15:00」 is a range, not an offset)
    r"(?<![\d:.])(?P<{p}hh>[01]?\d|2[0-4]):(?P<{p}mm>[0-5]\d)"
    r"(?::(?P<{p}ss>[0-5]\d)(?:\.\d+)?(?P<{p}tz>[+-]\d{{2}}:?\d{{2}}(?![\d:]))?)?(?![\d:])"
    r"(?:(?P<{p}z>z)(?![a-z0-9_])|\s*(?P<{p}ampm>am|pm|a\.m\.|p\.m\.))?"
    # 3pm, 10 am
    r"|(?<![\d:.])(?P<{p}eh>1[0-2]|0?\d)\s*(?P<{p}eampm>am|pm|a\.m\.|p\.m\.)(?![a-z])"
    # 10点, 十点半, 3点15分, 10点15, 10时30分
    r"|(?<![\d.])(?P<{p}ch>\d{{1,2}}|" + _CN_NUMBER + r")\s*(?:点|时)"
    r"(?P<{p}cmin>\s*(?:半|一刻|三刻|(?:\d{{1,2}}|" + _CN_NUMBER + r")\s*分|\d{{2}}(?!\d)))?"
    r"(?P<{p}cclue>\s*(?:钟|整|左右|前后))?"
    r")"
)


def _point(prefix: str) -> str:
    return (r"(?:" + _DAY.format(p=prefix) + r"(?:t|\s*(?:的\s*)?))?(?:" + _PERIOD.format(p=prefix) + r"\s*)?"
            r"(?:at\s+)?" + _CLOCK.format(p=prefix))


_SEPARATOR = r"\s*(?:到|至|~|～|-|–|—|\bto\b|\band\b)\s*"
_ABSOLUTE = re.compile(_point("a") + r"(?:" + _SEPARATOR + _point("b") + r")?")
_DAY_ALONE = re.compile(_DAY.format(p="a") + r"\s*(?:的\s*)?(?:" + _PERIOD.format(p="a") + r")?")


@dataclass(frozen=True)
class QuestionWindow:
    start: datetime  # UTC
    end: datetime  # UTC
    how: str  # the phrase read, or "default"
    # The question named the window (any phrase), so that a model's plan must follow it.
    named: bool = False
    # Why the window differs from what the phrase literally says (cut at now, the most recent …).
    note: str = ""
    # The window lies wholly after now: nothing can be checked in it (`start`/`end` as asked).
    future: bool = False


@dataclass
class _Clock:
    day: date | None  # explicit (a day word or a date)
    day_explicit_year: bool
    period: str | None
    hour: int
    minute: int
    second: int
    twelve_hour: bool  # a 点 clock or 1-12 without its own period or am/pm
    has_context: bool  # enough context to be a clock time when alone
    offset: tzinfo | None = None  # an ISO time's own offset (`10:00z`, `10:00+08:00`)


def _cn_number(text: str) -> float | None:
    if text.isdigit():
        return float(text)
    if text == "半":
        return 0.5
    if "十" in text:
        tens, _, ones = text.partition("十")
        if (tens and tens not in _CN_DIGITS) or (ones and ones not in _CN_DIGITS):
            return None
        return float((_CN_DIGITS[tens] if tens else 1) * 10 + (_CN_DIGITS[ones] if ones else 0))
    if text and all(ch in _CN_DIGITS for ch in text):
        return float(int("".join(str(_CN_DIGITS[ch]) for ch in text)))
    return None


def read_number(text: str) -> float | None:
    """A count written in digits or Chinese numerals (「两」「十五」), or 半 (0.5); None otherwise."""
    return _cn_number(text)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _day_of(match: re.Match[str], p: str, today: date) -> tuple[date | None, bool, str | None]:
    """(the day named, whether its year was written, the period a day word implies)."""
    word = match.group(f"{p}day")
    if word is None:
        return None, False, None
    lowered = word.lower()
    if lowered in _DAY_WORDS:
        return today - timedelta(days=_DAY_WORDS[lowered]), False, _DAY_WORD_PERIODS.get(lowered)
    year = match.group(f"{p}y") or match.group(f"{p}y2")
    month = int(match.group(f"{p}mo") or match.group(f"{p}mo2"))
    day = int(match.group(f"{p}d") or match.group(f"{p}d2"))
    try:
        named = date(int(year) if year else today.year, month, day)
    except ValueError:
        raise _NotATime() from None
    if not year and named > today:  # 「12月5日」 asked on 11-30 is last year's
        try:
            named = named.replace(year=named.year - 1)
        except ValueError:
            raise _NotATime() from None
    return named, bool(year), None


class _NotATime(ValueError):
    pass


def _safe_day(match: re.Match[str], today: date) -> date | None:
    try:
        return _day_of(match, "a", today)[0]
    except _NotATime:
        return None


def _clock_of(match: re.Match[str], p: str, today: date) -> _Clock:
    day, explicit_year, implied_period = _day_of(match, p, today)
    period = match.group(f"{p}period") or implied_period
    ampm = (match.group(f"{p}ampm") or match.group(f"{p}eampm") or "").replace(".", "").lower()
    second = 0
    if match.group(f"{p}hh") is not None:
        hour, minute = int(match.group(f"{p}hh")), int(match.group(f"{p}mm"))
        second = int(match.group(f"{p}ss") or 0)
        twelve_hour = bool(ampm) or (period is not None and hour <= 12)
        has_context = True
        offset = _offset(match.group(f"{p}tz") or match.group(f"{p}z"))
    elif match.group(f"{p}eh") is not None:
        hour, minute, twelve_hour, has_context = int(match.group(f"{p}eh")), 0, True, True
        offset = None
    else:
        offset = None
        value = _cn_number(match.group(f"{p}ch"))
        if value is None or value != int(value):
            raise _NotATime()
        hour = int(value)
        minute = _minutes(match.group(f"{p}cmin"))
        twelve_hour = hour <= 12
        has_context = bool(day or period or match.group(f"{p}cmin") or match.group(f"{p}cclue"))
    if hour > 24 or minute > 59 or (hour == 24 and (minute or second)):
        raise _NotATime()
    if ampm:
        if hour > 12 or hour == 0:
            raise _NotATime()
        hour = hour % 12 + (12 if ampm == "pm" else 0)
        twelve_hour = False
    elif period is not None and twelve_hour:
        afternoon = _PERIODS[period][0]
        if afternoon and hour < 12:
            hour += 12
        elif period == "中午" and hour < 3:
            hour += 12  # 中午一点 is 13:00
        elif period in ("凌晨", "半夜") and hour == 12:
            hour = 0
        twelve_hour = False
    return _Clock(day, explicit_year, period, hour, minute, second, twelve_hour, has_context, offset)


def _offset(text: str | None) -> tzinfo | None:
    if not text:
        return None
    if text == "z":
        return UTC
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise _NotATime()
    return timezone((1 if text[0] == "+" else -1) * timedelta(hours=hours, minutes=minutes))


def _minutes(text: str | None) -> int:
    if not text:
        return 0
    text = text.strip()
    if text == "半":
        return 30
    if text == "一刻":
        return 15
    if text == "三刻":
        return 45
    value = _cn_number(text.rstrip("分").strip())
    if value is None or value != int(value):
        raise _NotATime()
    return int(value)


def _at(day: date, clock: _Clock, zone: tzinfo) -> datetime:
    extra = timedelta(days=1) if clock.hour == 24 else timedelta()
    wall = datetime.combine(day, time(clock.hour % 24, clock.minute, clock.second)) + extra
    return wall.replace(tzinfo=clock.offset or zone).astimezone(UTC)


def _absolute(query: str, now: datetime, zone: tzinfo) -> QuestionWindow | None:
    today = now.astimezone(zone).date()
    for match in _ABSOLUTE.finditer(query):
        try:
            first = _clock_of(match, "a", today)
            second = _clock_of(match, "b", today) if match.group("bhh") or match.group("beh") or match.group("bch") else None
        except _NotATime:
            continue
        if second is None and not first.has_context:
            continue
        if first.day is None:
            # 「昨天 a-svc 在 10点到11点」, `from 10:00 to 10:30 yesterday`: the day named elsewhere.
            rest = query[:match.start()] + " " + query[match.end():]
            days = {d for m in _DAY_ALONE.finditer(rest) if (d := _safe_day(m, today)) is not None}
            if len(days) == 1:
                first.day = days.pop()
        return _resolve(first, second, match.group(0).strip(), now, zone, today)
    return None


def _resolve(first: _Clock, second: _Clock | None, phrase: str, now: datetime, zone: tzinfo,
             today: date) -> QuestionWindow:
    day_given = first.day is not None
    day = first.day or today
    start = _at(day, first, zone)
    if second is None:
        if not day_given and start > now:  # the most recent occurrence of that time
            start = _at(day - timedelta(days=1), first, zone)
        return _finish(start - POINT_HALF_WIDTH, start + POINT_HALF_WIDTH, phrase, now,
                       note=f"a point in time: {int(POINT_HALF_WIDTH.total_seconds() // 60)} minutes either side")
    if second.period is None and first.period is not None and second.twelve_hour:
        # 「下午3点到4点」: the second end is in the first end's part of the day.
        second = _clock_of_period(second, first.period)
    end_day = second.day or day
    end = _at(end_day, second, zone)
    notes = []
    if end <= start and second.day is None:
        afternoon = end + timedelta(hours=12)
        if second.twelve_hour and second.hour < 12 and start < afternoon and afternoon - start <= LONGEST_WRAPPED_SPAN:
            end = afternoon
            notes.append("the end read as afternoon")
        elif start < end + timedelta(days=1) and end + timedelta(days=1) - start <= LONGEST_WRAPPED_SPAN:
            end += timedelta(days=1)
            notes.append("the range crosses midnight")
    if end <= start:
        start, end = end, start
        notes.append("the ends were written the wrong way round")
    if end == start:
        end = start + timedelta(minutes=1)
    if not day_given and second.day is None and start > now:  # the most recent occurrence
        start, end = start - timedelta(days=1), end - timedelta(days=1)
    return _finish(start, end, phrase, now, note="; ".join(notes))


def _clock_of_period(clock: _Clock, period: str) -> _Clock:
    hour = clock.hour
    if _PERIODS[period][0] and hour < 12:
        hour += 12
    elif period == "中午" and hour < 3:
        hour += 12
    return _Clock(clock.day, clock.day_explicit_year, period, hour, clock.minute, clock.second, False, True,
                  clock.offset)


def _finish(start: datetime, end: datetime, phrase: str, now: datetime, note: str = "") -> QuestionWindow:
    notes = [note] if note else []
    if start >= now:
        # Wholly in the future: nothing can be checked there, and no other window stands in for it.
        return QuestionWindow(start, end, phrase, named=True, future=True, note="wholly in the future")
    if end > now:
        end = now
        notes.append("cut at now")
    if end - start > MAX_WINDOW:
        start = end - MAX_WINDOW
        notes.append(f"the most recent {int(MAX_WINDOW.total_seconds() // 3600)} hours")
    return QuestionWindow(start, end, phrase, named=True, note="; ".join(notes))


def _day_alone(query: str, now: datetime, zone: tzinfo) -> QuestionWindow | None:
    local_now = now.astimezone(zone)
    today = local_now.date()
    for match in _DAY_ALONE.finditer(query):
        try:
            day, _, implied = _day_of(match, "a", today)
        except _NotATime:
            continue
        if day is None:
            continue
        period = match.group("aperiod") or implied
        if period is None:
            first_hour, last_hour = 0, 24
        else:
            _, first_hour, last_hour = _PERIODS[period]
        start = datetime.combine(day, time(first_hour)).replace(tzinfo=zone).astimezone(UTC)
        end = (datetime.combine(day, time(0)) + timedelta(hours=last_hour)).replace(tzinfo=zone).astimezone(UTC)
        return _finish(start, end, match.group(0).strip(), now)
    return None


def _relative(lowered: str, now: datetime) -> QuestionWindow | None:
    if match := _HALF_HOUR.search(lowered):
        return QuestionWindow(now - timedelta(minutes=30), now, match.group(0), named=True)
    for pattern in (_RELATIVE_CN, _RELATIVE_CN_BARE):
        match = pattern.search(lowered)
        if match:
            amount = _cn_number(match.group(1))
            if amount:
                return QuestionWindow(now - _bounded(amount, match.group(2)), now, match.group(0), named=True)
    match = _RELATIVE_EN.search(lowered)
    if match:
        amount = float(match.group(1)) if match.group(1) else 1.0
        return QuestionWindow(now - _bounded(amount, match.group(2)), now, match.group(0), named=True)
    return None


def _bounded(amount: float, unit: str) -> timedelta:
    minutes = amount * _UNIT_MINUTES.get(unit, _UNIT_MINUTES.get(unit.rstrip("s"), 1))
    return max(MIN_RELATIVE_WINDOW, min(timedelta(minutes=minutes), MAX_WINDOW))


def read_window(query: str, now: datetime, zone: tzinfo) -> QuestionWindow:
    """The window `query` names, in `zone`; `now` is any aware instant. See the module docstring."""
    now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    lowered = unicodedata.normalize("NFKC", query).lower()
    readers: tuple[Callable[[], QuestionWindow | None], ...] = (
        lambda: _absolute(lowered, now, zone), lambda: _relative(lowered, now), lambda: _day_alone(lowered, now, zone))
    for reader in readers:
        window = reader()
        if window is not None and window.future and reader is readers[2] and _PRESENT.search(lowered):
            break  # a day ahead named alone, in a question about now: the hour ending now
        if window is not None:
            return window
    if match := _JUST_NOW.search(lowered):
        return QuestionWindow(now - JUST_NOW, now, match.group(0), named=True)
    return QuestionWindow(now - DEFAULT_WINDOW, now, "default")
