"""The level of a log line: from its stream's level label when there is one, else from the line.

Read from the line, in this order (the first that gives a level wins):
1. a JSON object's level field (`level`, `severity`, `lvl`, `loglevel`, `log_level`, `levelname`,
   `level_name`, `severity_text`, `@l`, `log.level` dotted or nested); numeric levels in the pino
   and bunyan scale (10…60);
2. a logfmt level field (`level=error`, `lvl=warn`, `severity="ERROR"` …);
3. a glog/klog header (`E1203 10:00:00.123456 1 file.go:12] …`);
4. a level word in the line's head (its first HEAD_TOKENS whitespace-separated tokens): an upper-
   case word (`2026-… ERROR …`, `… - app - WARNING - …`, `WARNING:root:…`), a bracketed word of any
   case (`[warn]`, `<error>`), or the first word after the timestamp, of any case, ending in `:`
   (`error: …`, `warn: …`, `panic: …`);
5. an exception: an entry holding a Python traceback or an exception line (`…Exception: …`,
   `Caused by: …`, `shared/core/exception_lines.py`) is an ERROR.
A line none of these reads is UNKNOWN, never INFO: its absence from an ERROR search proves nothing.

Names are normalised: WARNING → WARN, ERR/SEVERE → ERROR, FATAL/CRITICAL/CRIT/PANIC/EMERG/ALERT →
FATAL (an error), NOTICE/INFORMATION → INFO, TRACE/FINE/VERBOSE → DEBUG. Nothing here knows a
service, a message or a format beyond these widespread conventions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from shared.core.exception_lines import carries_exception

FATAL, ERROR, WARN, INFO, DEBUG = "FATAL", "ERROR", "WARN", "INFO", "DEBUG"
UNKNOWN = "UNKNOWN"
LEVELS = (FATAL, ERROR, WARN, INFO, DEBUG)
ERROR_LEVELS = frozenset({FATAL, ERROR})
# Levels at which a line is evidence of trouble, with the spellings a result stored before levels
# were normalised may still carry.
BAD_LEVELS = frozenset({FATAL, ERROR, WARN, "CRITICAL", "PANIC", "WARNING"})

# Every spelling a label, a field or a head word may use, by the level it means.
_SPELLINGS: dict[str, tuple[str, ...]] = {
    FATAL: ("fatal", "ftl", "critical", "crit", "panic", "emerg", "emergency", "alert"),
    ERROR: ("error", "err", "eror", "severe", "fail"),
    WARN: ("warn", "warning", "wrn"),
    INFO: ("info", "information", "informational", "notice", "inf"),
    DEBUG: ("debug", "dbug", "dbg", "trace", "trce", "fine", "finer", "finest", "verbose"),
}
_ALIASES = {spelling: level for level, spellings in _SPELLINGS.items() for spelling in spellings}
# Spellings that also occur as ordinary upper-case words in a message: a label or a field may use
# them, a bare word in a line's head is not read as a level.
_NOT_BARE = frozenset({"alert", "fail", "fine", "finer", "finest", "verbose", "notice"})
# pino / bunyan numeric levels.
_NUMERIC = ((60, FATAL), (50, ERROR), (40, WARN), (30, INFO), (10, DEBUG))
_GLOG = {"F": FATAL, "E": ERROR, "W": WARN, "I": INFO}

_JSON_KEYS = ("level", "severity", "lvl", "loglevel", "log_level", "log.level", "levelname", "level_name",
              "severity_text", "severitytext", "@l", "@level")
_LOGFMT = re.compile(
    r"(?:^|\s)(?:level|lvl|severity|loglevel|log_level|log\.level|levelname|level_name)\s*=\s*\"?([A-Za-z]+|\d{2})\b",
    re.IGNORECASE,
)
_GLOG_HEADER = re.compile(r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?\s+\d+\s+\S+:\d+\]")
HEAD_TOKENS = 8
MAX_HEAD_CHARS = 200
_BARE_WORDS = "|".join(sorted((s.upper() for s in _ALIASES if s not in _NOT_BARE), key=len, reverse=True))
_ALL_WORDS = "|".join(sorted(_ALIASES, key=len, reverse=True))
_UPPER_WORD = re.compile(rf"(?<![A-Za-z0-9_.\-])({_BARE_WORDS})(?![A-Za-z0-9_\-])")
_BRACKETED_WORD = re.compile(rf"[\[<(]\s*({_ALL_WORDS})\s*[\]>)]", re.IGNORECASE)
# Tokens of a timestamp or a date (digits with - : / . , T Z +), skipped before a `word:` head.
_STAMP_TOKENS = r"(?:[\d\-:/.,TZ+]*\d[\d\-:/.,TZ+]*\s+)*"
_FIRST_WORD = re.compile(rf"^\s*{_STAMP_TOKENS}({_ALL_WORDS})\s*:", re.IGNORECASE)


def normalise_level(value: object) -> str | None:
    """The level a label or field value names (`warning` → WARN, `crit` → FATAL, 50 → ERROR), or
    None when it names none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _numeric(int(value))
    text = str(value).strip()
    if text.isdigit() and len(text) == 2:
        return _numeric(int(text))
    return _ALIASES.get(text.lower())


def _numeric(value: int) -> str | None:
    if not 10 <= value <= 60:
        return None
    return next(level for floor, level in _NUMERIC if value >= floor)


def level_of(label: str | None, message: str) -> str:
    """The level of one entry: its label's when the label names a level, else its line's."""
    if label:
        named = normalise_level(label)
        if named is not None:
            return named
    return level_of_line(message)


def level_of_line(message: str) -> str:
    """The level the entry's own text states (see the module docstring), or UNKNOWN."""
    first = message.split("\n", 1)[0]
    for reader in (_json_level, _logfmt_level, _glog_level, _head_level):
        found = reader(message if reader is _json_level else first)
        if found is not None:
            return found
    return ERROR if carries_exception(message) else UNKNOWN


def _json_level(message: str) -> str | None:
    text = message.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return _field_level(data) if isinstance(data, dict) else None


def _field_level(data: Mapping[str, object]) -> str | None:
    lowered = {str(key).lower(): value for key, value in data.items()}
    for key in _JSON_KEYS:
        if key in lowered:
            found = normalise_level(lowered[key])
            if found is not None:
                return found
    nested = lowered.get("log")  # Elastic Common Schema: {"log": {"level": "error"}}
    if isinstance(nested, dict):
        return _field_level(nested)
    return None


def _logfmt_level(line: str) -> str | None:
    match = _LOGFMT.search(line)
    return normalise_level(match.group(1)) if match else None


def _glog_level(line: str) -> str | None:
    match = _GLOG_HEADER.match(line)
    return _GLOG[match.group(1)] if match else None


def _head_level(line: str) -> str | None:
    head = " ".join(line.split(None, HEAD_TOKENS)[:HEAD_TOKENS])[:MAX_HEAD_CHARS]
    matches = [m for m in (pattern.search(head) for pattern in (_FIRST_WORD, _BRACKETED_WORD, _UPPER_WORD)) if m]
    if not matches:
        return None
    earliest = min(matches, key=lambda m: m.start(1))  # the head's first level word
    return normalise_level(earliest.group(1))


def spellings(levels: Iterable[str]) -> list[str]:
    """Every spelling of the given levels (lower case), for a case-insensitive label match."""
    wanted = {level.upper() for level in levels}
    return [spelling for spelling, level in _ALIASES.items() if level in wanted]


def line_pattern(levels: Iterable[str] | None = None) -> str:
    """An RE2 (and Python) pattern that every line `level_of_line` reads as one of `levels` (every
    level when None) matches: a prefilter for a backend's line search. It matches more than that
    (a level word inside a message), so the lines it selects are classified afterwards."""
    wanted = {level.upper() for level in levels} if levels is not None else set(LEVELS)
    words = "|".join(sorted(spellings(wanted), key=len, reverse=True))
    glog = "".join(letter for letter, level in _GLOG.items() if level in wanted)
    numbers = "|".join([f"{tens}\\d" for tens in range(1, 6) if _numeric(tens * 10) in wanted]
                       + (["60"] if FATAL in wanted else []))
    parts = [rf"\b(?:{words})\b"]
    if glog:
        parts.append(rf"^[{glog}]\d{{4}} ")
    if numbers:
        parts.append(rf"(?:level|lvl)\W{{1,3}}(?:{numbers})\b")
    if wanted & ERROR_LEVELS:
        parts.append(r"exception|error:|traceback \(most recent call last\)|caused by:")
    return "(?i)" + "|".join(parts)
