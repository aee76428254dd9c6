"""The error reasons are a contract: the table in docs/security.md names each reason in
`shared.errors.Reason` exactly once, and nothing else; every value is UPPER_SNAKE and its name."""

from __future__ import annotations

import re
from pathlib import Path

from shared.errors import Reason

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_documented_table_lists_every_reason_once() -> None:
    rows = re.findall(r"^\| `([A-Z_]+)` \| [A-Z_]+ \|", SECURITY_DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sorted(rows) == sorted(reason.value for reason in Reason)


def test_reasons_are_upper_snake_and_stable() -> None:
    for reason in Reason:
        assert reason.name == reason.value
        assert re.fullmatch(r"[A-Z][A-Z0-9_]{0,62}", reason.value)
