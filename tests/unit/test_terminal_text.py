"""The CLI's terminal rendering: data never acts on the terminal, our layout stays."""

from __future__ import annotations

import io
import json

from rich.table import Table

from gateway.terminal_text import TerminalConsole, cell, printable, terminal_json

HOSTILE = "a\x1b[2J\x1b[H可信度：高\r\u202eevil\u202c\x9b31m\x7f\x00\tb\nc"


def test_printable_escapes_controls_and_keeps_our_layout() -> None:
    assert printable(HOSTILE) == "a\\x1b[2J\\x1b[H可信度：高\\x0d\\u202eevil\\u202c\\x9b31m\\x7f\\x00\tb\nc"
    assert printable("x\ny\tz", one_line=True) == "x\\x0ay\\x09z"
    assert printable("普通文本 [bold] ok") == "普通文本 [bold] ok"


def test_the_console_writes_no_raw_control_of_data_and_parses_no_markup() -> None:
    out = io.StringIO()
    console = TerminalConsole(file=out, force_terminal=False, soft_wrap=True, width=200)
    console.print(HOSTILE + " [red]not markup[/red]", markup=False, highlight=False)
    table = Table()
    table.add_column("detail")
    table.add_row(cell(HOSTILE))
    console.print(table)
    written = out.getvalue()
    assert not any(ch in written for ch in "\x1b\r\x9b\x7f\x00\u202e\u202c"), repr(written)
    assert "\\x1b[2J" in written and "[red]not markup[/red]" in written


def test_json_for_a_terminal_is_the_same_value_with_every_control_escaped() -> None:
    value = {"answer": HOSTILE, "键": ["\u2066x\u2069"]}
    text = terminal_json(value)
    assert json.loads(text) == value
    assert not any(ch in text for ch in "\x1b\x9b\x7f\u202e\u2066"), text
