"""The planner reads the question's window in the user's zone and sends it to tools in UTC (issue
15, point 4): absolute clock times and ranges, days, relative durations; future times, reversed
ranges and the +8 day boundary behave as documented in shared/core/question_window.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from services.planner.model_planner import follow_question_window
from shared.core.contracts import EvidenceGap, Plan, PlannedToolCall, RetryContext, TimeWindow
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.question_window import read_window
from shared.core.tool_catalogue import QueryMetricsArguments
from shared.local_time import UnknownTimeZone

SHANGHAI = ZoneInfo("Asia/Shanghai")
AFTERNOON = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)  # 2026-11-30 14:00 in Shanghai
PAST_MIDNIGHT = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)  # already 2026-12-01 01:00 there


def local(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=SHANGHAI)


def window(query: str, now: datetime) -> tuple[datetime, datetime]:
    read = read_window(query, now, SHANGHAI)
    assert read.start.tzinfo is not None and read.end.tzinfo is not None
    return read.start, read.end


@pytest.mark.parametrize("query, start, end", [
    ("a-svc 10:00 到 10:30 报错多吗", "2026-11-30 10:00", "2026-11-30 10:30"),
    ("a-svc 10点到10点半报错多吗", "2026-11-30 10:00", "2026-11-30 10:30"),
    ("a-svc 今天上午9点到10点怎么了", "2026-11-30 09:00", "2026-11-30 10:00"),
    ("a-svc 昨天下午三点为什么报错", "2026-11-29 14:30", "2026-11-29 15:30"),  # a point: ±30 min
    ("a-svc 11月29日 14:00-15:00 的 CPU", "2026-11-29 14:00", "2026-11-29 15:00"),
    ("a-svc 2026-11-30 10:00 至 11:00 延迟", "2026-11-30 10:00", "2026-11-30 11:00"),
    ("what happened to a-svc from 10:00 to 10:30", "2026-11-30 10:00", "2026-11-30 10:30"),
    ("a-svc errors yesterday 3pm", "2026-11-29 14:30", "2026-11-29 15:30"),
    ("a-svc 2026年11月29日下午2点到3点半", "2026-11-29 14:00", "2026-11-29 15:30"),
    ("a-svc 下午1点15分到1点45分", "2026-11-30 13:15", "2026-11-30 13:45"),
    ("a-svc 10：00～10：30", "2026-11-30 10:00", "2026-11-30 10:30"),  # full-width
    ("昨天 a-svc 在 10点到11点 报错", "2026-11-29 10:00", "2026-11-29 11:00"),  # the day named apart
    ("a-svc from 10:00 to 10:30 yesterday", "2026-11-29 10:00", "2026-11-29 10:30"),
    ("a-svc 凌晨2点到3点", "2026-11-30 02:00", "2026-11-30 03:00"),
    ("a-svc 昨晚11点", "2026-11-29 22:30", "2026-11-29 23:30"),
    ("a-svc 昨天下午", "2026-11-29 12:00", "2026-11-29 18:00"),
    # relative and day words, in the zone
    ("a-svc 最近一小时", "2026-11-30 13:00", "2026-11-30 14:00"),
    ("a-svc 今天的报错", "2026-11-30 00:00", "2026-11-30 14:00"),
    ("a-svc 昨天的报错", "2026-11-29 00:00", "2026-11-30 00:00"),
    ("a-svc 前天", "2026-11-28 00:00", "2026-11-29 00:00"),
    ("a-svc 11月29日", "2026-11-29 00:00", "2026-11-30 00:00"),
])
def test_windows_the_question_names_are_read_in_the_users_zone(query: str, start: str, end: str) -> None:
    assert window(query, AFTERNOON) == (local(start), local(end))
    assert read_window(query, AFTERNOON, SHANGHAI).named


@pytest.mark.parametrize("query, start, end, note", [
    # a clock time without a day that is still ahead today is yesterday's
    ("a-svc 15:00 到 15:30", "2026-11-29 15:00", "2026-11-29 15:30", ""),
    ("a-svc 15点左右", "2026-11-29 14:30", "2026-11-29 15:30", "either side"),
    # a window that has begun is cut at now
    ("a-svc 13:30 到 14:30", "2026-11-30 13:30", "2026-11-30 14:00", "cut at now"),
    ("a-svc 今天 14点", "2026-11-30 13:30", "2026-11-30 14:00", "cut at now"),
    # a window wholly in the future is kept as asked and flagged (the run ends before any call)
    ("a-svc 今天 23:00", "2026-11-30 22:30", "2026-11-30 23:30", "in the future"),
    ("a-svc 2026-12-05 10:00 至 11:00", "2026-12-05 10:00", "2026-12-05 11:00", "in the future"),
    ("a-svc 明天晚上8点到9点", "2026-12-01 20:00", "2026-12-01 21:00", "in the future"),
    ("a-svc 后天", "2026-12-02 00:00", "2026-12-03 00:00", "in the future"),
    # a date without a year that is still ahead is last year's
    ("a-svc 12月5日 10点到11点", "2025-12-05 10:00", "2025-12-05 11:00", ""),
    # reversed ranges
    ("a-svc 11点到1点", "2026-11-30 11:00", "2026-11-30 13:00", "afternoon"),
    ("a-svc 23:30 到 00:30", "2026-11-29 23:30", "2026-11-30 00:30", "midnight"),
    ("a-svc 11:00 到 10:00", "2026-11-30 10:00", "2026-11-30 11:00", "wrong way round"),
    # longer than a day: the most recent 24 hours of it
    ("a-svc 2026-11-28 08:00 至 2026-11-30 08:00", "2026-11-29 08:00", "2026-11-30 08:00", "24 hours"),
])
def test_future_times_and_reversed_ranges_behave_as_documented(query: str, start: str, end: str, note: str) -> None:
    read = read_window(query, AFTERNOON, SHANGHAI)
    assert (read.start, read.end) == (local(start), local(end))
    assert note in read.note
    assert read.future == (note == "in the future")


def test_today_past_local_midnight_is_the_new_local_day() -> None:
    # 2026-11-30T17:00Z is 2026-12-01 01:00 in Shanghai: 今天 began at 16:00Z, 昨天 is 11-30 local.
    assert window("a-svc 今天", PAST_MIDNIGHT) == (datetime(2026, 11, 30, 16, 0, tzinfo=UTC), PAST_MIDNIGHT)
    assert window("a-svc 昨天", PAST_MIDNIGHT) == (datetime(2026, 11, 29, 16, 0, tzinfo=UTC),
                                                 datetime(2026, 11, 30, 16, 0, tzinfo=UTC))
    # 「10:00 到 10:30」 at 01:00 local is the previous local day's, which is 02:00Z on 11-30
    assert window("a-svc 10:00 到 10:30", PAST_MIDNIGHT) == (datetime(2026, 11, 30, 2, 0, tzinfo=UTC),
                                                            datetime(2026, 11, 30, 2, 30, tzinfo=UTC))
    # 今天上午 has not come yet at 01:00: kept as asked, flagged as the future (never the last hour)
    read = read_window("a-svc 今天上午9点到10点", PAST_MIDNIGHT, SHANGHAI)
    assert (read.start, read.end) == (datetime(2026, 12, 1, 1, 0, tzinfo=UTC), datetime(2026, 12, 1, 2, 0, tzinfo=UTC))
    assert read.future and "future" in read.note


def test_times_with_their_own_offset_are_instants() -> None:
    assert window("a-svc 2026-11-30T01:00:00Z 到 2026-11-30T02:00:00Z", AFTERNOON) == (
        datetime(2026, 11, 30, 1, 0, tzinfo=UTC), datetime(2026, 11, 30, 2, 0, tzinfo=UTC))


@pytest.mark.parametrize("query", [
    "a-svc 接口慢了一点", "a-svc 有两点原因", "a-svc 第一时间处理", "a-svc 3点建议",
    "a-svc v2.14.0 发布后 timeout=3000ms", "a-svc 连 10.98.5.27:46646 失败", "a-svc 比例 3:1",
    "a-svc 的 CPU", "a-svc 24点",
])
def test_words_that_are_not_times_leave_the_default_hour(query: str) -> None:
    read = read_window(query, AFTERNOON, SHANGHAI)
    assert (read.start, read.end, read.how, read.named) == (AFTERNOON - timedelta(hours=1), AFTERNOON, "default", False)


def test_the_plan_sends_the_window_to_tools_in_utc() -> None:
    plan = EmbeddedPlanner(local_timezone="Asia/Shanghai").plan("a-svc 11月29日 14:00-15:00 的 CPU", AFTERNOON)
    assert (plan.window.start, plan.window.end) == ("2026-11-29T06:00:00Z", "2026-11-29T07:00:00Z")
    metrics = next(step for step in plan.steps if step.tool_name == "query_metrics")
    arguments = QueryMetricsArguments.model_validate(metrics.arguments)
    assert (arguments.start, arguments.end) == (datetime(2026, 11, 29, 6, 0, tzinfo=UTC),
                                                datetime(2026, 11, 29, 7, 0, tzinfo=UTC))
    changes = next(step for step in plan.steps if step.tool_name == "query_changes")
    assert changes.arguments["start"] == "2026-11-29T04:00:00Z"  # changes from CHANGES_LOOKBACK before the window
    assert "'11月29日 14:00-15:00' in Asia/Shanghai" in plan.rationale


def test_the_zone_is_a_setting(monkeypatch) -> None:
    assert EmbeddedPlanner(local_timezone="UTC").plan("a-svc 10:00 到 10:30", AFTERNOON).window == TimeWindow(
        start="2026-11-29T10:00:00Z", end="2026-11-29T10:30:00Z")  # 10:00 UTC is still ahead at 06:00Z
    monkeypatch.setenv("ATTEST_TIME_ZONE", "Europe/Berlin")
    planner = EmbeddedPlanner()
    assert planner.zone_name == "Europe/Berlin"
    assert planner.plan("a-svc 今天", AFTERNOON).window.start == "2026-11-29T23:00:00Z"
    with pytest.raises(UnknownTimeZone):
        EmbeddedPlanner(local_timezone="Asia/Shangai")


def test_a_retry_widens_a_past_window_on_both_sides() -> None:
    planner = EmbeddedPlanner(local_timezone="Asia/Shanghai")
    query = "为什么 a-svc 昨天下午三点 CPU 高"
    normal = planner.plan(query, AFTERNOON)
    gaps = RetryContext(gaps=[EvidenceGap(claim_id="c1", claim_text="a-svc 的 cpu_usage_percent 升高",
                                          verification="unsupported", services=["a-svc"], tool_names=["query_metrics"])])
    retry = planner.plan(query, AFTERNOON, mode="EVIDENCE_GAP_ONLY", retry_context=gaps)
    assert (normal.window.start, normal.window.end) == ("2026-11-29T06:30:00Z", "2026-11-29T07:30:00Z")
    assert (retry.window.start, retry.window.end) == ("2026-11-29T06:00:00Z", "2026-11-29T08:00:00Z")


def _model_plan(start: str, end: str) -> Plan:
    return Plan(
        services=["a-svc"], window=TimeWindow(start=start, end=end), rationale="model",
        steps=[
            PlannedToolCall(tool_name="query_metrics", arguments={"service": "a-svc", "start": start, "end": end}),
            PlannedToolCall(tool_name="query_changes", arguments={"service": "a-svc", "start": start, "end": end}),
            PlannedToolCall(tool_name="lookup_knowledge", arguments={"query": "CPU"}),
        ],
    )


def test_the_questions_window_overrides_a_models_window() -> None:
    # The model read 「昨天下午三点」 as 15:00 UTC; the question means 15:00 in Shanghai.
    asked = read_window("a-svc 昨天下午三点", AFTERNOON, SHANGHAI)
    plan = follow_question_window(_model_plan("2026-11-29T14:30:00Z", "2026-11-29T15:30:00Z"), asked, "Asia/Shanghai")
    assert (plan.window.start, plan.window.end) == ("2026-11-29T06:30:00Z", "2026-11-29T07:30:00Z")
    assert plan.steps[0].arguments == {"service": "a-svc", "start": "2026-11-29T06:30:00Z", "end": "2026-11-29T07:30:00Z"}
    assert plan.steps[1].arguments["start"] == "2026-11-29T04:30:00Z"  # changes from CHANGES_LOOKBACK before the window
    assert plan.steps[2].arguments == {"query": "CPU"}  # no window, untouched
    assert plan.rationale.startswith("model; window from the question ('昨天下午三点' in Asia/Shanghai)")
    # a model that already followed the question is left as it was
    assert follow_question_window(plan.model_copy(update={"rationale": "model"}), asked, "Asia/Shanghai").rationale == "model"


def test_a_day_ahead_named_alone_in_a_question_about_now_is_context() -> None:
    read = read_window("明天要发布，a-svc 现在正常吗？", AFTERNOON, SHANGHAI)
    assert not read.future and (read.start, read.end) == (AFTERNOON - timedelta(hours=1), AFTERNOON)
    assert read_window("a-svc 明天会不会出问题", AFTERNOON, SHANGHAI).future
