"""What a plan may ask of the executor: checked on the plan as received, before
anything is persisted or any tool runs. A plan beyond a limit is refused as a whole with
INVALID_ARGUMENT naming the step, the argument and the limit; the tools keep their own, narrower
checks (`shared.core.tool_catalogue`), which fail only the one call."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.config import DEFAULT_MAX_PLAN_STEPS, ExecutorSettings
from shared.core.contracts import Plan, PlannedToolCall
from shared.core.service_mentions import MAX_NAMED_SERVICES
from shared.errors import InvalidInput, Reason

# Arguments that say how many records a tool returns.
LIMIT_ARGUMENTS = ("limit", "top_k")
WINDOW_ARGUMENTS = ("start", "end")
MAX_TOOL_NAME_CHARS = 100  # the invocation table's column
# The names a plan may carry (services and unchecked services together): what the planner can
# read from one question.
MAX_PLAN_SERVICE_NAMES = 2 * MAX_NAMED_SERVICES
_SHOWN_NAME_CHARS = 40


@dataclass(frozen=True)
class PlanLimits:
    """ExecutorSettings' plan limits; the defaults are the settings' defaults."""

    max_steps: int = DEFAULT_MAX_PLAN_STEPS
    max_argument_bytes: int = 1024
    max_request_bytes: int = 4096
    max_window: timedelta = timedelta(hours=168)
    max_result_limit: int = 500

    @classmethod
    def from_settings(cls, settings: ExecutorSettings) -> PlanLimits:
        return cls(
            max_steps=settings.max_plan_steps,
            max_argument_bytes=settings.max_tool_argument_bytes,
            max_request_bytes=settings.max_tool_request_bytes,
            max_window=timedelta(hours=settings.max_query_window_hours),
            max_result_limit=settings.max_result_limit,
        )


def check_plan(plan: Plan, limits: PlanLimits) -> None:
    """InvalidInput for the first limit the plan exceeds; None when it is within all of them."""
    if not plan.steps:
        # Nothing to run is a caller's mistake (the gateway never sends one), not an executor fault.
        raise InvalidInput("the plan has no steps; at least one is required", reason=Reason.FIELD_REQUIRED,
                           field="plan.steps")
    if len(plan.steps) > limits.max_steps:
        raise InvalidInput(f"the plan has {len(plan.steps)} steps; at most {limits.max_steps} are accepted",
                           reason=Reason.PLAN_TOO_LONG, field="plan.steps", metadata={"limit": limits.max_steps})
    names = [*plan.services, *plan.unchecked_services]
    if len(names) > MAX_PLAN_SERVICE_NAMES:
        raise InvalidInput(f"the plan names {len(names)} services; at most {MAX_PLAN_SERVICE_NAMES} are accepted",
                           reason=Reason.PLAN_TOO_MANY_SERVICES, field="plan.services",
                           metadata={"limit": MAX_PLAN_SERVICE_NAMES})
    for number, step in enumerate(plan.steps, start=1):
        _check_step(number, step, limits)


def _check_step(number: int, step: PlannedToolCall, limits: PlanLimits) -> None:
    path = f"plan.steps[{number - 1}]"  # the request's field path (0-based); messages count from 1
    if len(step.tool_name) > MAX_TOOL_NAME_CHARS:
        raise InvalidInput(f"step {number}: the tool name is longer than {MAX_TOOL_NAME_CHARS} characters",
                           reason=Reason.TOOL_NAME_TOO_LONG, field=f"{path}.tool_name",
                           metadata={"limit": MAX_TOOL_NAME_CHARS})
    where = f"step {number} ({step.tool_name})"
    for name, value in step.arguments.items():
        size = _json_bytes(value)
        if size > limits.max_argument_bytes:
            raise InvalidInput(f"{where}: argument {_shown(name)} is {size} bytes; "
                               f"at most {limits.max_argument_bytes} are accepted",
                               reason=Reason.TOOL_ARGUMENT_TOO_LARGE, field=f"{path}.arguments",
                               metadata={"limit": limits.max_argument_bytes})
        count = _number(value) if name in LIMIT_ARGUMENTS else None
        if count is not None and count > limits.max_result_limit:
            raise InvalidInput(f"{where}: argument {name} is {_plain(count)}; at most {limits.max_result_limit} is accepted",
                               reason=Reason.RESULT_LIMIT_TOO_HIGH, field=f"{path}.arguments.{name}",
                               metadata={"limit": limits.max_result_limit})
    size = _json_bytes(step.arguments)
    if size > limits.max_request_bytes:
        raise InvalidInput(f"{where}: its arguments are {size} bytes; at most {limits.max_request_bytes} are accepted",
                           reason=Reason.TOOL_REQUEST_TOO_LARGE, field=f"{path}.arguments",
                           metadata={"limit": limits.max_request_bytes})
    _check_window(where, path, step.arguments, limits.max_window)


def _check_window(where: str, path: str, arguments: dict[str, Any], max_window: timedelta) -> None:
    """A window whose ends are both readable must not end before it starts nor exceed the span; an
    unreadable one is left to the tool, which says what is wrong with it."""
    start, end = (_moment(arguments.get(name)) for name in WINDOW_ARGUMENTS)
    if start is None or end is None:
        return
    if end < start:
        raise InvalidInput(f"{where}: the window ends ({end.isoformat()}) before it starts ({start.isoformat()})",
                           reason=Reason.QUERY_WINDOW_REVERSED, field=f"{path}.arguments.end")
    if end - start > max_window:
        hours = (end - start).total_seconds() / 3600
        raise InvalidInput(f"{where}: the window from start to end spans {hours:g} hours; "
                           f"at most {max_window.total_seconds() / 3600:g} are accepted",
                           reason=Reason.QUERY_WINDOW_TOO_WIDE, field=f"{path}.arguments",
                           metadata={"limitHours": f"{max_window.total_seconds() / 3600:g}"})


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _plain(number: float) -> str:
    """100000.0 (a number through a protobuf Struct) as 100000."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))


def _shown(name: str) -> str:
    return repr(name if len(name) <= _SHOWN_NAME_CHARS else name[:_SHOWN_NAME_CHARS] + "…")
