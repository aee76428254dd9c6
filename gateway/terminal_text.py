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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

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
