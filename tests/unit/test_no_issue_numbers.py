"""No issue numbers of ours in the code, the contracts, the docs or the README: a comment says why
the code is as it is, and the history of a change belongs in its commit.

An issue of another project is a citation and stays: cite it by its address
(`https://github.com/benfred/py-spy/issues/480`) or as `owner/repo#N`, which this check does not
read as ours.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("gateway", "services", "shared", "protos", "docs", "deploy", "demo", ".ci", "README.md", "Makefile",
           "pyproject.toml")
# "issue 22", "Issue 16, point 5", "issues 14 and 15", "issue #4", "issue-15"; not "issues/480" in an
# address, not "issued", not "owner/repo#1234".
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues?[ -]#?\d+")


def issue_numbers(root: Path, scanned: tuple[str, ...] = SCANNED) -> list[str]:
    """`path:line: text` for every line under `scanned` (files or folders of `root`) that names an
    issue by its number. Files that are not UTF-8 text are skipped."""
    found: list[str] = []
    for name in scanned:
        top = root / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            if "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if ISSUE_NUMBER.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_no_issue_numbers_in_code_contracts_or_docs():
    found = issue_numbers(REPO_ROOT)
    assert not found, "say what the issue required instead of its number:\n" + "\n".join(found)


def test_the_check_finds_our_issue_numbers_and_keeps_citations(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "quotas.py").write_text(
        '"""Per-principal quotas (issue 20, point 3)."""\n'
        "# Issue 16, point 5: tools with no source configured.\n"
        "# The rule of issues 14 and 15.\n"
        "# issue-22 rules\n"
        "# A token this server issued for the run; see benfred/py-spy#480.\n"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "performance.md").write_text(
        "[a known py-spy limitation](https://github.com/benfred/py-spy/issues/480)\n"
        "As issue #7 asked, the direct answer comes first.\n"
    )
    (tmp_path / "docs" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe issue 3")
    found = issue_numbers(tmp_path, ("shared", "docs", "README.md"))
    assert [entry.split(": ", 1)[0] for entry in found] == [
        "shared/quotas.py:1", "shared/quotas.py:2", "shared/quotas.py:3", "shared/quotas.py:4", "docs/performance.md:2",
    ]
