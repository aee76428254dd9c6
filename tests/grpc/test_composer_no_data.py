"""The model composer over a checked scope without data, behind the real ComposerService with a
scripted model over real HTTP: the empty scopes cross the wire (ComposerInput.empty_scopes), the
first line says 无法确认 naming what was empty, the answer is never 「可信度：高」, and a model line
that passes a verdict on health sends the answer back to the template."""

from __future__ import annotations

from shared.no_data import empty_scopes
from tests.grpc.test_composer_openai import _compose, composer, rephrase  # noqa: F401  (fixture)
from tests.unit.test_no_data import START, _composer_input, _logs, _metrics

RUN = "run-1"


def _empty_input():
    return _composer_input(empty_scopes([_metrics(1), _logs(2)], RUN))


def test_a_faithful_rephrasing_keeps_our_cannot_tell_line(composer, model_server):  # noqa: F811
    model_server.add(rephrase())
    out = _compose(composer(), _empty_input()).output
    assert not out.used_fallback_template, out.fallback_reason
    first = list(out.sections["结论"].lines)[0]
    assert first.startswith(f"无法确认：api-gateway 在 {START} 至 ") and "没有数据（" in first, first
    assert "可信度：高" not in out.answer and "未发现异常" not in out.answer and "未显示异常" not in out.answer


def test_a_model_passing_a_verdict_on_health_falls_back(composer, model_server):  # noqa: F811
    model_server.add(rephrase(lambda title, lines: [*lines, "api-gateway 一切正常。"] if title == "已确认" else lines))
    out = _compose(composer(), _empty_input()).output
    assert out.used_fallback_template and out.template == "low_confid.v1", out.fallback_reason
    assert "denies an anomaly" in out.fallback_reason, out.fallback_reason
    assert "一切正常" not in out.answer
