"""Argument models shared by the evidence tools, and the translation of validation failures into
one clear message a model (or a person) can act on."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SERVICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_WINDOW = timedelta(days=7)


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
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    @model_validator(mode="after")
    def _window_is_bounded(self) -> "WindowArguments":
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if self.end - self.start > MAX_WINDOW:
            raise ValueError(f"the window may span at most {MAX_WINDOW.days} days")
        return self


class TimeRangeArguments(WindowArguments):
    service: str = Field(pattern=SERVICE_NAME_PATTERN, description="Service name, as the metrics and logs label it.")


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
