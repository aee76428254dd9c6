"""ComposeAnswer carries the answer as a structure beside the text, over the real ComposerService:
the text is the structure's rendering, for the templates, a model's
rephrasing and a fallback; a model line carries only citations the template's lines had."""

from __future__ import annotations

import pytest

from attest.gateway.v1 import answer_pb2
from services.composer.servicer import ComposerServicer
from shared.core.structured_answer import StructuredAnswer, render
from shared.proto_convert import message_to_model
from tests.grpc.test_composer_openai import SERVER_SETTINGS, _compose, _input, composer, rephrase  # noqa: F401
from tests.unit.test_composer_templates import LOGS, ROOT, SYMPTOM

VERIFIED = {(b.source_invocation_id, b.tool_name, b.raw_path, b.evidence_excerpt)
            for claim in (SYMPTOM, LOGS, ROOT) for b in claim.evidence_bindings}


def _structured(response) -> StructuredAnswer:
    assert response.HasField("structured_answer")
    return message_to_model(response.structured_answer, StructuredAnswer)


def _citations(structured: StructuredAnswer):
    return [(s.title, i, c) for s in structured.sections for i in s.items for c in i.citations]


def test_the_template_answer_arrives_with_its_structure(serve_role):
    response = _compose(serve_role("composer", ComposerServicer(), SERVER_SETTINGS), _input())
    structured = _structured(response)
    assert render(structured) == response.output.answer
    kinds = [s.kind for s in response.structured_answer.sections]
    assert kinds[:3] == [answer_pb2.SECTION_KIND_CONFIDENCE, answer_pb2.SECTION_KIND_CONCLUSION,
                         answer_pb2.SECTION_KIND_EVIDENCE]
    assert structured.direct_answer == response.output.sections["结论"].lines[0]
    cited = _citations(structured)
    assert {s for s, _, _ in cited} >= {"结论", "依据"}
    assert all((c.invocation_id, c.tool_name, c.raw_path, c.excerpt) in VERIFIED for _, _, c in cited)


def test_a_model_rephrasing_keeps_only_the_template_citations(composer, model_server):  # noqa: F811
    smoother = "综合本次运行的证据，payment-service CPU 使用率 92%，日志同时出现 upstream timeout。"
    model_server.add(rephrase(lambda title, lines: [smoother] if title == "结论" else lines))
    response = _compose(composer(), _input())
    assert response.output.template == "model:composer.v1"
    structured = _structured(response)
    assert render(structured) == response.output.answer
    conclusion = next(s for s in structured.sections if s.title == "结论")
    rephrased = conclusion.items[1]
    assert (rephrased.text, rephrased.basis, rephrased.citations) == (smoother, "COMPOSED_REPHRASING", [])
    assert all((c.invocation_id, c.tool_name, c.raw_path, c.excerpt) in VERIFIED for _, _, c in _citations(structured))


@pytest.mark.parametrize("fallback_type", ["PRE_VERIFICATION", "SEMANTIC_UNAVAILABLE", "INSUFFICIENT_EVIDENCE"])
def test_a_fallback_arrives_with_its_structure(serve_role, fallback_type):
    response = _compose(serve_role("composer", ComposerServicer(), SERVER_SETTINGS), _input(None, fallback_type=fallback_type))
    structured = _structured(response)
    assert render(structured) == response.output.answer
    assert structured.sections[0].kind == "EXPLANATION" and not _citations(structured)
