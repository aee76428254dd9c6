"""The tool catalogue: each tool's name and argument model, the service-name pattern and the
window bound they share, and the translation of validation failures into one clear message a
model (or a person) can act on.

The planner plans calls with these models and the executor runs them (`services/executor/tools/`
keeps each tool's logic and imports its model from here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shared.core.log_levels import normalise_level

QUERY_METRICS: Final = "query_metrics"
QUERY_LOGS: Final = "query_logs"
QUERY_CHANGES: Final = "query_changes"
LOOKUP_KNOWLEDGE: Final = "lookup_knowledge"
GET_CURRENT_TIME = "get_current_time"

SERVICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_WINDOW = timedelta(days=7)
# query_changes returns at most this many records per call, whatever is asked (the changes
# backend enforces it too).
MAX_CHANGE_ROWS = 200
LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")
MAX_LOG_LINES = 500
MAX_KNOWLEDGE_TOP_K = 10


class ToolArguments(BaseModel):
    # Unknown arguments are an error: a misspelt filter must not silently widen a query.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class WindowArguments(ToolArguments):
    start: datetime = Field(description="Window start, ISO-8601 (UTC if no offset is given).")
    end: datetime = Field(description="Window end, ISO-8601 (UTC if no offset is given).")

    @field_validator("start", "end")
    @classmethod
    def _as_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @model_validator(mode="after")
    def _window_is_bounded(self) -> WindowArguments:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if self.end - self.start > MAX_WINDOW:
            raise ValueError(f"the window may span at most {MAX_WINDOW.days} days")
        return self


class TimeRangeArguments(WindowArguments):
    service: str = Field(pattern=SERVICE_NAME_PATTERN, description="Service name, as the metrics and logs label it.")


class QueryMetricsArguments(TimeRangeArguments):
    metric: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_:][A-Za-z0-9_:]{0,127}$",
        description="One metric name; omit for every metric of the service.",
    )
    step_seconds: int = Field(default=60, ge=10, le=3600, description="Resolution in seconds.")


class QueryLogsArguments(TimeRangeArguments):
    level: str | list[str] | None = Field(
        default=None,
        description="One level or a list (DEBUG, INFO, WARN, ERROR, FATAL); a comma-separated string also works.",
    )
    contains: str | None = Field(default=None, min_length=1, max_length=200, description="Substring of the message.")
    limit: int = Field(default=200, ge=1, le=MAX_LOG_LINES, description="Most recent lines to return.")

    @field_validator("level")
    @classmethod
    def _known_levels(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        items = value.split(",") if isinstance(value, str) else value
        levels: list[str] = []
        for item in items:
            name = normalise_level(item) or item.strip().upper()  # WARNING, err, CRIT, PANIC …
            if name not in LOG_LEVELS:
                raise ValueError(f"unknown level {item.strip()!r}; use one of {', '.join(LOG_LEVELS)}")
            if name not in levels:
                levels.append(name)
        if not levels:
            raise ValueError("level is empty")
        return levels

    @property
    def levels(self) -> list[str] | None:
        return self.level  # type: ignore[return-value]  # normalised by the validator


class QueryChangesArguments(WindowArguments):
    service: str | None = Field(default=None, pattern=SERVICE_NAME_PATTERN, description="One service; omit for every service.")
    kind: str | None = Field(default=None, pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$", description="One kind of change, e.g. deploy or config.")
    limit: int = Field(default=50, ge=1, le=MAX_CHANGE_ROWS, description="Most recent records to return.")


class LookupKnowledgeArguments(ToolArguments):
    query: str = Field(min_length=1, max_length=300, description="What to look for: symptoms, error messages, components.")
    top_k: int = Field(default=5, ge=1, le=MAX_KNOWLEDGE_TOP_K, description="How many documents to return.")


class GetCurrentTimeArguments(ToolArguments):
    pass


def describe_validation_error(error: ValidationError) -> str:
    """`start: Input should be a valid datetime (got 'yesterday'); end: Field required`."""
    parts: list[str] = []
    for item in error.errors()[:8]:
        location = ".".join(str(part) for part in item.get("loc", ())) or "arguments"
        message = item.get("msg", "invalid")
        if item.get("type") == "extra_forbidden":
            message = "unexpected argument"
        text = f"{location}: {message}"
        if "input" in item and item.get("type") not in ("missing", "extra_forbidden"):
            shown: Any = item["input"]
            if not isinstance(shown, dict):
                text += f" (got {str(shown)[:60]!r})"
        parts.append(text)
    return "invalid arguments: " + "; ".join(parts)
