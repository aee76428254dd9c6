"""Times a sentence names, as instants or clock readings, with their time zone.

A quantity is bound to a time only when its clause names one (`value_binding.py`). Times are
compared as instants: `2026-11-30T18:02:00Z`, `2026-11-30 18:02`, `18:02` and `02:02（北京时间）`
are read in the zone the sentence states (`Z`/`UTC`/`+08:00`/`北京时间`/`CST`…) and otherwise in
UTC, the zone every tool writes its timestamps in. A clock reading without a date matches any
instant with that hour and minute in its zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_DATETIME = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})(?:[tT ](?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:\.\d+)?)?)?"
    r"(?P<zone>\s?(?:[zZ](?![A-Za-z])|[+-]\d{2}:?\d{2}|utc(?:[+-]\d{1,2})?))?",
    re.IGNORECASE,
)
_CLOCK = re.compile(
    r"(?<![\d:.])(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?(?![\d:])"
    r"(?P<zone>\s?(?:[zZ](?![A-Za-z])|[+-]\d{2}:?\d{2}|utc(?:[+-]\d{1,2})?))?",
    re.IGNORECASE,
)
# Zone words that may follow a time (often in brackets): name -> offset in hours.
ZONE_WORDS: dict[str, int] = {
    "北京时间": 8, "东八区": 8, "cst": 8, "utc+8": 8, "gmt+8": 8, "asia/shanghai": 8,
    "utc": 0, "gmt": 0, "协调世界时": 0,
}
_ZONE_WORD = re.compile(
    r"^[\s（(]{0,3}(" + "|".join(re.escape(w) for w in sorted(ZONE_WORDS, key=len, reverse=True)) + r")",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class NamedTime:
    """A time a sentence names: an instant (with a date) or a clock reading, in UTC."""

    span: tuple[int, int]
    instant: datetime | None  # UTC, when the sentence gave a date
    clock: tuple[int, int] | None  # (hour, minute) in UTC, when it gave only a clock reading
    second: int | None = None

    def matches(self, iso: str) -> bool:
        """Whether the ISO-8601 instant `iso` (as the tools write it) is this time."""
        moment = parse_iso(iso)
        if moment is None:
            return False
        if self.instant is not None:
            if self.second is None:
                return moment.replace(second=0, microsecond=0) == self.instant.replace(second=0, microsecond=0)
            return moment.replace(microsecond=0) == self.instant.replace(microsecond=0)
        assert self.clock is not None
        return (moment.hour, moment.minute) == self.clock and (self.second is None or moment.second == self.second)


def parse_iso(iso: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(iso.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _offset(zone: str | None, after: str) -> timedelta:
    """The UTC offset a time is written in: its own suffix, else a zone word right after it."""
    if zone:
        zone = zone.strip().lower()
        if zone == "z" or zone == "utc":
            return timedelta(0)
        if zone.startswith("utc"):
            return timedelta(hours=int(zone[3:]))
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        return sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
    word = _ZONE_WORD.match(after)
    if word:
        return timedelta(hours=ZONE_WORDS[word.group(1).lower()])
    return timedelta(0)


def named_times(text: str) -> list[NamedTime]:
    """Every date-time and clock reading in `text`, converted to UTC."""
    found: list[NamedTime] = []
    taken: list[tuple[int, int]] = []
    for match in _DATETIME.finditer(text):
        taken.append(match.span())
        offset = _offset(match.group("zone"), text[match.end():match.end() + 12])
        date = datetime.fromisoformat(match.group("date"))
        if match.group("h") is None:
            continue  # a date alone binds no value to an instant
        hour, minute = int(match.group("h")), int(match.group("m"))
        if hour > 23 or minute > 59:
            continue
        second = int(match.group("s")) if match.group("s") else None
        local = date.replace(hour=hour, minute=minute, second=second or 0, tzinfo=UTC)
        found.append(NamedTime(match.span(), local - offset, None, second))
    for match in _CLOCK.finditer(text):
        if any(start <= match.start() < end for start, end in taken):
            continue
        hour, minute = int(match.group("h")), int(match.group("m"))
        if hour > 23 or minute > 59:
            continue
        offset = _offset(match.group("zone"), text[match.end():match.end() + 12])
        shifted = datetime(2000, 1, 2, hour, minute, tzinfo=UTC) - offset
        second = int(match.group("s")) if match.group("s") else None
        found.append(NamedTime(match.span(), None, (shifted.hour, shifted.minute), second))
    return sorted(found, key=lambda t: t.span)
