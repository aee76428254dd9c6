"""parse_executor_output: valid / missing / malformed, strictly, and never an exception."""

import json

import pytest

from shared.executor_contract import MAX_EXECUTOR_OUTPUT_BYTES, parse_executor_output

VALID = {
    "answer_version": "executor_evidence_v2",
    "claims": [],
    "hypotheses": [],
    "recommended_actions": [],
    "missing_info": [],
}
VALID_TEXT = json.dumps(VALID)


def status(text):
    return parse_executor_output(text).parse_status


def test_valid_object_is_returned_raw():
    parsed = parse_executor_output(VALID_TEXT)
    assert parsed.parse_status == "valid"
    assert parsed.raw == VALID


def test_surrounding_whitespace_is_tolerated():
    assert status(f"\n\t  {VALID_TEXT}  \n") == "valid"


@pytest.mark.parametrize("fence", ["```json\n{}\n```", "```\n{}\n```", "```JSON\n{}```"])
def test_one_fence_around_exactly_one_object_is_tolerated(fence):
    parsed = parse_executor_output(fence.replace("{}", VALID_TEXT))
    assert parsed.parse_status == "valid"
    assert "fence" in parsed.detail


@pytest.mark.parametrize(
    "text",
    [
        f"Here is my answer:\n```json\n{VALID_TEXT}\n```",
        f"```json\n{VALID_TEXT}\n```\nHope this helps",
        f"```json\n{VALID_TEXT}\n```\n```json\n{VALID_TEXT}\n```",
        f"```json\n{VALID_TEXT} trailing\n```",
    ],
)
def test_fences_with_anything_else_are_malformed(text):
    assert status(text) == "malformed"


@pytest.mark.parametrize("text", ["", "   \n", "The CPU is high because of load.", "结论：CPU 使用率 92%"])
def test_no_json_object_is_missing(text):
    assert status(text) == "missing"


@pytest.mark.parametrize(
    "text",
    [
        f"Answer: {VALID_TEXT}",  # prose around the object
        f"{VALID_TEXT} done",
        f"{VALID_TEXT}{VALID_TEXT}",  # two objects
        "[1, 2]",  # not an object
        "42",
        '"just a string"',
        VALID_TEXT[:-5],  # truncated
        json.dumps({**VALID, "answer_version": "executor_evidence_v1"}),
        json.dumps({k: v for k, v in VALID.items() if k != "answer_version"}),
        json.dumps({k: v for k, v in VALID.items() if k != "claims"}),
        json.dumps({**VALID, "claims": {"c1": {}}}),
        json.dumps({**VALID, "hypotheses": "none"}),
        VALID_TEXT.replace('"claims": []', '"claims": [], "claims": []'),  # duplicate key
        VALID_TEXT.replace('"claims": []', '"claims": [NaN]'),
        VALID_TEXT.replace('"claims": []', '"claims": ["\\ud800"]'),  # lone surrogate
    ],
)
def test_json_that_is_not_the_contract_is_malformed(text):
    assert status(text) == "malformed"


def test_absent_optional_lists_read_as_empty():
    assert status(json.dumps({"answer_version": "executor_evidence_v2", "claims": []})) == "valid"


def test_claim_level_problems_are_not_parse_failures():
    text = json.dumps({**VALID, "claims": [1, {"claim_id": ""}], "user_facing_answer": "x"})
    assert status(text) == "valid"


def test_oversized_input_is_malformed_with_a_detail():
    padding = "x" * (MAX_EXECUTOR_OUTPUT_BYTES + 1)
    parsed = parse_executor_output(json.dumps({**VALID, "pad": padding}))
    assert parsed.parse_status == "malformed"
    assert "exceeds" in parsed.detail


def test_multibyte_size_is_counted_in_bytes():
    text = json.dumps({**VALID, "pad": "字" * (MAX_EXECUTOR_OUTPUT_BYTES // 3 + 10)}, ensure_ascii=False)
    assert len(text) < MAX_EXECUTOR_OUTPUT_BYTES
    assert status(text) == "malformed"


def test_deep_nesting_is_malformed_not_an_exception():
    assert status("[" * 100000 + "]" * 100000) == "malformed"
    assert status('{"a":' * 50000 + "1" + "}" * 50000) == "malformed"


def test_non_text_input_is_malformed():
    assert status(None) == "malformed"  # type: ignore[arg-type]
