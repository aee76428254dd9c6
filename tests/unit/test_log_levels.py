"""A line's level: from its label when there is one, else from the line (JSON and logfmt fields, a
level word in its head, a glog header, an exception), else UNKNOWN — on formats no code here names."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from shared.core.log_levels import (
    ERROR_LEVELS,
    LEVELS,
    UNKNOWN,
    level_of,
    level_of_line,
    line_pattern,
    normalise_level,
)
from shared.core.tool_catalogue import QueryLogsArguments


@pytest.mark.parametrize("line, level", [
    # JSON fields, any common key, nested Elastic Common Schema, numeric pino/bunyan levels
    ('{"level":"warning","msg":"disk almost full"}', "WARN"),
    ('{"severity":"ERROR","message":"write failed"}', "ERROR"),
    ('{"lvl":"crit","msg":"x"}', "FATAL"),
    ('{"levelname":"CRITICAL","name":"worker"}', "FATAL"),
    ('{"@timestamp":"2031-01-01T00:00:00Z","log":{"level":"err"},"message":"x"}', "ERROR"),
    ('{"log.level":"info","message":"x"}', "INFO"),
    ('{"level":50,"time":1700000000,"msg":"x"}', "ERROR"),
    ('{"level":60,"msg":"x"}', "FATAL"),
    ('{"level":30,"msg":"x"}', "INFO"),
    ('{"SeverityText":"Warn","Body":"x"}', "WARN"),
    # logfmt
    ('ts=2031-01-01T00:00:00Z level=error msg="upstream closed"', "ERROR"),
    ('time="2031-01-01" lvl=WARN msg=x', "WARN"),
    ('caller=main.go:12 level=panic msg=x', "FATAL"),
    # a level word in the head
    ("2031-01-01T00:00:00.123Z ERROR [main] c.x.Handler - request failed", "ERROR"),
    ("[WARN] cache nearly full", "WARN"),
    ("2031-01-01 10:00:00,123 - orders - CRITICAL - cannot start", "FATAL"),
    ("WARNING:root:slow answer", "WARN"),
    ("2031/01/01 10:00:00 [error] 12#0: *1 connect() failed", "ERROR"),
    ("error: could not open file", "ERROR"),
    ("2031-01-01T00:00:00Z fatal: out of memory", "FATAL"),
    ("warn: Microsoft.Hosting[1] slow", "WARN"),
    ("10:00AM INF request served", "INFO"),
    ("2031-01-01T00:00:00Z INFO request [error] details later", "INFO"),  # the first level word
    ("panic: runtime error: index out of range", "FATAL"),
    # glog / klog
    ("E1203 10:00:00.123456    1 reflector.go:138] failed to list", "ERROR"),
    ("W1203 10:00:00.123456    1 main.go:12] slow", "WARN"),
    # exceptions and tracebacks
    ("Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\nOSError: [Errno 28] No space left", "ERROR"),
    ("java.lang.IllegalStateException: pool closed\n\tat a.B.c(B.java:1)", "ERROR"),
    ("request aborted\nCaused by: java.net.SocketTimeoutException: Read timed out", "ERROR"),
    ('{"msg":"handler crashed: ValueError: bad input"}', "ERROR"),
    # nothing readable: never INFO
    ("GET /healthz 200 3ms", UNKNOWN),
    ("user information page rendered", UNKNOWN),
])
def test_a_line_states_its_level(line: str, level: str) -> None:
    assert level_of_line(line) == level


def test_a_level_word_far_from_the_head_is_not_the_level() -> None:
    line = "request id=1 path=/a method=GET took=3ms from=10.0.0.1 agent=curl retry=0 ERROR"
    assert level_of_line(line) == UNKNOWN


@pytest.mark.parametrize("label, line, level", [
    ("error", "anything", "ERROR"),
    ("WARNING", "ERROR in text", "WARN"),  # the label wins over the line
    ("critical", "", "FATAL"),
    ("Err", "", "ERROR"),
    ("unknown", "level=error msg=x", "ERROR"),  # a label naming no level: the line decides
    ("", "[WARN] x", "WARN"),
    (None, "plain text", UNKNOWN),
])
def test_the_label_when_it_names_a_level_else_the_line(label: str | None, line: str, level: str) -> None:
    assert level_of(label, line) == level


@pytest.mark.parametrize("value, level", [
    ("WARNING", "WARN"), ("ERR", "ERROR"), ("FATAL", "FATAL"), ("CRITICAL", "FATAL"), ("CRIT", "FATAL"),
    ("PANIC", "FATAL"), ("EMERG", "FATAL"), ("ALERT", "FATAL"), ("notice", "INFO"), ("trace", "DEBUG"),
    ("bogus", None), ("", None), (True, None), (5, None),
])
def test_names_are_normalised(value: object, level: str | None) -> None:
    assert normalise_level(value) == level


def test_fatal_is_an_error_level() -> None:
    assert ERROR_LEVELS == {"FATAL", "ERROR"} and set(LEVELS) >= ERROR_LEVELS


@pytest.mark.parametrize("line", [
    "2031-01-01T00:00:00Z ERROR boom", '{"level":"critical"}', "ts=1 level=err msg=x", "[error] x",
    "E1203 10:00:00.123456 1 a.go:1] x", '{"level":55}', "Traceback (most recent call last):",
    "java.lang.NullPointerException: x", "Caused by: a.B: c", "KeyError: 'x'",
])
def test_the_prefilter_matches_every_error_line_the_reader_reads(line: str) -> None:
    assert level_of_line(line) in ERROR_LEVELS
    assert re.search(line_pattern(["ERROR", "FATAL"]), line), line


def test_the_prefilter_for_warnings_leaves_info_lines_out() -> None:
    pattern = line_pattern(["WARN"])
    assert re.search(pattern, "[warn] slow") and re.search(pattern, '{"level":40}')
    assert not re.search(pattern, "2031-01-01 INFO served") and not re.search(pattern, "ValueError: x")


def test_a_line_with_no_level_word_escapes_the_all_levels_prefilter() -> None:
    pattern = line_pattern()
    assert not re.search(pattern, "GET /healthz 200 3ms")
    assert all(re.search(pattern, line) for line in ("[INFO] x", "x DEBUG", "W1203 10:00:00.1 1 a.go:1] x"))


def test_a_huge_head_is_read_quickly() -> None:
    assert level_of_line("1" * 200_000 + " ERROR") == UNKNOWN


def test_a_tool_call_may_ask_for_a_level_in_any_spelling_the_reader_knows():
    arguments = QueryLogsArguments(service="a-svc", start="2026-12-03T10:00:00Z", end="2026-12-03T11:00:00Z",
                                   level="panic, crit,warning,Err")
    assert arguments.level == ["FATAL", "WARN", "ERROR"]
    with pytest.raises(ValidationError, match="unknown level 'loud'"):
        QueryLogsArguments(service="a-svc", start="2026-12-03T10:00:00Z", end="2026-12-03T11:00:00Z", level="loud")
