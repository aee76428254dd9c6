"""The verifier's OpenAI-compatible engines (VerifyClaims and the ReviewDraft SemanticGuard) behind
the real gRPC servicer on an ephemeral port, driven by a scripted model over real HTTP through
the real `openai` client. What the model server recorded is what the role really sent."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from attest.common.v1 import enums_pb2, single_react_pb2, verifier_types_pb2
from attest.verifier.v1 import verifier_pb2
from services.verifier.protocol import canonical_input_bytes
from services.verifier.semantic_guard import review_input_bytes
from services.verifier.semantic_guard_settings import SemanticGuardSettings
from services.verifier.servicer import (
    VerifierServicer,
    build_semantic_guard,
    build_verifier_engine,
    guard_model_settings,
)
from shared.config import VerifierSettings
from shared.draft_contract import Draft, VerifiedSnapshot
from shared.errors import Cancelled
from shared.model_client import OpenAIChatClient
from shared.proto_convert import plain_to_message, spec_value
from tests.scripted_model_server import Delay, Status, completion
from tests.unit.test_semantic_guard import QUERY, draft, snapshot
from tests.unit.test_verifier_protocol import make_input, model_output

PROMPT_TOKENS, COMPLETION_TOKENS = 11, 7  # the scripted server's usage per completion
CALL_TIMEOUT = 30
SUPPORTED = '{"verdict": "SUPPORTED", "reason": "every value occurs in its evidence"}'
UNSUPPORTED = '{"verdict": "UNSUPPORTED", "reason": "95% is not in the evidence of a1"}'


class GuardSpy:
    """Wraps the guard engine and records how each review ended: a run, or an exception."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.outcomes: list[object] = []
        self.done = threading.Event()

    def review(self, *args, **kwargs):
        try:
            run = self._engine.review(*args, **kwargs)
        except BaseException as exc:
            self.outcomes.append(exc)
            raise
        finally:
            self.done.set()
        self.outcomes.append(run)
        return run


@pytest.fixture()
def verifier(scripted_settings, serve_role):
    """`verifier(**overrides)` -> (stub, guard spy) over a servicer whose engines use the scripted model."""

    def start(timeout_seconds: float = 10.0, json_schema_format: bool = False, **guard_limits):
        settings = scripted_settings(timeout_seconds=timeout_seconds, json_schema_format=json_schema_format)
        guard_settings = SemanticGuardSettings(**guard_limits)
        spy = GuardSpy(build_semantic_guard(
            settings, guard_settings, OpenAIChatClient(guard_model_settings(settings, guard_settings))
        ))
        servicer = VerifierServicer(build_verifier_engine(settings, OpenAIChatClient(settings)), spy)
        stub = serve_role("verifier", servicer, VerifierSettings(port=0, max_workers=4, shutdown_grace_seconds=0.5))
        return stub, spy

    return start


def _verify(stub) -> verifier_pb2.VerifyClaimsResponse:
    request = verifier_pb2.VerifyClaimsRequest(input=plain_to_message(make_input(), verifier_types_pb2.VerifierInput))
    return stub.VerifyClaims(request, timeout=CALL_TIMEOUT)


def _review_request(d: Draft | None = None, snap: VerifiedSnapshot | None = None) -> verifier_pb2.ReviewDraftRequest:
    return verifier_pb2.ReviewDraftRequest(
        query=QUERY,
        draft=plain_to_message(d or draft(), single_react_pb2.Draft),
        snapshot=plain_to_message(snap or snapshot(), single_react_pb2.VerifiedSnapshot),
    )


def _status(response) -> str:
    return spec_value(enums_pb2.VerifierStatus.DESCRIPTOR, response.verifier_status)


def _user_content(body: dict) -> str:
    [user] = [m for m in body["messages"] if m["role"] == "user"]
    return user["content"]


# --- VerifyClaims -----------------------------------------------------------------------------------


def test_invalid_json_then_valid_makes_two_attempts_on_byte_identical_input(verifier, model_server):
    model_server.add(completion("The claims look fine to me."), completion(json.dumps(model_output())))
    stub, _ = verifier()
    response = _verify(stub)

    assert _status(response) == "COMPLETED"
    assert response.attempts == 2
    first, second = model_server.requests
    assert _user_content(second).encode("utf-8") == _user_content(first).encode("utf-8")
    assert _user_content(first).encode("utf-8") == canonical_input_bytes(make_input())
    assert first["messages"] == second["messages"] and first["response_format"] == second["response_format"]
    assert first["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    # The second verdict controls: the parsed output and the deterministic effective verdict.
    assert response.output.verdict == enums_pb2.VERDICT_PASS
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective.effective_verdict) == "PASS"
    assert (response.prompt.role, response.prompt.name, response.prompt.version) == ("verifier", "verifier_v2", "3")
    call = response.model_call
    assert (call.role, call.provider, call.model, call.attempts) == ("verifier", "openai", "scripted-model", 2)
    assert call.token_usage.prompt_tokens == 2 * PROMPT_TOKENS
    assert call.token_usage.total_tokens == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)


def test_schema_violations_twice_fail_the_verifier_without_a_verdict(verifier, model_server):
    bad = model_output(verdict="MAYBE")
    model_server.add(completion(json.dumps(bad)), completion("```json\n" + json.dumps(model_output()) + "\n```"))
    stub, _ = verifier()
    response = _verify(stub)

    assert _status(response) == "FAILED"
    assert not response.HasField("output") and not response.HasField("effective")
    assert response.attempts == 2 and len(model_server.requests) == 2
    assert "attempt 1" in response.failure_reason and "attempt 2" in response.failure_reason
    assert response.model_call.attempts == 2


def test_a_timeout_then_a_valid_reply_is_two_attempts(verifier, model_server):
    model_server.add(Delay(3.0, completion(json.dumps(model_output()))), completion(json.dumps(model_output())))
    stub, _ = verifier(timeout_seconds=0.5)
    response = _verify(stub)
    assert _status(response) == "COMPLETED" and response.attempts == 2


def test_a_transport_failure_is_retried_but_a_refused_request_is_not(verifier, model_server):
    model_server.add(Status(503), completion(json.dumps(model_output())))
    stub, _ = verifier()
    assert _verify(stub).attempts == 2

    model_server.add(Status(400), completion(json.dumps(model_output())))
    response = _verify(stub)
    assert _status(response) == "FAILED" and response.attempts == 1
    assert len(model_server.requests) == 3


def test_a_parsed_reject_is_final_after_one_attempt(verifier, model_server):
    checks = model_output()["claim_checks"]
    checks[0] = {**checks[0], "verification": "contradicted", "detail": "evidence shows 29%"}
    model_server.add(completion(json.dumps(model_output(verdict="REJECT", claim_checks=checks))))
    stub, _ = verifier()
    response = _verify(stub)
    assert _status(response) == "COMPLETED" and response.attempts == 1
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective.effective_verdict) == "REJECT"


def test_a_bounded_schema_is_sent_when_the_server_accepts_one(verifier, model_server):
    model_server.add(completion(json.dumps(model_output())))
    stub, _ = verifier(json_schema_format=True)
    _verify(stub)
    response_format = model_server.requests[0]["response_format"]
    assert response_format["type"] == "json_object"
    schema = response_format["schema"]
    check = schema["properties"]["claim_checks"]["items"]
    assert check["properties"]["claim_id"]["enum"] == ["c1", "c2"]
    assert check["properties"]["detail"]["maxLength"] <= 300
    assert schema["properties"]["claim_checks"]["maxItems"] == 2


# --- ReviewDraft (SemanticGuard) ----------------------------------------------------------------------


def test_unsupported_is_recorded_after_one_attempt(verifier, model_server):
    model_server.add(completion(UNSUPPORTED), completion(SUPPORTED))
    stub, _ = verifier()
    response = stub.ReviewDraft(_review_request(), timeout=CALL_TIMEOUT)

    assert _status(response) == "COMPLETED"
    assert spec_value(enums_pb2.SemanticVerdict.DESCRIPTOR, response.verdict) == "UNSUPPORTED"
    assert response.reason == "95% is not in the evidence of a1"
    assert response.attempts == 1 and len(model_server.requests) == 1
    assert (response.prompt.role, response.prompt.name, response.prompt.version) == ("semantic_guard", "semantic_guard", "1")
    assert (response.model_call.provider, response.model_call.attempts) == ("openai", 1)


def test_invalid_output_then_supported_uses_byte_identical_isolated_input(verifier, model_server):
    model_server.add(completion('{"verdict": "SUPPORTED"}'), completion(SUPPORTED))
    stub, _ = verifier()
    response = stub.ReviewDraft(_review_request(), timeout=CALL_TIMEOUT)

    assert _status(response) == "COMPLETED" and response.attempts == 2
    assert spec_value(enums_pb2.SemanticVerdict.DESCRIPTOR, response.verdict) == "SUPPORTED"
    first, second = model_server.requests
    assert _user_content(first).encode("utf-8") == _user_content(second).encode("utf-8")
    assert _user_content(first).encode("utf-8") == review_input_bytes(QUERY, draft(), snapshot())
    assert "call-cpu" not in json.dumps(first, ensure_ascii=False)  # tool call ids never reach the model
    assert "tools" not in first and len(first["messages"]) == 2  # single turn, no tools, no history
    assert first["max_tokens"] <= SemanticGuardSettings().max_output_tokens


def test_final_technical_failure_is_reported_as_failed_without_a_verdict(verifier, model_server):
    model_server.add(completion("SUPPORTED"), Status(500))
    stub, _ = verifier()
    response = stub.ReviewDraft(_review_request(), timeout=CALL_TIMEOUT)
    assert _status(response) == "FAILED"
    assert response.verdict == enums_pb2.SEMANTIC_VERDICT_UNSPECIFIED
    assert response.attempts == 2 and response.reason


def test_an_oversized_review_input_is_failed_without_any_model_call(verifier, model_server):
    stub, _ = verifier(max_input_bytes=256)
    response = stub.ReviewDraft(_review_request(), timeout=CALL_TIMEOUT)
    assert _status(response) == "FAILED" and response.attempts == 0
    assert model_server.requests == []


def test_a_draft_without_a_conclusion_is_refused(verifier, model_server):
    stub, _ = verifier()
    with pytest.raises(grpc.RpcError) as caught:
        stub.ReviewDraft(_review_request(draft().model_copy(update={"conclusion": None})), timeout=CALL_TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert model_server.requests == []


def test_cancellation_during_the_model_call_releases_no_result(verifier, model_server):
    model_server.add(Delay(3.0, completion(SUPPORTED)))
    stub, spy = verifier()
    call = stub.ReviewDraft.future(_review_request(), timeout=CALL_TIMEOUT)
    for _ in range(200):  # until the model call is pending
        if model_server.requests:
            break
        time.sleep(0.02)
    assert model_server.requests, "the guard never called the model"
    call.cancel()

    assert spy.done.wait(10), "the guard did not stop after the cancellation"
    [outcome] = spy.outcomes
    assert isinstance(outcome, Cancelled)  # no run, no verdict, no fallback
    assert call.cancelled()
    with pytest.raises(grpc.FutureCancelledError):
        call.result()
    assert len(model_server.requests) == 1  # the cancelled review made no second attempt


# --- the grounding checks run after a model engine too; the lower classification wins --------------


def test_a_lenient_model_verifier_cannot_confirm_a_fabricated_entity(verifier, model_server):
    inp = make_input()
    lie = inp.verified_executor_output.claims[0].model_copy(
        update={"claim_text": "payment-service CPU 92%，由 redis-cluster-7 主节点故障引起"})
    inp.verified_executor_output.claims[0] = lie
    model_server.add(completion(json.dumps(model_output())))  # the model calls everything observed
    stub, _ = verifier()
    request = verifier_pb2.VerifyClaimsRequest(input=plain_to_message(inp, verifier_types_pb2.VerifierInput))
    response = stub.VerifyClaims(request, timeout=CALL_TIMEOUT)

    assert _status(response) == "COMPLETED"
    check = response.output.claim_checks[0]
    assert spec_value(enums_pb2.Verification.DESCRIPTOR, check.verification) == "external_unknown"
    assert check.check_id == "key_term.absent" and check.fabricated_key
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.output.verdict) == "REJECT"
    assert spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective.effective_verdict) == "REJECT"


def test_a_model_semantic_guard_cannot_pass_a_draft_with_an_unconfirmed_destructive_action(verifier, model_server):
    model_server.add(completion(SUPPORTED))
    stub, _ = verifier()
    destructive = draft(action_plan=("重启 payment-service 全部实例",))
    destructive.action_plan[0].requires_human_confirmation = False
    response = stub.ReviewDraft(_review_request(destructive), timeout=CALL_TIMEOUT)

    assert _status(response) == "COMPLETED"
    assert spec_value(enums_pb2.SemanticVerdict.DESCRIPTOR, response.verdict) == "UNSUPPORTED"
    assert [(f.item, f.check_id) for f in response.findings] == [("action_plan[0]", "action.state_change")]
