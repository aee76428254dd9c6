"""ListRuns: a session's runs, or (no session named) the caller's runs across its sessions,
newest first, one page at a time.

The page token names the session ("" for the caller's runs) and the (created_at, run_id) key of
the last run returned, so pages follow each other by key: a run started meanwhile appears on no
later page (it is newer than every key) and none is listed twice. A token of another session, or
of a session when none is named (and the reverse), is INVALID_ARGUMENT. The token carries no
principal: every page is read filtered by the caller, so a token cannot show another's runs.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2
from gateway.page_tokens import decode_token, encode_token
from gateway.text_cut import cut
from shared.db.run_store import stored_time
from shared.errors import InvalidInput, Reason
from shared.proto_convert import enum_member

MAX_ANSWER_LINE_CHARS = 300
MAX_TOKEN_CHARS = 300
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_TOKEN_BODY = re.compile(r"runs:([0-9a-f]{0,64}):(\d{1,20}):([0-9a-f]{1,64})")


def encode_list_token(session_id: str, last: dict[str, Any]) -> str:
    micros = (stored_time(last["created_at"]) - _EPOCH) // _MICROSECOND
    return encode_token(f"runs:{session_id}:{micros}:{last['run_id']}")


def decode_list_token(token: str, session_id: str) -> tuple[datetime, str]:
    """The (created_at, run_id) key in a token this server issued for `session_id` ("" for the
    caller's runs across its sessions)."""
    refused = InvalidInput("page_token is not a page token of this listing (pass next_page_token as it was returned)",
                           reason=Reason.INVALID_PAGE_TOKEN, field="page_token")
    match = _TOKEN_BODY.fullmatch(decode_token(token, refused, MAX_TOKEN_CHARS))
    if match is None or match.group(1) != session_id:
        raise refused
    return _EPOCH + int(match.group(2)) * _MICROSECOND, match.group(3)


def answer_line(answer: str | None) -> str:
    """The answer's direct answer: its first line of content, the confidence header (「可信度：…」)
    and section headings (【结论】) skipped, a list marker dropped, cut between tokens."""
    lines = (text.strip() for text in (answer or "").splitlines())
    content = (line for line in lines if line and not line.startswith(("可信度：", "【")))
    return cut(next(content, "").removeprefix("- ").strip(), MAX_ANSWER_LINE_CHARS)


def run_summary_message(run: dict[str, Any]) -> gateway_pb2.RunSummary:
    return gateway_pb2.RunSummary(
        run_id=run["run_id"],
        session_id=run["session_id"],
        query=run["query"],
        status=run["status"],
        effective_verdict=enum_member(enums_pb2.Verdict, run["effective_verdict"]),
        fallback_type=enum_member(enums_pb2.FallbackType, run["fallback_type"]),
        created_at=_utc_text(run["created_at"]),
        finished_at=_utc_text(run["finished_at"]),
        answer_line=answer_line(run["answer"]),
        mode=enum_member(enums_pb2.DiagnosisMode, run["mode"]),
        request_id=run.get("request_id") or "",
    )


def _utc_text(text: str | None) -> str:
    return stored_time(text).astimezone(UTC).isoformat() if text else ""
