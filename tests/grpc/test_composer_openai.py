"""The model composer behind the real ComposerService on an ephemeral port, with a scripted model
over real HTTP: the model may rephrase the template answer; anything it adds sends the answer back
to the fixed template, and the response records which path was used and why."""

from __future__ import annotations

import json

import pytest

from attest.common.v1 import composer_types_pb2
from attest.composer.v1 import composer_pb2
from services.composer.servicer import ComposerServicer, build_composer
from shared.config import ComposerSettings
from shared.core.contracts import ComposerInput, ExecutorEvidenceV2, Hypothesis, RecommendedAction
from shared.model_client import OpenAIChatClient
from shared.proto_convert import plain_to_message
from tests.scripted_model_server import Status, completion
from tests.unit.test_composer_templates import ACTION, LOGS, ROOT, SYMPTOM, check

CALL_TIMEOUT = 30
SERVER_SETTINGS = ComposerSettings(port=0, max_workers=4, shutdown_grace_seconds=0.5)


@pytest.fixture()
def composer(scripted_settings, serve_role):
    """`composer(**model_settings)` -> a stub of a composer whose model is the scripted one."""

    def start(**overrides):
        settings = scripted_settings(**overrides)
        return serve_role("composer", ComposerServicer(build_composer(settings, OpenAIChatClient(settings))),
                          SERVER_SETTINGS)

    return start


def _input(verdict: str | None = "PASS", checks=None, fallback_type: str | None = None) -> ComposerInput:
    return ComposerInput(
        query="为什么 payment-service 的 CPU 这么高？过去 2 小时",
        effective_verdict=verdict,
        verified_executor_output=ExecutorEvidenceV2(
            claims=[SYMPTOM, LOGS, ROOT],
            hypotheses=[Hypothesis(text="db-primary 的连接数可能接近上限")],
            recommended_actions=[RecommendedAction(text=ACTION)],
        ),
        claim_checks=checks if checks is not None else [
            check(SYMPTOM, "direct_observation"), check(LOGS, "direct_observation"), check(ROOT, "reasonable_inference")
        ],
        fallback_type=fallback_type,
    )


def _compose(stub, inp: ComposerInput) -> composer_pb2.ComposeAnswerResponse:
    request = composer_pb2.ComposeAnswerRequest(input=plain_to_message(inp, composer_types_pb2.ComposerInput))
    return stub.ComposeAnswer(request, timeout=CALL_TIMEOUT)


def _sections_sent(body: dict) -> list[dict]:
    [user] = [m for m in body["messages"] if m["role"] == "user"]
    return json.loads(user["content"])["sections"]


def rephrase(edit=lambda title, lines: lines):
    """A scripted model that returns the sections it was given, each passed through `edit`."""

    def reply(body: dict) -> dict:
        sections = [{"title": s["title"], "lines": edit(s["title"], list(s["lines"]))} for s in _sections_sent(body)]
        return completion(json.dumps({"sections": sections}, ensure_ascii=False))

    return reply


def test_a_faithful_rephrasing_is_used_and_recorded(composer, model_server):
    smoother = "综合本次运行的证据，payment-service CPU 使用率 92%，日志同时出现 upstream timeout。"
    model_server.add(rephrase(lambda title, lines: [smoother] if title == "结论" else lines))
    response = _compose(composer(), _input())

    out = response.output
    assert (out.template, out.used_fallback_template, out.fallback_reason) == ("model:composer.v1", False, "")
    # The first line (the direct answer) is ours; the model's 【结论】 follows it.
    assert list(out.sections["结论"].lines) == [FIRST_LINE, smoother]
    assert out.answer.startswith("可信度：高")  # the verdict line is always the template's
    assert smoother in out.answer
    assert (response.prompt.name, response.prompt.version) == ("composer", "1")
    assert (response.model_call.provider, response.model_call.attempts) == ("openai", 1)
    # The model saw only the template's sections (verified material), never executor JSON, and
    # never the first line.
    [body] = model_server.requests
    assert [s["title"] for s in _sections_sent(body)] == ["结论", "依据", "建议"]
    assert "user_facing_answer" not in json.dumps(body, ensure_ascii=False)
    assert "最可能的原因" not in json.dumps(body, ensure_ascii=False)


FIRST_LINE = f"最可能的原因：{ROOT.claim_text} [证据: query_logs #13 hits[0]]"


@pytest.mark.parametrize(
    "edit",
    [
        # A direct answer of its own in front of the paragraph it was given.
        lambda t, lines: ["证据不支持：payment-service CPU 使用率 92%。", *lines] if t == "结论" else lines,
        lambda t, lines: ["在所查范围内未发现异常。", *lines] if t == "结论" else lines,
        lambda t, lines: [*lines, "payment-service 一切正常。"] if t == "依据" else lines,
    ],
)
def test_a_model_cannot_replace_or_contradict_the_first_line(composer, model_server, edit):
    model_server.add(rephrase(edit))
    out = _compose(composer(), _input()).output
    assert out.used_fallback_template and out.template == "pass.v1"
    assert "first line" in out.fallback_reason
    assert list(out.sections["结论"].lines)[0] == FIRST_LINE
    assert "证据不支持" not in out.answer and "未发现异常" not in out.answer and "一切正常" not in out.answer


def test_a_model_dropping_the_paragraph_still_gets_our_first_line(composer, model_server):
    model_server.add(rephrase(lambda t, lines: ["各项依据见下。"] if t == "结论" else lines))
    out = _compose(composer(), _input()).output
    assert not out.used_fallback_template, out.fallback_reason
    assert list(out.sections["结论"].lines) == [FIRST_LINE, "各项依据见下。"]


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t, lines: [line.replace("92%", "95%") for line in lines], "number 95"),
        (lambda t, lines: lines + ["order-service 也受到了影响。"] if t == "依据" else lines, "name order-service"),
        (lambda t, lines: lines + ["查询范围覆盖过去 2 小时。"] if t == "结论" else lines, "number 2"),
        (lambda t, lines: [line.replace("query_metrics #12", "query_metrics #99") for line in lines], "number 99"),
        (lambda t, lines: lines + ['{"user_facing_answer": "CPU 高"}'] if t == "建议" else lines, "raw JSON"),
        (lambda t, lines: lines + ["详见 user_facing_answer。"] if t == "建议" else lines, "user_facing_answer"),
    ],
)
def test_a_model_adding_anything_falls_back_to_the_template(composer, model_server, edit, why):
    model_server.add(rephrase(edit))
    out = _compose(composer(), _input()).output
    assert out.used_fallback_template and out.template == "pass.v1"
    assert why in out.fallback_reason
    assert "95%" not in out.answer and "order-service" not in out.answer and "#99" not in out.answer
    assert "user_facing_answer" not in out.answer


def test_a_reject_rephrasing_with_a_cause_falls_back(composer, model_server):
    checks = [check(SYMPTOM, "direct_observation"), check(LOGS, "contradicted"), check(ROOT, "reasonable_inference")]
    model_server.add(rephrase(lambda t, lines: lines + ["payment-service CPU 使用率 92% 是由于 query_logs 中的问题。"] if t == "已确认" else lines))
    out = _compose(composer(), _input("REJECT", checks)).output
    assert out.used_fallback_template and out.template == "reject.v1"
    assert "cause" in out.fallback_reason
    assert "由于" not in out.answer and ROOT.claim_text not in out.answer


def test_changed_sections_fall_back(composer, model_server):
    model_server.add(completion(json.dumps({"sections": [{"title": "结论", "lines": ["payment-service CPU 使用率 92%"]}]},
                                           ensure_ascii=False)))
    out = _compose(composer(), _input()).output
    assert out.used_fallback_template and "sections" in out.fallback_reason


def test_a_reply_that_is_not_the_composer_json_falls_back(composer, model_server):
    model_server.add(completion("结论：payment-service CPU 使用率 92%。"))
    out = _compose(composer(), _input()).output
    assert out.used_fallback_template and "not the composer JSON" in out.fallback_reason


def test_a_failed_model_call_falls_back(composer, model_server):
    model_server.add(Status(500), Status(500))
    response = _compose(composer(), _input())
    assert response.output.used_fallback_template and "model call failed" in response.output.fallback_reason
    assert response.model_call.attempts == 2


@pytest.mark.parametrize("fallback_type", ["PRE_VERIFICATION", "SEMANTIC_UNAVAILABLE", "INSUFFICIENT_EVIDENCE"])
def test_fallback_types_never_reach_the_model(composer, model_server, fallback_type):
    out = _compose(composer(), _input(None, fallback_type=fallback_type)).output
    assert out.used_fallback_template and out.template == f"fallback.{fallback_type.lower()}.v1"
    assert model_server.requests == []


def test_templates_are_the_default_composer(serve_role):
    response = _compose(serve_role("composer", ComposerServicer(), SERVER_SETTINGS), _input())
    assert (response.output.template, response.output.used_fallback_template) == ("pass.v1", False)
    assert (response.prompt.name, response.model_call.provider) == ("composer.templates", "embedded")
