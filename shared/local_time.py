"""Times people read: the display step that shows an answer's UTC timestamps
as wall time in the configured zone (`ATTEST_TIME_ZONE`, default Asia/Shanghai) and names it.

Everything before this step works in UTC: tools, evidence texts, claims, every check and the audit's
stored claims, evidence and tool results. Only the answer text that leaves the gateway is rewritten,
once, after all checks have run on the UTC text.

What is rewritten, and how (`LocalTimeDisplay.localize`):
- an ISO-8601 timestamp that carries its offset — `2026-11-30T17:49:00Z`, `2026-11-30T17:49Z`,
  `2026-11-30T17:49:00.250Z`, `2026-11-30T17:49:00+00:00` (any explicit offset: the instant is
  known) — becomes `2026-12-01 01:49:00` in the zone, keeping the precision it was written with
  (minutes, seconds, the fraction's digits);
- in a span `A 至 B` (also 到, ~, -, –, —, to) whose ends fall on the same local date, B loses its
  date: `2026-12-01 01:49:00 至 02:10:00`;
- nothing else: a timestamp without an offset (its zone is unknown), a date alone, versions, ids,
  numbers and durations are left as they are;
- text quoted inside 「…」 is the tool's own text and stays verbatim (a reader may search the logs
  for it); when such a quote holds a time, the zone note says that quoted times are not converted.

`localize_answer` appends the note naming the zone as the answer's last section, only when a time
was rewritten: 【时区】 / `- 时间均为 Asia/Shanghai 时间（UTC+08:00）`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DEFAULT_TIME_ZONE = "Asia/Shanghai"
ZONE_SECTION = "时区"

# An ISO-8601 timestamp with an explicit offset. Not preceded or followed by a word character or
# another piece of a timestamp, so that ids, versions and longer numbers never match.
_TIMESTAMP = re.compile(
    r"(?<![\w.:+])"
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::(?P<second>\d{2})(?P<fraction>\.\d{1,9})?)?"
    r"(?P<offset>Z|[+-]\d{2}:?\d{2})"
    r"(?!\w)(?![.:+]?\d)"
)
# What may stand between the two ends of a span.
_SPAN_SEPARATOR = re.compile(r"\s*(?:至|到|~|～|-|–|—|to)\s*")
# 「…」 quotes tool text verbatim (one line at most: an unclosed quote never swallows the answer).
_QUOTE = re.compile(r"「[^「」\n]*」")
_TIME_OF_DAY = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|(?<!\d)\d{1,2}:\d{2}(?::\d{2})?(?!\d)")


class UnknownTimeZone(ValueError):
    """The configured zone name is not in the tz database."""


def load_zone(name: str) -> tzinfo:
    """The zone named `name` (an IANA name such as Asia/Shanghai, or UTC). Never a silent UTC:
    an unknown name, or no tz database on the host, raises `UnknownTimeZone`."""
    cleaned = (name or "").strip()
    if not cleaned:
        raise UnknownTimeZone("the time zone name is empty; set ATTEST_TIME_ZONE to an IANA name such as Asia/Shanghai")
    try:
        return ZoneInfo(cleaned)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UnknownTimeZone(
            f"unknown time zone {cleaned[:60]!r}: set ATTEST_TIME_ZONE to an IANA name such as Asia/Shanghai "
            "(if the name is right, the host lacks a tz database: install the tzdata package)"
        ) from exc


def utc_offset_label(offset: timedelta | None) -> str:
    """`UTC+08:00`, `UTC-04:00`, `UTC+05:45`."""
    minutes = int((offset or timedelta()).total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"


@dataclass(frozen=True)
class Localized:
    text: str
    rewritten: int  # how many timestamps were shown in the zone
    offsets: tuple[str, ...]  # the zone's UTC offsets at those instants, in order of appearance
    quoted_times: bool  # a 「…」 quote holds a time that was left as written


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    local: datetime
    precision: str  # "minute" | "second"
    fraction: str


class LocalTimeDisplay:
    """Shows UTC timestamps of an answer in one zone; safe to share across threads."""

    def __init__(self, zone_name: str = DEFAULT_TIME_ZONE) -> None:
        self.zone_name = zone_name.strip()
        self.zone = load_zone(self.zone_name)

    # -- one timestamp ---------------------------------------------------------------------------

    def to_local(self, moment: datetime) -> datetime:
        aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        return aware.astimezone(self.zone)

    def format(self, moment: datetime, *, seconds: bool = True) -> str:
        """`2026-12-01 01:49:00` (or `2026-12-01 01:49`) in the zone."""
        local = self.to_local(moment)
        return local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")

    # -- a text ----------------------------------------------------------------------------------

    def _find(self, text: str) -> list[_Found]:
        quoted = [match.span() for match in _QUOTE.finditer(text)]
        found: list[_Found] = []
        for match in _TIMESTAMP.finditer(text):
            if any(start < match.start() < end for start, end in quoted):
                continue
            moment = _parse(match)
            if moment is None:
                continue
            found.append(_Found(match.start(), match.end(), moment.astimezone(self.zone),
                                "second" if match.group("second") else "minute", match.group("fraction") or ""))
        return found

    def localize(self, text: str) -> Localized:
        """`text` with every offset-bearing ISO timestamp outside 「…」 shown in the zone."""
        found = self._find(text)
        parts: list[str] = []
        offsets: list[str] = []
        cursor = 0
        previous: _Found | None = None
        for item in found:
            between = text[cursor:item.start]
            same_day_span = (
                previous is not None and previous.end == cursor
                and _SPAN_SEPARATOR.fullmatch(between) is not None
                and previous.local.date() == item.local.date()
            )
            parts.append(between)
            parts.append(_render(item, with_date=not same_day_span))
            label = utc_offset_label(item.local.utcoffset())
            if label not in offsets:
                offsets.append(label)
            cursor = item.end
            previous = item
        parts.append(text[cursor:])
        quoted_times = any(_TIME_OF_DAY.search(match.group(0)) for match in _QUOTE.finditer(text))
        return Localized("".join(parts), len(found), tuple(offsets), quoted_times)

    def zone_note(self, offsets: tuple[str, ...] = (), quoted_times: bool = False) -> str:
        """The line naming the zone: `时间均为 Asia/Shanghai 时间（UTC+08:00）`."""
        shown = "、".join(offsets) or utc_offset_label(datetime.now(UTC).astimezone(self.zone).utcoffset())
        line = f"时间均为 {self.zone_name} 时间（{shown}）"
        if quoted_times:
            line += "；「」内引用的原文保持原样，其中的时间未换算"
        return line

    def localize_answer(self, answer: str) -> str:
        """The display step: times in the zone, and the zone named at the end (only when a time
        was shown; an answer without times is returned unchanged)."""
        localized = self.localize(answer)
        if not localized.rewritten:
            return answer
        note = self.zone_note(localized.offsets, localized.quoted_times)
        return f"{localized.text.rstrip()}\n\n【{ZONE_SECTION}】\n- {note}"


def _parse(match: re.Match[str]) -> datetime | None:
    offset_text = match.group("offset")
    try:
        if offset_text == "Z":
            offset = UTC
        else:
            sign = 1 if offset_text[0] == "+" else -1
            digits = offset_text[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:])
            if hours > 23 or minutes > 59:
                return None
            offset = timezone(sign * timedelta(hours=hours, minutes=minutes))
        year, month, day = (int(part) for part in match.group("date").split("-"))
        return datetime(year, month, day, int(match.group("hour")), int(match.group("minute")),
                        int(match.group("second") or 0), tzinfo=offset)
    except ValueError:  # 2026-13-40T25:61Z is not a time: leave it as written
        return None


def _render(item: _Found, *, with_date: bool) -> str:
    clock = item.local.strftime("%H:%M:%S" if item.precision == "second" else "%H:%M") + item.fraction
    return f"{item.local.strftime('%Y-%m-%d')} {clock}" if with_date else clock
