"""`get_current_time`: a helper for agents that must turn "the last hour" into timestamps.
It is not evidence: it returns no evidence refs and never appears in summaries."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from services.executor.tools.tool_result import ToolResult, iso_utc
from shared.core.tool_catalogue import GET_CURRENT_TIME as TOOL_NAME
from shared.core.tool_catalogue import GetCurrentTimeArguments

DESCRIPTION = "The current time in UTC (ISO-8601). A helper: its result is not evidence."


def get_current_time(clock: Callable[[], datetime], args: GetCurrentTimeArguments) -> ToolResult:
    now = iso_utc(clock())
    return ToolResult(
        tool_name=TOOL_NAME,
        evidence_status=None,
        agent_result=json.dumps({"now": now}),
        request_scope={"tool": TOOL_NAME},
    )
