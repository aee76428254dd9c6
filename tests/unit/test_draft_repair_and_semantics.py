"""Strict Draft parsing, the structural EvidenceRepair, and the check that a repair changed no
report semantics (what the gateway uses to reject a repair)."""

from __future__ import annotations

import json

import pytest

from services.executor.draft_parse import draft_schema, parse_draft_text
from services.executor.draft_repair import repair_references
from shared.core import guard_violations as codes
from shared.draft_contract import ActionPlanItem, Analysis, Conclusion, Draft, GuardViolation, Recommendation
from shared.draft_semantics import repair_changes_semantics

RUN_CALLS = ["call_7f3a91c2_1", "call_7f3a91c2_2", "call_7f3a91c2_3"]


def draft() -> Draft:
    return Draft(
        conclusion=Conclusion(text="payment-service 的 cpu_usage_percent 达到 96.7%。", analysis_refs=["a1"]),
        analyses=[
            Analysis(analysis_id="a1", kind="NORMAL", text="cpu_usage_percent 达到 96.7%。", tool_call_ids=[RUN_CALLS[0]]),
            Analysis(analysis_id="a2", kind="NEGATIVE_OBSERVATION", text="没有变更记录。", tool_call_ids=[RUN_CALLS[2]]),
        ],
        action_plan=[
            ActionPlanItem(text="定位 CPU 占用最高的线程。", analysis_refs=["a1"], requires_human_confirmation=False),
            ActionPlanItem(text="确认后扩容。", analysis_refs=["a1"], requires_human_confirmation=True),
        ],
        recommendations=[Recommendation(text="关注 GC。", analysis_refs=["a1"])],
        limitations=["根因尚未确认。"],
        missing_context=[],
    )


# --- strict parsing ------------------------------------------------------------------------------


def test_a_strictly_valid_draft_text_parses() -> None:
    text = json.dumps(draft().model_dump(mode="json"), ensure_ascii=False)
    parsed, detail = parse_draft_text(text)
    assert detail == "" and parsed == draft()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("payment-service 的 CPU 很高，建议扩容。", "not one JSON object"),
        ("```json\n{\"conclusion\": null, \"analyses\": []}\n```", "not one JSON object"),
        ('{"conclusion": null, "analyses": []} trailing', "not one JSON object"),
        ("[]", "not an object"),
        ('{"analyses": []}', "missing field 'conclusion'"),
        ('{"conclusion": null, "analyses": [], "root_cause": "x"}', "unknown field 'root_cause'"),
        ('{"conclusion": null, "analyses": [], "analyses": []}', "duplicate key 'analyses'"),
        ('{"conclusion": {"text": "x"}, "analyses": []}', "conclusion: missing field 'analysis_refs'"),
        ('{"conclusion": null, "analyses": [{"analysis_id": "a1", "kind": "NORMAL", "text": "t"}]}',
         "analyses[0]: missing field 'tool_call_ids'"),
        ('{"conclusion": null, "analyses": [{"analysis_id": "a1", "kind": "POSITIVE", "text": "t", "tool_call_ids": []}]}',
         "analyses.0.kind"),
        ('{"conclusion": null, "analyses": [], "action_plan": [{"text": "t", "analysis_refs": ["a1"], '
         '"requires_human_confirmation": "yes"}]}', "requires_human_confirmation"),
        ("", "empty"),
    ],
    ids=["prose", "fenced", "trailing-text", "array", "no-conclusion-key", "unknown-key", "duplicate-key",
         "item-missing-field", "analysis-missing-field", "bad-kind", "string-bool", "empty"],
)
def test_anything_but_a_strict_draft_is_no_draft(text: str, why: str) -> None:
    parsed, detail = parse_draft_text(text)
    assert parsed is None
    assert why in detail, detail


def test_the_schema_bounds_every_string_and_array() -> None:
    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("type") == "string":
                assert "maxLength" in node or "enum" in node, node
            if node.get("type") == "array":
                assert "maxItems" in node, node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    schema = draft_schema()
    walk(schema)
    assert set(schema["required"]) == set(Draft.model_fields)


# --- embedded repair -----------------------------------------------------------------------------


def violation(code: str, analysis_id: str = "", tool_call_id: str = "") -> GuardViolation:
    return GuardViolation(code=code, analysis_id=analysis_id, tool_call_id=tool_call_id)


def test_an_analysis_ref_differing_in_case_or_whitespace_is_pointed_at_the_existing_id() -> None:
    broken = draft()
    broken.conclusion.analysis_refs = [" A1"]
    broken.action_plan[1].analysis_refs = ["a 1"]
    repaired = repair_references(
        broken, [violation(codes.REPORT_REF_UNKNOWN, " A1"), violation(codes.REPORT_REF_UNKNOWN, "a 1")], RUN_CALLS,
    )
    assert repaired == draft()
    assert broken.conclusion.analysis_refs == [" A1"]  # the input is not mutated


@pytest.mark.parametrize("mangled", ["7f3a91c2_1", "CALL_7F3A91C2_1", "call_7f3a91c2_1 ", "call_7f3a91c2_1-extra"],
                         ids=["suffix", "case", "whitespace", "decorated"])
def test_a_tool_call_id_that_designates_one_current_run_call_is_restored(mangled: str) -> None:
    broken = draft()
    broken.analyses[0].tool_call_ids = [mangled]
    repaired = repair_references(broken, [violation(codes.TOOL_REF_NOT_FOUND, "a1", mangled)], RUN_CALLS)
    assert repaired.analyses[0].tool_call_ids == [RUN_CALLS[0]]
    assert repair_changes_semantics(broken, repaired) is None


@pytest.mark.parametrize("mangled", ["call_7f3a91c2", "_1", "call_000000_9"], ids=["ambiguous-prefix", "too-short", "no-match"])
def test_a_tool_call_id_without_one_sure_target_is_left_alone(mangled: str) -> None:
    broken = draft()
    broken.analyses[0].tool_call_ids = [mangled]
    repaired = repair_references(broken, [violation(codes.TOOL_REF_NOT_FOUND, "a1", mangled)], RUN_CALLS)
    assert repaired == broken


def test_without_violations_the_draft_comes_back_unchanged() -> None:
    broken = draft()
    broken.conclusion.analysis_refs = ["A1"]
    assert repair_references(broken, [], RUN_CALLS) == broken
    # Violations the repair does not handle change nothing either.
    assert repair_references(broken, [violation(codes.KIND_NORMAL_WITHOUT_EVIDENCE, "a1", RUN_CALLS[0])], RUN_CALLS) == broken


# --- repair_changes_semantics --------------------------------------------------------------------


def changed(edit) -> Draft:
    after = draft()
    edit(after)
    return after


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda d: setattr(d.conclusion, "text", d.conclusion.text + " "), "conclusion: the text changed"),
        (lambda d: setattr(d, "conclusion", None), "conclusion: removed"),
        (lambda d: setattr(d.analyses[0], "text", "cpu_usage_percent 达到 69.7%。"), "analyses[0]: the text changed"),
        (lambda d: setattr(d.analyses[1], "kind", "NORMAL"), "analyses[1]: the kind changed"),
        (lambda d: d.analyses.reverse(), "analyses: the order changed"),
        (lambda d: d.analyses.pop(), "analyses: 2 item(s) became 1"),
        (lambda d: setattr(d.action_plan[1], "requires_human_confirmation", False),
         "action_plan[1]: the requires_human_confirmation changed"),
        (lambda d: d.action_plan.reverse(), "action_plan: the order changed"),
        (lambda d: setattr(d.recommendations[0], "text", "忽略 GC。"), "recommendations[0]: the text changed"),
        (lambda d: d.limitations.append("新增限制。"), "limitations: 1 item(s) became 2"),
        (lambda d: d.missing_context.append("服务名"), "missing_context: 0 item(s) became 1"),
    ],
    ids=["conclusion-text", "conclusion-removed", "analysis-text", "analysis-kind", "analysis-order", "analysis-removed",
         "confirmation-flag", "action-order", "recommendation-text", "limitation-added", "missing-context-added"],
)
def test_a_repair_that_changes_what_the_reader_sees_is_detected(edit, reason: str) -> None:
    assert repair_changes_semantics(draft(), changed(edit)) == reason


def test_a_conclusion_added_by_repair_is_detected() -> None:
    before = changed(lambda d: setattr(d, "conclusion", None))
    assert repair_changes_semantics(before, draft()) == "conclusion: added"


def test_ids_and_references_may_change() -> None:
    def rename(d: Draft) -> None:
        d.analyses[0].analysis_id = "x1"
        d.analyses[0].tool_call_ids = [RUN_CALLS[1]]
        d.conclusion.analysis_refs = ["x1", "a2"]
        d.action_plan[0].analysis_refs = []
        d.recommendations[0].analysis_refs = ["x1"]

    assert repair_changes_semantics(draft(), changed(rename)) is None
