"""The question is read once into a typed record that travels on the wire: what it reads, and
that the record comes back whole from the protobuf message every service receives."""

from __future__ import annotations

import pytest

from attest.common.v1 import evidence_pb2, question_pb2
from shared.core.contracts import Plan, QuestionIntent
from shared.core.question_intent import classify_question, plan_intent
from shared.proto_convert import message_to_model, plain_to_message

SVC = "ledger-gw"


@pytest.mark.parametrize(("query", "narrow"), [
    (f"{SVC} 是不是磁盘满了？", True),
    (f"{SVC} 有没有报错？", True),
    (f"{SVC} 的连接池耗尽了吗", True),
    (f"{SVC} 为什么报错，是连接池的问题吗？", False),  # a why is never narrow, even ending in 吗
    (f"what caused the errors on {SVC}?", False),
    (f"{SVC} 最近一小时的错误日志说了什么", False),
])
def test_a_question_that_asks_to_confirm_is_marked_narrow(query, narrow):
    assert classify_question(query).confirmation is narrow


def test_the_record_survives_the_wire_with_its_parts():
    intent = classify_question(f"{SVC} 为什么一直返回 5xx？是不是新版本导致的？")
    assert intent.kind == "why" and [part.kind for part in intent.parts] == ["yes_no"]
    assert intent.parts[0].hypothesis_change and intent.parts[0].change_kind == "release"
    sent = plain_to_message(intent, question_pb2.QuestionIntent)
    assert message_to_model(sent, QuestionIntent) == intent
    plan = plain_to_message(Plan(intent=intent), evidence_pb2.Plan)
    assert message_to_model(plan, Plan).intent == intent


def test_a_plan_without_the_planners_reading_has_the_question_read_once_from_the_query():
    query = f"{SVC} 最近一小时正常吗？"
    assert plan_intent(Plan(), query) == classify_question(query)
    given = QuestionIntent(kind="what", text=query)
    assert plan_intent(Plan(intent=given), query) is given  # the planner's reading is never re-read


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError):
        message_to_model(question_pb2.QuestionIntent(kind="maybe"), QuestionIntent)


def test_the_direction_a_question_states_is_read_once_and_travels_with_it():
    """「命中率为什么降了」 says which way the hit ratio moved: the executor assesses hit-ratio series
    in that direction from the record, never by reading the question again."""
    intent = classify_question("cache-gw 的缓存命中率为什么降了？")
    assert intent.stated_directions == {"hit_ratio": "down"}
    sent = plain_to_message(Plan(intent=intent), evidence_pb2.Plan)
    assert message_to_model(sent, Plan).intent.stated_directions == {"hit_ratio": "down"}
    assert classify_question("cache-gw 最近一小时正常吗？").stated_directions == {}
