"""Text for a terminal: every character the CLI writes is printable.

Stored and backend text (log lines, queries, audit fields, server error details) can carry
control characters. Written raw, an escape sequence in a log line can clear the screen and draw
a line of its own (a fake 「可信度：高」), and a bidi override can reorder what a person reads.
`printable` shows each such character as its escape (`\\x1b`, `\\u202e`), so the data stays
readable and nothing in it acts on the terminal.

What is escaped: C0 controls (but the newline and tab of our own layout unless the text must stay
on one line), DEL, C1 controls, the bidi embeddings, overrides, isolates and marks, and the line
and paragraph separators. `TerminalConsole` applies it where rich writes its output, to every
segment of data (rich's own cursor and style codes are not data and stay as they are), and before
rich parses a string, because rich silently drops some controls (CR, BS …) instead of showing
them. `terminal_json` keeps `--json` output valid JSON with the same characters as \\u escapes.

`wrap` fits a line of printable text to a width in display cells (a CJK character takes two). It
breaks at spaces and between CJK characters, never inside an ASCII token (an id, a metric name,
`series[2].points[46]`) or a timestamp (`2026-12-08 06:52:00`, space included), and keeps closing
punctuation and footnote markers with what they follow, opening punctuation with what it opens.
Only a token wider than the whole line is cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.segment import Segment
from rich.text import Text

# Bidi controls: ALM, LRM, RLM, the embeddings and overrides (U+202A-U+202E), the isolates
# (U+2066-U+2069); and the line and paragraph separators, which some terminals act on.
_INVISIBLE = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_LAYOUT_SAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
_ONE_LINE_SAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
# In JSON text, json.dumps already escapes C0; these are the characters it leaves raw.
_JSON_RAW = re.compile(f"[\x7f-\x9f{_INVISIBLE}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with every control character shown as its escape; newlines and tabs are kept
    (our layout) unless `one_line`."""
    return (_ONE_LINE_SAFE if one_line else _LAYOUT_SAFE).sub(_escape, text)


# One unit of wrapping each: a timestamp (with its space), a footnote marker run, a run of narrow
# non-space characters, a single wide character, a run of spaces.
_UNITS = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?"
                    r"|(?:\[\d+\])+|\s+|[\x21-\x7e\u00a0-\u02ff]+|.", re.DOTALL)
_FOOTNOTES = re.compile(r"(?:\[\d+\])+")
# A line never starts with these, and never ends with the opening ones.
_CLOSING = frozenset("，。、；：！？）」』】〉》”’…％,.;:!?)]}%")
_OPENING = frozenset("（「『【〈《“‘([{")


def _words(text: str, room: int) -> list[tuple[str, bool]]:
    """`text` as unbreakable words, each with whether a space came before it. Punctuation glued
    to a unit comes apart again where the whole would not fit in `room` cells."""
    words: list[tuple[list[str], bool]] = []
    spaced = False
    glue_next = False
    for match in _UNITS.finditer(text):
        unit = match.group()
        if unit.isspace():
            spaced = True
            glue_next = False
            continue
        if words and not spaced and (glue_next or unit[0] in _CLOSING or _FOOTNOTES.fullmatch(unit)):
            words[-1][0].append(unit)
        else:
            words.append(([unit], spaced))
        glue_next = unit[-1] in _OPENING
        spaced = False
    out: list[tuple[str, bool]] = []
    for units, before in words:
        whole = "".join(units)
        if cell_len(whole) <= room:
            out.append((whole, before))
        else:
            out += [(unit, before and k == 0) for k, unit in enumerate(units)]
    return out


def _head(word: str, width: int) -> str:
    """The longest start of `word` at most `width` cells wide (at least one character)."""
    size = len(word)
    while size > 1 and cell_len(word[:size]) > width:
        size -= 1
    return word[:size]


def wrap(text: str, width: int | None, first: str = "", rest: str = "") -> list[str]:
    """`text` (one line of printable text) as lines of at most `width` display cells: the first
    prefixed by `first`, the others by `rest` (a hanging indent). `width` None: one line."""
    if width is None:
        return [first + text]
    lines: list[str] = []
    line, used, empty = first, cell_len(first), True
    room = max(width - cell_len(rest), 1)
    for word, spaced in _words(text, room):
        gap = " " if spaced and not empty else ""
        if used + len(gap) + cell_len(word) <= width:
            line, used, empty = line + gap + word, used + len(gap) + cell_len(word), False
            continue
        if cell_len(word) <= room:  # on the next line
            if not empty:
                lines.append(line)
            line, used, empty = rest + word, cell_len(rest) + cell_len(word), False
            continue
        # Wider than any line: cut, beginning on this one.
        line, used = line + gap, used + len(gap)
        while used + cell_len(word) > width:
            piece = _head(word, width - used) if width - used > 0 else ""
            if cell_len(piece) > width - used:
                piece = ""  # not even one character fits here
            line, word = line + piece, word[len(piece):]
            lines.append(line)
            line, used = rest, cell_len(rest)
        line, used, empty = line + word, used + cell_len(word), False
    lines.append(line)
    return [entry.rstrip() for entry in lines]


def clip(text: str, width: int) -> str:
    """`text` cut to `width` display cells, an ellipsis marking the cut."""
    return text if cell_len(text) <= width else set_cell_size(text, max(width - 1, 0)).rstrip() + "…"


def cell(value: object) -> Text:
    """A table cell of data: one line, printable, never markup."""
    return Text(printable(str(value), one_line=True))


def terminal_json(value: Any) -> str:
    """`value` as indented JSON for a person's terminal: valid JSON, the same value, with C1,
    DEL and bidi controls written as \\u escapes like the C0 ones."""
    text = json.dumps(value, ensure_ascii=False, indent=2)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class TerminalConsole(Console):
    """A rich Console that writes only printable data (see the module docstring)."""

    def render_str(self, text: str, **options: Any) -> Text:
        # Before rich reads the string: it would drop CR, BS, BEL, VT and FF without a trace.
        return super().render_str(printable(text), **options)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # The one place rich turns segments into the characters it writes.
        return super()._render_buffer(
            segment if segment.control else Segment(printable(segment.text), segment.style, segment.control)
            for segment in buffer
        )
