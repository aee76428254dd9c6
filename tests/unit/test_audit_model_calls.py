"""The run audit's `model_calls`: per role, which model answered and what its calls cost."""

from __future__ import annotations

from attest.common.v1 import audit_pb2
from gateway.audit import RunAudit


def _info(role: str, attempts: int, prompt: int, completion: int, provider: str = "openai", model: str = "m"):
    return audit_pb2.ModelCallInfo(
        role=role, provider=provider, model=model, attempts=attempts,
        token_usage=audit_pb2.TokenUsage(prompt_tokens=prompt, completion_tokens=completion,
                                         total_tokens=prompt + completion),
    )


def test_model_calls_are_summed_per_role_and_land_in_verifier_evaluation():
    audit = RunAudit(runs=None, run_id="r1", emit=lambda *args: None)  # type: ignore[arg-type]
    audit.model_call(_info("executor", 2, 100, 20))
    audit.model_call(_info("executor", 1, 50, 5))  # the retry round
    audit.model_call(_info("planner", 1, 0, 0, provider="embedded", model="planner.embedded"))
    audit.model_call(audit_pb2.ModelCallInfo())  # an unset field from an older service: ignored

    calls = audit.verifier_evaluation()["model_calls"]
    assert calls == {
        "executor": {"provider": "openai", "model": "m", "calls": 2, "attempts": 3,
                     "token_usage": {"prompt_tokens": 150, "completion_tokens": 25, "total_tokens": 175}},
        "planner": {"provider": "embedded", "model": "planner.embedded", "calls": 1, "attempts": 1,
                    "token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}},
    }
    calls["executor"]["token_usage"]["prompt_tokens"] = 0  # a copy: the audit itself is unchanged
    assert audit.model_calls()["executor"]["token_usage"]["prompt_tokens"] == 150
