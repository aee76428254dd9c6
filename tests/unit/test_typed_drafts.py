"""Typed single-ReAct Drafts (docs/statements.md): the model states, Attest writes the texts, the
guards compare typed against typed.

Each test starts from one honest typed Draft over a metrics call and a logs call of the run (the
invocations of tests/unit/test_evidence_guard.py) and changes one thing.
"""

from __future__ import annotations

import copy
import json

from services.executor.draft_parse import draft_schema, parse_draft_text
from services.executor.draft_render import ref_texts, render_draft
from services.executor.draft_repair import repair_references
from services.gatekeeper.evidence_guard import guard_draft
from services.verifier.draft_grounding import ground_draft
from services.verifier.embedded_semantic_guard import review_draft
from shared.config import configured_failure_modes
from shared.core import guard_violations as codes
from shared.draft_contract import Draft, GuardViolation, for_semantic_guard
from shared.draft_semantics import repair_changes_semantics
from tests.unit.test_evidence_guard import RUN, TIMEOUT_LINE, logs_invocation, metrics_invocation

MODES = configured_failure_modes()
INVOCATIONS = [metrics_invocation(1, "call_m", [12.0, 40.5, 96.7]), logs_invocation(2, "call_l", [TIMEOUT_LINE])]
PEAK = {"subject": "payment-service", "signal": {"kind": "metric", "name": "cpu_usage"}, "state": "level",
        "standing": "observed",
        "quantities": [{"value": 96.7, "unit": "%", "aggregate": "max", "at": "2026-11-29T10:32:00Z", "precision": 1}],
        "refs": [{"tool_call_id": "call_m", "raw_path": "series[0].summary"}]}
LINE = {"subject": "payment-service", "signal": {"kind": "log", "name": "upstream timeout calling db-primary"},
        "state": "event", "standing": "observed", "refs": [{"tool_call_id": "call_l", "raw_path": "hits[0]"}]}


def _mechanism(entity: str = "cpu"):
    return next(m for m in MODES.mechanisms if m.entity == entity and m.remedies_zh and len(m.next_steps_zh) > 1)


def _typed() -> dict:
    mechanism = _mechanism().id
    return {
        "conclusion": {"kind": "cause_unconfirmed", "statement": copy.deepcopy(PEAK), "analysis_refs": ["a1"]},
        "analyses": [
            {"analysis_id": "a1", "kind": "NORMAL", "statement": copy.deepcopy(PEAK), "tool_call_ids": ["call_m"]},
            {"analysis_id": "a2", "kind": "NORMAL", "statement": copy.deepcopy(LINE), "tool_call_ids": ["call_l"]},
        ],
        "action_plan": [{"statement": {"action": {"mechanism": mechanism, "kind": "next_step", "index": 0}},
                         "analysis_refs": ["a1"], "requires_human_confirmation": False}],
        "recommendations": [{"statement": {"action": {"mechanism": mechanism, "kind": "next_step", "index": 1}},
                             "analysis_refs": ["a1"]}],
        "limitations": [],
        "missing_context": [],
    }


def _rendered(data: dict) -> Draft:
    draft, detail = parse_draft_text(json.dumps(data, ensure_ascii=False))
    assert draft is not None, detail
    return render_draft(draft, ref_texts(INVOCATIONS), MODES)


def _review(draft: Draft) -> tuple[list[str], list]:
    """EvidenceGuard's violation codes, then SemanticGuard's findings (the embedded engine's
    problems and the deterministic grounding) on the Draft as SemanticGuard sees it."""
    guard = guard_draft(RUN, draft, INVOCATIONS)
    if not guard.passed:
        return [v.code for v in guard.violations], []
    seen = for_semantic_guard(draft)
    review = review_draft(seen, guard.snapshot)
    engine = [] if review.verdict == "SUPPORTED" else [review.reason]
    return [], engine + ground_draft("payment-service CPU 为什么这么高？", seen, guard.snapshot)


# --- the model states, Attest writes ------------------------------------------------------------


def test_a_typed_draft_needs_no_text_and_attest_writes_every_text():
    draft = _rendered(_typed())
    assert draft.conclusion.text == ("原因尚未由证据确认；最明显的线索：payment-service 的 cpu_usage 最高为 96.7%"
                                     "（2026-11-29T10:32:00Z）")
    assert draft.analyses[0].text == "payment-service 的 cpu_usage 最高为 96.7%（2026-11-29T10:32:00Z）"
    # The line is quoted from the stored result, its timestamp shown as a time of the answer.
    assert draft.analyses[1].text == (f"payment-service 的日志出现（2026-11-29T10:10:00Z）：「ERROR payment-service "
                                      f"host=node-1 {TIMEOUT_LINE}」")
    assert draft.action_plan[0].text == _mechanism().next_steps_zh[0]
    assert draft.recommendations[0].text == _mechanism().next_steps_zh[1]


def test_an_untyped_item_still_needs_its_text():
    data = _typed()
    del data["analyses"][0]["statement"]
    draft, detail = parse_draft_text(json.dumps(data, ensure_ascii=False))
    assert draft is None and "analyses[0]: missing field 'text'" in detail


def test_the_model_text_of_a_typed_item_is_never_shown():
    data = _typed()
    data["analyses"][0]["text"] = "payment-service 的 CPU 被 Redis 故障拖垮"
    assert "Redis" not in _rendered(data).analyses[0].text


def test_each_conclusion_kind_opens_with_its_direct_answer():
    openings = {"cause_named": "最可能的原因：", "yes": "是：", "no": "证据不支持：", "found": "发现异常：",
                "cannot_confirm": "无法确认：", "finding": "payment-service"}
    for kind, opening in openings.items():
        data = _typed()
        data["conclusion"]["kind"] = kind
        assert _rendered(data).conclusion.text.startswith(opening), kind
    data = _typed()
    data["conclusion"]["kind"] = "healthy"
    assert _rendered(data).conclusion.text == "在所查范围内未发现异常（" + _rendered(_typed()).analyses[0].text + "）"


def test_a_remedy_always_needs_confirmation_whatever_the_model_says():
    data = _typed()
    data["action_plan"][0]["statement"]["action"].update(kind="remedy", index=0)
    data["recommendations"][0]["statement"]["action"].update(kind="remedy", index=0)
    draft = _rendered(data)
    assert draft.action_plan[0].requires_human_confirmation is True
    assert draft.recommendations[0].text.endswith("（需人工确认）")
    assert _review(draft) == ([], [])


def test_a_cause_reads_as_an_inference_and_a_hypothesis_as_one():
    data = _typed()
    cause = {"subject": "payment-service", "state": "event", "standing": "observed", "refs": LINE["refs"] + PEAK["refs"],
             "cause": {"cause": copy.deepcopy(LINE), "effect": copy.deepcopy(PEAK), "mechanism": ""}}
    data["conclusion"] = {"kind": "cause_unconfirmed", "statement": cause, "analysis_refs": ["a1", "a2"]}
    assert "（推断）" in _rendered(data).conclusion.text
    data["conclusion"]["statement"]["standing"] = "hypothesis"
    text = _rendered(data).conclusion.text
    assert "可能：" in text and text.endswith("（待验证）")


def test_the_schema_asks_for_statements_not_texts():
    schema = draft_schema()
    analysis = schema["properties"]["analyses"]["items"]
    assert "statement" in analysis["required"] and "text" not in analysis["properties"]
    refs = analysis["properties"]["statement"]["properties"]["refs"]["items"]
    assert refs["required"] == ["tool_call_id", "raw_path"]


# --- EvidenceGuard: a statement's refs --------------------------------------------------------------


def test_an_honest_typed_draft_passes_both_guards():
    assert _review(_rendered(_typed())) == ([], [])


def test_a_statement_citing_a_call_its_analysis_does_not_cite_is_a_violation():
    data = _typed()
    data["analyses"][0]["statement"]["refs"] = copy.deepcopy(LINE["refs"])
    codes_found, _ = _review(_rendered(data))
    assert codes.STATEMENT_REF_UNCITED in codes_found


def test_a_statement_citing_a_path_the_result_lacks_is_a_violation():
    data = _typed()
    data["analyses"][0]["statement"]["refs"][0]["raw_path"] = "series[7].summary"
    codes_found, _ = _review(_rendered(data))
    assert codes.STATEMENT_REF_NOT_FOUND in codes_found


def test_semantic_guard_sees_evidence_keys_never_tool_call_ids():
    draft = _rendered(_typed())
    guard = guard_draft(RUN, draft, INVOCATIONS)
    seen = for_semantic_guard(draft).model_dump_json() + guard.snapshot.model_dump_json()
    assert "call_m" not in seen and "call_l" not in seen
    assert {e.evidence_key for g in guard.snapshot.analyses for e in g.evidence} == {"e1", "e2"}


# --- SemanticGuard: typed against typed ---------------------------------------------------------------


def _findings(data: dict) -> list[str]:
    violations, findings = _review(_rendered(data))
    assert not violations, violations
    return [f"{f.item}: {f.check_id}: {f.detail}" if hasattr(f, "item") else f for f in findings]


def test_a_value_the_cited_ref_does_not_state_is_refuted():
    data = _typed()
    data["analyses"][0]["statement"]["quantities"][0]["value"] = 40.5
    assert any(f.startswith("analyses[0]: statement.field: quantities") for f in _findings(data))


def test_a_wrong_unit_aggregate_or_time_is_refuted():
    for change in ({"unit": "ms"}, {"aggregate": "median"}, {"at": "2026-11-29T10:30:00Z"}):
        data = _typed()
        data["conclusion"]["statement"]["quantities"][0].update(change)
        assert any(f.startswith("conclusion: statement.field") for f in _findings(data)), change


def test_a_value_rounded_to_the_stated_precision_holds():
    data = _typed()
    for statement in (data["analyses"][0]["statement"], data["conclusion"]["statement"]):
        statement["quantities"][0].update(value=97, precision=0)
    assert _findings(data) == []


def test_a_named_cause_must_state_a_cause():
    data = _typed()
    data["conclusion"]["kind"] = "cause_named"
    assert any("a named cause states its cause and effect" in f for f in _findings(data))


def test_an_action_item_must_be_a_catalogued_action():
    data = _typed()
    data["action_plan"][0]["statement"] = copy.deepcopy(PEAK)
    assert any(f.startswith("action_plan[0]: statement.field: an action item states no catalogued action")
               for f in _findings(data))


def test_a_line_of_another_service_is_refuted():
    data = _typed()
    data["analyses"][1]["statement"]["subject"] = "redis-cluster-7"
    assert any(f.startswith("analyses[1]: statement.field: subject") for f in _findings(data))


# --- EvidenceRepair: references only --------------------------------------------------------------------


def test_a_references_only_repair_keeps_what_the_draft_says():
    data = _typed()
    for statement in (data["analyses"][0]["statement"], data["conclusion"]["statement"]):
        statement["refs"][0]["tool_call_id"] = "call_mm"
    data["analyses"][0]["tool_call_ids"] = ["call_mm"]
    broken = _rendered(data)
    violation = GuardViolation(code=codes.TOOL_REF_NOT_FOUND, analysis_id="a1", tool_call_id="call_mm")
    repaired = render_draft(repair_references(broken, [violation], ["call_m", "call_l"]), ref_texts(INVOCATIONS), MODES)
    assert repair_changes_semantics(broken, repaired) is None
    assert _review(repaired) == ([], [])


def test_a_repair_that_changes_a_value_changes_the_draft():
    before = _rendered(_typed())
    data = _typed()
    data["analyses"][0]["statement"]["quantities"][0]["value"] = 40.5
    assert repair_changes_semantics(before, _rendered(data)) == "analyses[0]: the text changed"


# --- typed gaps ------------------------------------------------------------------------------------------


def test_a_typed_gap_is_written_by_attest_and_never_read_as_a_finding():
    data = _typed()
    data["limitation_statements"] = [{"subject": "payment-service", "signal": {"kind": "metric", "name": "jvm_gc_pause"}},
                                     {"subject": "payment-service", "signal": {"kind": "log", "name": "线程栈 数据库已宕机"}}]
    data["missing_context_statements"] = [{"subject": "payment-service", "signal": {"kind": "change", "name": ""}}]
    draft = _rendered(data)
    assert draft.limitations == ["未核实：payment-service 的 jvm_gc_pause", "未核实：payment-service 的日志"]
    assert draft.missing_context == ["缺少：payment-service 的变更记录"]
    assert _findings(data) == []


def test_a_gap_about_a_service_nobody_named_is_refuted():
    data = _typed()
    data["limitation_statements"] = [{"subject": "redis-cluster-7", "signal": {"kind": "log", "name": ""}}]
    assert any(f.startswith("limitation_statements[0]: statement.field: subject") for f in _findings(data))


def test_a_gap_states_no_observation():
    data = _typed()
    data["limitation_statements"] = [dict(copy.deepcopy(PEAK))]
    assert any("a gap states only a subject and a signal" in f for f in _findings(data))


# --- honest variations -------------------------------------------------------------------------------


def test_a_time_stated_with_a_local_offset_is_the_same_instant():
    data = _typed()
    for statement in (data["analyses"][0]["statement"], data["conclusion"]["statement"]):
        statement["quantities"][0]["at"] = "2026-11-29T18:32:00+08:00"  # 10:32 UTC, as Beijing time
    draft = _rendered(data)
    assert _findings(data) == []
    assert "2026-11-29T10:32:00Z" in draft.analyses[0].text  # shown as an answer time, in the configured zone


def test_a_search_that_found_nothing_is_a_typed_negative_observation():
    empty = logs_invocation(3, "call_none", [])
    data = _typed()
    data["analyses"].append({"analysis_id": "a3", "kind": "NEGATIVE_OBSERVATION", "tool_call_ids": ["call_none"],
                             "statement": {"subject": "payment-service", "signal": {"kind": "log", "name": ""},
                                           "state": "absent", "refs": [{"tool_call_id": "call_none", "raw_path": "summary"}]}})
    draft, _ = parse_draft_text(json.dumps(data, ensure_ascii=False))
    rendered = render_draft(draft, ref_texts([*INVOCATIONS, empty]), MODES)
    assert rendered.analyses[2].text == "payment-service 的日志未查到记录"
    guard = guard_draft(RUN, rendered, [*INVOCATIONS, empty])
    assert guard.passed, guard.violations
    assert ground_draft("payment-service CPU 为什么这么高？", for_semantic_guard(rendered), guard.snapshot) == []
