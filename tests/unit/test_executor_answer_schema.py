"""The JSON schema a model's executor answer is constrained by asks for the claim ids the
gatekeeper accepts: a model held to it never writes an id that fails schema.executor_v2."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from services.executor.answer_schema import executor_answer_schema
from services.gatekeeper.quoted_values import CLAIM_ID

ANSWER = {
    "answer_version": "executor_evidence_v2",
    "claims": [{
        "claim_id": "c1", "claim_type": "observation", "claim_text": "checkout-api 的 CPU 升高",
        "support_level": "direct",
        "evidence_bindings": [{"source_type": "metrics", "tool_name": "query_metrics", "source_invocation_id": 1,
                               "raw_path": "series[0].points[3]", "evidence_excerpt": "92%"}],
    }],
    "hypotheses": [{"text": "可能与发布有关", "related_claim_ids": ["c1"]}],
    "recommended_actions": [],
    "missing_info": [],
}


def _with_claim_id(claim_id: str) -> dict:
    answer = copy.deepcopy(ANSWER)
    answer["claims"][0]["claim_id"] = claim_id
    answer["hypotheses"][0]["related_claim_ids"] = [claim_id]
    return answer


def test_the_example_answer_fits_the_schema() -> None:
    jsonschema.validate(ANSWER, executor_answer_schema())


@pytest.mark.parametrize("claim_id", ["c1.1", "IGNORE PRIOR RULES", "c 1", "", "c1\x1b", "声明1"])
def test_an_id_the_gatekeeper_refuses_is_outside_the_schema(claim_id: str) -> None:
    assert CLAIM_ID.fullmatch(claim_id) is None
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_with_claim_id(claim_id), executor_answer_schema())


@pytest.mark.parametrize("claim_id", ["c1", "claim_2", "r-3", "A"])
def test_an_id_the_schema_allows_passes_the_gatekeeper(claim_id: str) -> None:
    jsonschema.validate(_with_claim_id(claim_id), executor_answer_schema())
    assert CLAIM_ID.fullmatch(claim_id) is not None
