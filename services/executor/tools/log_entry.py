"""The shape of one log entry: its first line and its exception lines, and how to keep both when
the entry must be cut to a size cap ("a ref of a multi-line entry keeps its first line
and its exception line").

A multi-line entry (a Java stack trace, a Python traceback) carries its meaning at both ends: the
first line says what failed, the exception lines say why, and the frames between them rarely
matter. Cutting such an entry at the cap from the start keeps the frames and loses the one line
that matters (`OSError: [Errno 28] No space left on device` at the end of a traceback). So an
entry longer than the cap keeps, in their order:

- its first line;
- its exception lines, most important first while they fit: the root cause (the last `Caused
  by:` line, the last line of a Python traceback), then the top-level exception line, then any
  other `Caused by:` / `XxxException: …` / `XxxError: …` line;

each elided run of lines replaced by a line `…`; a kept line is cut (ending in `…`) only when the
cap leaves no room for all of it, the first line before the exception lines. A single line longer
than the cap keeps its head and, when an exception name with its message sits beyond the head (a
JSON line whose `"msg"` comes late), the part from that name on, with `…` between. Nothing here
knows any log format beyond these language-level conventions; text without an exception line is
cut from its start as before. What counts as an exception line is `shared/core/exception_lines.py`'s
(the level reader uses it too).
"""

from __future__ import annotations

from shared.core.exception_lines import entry_lines, exception_line_indexes, exception_offset

ELLIPSIS = "…"
MIN_KEPT_LINE = 40  # a kept line gets at least this much room (or its whole length) when added


def _cut(line: str, cap: int) -> str:
    return line if len(line) <= cap else line[: max(cap - 1, 0)] + ELLIPSIS


def _last_content(lines: list[str]) -> int:
    return max((i for i, line in enumerate(lines) if line.strip()), default=len(lines) - 1)


def _gap_count(lines: list[str], chosen: list[int]) -> int:
    """How many `…` lines the layout of the chosen lines needs."""
    gaps, previous = 0, -1
    for index in sorted(chosen):
        gaps += index > previous + 1
        previous = index
    return gaps + (previous < _last_content(lines))


def _render(lines: list[str], caps: dict[int, int]) -> str:
    out: list[str] = []
    previous = -1
    for index in sorted(caps):
        if index > previous + 1:
            out.append(ELLIPSIS)
        out.append(_cut(lines[index], caps[index]))
        previous = index
    if previous < _last_content(lines):
        out.append(ELLIPSIS)
    return "\n".join(out)


def _skeleton(lines: list[str], chosen: list[int]) -> int:
    """Characters the layout costs besides the kept lines' own text: newlines and `…` lines."""
    gaps = _gap_count(lines, chosen)
    return (len(chosen) + gaps - 1) + gaps * len(ELLIPSIS)


def _room(lines: list[str], chosen: list[int], budget: int) -> dict[int, int]:
    """Room for each chosen line: the exception lines whole when they fit (the root cause cut only
    when it alone is longer than what the first line leaves), the first line the rest."""
    first_reserve = min(len(lines[0]), MIN_KEPT_LINE)
    exceptions = chosen[1:]
    caps = {index: len(lines[index]) for index in exceptions}
    if sum(caps.values()) + first_reserve > budget:
        caps[exceptions[0]] = budget - first_reserve - sum(caps[i] for i in exceptions[1:])
    caps[0] = min(len(lines[0]), budget - sum(caps.values()))
    return caps


def compact_line(line: str, limit: int) -> str:
    """One line within `limit`: its head, and the part from a late exception name on."""
    if len(line) <= limit:
        return line
    offset = exception_offset(line)
    head_room = limit // 2
    if offset <= head_room or limit < 2 * MIN_KEPT_LINE:
        return _cut(line, limit)
    head = line[: head_room - 1] + ELLIPSIS
    return head + _cut(line[offset:], limit - len(head))


def compact_entry(message: str, limit: int) -> str:
    """`message` itself when it fits in `limit` characters; else its first line and its
    exception lines, as the module docstring says. The result never exceeds `limit`."""
    if len(message) <= limit:
        return message
    lines = entry_lines(message)
    if len(lines) == 1:
        return compact_line(message, limit)
    keys = exception_line_indexes(lines)
    if not keys:
        return _cut(message, limit)
    # The root cause is kept if it gets MIN_KEPT_LINE characters; a further exception line only
    # if every exception line kept so far still fits whole (the first line may be cut).
    first_need = min(len(lines[0]), MIN_KEPT_LINE)
    chosen = [0]
    for rank, index in enumerate(keys):
        trial = chosen + [index]
        exception_need = sum(len(lines[i]) for i in trial[1:])
        if rank == 0:
            exception_need = min(len(lines[index]), MIN_KEPT_LINE)
        if _skeleton(lines, trial) + first_need + exception_need > limit:
            break
        chosen = trial
    if len(chosen) == 1:
        return _cut(message, limit)
    caps = _room(lines, chosen, limit - _skeleton(lines, chosen))
    text = _render(lines, caps)
    return text if len(text) <= limit else _cut(text, limit)
