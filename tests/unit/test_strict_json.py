"""The one strict reader of model replies: every model-reply parser refuses
the same things — prose or fences around the object, duplicate keys, NaN/Infinity — with the
same words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.composer.model_composer import ComposedReplyError, parse_composed
from services.executor.draft_parse import parse_draft_text
from services.planner.model_planner import PlanReplyError, parse_plan_reply
from services.verifier.semantic_guard import SemanticProtocolError, parse_semantic_verdict
from shared.core.strict_json import DuplicateKey, NotOneObject, loads_strict_json, one_json_object

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BAD_REPLIES = [
    ('Sure: {"a": 1}', "must be exactly one JSON object, without fences or prose"),
    ('```json\n{"a": 1}\n```', "must be exactly one JSON object, without fences or prose"),
    ('{"a": 1, "a": 2}', "invalid JSON: duplicate key 'a'"),
    ('{"a": NaN}', "invalid JSON: NaN is not JSON"),
    ('{"a": -Infinity}', "invalid JSON: -Infinity is not JSON"),
    ('{"a": 1} {"b": 2}', "invalid JSON: Extra data"),
]


@pytest.mark.parametrize(("text", "why"), BAD_REPLIES)
def test_one_json_object_refuses_what_json_could_read_two_ways(text: str, why: str) -> None:
    with pytest.raises(NotOneObject, match=why.replace("(", r"\(").replace(")", r"\)")):
        one_json_object(text)


def test_one_json_object_returns_the_object_and_names_what_it_reads() -> None:
    assert one_json_object('  {"verdict": "PASS"}\n') == {"verdict": "PASS"}
    with pytest.raises(NotOneObject, match="^output must be exactly one JSON object"):
        one_json_object("[1, 2]", "output")
    with pytest.raises(DuplicateKey):
        loads_strict_json('{"k": {"x": 1, "x": 1}}')


@pytest.mark.parametrize(("text", "why"), BAD_REPLIES)
def test_every_model_reply_parser_refuses_the_same_replies(text: str, why: str) -> None:
    parsers = (
        (parse_composed, ComposedReplyError),
        (lambda t: parse_plan_reply(t, mode="NORMAL", now=NOW), PlanReplyError),
        (lambda t: parse_semantic_verdict(t, 4096), SemanticProtocolError),
    )
    for parse, error in parsers:
        with pytest.raises(error) as raised:
            parse(text)
        assert why.split(":")[0] in str(raised.value), str(raised.value)
    draft, detail = parse_draft_text(text)
    assert draft is None and detail, text


def test_the_draft_parser_no_longer_accepts_non_finite_numbers() -> None:
    draft, detail = parse_draft_text('{"conclusion": null, "analyses": [], "score": NaN}')
    assert draft is None and "not one JSON object" in detail and "NaN" in detail, detail
