"""The error reasons are a contract (issue 22, point 5): the README's table names each reason in
`shared.errors.Reason` exactly once, and nothing else; every value is UPPER_SNAKE and its name."""

from __future__ import annotations

import re
from pathlib import Path

from shared.errors import Reason

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_lists_every_reason_once() -> None:
    rows = re.findall(r"^\| `([A-Z_]+)` \| [A-Z_]+ \|", README.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sorted(rows) == sorted(reason.value for reason in Reason)


def test_reasons_are_upper_snake_and_stable() -> None:
    for reason in Reason:
        assert reason.name == reason.value
        assert re.fullmatch(r"[A-Z][A-Z0-9_]{0,62}", reason.value)
