"""Log lines are single JSON objects joinable with traces (trace_id/span_id) and runs (run_id)."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from shared.logging_setup import JsonLineFormatter, configure_logging


@pytest.fixture()
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_lines_carry_service_level_trace_and_run(capsys, restore_root_logger):
    configure_logging("planner", "INFO")
    configure_logging("planner", "DEBUG")  # reconfiguring replaces, never duplicates
    log = logging.getLogger("attest.test")
    log.debug("outside any span")
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("plan") as span:
        log.warning("planning 为什么 CPU 高", extra={"run_id": "r-123"})
        context = span.get_span_context()

    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 2
    outside, inside = lines
    assert outside["level"] == "DEBUG" and "trace_id" not in outside and "run_id" not in outside
    assert inside["service"] == "planner"
    assert inside["logger"] == "attest.test"
    assert inside["level"] == "WARNING"
    assert inside["message"] == "planning 为什么 CPU 高"
    assert inside["run_id"] == "r-123"
    assert inside["trace_id"] == trace.format_trace_id(context.trace_id)
    assert inside["span_id"] == trace.format_span_id(context.span_id)
    assert inside["ts"].endswith("+00:00")


def test_exception_stays_on_one_line():
    formatter = JsonLineFormatter("gateway")
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = formatter.format(record)
    assert "\n" not in line
    assert "ValueError: bad" in json.loads(line)["exception"]
