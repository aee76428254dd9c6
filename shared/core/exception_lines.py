"""Where an exception sits in a log entry: its exception lines (a Java `Caused by:`, a Python
traceback's last line, any `XxxException: …` / `XxxError: …` line) and an exception named inside
a single line. Only language-level conventions, never a log format or a service: the executor's
entry compaction keeps these lines when it cuts an entry, and the level reader takes an entry
carrying one as an error."""

from __future__ import annotations

import re

# A class name ending in Exception/Error (optionally package-qualified), as it starts an
# exception line: `java.lang.IllegalStateException: …`, `OSError: …`, `Error: ENOSPC …`, or a bare
# `KeyError` on a line of its own. Case-sensitive: `ERROR` and `error` are levels, not classes.
_EXCEPTION_NAME = r"(?:[A-Za-z_$][\w$]*\.)*[\w$]*(?:Exception|Error)\b"
_EXCEPTION_LINE = re.compile(rf"^(?:Caused by:|Exception in thread\b|{_EXCEPTION_NAME}(?:\s*:|\s*$))")
# The same inside a line (a JSON or logfmt line that carries the exception in a field).
_EXCEPTION_IN_LINE = re.compile(rf"(?<![\w$.])(?:Caused by:|{_EXCEPTION_NAME}:)")
_TRACEBACK_HEADER = re.compile(r"^\s*Traceback \(most recent call last\):")
# A traceback header inside a line (a JSON field holding the whole traceback, its newlines escaped).
_TRACEBACK_IN_LINE = re.compile(r"Traceback \(most recent call last\):")


def entry_lines(message: str) -> list[str]:
    """The lines of an entry (`\\n`, with a `\\r` before it dropped); other separators that
    `str.splitlines` knows (U+2028, \\x85 …) are text inside a line."""
    return [line[:-1] if line.endswith("\r") else line for line in message.split("\n")]


def exception_line_indexes(lines: list[str]) -> list[int]:
    """Indexes of the entry's exception lines (never the first line), most important first: the
    root cause, then the top-level exception, then the others in order."""
    found: list[int] = []
    in_traceback = False
    for index, line in enumerate(lines):
        if _TRACEBACK_HEADER.match(line):
            in_traceback = True
            continue
        stripped = line.strip()
        if not stripped:
            continue
        if in_traceback and not line[:1].isspace():
            # The first unindented line after a Python traceback's frames is its exception line,
            # whatever the exception's name (`KeyboardInterrupt`, `psycopg2.OperationalError: …`).
            in_traceback = False
            if index > 0:
                found.append(index)
            continue
        if index > 0 and _EXCEPTION_LINE.match(stripped):
            found.append(index)
    if not found:
        return []
    caused_by = [i for i in found if lines[i].strip().startswith("Caused by:")]
    root = caused_by[-1] if caused_by else found[-1]
    order = [root] + [i for i in found if i != root]
    return list(dict.fromkeys(order))


def exception_offset(line: str) -> int:
    """Where in a single line an exception name with its message starts, or -1."""
    match = _EXCEPTION_IN_LINE.search(line)
    return match.start() if match else -1


def carries_exception(message: str) -> bool:
    """Whether an entry holds a Python traceback or an exception line, on any of its lines (the
    first included) or inside a line (a JSON or logfmt field)."""
    for line in entry_lines(message):
        if _TRACEBACK_IN_LINE.search(line) or _EXCEPTION_LINE.match(line.strip()) or exception_offset(line) >= 0:
            return True
    return False
