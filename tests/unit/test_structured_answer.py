"""The structured answer: the text is rendered from it, its citations are only
what the gatekeeper verified, a metric citation's series comes from the stored result, bounded;
retryable is one rule; `attest ask` draws a metric fact's series on its own line under it."""

import json

import pytest

from attest.gateway.v1 import answer_pb2, gateway_pb2
from gateway.answer_render import answer_lines
from gateway.sparkline import BARS, sparkline
from shared.core.contracts import ComposerInput, ExecutorEvidenceV2, FailedCall, ServiceCoverage, UnknownService
from shared.core.series_window import series_window
from shared.core.structured_answer import MAX_SERIES_POINTS, render, retryable
from shared.core.templates import compose_answer
from shared.core.tool_results import read_result
from shared.proto_convert import plain_to_message
from tests.unit.test_composer_templates import LOGS, ROOT, SYMPTOM, compose
from tests.unit.test_composer_templates import check as claim_check

VERDICTS = [
    ("PASS", [claim_check(SYMPTOM, "direct_observation"), claim_check(LOGS, "direct_observation"),
              claim_check(ROOT, "reasonable_inference")]),
    ("LOW_CONFID", [claim_check(SYMPTOM, "direct_observation"), claim_check(LOGS, "reasonable_inference"),
                    claim_check(ROOT, "unsupported")]),
    ("REJECT", [claim_check(SYMPTOM, "direct_observation"), claim_check(LOGS, "contradicted"),
                claim_check(ROOT, "unsupported")]),
]
BINDINGS = {(b.source_invocation_id, b.tool_name, b.raw_path, b.evidence_excerpt)
            for claim in (SYMPTOM, LOGS, ROOT) for b in claim.evidence_bindings}


def _items(structured):
    return [(section, item) for section in structured.sections for item in section.items]


@pytest.mark.parametrize(("verdict", "checks"), VERDICTS)
def test_a_composed_answer_is_the_rendering_of_its_structure(verdict, checks):
    out = compose(verdict, checks)
    structured = out.structured_answer
    assert render(structured) == out.answer
    assert [s.title for s in structured.sections] == list(out.sections)
    for section in structured.sections:
        assert [i.text for i in section.items] == out.sections[section.title]
    conclusion = next(s for s in structured.sections if s.kind == "CONCLUSION")
    assert structured.direct_answer == conclusion.items[0].text
    assert structured.sections[0].kind == "CONFIDENCE" and out.answer.startswith(structured.sections[0].items[0].text)


@pytest.mark.parametrize(("verdict", "checks"), VERDICTS)
def test_citations_are_the_verified_bindings_and_only_on_confirmed_lines(verdict, checks):
    structured = compose(verdict, checks).structured_answer
    verified = {c.claim_id: c.verification for c in checks}
    cited = [(s, i) for s, i in _items(structured) if i.citations]
    assert cited
    for _section, item in cited:
        assert item.citation_marker and item.citation_marker in item.text
        for c in item.citations:
            assert (c.invocation_id, c.tool_name, c.raw_path, c.excerpt) in BINDINGS
        if item.basis == "CHECKED_CLAIM":
            assert item.verification in ("direct_observation", "reasonable_inference")
    for section, item in _items(structured):
        if section.kind == "GAPS":
            assert not item.citations
            assert item.basis in ("CHECKED_CLAIM", "OURS")
            assert item.verification is None or item.verification not in ("direct_observation",) or verdict == "REJECT"
    facts = [i for s, i in _items(structured) if s.title in ("依据", "已确认")]
    assert any(i.citations and i.verification == verified["c1"] for i in facts)


def test_an_inference_carries_its_label_and_a_side_text_its_basis():
    out = compose("PASS", VERDICTS[0][1])
    evidence = next(s for s in out.structured_answer.sections if s.title == "依据")
    inferred = [i for i in evidence.items if i.verification == "reasonable_inference"]
    assert inferred and all(i.verification_label == "由证据推断，非直接观察" for i in inferred)
    advice = next(s for s in out.structured_answer.sections if s.kind == "ACTIONS")
    assert advice.items[0].basis == "CHECKED_SIDE_TEXT" and not advice.items[0].citations
    low = compose("LOW_CONFID", VERDICTS[1][1]).structured_answer
    possible = next(s for s in low.sections if s.kind == "HYPOTHESES")
    assert {i.basis for i in possible.items} <= {"CHECKED_CLAIM", "CHECKED_SIDE_TEXT"}
    assert any(i.verification_label == "由证据推断（尚待进一步确认）" and i.citations for i in possible.items)


FALLBACKS = [
    dict(fallback_type="PRE_VERIFICATION", fallback_cause="TECHNICAL_FAILURE"),
    dict(fallback_type="PRE_VERIFICATION", fallback_cause="CITATION_CHECK_FAILED", failed_rules=["evidence.excerpt_mismatch"]),
    dict(fallback_type="PRE_VERIFICATION", fallback_cause="INVALID_OUTPUT"),
    dict(fallback_type="PRE_VERIFICATION", fallback_cause="NO_VERIFIED_CLAIM"),
    dict(fallback_type="MISSING_REQUIRED_CONTEXT"),
    dict(fallback_type="UNKNOWN_SERVICE", service_coverage=ServiceCoverage(
        unknown=[UnknownService(name="paymnet-service", suggestions=["payment-service"])])),
    dict(fallback_type="EVIDENCE_VALIDATION_FAILED", fallback_cause="CITATION_CHECK_FAILED"),
    dict(fallback_type="SEMANTIC_UNSUPPORTED"),
    dict(fallback_type="SEMANTIC_UNAVAILABLE"),
    dict(fallback_type="INSUFFICIENT_EVIDENCE"),
    dict(fallback_type="AGENT_UNAVAILABLE"),
    dict(fallback_type="NO_VERIFIED_PROGRESS"),
]


@pytest.mark.parametrize("fields", FALLBACKS, ids=lambda f: f"{f['fallback_type']}-{f.get('fallback_cause', '')}")
def test_every_fallback_is_the_rendering_of_its_structure(fields):
    out = compose_answer(ComposerInput(query="q", **fields))
    structured = out.structured_answer
    assert render(structured) == out.answer
    assert structured.sections[0].kind == "EXPLANATION" and structured.sections[0].title == "说明"
    assert structured.direct_answer == structured.sections[0].items[0].text
    assert all(not i.citations and i.basis == "OURS" for _, i in _items(structured))
    assert {s.kind for s in structured.sections} <= {"EXPLANATION", "SOURCES", "ACTIONS", "FAILED_CALLS"}


@pytest.mark.parametrize(("status", "fallback_type", "cause", "failed", "expected"), [
    ("COMPLETED", None, None, 0, False),
    ("COMPLETED", None, None, 1, True),
    ("FALLBACK", "PRE_VERIFICATION", "TECHNICAL_FAILURE", 0, True),
    ("FALLBACK", "PRE_VERIFICATION", "CITATION_CHECK_FAILED", 0, False),
    ("FALLBACK", "PRE_VERIFICATION", "INVALID_OUTPUT", 0, True),
    ("FALLBACK", "PRE_VERIFICATION", "NO_VERIFIED_CLAIM", 0, True),
    ("FALLBACK", "PRE_VERIFICATION", None, 0, True),
    ("FALLBACK", "EVIDENCE_VALIDATION_FAILED", "CITATION_CHECK_FAILED", 0, False),
    ("FALLBACK", "EVIDENCE_VALIDATION_FAILED", "TECHNICAL_FAILURE", 0, True),
    ("FALLBACK", "MISSING_REQUIRED_CONTEXT", None, 0, False),
    ("FALLBACK", "UNKNOWN_SERVICE", None, 0, False),
    ("FALLBACK", "SEMANTIC_UNSUPPORTED", None, 0, False),
    ("FALLBACK", "INSUFFICIENT_EVIDENCE", None, 0, False),
    ("FALLBACK", "SEMANTIC_UNAVAILABLE", None, 0, True),
    ("FALLBACK", "AGENT_UNAVAILABLE", None, 0, True),
    ("FALLBACK", "NO_VERIFIED_PROGRESS", None, 0, True),
    ("CANCELLED", None, None, 0, True),
])
def test_retryable_follows_the_outcome_table(status, fallback_type, cause, failed, expected):
    assert retryable(status, fallback_type, cause, failed) is expected


def _metrics(points, onset_index=None):
    series = {"metric": "cpu_usage", "unit": "%", "points": points}
    if onset_index is not None:
        series["onset"] = {"index": onset_index, "at": points[onset_index][0], "direction": "up",
                           "before": 10.0, "after": 90.0}
    return read_result("query_metrics", json.dumps({"tool": "query_metrics", "service": "payment-service",
                                                     "series": [series]}))


POINTS = [[f"2026-11-30T{h:02d}:{m:02d}:00Z", float(h * 60 + m)] for h in range(10, 13) for m in range(60)]


def test_a_series_window_is_bounded_and_equal_to_the_stored_points_around_the_cited_point():
    result = _metrics(POINTS, onset_index=100)
    window = series_window(result, "series[0].points[150]")
    assert len(window.points) == MAX_SERIES_POINTS and window.truncated
    assert window.points[window.focus].timestamp == POINTS[150][0]
    stored = POINTS[window.first_index:window.first_index + len(window.points)]
    assert [[p.timestamp, p.value] for p in window.points] == stored
    around_onset = series_window(result, "series[0].onset")
    assert around_onset.points[around_onset.focus].timestamp == POINTS[100][0]
    at_end = series_window(result, "series[0].points[179]")
    assert at_end.points[-1].timestamp == POINTS[179][0] and len(at_end.points) == MAX_SERIES_POINTS
    short = series_window(_metrics(POINTS[:5]), "series[0].summary")
    assert len(short.points) == 5 and not short.truncated


def test_no_window_without_a_series():
    result = _metrics(POINTS[:5])
    assert series_window(result, "series[3].points[0]") is None
    assert series_window(result, "summary") is None
    assert series_window(read_result("query_logs", json.dumps({"tool": "query_logs", "total_matches": 0, "hits": []})),
                         "hits[0]") is None
    assert series_window(result, "").points  # a whole call of one series (single-ReAct)


def test_sparkline_draws_the_shape_with_eight_levels():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == BARS
    assert sparkline([5, 5, 5]) == "▁▁▁"
    assert sparkline([]) == ""
    assert len(sparkline(list(range(200)))) == 24
    line = sparkline([1, 1, 1, 9, 9, 9])
    assert line[0] == "▁" and line[-1] == "█"


def test_attest_ask_prints_the_metric_fact_with_its_series_on_the_next_line():
    structured = compose("PASS", VERDICTS[0][1]).structured_answer
    window = series_window(_metrics(POINTS[:8]), "series[0].points[3]")
    for section in structured.sections:
        for item in section.items:
            for c in item.citations:
                if c.tool_name == "query_metrics":
                    c.series = window
    message = plain_to_message(structured, answer_pb2.StructuredAnswer)
    lines = [line.plain for line in answer_lines(gateway_pb2.DiagnoseResponse(structured_answer=message), "q", None,
                                                 "inline")]
    plain = compose("PASS", VERDICTS[0][1]).answer.split("\n")
    sparked = [k for k, line in enumerate(lines) if line.startswith("  cpu_usage ")]
    assert len(sparked) == 1, "one line per series, under the first fact that cites it"
    fact = lines[sparked[0] - 1]
    assert fact in plain and "query_metrics" in fact
    assert lines[sparked[0]] == f"  cpu_usage {sparkline([p[1] for p in POINTS[:8]])} 600–607%"


def test_failed_calls_keep_their_section_in_the_structure():
    failed = [FailedCall(tool_name="query_logs", invocation_id=7, service="payment-service", error_class="timeout")]
    out = compose_answer(ComposerInput(query="payment-service 有异常吗", effective_verdict="LOW_CONFID",
                                       verified_executor_output=ExecutorEvidenceV2(claims=[SYMPTOM]),
                                       claim_checks=[claim_check(SYMPTOM, "direct_observation")], failed_calls=failed))
    kinds = [s.kind for s in out.structured_answer.sections]
    assert "FAILED_CALLS" in kinds and render(out.structured_answer) == out.answer
