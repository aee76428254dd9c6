"""No data is not health, through the six real processes, in both modes.

The demo estate is loaded anchored at now (`start_cluster`): it holds the last two hours, so
「昨天晚上8点到9点」 is a window where api-gateway has no series and no log line of any level. The
answer says 「无法确认：api-gateway 在 <window> 没有数据（…）」 naming what was empty — never PASS, never
「可信度：高」, never 「在所查范围内未发现异常」 or 「当前证据未显示异常」. Single-ReAct ends
INSUFFICIENT_EVIDENCE with that text. A window with data still answers as before (no such line),
and api-gateway's errors there are dated from their first line in the window, read from the whole
window, not from the newest lines a call returns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from attest.common.v1 import enums_pb2
from shared.db.engine import make_engine, make_session_factory
from shared.db.invocation_store import InvocationStore
from shared.db.run_store import RunStore
from shared.local_time import DEFAULT_TIME_ZONE
from shared.proto_convert import spec_value
from tests.integration.conftest import running_cluster
from tests.integration.failed_call_answers import MODES, conclusion_line, diagnose

pytestmark = pytest.mark.integration

EMPTY_QUERY = "api-gateway 昨天晚上8点到9点有没有异常？"
DATA_QUERY = "api-gateway 最近一小时有没有异常？"
EMPTY_WORDS = "没有数据（指标：没有任何序列；日志：没有任何级别的日志行）"
DENIALS = ("在所查范围内未发现异常", "当前证据未显示异常", "可信度：高")
BOTH_MODES = pytest.mark.parametrize("mode", list(MODES))


@dataclass
class Lab:
    gateway_addr: str
    runs: RunStore
    invocations: InvocationStore
    estate: Path  # the demo estate's SQLite file


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("no-data")
    with running_cluster(root, otlp_receiver.endpoint, new_database(root)) as running:
        sessions = make_session_factory(make_engine(running.database_url))
        yield Lab(running.gateway_addr, RunStore(sessions), InvocationStore(sessions), root / "estate.db")


def _verdict(response) -> str | None:
    return spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)


@BOTH_MODES
def test_a_window_without_data_is_answered_cannot_tell_naming_what_was_empty(lab, auth_metadata, mode) -> None:
    response = diagnose(lab.gateway_addr, EMPTY_QUERY, auth_metadata, MODES[mode])
    answer = response.answer
    assert _verdict(response) != "PASS", answer
    assert not any(word in answer for word in DENIALS), answer
    # The window is named in the answer's zone (the display step), like every other line.
    assert "api-gateway 在 " in answer and EMPTY_WORDS in answer and " 20:00:00 至 21:00:00 " in answer, answer
    logs = [i for i in lab.invocations.list_for_run(response.run_id, "query_logs") if i.lifecycle == "READY"]
    assert logs, "the logs were queried"
    if mode == "multi_agent":
        assert _verdict(response) == "LOW_CONFID", answer
        assert conclusion_line(answer).startswith("无法确认：api-gateway 在 "), answer
        run = lab.runs.get_run(response.run_id)
        assert run is not None
        cap = run["self_evaluation"]["verifier_evaluation"]["empty_scope_cap"]
        assert (cap["verdict_before_cap"], cap["verdict"]) == ("PASS", "LOW_CONFID"), cap
        assert {i.invocation_id for i in logs} <= set(cap["invocation_ids"])
        composer = run["self_evaluation"]["verifier_evaluation"]["composer_output"]
        assert not composer["used_fallback_template"], composer  # the composer service wrote it
    else:
        assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) == "INSUFFICIENT_EVIDENCE"
        lines = answer.splitlines()
        assert lines[0] == "【说明】" and lines[1].startswith("- 无法确认：api-gateway 在 "), answer


@BOTH_MODES
def test_a_window_with_data_answers_as_before(lab, auth_metadata, mode) -> None:
    response = diagnose(lab.gateway_addr, DATA_QUERY, auth_metadata, MODES[mode])
    answer = response.answer
    assert "没有数据" not in answer, answer
    assert response.run_id
    if mode == "multi_agent":
        assert _verdict(response) is not None, answer
        run = lab.runs.get_run(response.run_id)
        assert run is not None and "empty_scope_cap" not in run["self_evaluation"]["verifier_evaluation"]
    else:
        assert spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type) is None, answer


def test_errors_are_dated_from_their_first_line_in_the_window(lab, auth_metadata) -> None:
    # The estate's first ERROR line of api-gateway in the last hour (a margin inside the window
    # the question reads, so the few seconds between this read and the question do not matter).
    since = (datetime.now(UTC) - timedelta(minutes=58)).strftime("%Y-%m-%d %H:%M:%S")
    with sqlite3.connect(lab.estate) as connection:
        first, count = connection.execute(
            "SELECT min(ts), count(*) FROM log_line WHERE service = 'api-gateway' AND level = 'ERROR' AND ts >= ?",
            (since,)).fetchone()
    assert first is not None and count > 200, "more error lines than a call returns"
    response = diagnose(lab.gateway_addr, "api-gateway 最近一小时有什么异常？", auth_metadata, MODES["multi_agent"])
    shown = datetime.fromisoformat(first).replace(tzinfo=UTC).astimezone(ZoneInfo(DEFAULT_TIME_ZONE))
    assert shown.strftime("%Y-%m-%d %H:%M:%S") in response.answer, [shown.isoformat(), *response.answer.splitlines()]
