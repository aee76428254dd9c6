"""Structured logs: one JSON object per line on stderr, carrying the trace and run ids (DESIGN §6).

A log line and the span it was written under can be joined on `trace_id`/`span_id`; a line about
a diagnosis run carries its `run_id` when the caller passes `extra={"run_id": ...}`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from opentelemetry import trace

# Extra attributes copied from the record when present (pass them with `extra=`).
CONTEXT_FIELDS: tuple[str, ...] = ("run_id",)


class JsonLineFormatter(logging.Formatter):
    """Formats a record as a single-line JSON object."""

    def __init__(self, service_name: str) -> None:
        super().__init__()
        self._service = service_name

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "service": self._service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            entry["trace_id"] = trace.format_trace_id(span_context.trace_id)
            entry["span_id"] = trace.format_span_id(span_context.span_id)
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # ensure_ascii=False keeps Chinese text readable in the log stream.
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(service_name: str, level: str | int = "INFO") -> None:
    """Route the root logger to stderr as JSON lines; calling it again replaces the handler."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler.formatter, JsonLineFormatter):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter(service_name))
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
