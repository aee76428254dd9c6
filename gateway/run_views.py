"""GetRun's views of a persisted run: the whole audit (as always), a bounded
summary, or the audit in pages small enough for any client's message limit.

A page carries the run's columns, the next events and then the next invocations (each exactly
once across the pages, in order), and on the first page the run's self_evaluation. A page holds at
most `page_size` items and stops early rather than pass `max_page_bytes` (measured as JSON,
close to the Struct's encoded size); it always holds at least one item when one is left. The page
token names the run and the last event and invocation already returned, so pages follow each
other by key (items appended to a running run meanwhile come later, never twice).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.page_tokens import decode_token, encode_token
from shared.db.run_store import RunStore
from shared.errors import InvalidInput, Reason

FETCH_CHUNK = 32
MAX_SUMMARY_TOOLS = 50
MAX_SUMMARY_REASON_CHARS = 500
# The scalar counts of rule_evaluation a summary keeps (its per-tool tables stay in the full view).
_RULE_COUNTS = ("evidence_calls", "hits", "no_hits", "failures", "deduped", "helper_calls", "evidence_refs",
                "has_evidence")
_VERDICT_FIELDS = ("verifier_status", "model_verdict", "effective_verdict", "verdict_ceiling", "groundedness_score",
                   "critical_fact_count", "rounds")
_TOKEN_BODY = re.compile(r"([0-9a-f]{1,64}):(\d{1,12}):(\d{1,12})")


@dataclass(frozen=True)
class PageCursor:
    """The last event seq and invocation id already returned (0: none yet)."""

    event_seq: int = 0
    invocation_id: int = 0


def encode_page_token(run_id: str, cursor: PageCursor) -> str:
    return encode_token(f"{run_id}:{cursor.event_seq}:{cursor.invocation_id}")


def decode_page_token(token: str, run_id: str) -> PageCursor:
    """The cursor in a token this server issued for `run_id`; INVALID_ARGUMENT otherwise."""
    refused = InvalidInput("page_token is not a page token of this run (pass next_page_token as it was returned)",
                           reason=Reason.INVALID_PAGE_TOKEN, field="page_token")
    match = _TOKEN_BODY.fullmatch(decode_token(token, refused, 200))
    if match is None or match.group(1) != run_id:
        raise refused
    return PageCursor(int(match.group(2)), int(match.group(3)))


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


@dataclass(frozen=True)
class _Section:
    name: str
    key: str
    fetch: Callable[[str, int, int], list[dict[str, Any]]]


def audit_page(runs: RunStore, header: dict[str, Any], cursor: PageCursor, first: bool, page_size: int,
               max_page_bytes: int) -> tuple[dict[str, Any], PageCursor | None]:
    """One page of the run's audit and the cursor of the next page (None after the last)."""
    run_id = header["run_id"]
    page: dict[str, Any] = {key: value for key, value in header.items() if key not in ("self_evaluation", "version")}
    if first:
        page["self_evaluation"] = header["self_evaluation"]
        page["version"] = header["version"]
    sections = (
        _Section("events", "seq", runs.events_after),
        _Section("invocations", "invocation_id", runs.invocations_after),
    )
    after = {"events": cursor.event_seq, "invocations": cursor.invocation_id}
    items_left = page_size
    bytes_left = max_page_bytes - _json_size(page)
    taken_any = False
    more = False
    for section in sections:
        taken: list[dict[str, Any]] = []
        page[section.name] = taken
        if more:
            continue
        while True:
            # Read a few rows at a time: the byte budget may end the page long before page_size.
            asked = min(items_left, FETCH_CHUNK) + 1
            rows = section.fetch(run_id, after[section.name], asked)
            for row in rows:
                size = _json_size(row)
                if items_left == 0 or (taken_any and size > bytes_left):
                    more = True
                    break
                taken.append(row)
                taken_any = True
                items_left -= 1
                bytes_left -= size
                after[section.name] = row[section.key]
            if more or len(rows) < asked:
                break
    if not more:
        return page, None
    return page, PageCursor(after["events"], after["invocations"])


def run_summary(runs: RunStore, header: dict[str, Any], max_answer_chars: int) -> dict[str, Any]:
    """The run's columns, verdicts, answer (cut to `max_answer_chars`) and counts: bounded
    whatever the run holds, and without any tool result or log text."""
    evaluation = header["self_evaluation"]
    verifier = evaluation.get("verifier_evaluation") or {}
    rules = evaluation.get("rule_evaluation") or {}
    answer = header.get("answer") or ""
    counts = runs.run_counts(header["run_id"])
    by_tool = counts["invocations_by_tool"]
    if len(by_tool) > MAX_SUMMARY_TOOLS:
        counts["invocations_by_tool"] = dict(sorted(by_tool.items(), key=lambda item: -item[1])[:MAX_SUMMARY_TOOLS])
        counts["invocations_by_tool_cut"] = True
    summary: dict[str, Any] = {key: value for key, value in header.items() if key not in ("self_evaluation", "version")}
    summary.update(
        view="SUMMARY",
        answer=answer[:max_answer_chars],
        answer_truncated=len(answer) > max_answer_chars,
        verdicts={key: verifier[key] for key in _VERDICT_FIELDS if key in verifier},
        evidence={key: rules[key] for key in _RULE_COUNTS if key in rules},
        counts=counts,
    )
    if verifier.get("failure_reason"):
        summary["verdicts"]["failure_reason"] = str(verifier["failure_reason"])[:MAX_SUMMARY_REASON_CHARS]
    return summary
