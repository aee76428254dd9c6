"""The logs backends read every level and the whole window: Loki's LogQL never depends on a level
label existing (checked by a recorded Loki that applies the LogQL it receives), lines without a
level label are classified from the line, counts and first/last seen cover the whole window, and
when more lines match than `limit` the oldest half and the newest half are returned. The estate's
SQL backend keeps the same semantics (its level column is the label)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.executor.estate import create_estate_engine, estate_metadata, log_line
from services.executor.tools import loki_backend
from services.executor.tools.backends import LogRecord, ToolBackends, sample_lines
from services.executor.tools.http_api import HttpConnection, Secret
from services.executor.tools.loki_backend import LokiLogsBackend
from services.executor.tools.registry import build_default_registry
from services.executor.tools.sql_backends import SqlLogsBackend
from tests.monitoring_api_server import TENANT, TOKEN, Guarded
from tests.recorded_loki import Entry, RecordedLoki, parse_log_query

START = datetime(2031, 3, 4, 8, 0, tzinfo=UTC)
END = START + timedelta(hours=1)


@pytest.fixture()
def loki() -> Iterator[tuple[RecordedLoki, list[dict[str, str]], HttpConnection]]:
    """The recorded Loki of tests/monitoring_api_server.py, emptied; the queries it received; how to
    reach it."""
    server = Guarded()
    server.loki.entries = []
    try:
        yield server.loki, server.requests, HttpConnection(server.url, 5, bearer_token=Secret(TOKEN),
                                                           headers={"X-Scope-OrgID": TENANT})
    finally:
        server.close()


def _at(minutes: float) -> datetime:
    return START + timedelta(minutes=minutes)


UNLABELLED = {"service": "ledger", "pod": "ledger-0"}
MIXED_FORMATS = [
    (1, '{"level":"error","msg":"write to journal failed"}'),
    (2, "ts=2031-03-04T08:02:00Z level=warning msg=\"slow fsync\""),
    (3, "2031-03-04T08:03:00Z INFO request served in 3ms"),
    (4, "GET /healthz 200"),
    (5, "Traceback (most recent call last):\n  File \"j.py\", line 1, in <module>\nOSError: disk full"),
    (6, "2031-03-04T08:06:00Z INFO retried after an error"),  # a level word inside an INFO line
    (7, "[CRITICAL] journal closed"),
]


def _record(recorded: RecordedLoki, labels: dict[str, str], lines: list[tuple[float, str]]) -> None:
    recorded.entries += [Entry(labels=dict(labels), line=line, at=_at(minutes)) for minutes, line in lines]


def test_lines_without_a_level_label_are_classified_from_the_line(loki) -> None:
    recorded, queries, url = loki
    _record(recorded, UNLABELLED, MIXED_FORMATS)
    result = LokiLogsBackend(url).query_range("ledger", START, END, ["FATAL", "ERROR", "WARN"], None, 50)
    assert [(r.ts, r.level) for r in result.records] == [
        (_at(1), "ERROR"), (_at(2), "WARN"), (_at(5), "ERROR"), (_at(7), "FATAL")]
    assert result.total_matches == 4 and result.matches_up_to is None
    assert (result.first_ts, result.last_ts) == (_at(1), _at(7))
    assert result.window_lines == 7 and result.unclassified_lines == 1  # GET /healthz: no level anywhere
    # No query relies on the level label being there: the unlabelled streams have their own selector.
    sent = [q["query"] for q in queries if q["path"] == "/loki/api/v1/query_range"]
    assert any('level!~"' in q and " |~ " in q for q in sent), sent
    for query in sent:
        parse_log_query(query)  # the recorder read every query (an unreadable one is HTTP 400)


def test_without_levels_every_line_is_returned_with_its_level_or_unknown(loki) -> None:
    recorded, _, url = loki
    _record(recorded, UNLABELLED, MIXED_FORMATS)
    result = LokiLogsBackend(url).query_range("ledger", START, END, None, None, 50)
    assert [r.level for r in result.records] == ["ERROR", "WARN", "INFO", "UNKNOWN", "ERROR", "INFO", "FATAL"]
    assert result.total_matches == result.window_lines == 7


def test_labelled_and_unlabelled_streams_are_read_together_and_the_label_name_is_a_setting(loki) -> None:
    recorded, _, url = loki
    _record(recorded, {"service": "ledger", "severity": "critical", "pod": "a"}, [(10, "journal gone")])
    _record(recorded, {"service": "ledger", "severity": "info", "pod": "a"}, [(11, "ERROR word in an info line")])
    _record(recorded, {"service": "ledger", "pod": "b"}, [(12, "level=error msg=x")])
    backend = LokiLogsBackend(url, level_label="severity")
    result = backend.query_range("ledger", START, END, ["FATAL", "ERROR"], None, 50)
    assert [(r.message, r.level, r.host) for r in result.records] == [
        ("journal gone", "FATAL", "a"), ("level=error msg=x", "ERROR", "b")]
    assert result.total_matches == 2 and result.window_lines == 3


def test_more_matches_than_the_limit_return_the_oldest_and_the_newest_half(loki) -> None:
    recorded, queries, url = loki
    _record(recorded, {"service": "ledger", "level": "ERROR"}, [(k * 0.2, f"write {k} failed") for k in range(250)])
    _record(recorded, {"service": "ledger", "level": "INFO"}, [(k * 0.2 + 0.1, f"write {k} ok") for k in range(50)])
    result = LokiLogsBackend(url).query_range("ledger", START, END, ["ERROR"], None, 100)
    assert result.total_matches == 250 and result.window_lines == 300
    assert [r.message for r in result.records] == [f"write {k} failed" for k in [*range(50), *range(200, 250)]]
    assert (result.first_ts, result.last_ts) == (_at(0), _at(249 * 0.2))
    directions = [q["direction"] for q in queries if q["path"] == "/loki/api/v1/query_range"]
    assert "forward" in directions and "backward" in directions


def test_a_prefiltered_selection_not_read_whole_gives_a_range(loki, monkeypatch) -> None:
    recorded, _, url = loki
    monkeypatch.setattr(loki_backend, "READ_ALL", 10)
    lines = [(k, f"2031-03-04 ERROR write {k} failed" if k % 2 else f"2031-03-04 INFO retry {k} after error")
             for k in range(40)]
    _record(recorded, UNLABELLED, lines)
    result = LokiLogsBackend(url).query_range("ledger", START, END, ["ERROR"], None, 10)
    # 40 lines hold a level word; 20 oldest and newest read, 10 of them errors, 10 info lines refused.
    assert result.total_matches == 10 and result.matches_up_to == 30
    registry = build_default_registry(ToolBackends(metrics=None, logs=LokiLogsBackend(url)))  # type: ignore[arg-type]
    summary = next(r.text for r in registry.invoke("query_logs", {
        "service": "ledger", "start": START.isoformat(), "end": END.isoformat(), "level": "ERROR", "limit": 10,
    }).evidence_refs() if r.raw_path == "summary")
    assert ": 10 matching lines or more (up to 30: lines without a level label" in summary


def test_a_service_with_no_line_in_the_window_counts_zero_lines_of_any_level(loki) -> None:
    _, _, url = loki
    result = LokiLogsBackend(url).query_range("ledger", START, END, ["ERROR"], None, 10)
    assert (result.total_matches, result.window_lines, result.records) == (0, 0, [])


def test_the_summary_names_the_sampling_and_the_whole_windows_counts(loki) -> None:
    recorded, _, url = loki
    _record(recorded, {"service": "ledger", "level": "error"}, [(k * 0.1, f"write {k} failed") for k in range(340)])
    _record(recorded, UNLABELLED, [(59, "GET /healthz 200")])
    registry = build_default_registry(ToolBackends(metrics=None, logs=LokiLogsBackend(url)))  # type: ignore[arg-type]
    result = registry.invoke("query_logs", {"service": "ledger", "start": START.isoformat(), "end": END.isoformat(),
                                            "level": ["ERROR", "WARN"], "limit": 200})
    data = json.loads(result.agent_result)
    summary = next(r.text for r in result.evidence_refs() if r.raw_path == "summary")
    assert summary == (
        "query_logs service=ledger level=ERROR,WARN 2031-03-04T08:00:00Z..2031-03-04T09:00:00Z: 340 matching lines, "
        "first at 2031-03-04T08:00:00Z, last at 2031-03-04T08:33:54Z; 100 oldest and 100 newest returned; "
        "341 lines of any level, 1 of unknown level"
    )
    assert (data["first_ts"], data["last_ts"], data["window_lines"], data["unclassified_lines"]) == (
        "2031-03-04T08:00:00Z", "2031-03-04T08:33:54Z", 341, 1)
    assert data["hits"][0]["ts"] == data["first_ts"] and data["hits"][-1]["ts"] == data["last_ts"]


def test_sampling_keeps_the_oldest_ceiling_half_and_the_newest_floor_half() -> None:
    records = [LogRecord(ts=_at(k), level="ERROR", service="s", host="", message=str(k)) for k in range(10)]
    assert [r.message for r in sample_lines(records, 5)] == ["0", "1", "2", "8", "9"]
    assert [r.message for r in sample_lines(records, 1)] == ["0"]
    assert sample_lines(records, 10) == records


# --- the estate's SQL backend -----------------------------------------------------------------------


@pytest.fixture()
def estate(tmp_path: Path) -> SqlLogsBackend:
    engine = create_estate_engine(f"sqlite:///{tmp_path / 'estate.db'}")
    estate_metadata.create_all(engine)
    rows = [
        # a level column that names the level, whatever the line says
        *({"service": "ledger", "ts": _at(k * 0.2), "level": "ERROR", "host": "a", "message": f"write {k} failed"}
          for k in range(250)),
        {"service": "ledger", "ts": _at(55), "level": "INFO", "host": "a", "message": "ERROR in an info line"},
        # rows stored without a level: classified from the line
        {"service": "ledger", "ts": _at(56), "level": "", "host": "b", "message": '{"level":"critical","msg":"gone"}'},
        {"service": "ledger", "ts": _at(57), "level": "", "host": "b", "message": "GET /healthz 200"},
        {"service": "other", "ts": _at(1), "level": "ERROR", "host": "c", "message": "not ledger"},
    ]
    with engine.begin() as connection:
        connection.execute(log_line.insert(), rows)
    return SqlLogsBackend(engine)


def test_the_estate_reads_every_level_and_the_whole_window(estate: SqlLogsBackend) -> None:
    result = estate.query_range("ledger", START, END, ["FATAL", "ERROR"], None, 100)
    assert result.total_matches == 251 and result.window_lines == 253 and result.unclassified_lines == 1
    assert (result.first_ts, result.last_ts) == (_at(0), _at(56))
    messages = [r.message for r in result.records]
    assert messages[:50] == [f"write {k} failed" for k in range(50)]
    assert messages[50:] == [f"write {k} failed" for k in range(201, 250)] + ['{"level":"critical","msg":"gone"}']
    assert result.records[-1].level == "FATAL"
    everything = estate.query_range("ledger", START, END, None, None, 500)
    assert everything.total_matches == 253 and {r.level for r in everything.records} == {"ERROR", "INFO", "FATAL", "UNKNOWN"}


def test_the_estate_filters_by_substring_and_counts_nothing_for_an_unknown_service(estate: SqlLogsBackend) -> None:
    found = estate.query_range("ledger", START, END, ["ERROR"], "WRITE 7 ", 100)
    assert [r.message for r in found.records] == ["write 7 failed"] and found.total_matches == 1
    none = estate.query_range("nobody", START, END, ["ERROR"], None, 100)
    assert (none.total_matches, none.window_lines, none.records) == (0, 0, [])
