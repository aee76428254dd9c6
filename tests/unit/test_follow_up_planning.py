"""Follow-up questions: what a question inherits from the session's last run,
how a relative shift moves the inherited window, and the planner (embedded, model-backed and the
gRPC servicer) planning over it. Service names here are made up: nothing may depend on the demo."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from attest.planner.v1 import planner_pb2
from services.planner.model_planner import ModelPlanner
from services.planner.servicer import PlannerServicer
from shared.core.contracts import TimeWindow
from shared.core.embedded_planner import EmbeddedPlanner
from shared.core.follow_up import InheritedContext, read_follow_up, read_shift
from shared.local_time import load_zone
from shared.model_client import ModelReply
from shared.prompt_files import Prompt

ZONE = load_zone("Asia/Shanghai")
NOW = datetime(2026, 11, 30, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai
# The last run looked at zz-ledger-7 from 10:00 to 11:00 local.
LAST = InheritedContext("run-before", ("zz-ledger-7",),
                        TimeWindow(start="2026-11-30T02:00:00Z", end="2026-11-30T03:00:00Z"))
HOUR = timedelta(hours=1)


def at(hour: int, minute: int = 0, day: int = 30) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(("question", "direction", "amount"), [
    ("再往前看一小时", -1, HOUR),
    ("那再往前看一个小时呢？", -1, HOUR),
    ("往后两小时", 1, 2 * HOUR),
    ("前一天", -1, timedelta(days=1)),
    ("那后一天的呢", 1, timedelta(days=1)),
    ("提前半小时看看", -1, timedelta(minutes=30)),
    ("往回推 30 分钟", -1, timedelta(minutes=30)),
    ("再往前看看", -1, None),
    ("and an hour earlier?", -1, HOUR),
    ("what about 2 hours later", 1, 2 * HOUR),
    ("go back 30 minutes", -1, timedelta(minutes=30)),
    ("shift the window forward by a day", 1, timedelta(days=1)),
    ("the previous hour?", -1, HOUR),
    ("and the day before", -1, timedelta(days=1)),
])
def test_shift_phrasings(question, direction, amount):
    shift = read_shift(question)
    assert shift is not None and (shift.direction, shift.amount) == (direction, amount)


@pytest.mark.parametrize("question", ["最近一小时 zz-ledger-7 怎么样", "最后一天的数据", "过去一天", "前端报错",
                                      "last 2 hours", "为什么 CPU 高"])
def test_no_shift_where_none_is_asked(question):
    assert read_shift(question) is None


def test_a_question_without_a_service_inherits_services_and_window():
    reading = read_follow_up("那它的内存呢？", NOW, ZONE, LAST, named_services=[])
    assert reading is not None and reading.services == ["zz-ledger-7"] and reading.window_inherited
    assert (reading.window.start, reading.window.end) == (at(2), at(3))
    assert reading.note == "沿用上一轮：zz-ledger-7，窗口 10:00–11:00"


@pytest.mark.parametrize(("question", "start", "end"), [
    ("再往前看一小时", at(1), at(2)),
    ("往后一小时呢", at(3), at(4)),
    ("前一天", at(2, day=29), at(3, day=29)),
    ("再往前看看", at(1), at(2)),  # by the window's own length
    ("and an hour earlier?", at(1), at(2)),
    ("往后半小时", at(2, 30), at(3, 30)),
])
def test_a_shift_moves_the_inherited_window(question, start, end):
    reading = read_follow_up(question, NOW, ZONE, LAST, named_services=[])
    assert reading is not None and reading.services == ["zz-ledger-7"]
    assert (reading.window.start, reading.window.end) == (start, end)
    assert reading.shift is not None and reading.note.startswith("沿用上一轮：zz-ledger-7，窗口按「")


def test_a_shift_past_now_keeps_the_inherited_window_and_says_so():
    reading = read_follow_up("往后三小时", NOW, ZONE, LAST, named_services=[])
    assert reading is not None and (reading.window.start, reading.window.end) == (at(2), at(3))
    assert "超出当前时间" in reading.note and reading.shift_seconds == 0


def test_a_question_naming_its_window_keeps_it_and_still_inherits_the_service():
    reading = read_follow_up("那它 9:00 到 9:30 的内存呢", NOW, ZONE, LAST, named_services=[])
    assert reading is not None and reading.services == ["zz-ledger-7"] and not reading.window_inherited
    assert (reading.window.start, reading.window.end) == (at(1), at(1, 30))


def test_a_question_naming_its_own_service_inherits_nothing_unless_it_shifts():
    assert read_follow_up("qq-billing-edge 的错误率呢", NOW, ZONE, LAST, named_services=["qq-billing-edge"]) is None
    shifted = read_follow_up("qq-billing-edge 再往前看一小时", NOW, ZONE, LAST, named_services=["qq-billing-edge"])
    assert shifted is not None and shifted.services == [] and shifted.window_inherited
    assert (shifted.window.start, shifted.window.end) == (at(1), at(2))


def test_nothing_is_inherited_without_a_previous_planned_run():
    assert read_follow_up("那它的内存呢？", NOW, ZONE, None, named_services=[]) is None
    assert read_follow_up("那它的内存呢？", NOW, ZONE, InheritedContext("r", ()), named_services=[]) is None


def _call_args(plan, tool: str) -> list[dict]:
    return [step.arguments for step in plan.steps if step.tool_name == tool]


def test_the_embedded_planner_plans_the_inherited_service_over_the_moved_window():
    planner = EmbeddedPlanner("Asia/Shanghai")
    reading = read_follow_up("再往前看一小时，内存呢？", NOW, ZONE, LAST, named_services=[])
    plan = planner.plan("再往前看一小时，内存呢？", NOW, follow_up=reading)
    assert plan.services == ["zz-ledger-7"] and plan.window == TimeWindow(start="2026-11-30T01:00:00Z",
                                                                          end="2026-11-30T02:00:00Z")
    assert {args["service"] for args in _call_args(plan, "query_metrics")} == {"zz-ledger-7"}
    assert all((a["start"], a["end"]) == ("2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z")
               for a in _call_args(plan, "query_logs"))
    assert "沿用上一轮：zz-ledger-7，窗口按「再往前看一小时」前移 1 小时：09:00–10:00" in plan.rationale
    # Without the session's context the same question names nothing to check.
    assert planner.plan("再往前看一小时，内存呢？", NOW).missing_context == ["service"]


def _servicer_plan(query: str, inherited: InheritedContext | None, planner=None) -> planner_pb2.CreatePlanResponse:
    request = planner_pb2.CreatePlanRequest(run_id="r2", query=query, now=NOW.isoformat())
    if inherited is not None:
        request.inherited.run_id = inherited.run_id
        request.inherited.services.extend(inherited.services)
        if inherited.window is not None:
            request.inherited.window.start, request.inherited.window.end = inherited.window.start, inherited.window.end
    servicer = PlannerServicer(planner or EmbeddedPlanner("Asia/Shanghai"), zone=ZONE)
    return servicer.CreatePlan(request, None)


def test_the_planner_service_reports_what_the_plan_inherited():
    response = _servicer_plan("前一天的延迟呢", LAST)
    assert response.HasField("follow_up")
    follow_up = response.follow_up
    assert follow_up.from_run_id == "run-before" and list(follow_up.services) == ["zz-ledger-7"]
    assert (follow_up.window.start, follow_up.window.end) == ("2026-11-29T02:00:00Z", "2026-11-29T03:00:00Z")
    assert follow_up.shift_phrase == "前一天" and follow_up.shift_seconds == -86400
    assert list(response.plan.services) == ["zz-ledger-7"]
    assert follow_up.note in response.plan.rationale
    plain = _servicer_plan("qq-billing-edge 的错误率呢", LAST)
    assert not plain.HasField("follow_up") and list(plain.plan.services) == ["qq-billing-edge"]


@dataclass
class ScriptedClient:
    """A model that answers each call with the next scripted reply, recording what it was sent."""

    replies: list[str]
    provider: str = "openai"
    model: str = "scripted"
    timeout_seconds: float = 5.0
    sent: list[list[dict]] = field(default_factory=list)

    def complete(self, messages, *, tools=None, response_format=None, timeout=None) -> ModelReply:
        self.sent.append(list(messages))
        return ModelReply(content=self.replies.pop(0))


def _model_planner(*replies: str) -> tuple[ModelPlanner, ScriptedClient]:
    client = ScriptedClient(list(replies))
    prompt = Prompt(name="planner", version="test", text="plan")
    return ModelPlanner(client, prompt, max_attempts=2, fallback=EmbeddedPlanner("Asia/Shanghai")), client


def test_the_model_planner_gets_the_inherited_context_and_plans_over_the_moved_window():
    # The model may plan the inherited service (the question does not name it) over any window;
    # the window our code read replaces the model's.
    step = {"tool_name": "query_metrics", "purpose": "memory",
            "arguments": {"service": "zz-ledger-7", "start": "2026-11-30T03:00:00Z", "end": "2026-11-30T04:00:00Z"}}
    reply = json.dumps({"services": ["zz-ledger-7"], "symptoms": [], "steps": [step], "rationale": "memory",
                        "window": {"start": "2026-11-30T03:00:00Z", "end": "2026-11-30T04:00:00Z"}})
    planner, client = _model_planner(reply)
    response = _servicer_plan("再往前看一小时", LAST, planner)
    sent = json.loads(client.sent[0][-1]["content"])
    assert sent["inherited"]["services"] == ["zz-ledger-7"]
    assert sent["inherited"]["window"] == {"start": "2026-11-30T01:00:00Z", "end": "2026-11-30T02:00:00Z"}
    plan = response.plan
    assert list(plan.services) == ["zz-ledger-7"]
    assert (plan.steps[0].arguments["start"], plan.steps[0].arguments["end"]) == \
        ("2026-11-30T01:00:00Z", "2026-11-30T02:00:00Z")
    assert "沿用上一轮：zz-ledger-7" in plan.rationale


def test_a_model_plan_for_no_service_falls_back_to_the_embedded_follow_up_plan():
    empty = json.dumps({"services": [], "symptoms": [], "rationale": "no service named",
                        "steps": [{"tool_name": "lookup_knowledge", "arguments": {"query": "内存"}, "purpose": "kb"}]})
    planner, client = _model_planner(empty, empty)
    plan = _servicer_plan("那它的内存呢？", LAST, planner).plan
    assert len(client.sent) == 2, "the unusable reply was retried once"
    assert list(plan.services) == ["zz-ledger-7"] and "none of the inherited services" in plan.rationale
