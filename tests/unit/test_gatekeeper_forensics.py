"""What the gatekeeper's audit says about a citation it refuses, and about fields it ignores.

- A binding (multi-agent) or a Draft tool call id (single-ReAct) naming an invocation of another
  run is reported as belonging to another run, not as absent, even when only the current run's
  rows were loaded: the check asks, once, which of the unknown ids exist elsewhere. The severity
  stays reject.
- Unknown fields of an executor_evidence_v2 output are named in `gatekeeper_result.warnings`
  (bounded) and change nothing else.
The store's two lookups are checked on SQLite and PostgreSQL.
"""

from __future__ import annotations

import copy
import json

from services.gatekeeper.engine import check_executor_output
from services.gatekeeper.evidence_guard import guard_draft
from shared.core import guard_violations as codes
from shared.executor_contract import MAX_UNKNOWN_FIELD_WARNINGS, unknown_field_warnings

# Fixtures: real SQLite and PostgreSQL stores, schema from the migrations.
from tests.unit.test_db_stores import (  # noqa: F401 - pytest fixtures, used by name
    engine,
    invocations,
    postgresql_engine,
    run_id,
    runs,
    sqlite_engine,
)
from tests.unit.test_evidence_guard import RUN as GUARD_RUN
from tests.unit.test_evidence_guard import concluded_draft, run_invocations
from tests.unit.test_gatekeeper_rules import RUN, binding, claim, output
from tests.unit.test_gatekeeper_rules import invocations as rule_invocations


def current_rows():
    """What the servicer loads: the current run's rows only."""
    return [row for row in rule_invocations() if row.run_id == RUN]


class Lookup:
    """A store lookup that records what it was asked."""

    def __init__(self, elsewhere):
        self.elsewhere = set(elsewhere)
        self.asked = []

    def __call__(self, ids):
        self.asked.append(list(ids))
        return [i for i in ids if i in self.elsewhere]


# --- multi-agent: bindings ------------------------------------------------------------------------


def test_another_runs_invocation_is_reported_as_such_when_only_the_current_run_is_loaded():
    lookup = Lookup({99})
    foreign = binding(tool_name="query_logs", source_invocation_id=99, raw_path="hits[0]", evidence_excerpt="upstream timeout")
    check = check_executor_output(RUN, output(claim(evidence_bindings=[foreign])), current_rows(), other_run_ids=lookup)
    result = check.gatekeeper_result
    assert lookup.asked == [[99]]  # once, and only for the id the run lacks
    assert "claims[1].evidence_bindings[0]: evidence.invocation_ref: invocation 99 belongs to another run" in result.errors
    assert not any("does not exist" in error for error in result.errors)
    assert (check.verdict_ceiling, result.severity) == ("REJECT", "reject")
    assert [(b.claim_id, b.outcome, b.rule) for b in result.checked_bindings if b.claim_id == "c1"] == [
        ("c1", "failed", "evidence.invocation_ref")]
    assert [e.claim_id for e in check.verified_evidence] == ["c0"]


def test_an_id_no_run_has_still_does_not_exist():
    lookup = Lookup(set())
    made_up = binding(source_invocation_id=4242)
    check = check_executor_output(RUN, output(claim(evidence_bindings=[made_up])), current_rows(), other_run_ids=lookup)
    assert lookup.asked == [[4242]]
    assert f"invocation 4242 does not exist in run {RUN!r}" in " ".join(check.gatekeeper_result.errors)
    assert check.verdict_ceiling == "REJECT"


def test_legacy_ids_are_asked_about_in_one_lookup():
    lookup = Lookup({99, 98})
    legacy = binding(source_invocation_id=..., source_invocation_ids=[12, 99, 98, 4242])
    check = check_executor_output(RUN, output(claim(evidence_bindings=[legacy])), current_rows(), other_run_ids=lookup)
    errors = " ".join(check.gatekeeper_result.errors)
    assert lookup.asked == [[98, 99, 4242]]
    assert "source_invocation_ids: evidence.invocation_ref: invocation 99 belongs to another run" in errors
    assert "source_invocation_ids: evidence.invocation_ref: invocation 98 belongs to another run" in errors
    assert "source_invocation_ids: evidence.invocation_ref: invocation 4242 does not exist" in errors
    assert check.verdict_ceiling == "REJECT"


def test_no_lookup_when_every_cited_id_is_the_runs_own():
    lookup = Lookup({99})
    check = check_executor_output(RUN, output(claim()), current_rows(), other_run_ids=lookup)
    assert lookup.asked == [] and check.verdict_ceiling == "PASS"


def test_a_failing_lookup_fails_closed():
    def broken(ids):
        raise RuntimeError("database went away")

    check = check_executor_output(RUN, output(claim(evidence_bindings=[binding(source_invocation_id=99)])), current_rows(),
                                  other_run_ids=broken)
    assert check.verdict_ceiling == "REJECT" and check.route == "PRE_VERIFICATION_FALLBACK"
    assert check.verified_evidence == []


# --- single-ReAct: tool call ids ------------------------------------------------------------------


def guard_current_rows():
    return [row for row in run_invocations() if row.run_id == GUARD_RUN]


def test_a_draft_citing_another_runs_tool_call_is_other_run_when_only_the_current_run_is_loaded():
    draft = concluded_draft()
    draft["analyses"][0]["tool_call_ids"] = ["call-logs", "call-foreign", "call-made-up"]
    lookup = Lookup({"call-foreign", "call-logs"})
    result = guard_draft(GUARD_RUN, draft, guard_current_rows(), other_run_tool_call_ids=lookup)
    assert lookup.asked == [["call-foreign", "call-made-up"]]  # call-logs is this run's own
    assert [(v.code, v.tool_call_id, v.detail) for v in result.violations] == [
        (codes.TOOL_REF_OTHER_RUN, "call-foreign", "the tool call belongs to another run"),
        (codes.TOOL_REF_NOT_FOUND, "call-made-up", "no invocation of this run has this tool_call_id"),
    ]
    assert not result.passed and result.snapshot.analyses == []


def test_a_no_conclusion_draft_excludes_another_runs_tool_call_as_other_run():
    draft = concluded_draft()
    draft["conclusion"] = None
    draft["analyses"][0]["tool_call_ids"] = ["call-foreign", "call-logs"]
    result = guard_draft(GUARD_RUN, draft, guard_current_rows(), other_run_tool_call_ids=Lookup({"call-foreign"}))
    assert result.passed and result.excluded_tool_call_ids == ["call-foreign"]
    assert [(v.code, v.tool_call_id) for v in result.violations] == [(codes.TOOL_REF_OTHER_RUN, "call-foreign")]
    assert "FOREIGN-MARKER" not in result.model_dump_json()


def test_the_guard_does_not_ask_when_every_tool_call_is_the_runs_own():
    lookup = Lookup({"call-logs"})
    result = guard_draft(GUARD_RUN, concluded_draft(), guard_current_rows(), other_run_tool_call_ids=lookup)
    assert result.passed and lookup.asked == []


def test_a_lookup_answer_outside_the_question_is_ignored():
    draft = concluded_draft()
    draft["analyses"][0]["tool_call_ids"] = ["call-made-up"]
    result = guard_draft(GUARD_RUN, draft, guard_current_rows(), other_run_tool_call_ids=lambda ids: ["call-logs", "x"])
    assert [v.code for v in result.violations] == [codes.TOOL_REF_NOT_FOUND]


# --- unknown fields -------------------------------------------------------------------------------


def _with_extras():
    extra = output(claim(), hypotheses=[{"text": "可能是 db-primary", "related_claim_ids": ["c1"], "likelihood": "high"}],
                   recommended_actions=["检查连接池", {"text": "扩容", "requires_human_confirmation": True, "owner": "sre"}],
                   missing_info=[{"text": "没有 trace", "tool_name": "query_logs", "critical": True}])
    extra["model_notes"] = "…"
    extra["claims"][1]["confidence"] = 0.9
    extra["claims"][1]["evidence_bindings"][0]["weight"] = 1
    return extra


def test_unknown_fields_are_warnings_and_change_nothing_else():
    extra = _with_extras()
    plain = copy.deepcopy(extra)
    del plain["model_notes"], plain["claims"][1]["confidence"], plain["claims"][1]["evidence_bindings"][0]["weight"]
    del plain["hypotheses"][0]["likelihood"], plain["recommended_actions"][1]["owner"], plain["missing_info"][0]["critical"]
    with_extras = check_executor_output(RUN, extra, current_rows())
    without = check_executor_output(RUN, plain, current_rows())
    # Named by position (the key's index in its object); the names only in the persisted values.
    assert with_extras.gatekeeper_result.warnings == [
        "output.keys[5]: unknown field ignored",
        "claims[1].keys[5]: unknown field ignored",
        "claims[1].evidence_bindings[0].keys[5]: unknown field ignored",
        "hypotheses[0].keys[2]: unknown field ignored",
        "recommended_actions[1].keys[2]: unknown field ignored",
        "missing_info[0].keys[2]: unknown field ignored",
    ]
    assert [(v.at, v.value) for v in with_extras.gatekeeper_result.executor_values] == [
        ("output.keys[5]", "'model_notes'"), ("claims[1].keys[5]", "'confidence'"),
        ("claims[1].evidence_bindings[0].keys[5]", "'weight'"), ("hypotheses[0].keys[2]", "'likelihood'"),
        ("recommended_actions[1].keys[2]", "'owner'"), ("missing_info[0].keys[2]", "'critical'"),
    ]
    assert (with_extras.gatekeeper_result.status, without.gatekeeper_result.status) == ("warn", "pass")
    ignored = {"gatekeeper_result": {"warnings", "status", "executor_values"}}
    assert with_extras.model_dump(exclude=ignored) == without.model_dump(exclude=ignored)


def test_unknown_fields_of_a_text_output_are_warnings_too():
    check = check_executor_output(RUN, json.dumps(_with_extras(), ensure_ascii=False), current_rows())
    assert "claims[1].keys[5]: unknown field ignored" in check.gatekeeper_result.warnings
    assert check.verdict_ceiling == "PASS"


def test_unknown_field_warnings_are_bounded():
    many = output(claim(**{f"field_{k}": k for k in range(40)}))
    many["claims"][1]["x" * 500] = 1
    warnings = check_executor_output(RUN, many, current_rows()).gatekeeper_result.warnings
    assert len(warnings) == MAX_UNKNOWN_FIELD_WARNINGS + 1
    assert warnings[-1] == f"{41 - MAX_UNKNOWN_FIELD_WARNINGS} further unknown field(s) ignored"
    assert all(len(w) < 120 for w in warnings)


def test_removed_fields_are_failures_not_also_unknown_field_warnings():
    check = check_executor_output(RUN, output(claim(), diagnosis_summary="x"), current_rows())
    assert "schema.executor_v2" in check.gatekeeper_result.failed_rules
    assert not any("diagnosis_summary" in w for w in check.gatekeeper_result.warnings)


def test_items_that_are_not_objects_are_left_to_the_schema_rules():
    raw = output(claim(), hypotheses=["plain text"], missing_info=[3])
    raw["claims"].append("not a claim")
    assert unknown_field_warnings(raw) == []


# --- the store's lookups --------------------------------------------------------------------------


def test_the_store_names_only_ids_that_exist_in_another_run(invocations, runs, run_id):  # noqa: F811
    other = runs.create_run(runs.run_session_id(run_id), "another question", "SINGLE_REACT")
    mine = invocations.begin(run_id, "call-shared", "query_logs", 0, {})
    theirs = invocations.begin(other, "call-shared", "query_logs", 0, {})
    only_theirs = invocations.begin(other, "call-theirs", "query_metrics", 0, {})
    assert invocations.other_run_invocation_ids(run_id, [mine, theirs, only_theirs, 999_999, 2**40, -1]) == {theirs, only_theirs}
    assert invocations.other_run_invocation_ids(other, [mine, theirs]) == {mine}
    assert invocations.other_run_invocation_ids(run_id, []) == set()
    assert invocations.other_run_tool_call_ids(run_id, ["call-shared", "call-theirs", "call-none", "x" * 300]) == {
        "call-shared", "call-theirs"}
    assert invocations.other_run_tool_call_ids(other, ["call-theirs"]) == set()
    many = [f"call-{k}" for k in range(1200)] + ["call-theirs"]  # more than one statement's worth
    assert invocations.other_run_tool_call_ids(run_id, many) == {"call-theirs"}
    assert invocations.other_run_invocation_ids(run_id, list(range(1, 1300))) >= {theirs, only_theirs}


# --- an abandoned attempt's invocations -------------------------------------------------------------


def test_an_abandoned_invocation_is_refused_like_one_the_run_does_not_own():
    lost = [row.model_copy(update={"abandoned": True}) for row in current_rows() if row.invocation_id == 12]
    rows = [row for row in current_rows() if row.invocation_id != 12] + lost
    check = check_executor_output(RUN, output(claim()), rows)
    errors = " ".join(check.gatekeeper_result.errors)
    assert "evidence.invocation_ref: invocation 12 belongs to an abandoned attempt" in errors
    assert check.verdict_ceiling == "REJECT" and [e.claim_id for e in check.verified_evidence] == ["c0"]
    # Nor is it a candidate for a backfilled id.
    unnamed = binding(source_invocation_id=...)
    backfill = check_executor_output(RUN, output(claim(evidence_bindings=[unnamed])), rows)
    assert "no source_invocation_id and 0 current-run query_metrics invocations" in " ".join(
        backfill.gatekeeper_result.errors)


def test_an_abandoned_id_the_servicer_did_not_load_is_named_by_its_lookup():
    abandoned, elsewhere = Lookup({50}), Lookup({99})
    cited = [binding(source_invocation_id=50), binding(tool_name="query_logs", source_invocation_id=99,
                                                       raw_path="hits[0]", evidence_excerpt="upstream timeout")]
    check = check_executor_output(RUN, output(claim(evidence_bindings=cited)), current_rows(),
                                  other_run_ids=elsewhere, abandoned_ids=abandoned)
    errors = " ".join(check.gatekeeper_result.errors)
    assert abandoned.asked == [[50, 99]] and elsewhere.asked == [[99]]
    assert "invocation 50 belongs to an abandoned attempt" in errors and "invocation 99 belongs to another run" in errors
    assert [r for r in check.gatekeeper_result.failed_rules] == ["evidence.invocation_ref"]


def test_the_guard_resolves_a_reused_tool_call_id_to_the_retry_and_never_to_the_lost_attempt():
    lost = [row.model_copy(update={"abandoned": True, "invocation_id": 40 + row.invocation_id,
                                   "agent_result": (row.agent_result or "").replace("db-primary", "LOST-MARKER")})
            for row in run_invocations() if row.tool_call_id == "call-logs" and row.run_id == GUARD_RUN]
    result = guard_draft(GUARD_RUN, concluded_draft(), run_invocations() + lost)
    assert result.passed, result.violations
    assert "LOST-MARKER" not in result.snapshot.model_dump_json()
    retried_away = [row for row in run_invocations() if row.tool_call_id != "call-logs"]  # no other run has it either
    refused = guard_draft(GUARD_RUN, concluded_draft(), retried_away + lost)
    assert not refused.passed
    assert (codes.TOOL_REF_NOT_FOUND, "call-logs") in {(v.code, v.tool_call_id) for v in refused.violations}
