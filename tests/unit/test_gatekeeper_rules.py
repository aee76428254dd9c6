"""The gatekeeper rules table, one case per row, plus pass, projection and catalog cases.

Every case carries a control claim `c0` that always passes, so each row also shows that a failing
binding or claim is kept out of the verified projection while valid material still reaches it.
"""

import copy
import json

import pytest

from services.gatekeeper.engine import check_executor_output
from services.gatekeeper.rule_catalog import (
    RuleCatalogError,
    load_rule_catalog,
    parse_rule_catalog,
)
from shared.core.contracts import ToolInvocation

RUN = "run-1"
METRIC_TEXT = "2026-11-29T10:35:00Z payment-service cpu_usage=92% (5m avg)"
LOG_TEXT = "10:36:02 ERROR payment-service upstream timeout calling db-primary after 3000ms"


def invocation(invocation_id, tool, *, run=RUN, lifecycle="READY", status="EVIDENCE_FOUND", refs="default"):
    if refs == "default":
        refs = {
            "query_metrics": [{"raw_path": "series[0].points[41]", "text": METRIC_TEXT}],
            "query_logs": [{"raw_path": "hits[0]", "text": LOG_TEXT}],
            "query_changes": [{"raw_path": "rows[0]", "text": "no rows"}],
        }[tool]
    return ToolInvocation(
        invocation_id=invocation_id,
        run_id=run,
        tool_name=tool,
        lifecycle=lifecycle,
        evidence_status=status,
        retrieval_details=None if refs is None else {"evidence_refs": refs},
    )


def invocations():
    return [
        invocation(12, "query_metrics"),
        invocation(13, "query_logs"),
        invocation(99, "query_logs", run="run-0"),  # another run's row, loaded by id
    ]


def binding(**overrides):
    base = {
        "source_type": "tool",
        "tool_name": "query_metrics",
        "source_invocation_id": 12,
        "raw_path": "series[0].points[41]",
        "evidence_excerpt": "cpu_usage=92%",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def claim(claim_id="c1", **overrides):
    base = {
        "claim_id": claim_id,
        "claim_type": "symptom",
        "claim_text": "payment-service CPU 92%",
        "support_level": "direct",
        "evidence_bindings": [binding()],
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


CONTROL = claim(
    "c0",
    claim_type="observation",
    claim_text="payment-service 出现 upstream timeout",
    evidence_bindings=[
        binding(tool_name="query_logs", source_invocation_id=13, raw_path="hits[0]", evidence_excerpt="upstream timeout")
    ],
)


def output(*claims, **extra):
    return {
        "answer_version": "executor_evidence_v2",
        "claims": [copy.deepcopy(CONTROL), *claims],
        "hypotheses": [],
        "recommended_actions": [],
        "missing_info": [],
        **extra,
    }


# (case, executor output, invocations or None for the default, failed rule, severity)
ROWS = [
    ("removed field diagnosis_summary", output(diagnosis_summary="x"), None, "schema.executor_v2", "low_confid"),
    ("removed field user_facing_answer", output(user_facing_answer="x"), None, "schema.executor_v2", "low_confid"),
    ("claim without claim_id", output(claim(claim_id=...)), None, "schema.executor_v2", "low_confid"),
    ("claim with blank claim_text", output(claim(claim_text="  ")), None, "schema.executor_v2", "low_confid"),
    ("unknown claim_type", output(claim(claim_type="fact")), None, "schema.executor_v2", "low_confid"),
    ("unknown support_level", output(claim(support_level="strong")), None, "schema.executor_v2", "low_confid"),
    ("claim without evidence_bindings", output(claim(evidence_bindings=[])), None, "schema.executor_v2", "low_confid"),
    ("binding without tool_name", output(claim(evidence_bindings=[binding(tool_name=...)])), None, "schema.executor_v2", "low_confid"),
    ("binding with blank excerpt", output(claim(evidence_bindings=[binding(evidence_excerpt=" ")])), None, "schema.executor_v2", "low_confid"),
    (
        "no source_invocation_id, zero candidates",
        output(claim(evidence_bindings=[binding(tool_name="query_changes", source_invocation_id=...)])),
        None,
        "evidence.invocation_ref",
        "low_confid",
    ),
    (
        "no source_invocation_id, several candidates",
        output(claim(evidence_bindings=[binding(source_invocation_id=...)])),
        invocations() + [invocation(14, "query_metrics")],
        "evidence.invocation_ref",
        "low_confid",
    ),
    ("invocation id absent from the run", output(claim(evidence_bindings=[binding(source_invocation_id=4242)])), None, "evidence.invocation_ref", "reject"),
    ("invocation owned by another run", output(claim(evidence_bindings=[binding(tool_name="query_logs", source_invocation_id=99, raw_path="hits[0]", evidence_excerpt="upstream timeout")])), None, "evidence.invocation_ref", "reject"),
    ("tool_name differs from the invocation", output(claim(evidence_bindings=[binding(tool_name="query_logs")])), None, "evidence.invocation_ref", "reject"),
    ("invocation not READY", output(claim()), [invocation(12, "query_metrics", lifecycle="PROJECTING"), invocation(13, "query_logs")], "evidence.invocation_state", "reject"),
    ("invocation lifecycle ERROR", output(claim()), [invocation(12, "query_metrics", lifecycle="ERROR"), invocation(13, "query_logs")], "evidence.invocation_state", "reject"),
    ("invocation evidence_status ERROR", output(claim()), [invocation(12, "query_metrics", status="ERROR"), invocation(13, "query_logs")], "evidence.invocation_state", "reject"),
    ("symptom citing a NO_EVIDENCE invocation", output(claim()), [invocation(12, "query_metrics", status="NO_EVIDENCE"), invocation(13, "query_logs")], "evidence.polarity", "reject"),
    ("no raw_path", output(claim(evidence_bindings=[binding(raw_path=...)])), None, "evidence.raw_path", "low_confid"),
    ("invocation without evidence_refs", output(claim()), [invocation(12, "query_metrics", refs=None), invocation(13, "query_logs")], "evidence.raw_path", "low_confid"),
    ("invocation with empty evidence_refs", output(claim()), [invocation(12, "query_metrics", refs=[]), invocation(13, "query_logs")], "evidence.raw_path", "low_confid"),
    ("raw_path not among the evidence_refs", output(claim(evidence_bindings=[binding(raw_path="series[0].points[42]")])), None, "evidence.raw_path", "reject"),
    ("excerpt shorter than the minimum", output(claim(evidence_bindings=[binding(evidence_excerpt="92%")])), None, "evidence.excerpt_too_short", "low_confid"),
    ("excerpt not supported by the ref text", output(claim(evidence_bindings=[binding(evidence_excerpt="cpu_usage=97%")])), None, "evidence.excerpt_mismatch", "reject"),
    ("excerpt 92% changed to 29%", output(claim(evidence_bindings=[binding(evidence_excerpt="cpu_usage=29%")])), None, "evidence.excerpt_mismatch", "reject"),
]


@pytest.mark.parametrize(("case", "executor_output", "rows", "rule", "severity"), ROWS, ids=[r[0] for r in ROWS])
def test_rules_table(case, executor_output, rows, rule, severity):
    check = check_executor_output(RUN, executor_output, invocations() if rows is None else rows)
    result = check.gatekeeper_result
    assert check.parse_status == "valid"
    assert result.status == "fail"
    assert rule in result.failed_rules
    assert result.severity == severity
    assert check.verdict_ceiling == {"low_confid": "LOW_CONFID", "reject": "REJECT"}[severity]
    assert check.route == ("PRE_VERIFICATION_FALLBACK" if severity == "reject" else "VERIFIER")
    # Only the control claim survives: the failing material never reaches the verifier.
    assert [c.claim_id for c in check.verified_executor_output.claims] == ["c0"]
    assert {e.claim_id for e in check.verified_evidence} == {"c0"}
    assert result.rule_set_version and result.rules


def test_valid_output_passes():
    check = check_executor_output(RUN, output(claim()), invocations())
    result = check.gatekeeper_result
    assert (result.status, result.severity, result.failed_rules, result.errors) == ("pass", "none", [], [])
    assert check.verdict_ceiling == "PASS"
    assert check.route == "VERIFIER"
    assert [b.outcome for b in result.checked_bindings] == ["passed", "passed"]
    assert result.rule_set_version == load_rule_catalog().rule_set_version
    assert {r.id for r in result.rules} >= {"schema.executor_v2", "evidence.invocation_ref", "evidence.excerpt_mismatch"}
    evidence = {e.claim_id: e for e in check.verified_evidence}
    assert evidence["c1"].model_dump() == {
        "claim_id": "c1",
        "source_invocation_id": 12,
        "tool_name": "query_metrics",
        "raw_path": "series[0].points[41]",
        "matched_text": METRIC_TEXT,
        "facts": None,  # this made-up invocation's projection states no point at that path
    }


def test_unique_candidate_is_backfilled_with_a_warning():
    check = check_executor_output(RUN, output(claim(evidence_bindings=[binding(source_invocation_id=...)])), invocations())
    result = check.gatekeeper_result
    # DESIGN §3 "Compatibility backfill": one candidate, so backfilled with a warning and nothing
    # else (no schema failure besides).
    assert result.status == "warn" and result.failed_rules == [] and result.errors == []
    assert result.severity == "none"
    assert check.verdict_ceiling == "PASS"
    assert "backfilled" in result.warnings[0]
    assert result.checked_bindings[1].outcome == "backfilled"
    c1 = check.verified_executor_output.claims[1]
    assert c1.evidence_bindings[0].source_invocation_id == 12


def test_legacy_single_id_is_the_singular_id_without_warning():
    legacy = binding(source_invocation_id=..., source_invocation_ids=[12])
    check = check_executor_output(RUN, output(claim(evidence_bindings=[legacy])), invocations())
    assert check.gatekeeper_result.status == "pass"
    assert check.gatekeeper_result.warnings == []
    assert check.verified_executor_output.claims[1].evidence_bindings[0].source_invocation_id == 12


def test_legacy_ids_naming_another_run_are_rejected():
    legacy = binding(source_invocation_ids=[12, 99])
    check = check_executor_output(RUN, output(claim(evidence_bindings=[legacy])), invocations())
    assert "evidence.invocation_ref" in check.gatekeeper_result.failed_rules
    assert check.verdict_ceiling == "REJECT"


def test_citing_another_runs_invocation_is_never_pass():
    foreign = [invocation(12, "query_metrics", run="run-0"), invocation(13, "query_logs")]
    check = check_executor_output(RUN, output(claim()), foreign)
    assert check.verdict_ceiling != "PASS"
    assert check.verdict_ceiling == "REJECT"
    assert "belongs to another run" in " ".join(check.gatekeeper_result.errors)


def test_raw_path_is_never_backfilled():
    bare = binding(source_invocation_id=..., raw_path=...)  # the invocation would be backfillable
    check = check_executor_output(RUN, output(claim(evidence_bindings=[bare])), invocations())
    assert "evidence.raw_path" in check.gatekeeper_result.failed_rules
    assert check.verdict_ceiling == "LOW_CONFID"
    assert all(b.raw_path for c in check.verified_executor_output.claims for b in c.evidence_bindings)


def test_negative_observation_may_cite_no_evidence():
    rows = [
        invocation(12, "query_metrics"),
        invocation(13, "query_logs"),
        invocation(20, "query_changes", status="NO_EVIDENCE"),
    ]
    negative = claim(
        claim_type="negative_observation",
        claim_text="近 1 小时没有变更",
        evidence_bindings=[binding(tool_name="query_changes", source_invocation_id=20, raw_path="rows[0]", evidence_excerpt="no rows")],
    )
    check = check_executor_output(RUN, output(negative), rows)
    assert check.gatekeeper_result.status == "pass"


def test_mixed_bindings_keep_only_the_passed_ones():
    mixed = claim(evidence_bindings=[binding(evidence_excerpt="cpu_usage=29%"), binding()])
    check = check_executor_output(RUN, output(mixed), invocations())
    c1 = check.verified_executor_output.claims[1]
    assert len(c1.evidence_bindings) == 1
    assert [e.claim_id for e in check.verified_evidence].count("c1") == 1
    assert check.verdict_ceiling == "REJECT"  # the fabricated excerpt still decides the ceiling


def test_a_dropped_claim_cannot_hide_a_fabricated_citation():
    hiding = claim(claim_type="fact", evidence_bindings=[binding(source_invocation_id=99, tool_name="query_logs")])
    check = check_executor_output(RUN, output(hiding), invocations())
    assert check.gatekeeper_result.severity == "reject"


def test_no_claims_means_nothing_to_verify():
    check = check_executor_output(RUN, {**output(), "claims": []}, invocations())
    assert check.verdict_ceiling == "PASS"
    assert check.route == "PRE_VERIFICATION_FALLBACK"


def test_low_confid_without_any_surviving_claim_routes_to_fallback():
    only_bad = {**output(), "claims": [claim(evidence_bindings=[binding(raw_path=...)])]}
    check = check_executor_output(RUN, only_bad, invocations())
    assert check.verdict_ceiling == "LOW_CONFID"
    assert check.route == "PRE_VERIFICATION_FALLBACK"


def test_text_input_is_parsed_and_invalid_text_has_no_verdict():
    assert check_executor_output(RUN, json.dumps(output(claim())), invocations()).verdict_ceiling == "PASS"
    for text, expected in [("not json at all", "missing"), ("[1]", "malformed"), ('{"claims": []}', "malformed")]:
        check = check_executor_output(RUN, text, invocations())
        assert check.parse_status == expected
        assert check.route == "PRE_VERIFICATION_FALLBACK"
        assert check.verdict_ceiling is None and check.gatekeeper_result is None
        assert check.verified_evidence == []
        assert check.rule_set_version


@pytest.mark.parametrize(
    "garbage",
    [
        {"answer_version": "executor_evidence_v2", "claims": [None, 1, "x", [], {}, {"evidence_bindings": [None, 5]}]},
        {"answer_version": "executor_evidence_v2", "claims": [claim(evidence_bindings=[binding(source_invocation_id="12")])]},
        {"answer_version": "executor_evidence_v2", "claims": [claim(evidence_bindings=[binding(source_invocation_id=True)])]},
        {"answer_version": "executor_evidence_v2", "claims": [claim(evidence_bindings=[binding(raw_path=["a"])])]},
        {"answer_version": "executor_evidence_v2", "claims": [claim(claim_id={"a": 1})], "hypotheses": [None, {"text": 3}]},
        {"answer_version": "executor_evidence_v2", "claims": [claim()] * 500},
        [1, 2, 3],
        None,
    ],
)
def test_garbage_is_a_result_not_an_exception(garbage):
    check = check_executor_output(RUN, garbage, invocations())
    if check.gatekeeper_result is not None:
        assert check.gatekeeper_result.status == "fail"
        assert check.verdict_ceiling != "PASS"


def test_matched_text_is_bounded_around_the_excerpt():
    long_text = "x" * 10000 + " cpu_usage=92% " + "y" * 10000
    rows = [invocation(12, "query_metrics", refs=[{"raw_path": "series[0].points[41]", "text": long_text}]), invocation(13, "query_logs")]
    check = check_executor_output(RUN, output(claim()), rows)
    matched = check.verified_evidence[1].matched_text
    assert len(matched) <= 2000 and "cpu_usage=92%" in matched


def test_hypotheses_are_carried_as_possibilities():
    out = output(claim())
    out["hypotheses"] = ["db-primary 连接池过小", {"text": "GC 频繁", "related_claim_ids": ["c1", "nope"]}]
    check = check_executor_output(RUN, out, invocations())
    hypotheses = check.verified_executor_output.hypotheses
    assert [h.text for h in hypotheses] == ["db-primary 连接池过小", "GC 频繁"]
    assert hypotheses[1].related_claim_ids == ["c1"]


# --- the rule catalog --------------------------------------------------------------------------


def catalog_data():
    with open("services/gatekeeper/rule_catalog.json", encoding="utf-8") as handle:
        return json.load(handle)


def test_catalog_reports_enabled_rule_metadata():
    catalog = load_rule_catalog()
    rule = catalog.rule("evidence.excerpt_too_short")
    assert rule.parameters["min_excerpt_chars"] == 4
    assert all(r.description and r.default_severity in ("low_confid", "reject") for r in catalog.enabled_rules())


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["rules"][1].update(enabled=False),  # a fidelity rule cannot be disabled
        lambda d: d["rules"][1].update(default_severity="low_confid"),  # nor softened
        lambda d: d["rules"].pop(),  # nor omitted
        lambda d: d["rules"].append({"id": "evidence.magic", "default_severity": "none"}),
        lambda d: d["rules"][5]["parameters"].update(min_excerpt_chars=0),
        lambda d: d["rules"][5]["parameters"].update(min_excerpt_chars="4"),
        lambda d: d["rules"][0]["parameters"].update(hook={"python": "import os"}),
        lambda d: d.update(rule_set_version=""),
    ],
)
def test_catalog_cannot_weaken_the_gatekeeper(mutate):
    data = catalog_data()
    mutate(data)
    with pytest.raises(RuleCatalogError):
        parse_rule_catalog(data)


def test_catalog_parameters_are_honoured_and_the_optional_rule_can_be_disabled():
    short = output(claim(evidence_bindings=[binding(evidence_excerpt="92%")]))
    data = catalog_data()
    data["rules"][5]["parameters"]["min_excerpt_chars"] = 3
    assert check_executor_output(RUN, short, invocations(), parse_rule_catalog(data)).verdict_ceiling == "PASS"
    data = catalog_data()
    data["rules"][5]["enabled"] = False
    catalog = parse_rule_catalog(data)
    check = check_executor_output(RUN, short, invocations(), catalog)
    assert check.verdict_ceiling == "PASS"
    assert "evidence.excerpt_too_short" not in {r.id for r in check.gatekeeper_result.rules}


# --- the contract's required lists and binding fields ---------------------------------------------------


@pytest.mark.parametrize("missing", ["hypotheses", "recommended_actions", "missing_info"])
def test_an_output_without_a_required_list_is_low_confid(missing):
    raw = output(claim())
    del raw[missing]
    check = check_executor_output(RUN, raw, invocations())
    assert check.parse_status == "valid"
    assert check.gatekeeper_result.failed_rules == ["schema.executor_v2"]
    assert check.verdict_ceiling == "LOW_CONFID" and check.route == "VERIFIER"
    assert any(f"output without required field '{missing}'" in e for e in check.gatekeeper_result.errors)


@pytest.mark.parametrize(("overrides", "named"), [
    ({"source_type": ...}, "binding without source_type"),
    ({"source_type": "  "}, "binding without source_type"),
])
def test_a_binding_without_source_type_is_low_confid_but_its_evidence_is_still_verified(overrides, named):
    check = check_executor_output(RUN, output(claim(evidence_bindings=[binding(**overrides)])), invocations())
    assert check.gatekeeper_result.failed_rules == ["schema.executor_v2"]
    assert check.verdict_ceiling == "LOW_CONFID"
    assert any(named in e for e in check.gatekeeper_result.errors)
    assert [c.claim_id for c in check.verified_executor_output.claims] == ["c0", "c1"]


def test_a_binding_with_the_plural_or_the_singular_id_is_complete():
    for ids in ({"source_invocation_ids": [12]}, {"source_invocation_id": 12, "source_invocation_ids": [12]}, {}):
        check = check_executor_output(RUN, output(claim(evidence_bindings=[binding(**ids)])), invocations())
        assert check.gatekeeper_result.failed_rules == [] and check.verdict_ceiling == "PASS", ids
