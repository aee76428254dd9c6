"""The display step of times people read: an answer's UTC timestamps shown in the configured zone,
the zone named; nothing that is not a timestamp is touched; the setting refuses unknown zones."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from shared.config import GatewaySettings, PlannerSettings
from shared.local_time import LocalTimeDisplay, UnknownTimeZone, load_zone

SHANGHAI = LocalTimeDisplay("Asia/Shanghai")
NOTE = "【时区】\n- 时间均为 Asia/Shanghai 时间（UTC+08:00）"


@pytest.mark.parametrize("text, shown", [
    # the shapes answers carry, across the +8 day boundary
    ("在 2026-11-30T17:49:00Z 达到 96.7%", "在 2026-12-01 01:49:00 达到 96.7%"),
    ("在 2026-11-30T17:49Z 达到", "在 2026-12-01 01:49 达到"),
    ("在 2026-11-30T17:49:00.250Z 达到", "在 2026-12-01 01:49:00.250 达到"),
    ("在 2026-11-30T17:49:00+00:00 达到", "在 2026-12-01 01:49:00 达到"),
    ("在 2026-11-30T17:49:00+0000 达到", "在 2026-12-01 01:49:00 达到"),
    ("在 2026-11-30 17:49:00Z 达到", "在 2026-12-01 01:49:00 达到"),
    ("在 2026-11-30T09:49:00-08:00 达到", "在 2026-12-01 01:49:00 达到"),  # any explicit offset is an instant
    ("高于窗口前段的 36.9%（2026-11-30T19:49:00Z）", "高于窗口前段的 36.9%（2026-12-01 03:49:00）"),
    ("（约 2026-11-30T20:08:00Z）前 60 分钟内", "（约 2026-12-01 04:08:00）前 60 分钟内"),
    ("（end=2026-11-30T20:42:11Z service=a-svc start=2026-11-30T19:42:11Z step_seconds=60）",
     "（end=2026-12-01 04:42:11 service=a-svc start=2026-12-01 03:42:11 step_seconds=60）"),
    ("2026-11-30T20:20:00Z config geo-lookup by varga.e", "2026-12-01 04:20:00 config geo-lookup by varga.e"),
])
def test_utc_timestamps_are_shown_as_wall_time_in_the_zone(text: str, shown: str) -> None:
    localized = SHANGHAI.localize(text)
    assert localized.text == shown
    assert localized.rewritten == text.count("2026-11-30") and localized.offsets == ("UTC+08:00",)


@pytest.mark.parametrize("text, shown", [
    ("在 2026-11-30T19:42:11Z 至 2026-11-30T20:42:11Z 期间", "在 2026-12-01 03:42:11 至 04:42:11 期间"),
    ("2026-11-30T19:42Z 到 2026-11-30T20:42Z", "2026-12-01 03:42 到 04:42"),
    ("2026-11-30T10:00:00Z-2026-11-30T11:00:00Z", "2026-11-30 18:00:00-19:00:00"),
    ("from 2026-11-30T10:00Z to 2026-11-30T11:00Z", "from 2026-11-30 18:00 to 19:00"),
    # a span across local midnight keeps both dates
    ("在 2026-11-30T15:30:00Z 至 2026-11-30T16:30:00Z 期间", "在 2026-11-30 23:30:00 至 2026-12-01 00:30:00 期间"),
    # two times that are not a span keep their dates
    ("2026-11-30T19:42:11Z 和 2026-11-30T20:42:11Z", "2026-12-01 03:42:11 和 2026-12-01 04:42:11"),
])
def test_spans_keep_working_and_drop_the_repeated_date(text: str, shown: str) -> None:
    assert SHANGHAI.localize(text).text == shown


@pytest.mark.parametrize("text", [
    "payment-service 发布 v2.14.0：上线风控规则集 ruleSet=v5",
    "orderId=P815160395 timeout=3000ms cost=2203ms lag=128632",
    "query_metrics #96 series[0].points[47]；query_logs #97 hits[3]",
    "2026-11-30 的发布",  # a date alone
    "2026-11-30T10:00:00 与 2026-11-30 10:00",  # no offset: the zone is unknown, nothing is assumed
    "build 20261130T101010Z and x2026-11-30T10:00:00Z and 12026-11-30T10:00:00Z",
    "2026-13-40T25:61:00Z",  # not a time
    "耗时 10:30，比率 3:1，版本 1.2.3-rc.4，端口 10.98.5.27:46646",
    "trace 4d39ff1689cbd749300c779f4ffedb89 run 54d8e8f8163305e9debe2c832e4297d0",
])
def test_nothing_that_is_not_an_offset_bearing_timestamp_is_touched(text: str) -> None:
    localized = SHANGHAI.localize(text)
    assert localized.text == text and localized.rewritten == 0
    assert SHANGHAI.localize_answer(text) == text  # no times shown: no zone note either


def test_quoted_tool_text_stays_verbatim_and_the_note_says_so() -> None:
    answer = ("- a-svc 在 2026-11-30T20:14:53Z 至 2026-11-30T20:46:51Z 期间多次出现 ERROR 日志："
              "「{\"ts\":\"2026-11-30T20:14:53Z\",\"msg\":\"timeout\"}」")
    shown = SHANGHAI.localize_answer(answer)
    assert "2026-12-01 04:14:53 至 04:46:51 期间" in shown
    assert "「{\"ts\":\"2026-11-30T20:14:53Z\",\"msg\":\"timeout\"}」" in shown
    assert shown.endswith("（UTC+08:00）；「」内引用的原文保持原样，其中的时间未换算")


def test_the_answer_ends_with_the_section_naming_the_zone() -> None:
    answer = "可信度：高\n\n【结论】\n- a-svc 在 2026-11-30T17:49:00Z 达到 96.7%\n"
    shown = SHANGHAI.localize_answer(answer)
    assert shown == "可信度：高\n\n【结论】\n- a-svc 在 2026-12-01 01:49:00 达到 96.7%\n\n" + NOTE
    assert SHANGHAI.localize_answer(shown) == shown  # idempotent: shown times carry no offset


def test_a_zone_with_daylight_saving_names_each_offset_it_shows() -> None:
    new_york = LocalTimeDisplay("America/New_York")
    localized = new_york.localize("2026-07-01T12:00:00Z 与 2026-12-01T12:00:00Z")
    assert localized.text == "2026-07-01 08:00:00 与 2026-12-01 07:00:00"
    assert localized.offsets == ("UTC-04:00", "UTC-05:00")
    assert new_york.zone_note(localized.offsets) == "时间均为 America/New_York 时间（UTC-04:00、UTC-05:00）"


def test_utc_is_a_zone_like_any_other() -> None:
    assert LocalTimeDisplay("UTC").localize_answer("在 2026-11-30T17:49:00Z") == (
        "在 2026-11-30 17:49:00\n\n【时区】\n- 时间均为 UTC 时间（UTC+00:00）")


def test_format_one_moment() -> None:
    assert SHANGHAI.format(datetime(2026, 11, 30, 16, 0, tzinfo=UTC)) == "2026-12-01 00:00:00"
    assert SHANGHAI.format(datetime(2026, 11, 30, 16, 0), seconds=False) == "2026-12-01 00:00"  # naive = UTC


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "", "  ", "Asia/Shanghai; rm -rf /", "../../etc/passwd"])
def test_an_unknown_zone_is_an_error_not_a_silent_utc(name: str) -> None:
    with pytest.raises(UnknownTimeZone):
        load_zone(name)


def test_the_setting_defaults_to_shanghai_and_refuses_unknown_zones_at_start_up(monkeypatch) -> None:
    monkeypatch.delenv("ATTEST_TIME_ZONE", raising=False)
    assert GatewaySettings().time_zone == "Asia/Shanghai"
    monkeypatch.setenv("ATTEST_TIME_ZONE", "Europe/Berlin")
    assert PlannerSettings().time_zone == "Europe/Berlin"
    monkeypatch.setenv("ATTEST_TIME_ZONE", "Asia/Shangai")
    with pytest.raises(ValidationError, match="ATTEST_TIME_ZONE"):
        GatewaySettings()
